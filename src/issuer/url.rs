//! `--token-issuer URL`: which lock service, and where its counter is.

use super::{BoundSource, CachedIssuer};
use crate::client_tls::{ClientTlsFiles, Secret};

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
    /// An error about `url`, printed with any password in it masked.
    pub(crate) fn new(url: &str, detail: impl Into<String>) -> Self {
        IssuerUrlError {
            url: redacted(url),
            detail: detail.into(),
        }
    }
}

/// How to reach the lock service securely, beside its URL: TLS files (for
/// `rediss://`, `etcds://`, PostgreSQL with `sslmode=verify-full`) and the
/// password of the user the URL names (`scheme://user@host...`). Passwords
/// are never part of the URL: command lines are readable by every user of
/// the machine.
#[derive(Debug, Clone, Default)]
pub struct IssuerAccess {
    /// The CA that signs the service's certificate, and a client
    /// certificate to show it.
    pub tls: ClientTlsFiles,
    /// The password of the user in the URL.
    pub password: Option<Secret>,
}

/// `url` with the password of its user info, if any, replaced by `***`.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{hosts}{tail}")
        }
        _ => url.to_owned(),
    }
}

/// The user named in `url`'s authority (`scheme://user@host...`) and the
/// URL without it. A password in the URL is refused.
pub(crate) fn split_user(url: &str) -> Result<(Option<String>, String), IssuerUrlError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok((None, url.to_owned()));
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, hosts)) = authority.rsplit_once('@') else {
        return Ok((None, url.to_owned()));
    };
    if userinfo.contains(':') {
        return Err(IssuerUrlError::new(
            url,
            "a password in the URL is refused (command lines are readable by every user of the machine): put it in --token-issuer-password-file or FENCEGATE_TOKEN_ISSUER_PASSWORD",
        ));
    }
    let user = percent_encoding::percent_decode_str(userinfo)
        .decode_utf8()
        .map_err(|_| IssuerUrlError::new(url, "the user name is not UTF-8"))?;
    if user.is_empty() {
        return Err(IssuerUrlError::new(url, "empty user name before '@'"));
    }
    Ok((Some(user.into_owned()), format!("{scheme}://{hosts}{tail}")))
}

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
    let access = Access {
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

/// What a lock service's client needs besides its URL: TLS files, and the
/// user with a password (the user from the URL).
#[derive(Debug, Clone, Default)]
pub(crate) struct Access {
    pub(crate) tls: ClientTlsFiles,
    pub(crate) credentials: Option<crate::client_tls::Credentials>,
}

impl Access {
    /// The user and password, refusing a user without a password.
    pub(crate) fn credentials(
        &self,
        url: &str,
    ) -> Result<Option<&crate::client_tls::Credentials>, IssuerUrlError> {
        match &self.credentials {
            Some(c) if c.password.expose().is_empty() => Err(IssuerUrlError::new(
                url,
                format!(
                    "user {:?} needs a password: --token-issuer-password-file or FENCEGATE_TOKEN_ISSUER_PASSWORD",
                    c.user
                ),
            )),
            other => Ok(other.as_ref()),
        }
    }

    /// Refuses TLS files for a URL that does not ask for TLS: a CA given
    /// for a plaintext URL is a mistake, never a silent downgrade.
    pub(crate) fn refuse_tls(&self, url: &str, how: &str) -> Result<(), IssuerUrlError> {
        if self.tls.is_default() {
            Ok(())
        } else {
            Err(IssuerUrlError::new(
                url,
                format!("--token-issuer-ca, -cert and -key need TLS ({how})"),
            ))
        }
    }
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
