//! Who the gateway's clients are and what each may touch: the identities
//! file, looked up by key id or bearer token, and authorisation of every
//! object a request reaches against the identity's `allow` prefixes.

use std::collections::HashMap;
use std::sync::Arc;

use super::denied::{Denied, DeniedKind};
use super::files::{Access, Allow, Identity};
use super::fingerprint::Fingerprint;
use super::verified::{Forwarding, Verified};
use crate::dialect::shared_key::AccountKey;
use crate::gateway::config::Anonymous;
use crate::gateway::inbound::Inbound;
use crate::head::{HeaderFields, RequestView};

/// The identities, indexed for the lookups a request makes.
#[derive(Debug, Default)]
pub(crate) struct Identities {
    /// By access key id (S3) or Basic user name. Filled from the file
    /// alone (a request only looks up), so hashed with foldhash: a lookup
    /// on every signed request, where SipHash cost some 500 instructions.
    by_key: HashMap<String, Arc<Identity>, foldhash::fast::RandomState>,
    /// Those with a secret and no key id: bearer tokens.
    bearers: Vec<Arc<Identity>>,
    /// Who a request without credentials is, if anyone.
    anonymous: Option<Arc<Identity>>,
    /// Under `--store azure`, by identity name: its account key, decoded
    /// once per load rather than at each request.
    account_keys: HashMap<String, AccountKey>,
    /// What the file held (names, key ids, secrets, prefixes, in order),
    /// and the anonymous mode: a reload compares it with the files' new
    /// content. Account keys derive from the secrets.
    fingerprint: [u8; 32],
}

impl Identities {
    /// Indexes `identities`; `anonymous` says what a request without
    /// credentials may do when the file has no keyless `anonymous`
    /// identity (whose own `allow` list wins when it has one).
    pub(crate) fn new(identities: Vec<Identity>, anonymous: Anonymous) -> Self {
        let mut index = Identities {
            fingerprint: fingerprint_of(&identities, anonymous),
            ..Identities::default()
        };
        for identity in identities {
            let identity = Arc::new(identity);
            match (&identity.access_key_id, &identity.secret) {
                (Some(id), _) => {
                    index.by_key.insert(id.clone(), identity);
                }
                (None, Some(_)) => index.bearers.push(identity),
                (None, None) => {
                    if anonymous != Anonymous::Off {
                        index.anonymous = Some(identity);
                    }
                }
            }
        }
        if index.anonymous.is_none() && anonymous != Anonymous::Off {
            index.anonymous = Some(Arc::new(Identity {
                name: "anonymous".to_owned(),
                access_key_id: None,
                secret: None,
                allow: vec![Allow {
                    prefix: "/".to_owned(),
                    access: if anonymous == Anonymous::Write {
                        Access::Write
                    } else {
                        Access::Read
                    },
                }],
            }));
        }
        index
    }

    /// What the identities were read from, as one digest.
    pub(crate) fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }

    /// The identity that signs with access key id (or Basic user) `id`.
    pub(crate) fn by_key(&self, id: &str) -> Option<&Arc<Identity>> {
        self.by_key.get(id)
    }

    /// The identity whose bearer token is `token`, compared in constant
    /// time with every bearer identity's (so the time taken says nothing of
    /// which one, or how much of one, matched).
    pub(crate) fn by_bearer(&self, token: &[u8]) -> Option<&Arc<Identity>> {
        let mut found = None;
        for identity in &self.bearers {
            let Some(secret) = &identity.secret else {
                continue;
            };
            if constant_time_eq(secret.expose().as_bytes(), token) && found.is_none() {
                found = Some(identity);
            }
        }
        found
    }

    /// Keeps the identities' account keys (Azure), by identity name.
    pub(crate) fn set_account_keys(&mut self, keys: HashMap<String, AccountKey>) {
        self.account_keys = keys;
    }

    /// The account key of the identity named `name` (Azure).
    pub(crate) fn account_key(&self, name: &str) -> Option<&AccountKey> {
        self.account_keys.get(name)
    }

    /// Who a request without credentials is; `None`: it is refused.
    pub(crate) fn anonymous(&self) -> Option<&Arc<Identity>> {
        self.anonymous.as_ref()
    }
}

/// Equal bytes, in time that depends on the lengths alone.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

impl Identity {
    /// Whether `object` (a path: `/bucket/key`, `/dav/file`) falls under
    /// one of this identity's prefixes with at least `need`.
    pub(crate) fn may(&self, object: &str, need: Access) -> bool {
        self.allow
            .iter()
            .any(|allow| allow.access >= need && object.starts_with(&allow.prefix))
    }
}

