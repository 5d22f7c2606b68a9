//! The chain's two moments in a fenced request's life ([`crate::chain`]):
//! before it is forwarded (the version it may carry, or a refusal) and
//! once the store answered (what the object's version is now).

use http::header::{HeaderValue, AUTHORIZATION, COOKIE, HOST};
use http::{HeaderMap, Method, Response};

use crate::chain::{Chain, ClientCondition, Effect, Outcome, Source, Version};
use crate::fences::{Fences, Stale, StaleReason};
use crate::head::{HeaderFields, RequestView, SetHeader};
use crate::key::normalize_path;
use crate::refusal::Refusal;

/// What the chain does with one admitted request.
#[derive(Debug)]
pub(super) enum Plan {
    /// A fenced read of an object: its answer shows the object's version.
    Read { object: String, lowerings: u64 },
    /// A chained write, sent with the condition on `sent`.
    Write {
        object: String,
        effect: Effect,
        sent: Version,
        /// The condition is the client's own: a refusal of it is the
        /// store's answer to give back unchanged.
        own: bool,
        /// `sent` was observed (rule (b)): with shared fences, a read of
        /// the shared highest must find it at most the token first.
        observed: bool,
        lowerings: u64,
    },
}

impl Plan {
    /// Whether, with shared fences, a read of the shared highest must come
    /// before the request is forwarded.
    pub(super) fn needs_shared_read(&self) -> bool {
        matches!(self, Plan::Write { observed: true, .. })
    }
}

/// A refusal of a client's precondition that no chain can stand on, before
/// admission (nothing is raised for a request that cannot go).
pub(super) fn check_condition<R: RequestView + ?Sized>(
    chain: &Chain,
    request: &R,
) -> Result<(), Refusal> {
    if chain
        .mode()
        .chained(request.method(), request.uri())
        .is_none()
    {
        return Ok(());
    }
    match chain.mode().client_condition(request.fields()) {
        ClientCondition::NotChainable(why) => Err(Refusal::PreconditionNotChainable {
            detail: why.to_owned(),
        }),
        ClientCondition::None | ClientCondition::Chain(_) => Ok(()),
    }
}

/// Before an admitted request is forwarded: adds the chain's condition to a
/// chained write, or refuses it when no version may be used.
pub(super) fn before<R: RequestView + SetHeader>(
    chain: &Chain,
    fences: &Fences,
    resource: &str,
    request: &mut R,
) -> Result<Option<Plan>, Refusal> {
    let Ok(object) = normalize_path(request.uri().path()) else {
        return Ok(None);
    };
    let mode = chain.mode();
    let lowerings = fences.lowerings();
    let Some(effect) = mode.chained(request.method(), request.uri()) else {
        // A sub-resource's answer (`?acl`, `?versionId=`) does not show the
        // object's current version.
        let read = matches!(*request.method(), Method::GET | Method::HEAD)
            && mode.reads_object(request.uri());
        return Ok(read.then_some(Plan::Read { object, lowerings }));
    };
    let (sent, own, observed) = match mode.client_condition(request.fields()) {
        ClientCondition::Chain(version) => {
            // The write's own chain: counted, not kept (the version is
            // unknown while the write is out, and its answer tells the next).
            chain.count_observation(Source::ClientCondition);
            (version, true, true)
        }
        ClientCondition::None if !mode.may_add_condition(request.fields()) => {
            return Err(Refusal::Unchainable {
                detail: "the request is signed with SharedKey, whose signature covers If-Match and If-None-Match: send your own condition, or authorise with a SAS or a bearer token".into(),
            });
        }
        ClientCondition::None => match chain.version(&object, lowerings) {
            Some(known) => {
                let uri = request.uri().clone();
                mode.condition(effect, &known.version, &uri, request);
                (known.version, false, known.observed)
            }
            None => {
                return Err(Refusal::VersionUnknown {
                    resource: resource.to_owned(),
                    object,
                });
            }
        },
        ClientCondition::NotChainable(why) => {
            return Err(Refusal::PreconditionNotChainable {
                detail: why.to_owned(),
            })
        }
    };
    // Unknown while the write is out: whatever becomes of it, only its
    // answer can tell the version again.
    chain.forget(&object);
    Ok(Some(Plan::Write {
        object,
        effect,
        sent,
        own,
        observed,
        lowerings,
    }))
}

