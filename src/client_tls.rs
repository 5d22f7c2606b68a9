//! TLS as a client, and the secrets that go with it: how the gateway reaches
//! the services its fences rest on (etcd, the token issuers) and an
//! `https://` backend.
//!
//! Certificates come from PEM files: the CAs trusted to sign the server's
//! certificate (else the system's roots), and optionally a client
//! certificate and key for mutual TLS. rustls verifies the server's chain and
//! its name (a DNS name or an IP address in the certificate) on every
//! handshake; there is no mode that skips either, so a connection that was
//! asked to be TLS is TLS with verification or fails, never plaintext.
//!
//! ```
//! use fencegate::client_tls::ClientTlsFiles;
//! // The system's roots, no client certificate: an https backend on the internet.
//! let files = ClientTlsFiles::default();
//! assert!(files.is_default());
//! // A missing CA file is one clear line.
//! let files = ClientTlsFiles { ca: Some("/nonexistent/ca.pem".into()), ..Default::default() };
//! let error = files.config(&[]).unwrap_err().to_string();
//! assert!(error.starts_with("/nonexistent/ca.pem: cannot read"), "{error}");
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

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
    /// No trusted CA certificate could be found.
    #[error("no CA certificates to verify the server with: {0}")]
    NoRoots(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The crypto provider, chosen explicitly rather than through a
/// process-wide default: `ring` builds with the C compiler alone, where
/// aws-lc-rs (rustls' default) also needs cmake and minutes of build.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The most bytes read from a secret or configuration file: far above any
/// real one, so that a path such as `/dev/zero` given by mistake ends in an
/// error rather than in all of the machine's memory.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The text of the file at `path`, refused past [`MAX_FILE_BYTES`].
///
/// ```
/// let dir = std::env::temp_dir().join(format!("fencegate-doc-{}", std::process::id()));
/// std::fs::write(&dir, "secret\n").unwrap();
/// assert_eq!(fencegate::client_tls::read_text_bounded(&dir).unwrap(), "secret\n");
/// assert!(fencegate::client_tls::read_text_bounded(std::path::Path::new("/dev/zero")).is_err());
/// # std::fs::remove_file(&dir).unwrap();
/// ```
pub fn read_text_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    let read = std::fs::File::open(path)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if read as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {} MiB", MAX_FILE_BYTES / (1024 * 1024)),
        ));
    }
    Ok(text)
}

/// Every certificate in a PEM file; none is an error.
pub(crate) fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
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

/// The private key in a PEM file.
pub(crate) fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        path: path.to_owned(),
        detail: format!("no usable PEM private key: {e}"),
    })
}

/// Where a TLS client's certificates come from (PEM files).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTlsFiles {
    /// The CAs trusted to sign the server's certificate; `None`: the
    /// system's roots.
    pub ca: Option<PathBuf>,
    /// The certificate chain shown to the server (mutual TLS), with `key`.
    pub cert: Option<PathBuf>,
    /// The private key of `cert`.
    pub key: Option<PathBuf>,
}

impl ClientTlsFiles {
    /// Whether nothing is set: the system's roots, no client certificate.
    pub fn is_default(&self) -> bool {
        self == &ClientTlsFiles::default()
    }