fn fingerprint_of(identities: &[Identity], anonymous: Anonymous) -> [u8; 32] {
    let mut print = Fingerprint::new();
    // Counts first, so that every field has one reading.
    print
        .field([anonymous as u8])
        .field((identities.len() as u64).to_le_bytes());
    for identity in identities {
        print
            .field(&identity.name)
            .optional(identity.access_key_id.as_ref())
            .optional(identity.secret.as_ref().map(|s| s.expose().as_bytes()))
            .field((identity.allow.len() as u64).to_le_bytes());
        for allow in &identity.allow {
            print.field(&allow.prefix).field(allow.access.verb());
        }
    }
    print.finish()
}

/// Who a request with no credentials at all is (S3, Azure): a CORS
/// preflight goes on unsigned (a browser's preflight carries none by
/// design, and changes nothing); anything else is the anonymous identity,
/// or refused with `refusal` when anonymous access is off.
pub(super) fn without_credentials<B>(
    identities: &Identities,
    request: &Inbound<B>,
    refusal: &str,
) -> Result<Verified, Denied> {
    let preflight = request.method() == http::Method::OPTIONS
        && request.fields().contains(&http::header::ORIGIN)
        && request
            .fields()
            .contains(&http::header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        let identity = identities
            .anonymous()
            .cloned()
            .unwrap_or_else(preflight_identity);
        return Ok(Verified {
            identity,
            forward: Forwarding::Unsigned,
            may_raise: false,
            answer: None,
        });
    }
    match identities.anonymous() {
        Some(anonymous) => Ok(Verified {
            identity: Arc::clone(anonymous),
            forward: Forwarding::Gateway,
            may_raise: false,
            answer: None,
        }),
        None => Err(Denied::new(DeniedKind::Unauthenticated, refusal)),
    }
}

/// Who a CORS preflight is when there is no anonymous identity: nobody,
/// allowed to read nothing (a preflight reads nothing).
fn preflight_identity() -> Arc<Identity> {
    Arc::new(Identity {
        name: "anonymous".to_owned(),
        access_key_id: None,
        secret: None,
        allow: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_tls::Secret;

    fn identity(
        name: &str,
        key: Option<&str>,
        secret: Option<&str>,
        allow: &[(&str, Access)],
    ) -> Identity {
        Identity {
            name: name.into(),
            access_key_id: key.map(Into::into),
            secret: secret.map(Secret::new),
            allow: allow
                .iter()
                .map(|(prefix, access)| Allow {
                    prefix: (*prefix).into(),
                    access: *access,
                })
                .collect(),
        }
    }

    #[test]
    fn access_is_by_prefix_and_level() {
        let billing = identity(
            "billing",
            Some("K"),
            Some("s"),
            &[("/billing/", Access::Write), ("/shared/", Access::Read)],
        );
        assert!(billing.may("/billing/q3.csv", Access::Write));
        assert!(billing.may("/billing/q3.csv", Access::Read));
        assert!(!billing.may("/billing/q3.csv", Access::Admin));
        assert!(billing.may("/shared/x", Access::Read));
        assert!(!billing.may("/shared/x", Access::Write));
        assert!(!billing.may("/billing", Access::Read));
        assert!(!billing.may("/billingx/y", Access::Read));
    }

    #[test]
    fn lookups_by_key_bearer_and_anonymous() {
        let ids = Identities::new(
            vec![
                identity("a", Some("KA"), Some("sa"), &[]),
                identity("b", None, Some("token-b"), &[]),
            ],
            Anonymous::Off,
        );
        assert_eq!(ids.by_key("KA").unwrap().name, "a");
        assert!(ids.by_key("KB").is_none());
        assert_eq!(ids.by_bearer(b"token-b").unwrap().name, "b");
        assert!(ids.by_bearer(b"token-").is_none());
        assert!(ids.anonymous().is_none());

        let read = Identities::new(vec![], Anonymous::Read);
        let anonymous = read.anonymous().unwrap();
        assert!(anonymous.may("/x", Access::Read) && !anonymous.may("/x", Access::Write));

        let own = Identities::new(
            vec![identity(
                "anonymous",
                None,
                None,
                &[("/public/", Access::Read)],
            )],
            Anonymous::Write,
        );
        let anonymous = own.anonymous().unwrap();
        assert!(anonymous.may("/public/x", Access::Read) && !anonymous.may("/x", Access::Read));
        let off = Identities::new(
            vec![identity(
                "anonymous",
                None,
                None,
                &[("/public/", Access::Read)],
            )],
            Anonymous::Off,
        );
        assert!(off.anonymous().is_none());
    }
}