/// Once the store answered: learns the version the answer shows, or turns a
/// refused gateway-added condition into `version_conflict`.
pub(super) fn after<B>(
    chain: &Chain,
    fences: &Fences,
    resource: &str,
    token: u64,
    plan: Plan,
    response: &Response<B>,
) -> Option<Refusal> {
    let mode = chain.mode();
    match plan {
        Plan::Read { object, lowerings } => {
            if let Some(version) = mode.observed(response.status(), response.headers()) {
                chain.observe(&object, version, lowerings, Source::ClientRead);
            }
            None
        }
        Plan::Write {
            object,
            effect,
            sent,
            own,
            lowerings,
            ..
        } => match mode.outcome(effect, &sent, response.status()) {
            Outcome::Applied => {
                if let Some(version) = mode.written(effect, response.headers()) {
                    chain.learn(&object, version, lowerings);
                }
                None
            }
            Outcome::StillAbsent => {
                chain.learn(&object, Version::Absent, lowerings);
                None
            }
            Outcome::ConditionFailed if !own => {
                let retry = fences.highest(resource) <= Some(token);
                chain.count_conflict(retry);
                Some(Refusal::VersionConflict {
                    resource: resource.to_owned(),
                    object,
                    token,
                    retry,
                })
            }
            Outcome::ConditionFailed | Outcome::Unknown => None,
        },
    }
}

/// With shared fences, rule (b)'s read: the shared highest over `resource`,
/// read now (after the observation), must be at most `token`; else the
/// version may predate a higher token's write, and the request is stale.
pub(super) async fn confirm_observed(
    fences: &Fences,
    resource: &str,
    token: u64,
) -> Result<(), Refusal> {
    match fences.shared_highest(resource).await {
        Ok(highest) if highest <= Some(token) => Ok(()),
        Ok(highest) => Err(Refusal::Stale {
            resource: resource.to_owned(),
            stale: Stale {
                token,
                highest: highest.unwrap_or(token),
                reason: StaleReason::BelowHighest,
            },
        }),
        Err(error) => Err(Refusal::StoreUnavailable {
            detail: error.to_string(),
        }),
    }
}

/// [`Observer::GatewayHead`](crate::chain::Observer::GatewayHead): the
/// gateway's own `HEAD` of the object teaches its version (the request is
/// in flight meanwhile: admitted, holding its fence). A failed `HEAD`, or
/// one whose answer names no version, is 503 `version_unavailable`.
pub(super) async fn read_version<H: HeaderFields + ?Sized>(
    chain: &Chain,
    fences: &Fences,
    uri: &http::Uri,
    headers: &H,
) -> Result<(), Refusal> {
    let Some(reader) = chain.reader() else {
        return Ok(());
    };
    let Ok(object) = normalize_path(uri.path()) else {
        return Ok(());
    };
    let lowerings = fences.lowerings();
    // The client's credentials, which let it write the object, let the
    // gateway read it; nothing else of the write's head.
    let mut credentials = HeaderMap::new();
    for name in [HOST, AUTHORIZATION, COOKIE] {
        for value in headers.values_of(&name) {
            if let Ok(value) = HeaderValue::from_bytes(value) {
                credentials.append(name.clone(), value);
            }
        }
    }
    let (status, headers) = reader
        .head(uri, &credentials)
        .await
        .map_err(|detail| Refusal::VersionUnavailable { detail })?;
    match chain.mode().observed(status, &headers) {
        Some(version) => {
            chain.observe(&object, version, lowerings, Source::GatewayHead);
            Ok(())
        }
        None => Err(Refusal::VersionUnavailable {
            detail: format!(
                "the gateway's HEAD of {object} was answered {status} with no usable ETag"
            ),
        }),
    }
}
