//! What a store understands: which requests replace or remove the object
//! their path names (the writes a chain covers), the condition the gateway
//! adds to them, how a response names the version it made, and how the
//! store says that a condition failed. One [`Mode`] per dialect.

use std::fmt;
use std::str::FromStr;

use http::header::{ETAG, IF_MATCH, IF_NONE_MATCH, IF_UNMODIFIED_SINCE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};

use crate::head::{visible_str, HeaderFields, SetHeader};

use super::version::Version;

/// A store's dialect of conditional writes (`--conditional-writes`).
///
/// ```
/// use fencegate::chain::Mode;
///
/// assert_eq!("s3".parse::<Mode>(), Ok(Mode::S3));
/// assert_eq!(Mode::S3.to_string(), "s3");
/// assert!("ftp".parse::<Mode>().is_err());
/// // In the SPEC, not built here (docs/CHAINED.md says why), and the error says so.
/// assert!("gcs".parse::<Mode>().unwrap_err().contains("not built"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// No chain: writes are fenced, nothing is added.
    #[default]
    Off,
    /// Amazon S3 and the stores that speak its API (MinIO, R2, Ceph):
    /// `If-Match: <etag>`, `If-None-Match: *` for an absent object.
    S3,
    /// WebDAV as Apache's mod_dav serves it: a tagged `If: <path>
    /// (["<etag>"])` list (compared weakly, so a tag of the last second
    /// matches), `If-None-Match: *` for an absent object; versions from
    /// `HEAD` (mod_dav's `PUT` answers name none).
    Webdav,
    /// Plain RFC 9110 (the embedded backend, any server that checks
    /// `If-Match` with strong tags atomically with the write):
    /// `If-Match: <etag>`, `If-None-Match: *` for an absent object.
    Http,
    /// Azure Blob Storage (and Azurite): Put Blob, Put Block List, Copy
    /// Blob's destination and Delete Blob with `If-Match: <etag>` or
    /// `If-None-Match: *`. A request signed with `SharedKey` (which covers
    /// those headers) cannot have them added.
    Azure,
}

/// The modes [`Mode::from_str`] accepts, for messages.
pub const MODES: &str = "off, s3, webdav, http, azure";

impl FromStr for Mode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "off" => Ok(Mode::Off),
            "s3" => Ok(Mode::S3),
            "webdav" => Ok(Mode::Webdav),
            "http" => Ok(Mode::Http),
            "azure" => Ok(Mode::Azure),
            // In the SPEC, not shipped: no GCS emulator that runs here
            // honours its preconditions, so no test could show it works.
            "gcs" => Err(format!(
                "conditional-writes mode \"gcs\" is not built (no GCS emulator that honours x-goog-if-generation-match could test it; docs/CHAINED.md); expected one of: {MODES}"
            )),
            other => Err(format!(
                "unknown conditional-writes mode {other:?} (expected one of: {MODES})"
            )),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Off => "off",
            Mode::S3 => "s3",
            Mode::Webdav => "webdav",
            Mode::Http => "http",
            Mode::Azure => "azure",
        })
    }
}

/// What a chained write does to its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Replaces it (or creates it): the store answers with its new version.
    Replace,
    /// Removes it: afterwards it is [`Version::Absent`].
    Remove,
}

/// What the client's own precondition headers amount to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientCondition {
    /// None: the gateway adds the chain's.
    None,
    /// One that names a version (`If-Match: "<etag>"`, `If-None-Match: *`):
    /// forwarded untouched; it is the chain.
    Chain(Version),
    /// One the chain cannot stand on: refused (428
    /// `precondition_not_chainable`) with why.
    NotChainable(&'static str),
}

impl Mode {
    /// Whether `method` on `uri` replaces or removes the object its path
    /// names, in this dialect; `None` for every other request (reads, part
    /// uploads, sub-resources, `POST`), which are fenced but not chained.
    pub fn chained(self, method: &Method, uri: &Uri) -> Option<Effect> {
        match self {
            Mode::Off => None,
            Mode::S3 => s3_chained(method, uri),
            // Every PUT and DELETE replaces or removes what its path names
            // (a WebDAV server gives the query no meaning of its own).
            Mode::Azure => azure_chained(method, uri),
            Mode::Webdav | Mode::Http => match *method {
                Method::PUT => Some(Effect::Replace),
                Method::DELETE => Some(Effect::Remove),
                _ => None,
            },
        }
    }

