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

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{Arg, ArgMatches, Command, CommandFactory, FromArgMatches};
use serde::de::IntoDeserializer;
use serde::Deserialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::cli::Cli;
use super::config::{Config, RouteConfig, RouteMatch, TableSource};
use super::custody::files::{self, line_of};
use super::upstream::Upstream;
use crate::custody::StoreKind;

/// The options a `[[route]]` may set: those that shape a request's path
/// through the gateway. The listener, TLS, state, etcd, client limits and
/// admin options are the gateway's.
pub const ROUTE_OPTIONS: &[&str] = &[
    "upstream",
    "store",
    "scope",
    "token_header",
    "flat_keys",
    "conditional_writes",
    "chain_observe",
    "conditional_probe",
    "chain_cache_entries",
    "enforce",
    "allow_unfenced_writes",
    "upstream_timeout",
    "upstream_idle_timeout",
    "upstream_ca",
    "upstream_credentials",
    "anonymous_clients",
    "s3_domain",
    "token_issuer",
    "token_issuer_ca",
    "token_issuer_cert",
    "token_issuer_key",
    "token_issuer_password_file",
];

/// A route's keys that are not options.
const ROUTE_KEYS: &[&str] = &["name", "match", "fence_namespace", "identities"];

/// Where a value of the effective configuration came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The option's default.
    Default,
    /// The configuration file's top level.
    File,
    /// The option's `FENCEGATE_*` environment variable.
    Env,
    /// The command line.
    Flag,
    /// The route's own table.
    Route,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::Default => "default",
            Origin::File => "file",
            Origin::Env => "env",
            Origin::Flag => "flag",
            Origin::Route => "route",
        })
    }
}

/// One thing wrong with a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The line it is on, where it has one.
    pub line: Option<usize>,
    /// What is wrong.
    pub what: String,
}

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

/// One value of the effective configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The option's file key.
    pub key: String,
    /// Its value as TOML, secrets masked.
    pub value: String,
    /// Where it came from.
    pub origin: Origin,
}

/// The effective configuration, as shown to an operator.
#[derive(Debug, Clone, Default)]
pub struct Effective {
    /// The configuration file, if one.
    pub file: Option<PathBuf>,
    /// The top level's options.
    pub options: Vec<Shown>,
    /// Each route: its name and its values (its match first).
    pub routes: Vec<(String, Vec<Shown>)>,
    /// Where the identities and the store's credentials are read from.
    pub custody: Vec<Shown>,
    /// What is legal but probably not meant (a route no request reaches).
    pub warnings: Vec<String>,
}

impl Effective {
    /// Where the top-level option `key` came from.
    pub fn origin(&self, key: &str) -> Option<Origin> {
        self.options
            .iter()
            .find(|shown| shown.key == key)
            .map(|shown| shown.origin)
    }

    /// As JSON, for the admin plane.
    pub fn to_json(&self) -> serde_json::Value {
        let values = |list: &[Shown]| -> serde_json::Value {
            list.iter()
                .map(|shown| {
                    (
                        shown.key.clone(),
                        serde_json::json!({"value": shown.value, "source": shown.origin.to_string()}),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        serde_json::json!({
            "file": self.file.as_ref().map(|f| f.display().to_string()),
            "options": values(&self.options),
            "custody": values(&self.custody),
            "routes": self.routes.iter().map(|(name, list)| serde_json::json!({"name": name, "options": values(list)})).collect::<Vec<_>>(),
            "warnings": self.warnings,
        })
    }
}

impl fmt::Display for Effective {
    /// TOML, each value with its origin as a comment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            writeln!(f, "# the effective configuration of {}", file.display())?;
        }
        let width = |list: &[Shown]| {
            list.iter()
                .map(|s| s.key.len() + s.value.len() + 3)
                .max()
                .unwrap_or(0)
        };
        let write = |f: &mut fmt::Formatter<'_>, list: &[Shown], width: usize| -> fmt::Result {
            for shown in list {
                let line = format!("{} = {}", shown.key, shown.value);
                // Padded by hand: `{:<width$}` panics past a width of
                // 65,535, and a value may be that long.
                let pad = width.saturating_sub(line.chars().count());
                writeln!(
                    f,
                    "{line}{:pad$}  # {}",
                    "",
                    shown.origin,
                    pad = pad.min(256)
                )?;
            }
            Ok(())
        };
        write(f, &self.options, width(&self.options))?;
        write(f, &self.custody, width(&self.custody))?;
        for (_, list) in &self.routes {
            writeln!(f, "\n[[route]]")?;
            write(f, list, width(list))?;
        }
        for warning in &self.warnings {
            writeln!(f, "# warning: {warning}")?;
        }
        Ok(())
    }
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

/// What the top level of the file holds.
#[derive(Debug, Default)]
struct FileTop {
    /// `--option=value` for each option the file gives and no flag or
    /// environment variable does.
    args: Vec<OsString>,
    /// Every option key the file gives.
    keys: Vec<String>,
    credentials_table: bool,
    identity_tables: bool,
}

/// One `[[route]]` as the file gives it.
#[derive(Debug)]
struct FileRoute {
    name: String,
    line: usize,
    matches: RouteMatch,
    namespace: String,
    identities: Option<Vec<String>>,
    args: Vec<OsString>,
    keys: Vec<String>,
    credentials_table: bool,
}

impl FileRoute {
    fn matches_toml(&self) -> String {
        let mut parts = Vec::new();
        if let Some(host) = &self.matches.host {
            parts.push(format!("host = {}", toml_string(host)));
        }
        if let Some(prefix) = &self.matches.path_prefix {
            parts.push(format!("path_prefix = {}", toml_string(prefix)));
        }
        format!("{{ {} }}", parts.join(", "))
    }
}

struct Reader<'a> {
    path: &'a Path,
    text: &'a str,
    command: &'a Command,
    given: &'a ArgMatches,
}

impl Reader<'_> {
    fn problem(&self, offset: usize, what: String) -> Problem {
        Problem {
            line: Some(line_of(self.text, offset)),
            what,
        }
    }

