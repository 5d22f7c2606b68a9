//! The one place that reads what a request does, as far as its reach goes:
//! its method (compared exactly, as registered), its query's operation
//! names, and the header fields that change what a write reaches
//! (`Depth`, `Overwrite`, `Destination`, `Content-Type` of a `POST`, the
//! rename fields). [`RequestOperation::read`] reads them once, refusing what the
//! store could read differently; the rest of [`reach`](super::reach) works
//! from the [`RequestOperation`] alone and compares no method name.

use http::header::{HeaderName, CONTENT_TYPE, HOST};
use http::{Method, Uri};

use super::error::{ReachError, Unfenceable};
use super::gcs::{might_name_gcs_objects, query_values};
use crate::head::{visible_str, HeaderFields, RequestView};
use crate::key::{normalize_path, request_host};

/// The header naming the target of a WebDAV `COPY` or `MOVE`.
pub const DESTINATION: HeaderName = HeaderName::from_static("destination");

/// The header saying how deep a WebDAV method acts on a collection.
pub const DEPTH: HeaderName = HeaderName::from_static("depth");

/// What a request does to the objects it reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RequestOperation {
    /// The kind of operation.
    pub(super) kind: Kind,
    /// Whether it changes anything (not `GET`, `HEAD`, `OPTIONS`, `TRACE`,
    /// `PROPFIND`): a GCS JSON API write names objects a read does not.
    pub(super) writes: bool,
    /// The request's host, lower-cased, when the scope asked for it.
    pub(super) host: Option<String>,
}

/// The kinds of operation whose reach differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    /// Acts on the one object its path names (every read, `PUT`, most
    /// `POST`s, a `LOCK` or `PROPPATCH` that stays on its own resource).
    Plain,
    /// `DELETE`: a collection with everything under it.
    Delete,
    /// WebDAV `COPY` to `destination` (normalised); `deep` when the
    /// destination's subtree is changed (`Overwrite: T`, or a depth other
    /// than 0).
    Copy { destination: String, deep: bool },
    /// WebDAV `MOVE` to `destination` (normalised): both subtrees.
    Move { destination: String },
    /// A `LOCK` (`Depth: infinity` or none) or `PROPPATCH` (`Depth` 1 or
    /// infinity) over a collection's members.
    Deep,
    /// S3 `DeleteObjects`: the keys are listed in the body.
    DeleteObjects,
    /// A `multipart/form-data` `POST` (an S3 POST-policy upload when sent
    /// to a bucket).
    Form,
}

impl RequestOperation {
    /// Reads `request` once. `with_host`: the scope keys by host too.
    pub(super) fn read<R: RequestView + ?Sized>(
        request: &R,
        with_host: bool,
    ) -> Result<RequestOperation, ReachError> {
        let method = request.method();
        let uri = request.uri();
        let fields = request.fields();
        if renames(fields) {
            return Err(Unfenceable(
                "a rename (x-amz-rename-source, x-ms-rename-source) deletes its source, which the gateway does not fence: copy, then delete".into(),
            )
            .into());
        }
        let kind = match *method {
            Method::POST if is_batch(uri) => {
                return Err(Unfenceable(
                    "an Azure Blob batch names its objects in sub-requests in its body, which the gateway does not read: send each request alone".into(),
                )
                .into());
            }
            Method::POST if lists_objects(uri) => Kind::DeleteObjects,
            Method::POST if is_form(fields) => Kind::Form,
            Method::DELETE => {
                // Validated for every WebDAV method that takes one, so that
                // a value the store would read differently is never
                // forwarded.
                depth(fields)?;
                Kind::Delete
            }
            _ if method.as_str() == "COPY" || method.as_str() == "MOVE" => {
                let depth = depth(fields)?;
                let overwrite = overwrite(fields)?;
                let destination = destination(request)?;
                // RFC 4918: a MOVE of a collection acts as `Depth:
                // infinity`, and a COPY without Depth too; and with
                // `Overwrite: T` (the default) the store deletes the
                // destination first, members and all, whatever the depth
                // (§9.8.4, §9.9.3).
                if method.as_str() == "MOVE" {
                    Kind::Move { destination }
                } else {
                    Kind::Copy {
                        destination,
                        deep: overwrite || depth != Some(Depth::Zero),
                    }
                }
            }
            // A lock without Depth is `Depth: infinity` (RFC 4918 §9.10.3):
            // on a collection it locks every member.
            _ if method.as_str() == "LOCK" => {
                match depth(fields)?.is_none_or(|depth| depth == Depth::Infinity) {
                    true => Kind::Deep,
                    false => Kind::Plain,
                }
            }
            _ if method.as_str() == "PROPPATCH" => {
                match depth(fields)?.is_some_and(|depth| depth != Depth::Zero) {
                    true => Kind::Deep,
                    false => Kind::Plain,
                }
            }
            _ => Kind::Plain,
        };
        let writes = !matches!(
            method.as_str(),
            "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PROPFIND"
        );
        // In the `host+` scopes every key is given the request's host: a
        // `Destination` on another authority is refused (`destination`),
        // so every key of a request shares it.
        let host = match with_host {
            true => Some(request_host(uri, fields)?),
            false => None,
        };
        Ok(RequestOperation { kind, writes, host })
    }
}

