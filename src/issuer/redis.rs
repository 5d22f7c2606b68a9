//! `redis://host:port/KEY`: the counter a Redis lock `INCR`s at every grant.

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

use super::cached::AskFuture;
use super::{BoundSource, IssuerUrlError};

/// A Redis counter read with `GET`, one per lock when its name contains
/// `{key}` (replaced by the fence key).
pub struct RedisCounter {
    client: redis::Client,
    key: String,
    /// Made at the first question, and again after a failed one.
    connection: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

impl std::fmt::Debug for RedisCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCounter")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl RedisCounter {
    /// Parses `redis://[user:password@]host:port/KEY` (`KEY` percent-encoded).
    pub fn from_url(url: &str) -> Result<Self, IssuerUrlError> {
        let rest = url
            .strip_prefix("redis://")
            .ok_or_else(|| IssuerUrlError::new(url, "expected redis://host:port/KEY"))?;
        let (authority, key) = rest
            .split_once('/')
            .ok_or_else(|| IssuerUrlError::new(url, "expected redis://host:port/KEY: no KEY"))?;
        let key = percent_encoding::percent_decode_str(key)
            .decode_utf8()
            .map_err(|_| IssuerUrlError::new(url, "KEY is not UTF-8"))?
            .into_owned();
        if key.is_empty() || authority.is_empty() {
            return Err(IssuerUrlError::new(url, "expected redis://host:port/KEY"));
        }
        let client = redis::Client::open(format!("redis://{authority}"))
            .map_err(|e| IssuerUrlError::new(url, e.to_string()))?;
        Ok(RedisCounter {
            client,
            key,
            connection: tokio::sync::Mutex::new(None),
        })
    }

    async fn get(&self, counter: &str) -> Result<u64, String> {
        let mut connection = {
            let mut cached = self.connection.lock().await;
            match &*cached {
                Some(connection) => connection.clone(),
                None => {
                    let connection = self
                        .client
                        .get_multiplexed_async_connection()
                        .await
                        .map_err(|e| format!("redis: {e}"))?;
                    *cached = Some(connection.clone());
                    connection
                }
            }
        };
        let value: Result<Option<u64>, _> = connection.get(counter).await;
        match value {
            Ok(value) => Ok(value.unwrap_or(0)),
            Err(error) => {
                if error.is_io_error() || error.is_connection_dropped() {
                    *self.connection.lock().await = None;
                }
                Err(format!("redis GET {counter}: {error}"))
            }
        }
    }
}

impl BoundSource for RedisCounter {
    fn counter(&self, key: &str) -> Option<String> {
        self.key
            .contains("{key}")
            .then(|| self.key.replace("{key}", key))
    }

    fn ask<'a>(&'a self, counter: Option<&'a str>) -> AskFuture<'a> {
        Box::pin(self.get(counter.unwrap_or(&self.key)))
    }
}
