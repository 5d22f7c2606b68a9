//! The gateway (feature `gateway`): the fencing layer in front of a reverse
//! proxy, plus the admin plane and the embedded backend. The binary in
//! `src/main.rs` only parses the command line, binds nothing itself, and
//! calls [`Gateway::start`]. Only what the binary, the examples and tests
//! need is public: [`config`], [`cli`], [`config_file`], [`server`],
//! [`embedded`] and [`upstream`].
//!
//! # Floors
//!
//! Every file of the gateway is on one floor. A file imports only from
//! its own floor or the floors below it, never from above, and nothing
//! imports in a circle (`python3 scripts/import-circles.py --floors`
//! checks both). A folder is on one floor unless one of its files is
//! named on a lower one. docs/DEVELOPING.md has the rule for where new
//! code goes, and one request's path through these files in order.
//!
//! - G5, wiring, loading and operators: `server.rs` (builds and runs a
//!   [`Gateway`], stops it), `config_file/` (the file and the command line
//!   into a [`Config`], `check-config`), `cli.rs` (the one option table),
//!   `admin/` (the admin plane), `embedded.rs` (the object store used
//!   when no upstream is given).
//! - G4, start and reload: `route_build.rs` (a route's stages from its
//!   options: `RouteConfig` -> `RouteSpec` -> `Prepared` -> `BuiltRoute`,
//!   whose `RoutePlane` the data plane serves), `reload.rs` (the
//!   reloader, the credential-file watch).
//! - G3, a connection and a request's pipeline: `accept.rs` (listener,
//!   connection cap, TLS handshake, HTTP/1.x or HTTP/2), `data_plane.rs`
//!   (the per-connection service: one request's steps in order),
//!   `generations.rs` (the routes in force, `RoutePlane`, swapped whole by
//!   a reload).
//! - G2, a request's steps: `custody/` (credential custody: the client
//!   verified and authorised, the store's signature), `s3_hosts.rs` (the
//!   bucket an S3 store reads out of a host, and S3 writes without
//!   custody), `s3_uploads.rs` (S3 upload ids bound to their object
//!   without custody, where the fences live), `azure_reading.rs` (Azure
//!   writes without custody), `exchange.rs` (one request's record and
//!   `Relayed`, the body that carries it to its end), `proxy.rs` (forwarding), `version_head.rs` (the chain's
//!   version reads through the proxy, and the conditional probe).
//! - G1, the parts a request uses: `answer.rs` (the gateway's own answers,
//!   in the route's dialect), `inbound.rs` (the request and its head as
//!   read), `custody/verified.rs` and `custody/stream.rs` (what custody
//!   hands on: who sent a request, how it goes on, the aws-chunked
//!   streams), `body/` (body wrappers, by direction), `engine/` (the
//!   gateway's HTTP/1.1, both sides), `hop.rs` (hop-by-hop hygiene),
//!   `deadlines.rs`, `activity.rs` (a connection's header and idle
//!   timeouts), `pool.rs` (idle backend connections), `tls.rs`,
//!   `metrics.rs`, `access_log.rs`.
//! - G0, plain values: `mod.rs` (`BoxError`), `config.rs` (what a gateway
//!   runs with), `upstream.rs` (the backend URL, parsed once), `error.rs`
//!   ([`StartError`], [`AdminTokenError`]), `outcome.rs` (what happened to
//!   a request), `clock.rs`, `routes.rs` (the route table),
//!   `cross_route.rs`, `custody/files.rs` (custody's tables, read),
//!   `custody/fingerprint.rs`, `custody/denied.rs` (custody's refusals).
//!
//! The fencing layer itself ([`crate::fencing`]: token, key, admission) is
//! the library's, below every floor here.

// By floor, bottom up (G0 first).
mod clock;
pub mod config;
mod cross_route;
mod error;
mod outcome;
mod routes;
pub mod upstream;

mod access_log;
mod activity;
mod answer;
mod body;
mod deadlines;
mod engine;
mod hop;
mod inbound;
mod metrics;
mod pool;
mod tls;

mod azure_reading;
mod custody;
mod exchange;
mod proxy;
mod s3_hosts;
mod s3_uploads;
mod version_head;

mod accept;
mod data_plane;
mod generations;

mod reload;
mod route_build;

mod admin;
pub mod cli;
pub mod config_file;
pub mod embedded;
pub mod server;

pub use self::admin::AdminTokenError;

/// The boxed error of a body or a connection.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub use self::config::{
    AccessLogTarget, ClientLimits, Config, EtcdConfig, PasswordSource, StateKind, TlsFiles,
};
pub use self::reload::{ConfigReloader, ReloadError};
pub use self::server::{run, Gateway, Listeners, StartError, TlsReloader};
pub use self::tls::TlsError;
