//! The gateway (feature `gateway`): the fencing layer in front of a reverse
//! proxy, plus the admin plane and the embedded backend. The binary in
//! `src/main.rs` only parses the command line, binds nothing itself, and
//! calls [`Gateway::start`].
//!
//! A request's path through the gateway, file by file:
//!
//! 1. `accept`: the listener, the connection cap, the TLS handshake, HTTP/1.1
//!    or HTTP/2; `activity`: the header and idle timeouts of each connection.
//! 2. [`data_plane`]: the per-connection service (metrics around the fencing
//!    layer around the proxy); `body_timeout`: a request body that stalls.
//! 3. The fencing layer ([`crate::fencing`]): token, key, admission.
//! 4. [`proxy`], with [`hop`] (header hygiene), `pool` (idle backend
//!    connections) and [`tls`] (both sides' certificates); [`upstream`] is
//!    the backend URL, parsed once.
//! 5. [`outcome`] and [`metrics`]: what happened, counted; [`access_log`]:
//!    one line per request, if asked for.
//!
//! Beside it: [`admin`] (`/fences`, `/metrics`, `/healthz`, `/readyz`),
//! [`embedded`] (the object store used when no upstream is given), [`config`]
//! (what a gateway runs with) and [`cli`] (the command line that builds it),
//! and [`server`], which wires them and stops them.

mod accept;
pub mod access_log;
mod activity;
pub mod admin;
mod body_timeout;
pub mod cli;
pub mod config;
pub mod data_plane;
pub mod embedded;
pub mod hop;
pub mod metrics;
pub mod outcome;
mod pool;
pub mod proxy;
pub mod server;
pub mod tls;
pub mod upstream;

pub use self::config::{AccessLogTarget, ClientLimits, Config, StateKind, TlsFiles};
pub use self::server::{run, Gateway, Listeners, StartError};
