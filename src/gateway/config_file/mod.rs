//! `--config FILE` and `fencegate check-config FILE`: the configuration
//! file merged with the command line and the environment into one
//! [`Config`].
//!
//! The command line's definition (`cli.rs`, clap) is the one place that
//! knows every option's name, default, environment variable and parser; the
//! file's keys are its option names with `_` for `-`. A value from the file
//! is checked by the option's own parser, then handed to clap as if it had
//! been typed before the real arguments, unless a flag or an environment
//! variable gives that option: so a flag wins over its environment
//! variable, which wins over the file, which wins over the default, and no
//! second list of options exists to drift. A route's options are the top
//! level's with the route's own appended last (the last of an option given
//! twice wins), parsed by the same clap command into the route's [`Config`].
//!
//! ```
//! use fencegate::gateway::config_file::{load, Origin};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let file = dir.path().join("fencegate.toml");
//! std::fs::write(&file, "upstream_timeout = 5\nscope = \"prefix:2\"\n").unwrap();
//! let loaded = load(["fencegate", "--config", file.to_str().unwrap(), "--scope", "path"]).unwrap();
//! assert_eq!(loaded.config.upstream_timeout.as_secs(), 5);
//! assert_eq!(loaded.config.scope.to_string(), "path"); // the flag wins
//! assert_eq!(loaded.effective.origin("scope"), Some(Origin::Flag));
//! assert_eq!(loaded.effective.origin("upstream_timeout"), Some(Origin::File));
//! ```
//!
//! The folder, in the order a load runs: this file reads the command line
//! and the file and assembles the [`Config`] and its routes; `reader.rs`
//! reads the file's tables, checking each value with its option's own
//! parser; `effective.rs` says what was loaded and from where (for
//! `check-config` and the admin plane); `secrets.rs` masks what may be
//! secret in a value or a parser's message; `warnings.rs` finds what is
//! legal but probably not meant.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, FromArgMatches};
use toml::de::DeTable;

use super::cli::Cli;
use super::config::{Config, RouteConfig, TableSource};
use super::custody::files::line_of;

mod effective;
mod reader;
mod secrets;
#[cfg(test)]
mod tests;
mod warnings;

pub use effective::{Effective, Origin, Shown};
pub(crate) use secrets::mask;

use effective::{origin_of, resolved, shown_custody, shown_options, shown_value, toml_string};
pub use reader::{Problem, ROUTE_OPTIONS};

use reader::{first_line, given_by_user, Reader};
use warnings::{overlapping_upstreams, unreachable_routes};

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The command line itself is wrong.
    #[error(transparent)]
    Usage(#[from] clap::Error),
    /// The file is: every problem found, one per line (`FILE:LINE: what`).
    #[error("{}", Problems(path, problems))]
    File {
        /// The configuration file.
        path: PathBuf,
        /// Everything wrong with it, in the file's order.
        problems: Vec<Problem>,
    },
}

struct Problems<'a>(&'a Path, &'a [Problem]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.1.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            match problem.line {
                Some(line) => write!(f, "{}:{line}: {}", self.0.display(), problem.what)?,
                None => write!(f, "{}: {}", self.0.display(), problem.what)?,
            }
        }
        Ok(())
    }
}

/// A configuration, loaded: what the gateway runs with, the top level's
/// command line (the log format is not part of a [`Config`]), and every
/// value with where it came from.
#[derive(Debug)]
pub struct Loaded {
    /// The top level's options, parsed.
    pub cli: Cli,
    /// What the gateway runs with.
    pub config: Config,
    /// Every value and its origin, secrets masked, for `check-config` and
    /// the admin plane's `GET /config`.
    pub effective: Effective,
}

