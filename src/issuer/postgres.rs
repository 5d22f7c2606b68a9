//! `postgres://user@host:port/db?sequence=NAME`: a sequence that hands out
//! the tokens (`nextval` at every grant).

use tokio_postgres::{Client, NoTls};

use super::cached::AskFuture;
use super::{BoundSource, IssuerUrlError};

/// A PostgreSQL sequence, read with `pg_sequence_last_value` (PostgreSQL 10
/// or later): the name goes in as a parameter, never into the SQL text.
pub struct PostgresSequence {
    config: tokio_postgres::Config,
    sequence: String,
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
    /// Parses the URL; `sequence=NAME` is taken out of its query, the rest
    /// is a libpq-style connection URL.
    pub fn from_url(url: &str) -> Result<Self, IssuerUrlError> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut sequence = None;
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
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
        Ok(PostgresSequence {
            config,
            sequence,
            client: tokio::sync::Mutex::new(None),
        })
    }

    async fn last_value(&self) -> Result<u64, String> {
        // Questions are asked one at a time (CachedIssuer), so holding the
        // lock across the query costs nothing.
        let mut client = self.client.lock().await;
        if client.as_ref().is_none_or(Client::is_closed) {
            let (fresh, connection) = self
                .config
                .connect(NoTls)
                .await
                .map_err(|e| format!("postgres: {e}"))?;
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::warn!(%error, "token issuer: postgres connection closed");
                }
            });
            *client = Some(fresh);
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

impl BoundSource for PostgresSequence {
    fn counter(&self, _key: &str) -> Option<String> {
        None
    }

    fn ask<'a>(&'a self, _counter: Option<&'a str>) -> AskFuture<'a> {
        Box::pin(self.last_value())
    }
}
