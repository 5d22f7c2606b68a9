//! `etcd://host:port[,host:port...][/KEY]`: tokens that are etcd revisions,
//! such as the create revision of a `concurrency.Mutex` key. `etcds://` is
//! the same over TLS; `user@` before the hosts authenticates as that etcd
//! user with the password given beside the URL.

use std::sync::Arc;

use super::access::{IssuerUrlError, ServiceAccess};
use super::cached::AskFuture;
use super::BoundSource;
use crate::client_tls::{ClientTls, TlsError};
use crate::etcd_http::{b64, int, Client};

/// The cluster's current revision, read through etcd's HTTP/JSON gateway
/// (`POST /v3/kv/range`, linearizable by default): every revision committed
/// before the question is at most the answer. Members are tried in turn.
///
/// The range read is of one key, the URL's path (`/KEY`, its `/`
/// included; default `"\0"`),
/// count only: its answer's header carries the store's revision whatever
/// the key. With etcd's authentication on, the user needs read permission
/// on that key and nothing else.
pub struct EtcdRevision {
    client: Client,
    key: String,
    tls: Option<Arc<ClientTls>>,
}

impl std::fmt::Debug for EtcdRevision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdRevision")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl EtcdRevision {
    /// Parses `etcd[s]://host:port[,host:port...][/KEY]` (the user already
    /// taken out into `access`).
    pub(crate) fn from_url(url: &str, access: &ServiceAccess) -> Result<Self, IssuerUrlError> {
        let secure = url.starts_with("etcds://");
        let scheme = if secure { "https" } else { "http" };
        let endpoints: Vec<String> = super::access::hosts(url)?
            .into_iter()
            .map(|host| format!("{scheme}://{host}"))
            .collect();
        let key = match url
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('/'))
        {
            // The URL's path, its leading '/' included: etcd keys are
            // usually written so.
            Some((_, key)) if !key.is_empty() => {
                let key = percent_encoding::percent_decode_str(key)
                    .decode_utf8()
                    .map_err(|_| IssuerUrlError::new(url, "KEY is not UTF-8"))?;
                format!("/{key}")
            }
            _ => "\0".to_owned(),
        };
        let tls = if secure {
            Some(
                ClientTls::load(access.tls.clone(), &[])
                    .map_err(|e| IssuerUrlError::new(url, e.to_string()))?,
            )
        } else {
            access.refuse_tls(url, "etcds://")?;
            None
        };
        let credentials = access.credentials(url)?.cloned();
        let client = Client::new(&endpoints, tls.clone(), credentials)
            .map_err(|e| IssuerUrlError::new(url, e.to_string()))?;
        Ok(EtcdRevision { client, key, tls })
    }

    async fn revision(&self) -> Result<u64, String> {
        let request = serde_json::json!({ "key": b64(&self.key), "count_only": true });
        let answer = self
            .client
            .call("/v3/kv/range", &request)
            .await
            .map_err(|e| format!("etcd: {e}"))?;
        let revision = int(&answer["header"]["revision"]);
        u64::try_from(revision)
            .ok()
            .filter(|r| *r > 0)
            .ok_or_else(|| format!("etcd: no revision in {answer}"))
    }
}

impl BoundSource for EtcdRevision {
    fn counter(&self, _key: &str) -> Option<String> {
        None
    }

    fn ask<'a>(&'a self, _counter: Option<&'a str>) -> AskFuture<'a> {
        Box::pin(self.revision())
    }

    fn reload_tls(&self) -> Result<(), TlsError> {
        self.tls.as_ref().map_or(Ok(()), |tls| tls.reload())
    }
}
