//! Certificates made for a test run (a CA and leaves it signs, written as
//! PEM files into a temporary directory, never committed), and a TLS client
//! that reports the certificate the gateway served.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};

use super::{read_response, Resp, HANG_GUARD};

/// A certificate authority made for one test, with its files in a
/// temporary directory.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: tempfile::TempDir,
    name: String,
}

/// A leaf certificate's files and its DER, to compare with what a server
/// presented.
pub struct Leaf {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub der: CertificateDer<'static>,
}

impl TestCa {
    /// A new CA named `name`; its certificate is at [`TestCa::cert_path`].
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("fencegate test CA {name}"));
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), issuer.pem()).unwrap();
        TestCa {
            issuer,
            dir,
            name: name.to_string(),
        }
    }

    /// The CA certificate, PEM.
    pub fn cert_path(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The CA certificate, DER.
    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// Issues a leaf for `names` (DNS names or IP addresses) and writes it
    /// as `<stem>.pem` and `<stem>.key` in the CA's directory.
    pub fn issue(&self, stem: &str, names: &[&str]) -> Leaf {
        self.issue_named(stem, names, Some(&format!("{stem} ({})", self.name)))
    }

    /// A client certificate with no subject at all: etcd's HTTP gateway
    /// refuses a client certificate with a common name while
    /// authentication is on.
    pub fn issue_client_without_cn(&self, stem: &str) -> Leaf {
        self.issue_named(stem, &[], None)
    }

    fn issue_named(&self, stem: &str, names: &[&str], common_name: Option<&str>) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(common_name) = common_name {
            params
                .distinguished_name
                .push(DnType::CommonName, common_name);
        }
        let key = KeyPair::generate().unwrap();
        let issuer: &rcgen::Issuer<'static, KeyPair> = &self.issuer;
        let cert = params.signed_by(&key, issuer).unwrap();
        let leaf = Leaf {
            cert: self.dir.path().join(format!("{stem}.pem")),
            key: self.dir.path().join(format!("{stem}.key")),
            der: cert.der().clone(),
        };
        std::fs::write(&leaf.cert, cert.pem()).unwrap();
        std::fs::write(&leaf.key, key.serialize_pem()).unwrap();
        leaf
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn client_config(ca: &TestCa, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// What one TLS request saw: the certificate served, the protocol agreed
/// by ALPN, and the response.
pub struct TlsExchange {
    pub served: CertificateDer<'static>,
    pub alpn: Option<Vec<u8>>,
    pub response: Resp,
}

/// Sends `raw` (an HTTP/1.1 request) over TLS to `addr`, verifying the
/// server as `server_name` against `ca`, offering h2 and http/1.1 as a
/// browser would (the server must pick http/1.1 for this client to read the
/// answer, so `alpn` offers only what the caller asks).
pub fn tls_request(
    addr: SocketAddr,
    ca: &TestCa,
    server_name: &str,
    alpn: &[&[u8]],
    raw: &[u8],
) -> std::io::Result<TlsExchange> {
    let name = ServerName::try_from(server_name.to_string()).unwrap();
    let mut connection = rustls::ClientConnection::new(client_config(ca, alpn), name)
        .map_err(std::io::Error::other)?;
    let mut socket = TcpStream::connect(addr)?;
    socket.set_read_timeout(Some(HANG_GUARD))?;
    let mut stream = rustls::Stream::new(&mut connection, &mut socket);
    stream.write_all(raw)?;
    stream.flush()?;
    let served = stream
        .conn
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|c| c.clone().into_owned())
        .ok_or_else(|| std::io::Error::other("no certificate served"))?;
    let alpn = stream.conn.alpn_protocol().map(<[u8]>::to_vec);
    let response = read_response(&mut BufReader::new(stream), raw.starts_with(b"HEAD "))?;
    Ok(TlsExchange {
        served,
        alpn,
        response,
    })
}

/// `curl` over TLS to the gateway: (status, HTTP version) as curl saw them.
pub fn curl(ca: &TestCa, version_flag: &str, args: &[&str], url: &str) -> (String, String) {
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version}",
        ])
        .args(["--max-time", "20", "--cacert"])
        .arg(ca.cert_path())
        .arg(version_flag)
        .args(args)
        .arg(url)
        .output()
        .expect("curl (scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (status, version) = text.split_once(' ').unwrap();
    (status.to_string(), version.to_string())
}
