//! The command line and its `FENCEGATE_*` environment variables, turned
//! into a [`Config`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use http::HeaderName;

use super::config::{
    AccessLogTarget, Anonymous, ClientLimits, Config, EtcdConfig, PasswordSource, StateKind,
    TableSource, TlsFiles,
};
use super::upstream::Upstream;
use crate::chain::{Mode, Observer};
use crate::client_tls::{ClientTlsFiles, Secret};
use crate::dialect::StoreKind;
use crate::fencing::Enforce;
use crate::key::Scope;

/// `fencegate [serve] [OPTIONS]`: every option also reads `FENCEGATE_<OPTION>`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "fencegate",
    version,
    about = "An HTTP gateway that refuses writes carrying a stale fencing token.",
    override_usage = "fencegate [serve] [OPTIONS]\n       fencegate check-config FILE [OPTIONS]",
    // The last of an option given twice wins: a route's own value comes
    // after the top level's (`config_file/`).
    args_override_self = true
)]
pub struct Cli {
    /// Read every option from this TOML file too (each option's name with `_` for `-`, plus
    /// [[route]], [[identity]] and [upstream_credentials] tables); a flag wins over its
    /// environment variable, which wins over the file. Re-read on SIGHUP.
    #[arg(long, env = "FENCEGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Data plane address (port 0 picks a free port; the bound address is printed).
    #[arg(
        long,
        env = "FENCEGATE_LISTEN",
        default_value = "127.0.0.1:8080",
        value_name = "ADDR"
    )]
    pub listen: SocketAddr,

    /// Admin plane address: /fences, /metrics, /healthz, /readyz.
    #[arg(
        long,
        env = "FENCEGATE_ADMIN_LISTEN",
        default_value = "127.0.0.1:8081",
        value_name = "ADDR"
    )]
    pub admin_listen: SocketAddr,

    /// The storage backend to protect, `http[s]://host[:port][/base]`. Without
    /// it an embedded object store answers behind the gateway.
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

    /// `disk` keeps fences across restarts; `memory` forgets them all;
    /// `etcd` shares them with every instance on the same etcd prefix.
    #[arg(
        long,
        env = "FENCEGATE_STATE",
        default_value = "disk",
        value_name = "disk|memory|etcd"
    )]
    pub state: StateArg,

    /// How much memory fences may take (bytes; K, M, G for KiB, MiB, GiB). With --state disk
    /// (default 64M) the others stay in the file and are read when a request names them; with
    /// --state etcd (default 64M) they stay in etcd and a request's claim reads them; with
    /// --state memory (default: no bound) a new key is refused at the bound (503).
    #[arg(long, env = "FENCEGATE_FENCE_CACHE", value_name = "SIZE", value_parser = parse_size)]
    pub fence_cache: Option<usize>,

    /// New fences (writes to keys that have none yet) each client may make per second: the
    /// identity it authenticated as, else its IP address. Past it, 429 new_fence_limit with
    /// Retry-After; writes to fenced keys never count. Off by default.
    #[arg(long, env = "FENCEGATE_NEW_FENCE_RATE", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub new_fence_rate: Option<u32>,

    /// With --new-fence-rate: at most this many new fences at once (default: the larger of
    /// 1000, one S3 DeleteObjects, and the rate); a request that would make more is refused.
    #[arg(long, env = "FENCEGATE_NEW_FENCE_BURST", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..), requires = "new_fence_rate")]
    pub new_fence_burst: Option<u32>,

    /// With --state etcd: the cluster's members, comma-separated http://host:port (or all https://).
    #[arg(
        long,
        env = "FENCEGATE_ETCD_ENDPOINTS",
        value_name = "URLS",
        value_delimiter = ','
    )]
    pub etcd_endpoints: Vec<String>,

    /// With --state etcd: instances with the same prefix share fences.
    #[arg(
        long,
        env = "FENCEGATE_ETCD_PREFIX",
        default_value = "/fencegate/",
        value_name = "P"
    )]
    pub etcd_prefix: String,

    /// With --state etcd: this instance's lease, in whole seconds (at least 2).
    #[arg(long, env = "FENCEGATE_ETCD_LEASE_TTL", default_value = "6", value_name = "SECS", value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub etcd_lease_ttl: u64,

    /// With --state etcd: the CA bundle (PEM) that signs the https:// members' certificates
    /// (default: the system's roots).
    #[arg(long, env = "FENCEGATE_ETCD_CA", value_name = "FILE")]
    pub etcd_ca: Option<PathBuf>,

    /// With --state etcd: the client certificate (PEM) shown to the members, for etcd's
    /// --client-cert-auth; with --etcd-key. Re-read on SIGHUP.
    #[arg(
        long,
        env = "FENCEGATE_ETCD_CERT",
        value_name = "FILE",
        requires = "etcd_key"
    )]
    pub etcd_cert: Option<PathBuf>,

    /// With --state etcd: the private key (PEM) of --etcd-cert.
    #[arg(
        long,
        env = "FENCEGATE_ETCD_KEY",
        value_name = "FILE",
        requires = "etcd_cert"
    )]
    pub etcd_key: Option<PathBuf>,

    /// With --state etcd: the etcd user the gateway acts as (etcd's authentication); its
    /// password from --etcd-password-file or the environment variable FENCEGATE_ETCD_PASSWORD.
    #[arg(long, env = "FENCEGATE_ETCD_USER", value_name = "NAME")]
    pub etcd_user: Option<String>,

    /// With --etcd-user: the file holding the user's password.
    #[arg(long, env = "FENCEGATE_ETCD_PASSWORD_FILE", value_name = "FILE")]
    pub etcd_password_file: Option<PathBuf>,

    /// With --state etcd: shown in etcd records, logs and /readyz (default: host name + pid).
    #[arg(long, env = "FENCEGATE_INSTANCE_NAME", value_name = "NAME")]
    pub instance_name: Option<String>,

    /// Header carrying the fencing token.
    #[arg(
        long,
        env = "FENCEGATE_TOKEN_HEADER",
        default_value = "X-Fencing-Token",
        value_name = "NAME"
    )]
    pub token_header: HeaderName,

    /// How a request maps to its fence: `path`, `prefix:N`, `header` (X-Fencing-Lock), or
    /// `host+path` and `host+prefix:N` (the request's host first: S3 virtual-hosted style).
    #[arg(
        long,
        env = "FENCEGATE_SCOPE",
        default_value = "path",
        value_name = "path|prefix:N|header|host+path|host+prefix:N"
    )]
    pub scope: Scope,

    /// The store's dialect, named once: flat keys for s3 and azure, the
    /// dialect of --conditional-writes on, and the shape of the gateway's
    /// own answers (an S3 or Azure error document; JSON for webdav and http).
    #[arg(
        long,
        env = "FENCEGATE_STORE",
        default_value = "http",
        value_name = "s3|azure|webdav|http"
    )]
    pub store: StoreKind,

    /// Credential custody: the store's credentials (TOML: kind = "aws-sigv4", "basic" or
    /// "bearer", secrets from files or environment variables); every request to the store is
    /// signed with them, after the client's credentials are removed.
    #[arg(long, env = "FENCEGATE_UPSTREAM_CREDENTIALS", value_name = "FILE")]
    pub upstream_credentials: Option<PathBuf>,

    /// Credential custody: the gateway's clients (TOML [[identity]] tables: name,
    /// access_key_id, secret_file, allow = [{prefix, access}]); every request must
    /// authenticate as one of them. Re-read on SIGHUP.
    #[arg(long, env = "FENCEGATE_IDENTITIES", value_name = "FILE")]
    pub identities: Option<PathBuf>,

    /// Credential custody: what a request without credentials may do, signed with the
    /// store's credentials (an identity named "anonymous" without a key narrows it).
    #[arg(
        long,
        env = "FENCEGATE_ANONYMOUS_CLIENTS",
        default_value = "off",
        value_name = "off|read|write"
    )]
    pub anonymous_clients: Anonymous,

    /// With --store s3: the host name clients reach the gateway by; a request for
    /// BUCKET.NAME is virtual-hosted, fenced and forwarded as its path-style twin.
    #[arg(long, env = "FENCEGATE_S3_DOMAIN", value_name = "NAME")]
    pub s3_domain: Option<String>,

    /// The store has no collections (S3, GCS, Azure Blob): a DELETE changes
    /// only its own key, never everything under its path. On by default
    /// with --store s3 or azure.
    #[arg(long, env = "FENCEGATE_FLAT_KEYS", value_name = "true|false", num_args = 0..=1,
          default_value = "false", default_missing_value = "true",
          action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub flat_keys: bool,

    /// Chain every write that replaces or removes an object to the version
    /// the store holds, so that the store refuses it if it arrives after a
    /// newer write: `on` (the dialect --store names), or a dialect (`s3`,
    /// `azure`, `webdav`, `http`), or `off`.
    #[arg(
        long,
        env = "FENCEGATE_CONDITIONAL_WRITES",
        default_value = "off",
        value_name = "off|on|s3|azure|webdav|http"
    )]
    pub conditional_writes: ChainArg,

    /// Who learns a version the chain does not know: the gateway with a
    /// HEAD of its own (default for webdav and http), or the client, told so with
    /// 428 (default for s3 and azure).
    #[arg(
        long,
        env = "FENCEGATE_CHAIN_OBSERVE",
        value_name = "gateway-head|client-head"
    )]
    pub chain_observe: Option<Observer>,

    /// A path the gateway may write at start: it PUTs there once with a
    /// condition no version meets, and refuses to start if the store
    /// applies it (the store ignores conditions). Default for webdav and
    /// http: /.fencegate-probe.
    #[arg(long, env = "FENCEGATE_CONDITIONAL_PROBE", value_name = "PATH")]
    pub conditional_probe: Option<String>,

    /// Versions of objects the chain keeps in memory (least recently used
    /// first out; an evicted one is observed again, never assumed).
    #[arg(long, env = "FENCEGATE_CHAIN_CACHE_ENTRIES", default_value = "100000", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub chain_cache_entries: u64,

    /// `on` refuses what fencing refuses; `report` refuses nothing for fencing reasons and
    /// records what it would have refused (outcome would_refuse, fencegate_would_refuse_total,
    /// an INFO line), raising fences all the same; `off` forwards without fencing.
    #[arg(
        long,
        env = "FENCEGATE_ENFORCE",
        default_value = "on",
        value_name = "on|report|off"
    )]
    pub enforce: Enforce,

    /// Forward writes that carry no token instead of refusing them with 428.
    #[arg(long, env = "FENCEGATE_ALLOW_UNFENCED_WRITES", value_name = "true|false", num_args = 0..=1,
          default_value = "false", default_missing_value = "true",
          action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub allow_unfenced_writes: bool,

    /// Seconds from a request sent in full to its response headers, and the
    /// longest pause within a response body (fractions allowed).
    #[arg(long, env = "FENCEGATE_UPSTREAM_TIMEOUT", default_value = "30", value_name = "SECS", value_parser = parse_seconds)]
    pub upstream_timeout: Duration,

    /// Seconds an idle pooled upstream connection is kept; keep it below the
    /// backend's own keep-alive timeout.
    #[arg(long, env = "FENCEGATE_UPSTREAM_IDLE_TIMEOUT", default_value = "4", value_name = "SECS", value_parser = parse_seconds)]
    pub upstream_idle_timeout: Duration,

    /// PEM bundle of the CAs trusted for an https:// upstream, instead of the system's.
    #[arg(long, env = "FENCEGATE_UPSTREAM_CA", value_name = "FILE")]
    pub upstream_ca: Option<PathBuf>,

    /// Serve TLS with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(
        long,
        env = "FENCEGATE_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        env = "FENCEGATE_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// Seconds for a request head to arrive in full, from its first byte.
    #[arg(long, env = "FENCEGATE_CLIENT_HEADER_TIMEOUT", default_value = "30", value_name = "SECS", value_parser = parse_seconds)]
    pub client_header_timeout: Duration,

    /// Seconds an idle keep-alive client connection is kept.
    #[arg(long, env = "FENCEGATE_CLIENT_IDLE_TIMEOUT", default_value = "75", value_name = "SECS", value_parser = parse_seconds)]
    pub client_idle_timeout: Duration,

    /// Longest pause, in seconds, between two bytes of a request body.
    #[arg(long, env = "FENCEGATE_CLIENT_BODY_TIMEOUT", default_value = "60", value_name = "SECS", value_parser = parse_seconds)]
    pub client_body_timeout: Duration,

    /// Client connections served at once on the data plane; more wait to be accepted.
    #[arg(long, env = "FENCEGATE_MAX_CONNECTIONS", default_value = "10000", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Bearer token for the admin plane (the file's content, trimmed); enables admin writes.
    #[arg(long, env = "FENCEGATE_ADMIN_TOKEN_FILE", value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,

    /// Check each new highest token with the lock service that issued it:
    /// redis://host:port/KEY, etcd://host:port[,...], postgres://user@host:port/db?sequence=NAME,
    /// zookeeper://host:port[,...]; rediss:// and etcds:// for TLS, a user as user@host.
    #[arg(long, env = "FENCEGATE_TOKEN_ISSUER", value_name = "URL")]
    pub token_issuer: Option<String>,

    /// The CA bundle (PEM) that signs the token issuer's certificate (rediss://, etcds://,
    /// postgres:// with sslmode=verify-full; default: the system's roots).
    #[arg(long, env = "FENCEGATE_TOKEN_ISSUER_CA", value_name = "FILE")]
    pub token_issuer_ca: Option<PathBuf>,

    /// A client certificate (PEM) shown to the token issuer; with --token-issuer-key.
    #[arg(
        long,
        env = "FENCEGATE_TOKEN_ISSUER_CERT",
        value_name = "FILE",
        requires = "token_issuer_key"
    )]
    pub token_issuer_cert: Option<PathBuf>,

    /// The private key (PEM) of --token-issuer-cert.
    #[arg(
        long,
        env = "FENCEGATE_TOKEN_ISSUER_KEY",
        value_name = "FILE",
        requires = "token_issuer_cert"
    )]
    pub token_issuer_key: Option<PathBuf>,

    /// The file holding the password of the user in the --token-issuer URL (or the
    /// environment variable FENCEGATE_TOKEN_ISSUER_PASSWORD).
    #[arg(
        long,
        env = "FENCEGATE_TOKEN_ISSUER_PASSWORD_FILE",
        value_name = "FILE"
    )]
    pub token_issuer_password_file: Option<PathBuf>,

    /// One JSON line per data plane request, to this file (`-` = stdout).
    #[arg(long, env = "FENCEGATE_ACCESS_LOG", value_name = "PATH")]
    pub access_log: Option<PathBuf>,

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