/// Reads the command line `args` (the program name first; `serve` as the
/// first argument is optional), its environment variables and, with
/// `--config`, the file, into one configuration.
pub fn load<I, T>(args: I) -> Result<Loaded, LoadError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if args.get(1).is_some_and(|a| a == "serve") {
        args.remove(1);
    }
    let command = Cli::command();
    let given = command.clone().try_get_matches_from(&args)?;
    let Some(path) = given.get_one::<PathBuf>("config").cloned() else {
        let cli = Cli::from_arg_matches(&given)?;
        let config = cli.config();
        let effective = Effective {
            options: resolved(shown_options(&command, &given, &given, &[]), &config),
            custody: shown_custody(&config),
            ..Effective::default()
        };
        return Ok(Loaded {
            cli,
            config,
            effective,
        });
    };
    let fail = |problems: Vec<Problem>| LoadError::File {
        path: path.clone(),
        problems,
    };
    let text = crate::client_tls::read_text_bounded(&path).map_err(|e| {
        fail(vec![Problem {
            line: None,
            what: format!("cannot read: {e}"),
        }])
    })?;
    let reader = Reader {
        path: &path,
        text: &text,
        command: &command,
        given: &given,
    };
    let (root, errors) = DeTable::parse_recoverable(&text);
    let mut problems: Vec<Problem> = errors
        .iter()
        .map(|e| Problem {
            line: e.span().map(|span| line_of(&text, span.start)),
            what: e.message().trim_end().to_owned(),
        })
        .collect();
    let file = reader.read_top(root.get_ref(), &mut problems);
    let mut routes = Vec::new();
    if let Some(value) = root.get_ref().get("route") {
        match value.get_ref().as_array() {
            Some(tables) => {
                let mut names: Vec<&str> = Vec::new();
                for table in tables.iter() {
                    // A duplicate name is a problem of its own, whatever
                    // else is wrong with the route.
                    let name = table
                        .get_ref()
                        .as_table()
                        .and_then(|t| t.get("name"))
                        .and_then(|n| n.get_ref().as_str());
                    if let Some(name) = name {
                        if names.contains(&name) {
                            problems.push(reader.problem(
                                table.span().start,
                                format!("a second route named {name:?}"),
                            ));
                        }
                        names.push(name);
                    }
                    if let Some(route) = reader.read_route(table, &mut problems) {
                        routes.push(route);
                    }
                }
            }
            None => problems.push(reader.problem(
                value.span().start,
                "route must be [[route]] tables".to_owned(),
            )),
        }
    }
    if !problems.is_empty() {
        problems.sort_by_key(|p| p.line);
        return Err(fail(problems));
    }
    // The file's values go first: the real arguments come after, and the
    // last of an option given twice wins.
    let mut top_args: Vec<OsString> = vec![args[0].clone()];
    top_args.extend(file.args.iter().cloned());
    top_args.extend(args[1..].iter().cloned());
    let parse = |argv: &[OsString], line: Option<usize>| {
        command
            .clone()
            .try_get_matches_from(argv)
            .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)))
            .map_err(|e| Problem {
                line,
                what: first_line(&e),
            })
    };
    let (cli, matches) = parse(&top_args, None).map_err(|p| fail(vec![p]))?;
    let mut config = cli.config();
    config.file = Some(path.clone());
    let from_file = |key: &str| file.keys.iter().any(|k| k == key) && !given_by_user(&given, key);
    if config.upstream_credentials.is_none() && file.credentials_table {
        config.upstream_credentials = Some(TableSource::Config {
            file: path.clone(),
            route: None,
        });
    }
    if config.identities.is_none() && file.identity_tables {
        config.identities = Some(TableSource::Config {
            file: path.clone(),
            route: None,
        });
    }
    let mut effective = Effective {
        file: Some(path.clone()),
        options: resolved(
            shown_options(&command, &given, &matches, &file.keys),
            &config,
        ),
        custody: shown_custody(&config),
        ..Effective::default()
    };
    for route in &routes {
        let mut argv = top_args.clone();
        argv.extend(route.args.iter().cloned());
        let (route_cli, route_matches) =
            parse(&argv, Some(route.line)).map_err(|p| fail(vec![p]))?;
        let mut options = route_cli.config();
        options.routes.clear();
        options.file = Some(path.clone());
        options.upstream_credentials = if route.credentials_table {
            Some(TableSource::Config {
                file: path.clone(),
                route: Some(route.name.clone()),
            })
        } else if route.keys.iter().any(|k| k == "upstream_credentials") {
            options.upstream_credentials
        } else {
            config.upstream_credentials.clone()
        };
        // Identities are the gateway's; a route uses them when it holds
        // the store's credentials (custody), and is open otherwise.
        if options.upstream_credentials.is_some() {
            options.identities = config.identities.clone();
        } else {
            options.identities = None;
            if !route.keys.iter().any(|k| k == "anonymous_clients") {
                options.anonymous_clients = super::config::Anonymous::Off;
            }
        }
        let mut shown = vec![
            Shown {
                key: "name".into(),
                value: toml_string(&route.name),
                origin: Origin::Route,
            },
            Shown {
                key: "match".into(),
                value: route.matches_toml(),
                origin: Origin::Route,
            },
            Shown {
                key: "fence_namespace".into(),
                value: toml_string(&route.namespace),
                origin: Origin::Route,
            },
        ];
        for key in ROUTE_OPTIONS {
            let Some(arg) = command.get_arguments().find(|a| a.get_id() == *key) else {
                continue;
            };
            let origin = if route.keys.iter().any(|k| k == key) {
                Origin::Route
            } else {
                origin_of(&given, key, from_file(key))
            };
            if let Some(value) = shown_value(arg, &route_matches) {
                shown.push(Shown {
                    key: (*key).to_owned(),
                    value,
                    origin,
                });
            }
        }
        if route.credentials_table {
            shown.push(Shown {
                key: "upstream_credentials".into(),
                value: toml_string("the route's upstream_credentials table"),
                origin: Origin::Route,
            });
        }
        effective
            .routes
            .push((route.name.clone(), resolved(shown, &options)));
        config.routes.push(RouteConfig {
            name: route.name.clone(),
            matches: route.matches.clone(),
            fence_namespace: route.namespace.clone(),
            identities: route.identities.clone(),
            options: Box::new(options),
        });
    }
    effective.warnings = unreachable_routes(&config.routes);
    effective
        .warnings
        .extend(overlapping_upstreams(&config.routes));
    Ok(Loaded {
        cli,
        config,
        effective,
    })
}

