//! TLS on both sides, with rustls and its `ring` provider: the certificate
//! the gateway serves to its clients (re-read on demand, so that `SIGHUP`
//! renews it without dropping a connection), and the client configuration
//! that reaches an `https://` backend.

use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio_rustls::{TlsAcceptor, TlsConnector};

pub use crate::client_tls::TlsError;
use crate::client_tls::{provider, read_certificates, read_key, ClientTlsFiles};

use super::config::TlsFiles;

/// The certificate served on both planes. [`ServerCert::reload`] swaps it
/// for connections accepted afterwards; connections already up keep theirs.
pub(crate) struct ServerCert {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    /// Read once per handshake, written once per reload.
    current: RwLock<Arc<CertifiedKey>>,
}

impl std::fmt::Debug for ServerCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerCert")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ServerCert {
    /// Loads the certificate chain and its key; a missing, unreadable or
    /// mismatched pair is an error.
    pub(crate) fn load(files: &TlsFiles) -> Result<Arc<ServerCert>, TlsError> {
        let provider = provider();
        let current = certified_key(files, &provider)?;
        Ok(Arc::new(ServerCert {
            files: files.clone(),
            provider,
            current: RwLock::new(Arc::new(current)),
        }))
    }

    /// Reads both files again. On success new connections get the new
    /// certificate; on error the old one stays in use.
    pub(crate) fn reload(&self) -> Result<(), TlsError> {
        let fresh = certified_key(&self.files, &self.provider)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
        Ok(())
    }

    /// An acceptor offering HTTP/2 and HTTP/1.1 by ALPN, serving whatever
    /// certificate is current at each handshake.
    pub(crate) fn acceptor(self: &Arc<Self>) -> Result<TlsAcceptor, TlsError> {
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

impl ResolvesServerCert for ServerCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self.current.read().unwrap_or_else(PoisonError::into_inner),
        ))
    }
}

fn certified_key(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let chain = read_certificates(&files.cert)?;
    let key = read_key(&files.key)?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| TlsError::Pair {
        cert: files.cert.clone(),
        key: files.key.clone(),
        detail: e.to_string(),
    })
}

/// The connector for an `https://` backend: HTTP/1.1 by ALPN, the backend
/// verified against `ca` (a PEM bundle) if given, else the system's roots.
pub(crate) fn upstream_connector(ca: Option<&Path>) -> Result<TlsConnector, TlsError> {
    let files = ClientTlsFiles {
        ca: ca.map(Path::to_path_buf),
        ..ClientTlsFiles::default()
    };
    Ok(TlsConnector::from(Arc::new(files.config(&[b"http/1.1"])?)))
}
