//! `--token-issuer URL`: which lock service, and where its counter is.

use super::{BoundSource, CachedIssuer};

/// The issuer a URL names, behind the cache.
pub type UrlIssuer = CachedIssuer<Box<dyn BoundSource>>;

/// A `--token-issuer` URL that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--token-issuer {url}: {detail}")]
pub struct IssuerUrlError {
    url: String,
    detail: String,
}

impl IssuerUrlError {
    pub(crate) fn new(url: &str, detail: impl Into<String>) -> Self {
        IssuerUrlError {
            url: url.to_owned(),
            detail: detail.into(),
        }
    }
}

/// The issuer for `url`, as the contract lists them:
///
/// | URL | the bound |
/// |---|---|
/// | `redis://host:port/KEY` | `GET KEY`; `{key}` in `KEY` is replaced by the fence key |
/// | `etcd://host:port[,host:port...]` | the cluster's current revision |
/// | `postgres://user@host:port/db?sequence=NAME` | the sequence's last value |
/// | `zookeeper://host:port[,host:port...]` | the zxid of a write made for the question |
///
/// Nothing is connected yet: the first question connects, so that a lock
/// service that is down at start makes raises fail (503), not the gateway.
///
/// ```
/// # #[cfg(feature = "issuer-redis")] {
/// let issuer = fencegate::issuer::from_url("redis://127.0.0.1:6379/locks:{key}:counter").unwrap();
/// assert_eq!(issuer.source().counter("/bucket/a").as_deref(), Some("locks:/bucket/a:counter"));
/// # }
/// assert!(fencegate::issuer::from_url("ftp://example.com/x").is_err());
/// ```
#[cfg_attr(
    not(any(
        feature = "issuer-redis",
        feature = "issuer-etcd",
        feature = "issuer-postgres",
        feature = "issuer-zookeeper"
    )),
    allow(unreachable_code, unused_variables)
)]
pub fn from_url(url: &str) -> Result<UrlIssuer, IssuerUrlError> {
    let (scheme, _) = url
        .split_once("://")
        .ok_or_else(|| IssuerUrlError::new(url, "expected scheme://..."))?;
    let source: Box<dyn BoundSource> = match scheme {
        #[cfg(feature = "issuer-redis")]
        "redis" => Box::new(super::redis::RedisCounter::from_url(url)?),
        #[cfg(feature = "issuer-etcd")]
        "etcd" => Box::new(super::etcd::EtcdRevision::from_url(url)?),
        #[cfg(feature = "issuer-postgres")]
        "postgres" | "postgresql" => Box::new(super::postgres::PostgresSequence::from_url(url)?),
        #[cfg(feature = "issuer-zookeeper")]
        "zookeeper" => Box::new(super::zookeeper::ZookeeperZxid::from_url(url)?),
        other => {
            return Err(IssuerUrlError::new(
                url,
                format!(
                    "unknown or not compiled-in issuer {other:?} (redis, etcd, postgres, zookeeper)"
                ),
            ))
        }
    };
    Ok(CachedIssuer::new(source))
}

/// `host:port[,host:port...]` after the scheme, up to a `/` or `?`.
#[cfg(any(feature = "issuer-etcd", feature = "issuer-zookeeper"))]
pub(crate) fn hosts(url: &str) -> Result<Vec<String>, IssuerUrlError> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let hosts: Vec<String> = authority
        .split(',')
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect();
    if hosts.is_empty() || hosts.iter().any(|h| !h.contains(':')) {
        return Err(IssuerUrlError::new(
            url,
            "expected host:port[,host:port...]",
        ));
    }
    Ok(hosts)
}