    /// Whether a `GET` or `HEAD` of `uri` reads the object's current
    /// version: no query but what authorises the request (an S3 presigned
    /// URL's `X-Amz-*`, an Azure SAS); a sub-resource (`?acl`), a version
    /// (`?versionId=`) or a snapshot shows another.
    pub fn reads_object(self, uri: &Uri) -> bool {
        let Some(query) = uri.query() else {
            return true;
        };
        form_urlencoded_pairs(query).all(|(name, _)| {
            let name = name.to_ascii_lowercase();
            match self {
                Mode::S3 => name.starts_with("x-amz-"),
                Mode::Azure => name == "timeout" || is_sas_parameter(&name),
                Mode::Off | Mode::Webdav | Mode::Http => false,
            }
        })
    }

    /// Who learns an unknown version by default: the gateway itself where
    /// the store lets it read without the client's credentials being
    /// re-signed (WebDAV), the client elsewhere.
    pub fn default_observer(self) -> Observer {
        match self {
            Mode::Webdav | Mode::Http => Observer::GatewayHead,
            Mode::Off | Mode::S3 | Mode::Azure => Observer::ClientHead,
        }
    }

    /// Whether the gateway may add its condition to `headers`' request: not
    /// to an Azure request signed with `SharedKey`, whose signature covers
    /// `If-Match` and `If-None-Match`.
    pub fn may_add_condition<H: HeaderFields + ?Sized>(self, headers: &H) -> bool {
        self != Mode::Azure
            || !headers
                .first(&http::header::AUTHORIZATION)
                .is_some_and(|value| value.starts_with(b"SharedKey"))
    }

    /// Reads the client's own precondition on a chained write.
    pub fn client_condition<H: HeaderFields + ?Sized>(self, headers: &H) -> ClientCondition {
        if self == Mode::Webdav && headers.contains(&WEBDAV_IF) {
            // Lists of one `If` header are alternatives: one of the
            // client's (a lock token) and one of the chain's would let a
            // request through that matches either.
            return ClientCondition::NotChainable(
                "a WebDAV If header (lock tokens) cannot be combined with the chain's condition yet",
            );
        }
        // At most the first two lines of each: more than one is refused.
        let first_two = |name: HeaderName| {
            let mut values = headers.values_of(&name);
            (values.next(), values.next())
        };
        match (first_two(IF_MATCH), first_two(IF_NONE_MATCH)) {
            ((None, _), (None, _)) if headers.contains(&IF_UNMODIFIED_SINCE) => {
                ClientCondition::NotChainable(
                    "If-Unmodified-Since alone names a time, not a version: a write made within the same second passes it",
                )
            }
            ((None, _), (None, _)) => ClientCondition::None,
            ((Some(tag), None), (None, _)) => match strong_tag(tag) {
                Some(tag) => ClientCondition::Chain(Version::Tag(tag.into())),
                None if tag == b"*" => ClientCondition::NotChainable(
                    "If-Match: * matches whatever version the object has, so a late write would still pass",
                ),
                None => ClientCondition::NotChainable(
                    "If-Match must name exactly one strong entity tag for the chain to stand on",
                ),
            },
            ((None, _), (Some(any), None)) if any == b"*" => {
                ClientCondition::Chain(Version::Absent)
            }
            ((None, _), (Some(_), None)) => ClientCondition::NotChainable(
                "If-None-Match with an entity tag passes for every version but that one",
            ),
            _ => ClientCondition::NotChainable(
                "several preconditions: send one If-Match with one entity tag, or If-None-Match: *",
            ),
        }
    }

