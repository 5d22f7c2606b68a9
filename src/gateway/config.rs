//! What a gateway runs with, as plain values: built by the command line
//! (`cli.rs`), by tests and by examples alike.
//!
//! ```
//! use std::time::Duration;
//! use fencegate::gateway::{Config, StateKind};
//!
//! let config = Config {
//!     state: StateKind::Memory,
//!     upstream_timeout: Duration::from_secs(5),
//!     ..Config::default()
//! };
//! assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
//! assert_eq!(config.client.idle_timeout, Duration::from_secs(75));
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::HeaderName;

use super::upstream::Upstream;
use crate::chain::{Mode, Observer, DEFAULT_CACHE_ENTRIES};
use crate::client_tls::{ClientTlsFiles, Secret, TlsError};
use crate::dialect::StoreKind;
use crate::fencing::{Enforce, TOKEN_HEADER};
use crate::key::Scope;

/// `--anonymous-clients`: what a request with no credentials may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Anonymous {
    /// Nothing: it is refused as unauthenticated.
    #[default]
    Off,
    /// Read every object (or what the `anonymous` identity allows).
    Read,
    /// Read and write every object (or what `anonymous` allows).
    Write,
}

impl std::str::FromStr for Anonymous {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "off" => Ok(Anonymous::Off),
            "read" => Ok(Anonymous::Read),
            "write" => Ok(Anonymous::Write),
            other => Err(format!(
                "unknown value {other:?}; expected off, read or write"
            )),
        }
    }
}

/// Everything a [`Gateway`](super::Gateway) needs. `Default` gives the
/// contract's defaults (embedded backend, durable fences under
/// `./fencegate-data`, plain HTTP on 127.0.0.1:8080 and :8081).
#[derive(Debug, Clone)]
pub struct Config {
    /// Data plane address, used by [`Gateway::start`](super::Gateway::start)
    /// (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Admin plane address, used by [`Gateway::start`](super::Gateway::start).
    pub admin_listen: SocketAddr,
    /// The backend to protect; `None` starts the embedded object store.
    pub upstream: Option<Upstream>,
    /// Durable fence state (and the embedded backend's objects).
    pub data_dir: PathBuf,
    /// Where fences live.
    pub state: StateKind,
    /// The bound on the fences kept in memory, in bytes (`--fence-cache`):
    /// `None` is 64 MiB under [`StateKind::Disk`] and no bound under
    /// [`StateKind::Memory`].
    pub fence_cache: Option<usize>,
    /// New fences per second per client and at most at once
    /// (`--new-fence-rate`, `--new-fence-burst`); `None`: no limit.
    pub new_fence_limit: Option<(u32, u32)>,
    /// With [`StateKind::Etcd`]: the cluster and how to share it.
    pub etcd: EtcdConfig,
    /// The header carrying the fencing token.
    pub token_header: HeaderName,
    /// How a request maps to its fence key.
    pub scope: Scope,
    /// Forward writes without a token instead of refusing them (428).
    pub allow_unfenced_writes: bool,
    /// Whether fencing refuses, only reports, or is off (`--enforce`).
    pub enforce: Enforce,
    /// The store's dialect (`--store`): the shape of the gateway's own
    /// answers. What else it implies (flat keys, the dialect of
    /// `--conditional-writes on`) is resolved into the fields below by
    /// whoever builds the configuration.
    pub store: StoreKind,
    /// Credential custody: the store's credentials (a TOML table); every
    /// request to the store is signed with them.
    pub upstream_credentials: Option<TableSource>,
    /// Credential custody: the gateway's clients and what each may touch
    /// (`[[identity]]` tables).
    pub identities: Option<TableSource>,
    /// Credential custody: what a request with no credentials may do.
    pub anonymous_clients: Anonymous,
    /// `--store s3`: the host name clients reach the gateway by;
    /// `BUCKET.<name>` is virtual-hosted.
    pub s3_domain: Option<String>,
    /// The store has no collections: no write is fenced over everything
    /// under its path (`--flat-keys`).
    pub flat_keys: bool,
    /// Chained writes: the store's dialect (`--conditional-writes`).
    pub conditional_writes: Mode,
    /// Versions the chain keeps (`--chain-cache-entries`), at least 1.
    pub chain_cache_entries: usize,
    /// Who learns an unknown version (`--chain-observe`); `None`: the
    /// mode's default.
    pub chain_observe: Option<Observer>,
    /// Where the start-up probe writes (`--conditional-probe`); `None`:
    /// `/.fencegate-probe` in `webdav` and `http` modes, no probe otherwise.
    pub conditional_probe: Option<String>,
    /// From the moment a request has been sent in full to its response
    /// headers; and the longest pause between two bytes of a response body.
    /// Also bounds connecting (TLS handshake included) to the backend.
    pub upstream_timeout: Duration,
    /// How long an idle pooled backend connection is kept; below the
    /// backend's own keep-alive timeout.
    pub upstream_idle_timeout: Duration,
    /// PEM bundle of the CAs trusted for an `https://` upstream instead of
    /// the system's roots.
    pub upstream_ca: Option<PathBuf>,
    /// Serve TLS on both planes with this certificate and key.
    pub tls: Option<TlsFiles>,
    /// Limits on slow, idle and numerous clients.
    pub client: ClientLimits,
    /// Where to write the access log, if anywhere.
    pub access_log: Option<AccessLogTarget>,
    /// How long requests in flight may finish after a shutdown begins.
    pub shutdown_timeout: Duration,
    /// The admin plane's bearer token is this file's content; `None`: the
    /// admin plane is open and read-only.
    pub admin_token_file: Option<PathBuf>,
    /// Token trust: the lock service that issues the tokens
    /// ([`crate::issuer::from_url`]).
    pub token_issuer: Option<String>,
    /// TLS to the token issuer (`rediss://`, `etcds://`, PostgreSQL with
    /// `sslmode=verify-full`): its CA and a client certificate.
    pub token_issuer_tls: ClientTlsFiles,
    /// The password of the user named in the token issuer's URL.
    pub token_issuer_password: PasswordSource,
    /// `[[route]]` tables of the configuration file, in its order; none:
    /// one route that matches everything, made of the options above.
    pub routes: Vec<RouteConfig>,
    /// The configuration file it was read from (`--config`), re-read on
    /// `SIGHUP`.
    pub file: Option<PathBuf>,
}

