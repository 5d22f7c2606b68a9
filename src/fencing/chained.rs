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
    /// A write the chain does not make (a versioned delete, a tagging or
    /// ACL write, a `DeleteObjects` naming the objects): whatever it did,
    /// their versions are unknown, before it goes and once it answered.
    Unchained { objects: Vec<String> },
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
        if !is_read(request.method()) {
            let objects = written_objects(request);
            for object in &objects {
                chain.forget(object);
            }
            return Ok(Some(Plan::Unchained { objects }));
        }
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
        ClientCondition::None
            if !request.signed_by_gateway() && !mode.may_add_condition(request.fields()) =>
        {
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
    // Conditions of the client's own beside the chain's (a copy's source
    // conditions, `If-Modified-Since`): a refusal may be theirs, and is
    // then the store's answer to give back unchanged.
    let own = own || has_own_conditions(request.fields());
    Ok(Some(Plan::Write {
        object,
        effect,
        sent,
        own,
        observed,
        lowerings,
    }))
}

/// The conditions a client may put on a write besides the chain's: a
/// copy's conditions on its source, and the time conditions.
const OWN_CONDITIONS: [&str; 6] = [
    "x-amz-copy-source-if-match",
    "x-amz-copy-source-if-none-match",
    "x-amz-copy-source-if-modified-since",
    "x-amz-copy-source-if-unmodified-since",
    "if-modified-since",
    "x-ms-source-if-match",
];

fn has_own_conditions<H: HeaderFields + ?Sized>(fields: &H) -> bool {
    OWN_CONDITIONS
        .iter()
        .any(|name| fields.contains(&http::HeaderName::from_static(name)))
}

fn is_read(method: &Method) -> bool {
    matches!(
        method.as_str(),
        "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PROPFIND"
    )
}

/// The objects a write the chain does not make may change: its path's
/// object, a WebDAV `COPY`'s or `MOVE`'s destination, and the keys an S3
/// `DeleteObjects` lists. An S3 multipart upload in progress (creating it,
/// its parts, aborting it) and an Azure block staged (`comp=block`) change
/// no object until the upload completes (`CompleteMultipartUpload`, Put
/// Block List), which is chained: they forget nothing.
fn written_objects<R: RequestView + ?Sized>(request: &R) -> Vec<String> {
    let path = request.uri().path();
    let query = request.uri().query().unwrap_or("");
    let in_progress = query.split('&').any(|pair| {
        let name = pair.split('=').next().unwrap_or("");
        name == "uploads" || name == "uploadId" || name == "partNumber" || pair == "comp=block"
    });
    if in_progress {
        return Vec::new();
    }
    let mut objects: Vec<String> = normalize_path(path).into_iter().collect();
    if let Ok(Some(destination)) = crate::reach::destination_path(request) {
        objects.push(destination);
    }
    if let Some(listed) = request.listed_objects() {
        let bucket = path.trim_end_matches('/');
        objects.extend(
            listed
                .0
                .iter()
                .filter_map(|key| normalize_path(&format!("{bucket}/{key}")).ok()),
        );
    }
    objects
}

