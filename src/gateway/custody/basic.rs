//! `webdav` and `http` under custody, the client's side: `Basic` (an
//! identity's user name and password) or `Bearer` (its token), compared in
//! constant time; no credentials at all is anonymous, anything else is
//! refused (401 with `WWW-Authenticate`).

use std::sync::Arc;

use base64::Engine as _;

use super::denied::{Denied, DeniedKind};
use super::identities::{constant_time_eq, Identities};
use super::verified::{Forwarding, Verified};
use crate::head::{HeaderFields, RequestView};

/// Who `request` authenticates as.
pub(crate) fn authenticate<R: RequestView>(
    identities: &Identities,
    request: &R,
) -> Result<Verified, Denied> {
    let mut values = request.fields().values_of(&http::header::AUTHORIZATION);
    let Some(value) = values.next() else {
        return match identities.anonymous() {
            Some(anonymous) => Ok(Verified {
                identity: Arc::clone(anonymous),
                forward: Forwarding::Gateway,
                may_raise: false,
                answer: None,
            }),
            None => Err(unauthenticated("the request carries no credentials")),
        };
    };
    if values.next().is_some() {
        return Err(unauthenticated("Authorization appears more than once"));
    }
    let (scheme, credentials) = match value.iter().position(|b| *b == b' ') {
        Some(at) => (&value[..at], trim(&value[at + 1..])),
        None => (value, &b""[..]),
    };
    let identity = if scheme.eq_ignore_ascii_case(b"basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(credentials)
            .map_err(|_| unauthenticated("the Basic credentials are not base64"))?;
        let at = decoded
            .iter()
            .position(|b| *b == b':')
            .ok_or_else(|| unauthenticated("the Basic credentials have no ':'"))?;
        let (user, password) = (&decoded[..at], &decoded[at + 1..]);
        let user =
            std::str::from_utf8(user).map_err(|_| unauthenticated("the user name is not UTF-8"))?;
        let identity = identities.by_key(user);
        // Compared even for an unknown user, against an empty secret, so
        // that the time taken does not say which users exist.
        let secret = identity
            .and_then(|i| i.secret.as_ref())
            .map_or(&b""[..], |s| s.expose().as_bytes());
        let matches = constant_time_eq(secret, password);
        match identity {
            Some(identity) if matches && !secret.is_empty() => Arc::clone(identity),
            _ => return Err(unauthenticated("wrong user name or password")),
        }
    } else if scheme.eq_ignore_ascii_case(b"bearer") {
        identities
            .by_bearer(credentials)
            .cloned()
            .ok_or_else(|| unauthenticated("unknown bearer token"))?
    } else {
        return Err(unauthenticated(
            "the gateway takes Basic or Bearer credentials",
        ));
    };
    Ok(Verified {
        identity,
        forward: Forwarding::Gateway,
        may_raise: false,
        answer: None,
    })
}

fn unauthenticated(message: &str) -> Denied {
    Denied::new(DeniedKind::Unauthenticated, message)
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| *b != b' ' && *b != b'\t')
        .map_or(start, |e| e + 1);
    &bytes[start..end.max(start)]
}
