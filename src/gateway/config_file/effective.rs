//! What a load gave, and from where: the effective configuration that
//! `check-config` prints and the admin plane's `GET /config` serves,
//! secrets masked.

use std::fmt;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Arg, ArgMatches, Command};

use super::super::config::{Config, TableSource};
use super::secrets::mask;

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

pub(super) fn origin_of(given: &ArgMatches, key: &str, in_file: bool) -> Origin {
    match given.value_source(key) {
        Some(ValueSource::CommandLine) => Origin::Flag,
        Some(ValueSource::EnvVariable) => Origin::Env,
        _ if in_file => Origin::File,
        _ => Origin::Default,
    }
}

/// Every option with a value in `matches`, and where it came from.
pub(super) fn shown_options(
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
pub(super) fn resolved(mut shown: Vec<Shown>, config: &Config) -> Vec<Shown> {
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
pub(super) fn shown_custody(config: &Config) -> Vec<Shown> {
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
pub(super) fn shown_value(arg: &Arg, matches: &ArgMatches) -> Option<String> {
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

pub(super) fn toml_string(value: &str) -> String {
    // TOML's basic strings escape as JSON's do, for what a configuration
    // holds.
    serde_json::Value::from(value).to_string()
}
