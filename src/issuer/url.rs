//! `--token-issuer URL`: which lock service, and where its counter is.

use super::access::{split_user, IssuerAccess, IssuerUrlError, ServiceAccess};
use super::{BoundSource, CachedIssuer};
use crate::client_tls::Secret;

/// The issuer a URL names, behind the cache.
pub type UrlIssuer = CachedIssuer<Box<dyn BoundSource>>;

/// The issuer for `url`, as the contract lists them, with no TLS files and
/// no password ([`from_url_with`] takes them):
///
/// | URL | the bound |
/// |---|---|
/// | `redis://host:port/KEY` | `GET KEY`; `{key}` in `KEY` is replaced by the fence key |
/// | `etcd://host:port[,host:port...]` | the cluster's current revision |
/// | `postgres://user@host:port/db?sequence=NAME` | the sequence's last value |
/// | `zookeeper://host:port[,host:port...]` | the zxid of a write made for the question |
///
/// `rediss://` and `etcds://` are the same over TLS, as is `postgres://`
/// with `sslmode=verify-full`; `user@` before the host names the user.
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
    from_url_with(url, &IssuerAccess::default())
}

/// [`from_url`] with TLS files and a password.
///
/// ```
/// use fencegate::issuer::{from_url_with, IssuerAccess};
/// use fencegate::client_tls::Secret;
/// let access = IssuerAccess { password: Some(Secret::new("pw")), ..Default::default() };
/// # #[cfg(feature = "issuer-redis")]
/// assert!(from_url_with("rediss://fencegate@127.0.0.1:6380/locks:counter", &access).is_ok());
/// // A password in the URL is refused, and never printed back.
/// let error = from_url_with("redis://u:hunter2@127.0.0.1:6379/k", &access).unwrap_err();
/// assert!(!error.to_string().contains("hunter2"));
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
pub fn from_url_with(url: &str, access: &IssuerAccess) -> Result<UrlIssuer, IssuerUrlError> {
    let (user, bare) = split_user(url)?;
    let credentials = match (user, &access.password) {
        (Some(user), Some(password)) => Some(crate::client_tls::Credentials {
            user,
            password: password.clone(),
        }),
        (Some(user), None) => Some(crate::client_tls::Credentials {
            user,
            password: Secret::new(""),
        }),
        (None, Some(_)) => {
            return Err(IssuerUrlError::new(
                url,
                "a password is given but the URL names no user (scheme://user@host...)",
            ))
        }
        (None, None) => None,
    };
    let access = ServiceAccess {
        tls: access.tls.clone(),
        credentials,
    };
    let (scheme, _) = url
        .split_once("://")
        .ok_or_else(|| IssuerUrlError::new(url, "expected scheme://..."))?;
    let source: Box<dyn BoundSource> = match scheme {
        #[cfg(feature = "issuer-redis")]
        "redis" | "rediss" => Box::new(super::redis::RedisCounter::from_url(&bare, &access)?),
        #[cfg(feature = "issuer-etcd")]
        "etcd" | "etcds" => Box::new(super::etcd::EtcdRevision::from_url(&bare, &access)?),
        #[cfg(feature = "issuer-postgres")]
        "postgres" | "postgresql" => {
            Box::new(super::postgres::PostgresSequence::from_url(&bare, &access)?)
        }
        #[cfg(feature = "issuer-zookeeper")]
        "zookeeper" => Box::new(super::zookeeper::ZookeeperZxid::from_url(&bare, &access)?),
        other => {
            return Err(IssuerUrlError::new(
                url,
                format!(
                    "unknown or not compiled-in issuer {other:?} (redis, rediss, etcd, etcds, postgres, zookeeper)"
                ),
            ))
        }
    };
    Ok(CachedIssuer::new(source))
}