    fn read_top(&self, root: &DeTable<'_>, problems: &mut Vec<Problem>) -> FileTop {
        let mut top = FileTop::default();
        for (key, value) in root.iter() {
            let name = key.get_ref().as_ref();
            let at = key.span().start;
            match name {
                "route" => {}
                "identity" => {
                    top.identity_tables = true;
                    if root.get("identities").is_some() {
                        problems.push(self.problem(
                            at,
                            "[[identity]] tables and identities = FILE: one or the other".into(),
                        ));
                    }
                    let source = TableSource::Config {
                        file: self.path.to_owned(),
                        route: None,
                    };
                    for error in files::identities_and_problems(&source).1 {
                        problems.push(Problem {
                            line: error.line().or(Some(line_of(self.text, at))),
                            what: error.detail().to_owned(),
                        });
                    }
                }
                "upstream_credentials" if value.get_ref().as_table().is_some() => {
                    top.credentials_table = true;
                    top.keys.push(name.to_owned());
                    let source = TableSource::Config {
                        file: self.path.to_owned(),
                        route: None,
                    };
                    if let Err(error) = files::read_upstream(&source) {
                        problems.push(Problem {
                            line: error.line().or(Some(line_of(self.text, at))),
                            what: error.detail().to_owned(),
                        });
                    }
                }
                "config" | "help" | "version" => problems.push(self.problem(
                    at,
                    format!("{name} cannot be set in the configuration file"),
                )),
                _ => match self.option_arg(name, value, &mut top.args, problems) {
                    Some(()) => top.keys.push(name.to_owned()),
                    None => continue,
                },
            }
        }
        // A flag or an environment variable wins: drop the file's value.
        top.args.retain(|arg| {
            let key = arg
                .to_str()
                .and_then(|a| a.strip_prefix("--"))
                .and_then(|a| a.split('=').next())
                .map(|a| a.replace('-', "_"));
            !key.is_some_and(|key| given_by_user(self.given, &key))
        });
        top
    }

    /// Checks the option `name`'s `value` with the option's own parser and
    /// appends it to `args`; `None` (and a problem) if it is not one.
    fn option_arg(
        &self,
        name: &str,
        value: &Spanned<DeValue<'_>>,
        args: &mut Vec<OsString>,
        problems: &mut Vec<Problem>,
    ) -> Option<()> {
        let at = value.span().start;
        let Some(arg) = self
            .command
            .get_arguments()
            .find(|a| a.get_id() == name && a.get_long().is_some())
        else {
            problems.push(self.problem(at, unknown_key(name)));
            return None;
        };
        let raw = match as_text(value, arg) {
            Ok(raw) => raw,
            Err(what) => {
                problems.push(self.problem(at, format!("{name}: {what}")));
                return None;
            }
        };
        let raw = self.relative_path(arg, raw);
        // Each value of a list on its own: joined, the next value's `://`
        // would read as the user-info of the one before an `@`.
        let ambiguous = match arg.get_value_delimiter() {
            Some(delimiter) => raw.split(delimiter).find(|v| ambiguous_user_info(v)),
            None => Some(raw.as_str()).filter(|v| ambiguous_user_info(v)),
        };
        if let Some(value) = ambiguous {
            problems.push(self.problem(
                at,
                format!(
                    "{name}: the user-info of {:?} holds a '/', '?' or '#', which ends it for one reader and not for another: percent-encode the password (%2F, %3F, %23)",
                    shorten(&mask(value))
                ),
            ));
            return None;
        }
        let long = arg.get_long().unwrap_or(name);
        // The option alone, with its own parser (clap keeps the parser
        // itself private): what the command line would say of the value.
        let alone = Command::new("fencegate").arg(
            Arg::new(arg.get_id().clone())
                .index(1)
                .allow_hyphen_values(true)
                .action(clap::ArgAction::Set)
                .value_delimiter(arg.get_value_delimiter())
                .value_parser(arg.get_value_parser().clone()),
        );
        if let Err(error) =
            alone.try_get_matches_from([OsString::from("fencegate"), OsString::from(&raw)])
        {
            // What may be secret in a URL is masked here too, and a long
            // value cut.
            let shown = shorten(&mask(&raw));
            let what = match masked_message(&first_line(&error), &raw, arg.get_value_delimiter()) {
                Some(message) => {
                    // "invalid value 'V' for '[name]': why" -> "why".
                    let why = message
                        .split_once("]': ")
                        .map_or(message.as_str(), |(_, why)| why);
                    format!("{name}: invalid value {shown:?}: {why}")
                }
                None => format!("{name}: invalid value {shown:?}"),
            };
            problems.push(self.problem(at, what));
            return None;
        }
        args.push(format!("--{long}={raw}").into());
        Some(())
    }

