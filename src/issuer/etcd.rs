//! `etcd://host:port[,host:port...]`: tokens that are etcd revisions, such
//! as the create revision of a `concurrency.Mutex` key.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::cached::AskFuture;
use super::{BoundSource, IssuerUrlError};

/// The cluster's current revision, read through etcd's HTTP/JSON gateway
/// (`POST /v3/kv/range`, linearizable by default): every revision committed
/// before the question is at most the answer. Members are tried in order.
pub struct EtcdRevision {
    endpoints: Vec<String>,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for EtcdRevision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdRevision")
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

impl EtcdRevision {
    /// Parses `etcd://host:port[,host:port...]`.
    pub fn from_url(url: &str) -> Result<Self, IssuerUrlError> {
        let endpoints = super::url::hosts(url)?
            .into_iter()
            .map(|host| format!("http://{host}/v3/kv/range"))
            .collect();
        Ok(EtcdRevision {
            endpoints,
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    async fn revision(&self) -> Result<u64, String> {
        let mut errors = Vec::new();
        for endpoint in &self.endpoints {
            match self.ask_member(endpoint).await {
                Ok(revision) => return Ok(revision),
                Err(error) => errors.push(format!("{endpoint}: {error}")),
            }
        }
        Err(format!("etcd: {}", errors.join("; ")))
    }

    async fn ask_member(&self, endpoint: &str) -> Result<u64, String> {
        // Any key will do: the header carries the store's revision. "\0",
        // base64, with count_only so that nothing is sent back.
        let request = http::Request::post(endpoint)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from_static(
                br#"{"key":"AA==","count_only":true}"#,
            )))
            .map_err(|e| e.to_string())?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
        }
        let json: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        // 64-bit numbers come as strings in etcd's JSON.
        json["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| format!("no revision in {json}"))
    }
}

impl BoundSource for EtcdRevision {
    fn counter(&self, _key: &str) -> Option<String> {
        None
    }

    fn ask<'a>(&'a self, _counter: Option<&'a str>) -> AskFuture<'a> {
        Box::pin(self.revision())
    }
}
