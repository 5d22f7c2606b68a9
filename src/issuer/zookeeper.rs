//! `zookeeper://host:port[,host:port...]`: tokens that are zxids, such as
//! the `czxid` of a Curator lock node. `user@` before the hosts
//! authenticates with ZooKeeper's `digest` scheme (the password given beside
//! the URL). No TLS: the client crate's TLS builds rustls with the aws-lc-rs
//! provider (cmake, minutes of build); see docs/SHARED.md, "Security".

use zookeeper_client as zk;

use super::access::{IssuerUrlError, ServiceAccess};
use super::cached::AskFuture;
use super::BoundSource;
use crate::client_tls::Credentials;

/// The node written for each question.
pub const PROBE_NODE: &str = "/fencegate-issuer";

/// The ensemble's last zxid, read as the zxid of a write made for the
/// question: ZooKeeper orders writes through its leader, so every zxid
/// committed before the question (every lock node a client could have read
/// its token from) is below the write's. The client library does not expose
/// the session's last seen zxid, and a read's `Stat` only tells about the
/// node read; one small write per question (the cache makes questions rare)
/// is the exact answer. Needs write access to [`PROBE_NODE`]; the gateway
/// creates it if it is missing, readable and writable by anyone, or by the
/// digest user alone when one is given.
pub struct ZookeeperZxid {
    cluster: String,
    credentials: Option<Credentials>,
    /// Made at the first question, and again once it broke.
    client: tokio::sync::Mutex<Option<zk::Client>>,
}

impl std::fmt::Debug for ZookeeperZxid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZookeeperZxid")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl ZookeeperZxid {
    /// Parses `zookeeper://host:port[,host:port...]` (the user already
    /// taken out into `access`).
    pub(crate) fn from_url(url: &str, access: &ServiceAccess) -> Result<Self, IssuerUrlError> {
        let hosts = super::access::hosts(url)?;
        if !access.tls.is_default() {
            return Err(IssuerUrlError::new(
                url,
                "TLS to ZooKeeper is not supported (docs/SHARED.md, \"Security\")",
            ));
        }
        Ok(ZookeeperZxid {
            cluster: hosts.join(","),
            credentials: access.credentials(url)?.cloned(),
            client: tokio::sync::Mutex::new(None),
        })
    }

    async fn last_zxid(&self) -> Result<u64, String> {
        let mut client = self.client.lock().await;
        let connected = match &*client {
            Some(connected) if !connected.state().is_terminated() => connected.clone(),
            _ => {
                let mut connector =
                    zk::Client::connector().with_connection_timeout(super::ASK_TIMEOUT);
                if let Some(credentials) = &self.credentials {
                    let digest = format!("{}:{}", credentials.user, credentials.password.expose());
                    connector = connector.with_auth("digest", digest.as_bytes());
                }
                let fresh = connector
                    .connect(&self.cluster)
                    .await
                    .map_err(|e| format!("zookeeper: {e}"))?;
                *client = Some(fresh.clone());
                fresh
            }
        };
        drop(client);
        let stat = match connected.set_data(PROBE_NODE, b"", None).await {
            Err(zk::Error::NoNode) => {
                let acls = if self.credentials.is_some() {
                    zk::Acls::creator_all()
                } else {
                    zk::Acls::anyone_all()
                };
                let persistent = zk::CreateMode::Persistent.with_acls(acls);
                match connected.create(PROBE_NODE, b"", &persistent).await {
                    Ok((stat, _)) => Ok(stat),
                    // Made meanwhile by another gateway: write it.
                    Err(zk::Error::NodeExists) => connected.set_data(PROBE_NODE, b"", None).await,
                    Err(error) => Err(error),
                }
            }
            other => other,
        }
        .map_err(|e| format!("zookeeper: write {PROBE_NODE}: {e}"))?;
        Ok(u64::try_from(stat.mzxid).unwrap_or(0))
    }
}

impl BoundSource for ZookeeperZxid {
    fn counter(&self, _key: &str) -> Option<String> {
        None
    }

    fn ask<'a>(&'a self, _counter: Option<&'a str>) -> AskFuture<'a> {
        Box::pin(self.last_zxid())
    }
}