    /// The headers that make a write of `uri` apply only to `version`.
    pub fn condition<H: SetHeader + ?Sized>(
        self,
        effect: Effect,
        version: &Version,
        uri: &Uri,
        headers: &mut H,
    ) {
        match (self, version) {
            (Mode::Off, _) => {}
            (Mode::Webdav, Version::Tag(tag)) => {
                let list = format!("<{}> ([{tag}])", uri.path());
                if let Ok(value) = HeaderValue::from_str(&list) {
                    headers.set(WEBDAV_IF, value);
                }
            }
            (Mode::Webdav, Version::Absent) => match effect {
                Effect::Replace => {
                    headers.set(IF_NONE_MATCH, HeaderValue::from_static("*"));
                }
                Effect::Remove => {
                    let list = format!("<{}> ([{ABSENT_TAG}])", uri.path());
                    if let Ok(value) = HeaderValue::from_str(&list) {
                        headers.set(WEBDAV_IF, value);
                    }
                }
            },
            (Mode::Http | Mode::Azure, Version::Tag(tag)) => {
                if let Ok(value) = HeaderValue::from_str(tag) {
                    headers.set(IF_MATCH, value);
                }
            }
            // "Only if there is none": a create, or a delete of what is
            // still absent (the store's 404 then says so).
            (Mode::Http | Mode::Azure, Version::Absent) => {
                headers.set(IF_NONE_MATCH, HeaderValue::from_static("*"));
            }
            (Mode::S3, Version::Tag(tag)) => {
                if let Ok(value) = HeaderValue::from_str(tag) {
                    headers.set(IF_MATCH, value);
                }
            }
            // A marker meets no condition S3 has: a delete of it goes on
            // unconditioned (it adds a marker and destroys nothing), a
            // create only if there is no object.
            (Mode::S3, Version::DeleteMarker) => match effect {
                Effect::Replace => {
                    headers.set(IF_NONE_MATCH, HeaderValue::from_static("*"));
                }
                Effect::Remove => {}
            },
            // Only S3's versioned buckets answer with delete markers.
            (_, Version::DeleteMarker) => {
                headers.set(IF_NONE_MATCH, HeaderValue::from_static("*"));
            }
            (Mode::S3, Version::Absent) => match effect {
                Effect::Replace => {
                    headers.set(IF_NONE_MATCH, HeaderValue::from_static("*"));
                }
                // S3 has no "delete only if absent": a tag that no object
                // has. The store's 404 then means "still absent".
                Effect::Remove => {
                    headers.set(IF_MATCH, HeaderValue::from_static(ABSENT_TAG));
                }
            },
        }
    }

    /// The version a successful chained write left, if its response names
    /// it; `None` makes the version unknown.
    pub fn written(self, effect: Effect, headers: &HeaderMap) -> Option<Version> {
        match effect {
            Effect::Remove if self == Mode::S3 && is_delete_marker(headers) => {
                Some(Version::DeleteMarker)
            }
            Effect::Remove => Some(Version::Absent),
            Effect::Replace => self.tag(headers),
        }
    }

    /// The version a fenced read's answer shows: the `ETag` of a 200, or
    /// absent on a 404.
    pub fn observed(self, status: StatusCode, headers: &HeaderMap) -> Option<Version> {
        match status {
            StatusCode::OK => self.tag(headers),
            StatusCode::NOT_FOUND if self == Mode::S3 && is_delete_marker(headers) => {
                Some(Version::DeleteMarker)
            }
            StatusCode::NOT_FOUND => Some(Version::Absent),
            _ => None,
        }
    }

    /// The `ETag` of an answer, as this dialect can use it: strong only
    /// for `If-Match`; weak too for WebDAV's `If`, which compares weakly
    /// (mod_dav names a file written in the last second with a weak tag).
    fn tag(self, headers: &HeaderMap) -> Option<Version> {
        let value = headers.get(ETAG)?.as_bytes();
        let tag = match self {
            Mode::Webdav => strong_tag(value).or_else(|| weak_tag(value)),
            Mode::Off | Mode::S3 | Mode::Http | Mode::Azure => strong_tag(value),
        }?;
        Some(Version::Tag(tag.into()))
    }