/// Whether `request` is certainly a write (or fenced read) of the one
/// object its path names, which is most requests: then [`reach`](super::reach) would
/// find nothing more, and need not be asked. Reads the method, the start of
/// the path, and for `POST` the query and `Content-Type`.
pub fn is_plain<R: RequestView + ?Sized>(request: &R) -> bool {
    if might_name_gcs_objects(request.uri().path()) {
        return false;
    }
    match request.method().as_str() {
        "DELETE" | "COPY" | "MOVE" | "PROPPATCH" | "LOCK" => false,
        "POST" => {
            !lists_objects(request.uri()) && !is_form(request.fields()) && !is_batch(request.uri())
        }
        _ => true,
    }
}

/// Whether the request renames an object in place (S3's RenameObject,
/// Azure Data Lake's rename): its source is deleted, named in a field the
/// gateway does not fence.
fn renames<H: HeaderFields + ?Sized>(fields: &H) -> bool {
    fields.contains(&HeaderName::from_static("x-amz-rename-source"))
        || fields.contains(&HeaderName::from_static("x-ms-rename-source"))
}

/// Whether the request is an Azure Blob batch (`comp=batch`), which names
/// its objects in sub-requests in its body.
fn is_batch(uri: &Uri) -> bool {
    uri.query().is_some_and(|query| {
        query_values(query, "comp").is_some_and(|values| values.iter().any(|v| v == "batch"))
    })
}

/// Whether `request` is an S3 `DeleteObjects` (`POST /bucket?delete`),
/// whose keys are in its body: read them with [`listed_objects`](super::listed_objects) and put a
/// [`ListedObjects`](super::ListedObjects) in the request's extensions before the fencing layer.
pub fn lists_objects_in_body<R: RequestView + ?Sized>(request: &R) -> bool {
    request.method() == Method::POST && lists_objects(request.uri())
}

fn lists_objects(uri: &Uri) -> bool {
    uri.query()
        .is_some_and(|query| query_values(query, "delete").is_some_and(|values| !values.is_empty()))
}

fn is_form<H: HeaderFields + ?Sized>(headers: &H) -> bool {
    headers.first(&CONTENT_TYPE).is_some_and(|value| {
        value
            .get(..19)
            .is_some_and(|start| start.eq_ignore_ascii_case(b"multipart/form-data"))
    })
}

/// A `Depth` value (RFC 4918 §10.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Depth {
    Zero,
    One,
    Infinity,
}

fn depth<H: HeaderFields + ?Sized>(headers: &H) -> Result<Option<Depth>, Unfenceable> {
    let name = DEPTH;
    let mut values = headers.values_of(&name);
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Unfenceable("Depth appears more than once".into()));
    }
    let value = visible_str(value).unwrap_or_default().trim();
    match value {
        "0" => Ok(Some(Depth::Zero)),
        "1" => Ok(Some(Depth::One)),
        _ if value.eq_ignore_ascii_case("infinity") => Ok(Some(Depth::Infinity)),
        _ => Err(Unfenceable(format!(
            "Depth must be 0, 1 or infinity, not {value:?}"
        ))),
    }
}

