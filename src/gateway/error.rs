//! The gateway's errors at start and at reload: values on the bottom
//! floor, so that the wiring (`server.rs`), the route build
//! (`route_build.rs`), the reloader and the admin plane's token reader
//! all name them without importing each other.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::config::AccessLogTarget;
use crate::client_tls::TlsError;
use crate::store::StoreError;

/// Why the gateway could not start. Each is one clear line for the user.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The fence store could not be opened (unreadable, corrupt, locked by
    /// another gateway).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The embedded backend's object directory could not be created.
    #[error("cannot use data dir {}: {source}", path.display())]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({plane}): {source}")]
    Bind {
        /// Which listener.
        plane: &'static str,
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The certificate, key or upstream CA bundle cannot be used.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// The access log file could not be opened.
    #[error("cannot open the access log {target:?}: {source}")]
    AccessLog {
        /// Where it was to go.
        target: AccessLogTarget,
        /// Why.
        source: std::io::Error,
    },
    /// The admin token file cannot be used.
    #[error(transparent)]
    AdminToken(#[from] AdminTokenError),
    /// The `--token-issuer` URL cannot be used.
    #[error(transparent)]
    Issuer(#[from] crate::issuer::IssuerUrlError),
    /// `--state etcd` without what it needs.
    #[error("--state etcd: {0}")]
    Etcd(String),
    /// `--conditional-writes` cannot work with the rest of the
    /// configuration.
    #[error("--conditional-writes: {0}")]
    Chain(String),
    /// Routes that share a fence namespace key it differently.
    #[error("fence namespaces: {0}")]
    Namespace(String),
    /// Credential custody's options or files are wrong.
    #[error("credential custody: {0}")]
    Custody(String),
    /// The embedded backend's address did not form an upstream URL.
    #[error("embedded backend: {0}")]
    Embedded(String),
}

/// Why the token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AdminTokenError {
    /// It cannot be read.
    #[error("cannot read the admin token file {path}: {source}")]
    Unreadable {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// It holds nothing but whitespace, or what it holds cannot be a bearer
    /// token.
    #[error("the admin token file {path} {problem}")]
    Unusable {
        /// The file.
        path: String,
        /// What is wrong.
        problem: &'static str,
    },
}