    /// How the store answered a write that carried `sent` (added by the
    /// gateway or the client's own).
    pub fn outcome(self, effect: Effect, sent: &Version, status: StatusCode) -> Outcome {
        if status.is_success() {
            return Outcome::Applied;
        }
        match (status, sent, effect) {
            (StatusCode::PRECONDITION_FAILED, _, _) => Outcome::ConditionFailed,
            // Azure: `If-None-Match: *` on a blob that exists is 409
            // BlobAlreadyExists.
            (StatusCode::CONFLICT, Version::Absent, Effect::Replace) if self == Mode::Azure => {
                Outcome::ConditionFailed
            }
            // The tag that no object has, on a DELETE of an absent key.
            (StatusCode::NOT_FOUND, Version::Absent, Effect::Remove) => Outcome::StillAbsent,
            // `If-Match` on a key that is gone: S3 answers 404.
            (StatusCode::NOT_FOUND, Version::Tag(_), _) => Outcome::ConditionFailed,
            _ => Outcome::Unknown,
        }
    }
}

/// S3's `x-amz-delete-marker: true`: the answer is (or concerns) a delete
/// marker, so the bucket keeps versions.
fn is_delete_marker(headers: &HeaderMap) -> bool {
    headers
        .get("x-amz-delete-marker")
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"true"))
}

/// A tag no S3 object can have (S3's are hex digests, with `-N` for
/// multipart uploads), nor a mod_dav file (`"size-mtime"` in hex).
const ABSENT_TAG: &str = "\"fencegate-absent\"";

/// WebDAV's `If` header (RFC 4918 §10.4).
const WEBDAV_IF: http::HeaderName = http::HeaderName::from_static("if");

/// Who learns a version the gateway does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observer {
    /// The client, told so with 428 `version_unknown`: a fenced `HEAD`.
    ClientHead,
    /// The gateway, with a `HEAD` of its own before the write.
    GatewayHead,
}

impl FromStr for Observer {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "client-head" => Ok(Observer::ClientHead),
            "gateway-head" => Ok(Observer::GatewayHead),
            other => Err(format!(
                "unknown chain-observe {other:?} (expected client-head or gateway-head)"
            )),
        }
    }
}

/// What the store did with a chained write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Applied (2xx).
    Applied,
    /// The condition failed: the object is not at the version sent.
    ConditionFailed,
    /// A removal of an object that was, and still is, absent.
    StillAbsent,
    /// Anything else: the version is no longer known.
    Unknown,
}

/// `value` if it is one weak entity tag (`W/"..."`).
fn weak_tag(value: &[u8]) -> Option<&str> {
    let text = visible_str(value)?.trim();
    let inner = text.strip_prefix("W/\"")?.strip_suffix('"')?;
    (!inner.contains('"')).then_some(text)
}

/// `value` if it is one strong entity tag (`"..."`, no `W/`).
fn strong_tag(value: &[u8]) -> Option<&str> {
    let text = visible_str(value)?.trim();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('"')).then_some(text)
}

fn s3_chained(method: &Method, uri: &Uri) -> Option<Effect> {
    // An object's path is `/bucket/key`: a bucket's own requests are not
    // chained.
    let path = uri.path().trim_start_matches('/');
    let (_bucket, key) = path.split_once('/')?;
    if key.is_empty() {
        return None;
    }
    // A presigned URL's `X-Amz-*` parameters authorise the request; they
    // do not change what it does.
    let query: Vec<(String, String)> = uri
        .query()
        .map(|q| {
            form_urlencoded_pairs(q)
                .map(|(name, value)| (name.to_ascii_lowercase(), value))
                .filter(|(name, _)| !name.starts_with("x-amz-"))
                .collect()
        })
        .unwrap_or_default();
    let has = |name: &str| query.iter().any(|(n, _)| n == name);
    match *method {
        // A part (`?partNumber&uploadId`) is not the object; other
        // sub-resources (`?tagging`, `?acl`, ...) change metadata only.
        Method::PUT if query.is_empty() => Some(Effect::Replace),
        Method::PUT => None,
        Method::POST if has("uploadid") && query.len() == 1 => {
            // CompleteMultipartUpload; CreateMultipartUpload is `?uploads`.
            Some(Effect::Replace)
        }
        // A version's own deletion does not change the current object's
        // version; an aborted upload (`?uploadId`) changes nothing.
        Method::DELETE if query.is_empty() => Some(Effect::Remove),
        _ => None,
    }
}

