//! `redis://host:port/KEY`: the counter a Redis lock `INCR`s at every grant.
//! `rediss://` is the same over TLS; `user@` before the host logs in as that
//! ACL user (Redis 6 or later) with the password given beside the URL.

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, IntoConnectionInfo};

use super::access::{IssuerUrlError, ServiceAccess};
use super::cached::AskFuture;
use super::BoundSource;
use crate::client_tls::{ClientTlsFiles, TlsError};

/// A Redis counter read with `GET`, one per lock when its name contains
/// `{key}` (replaced by the fence key).
pub struct RedisCounter {
    /// Rebuilt by [`BoundSource::reload_tls`]; connections already up keep
    /// their certificate.
    client: std::sync::Mutex<redis::Client>,
    info: redis::ConnectionInfo,
    /// `rediss://`: the files its certificates come from.
    tls: Option<ClientTlsFiles>,
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
    /// Parses `redis[s]://host:port/KEY` (`KEY` percent-encoded; the user
    /// already taken out into `access`).
    pub(crate) fn from_url(url: &str, access: &ServiceAccess) -> Result<Self, IssuerUrlError> {
        let (tls, rest) = match url.split_once("://") {
            Some(("redis", rest)) => (false, rest),
            Some(("rediss", rest)) => (true, rest),
            _ => return Err(IssuerUrlError::new(url, "expected redis://host:port/KEY")),
        };
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
        let scheme = if tls { "rediss" } else { "redis" };
        let mut info = format!("{scheme}://{authority}")
            .into_connection_info()
            .map_err(|e| IssuerUrlError::new(url, e.to_string()))?;
        if let Some(credentials) = access.credentials(url)? {
            let settings = info
                .redis_settings()
                .clone()
                .set_username(&credentials.user)
                .set_password(credentials.password.expose());
            info = info.set_redis_settings(settings);
        }
        if !tls {
            access.refuse_tls(url, "rediss://")?;
        }
        let tls = tls.then(|| access.tls.clone());
        let client = build_client(&info, tls.as_ref())
            .map_err(|e| IssuerUrlError::new(url, e.to_string()))?;
        Ok(RedisCounter {
            client: std::sync::Mutex::new(client),
            info,
            tls,
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
                    let client = self
                        .client
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clone();
                    let connection = client
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

    fn reload_tls(&self) -> Result<(), TlsError> {
        if self.tls.is_some() {
            let fresh = build_client(&self.info, self.tls.as_ref())?;
            *self
                .client
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
        }
        Ok(())
    }
}

/// A client of `info`, over TLS with `tls`'s files if given (read now).
fn build_client(
    info: &redis::ConnectionInfo,
    tls: Option<&ClientTlsFiles>,
) -> Result<redis::Client, TlsError> {
    let built = match tls {
        Some(files) => {
            let certificates = redis::TlsCertificates {
                client_tls: files
                    .identity_pem()?
                    .map(|identity| redis::ClientTlsConfig {
                        client_cert: identity.cert,
                        client_key: identity.key,
                    }),
                root_cert: files.ca_pem()?,
            };
            redis::Client::build_with_tls(info.clone(), certificates)
        }
        None => redis::Client::open(info.clone()),
    };
    built.map_err(|e| TlsError::Config(e.to_string()))
}
