//! The file's tables read one by one: each option's value checked by
//! the option's own parser (as the command line would check it) and
//! turned into the `--option=value` it stands for; each `[[route]]`'s
//! name, match and options. Every problem is collected with its line.

use std::ffi::OsString;
use std::path::Path;

use clap::parser::ValueSource;
use clap::{Arg, ArgMatches, Command, CommandFactory};
use serde::de::IntoDeserializer;
use serde::Deserialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::super::cli::Cli;
use super::super::config::{RouteMatch, TableSource};
use super::super::custody::files::{self, line_of};
use super::effective::toml_string;
use super::secrets::{ambiguous_user_info, mask, masked_message, shorten};

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
pub(super) const ROUTE_KEYS: &[&str] = &["name", "match", "fence_namespace", "identities"];

/// One thing wrong with a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The line it is on, where it has one.
    pub line: Option<usize>,
    /// What is wrong.
    pub what: String,
}

/// What the top level of the file holds.
#[derive(Debug, Default)]
pub(super) struct FileTop {
    /// `--option=value` for each option the file gives and no flag or
    /// environment variable does.
    pub(super) args: Vec<OsString>,
    /// Every option key the file gives.
    pub(super) keys: Vec<String>,
    pub(super) credentials_table: bool,
    pub(super) identity_tables: bool,
}

/// One `[[route]]` as the file gives it.
#[derive(Debug)]
pub(super) struct FileRoute {
    pub(super) name: String,
    pub(super) line: usize,
    pub(super) matches: RouteMatch,
    pub(super) namespace: String,
    pub(super) identities: Option<Vec<String>>,
    pub(super) args: Vec<OsString>,
    pub(super) keys: Vec<String>,
    pub(super) credentials_table: bool,
}

impl FileRoute {
    pub(super) fn matches_toml(&self) -> String {
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

pub(super) struct Reader<'a> {
    pub(super) path: &'a Path,
    pub(super) text: &'a str,
    pub(super) command: &'a Command,
    pub(super) given: &'a ArgMatches,
}

impl Reader<'_> {
    pub(super) fn problem(&self, offset: usize, what: String) -> Problem {
        Problem {
            line: Some(line_of(self.text, offset)),
            what,
        }
    }

    pub(super) fn read_top(&self, root: &DeTable<'_>, problems: &mut Vec<Problem>) -> FileTop {
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

    pub(super) fn read_route(
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
pub(super) fn given_by_user(given: &ArgMatches, key: &str) -> bool {
    matches!(
        given
            .try_get_raw(key)
            .ok()
            .flatten()
            .and(given.value_source(key)),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// A clap error's first line, without its `error: `.
pub(super) fn first_line(error: &clap::Error) -> String {
    let text = error.to_string();
    let line = text.lines().next().unwrap_or("invalid value");
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}