    /// A path in the file is relative to the file's folder, as the
    /// custody tables' secret files are.
    fn relative_path(&self, arg: &Arg, raw: String) -> String {
        let is_path = arg
            .get_value_names()
            .is_some_and(|names| names.iter().any(|n| matches!(n.as_str(), "FILE" | "DIR")))
            || (arg.get_id() == "access_log" && raw != "-");
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty());
        match dir {
            Some(dir) if is_path && Path::new(&raw).is_relative() => {
                dir.join(&raw).display().to_string()
            }
            _ => raw,
        }
    }

    fn read_route(
        &self,
        value: &Spanned<DeValue<'_>>,
        problems: &mut Vec<Problem>,
    ) -> Option<FileRoute> {
        let at = value.span().start;
        let before = problems.len();
        let Some(table) = value.get_ref().as_table() else {
            problems.push(self.problem(at, "route must be [[route]] tables".into()));
            return None;
        };
        let name = match table.get("name").map(|n| (n.span(), n.get_ref().as_str())) {
            Some((_, Some(name))) if is_name(name) => name.to_owned(),
            Some((span, _)) => {
                problems.push(self.problem(
                    span.start,
                    "route name: 1 to 64 of a-z, A-Z, 0-9, '-', '_', '.'".into(),
                ));
                String::new()
            }
            None => {
                problems.push(self.problem(at, "a [[route]] needs a name".into()));
                String::new()
            }
        };
        let mut route = FileRoute {
            namespace: name.clone(),
            name,
            line: line_of(self.text, at),
            matches: RouteMatch::default(),
            identities: None,
            args: Vec::new(),
            keys: Vec::new(),
            credentials_table: false,
        };
        for (key, value) in table.iter() {
            let key_name = key.get_ref().as_ref();
            let at = key.span().start;
            match key_name {
                "name" => {}
                "match" => match self.deserialize::<MatchTable>(value) {
                    Ok(table) => match table.check() {
                        Ok(matches) => route.matches = matches,
                        Err(what) => problems.push(self.problem(at, format!("match: {what}"))),
                    },
                    Err(what) => problems.push(self.problem(at, format!("match: {what}"))),
                },
                "fence_namespace" => match value.get_ref().as_str() {
                    Some(ns) if ns.is_empty() || is_name(ns) => route.namespace = ns.to_owned(),
                    _ => problems.push(self.problem(
                        at,
                        "fence_namespace: \"\" or 1 to 64 of a-z, A-Z, 0-9, '-', '_', '.'".into(),
                    )),
                },
                "identities" => match self.deserialize::<Vec<String>>(value) {
                    Ok(names) => route.identities = Some(names),
                    Err(what) => problems.push(self.problem(at, format!("identities: {what}"))),
                },
                "upstream_credentials" if value.get_ref().as_table().is_some() => {
                    route.credentials_table = true;
                    route.keys.push(key_name.to_owned());
                    if !route.name.is_empty() {
                        let source = TableSource::Config {
                            file: self.path.to_owned(),
                            route: Some(route.name.clone()),
                        };
                        if let Err(error) = files::read_upstream(&source) {
                            problems.push(Problem {
                                line: error.line().or(Some(line_of(self.text, at))),
                                what: error.detail().to_owned(),
                            });
                        }
                    }
                }
                _ if ROUTE_OPTIONS.contains(&key_name) => {
                    if self
                        .option_arg(key_name, value, &mut route.args, problems)
                        .is_some()
                    {
                        route.keys.push(key_name.to_owned());
                    }
                }
                _ if self.command.get_arguments().any(|a| a.get_id() == key_name) => {
                    problems.push(self.problem(
                        at,
                        format!(
                            "{key_name} is the gateway's, not a route's: set it at the top level"
                        ),
                    ))
                }
                _ => problems.push(self.problem(
                    at,
                    format!(
                        "unknown route key {key_name:?} (a route has {}, and the options {})",
                        ROUTE_KEYS.join(", "),
                        ROUTE_OPTIONS.join(", ")
                    ),
                )),
            }
        }
        (problems.len() == before).then_some(route)
    }

    fn deserialize<'i, T: Deserialize<'i>>(
        &self,
        value: &Spanned<DeValue<'i>>,
    ) -> Result<T, String> {
        T::deserialize(value.clone().into_deserializer())
            .map_err(|e| e.message().trim_end().to_owned())
    }
}