/// Azure: the blob requests that replace or remove the blob (path-style
/// `/account/container/blob` at Azurite, `/container/blob` at Azure). The
/// SDKs' `timeout` parameter does not change what a request does.
fn azure_chained(method: &Method, uri: &Uri) -> Option<Effect> {
    let path = uri.path().trim_start_matches('/');
    let (_container, blob) = path.split_once('/')?;
    if blob.is_empty() {
        return None;
    }
    let query: Vec<(String, String)> = uri
        .query()
        .map(|q| {
            form_urlencoded_pairs(q)
                .filter(|(name, _)| !name.eq_ignore_ascii_case("timeout"))
                .map(|(name, value)| (name.to_ascii_lowercase(), value))
                .collect()
        })
        .unwrap_or_default();
    let only_sas = query.iter().all(|(name, _)| is_sas_parameter(name));
    let comp = query
        .iter()
        .find(|(name, _)| name == "comp")
        .map(|(_, v)| v.as_str());
    match *method {
        // Put Blob, or Copy Blob (its destination).
        Method::PUT if only_sas => Some(Effect::Replace),
        Method::PUT if comp == Some("blocklist") => Some(Effect::Replace),
        // A snapshot's or a version's deletion leaves the blob as it was.
        Method::DELETE if only_sas => Some(Effect::Remove),
        _ => None,
    }
}

/// A shared access signature's query parameters (`sv`, `sig`, `se`, ...):
/// they authorise a request, they do not change what it does.
pub(crate) fn is_sas_parameter(name: &str) -> bool {
    matches!(
        name,
        "sv" | "ss"
            | "srt"
            | "sp"
            | "se"
            | "st"
            | "spr"
            | "sig"
            | "sr"
            | "si"
            | "sip"
            | "skoid"
            | "sktid"
            | "skt"
            | "ske"
            | "sks"
            | "skv"
            | "sdd"
            | "ses"
            | "rscc"
            | "rscd"
            | "rsce"
            | "rscl"
            | "rsct"
            | "saoid"
            | "suoid"
            | "scid"
    )
}

