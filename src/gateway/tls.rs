//! TLS on both sides, with rustls and its `ring` provider: the certificate
//! the gateway serves to its clients (re-read on demand, so that `SIGHUP`
//! renews it without dropping a connection), and the client configuration
//! that reaches an `https://` backend.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::config::TlsFiles;

/// Why a certificate, key or CA bundle could not be used. One line each.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no PEM item of the kind expected.
    #[error("{}: {detail}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// The private key does not belong to the certificate, or rustls
    /// refused the pair.
    #[error("{} and {}: {detail}", cert.display(), key.display())]
    Pair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why they do not go together.
        detail: String,
    },
    /// No trusted CA certificate could be found for an `https://` upstream.
    #[error("no CA certificates to verify the upstream with: {0}")]
    NoRoots(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The crypto provider used on both sides, chosen explicitly rather than
/// through a process-wide default: `ring` builds with the C compiler alone.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate served on both planes. [`ServerCert::reload`] swaps it
/// for connections accepted afterwards; connections already up keep theirs.
pub struct ServerCert {
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
    pub fn load(files: &TlsFiles) -> Result<Arc<ServerCert>, TlsError> {
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
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = certified_key(&self.files, &self.provider)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
        Ok(())
    }

    /// An acceptor offering HTTP/2 and HTTP/1.1 by ALPN, serving whatever
    /// certificate is current at each handshake.
    pub fn acceptor(self: &Arc<Self>) -> Result<TlsAcceptor, TlsError> {
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
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| TlsError::File {
        path: files.key.clone(),
        detail: format!("no usable PEM private key: {e}"),
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| TlsError::Pair {
        cert: files.cert.clone(),
        key: files.key.clone(),
        detail: e.to_string(),
    })
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_error = |detail: String| TlsError::File {
        path: path.to_owned(),
        detail,
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(format!("cannot read: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(format!("bad PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(file_error("no PEM certificate in it".into()));
    }
    Ok(certificates)
}

/// The connector for an `https://` backend: HTTP/1.1 by ALPN, the backend
/// verified against `ca` (a PEM bundle) if given, else the system's roots.
pub(crate) fn upstream_connector(ca: Option<&Path>) -> Result<TlsConnector, TlsError> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(path) => {
            for certificate in read_certificates(path)? {
                roots.add(certificate).map_err(|e| TlsError::File {
                    path: path.to_owned(),
                    detail: format!("not a CA certificate: {e}"),
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found.errors.first().map_or_else(
                    || "the system store is empty".to_owned(),
                    ToString::to_string,
                );
                return Err(TlsError::NoRoots(format!(
                    "{why} (install ca-certificates, or pass --upstream-ca)"
                )));
            }
        }
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}