/// `--state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateArg {
    /// Durable, under `--data-dir`.
    Disk,
    /// In memory, forgotten on restart.
    Memory,
    /// Shared through etcd with every instance on the same prefix.
    Etcd,
}

/// `--conditional-writes`: a chain dialect, or `on` for the one `--store`
/// names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainArg {
    /// The dialect of `--store`.
    On,
    /// This dialect (or `off`).
    Mode(Mode),
}

impl std::str::FromStr for ChainArg {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "on" => Ok(ChainArg::On),
            other => other.parse().map(ChainArg::Mode),
        }
    }
}

impl ChainArg {
    /// The chain dialect in front of `store`.
    pub fn mode(self, store: StoreKind) -> Mode {
        match self {
            ChainArg::On => store.chain_mode(),
            ChainArg::Mode(mode) => mode,
        }
    }
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Cli {
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
        Cli::try_parse_from(args)
    }

    /// The gateway's configuration.
    pub fn config(&self) -> Config {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        };
        let access_log = self.access_log.as_ref().map(|path| {
            if path.as_os_str() == "-" {
                AccessLogTarget::Stdout
            } else {
                AccessLogTarget::File(path.clone())
            }
        });
        Config {
            listen: self.listen,
            admin_listen: self.admin_listen,
            upstream: self.upstream.clone(),
            data_dir: self.data_dir.clone(),
            state: match self.state {
                StateArg::Disk => StateKind::Disk,
                StateArg::Memory => StateKind::Memory,
                StateArg::Etcd => StateKind::Etcd,
            },
            fence_cache: self.fence_cache,
            new_fence_limit: self
                .new_fence_rate
                .map(|rate| (rate, self.new_fence_burst.unwrap_or(rate.max(1000)))),
            etcd: EtcdConfig {
                endpoints: self.etcd_endpoints.clone(),
                prefix: self.etcd_prefix.clone(),
                lease_ttl: Duration::from_secs(self.etcd_lease_ttl),
                instance: self.instance_name.clone(),
                tls: ClientTlsFiles {
                    ca: self.etcd_ca.clone(),
                    cert: self.etcd_cert.clone(),
                    key: self.etcd_key.clone(),
                },
                user: self.etcd_user.clone(),
                password: password_source(
                    self.etcd_password_file.as_ref(),
                    "FENCEGATE_ETCD_PASSWORD",
                ),
            },
            token_header: self.token_header.clone(),
            scope: self.scope,
            allow_unfenced_writes: self.allow_unfenced_writes,
            enforce: self.enforce,
            store: self.store,
            upstream_credentials: self.upstream_credentials.clone().map(TableSource::File),
            identities: self.identities.clone().map(TableSource::File),
            anonymous_clients: self.anonymous_clients,
            s3_domain: self.s3_domain.clone(),
            flat_keys: self.flat_keys || self.store.flat_keys(),
            conditional_writes: self.conditional_writes.mode(self.store),
            chain_cache_entries: usize::try_from(self.chain_cache_entries).unwrap_or(usize::MAX),
            chain_observe: self.chain_observe,
            conditional_probe: self.conditional_probe.clone(),
            upstream_timeout: self.upstream_timeout,
            upstream_idle_timeout: self.upstream_idle_timeout,
            upstream_ca: self.upstream_ca.clone(),
            tls,
            client: ClientLimits {
                header_timeout: self.client_header_timeout,
                idle_timeout: self.client_idle_timeout,
                body_timeout: self.client_body_timeout,
                max_connections: self.max_connections as usize,
            },
            access_log,
            admin_token_file: self.admin_token_file.clone(),
            token_issuer: self.token_issuer.clone(),
            token_issuer_tls: ClientTlsFiles {
                ca: self.token_issuer_ca.clone(),
                cert: self.token_issuer_cert.clone(),
                key: self.token_issuer_key.clone(),
            },
            token_issuer_password: password_source(
                self.token_issuer_password_file.as_ref(),
                "FENCEGATE_TOKEN_ISSUER_PASSWORD",
            ),
            shutdown_timeout: self.shutdown_timeout,
            routes: Vec::new(),
            file: self.config.clone(),
        }
    }
}

