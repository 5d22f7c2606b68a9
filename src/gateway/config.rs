//! The command line and its `FENCEGATE_*` environment variables.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use http::HeaderName;

use super::upstream::Upstream;
use crate::key::Scope;

/// `fencegate [serve] [OPTIONS]`: every option also reads `FENCEGATE_<OPTION>`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "fencegate",
    version,
    about = "An HTTP gateway that refuses writes carrying a stale fencing token.",
    override_usage = "fencegate [serve] [OPTIONS]"
)]
pub struct Config {
    /// Data plane address (port 0 picks a free port; the bound address is printed).
    #[arg(
        long,
        env = "FENCEGATE_LISTEN",
        default_value = "127.0.0.1:8080",
        value_name = "ADDR"
    )]
    pub listen: SocketAddr,

    /// Admin plane address: /fences, /metrics, /healthz.
    #[arg(
        long,
        env = "FENCEGATE_ADMIN_LISTEN",
        default_value = "127.0.0.1:8081",
        value_name = "ADDR"
    )]
    pub admin_listen: SocketAddr,

    /// The storage backend to protect, http://host:port[/base]. Without it an
    /// embedded object store answers behind the gateway.
    #[arg(long, env = "FENCEGATE_UPSTREAM", value_name = "URL", value_parser = Upstream::parse)]
    pub upstream: Option<Upstream>,

    /// Durable fence state (and the embedded backend's objects).
    #[arg(
        long,
        env = "FENCEGATE_DATA_DIR",
        default_value = "./fencegate-data",
        value_name = "DIR"
    )]
    pub data_dir: PathBuf,

    /// `disk` keeps fences across restarts; `memory` forgets them all.
    #[arg(
        long,
        env = "FENCEGATE_STATE",
        default_value = "disk",
        value_name = "disk|memory"
    )]
    pub state: StateKind,

    /// Header carrying the fencing token.
    #[arg(
        long,
        env = "FENCEGATE_TOKEN_HEADER",
        default_value = "X-Fencing-Token",
        value_name = "NAME"
    )]
    pub token_header: HeaderName,

    /// How a request maps to its fence: `path`, `prefix:N` or `header` (X-Fencing-Lock).
    #[arg(
        long,
        env = "FENCEGATE_SCOPE",
        default_value = "path",
        value_name = "path|prefix:N|header"
    )]
    pub scope: Scope,

    /// Forward writes that carry no token instead of refusing them with 428.
    #[arg(long, env = "FENCEGATE_ALLOW_UNFENCED_WRITES")]
    pub allow_unfenced_writes: bool,

    /// Seconds to wait for the backend's response headers (fractions allowed).
    #[arg(long, env = "FENCEGATE_UPSTREAM_TIMEOUT", default_value = "30", value_name = "SECS", value_parser = parse_seconds)]
    pub upstream_timeout: Duration,

    /// Seconds an idle pooled upstream connection is kept; keep it below the
    /// backend's own keep-alive timeout.
    #[arg(long, env = "FENCEGATE_UPSTREAM_IDLE_TIMEOUT", default_value = "4", value_name = "SECS", value_parser = parse_seconds)]
    pub upstream_idle_timeout: Duration,

    /// Seconds to let in-flight requests finish after SIGTERM or Ctrl-C.
    #[arg(long, env = "FENCEGATE_SHUTDOWN_TIMEOUT", default_value = "10", value_name = "SECS", value_parser = parse_seconds)]
    pub shutdown_timeout: Duration,

    /// Log format on stderr.
    #[arg(
        long,
        env = "FENCEGATE_LOG_FORMAT",
        default_value = "text",
        value_name = "text|json"
    )]
    pub log_format: LogFormat,
}

/// Where fences live (`--state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateKind {
    /// Durable, under `--data-dir`.
    Disk,
    /// In memory, forgotten on restart.
    Memory,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Config {
    /// Parses `args` (the program name first). `serve` as the first argument
    /// is optional: it is the only command.
    pub fn parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        if args.get(1).is_some_and(|a| a == "serve") {
            args.remove(1);
        }
        Config::try_parse_from(args)
    }
}

fn parse_seconds(raw: &str) -> Result<Duration, String> {
    let secs: f64 = raw
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of seconds, got {raw:?}"))?;
    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0 * 365.0) {
        return Err(format!(
            "expected a positive number of seconds, got {raw:?}"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_serve() {
        let c = Config::parse_args(["fencegate"]).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.admin_listen.to_string(), "127.0.0.1:8081");
        assert_eq!(c.state, StateKind::Disk);
        assert_eq!(c.scope, Scope::Path);
        assert_eq!(c.upstream_timeout, Duration::from_secs(30));
        assert!(c.upstream.is_none());
        let c = Config::parse_args(["fencegate", "serve", "--scope", "prefix:2"]).unwrap();
        assert_eq!(c.scope.to_string(), "prefix:2");
    }

    #[test]
    fn bad_values_are_errors() {
        for args in [
            &["fencegate", "--scope", "prefix:0"][..],
            &["fencegate", "--upstream", "ftp://x"],
            &["fencegate", "--upstream-timeout", "-1"],
            &["fencegate", "--state", "tape"],
            &["fencegate", "--token-header", "bad header"],
            &["fencegate", "--listen", "nowhere"],
        ] {
            assert!(
                Config::parse_args(args.iter().copied()).is_err(),
                "{args:?}"
            );
        }
    }
}