/// Where a credential custody table is: a TOML file of its own
/// (`--upstream-credentials FILE`, `--identities FILE`) or the
/// configuration file (`--config`), at its top level or in the route named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableSource {
    /// A file of its own.
    File(PathBuf),
    /// The configuration file: its top-level table, or the `[[route]]`
    /// with this name.
    Config {
        /// The configuration file.
        file: PathBuf,
        /// The route whose table it is; `None`: the top level.
        route: Option<String>,
    },
}

impl TableSource {
    /// The file it is read from.
    pub fn path(&self) -> &std::path::Path {
        match self {
            TableSource::File(path) | TableSource::Config { file: path, .. } => path,
        }
    }
}

/// One `[[route]]`: which requests it takes, and the gateway's options as
/// they apply to them (those a route does not set are the top level's).
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// The route's name: its metrics label and log field, and by default
    /// its fence namespace.
    pub name: String,
    /// The requests it takes.
    pub matches: RouteMatch,
    /// Where its fences live: `""` is the namespace fences had before
    /// routes existed; two routes share fences only by naming the same.
    pub fence_namespace: String,
    /// The identities that may use the route (credential custody); `None`:
    /// every identity.
    pub identities: Option<Vec<String>>,
    /// The options of the route: the top level's, with the route's own on
    /// top. Only those that shape a request's path are the route's; the
    /// listener, TLS, state, etcd and admin options are the gateway's.
    pub options: Box<Config>,
}

/// What a route matches: a host (exact, or `*.` and a suffix), a path
/// prefix, either or both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteMatch {
    /// `s3.internal` or `*.s3.internal` (any name that ends in
    /// `.s3.internal`); lowercase, without a port.
    pub host: Option<String>,
    /// The normalised request path starts with it (`/billing-`).
    pub path_prefix: Option<String>,
}