/// A password file if one is named, else the environment variable `var`:
/// passwords are never options of their own, so that none is ever on a
/// command line.
fn password_source(file: Option<&PathBuf>, var: &str) -> PasswordSource {
    match (file, std::env::var(var)) {
        (Some(path), _) => PasswordSource::File(path.clone()),
        (None, Ok(password)) if !password.is_empty() => {
            PasswordSource::Given(Secret::new(password))
        }
        (None, _) => PasswordSource::None,
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

/// A size in bytes: digits, then nothing or `K`, `M`, `G` (with an
/// optional `iB` or `B`: every unit is binary), at least 1 KiB.
fn parse_size(text: &str) -> Result<usize, String> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let number: usize = number
        .parse()
        .map_err(|_| format!("{text:?} is no size: digits, then K, M or G"))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(format!("{text:?}: the unit is K, M or G (binary)")),
    };
    let bytes = number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))?;
    if bytes < 1024 {
        return Err(format!("{text:?}: at least 1K"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> Config {
        Cli::parse_args(args.iter().copied()).unwrap().config()
    }

    #[test]
    fn defaults_match_the_config_defaults() {
        let parsed = config(&["fencegate"]);
        let default = Config::default();
        assert_eq!(parsed.listen, default.listen);
        assert_eq!(parsed.admin_listen, default.admin_listen);
        assert_eq!(parsed.state, StateKind::Disk);
        assert_eq!(parsed.scope, Scope::Path);
        assert_eq!(parsed.upstream_timeout, default.upstream_timeout);
        assert_eq!(parsed.client, default.client);
        assert!(parsed.upstream.is_none() && parsed.tls.is_none() && parsed.access_log.is_none());
        let parsed = config(&[
            "fencegate",
            "serve",
            "--scope",
            "prefix:2",
            "--access-log",
            "-",
        ]);
        assert_eq!(parsed.scope.to_string(), "prefix:2");
        assert_eq!(parsed.access_log, Some(AccessLogTarget::Stdout));
        assert_eq!(parsed.store, StoreKind::Http);
        assert!(!parsed.flat_keys);
        let parsed = config(&["fencegate", "--store", "s3", "--conditional-writes", "on"]);
        assert!(parsed.flat_keys);
        assert_eq!(parsed.conditional_writes, Mode::S3);
        let parsed = config(&[
            "fencegate",
            "--store",
            "webdav",
            "--conditional-writes",
            "on",
        ]);
        assert!(!parsed.flat_keys);
        assert_eq!(parsed.conditional_writes, Mode::Webdav);
        let parsed = config(&["fencegate", "--store", "s3", "--conditional-writes", "http"]);
        assert_eq!(parsed.conditional_writes, Mode::Http);
        let parsed = config(&["fencegate", "--tls-cert", "c.pem", "--tls-key", "k.pem"]);
        assert_eq!(parsed.tls.map(|t| t.key), Some(PathBuf::from("k.pem")));
    }

    #[test]
    fn bad_values_are_errors() {
        for args in [
            &["fencegate", "--scope", "prefix:0"][..],
            &["fencegate", "--upstream", "ftp://x"],
            &["fencegate", "--upstream-timeout", "-1"],
            &["fencegate", "--state", "tape"],
            &["fencegate", "--store", "gcs"],
            &["fencegate", "--token-header", "bad header"],
            &["fencegate", "--listen", "nowhere"],
            &["fencegate", "--tls-cert", "c.pem"],
            &["fencegate", "--tls-key", "k.pem"],
            &["fencegate", "--max-connections", "0"],
            &["fencegate", "--client-idle-timeout", "0"],
        ] {
            assert!(Cli::parse_args(args.iter().copied()).is_err(), "{args:?}");
        }
    }

    #[test]
    fn sizes_are_binary_and_at_least_a_kibibyte() {
        assert_eq!(super::parse_size("64M"), Ok(64 << 20));
        assert_eq!(super::parse_size("4KiB"), Ok(4096));
        assert_eq!(super::parse_size("2g"), Ok(2 << 30));
        assert_eq!(super::parse_size("1024"), Ok(1024));
        for bad in ["", "1000", "M", "12T", "-1K", "99999999999999999999G"] {
            assert!(super::parse_size(bad).is_err(), "{bad}");
        }
    }
}