/// A write that passes the fencing layer unfenced
/// (`--allow-unfenced-writes`): the chain cannot see what it did, so the
/// versions of what it may change are unknown.
pub(super) fn forget_unfenced<R: RequestView + ?Sized>(chain: &Chain, request: &R) {
    if is_read(request.method()) {
        return;
    }
    for object in written_objects(request) {
        chain.forget(&object);
    }
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
        Plan::Unchained { objects } => {
            // A chained write of one of them answered meanwhile may have
            // learned a version this write has since replaced.
            for object in &objects {
                chain.forget(object);
            }
            None
        }
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

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use http::Request;

    use super::*;
    use crate::chain::Mode;
    use crate::reach::ListedObjects;

    /// A chain that knows `/b/k`, `/b/other` and `/dav/to`'s versions.
    fn knowing() -> (Chain, Fences) {
        let chain = Chain::new(Mode::S3, NonZeroUsize::new(100).unwrap());
        for object in ["/b/k", "/b/other", "/dav/to"] {
            chain.learn(object, Version::Tag("\"v\"".into()), 0);
        }
        (chain, Fences::in_memory())
    }

    fn known(chain: &Chain, object: &str) -> bool {
        chain.version(object, 0).is_some()
    }

    /// Every kind of write the chain does not make forgets the versions of
    /// what it may change, before it goes and once it answered (the rule
    /// of forgetting, docs/CHAINED.md).
    #[test]
    fn writes_the_chain_does_not_make_forget_what_they_may_change() {
        for (method, target) in [
            ("DELETE", "/b/k?versionId=3"),
            ("PUT", "/b/k?tagging"),
            ("PUT", "/b/k?acl"),
            ("PROPPATCH", "/b/k"),
            ("POST", "/b/k"),
        ] {
            let (chain, fences) = knowing();
            let mut request = Request::builder()
                .method(method)
                .uri(target)
                .body(())
                .unwrap();
            let plan = before(&chain, &fences, "/b/k", &mut request).unwrap();
            assert!(!known(&chain, "/b/k"), "{method} {target}");
            assert!(known(&chain, "/b/other"), "{method} {target}");
            // A chained write of it learned again meanwhile: forgotten once
            // the unchained write answered.
            chain.learn("/b/k", Version::Tag("\"w\"".into()), 0);
            let answer = http::Response::new(());
            after(&chain, &fences, "/b/k", 1, plan.unwrap(), &answer);
            assert!(!known(&chain, "/b/k"), "{method} {target} after");
        }
    }

    #[test]
    fn a_move_forgets_both_objects_and_delete_objects_every_key() {
        let (chain, fences) = knowing();
        let mut request = Request::builder()
            .method("MOVE")
            .uri("/b/k")
            .header("destination", "/dav/to")
            .body(())
            .unwrap();
        before(&chain, &fences, "/b/k", &mut request).unwrap();
        assert!(!known(&chain, "/b/k") && !known(&chain, "/dav/to"));

        let (chain, fences) = knowing();
        let mut request = Request::builder()
            .method("POST")
            .uri("/b?delete")
            .body(())
            .unwrap();
        request
            .extensions_mut()
            .insert(ListedObjects(vec!["k".into(), "other".into()]));
        before(&chain, &fences, "/b", &mut request).unwrap();
        assert!(!known(&chain, "/b/k") && !known(&chain, "/b/other"));
        assert!(known(&chain, "/dav/to"));
    }

    #[test]
    fn unfenced_writes_forget_and_uploads_in_progress_do_not() {
        let (chain, _) = knowing();
        let request = Request::put("/b/k").body(()).unwrap();
        forget_unfenced(&chain, &request);
        assert!(!known(&chain, "/b/k"));
        let read = Request::get("/b/other").body(()).unwrap();
        forget_unfenced(&chain, &read);
        assert!(known(&chain, "/b/other"));
        for target in [
            "/b/other?partNumber=1&uploadId=u",
            "/b/other?uploads",
            "/b/other?comp=block&blockid=a",
        ] {
            let part = Request::put(target).body(()).unwrap();
            forget_unfenced(&chain, &part);
            assert!(known(&chain, "/b/other"), "{target}");
        }
    }

    #[test]
    fn a_write_with_conditions_of_its_own_gets_the_stores_refusal() {
        let (chain, fences) = knowing();
        let mut request = Request::put("/b/k")
            .header("x-amz-copy-source", "/b/other")
            .header("x-amz-copy-source-if-none-match", "\"v\"")
            .body(())
            .unwrap();
        let plan = before(&chain, &fences, "/b/k", &mut request)
            .unwrap()
            .unwrap();
        let mut refused = http::Response::new(());
        *refused.status_mut() = http::StatusCode::PRECONDITION_FAILED;
        assert_eq!(after(&chain, &fences, "/b/k", 1, plan, &refused), None);
        assert!(!known(&chain, "/b/k"));
    }
}
