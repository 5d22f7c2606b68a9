//! The gateway (feature `gateway`): the fencing layer in front of a reverse
//! proxy, plus the admin plane and the embedded backend. The binary in
//! `src/main.rs` only parses the command line, binds nothing itself, and
//! calls [`Gateway::start`].
//!
//! A request's path through the gateway, file by file (the modules are
//! declared in this order). Only what the binary, the examples and tests
//! need is public: [`config`], [`cli`], [`server`], [`embedded`] and
//! [`upstream`].
//!
//! 1. `accept`: the listener, the connection cap, the TLS handshake, HTTP/1.x
//!    (the gateway's own `engine`, which refuses ambiguous framing before
//!    anything else sees a request) or HTTP/2 (hyper); `activity`: the
//!    header and idle timeouts of each connection.
//! 2. `data_plane`: the per-connection service, one request's pipeline
//!    (the fencing layer around the proxy); `inbound`: the request itself,
//!    its head as its server gave it (the engine's fields where they were
//!    read); `exchange`: one request's typed
//!    record (start, connection, outcome, access-log entry), carried from
//!    arrival to the response body's end; `body`: every body wrapper, by
//!    direction; `deadlines`: every deadline of a request (connect, response
//!    head, body stalls both ways).
//!    `custody` (credential custody, when configured): the client
//!    authenticated and every object it reaches authorised, before
//!    anything else; the store's signature added in `proxy`. `s3_hosts`:
//!    the bucket an S3 store reads out of a host (`--s3-domain`), with
//!    custody or without.
//! 3. The fencing layer ([`crate::fencing`]): token, key, admission.
//! 4. `proxy`, with `engine` (HTTP/1.1 to the backend, in the request's own
//!    task; a head written from the client's lines with the gateway's
//!    edits), `hop` (hop-by-hop hygiene over field lines, both ways), `pool` (idle backend connections) and
//!    `tls` (both sides' certificates); [`upstream`] is the backend URL,
//!    parsed once.
//! 5. `outcome` and `metrics`: what happened, counted; `access_log`: one
//!    line per request, if asked for.
//!
//! Beside it: `admin` (`/fences`, admin writes, `/audit`, `/metrics`,
//! `/healthz`, `/readyz`, bearer authentication), [`embedded`] (the object
//! store used when no upstream is given), [`config`] (what a gateway runs
//! with) and [`cli`] (the command line that builds it), and [`server`],
//! which wires them and stops them.

// In the order above (not alphabetical).
mod accept;
mod activity;

mod clock;

mod error;

mod data_plane;

mod inbound;

mod exchange;

mod custody;

mod s3_hosts;

mod body;

mod deadlines;

mod proxy;

mod routes;

mod cross_route;

mod generations;

mod version_head;

mod hop;

mod engine;

mod pool;

mod tls;

pub mod upstream;

mod outcome;

mod metrics;

mod access_log;

mod admin;

pub mod embedded;

pub mod config;

pub mod cli;

pub mod config_file;

pub mod server;

mod route_build;

mod reload;

pub use self::admin::AdminTokenError;

/// The boxed error of a body or a connection.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub use self::config::{
    AccessLogTarget, ClientLimits, Config, EtcdConfig, PasswordSource, StateKind, TlsFiles,
};
pub use self::reload::{ConfigReloader, ReloadError};
pub use self::server::{run, Gateway, Listeners, StartError, TlsReloader};
pub use self::tls::TlsError;
