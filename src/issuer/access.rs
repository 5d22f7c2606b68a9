//! How to reach a lock service besides its URL: the user named in it, the
//! password and TLS files given beside it, and the errors of a URL that
//! cannot be used. Shared by `url.rs`, which picks the issuer, and every
//! issuer, which reads its own part; neither imports the other.

// With the `issuer` feature alone no issuer reads its part.
#![cfg_attr(
    not(any(
        feature = "issuer-redis",
        feature = "issuer-etcd",
        feature = "issuer-postgres",
        feature = "issuer-zookeeper"
    )),
    allow(dead_code)
)]

use crate::client_tls::{ClientTlsFiles, Secret};

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
///
/// The user info is taken to end at the last `@`, not at the first `/` or
/// `?`: a password written with a raw `/` (which a URL should escape) is
/// still masked. A path that holds an `@` is masked with it: too much is
/// masked rather than too little.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, hosts)) if userinfo.contains(':') => {
            let user = userinfo.split([':', '/', '?']).next().unwrap_or_default();
            format!("{scheme}://{user}:***@{hosts}")
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn a_password_is_masked_whatever_it_holds() {
        assert_eq!(redacted("redis://u:pw@h:6379/k"), "redis://u:***@h:6379/k");
        assert_eq!(
            redacted("redis://u:pa/ss@h:6379/k"),
            "redis://u:***@h:6379/k"
        );
        assert_eq!(redacted("redis://u:p?w@h/k"), "redis://u:***@h/k");
        assert_eq!(redacted("etcd://h:2379,g:2379"), "etcd://h:2379,g:2379");
        assert_eq!(redacted("redis://u@h/k"), "redis://u@h/k");
        assert!(!redacted("postgres://u:a@b/c@h/db").contains("a@b/c"));
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

/// What a lock service's client needs besides its URL: TLS files, and the
/// user with a password (the user from the URL).
#[derive(Debug, Clone, Default)]
pub(crate) struct ServiceAccess {
    pub(crate) tls: ClientTlsFiles,
    pub(crate) credentials: Option<crate::client_tls::Credentials>,
}

impl ServiceAccess {
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