/// Why `fencegate check-config` refuses a configuration.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The command line or the file does not load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// It loads, but a gateway would not start with it (a certificate, a
    /// custody table, routes' options together): each problem on a line
    /// of its own (`FILE: what`).
    #[error("{}", Unstartable(path, problems))]
    Start {
        /// The configuration file.
        path: PathBuf,
        /// Everything that would stop a start.
        problems: Vec<String>,
    },
}

struct Unstartable<'a>(&'a Path, &'a [String]);

impl fmt::Display for Unstartable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.1.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}: {problem}", self.0.display())?;
        }
        Ok(())
    }
}

/// `fencegate check-config FILE [OPTIONS]` without its printing: `args`
/// as [`load`] reads them (the program name, `--config FILE`, the
/// options), loaded, then checked as a start would check them
/// ([`Gateway::check`](super::Gateway::check): files read, URLs parsed,
/// nothing bound or connected to). On success, `check-config` prints the
/// [`Effective`] configuration, its warnings last; otherwise the error,
/// whose `Display` is what it prints on stderr. Never panics, whatever
/// the file holds (the `config_file` fuzz target's oracle, which also
/// checks that no secret of the file is in either).
///
/// ```
/// use fencegate::gateway::config_file::{check, CheckError};
///
/// let dir = tempfile::tempdir().unwrap();
/// let file = dir.path().join("fencegate.toml");
/// std::fs::write(&file, "token_issuer = \"redis://:hunter2@127.0.0.1:6379/lock\"\n").unwrap();
/// let Err(error @ CheckError::Start { .. }) = check(["fencegate", "--config", file.to_str().unwrap()]) else {
///     panic!("a password in the issuer's URL is refused");
/// };
/// assert!(!error.to_string().contains("hunter2"));
/// ```
pub fn check<I, T>(args: I) -> Result<Loaded, CheckError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let loaded = load(args)?;
    let problems = super::Gateway::check(&loaded.config);
    if problems.is_empty() {
        return Ok(loaded);
    }
    Err(CheckError::Start {
        path: loaded.config.file.clone().unwrap_or_default(),
        problems,
    })
}