/// `match = { host = ..., path_prefix = ... }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchTable {
    host: Option<String>,
    path_prefix: Option<String>,
}

impl MatchTable {
    fn check(self) -> Result<RouteMatch, String> {
        if self.host.is_none() && self.path_prefix.is_none() {
            return Err("give a host, a path_prefix or both".into());
        }
        if let Some(host) = &self.host {
            let name = host.strip_prefix("*.").unwrap_or(host);
            let valid = !name.is_empty()
                && name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                })
                && !name.starts_with('.')
                && !name.ends_with('.');
            if !valid {
                return Err(format!(
                    "host {host:?}: a lowercase host name without a port, or *. and one"
                ));
            }
        }
        if let Some(prefix) = &self.path_prefix {
            if !prefix.starts_with('/') || prefix.contains(['?', '#', '%']) {
                return Err(format!(
                    "path_prefix {prefix:?}: starts with / (a normalised path's start, no ?, # or %)"
                ));
            }
            // Every segment a `/` ends is whole: an empty, `.` or `..` one
            // is in no normalised path, so the route could never match.
            let whole = prefix.rsplit_once('/').map_or("", |(whole, _)| whole);
            if whole
                .split('/')
                .skip(1)
                .any(|s| matches!(s, "" | "." | ".."))
            {
                return Err(format!(
                    "path_prefix {prefix:?}: an empty, '.' or '..' segment is in no normalised path: no request could match it"
                ));
            }
        }
        Ok(RouteMatch {
            host: self.host,
            path_prefix: self.path_prefix,
        })
    }
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn unknown_key(name: &str) -> String {
    let known: Vec<String> = Cli::command()
        .get_arguments()
        .filter_map(|a| a.get_long().map(|l| l.replace('-', "_")))
        .collect();
    let close = known
        .iter()
        .filter(|k| edit_distance(k, name) <= 2)
        .min_by_key(|k| edit_distance(k, name));
    match close {
        Some(close) => format!("unknown option {name:?} (did you mean {close}?)"),
        None => format!("unknown option {name:?}"),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(current + 1);
            previous = current;
        }
    }
    row[b.len()]
}

/// A TOML value as the text an option's parser reads.
fn as_text(value: &Spanned<DeValue<'_>>, arg: &Arg) -> Result<String, String> {
    let value = toml::Value::deserialize(value.clone().into_deserializer())
        .map_err(|e| e.message().trim_end().to_owned())?;
    let scalar = |value: &toml::Value| -> Result<String, String> {
        match value {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(x) => Ok(x.to_string()),
            toml::Value::Boolean(b) => Ok(b.to_string()),
            other => Err(format!(
                "expected a string, a number or a boolean, got {}",
                other.type_str()
            )),
        }
    };
    match (&value, arg.get_value_delimiter()) {
        (toml::Value::Array(items), Some(delimiter)) => Ok(items
            .iter()
            .map(scalar)
            .collect::<Result<Vec<_>, _>>()?
            .join(&delimiter.to_string())),
        (toml::Value::Array(_), None) => Err("expected one value, got an array".into()),
        (value, _) => scalar(value),
    }
}

