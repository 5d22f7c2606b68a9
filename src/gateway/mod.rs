//! The gateway (feature `gateway`): the fencing layer in front of a reverse
//! proxy, plus the admin plane and the embedded backend. The binary in
//! `src/main.rs` only parses the command line and calls [`Gateway::start`].
//!
//! - [`config`]: the command line and `FENCEGATE_*` variables.
//! - [`upstream`]: the backend URL, parsed once.
//! - [`proxy`] and [`hop`]: forwarding, with header hygiene; `pool`: its idle
//!   upstream connections.
//! - [`embedded`]: the object store used when no upstream is given.
//! - [`admin`] and [`metrics`]: `/fences`, `/metrics`, `/healthz`.
//! - [`data_plane`]: the per-connection service: metrics, fencing, proxy.
//! - [`server`]: wiring and graceful shutdown.

pub mod admin;
pub mod config;
pub mod data_plane;
pub mod embedded;
pub mod hop;
pub mod metrics;
mod pool;
pub mod proxy;
pub mod server;
pub mod upstream;

pub use self::config::Config;
pub use self::server::{Gateway, StartError};
