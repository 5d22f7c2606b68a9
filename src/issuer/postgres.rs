//! `postgres://user@host:port/db?sequence=NAME`: a sequence that hands out
//! the tokens (`nextval` at every grant). With `sslmode=verify-full` the
//! connection is TLS, the server's certificate and name verified (the CA
//! from `--token-issuer-ca` or `sslrootcert=FILE`); the user's password is
//! given beside the URL.

use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, NoTls};

use super::access::{IssuerUrlError, ServiceAccess};
use super::cached::AskFuture;
use super::BoundSource;
use crate::client_tls::ClientTlsFiles;

/// A PostgreSQL sequence, read with `pg_sequence_last_value` (PostgreSQL 10
/// or later): the name goes in as a parameter, never into the SQL text.
pub struct PostgresSequence {
    config: tokio_postgres::Config,
    sequence: String,
    /// `sslmode=verify-full`: the files, read at each connection.
    tls: Option<ClientTlsFiles>,
    /// Made at the first question, and again once it broke.
    client: tokio::sync::Mutex<Option<Client>>,
}

impl std::fmt::Debug for PostgresSequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSequence")
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

impl PostgresSequence {
    /// Parses the URL; `sequence=NAME`, `sslmode` and `sslrootcert` are
    /// taken out of its query, the rest is a libpq-style connection URL
    /// (the user already taken out into `access`).
    pub(crate) fn from_url(url: &str, access: &ServiceAccess) -> Result<Self, IssuerUrlError> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut sequence = None;
        let mut ssl_mode = None;
        let mut root_cert = None;
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sslmode", mode)) => ssl_mode = Some(mode),
                Some(("sslrootcert", path)) => {
                    let path = percent_encoding::percent_decode_str(path)
                        .decode_utf8()
                        .map_err(|_| IssuerUrlError::new(url, "sslrootcert is not UTF-8"))?;
                    root_cert = Some(std::path::PathBuf::from(path.into_owned()));
                }
                Some(("sequence", name)) => {
                    let name = percent_encoding::percent_decode_str(name)
                        .decode_utf8()
                        .map_err(|_| IssuerUrlError::new(url, "sequence is not UTF-8"))?;
                    sequence = Some(name.into_owned());
                }
                _ => rest.push(pair),
            }
        }
        let sequence = sequence
            .filter(|s| !s.is_empty())
            .ok_or_else(|| IssuerUrlError::new(url, "expected ?sequence=NAME"))?;
        let connect = if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let mut config: tokio_postgres::Config = connect
            .parse()
            .map_err(|e: tokio_postgres::Error| IssuerUrlError::new(url, e.to_string()))?;
        config.connect_timeout(super::ASK_TIMEOUT);
        if let Some(credentials) = access.credentials.as_ref() {
            config.user(&credentials.user);
            if !credentials.password.expose().is_empty() {
                config.password(credentials.password.expose());
            }
        }
        let tls = match ssl_mode {
            Some("verify-full") => {
                let mut files = access.tls.clone();
                if let Some(path) = root_cert {
                    if files.ca.is_some() {
                        return Err(IssuerUrlError::new(
                            url,
                            "sslrootcert and --token-issuer-ca both name a CA: give one",
                        ));
                    }
                    files.ca = Some(path);
                }
                // Read once now: a bad file is a start error, not a 503 later.
                files
                    .config(&[])
                    .map_err(|e| IssuerUrlError::new(url, e.to_string()))?;
                config.ssl_mode(SslMode::Require);
                Some(files)
            }
            None | Some("disable") => {
                access.refuse_tls(url, "sslmode=verify-full")?;
                if root_cert.is_some() {
                    return Err(IssuerUrlError::new(url, "sslrootcert needs sslmode=verify-full"));
                }
                config.ssl_mode(SslMode::Disable);
                None
            }
            Some(other) => {
                return Err(IssuerUrlError::new(
                    url,
                    format!(
                        "sslmode={other} is not supported: fencegate verifies the server's certificate and name (sslmode=verify-full) or speaks plaintext (sslmode=disable), never TLS without verification"
                    ),
                ))
            }
        };
        Ok(PostgresSequence {
            config,
            sequence,
            tls,
            client: tokio::sync::Mutex::new(None),
        })
    }

    async fn last_value(&self) -> Result<u64, String> {
        // Questions are asked one at a time (CachedIssuer), so holding the
        // lock across the query costs nothing.
        let mut client = self.client.lock().await;
        if client.as_ref().is_none_or(Client::is_closed) {
            *client = Some(self.connect().await?);
        }
        let Some(connected) = client.as_ref() else {
            return Err("postgres: not connected".to_owned());
        };
        let row = connected
            .query_one(
                "SELECT pg_sequence_last_value($1::text::regclass)",
                &[&self.sequence],
            )
            .await
            .map_err(|e| format!("postgres: sequence {}: {e}", self.sequence))?;
        // NULL: the sequence has handed out nothing yet.
        let value: Option<i64> = row
            .try_get(0)
            .map_err(|e| format!("postgres: sequence {}: {e}", self.sequence))?;
        Ok(value.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
    }
}

impl PostgresSequence {
    /// A new connection, its driver spawned; over TLS with the files read
    /// now, so that a renewed certificate is used from the next connection.
    async fn connect(&self) -> Result<Client, String> {
        let failed = |e: tokio_postgres::Error| match std::error::Error::source(&e) {
            Some(cause) => format!("postgres: {e}: {cause}"),
            None => format!("postgres: {e}"),
        };
        let (client, driver) = match &self.tls {
            Some(files) => {
                let config = files
                    .config(&[])
                    .map_err(|e| format!("postgres: TLS: {e}"))?;
                let tls = tokio_postgres_rustls::MakeRustlsConnect::new(config);
                let (client, connection) = self.config.connect(tls).await.map_err(failed)?;
                (client, tokio::spawn(drive(connection)))
            }
            None => {
                let (client, connection) = self.config.connect(NoTls).await.map_err(failed)?;
                (client, tokio::spawn(drive(connection)))
            }
        };
        drop(driver);
        Ok(client)
    }
}

/// Runs a connection until it closes.
async fn drive<F>(connection: F)
where
    F: std::future::Future<Output = Result<(), tokio_postgres::Error>>,
{
    if let Err(error) = connection.await {
        tracing::warn!(%error, "token issuer: postgres connection closed");
    }
}

impl BoundSource for PostgresSequence {
    fn counter(&self, _key: &str) -> Option<String> {
        None
    }

    fn ask<'a>(&'a self, _counter: Option<&'a str>) -> AskFuture<'a> {
        Box::pin(self.last_value())
    }
}