/// Whether the user gave option `key` on the command line or in its
/// environment variable (which win over the file).
fn given_by_user(given: &ArgMatches, key: &str) -> bool {
    matches!(
        given
            .try_get_raw(key)
            .ok()
            .flatten()
            .and(given.value_source(key)),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

fn origin_of(given: &ArgMatches, key: &str, in_file: bool) -> Origin {
    match given.value_source(key) {
        Some(ValueSource::CommandLine) => Origin::Flag,
        Some(ValueSource::EnvVariable) => Origin::Env,
        _ if in_file => Origin::File,
        _ => Origin::Default,
    }
}

/// Every option with a value in `matches`, and where it came from.
fn shown_options(
    command: &Command,
    given: &ArgMatches,
    matches: &ArgMatches,
    file_keys: &[String],
) -> Vec<Shown> {
    command
        .get_arguments()
        .filter(|arg| arg.get_long().is_some())
        .filter(|arg| !matches!(arg.get_id().as_str(), "config" | "help" | "version"))
        .filter_map(|arg| {
            let key = arg.get_id().as_str();
            let value = shown_value(arg, matches)?;
            let in_file = file_keys.iter().any(|k| k == key);
            Some(Shown {
                key: key.to_owned(),
                value,
                origin: origin_of(given, key, in_file),
            })
        })
        .collect()
}

/// The values `--store` implies, as they are in force: flat keys, and the
/// dialect `conditional_writes = "on"` stands for.
fn resolved(mut shown: Vec<Shown>, config: &Config) -> Vec<Shown> {
    let store_origin = shown.iter().find(|s| s.key == "store").map(|s| s.origin);
    for value in &mut shown {
        match value.key.as_str() {
            "flat_keys" if config.flat_keys && value.value == "false" => {
                value.value = "true".into();
                value.origin = store_origin.unwrap_or(value.origin);
            }
            "conditional_writes" => {
                value.value = toml_string(&config.conditional_writes.to_string())
            }
            _ => {}
        }
    }
    shown
}

/// Where the custody tables are read from, if anywhere.
fn shown_custody(config: &Config) -> Vec<Shown> {
    let mut shown = Vec::new();
    for (key, source) in [
        ("upstream_credentials", &config.upstream_credentials),
        ("identities", &config.identities),
    ] {
        let (value, origin) = match source {
            Some(TableSource::File(path)) => {
                (toml_string(&path.display().to_string()), Origin::Flag)
            }
            Some(TableSource::Config { .. }) => (
                format!(
                    "the {} table(s) of the file",
                    if key == "identities" {
                        "[[identity]]"
                    } else {
                        "[upstream_credentials]"
                    }
                ),
                Origin::File,
            ),
            None => continue,
        };
        shown.push(Shown {
            key: key.to_owned(),
            value,
            origin,
        });
    }
    shown
}

/// The option's value in `matches`, as TOML, with what may be secret in it
/// masked (a URL's user-info and query).
fn shown_value(arg: &Arg, matches: &ArgMatches) -> Option<String> {
    let raw = matches.get_raw(arg.get_id().as_str())?;
    let values: Vec<String> = raw.map(|v| mask(&v.to_string_lossy())).collect();
    match values.as_slice() {
        [] => None,
        [one] if arg.get_value_delimiter().is_none() => Some(scalar_toml(one)),
        many => Some(format!(
            "[{}]",
            many.iter()
                .map(|v| toml_string(v))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn scalar_toml(value: &str) -> String {
    if value == "true" || value == "false" || value.parse::<f64>().is_ok_and(f64::is_finite) {
        value.to_owned()
    } else {
        toml_string(value)
    }
}

fn toml_string(value: &str) -> String {
    // TOML's basic strings escape as JSON's do, for what a configuration
    // holds.
    serde_json::Value::from(value).to_string()
}

/// `scheme://user:password@host/path?query` with `***` for the user-info
/// and the query: a URL in a configuration may carry either secret.
pub(crate) fn mask(value: &str) -> String {
    let Some(scheme_end) = value.find("://") else {
        return value.to_owned();
    };
    let (scheme, rest) = value.split_at(scheme_end + 3);
    // Everything up to the last `@` may be user-info: a password with an
    // unencoded `/`, `?` or `#` ends the authority early for a strict
    // reader, and must be masked all the same.
    let (masked, rest) = match rest.rfind('@') {
        Some(at) => ("***@", &rest[at + 1..]),
        None => ("", rest),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = format!("{masked}{authority}");
    let tail = match tail.find('?') {
        Some(q) => format!("{}?***", &tail[..q]),
        None => tail.to_owned(),
    };
    format!("{scheme}{authority}{tail}")
}

/// A parser's `message` about the option value `raw` (which `delimiter`,
/// if any, splits into the values the parser reads one by one), with each
/// of those values masked and cut wherever the message quotes it: as is,
/// or escaped as Rust's `{:?}` escapes it (a parser that quotes a value
/// with a control character or a quote in it escapes them, and the
/// spelling in the file is then nowhere in the message). `None` if a
/// user-info or query of them is in the message still, however spelled:
/// the message is then not shown at all.
fn masked_message(message: &str, raw: &str, delimiter: Option<char>) -> Option<String> {
    let mut values = vec![raw];
    if let Some(delimiter) = delimiter {
        values.extend(raw.split(delimiter));
    }
    // The longest first: the pieces are inside the whole.
    values.sort_by_key(|value| std::cmp::Reverse(value.len()));
    let escaped = |text: &str| {
        let quoted = format!("{text:?}");
        quoted[1..quoted.len() - 1].to_owned()
    };
    let mut message = message.to_owned();
    for value in &values {
        let masked = mask(value);
        let shown = shorten(&masked);
        if value.is_empty() || shown == *value {
            continue;
        }
        message = message
            .replace(&format!("{value:?}"), &format!("{shown:?}"))
            .replace(*value, &shown)
            .replace(&escaped(value), &escaped(&shown))
            .replace(&masked, &shown);
    }
    let secret_left = values
        .iter()
        .flat_map(|value| secret_parts(value))
        .any(|part| {
            !part.is_empty() && (message.contains(part) || message.contains(&escaped(part)))
        });
    (!secret_left).then_some(message)
}

/// What [`mask`] hides of `value`: its user-info (and the password in
/// it) and its query.
fn secret_parts(value: &str) -> Vec<&str> {
    let Some((_, rest)) = value.split_once("://") else {
        return Vec::new();
    };
    let mut parts = Vec::new();
    let rest = match rest.rfind('@') {
        Some(at) => {
            let user_info = &rest[..at];
            parts.push(user_info);
            if let Some((_, password)) = user_info.split_once(':') {
                parts.push(password);
            }
            &rest[at + 1..]
        }
        None => rest,
    };
    let tail = &rest[rest.find(['/', '?', '#']).unwrap_or(rest.len())..];
    if let Some((_, query)) = tail.split_once('?') {
        parts.push(query);
    }
    parts
}

/// Whether `value` is a URL whose user-info holds a `/`, `?` or `#`: one
/// reader ends the authority there, another at the last `@`, so the host
/// (and what is secret) cannot be read one way only.
fn ambiguous_user_info(value: &str) -> bool {
    let Some((_, rest)) = value.split_once("://") else {
        return false;
    };
    rest.rfind('@')
        .is_some_and(|at| rest[..at].contains(['/', '?', '#']))
}

/// `value` cut to 120 characters for a message: a value may be long.
fn shorten(value: &str) -> String {
    match value.char_indices().nth(120) {
        Some((at, _)) => format!("{}... ({} bytes)", &value[..at], value.len()),
        None => value.to_owned(),
    }
}

/// Routes that no request can reach: one with the same match as a route
/// before it.
fn unreachable_routes(routes: &[RouteConfig]) -> Vec<String> {
    let mut warnings = Vec::new();
    for (i, route) in routes.iter().enumerate() {
        if let Some(earlier) = routes[..i].iter().find(|r| r.matches == route.matches) {
            warnings.push(format!(
                "route {:?} has the match of route {:?} before it: no request reaches it",
                route.name, earlier.name
            ));
        }
    }
    warnings
}

/// Routes of different fence namespaces whose upstreams are one store
/// (SPEC "Configuration file and routes": a warning, not an error): an
/// object that requests reach through both is fenced twice, under two
/// keys, and a stale token on one route is not refused by the other's
/// fence. One store: the same scheme, host (lowercased, without a
/// trailing dot) and port, and base paths one of which is the other or
/// under it (`http://h/a` and `http://h/a/b`); every route without an
/// upstream shares the embedded backend. Not warned: two such routes that
/// the router alone keeps apart, with the same base path and the same
/// host match (each request goes to one of them, and its path names the
/// same object under either), unless one is S3, whose virtual-hosted and
/// path-style requests name one object by two paths.
fn overlapping_upstreams(routes: &[RouteConfig]) -> Vec<String> {
    let mut warnings = Vec::new();
    for (i, a) in routes.iter().enumerate() {
        for b in &routes[i + 1..] {
            if a.fence_namespace == b.fence_namespace {
                continue;
            }
            let (upstream_a, upstream_b) = (&a.options.upstream, &b.options.upstream);
            let same_base = match (upstream_a, upstream_b) {
                (None, None) => true,
                (Some(x), Some(y)) if one_store(x, y) => x.base() == y.base(),
                _ => continue,
            };
            let s3 = a.options.store == StoreKind::S3 || b.options.store == StoreKind::S3;
            if same_base && a.matches.host == b.matches.host && !s3 {
                continue;
            }
            let upstreams = match (upstream_a, upstream_b) {
                (Some(x), Some(y)) if x.base() != y.base() => format!(
                    "upstreams {} and {}",
                    mask(&x.to_string()),
                    mask(&y.to_string())
                ),
                (Some(x), _) => format!("upstream {}", mask(&x.to_string())),
                _ => "the embedded backend".to_owned(),
            };
            warnings.push(format!(
                "routes {:?} and {:?} reach one store ({upstreams}) under different fence namespaces ({:?} and {:?}): an object written through both is fenced twice, under two keys (give them one fence_namespace if they reach the same objects)",
                a.name, b.name, a.fence_namespace, b.fence_namespace
            ));
        }
    }
    warnings
}

/// Whether two upstreams are one store: the same scheme, host and port,
/// and base paths one of which is the other or under it.
fn one_store(x: &Upstream, y: &Upstream) -> bool {
    let host = |u: &Upstream| u.host().trim_end_matches('.').to_ascii_lowercase();
    let under = |inner: &str, outer: &str| {
        inner == outer
            || inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    x.is_tls() == y.is_tls()
        && x.port() == y.port()
        && host(x) == host(y)
        && (under(x.base(), y.base()) || under(y.base(), x.base()))
}

fn first_line(error: &clap::Error) -> String {
    let text = error.to_string();
    let line = text.lines().next().unwrap_or("invalid value");
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fencegate.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn load_file(path: &Path, extra: &[&str]) -> Result<Loaded, LoadError> {
        let mut args = vec!["fencegate", "--config", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        load(args)
    }

    #[test]
    fn flags_win_over_the_file_which_wins_over_defaults() {
        let (_dir, path) = write(
            "token_issuer = \"redis://:issuer-secret-7@127.0.0.1:9000/lock?x=1\"\nscope = \"prefix:2\"\nflat_keys = true\netcd_endpoints = [\"http://a:2379\", \"http://b:2379\"]\n",
        );
        let loaded = load_file(&path, &["--scope", "path"]).unwrap();
        assert_eq!(loaded.config.scope.to_string(), "path");
        assert!(loaded.config.flat_keys);
        assert_eq!(loaded.config.etcd.endpoints.len(), 2);
        assert_eq!(loaded.effective.origin("scope"), Some(Origin::Flag));
        assert_eq!(loaded.effective.origin("flat_keys"), Some(Origin::File));
        assert_eq!(loaded.effective.origin("listen"), Some(Origin::Default));
        let shown = loaded.effective.to_string();
        assert!(shown.contains("***@127.0.0.1:9000/lock?***"), "{shown}");
        // A password of its own: "pw" was also in some temporary folders'
        // names, which the first line shows.
        assert!(!shown.contains("issuer-secret-7"), "{shown}");
    }

    #[test]
    fn every_problem_is_reported_with_its_line() {
        let (_dir, path) = write(
            "upstream_timout = 5\nscope = \"prefix:0\"\nmax_connections = \"many\"\n\n[[route]]\nname = \"a\"\nmatch = { path_prefix = \"nope\" }\n\n[[route]]\nstore = \"gcs\"\nlisten = \"127.0.0.1:1\"\n",
        );
        let Err(LoadError::File { problems, .. }) = load_file(&path, &[]) else {
            panic!("loaded");
        };
        let lines: Vec<_> = problems.iter().map(|p| p.line).collect();
        assert_eq!(
            lines,
            [
                Some(1),
                Some(2),
                Some(3),
                Some(7),
                Some(9),
                Some(10),
                Some(11)
            ],
            "{problems:?}"
        );
        assert!(problems[0].what.contains("did you mean upstream_timeout"));
    }

    #[test]
    fn routes_inherit_the_top_level_and_override_it() {
        let (_dir, path) = write(
            "store = \"s3\"\nupstream_timeout = 7\n\n[[route]]\nname = \"docs\"\nmatch = { path_prefix = \"/dav/\" }\nstore = \"webdav\"\nupstream = \"http://127.0.0.1:1\"\nenforce = \"report\"\n\n[[route]]\nname = \"same\"\nmatch = { path_prefix = \"/dav/\" }\n",
        );
        let loaded = load_file(&path, &[]).unwrap();
        let routes = &loaded.config.routes;
        assert_eq!(routes.len(), 2);
        assert_eq!(routes[0].options.store.to_string(), "webdav");
        assert!(!routes[0].options.flat_keys);
        assert_eq!(routes[0].options.upstream_timeout.as_secs(), 7);
        assert_eq!(routes[0].fence_namespace, "docs");
        assert_eq!(routes[1].options.store.to_string(), "s3");
        assert!(routes[1].options.flat_keys);
        assert_eq!(loaded.effective.warnings.len(), 1);
    }

    /// The overlap warnings of a file of `[[route]]` tables, each given
    /// as `(name, its lines)`, with a prefix of its own unless its lines
    /// give a match.
    fn overlap_warnings(routes: &[(&str, &str)]) -> Vec<String> {
        let mut text = String::from("state = \"memory\"\n");
        for (name, lines) in routes {
            text.push_str(&format!("[[route]]\nname = \"{name}\"\n{lines}\n"));
            if !lines.contains("match =") {
                text.push_str(&format!("match = {{ path_prefix = \"/{name}/\" }}\n"));
            }
        }
        let (_dir, path) = write(&text);
        let loaded = load_file(&path, &[]).unwrap();
        loaded
            .effective
            .warnings
            .into_iter()
            .filter(|w| w.contains("fenced twice"))
            .collect()
    }

    #[test]
    fn routes_of_one_store_under_two_namespaces_are_warned_about() {
        let host = "match = { host = \"a.example\" }\n";
        // One store whatever the spelling: the scheme's port, the host's
        // case and trailing dot, a base path under the other's.
        for (a, b) in [
            ("http://h:80/x", "http://H./x/y"),
            ("https://h/a", "https://h:443/a/b/"),
            ("http://10.0.0.5:8080", "http://10.0.0.5:8080/dav"),
        ] {
            let warnings = overlap_warnings(&[
                ("a", &format!("upstream = \"{a}\"")),
                ("b", &format!("upstream = \"{b}\"")),
            ]);
            assert_eq!(warnings.len(), 1, "{a} {b}: {warnings:?}");
            assert!(warnings[0].contains("\"a\" and \"b\""), "{}", warnings[0]);
        }
        // The same base path: apart by the router alone, unless the host
        // matches differ, or the store is S3.
        let same = "upstream = \"http://h:9000/base\"";
        assert_eq!(
            overlap_warnings(&[("a", same), ("b", same)]),
            Vec::<String>::new()
        );
        let hosted = format!("{same}\n{host}");
        assert_eq!(overlap_warnings(&[("a", same), ("b", &hosted)]).len(), 1);
        let s3 = format!("{same}\nstore = \"s3\"");
        assert_eq!(overlap_warnings(&[("a", &s3), ("b", &s3)]).len(), 1);
        // Every route without an upstream is the embedded backend's.
        let warnings = overlap_warnings(&[("a", host), ("b", "")]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("the embedded backend"), "{warnings:?}");
    }

    #[test]
    fn routes_of_one_namespace_or_of_different_stores_are_not_warned_about() {
        let one_namespace = "upstream = \"http://h/x\"\nfence_namespace = \"shared\"";
        let under = "upstream = \"http://h/x/y\"\nfence_namespace = \"shared\"";
        assert_eq!(
            overlap_warnings(&[("a", one_namespace), ("b", under)]),
            Vec::<String>::new()
        );
        for (a, b) in [
            ("http://h/x", "http://h/xy"),
            ("http://h/x", "https://h/x"),
            ("http://h:8080", "http://h:8081"),
            ("http://h", "http://g"),
        ] {
            let warnings = overlap_warnings(&[
                ("a", &format!("upstream = \"{a}\"\nstore = \"s3\"")),
                ("b", &format!("upstream = \"{b}\"\nstore = \"s3\"")),
            ]);
            assert_eq!(warnings, Vec::<String>::new(), "{a} {b}");
        }
        // One route on the embedded backend, one on an upstream.
        assert_eq!(
            overlap_warnings(&[
                ("a", "upstream = \"http://h\""),
                ("b", "match = { host = \"b\" }")
            ]),
            Vec::<String>::new()
        );
    }

    /// A list's values are read one by one for an ambiguous user-info: a
    /// password in a later etcd endpoint was refused as ambiguous, with
    /// the list shown as one masked URL, when only the joined text was.
    #[test]
    fn each_value_of_a_list_is_checked_for_ambiguous_user_info_alone() {
        let (_dir, path) = write(
            "etcd_endpoints = [\"http://127.0.0.1:2379\", \"http://root:etcd-pw-2@127.0.0.1:2380\"]\n",
        );
        let loaded = load_file(&path, &[]).unwrap();
        assert_eq!(loaded.config.etcd.endpoints.len(), 2);
        let shown = loaded.effective.to_string();
        assert!(
            shown.contains("[\"http://127.0.0.1:2379\", \"http://***@127.0.0.1:2380\"]"),
            "{shown}"
        );
        assert!(!shown.contains("etcd-pw-2"), "{shown}");
        let (_dir, path) = write(
            "etcd_endpoints = [\"http://127.0.0.1:2379\", \"http://root:etcd/pw@127.0.0.1:2380\"]\n",
        );
        let Err(LoadError::File { problems, .. }) = load_file(&path, &[]) else {
            panic!("loaded");
        };
        assert!(
            problems[0].what.contains("\"http://***@127.0.0.1:2380\""),
            "{problems:?}"
        );
        assert!(!problems[0].what.contains("etcd/pw"), "{problems:?}");
    }

    /// Found by the config_file fuzz target: a parser that quotes the
    /// value escaped (`"{raw:?}" is not a URL`) showed the password of a
    /// value with a control character or a quote in it.
    #[test]
    fn a_refused_value_is_masked_however_its_parser_quotes_it() {
        for (text, secret) in [
            (
                "upstream = \"http://user:hunter2@127.0.0.1:\\u0019/\"\n",
                "hunter2",
            ),
            (
                "upstream = \"http://user:hun\\\"ter2@127.0.0.1:9/\"\n",
                "ter2",
            ),
        ] {
            let (_dir, path) = write(text);
            let Err(error) = load_file(&path, &[]) else {
                panic!("loaded: {text}");
            };
            let shown = error.to_string();
            assert!(!shown.contains(secret), "{secret} in {shown}");
            assert!(shown.contains("***@127.0.0.1"), "{shown}");
        }
        // A message that names the value only partly is not shown.
        assert_eq!(
            masked_message("bad password 'pw-1'", "http://u:pw-1@h", None),
            None
        );
        assert_eq!(
            masked_message(
                "invalid value 'http://u:pw-1@h' for '[x]': no",
                "http://u:pw-1@h",
                None
            )
            .as_deref(),
            Some("invalid value 'http://***@h' for '[x]': no")
        );
    }

    #[test]
    fn masks_user_info_and_queries() {
        assert_eq!(mask("redis://:pw@h:6379/k"), "redis://***@h:6379/k");
        assert_eq!(mask("redis://:p/w?x#y@h:6379/k"), "redis://***@h:6379/k");
        assert!(ambiguous_user_info("redis://:p/w@h:6379/k"));
        assert!(!ambiguous_user_info("redis://:p%2Fw@h:6379/k"));
        // An `@` in a path reads as user-info to a reader that takes the
        // last one: as ambiguous, and refused.
        assert!(ambiguous_user_info("http://h/a@b"));
        assert!(!ambiguous_user_info("http://h/a"));
        assert_eq!(mask("http://h/b?X-Amz-Signature=x"), "http://h/b?***");
        assert_eq!(mask("plain"), "plain");
    }
}