/// Where a password comes from: a file, or the environment; never the
/// command line, which every user of the machine can read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PasswordSource {
    /// No password.
    #[default]
    None,
    /// The content of this file (its line end removed).
    File(PathBuf),
    /// Given directly (from an environment variable).
    Given(Secret),
}

impl PasswordSource {
    /// The password, read now.
    pub fn read(&self) -> Result<Option<Secret>, TlsError> {
        match self {
            PasswordSource::None => Ok(None),
            PasswordSource::File(path) => Secret::from_file(path).map(Some),
            PasswordSource::Given(secret) => Ok(Some(secret.clone())),
        }
    }

    /// Whether a password is given.
    pub fn is_some(&self) -> bool {
        *self != PasswordSource::None
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            upstream: None,
            data_dir: PathBuf::from("./fencegate-data"),
            state: StateKind::Disk,
            fence_cache: None,
            new_fence_limit: None,
            etcd: EtcdConfig::default(),
            token_header: TOKEN_HEADER,
            scope: Scope::Path,
            allow_unfenced_writes: false,
            enforce: Enforce::On,
            store: StoreKind::Http,
            upstream_credentials: None,
            identities: None,
            anonymous_clients: Anonymous::Off,
            s3_domain: None,
            flat_keys: false,
            conditional_writes: Mode::Off,
            chain_cache_entries: DEFAULT_CACHE_ENTRIES,
            chain_observe: None,
            conditional_probe: None,
            upstream_timeout: Duration::from_secs(30),
            upstream_idle_timeout: Duration::from_secs(4),
            upstream_ca: None,
            tls: None,
            client: ClientLimits::default(),
            access_log: None,
            shutdown_timeout: Duration::from_secs(10),
            admin_token_file: None,
            token_issuer: None,
            token_issuer_tls: ClientTlsFiles::default(),
            token_issuer_password: PasswordSource::None,
            routes: Vec::new(),
            file: None,
        }
    }
}

/// Where fences live (`--state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    /// Durable, under the data dir.
    Disk,
    /// In memory, forgotten on restart.
    Memory,
    /// Shared through etcd ([`Config::etcd`]).
    Etcd,
}

/// How to share fences through etcd (`--etcd-*`, `--instance-name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `http://host:port` of the cluster's members.
    pub endpoints: Vec<String>,
    /// Instances with the same prefix share fences.
    pub prefix: String,
    /// This instance's lease.
    pub lease_ttl: Duration,
    /// Shown in etcd records, logs and `/readyz`; `None`: host name + pid.
    pub instance: Option<String>,
    /// TLS to `https://` members: their CA, and the client certificate
    /// shown to them (etcd's `--client-cert-auth`).
    pub tls: ClientTlsFiles,
    /// etcd's authentication: the user the gateway acts as.
    pub user: Option<String>,
    /// The user's password.
    pub password: PasswordSource,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            endpoints: Vec::new(),
            prefix: "/fencegate/".to_owned(),
            lease_ttl: Duration::from_secs(6),
            instance: None,
            tls: ClientTlsFiles::default(),
            user: None,
            password: PasswordSource::None,
        }
    }
}

impl EtcdConfig {
    /// The instance name: the one given, else host name and pid.
    pub fn instance_name(&self) -> String {
        self.instance.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "localhost".to_owned());
            format!("{host}-{}", std::process::id())
        })
    }
}

/// A certificate chain and its private key, both PEM files, re-read on
/// [`Gateway::reload_tls`](super::Gateway::reload_tls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key of the leaf.
    pub key: PathBuf,
}

/// How long a client may take, and how many may be served at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// A request head must be complete this long after its first byte (on a
    /// new connection: after it was accepted).
    pub header_timeout: Duration,
    /// A keep-alive connection with no request started this long after its
    /// previous response is closed.
    pub idle_timeout: Duration,
    /// The longest pause between two bytes of a request body.
    pub body_timeout: Duration,
    /// Data plane connections served at once; more wait to be accepted.
    pub max_connections: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(75),
            body_timeout: Duration::from_secs(60),
            max_connections: 10_000,
        }
    }
}

/// Where access log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLogTarget {
    /// Standard output (`--access-log -`).
    Stdout,
    /// A file, appended to.
    File(PathBuf),
}
