//! `zookeeper://host:port[,host:port...]`: tokens that are zxids, such as
//! the `czxid` of a Curator lock node.

use zookeeper_client as zk;

use super::cached::AskFuture;
use super::{BoundSource, IssuerUrlError};

/// The node written for each question.
pub const PROBE_NODE: &str = "/fencegate-issuer";

/// The ensemble's last zxid, read as the zxid of a write made for the
/// question: ZooKeeper orders writes through its leader, so every zxid
/// committed before the question (every lock node a client could have read
/// its token from) is below the write's. The client library does not expose
/// the session's last seen zxid, and a read's `Stat` only tells about the
/// node read; one small write per question (the cache makes questions rare)
/// is the exact answer. Needs write access to [`PROBE_NODE`].
pub struct ZookeeperZxid {
    cluster: String,
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
    /// Parses `zookeeper://host:port[,host:port...]`.
    pub fn from_url(url: &str) -> Result<Self, IssuerUrlError> {
        let hosts = super::url::hosts(url)?;
        Ok(ZookeeperZxid {
            cluster: hosts.join(","),
            client: tokio::sync::Mutex::new(None),
        })
    }

    async fn last_zxid(&self) -> Result<u64, String> {
        let mut client = self.client.lock().await;
        let connected = match &*client {
            Some(connected) if !connected.state().is_terminated() => connected.clone(),
            _ => {
                let fresh = zk::Client::connector()
                    .with_connection_timeout(super::ASK_TIMEOUT)
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
                let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
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