/// The pairs of a query string, names and values percent-decoded.
fn form_urlencoded_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        (decode(name), decode(value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chained(method: &str, target: &str) -> Option<Effect> {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let uri: Uri = target.parse().unwrap();
        Mode::S3.chained(&method, &uri)
    }

    #[test]
    fn s3_chains_object_puts_deletes_and_completions_only() {
        assert_eq!(chained("PUT", "/b/k"), Some(Effect::Replace));
        assert_eq!(chained("PUT", "/b/dir/k"), Some(Effect::Replace));
        assert_eq!(
            chained(
                "PUT",
                "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=ab"
            ),
            Some(Effect::Replace)
        );
        assert_eq!(chained("DELETE", "/b/k"), Some(Effect::Remove));
        assert_eq!(chained("POST", "/b/k?uploadId=u1"), Some(Effect::Replace));
        assert_eq!(chained("PUT", "/b/k?partNumber=1&uploadId=u1"), None);
        assert_eq!(chained("POST", "/b/k?uploads"), None);
        assert_eq!(chained("DELETE", "/b/k?uploadId=u1"), None);
        assert_eq!(chained("DELETE", "/b/k?versionId=v"), None);
        assert_eq!(chained("PUT", "/b/k?tagging"), None);
        assert_eq!(chained("PUT", "/b"), None);
        assert_eq!(chained("PUT", "/b/"), None);
        assert_eq!(chained("POST", "/b?delete"), None);
        assert_eq!(chained("GET", "/b/k"), None);
    }

    fn condition(pairs: &[(&str, &str)]) -> ClientCondition {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        Mode::S3.client_condition(&headers)
    }

    #[test]
    fn a_client_condition_is_the_chain_only_when_it_names_one_version() {
        assert_eq!(condition(&[]), ClientCondition::None);
        assert_eq!(
            condition(&[("if-match", "\"abc\"")]),
            ClientCondition::Chain(Version::Tag("\"abc\"".into()))
        );
        assert_eq!(
            condition(&[("if-none-match", "*")]),
            ClientCondition::Chain(Version::Absent)
        );
        for refused in [
            &[("if-match", "*")][..],
            &[("if-match", "W/\"abc\"")],
            &[("if-match", "\"a\", \"b\"")],
            &[("if-match", "\"a\""), ("if-match", "\"b\"")],
            &[("if-none-match", "\"abc\"")],
            &[("if-unmodified-since", "Tue, 24 Nov 2026 10:00:00 GMT")],
            &[("if-match", "\"a\""), ("if-none-match", "*")],
        ] {
            assert!(
                matches!(condition(refused), ClientCondition::NotChainable(_)),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn a_delete_marker_is_absent_that_a_delete_may_add_to_unconditioned() {
        let mut marker = HeaderMap::new();
        marker.insert("x-amz-delete-marker", HeaderValue::from_static("true"));
        let s3 = Mode::S3;
        assert_eq!(
            s3.observed(StatusCode::NOT_FOUND, &marker),
            Some(Version::DeleteMarker)
        );
        assert_eq!(
            s3.observed(StatusCode::NOT_FOUND, &HeaderMap::new()),
            Some(Version::Absent)
        );
        assert_eq!(
            s3.written(Effect::Remove, &marker),
            Some(Version::DeleteMarker)
        );
        // Other stores have no markers.
        assert_eq!(
            Mode::Http.observed(StatusCode::NOT_FOUND, &marker),
            Some(Version::Absent)
        );
        let uri = Uri::from_static("/b/k");
        let mut headers = HeaderMap::new();
        s3.condition(Effect::Remove, &Version::DeleteMarker, &uri, &mut headers);
        assert!(headers.is_empty(), "{headers:?}");
        s3.condition(Effect::Replace, &Version::DeleteMarker, &uri, &mut headers);
        assert_eq!(headers[IF_NONE_MATCH], "*");
        assert_eq!(
            s3.outcome(
                Effect::Remove,
                &Version::DeleteMarker,
                StatusCode::NO_CONTENT
            ),
            Outcome::Applied
        );
    }

    #[test]
    fn conditions_added_and_answers_read() {
        let mut headers = HeaderMap::new();
        let uri = Uri::from_static("/b/k");
        Mode::S3.condition(Effect::Replace, &Version::Absent, &uri, &mut headers);
        assert_eq!(headers[IF_NONE_MATCH], "*");
        let mut headers = HeaderMap::new();
        Mode::S3.condition(Effect::Remove, &Version::Absent, &uri, &mut headers);
        assert_eq!(headers[IF_MATCH], ABSENT_TAG);
        let mut headers = HeaderMap::new();
        let tag = Version::Tag("\"e1\"".into());
        Mode::S3.condition(Effect::Replace, &tag, &uri, &mut headers);
        assert_eq!(headers[IF_MATCH], "\"e1\"");
        let s3 = Mode::S3;
        assert_eq!(
            s3.outcome(Effect::Replace, &tag, StatusCode::OK),
            Outcome::Applied
        );
        assert_eq!(
            s3.outcome(Effect::Replace, &tag, StatusCode::PRECONDITION_FAILED),
            Outcome::ConditionFailed
        );
        assert_eq!(
            s3.outcome(Effect::Remove, &tag, StatusCode::NOT_FOUND),
            Outcome::ConditionFailed
        );
        assert_eq!(
            s3.outcome(Effect::Remove, &Version::Absent, StatusCode::NOT_FOUND),
            Outcome::StillAbsent
        );
        assert_eq!(
            s3.outcome(Effect::Replace, &tag, StatusCode::SERVICE_UNAVAILABLE),
            Outcome::Unknown
        );
        let mut answer = HeaderMap::new();
        answer.insert(ETAG, HeaderValue::from_static("\"e2\""));
        assert_eq!(
            s3.written(Effect::Replace, &answer),
            Some(Version::Tag("\"e2\"".into()))
        );
        assert_eq!(s3.written(Effect::Remove, &answer), Some(Version::Absent));
        answer.insert(ETAG, HeaderValue::from_static("W/\"e2\""));
        assert_eq!(s3.written(Effect::Replace, &answer), None);
        assert_eq!(
            s3.observed(StatusCode::NOT_FOUND, &HeaderMap::new()),
            Some(Version::Absent)
        );
    }
}

#[cfg(test)]
mod webdav_tests {
    use super::*;

    #[test]
    fn webdav_chains_with_a_tagged_if_list_and_takes_weak_tags() {
        let uri = Uri::from_static("/dav/report");
        let mut headers = HeaderMap::new();
        let tag = Version::Tag("W/\"3-660fed346ef85\"".into());
        Mode::Webdav.condition(Effect::Replace, &tag, &uri, &mut headers);
        assert_eq!(
            headers[WEBDAV_IF],
            "</dav/report> ([W/\"3-660fed346ef85\"])"
        );
        let mut headers = HeaderMap::new();
        Mode::Webdav.condition(Effect::Replace, &Version::Absent, &uri, &mut headers);
        assert_eq!(headers[IF_NONE_MATCH], "*");
        let mut answer = HeaderMap::new();
        answer.insert(ETAG, HeaderValue::from_static("W/\"3-660fed346ef85\""));
        assert_eq!(
            Mode::Webdav.observed(StatusCode::OK, &answer),
            Some(Version::Tag("W/\"3-660fed346ef85\"".into()))
        );
        assert_eq!(Mode::S3.observed(StatusCode::OK, &answer), None);
        let mut own = HeaderMap::new();
        own.insert(WEBDAV_IF, HeaderValue::from_static("(<opaquelocktoken:x>)"));
        assert!(matches!(
            Mode::Webdav.client_condition(&own),
            ClientCondition::NotChainable(_)
        ));
        let put = Method::PUT;
        assert_eq!(Mode::Webdav.chained(&put, &uri), Some(Effect::Replace));
        assert_eq!(
            Mode::Webdav.chained(&Method::from_bytes(b"MOVE").unwrap(), &uri),
            None
        );
        assert_eq!(Mode::Webdav.default_observer(), Observer::GatewayHead);
        assert_eq!(Mode::S3.default_observer(), Observer::ClientHead);
    }
}

#[cfg(test)]
mod azure_tests {
    use super::*;

    #[test]
    fn azure_chains_blob_writes_and_not_what_leaves_the_blob_alone() {
        let chained = |method: &str, target: &str| {
            let method = Method::from_bytes(method.as_bytes()).unwrap();
            Mode::Azure.chained(&method, &target.parse::<Uri>().unwrap())
        };
        let sas = "sv=2024-08-04&ss=b&srt=sco&sp=rwdlac&se=2030-01-01&sig=abc";
        assert_eq!(chained("PUT", "/acct/c/blob"), Some(Effect::Replace));
        assert_eq!(
            chained("PUT", &format!("/acct/c/blob?{sas}")),
            Some(Effect::Replace)
        );
        assert_eq!(
            chained("PUT", "/acct/c/blob?comp=blocklist&timeout=30"),
            Some(Effect::Replace)
        );
        assert_eq!(chained("PUT", "/acct/c/blob?comp=block&blockid=AA"), None);
        assert_eq!(chained("PUT", "/acct/c/blob?comp=metadata"), None);
        assert_eq!(chained("PUT", "/acct/c?restype=container"), None);
        assert_eq!(chained("DELETE", "/acct/c/blob"), Some(Effect::Remove));
        assert_eq!(chained("DELETE", "/acct/c/blob?snapshot=2024"), None);
        assert_eq!(chained("GET", "/acct/c/blob"), None);
        let mut signed = HeaderMap::new();
        signed.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("SharedKey devstoreaccount1:abc="),
        );
        assert!(!Mode::Azure.may_add_condition(&signed));
        assert!(Mode::Azure.may_add_condition(&HeaderMap::new()));
        assert!(Mode::S3.may_add_condition(&signed));
        assert_eq!(
            Mode::Azure.outcome(Effect::Replace, &Version::Absent, StatusCode::CONFLICT),
            Outcome::ConditionFailed
        );
    }
}