    /// A rustls client configuration offering `alpn` (none: no ALPN): the
    /// server verified against [`ClientTlsFiles::ca`] or the system's
    /// roots, the client certificate shown if one is set. A certificate
    /// without its key (or the reverse) is an error.
    pub fn config(&self, alpn: &[&[u8]]) -> Result<ClientConfig, TlsError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(self.roots()?);
        let mut config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(read_certificates(cert)?, read_key(key)?)
                .map_err(|e| TlsError::Pair {
                    cert: cert.clone(),
                    key: key.clone(),
                    detail: e.to_string(),
                })?,
            (None, None) => builder.with_no_client_auth(),
            (Some(_), None) | (None, Some(_)) => {
                return Err(TlsError::Config(
                    "a client certificate needs its key, and a key its certificate".into(),
                ))
            }
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(config)
    }

    /// The CA bundle as PEM text, checked to hold at least one certificate
    /// (`None`: the system's roots), for clients that take PEM bytes.
    pub fn ca_pem(&self) -> Result<Option<Vec<u8>>, TlsError> {
        let Some(path) = &self.ca else {
            return Ok(None);
        };
        read_certificates(path)?;
        std::fs::read(path).map(Some).map_err(|e| TlsError::File {
            path: path.clone(),
            detail: format!("cannot read: {e}"),
        })
    }

    /// The client certificate and key as PEM text, checked to parse, for
    /// clients that take PEM bytes.
    pub fn identity_pem(&self) -> Result<Option<PemIdentity>, TlsError> {
        let (cert, key) = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => (cert, key),
            (None, None) => return Ok(None),
            _ => {
                return Err(TlsError::Config(
                    "a client certificate needs its key, and a key its certificate".into(),
                ))
            }
        };
        read_certificates(cert)?;
        read_key(key)?;
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|e| TlsError::File {
                path: path.clone(),
                detail: format!("cannot read: {e}"),
            })
        };
        Ok(Some(PemIdentity {
            cert: read(cert)?,
            key: read(key)?,
        }))
    }

    fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore::empty();
        match &self.ca {
            Some(path) => {
                for certificate in read_certificates(path)? {
                    roots.add(certificate).map_err(|e| TlsError::File {
                        path: path.clone(),
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
                        "{why} (install ca-certificates, or name a CA file)"
                    )));
                }
            }
        }
        Ok(roots)
    }
}

/// A client certificate chain and its key, as PEM text.
#[derive(Clone)]
pub struct PemIdentity {
    /// The certificate chain, leaf first.
    pub cert: Vec<u8>,
    /// The private key.
    pub key: Vec<u8>,
}

impl std::fmt::Debug for PemIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemIdentity").finish_non_exhaustive()
    }
}

/// A client configuration that can be read again from its files (on
/// `SIGHUP`, for example) while connections use it: each new connection
/// takes the current one, connections already up keep theirs.
#[derive(Debug)]
pub struct ClientTls {
    files: ClientTlsFiles,
    alpn: Vec<Vec<u8>>,
    current: RwLock<Arc<ClientConfig>>,
    /// Bumped on every successful reload, so that a holder of a connection
    /// pool knows to build a new one.
    generation: AtomicU64,
}

impl ClientTls {
    /// Reads the files once; an unusable file is an error now, not at the
    /// first connection.
    pub fn load(files: ClientTlsFiles, alpn: &[&[u8]]) -> Result<Arc<ClientTls>, TlsError> {
        let config = files.config(alpn)?;
        Ok(Arc::new(ClientTls {
            files,
            alpn: alpn.iter().map(|p| p.to_vec()).collect(),
            current: RwLock::new(Arc::new(config)),
            generation: AtomicU64::new(0),
        }))
    }

    /// Reads the files again. On error the configuration in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let alpn: Vec<&[u8]> = self.alpn.iter().map(Vec::as_slice).collect();
        let fresh = self.files.config(&alpn)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// The configuration for a new connection, and its generation.
    pub fn current(&self) -> (u64, Arc<ClientConfig>) {
        let config = Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner));
        (self.generation.load(Ordering::Acquire), config)
    }

    /// The generation [`ClientTls::current`] would return now.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The files it reads.
    pub fn files(&self) -> &ClientTlsFiles {
        &self.files
    }
}

/// A password, or any secret: never printed. Its `Debug` and `Display`
/// show `***`; only [`Secret::expose`] gives the text, at the one place it
/// is sent.
///
/// ```
/// let secret = fencegate::client_tls::Secret::new("hunter2");
/// assert_eq!(format!("{secret:?} {secret}"), "*** ***");
/// assert_eq!(secret.expose(), "hunter2");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wraps `text`.
    pub fn new(text: impl Into<Arc<str>>) -> Self {
        Secret(text.into())
    }

    /// Reads a secret from a file: its content with the trailing line end
    /// removed. An empty file is an error.
    pub fn from_file(path: &Path) -> Result<Self, TlsError> {
        let text = read_text_bounded(path).map_err(|e| TlsError::File {
            path: path.to_owned(),
            detail: format!("cannot read: {e}"),
        })?;
        let text = text.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            return Err(TlsError::File {
                path: path.to_owned(),
                detail: "empty".into(),
            });
        }
        Ok(Secret::new(text))
    }

    /// The secret's text, to send where it is due.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// A user and password for a service (etcd, Redis, PostgreSQL, ZooKeeper).
/// The password comes from a file or the environment, never a command line
/// (every user of the machine can read those); it is never printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub user: String,
    /// The password.
    pub password: Secret,
}