/// Whether a `COPY` or `MOVE` overwrites its destination (`Overwrite: T`,
/// the default; RFC 4918 §10.6), refusing any other value than `T` or `F`.
fn overwrite<H: HeaderFields + ?Sized>(headers: &H) -> Result<bool, Unfenceable> {
    let name = HeaderName::from_static("overwrite");
    let mut values = headers.values_of(&name);
    let Some(value) = values.next() else {
        return Ok(true);
    };
    if values.next().is_some() {
        return Err(Unfenceable("Overwrite appears more than once".into()));
    }
    match visible_str(value).unwrap_or_default().trim() {
        "T" => Ok(true),
        "F" => Ok(false),
        other => Err(Unfenceable(format!(
            "Overwrite must be T or F, not {other:?}"
        ))),
    }
}

/// The normalised path of a WebDAV `COPY`'s or `MOVE`'s `Destination`
/// (`None` for other methods), refused as [`reach`](super::reach) refuses it: what
/// credential custody authorises as a write beside the request's own path.
pub fn destination_path<R: RequestView + ?Sized>(
    request: &R,
) -> Result<Option<String>, ReachError> {
    match request.method().as_str() {
        "COPY" | "MOVE" => destination(request).map(Some),
        _ => Ok(None),
    }
}

fn destination<R: RequestView + ?Sized>(request: &R) -> Result<String, ReachError> {
    let name = DESTINATION;
    let mut values = request.fields().values_of(&name);
    let Some(value) = values.next() else {
        return Err(Unfenceable(format!("{} without Destination", request.method())).into());
    };
    if values.next().is_some() {
        return Err(Unfenceable("Destination appears more than once".into()).into());
    }
    let value = visible_str(value).ok_or_else(|| Unfenceable("Destination is not ASCII".into()))?;
    if value.contains('#') {
        return Err(Unfenceable("Destination holds a fragment".into()).into());
    }
    let uri: Uri = value
        .parse()
        .map_err(|_| Unfenceable(format!("Destination {value:?} is not a URI")))?;
    if let Some(authority) = uri.authority() {
        let default_port = match uri.scheme_str() {
            Some(scheme) if scheme.eq_ignore_ascii_case("http") => 80,
            Some(scheme) if scheme.eq_ignore_ascii_case("https") => 443,
            _ => {
                return Err(
                    Unfenceable(format!("Destination {value:?} is neither http nor https")).into(),
                )
            }
        };
        let own = own_authority(request)
            .ok_or_else(|| Unfenceable("a Destination URI, and the request has no host".into()))?;
        if !same_authority(authority.as_str(), default_port, own) {
            return Err(Unfenceable(format!(
                "Destination {value:?} names another authority than the request's ({own}): the gateway fences only its own"
            ))
            .into());
        }
    } else if !value.starts_with('/') {
        return Err(Unfenceable(format!(
            "Destination {value:?} is not an absolute URI or path"
        ))
        .into());
    }
    Ok(normalize_path(uri.path())?)
}

/// The authority the client addressed: the URI's (absolute form), else `Host`.
fn own_authority<R: RequestView + ?Sized>(request: &R) -> Option<&str> {
    match request.uri().authority() {
        Some(authority) => Some(authority.as_str()),
        None => visible_str(request.fields().first(&HOST)?),
    }
}

/// Whether `destination` (with its scheme's `default_port`) and the
/// request's `own` authority name one server: host names compared without
/// case or a trailing dot, an absent port equal to the default one.
fn same_authority(destination: &str, default_port: u16, own: &str) -> bool {
    let split = |authority: &str| -> (String, Option<u16>) {
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !port.contains(']') => (host, port.parse().ok()),
            _ => (authority, None),
        };
        (host.trim_end_matches('.').to_ascii_lowercase(), port)
    };
    let (dest_host, dest_port) = split(destination);
    let (own_host, own_port) = split(own);
    dest_host == own_host && dest_port.unwrap_or(default_port) == own_port.unwrap_or(default_port)
}
