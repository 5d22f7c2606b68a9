//! Step 2b of the data path: every object a write changes, when that is more
//! than the one its path names.
//!
//! A fence guards nothing if a write can change its object without naming
//! it. Some writes do: a WebDAV `MOVE` or `COPY` overwrites its
//! `Destination`, a collection `DELETE` removes everything under its path,
//! an S3 `DeleteObjects` removes the keys listed in its body, and Google
//! Cloud Storage's JSON API names objects in the query or in a path of its
//! own. [`reach`] lists the fence keys of every object such a write can
//! change, so that the request is admitted on all of them at once
//! ([`Fences::admit_all`](crate::Fences::admit_all)); a write that is
//! recognised as reaching beyond its path but cannot be read is refused
//! ([`Unfenceable`], 400 `unfenceable_write`) and never forwarded.
//!
//! A collection is fenced by a *subtree key* ([`subtree_key`]): `/dav/dir/`
//! stands for everything under `/dav/dir`.
//!
//! | request | keys |
//! |---|---|
//! | `PUT /dav/a` (and every other write, by default) | `/dav/a` |
//! | `DELETE /dav/dir` | `/dav/dir`, `/dav/dir/` (none but the first with flat keys) |
//! | `COPY /dav/a`, `Destination: /dav/b` | `/dav/a`, `/dav/b`, `/dav/b/` (`Depth: 0` with `Overwrite: F`: not the last) |
//! | `MOVE /dav/a`, `Destination: /dav/b` | `/dav/a`, `/dav/a/`, `/dav/b`, `/dav/b/` |
//! | `PROPPATCH /dav/dir`, `Depth: 1` or `infinity` | `/dav/dir`, `/dav/dir/` |
//! | `LOCK /dav/dir` (no `Depth`, or `infinity`) | `/dav/dir`, `/dav/dir/` |
//! | `POST /bkt?delete` listing `x` and `y/z` | `/bkt/x`, `/bkt/y/z` |
//! | `POST /upload/storage/v1/b/bkt/o?name=x%2Fy` | `/bkt/x/y` |
//! | `DELETE /storage/v1/b/bkt/o/x%2Fy` | `/bkt/x/y` |
//! | `DELETE /b/bkt/o/x%2Fy` (the emulator's form), `DELETE //storage/v1/b/bkt/o/x` | its path (and subtree), `/bkt/x/y` (`/bkt/x`) |
//! | `POST /storage/v1/b/bkt/o/x/copyTo/b/bkt2/o/y` | `/bkt/x`, `/bkt2/y` |
//!
//! ```
//! use fencegate::reach::{reach, Rules};
//! use fencegate::Scope;
//! use http::Request;
//!
//! let rules = Rules { scope: Scope::Path, flat_keys: false };
//! let moving = Request::builder()
//!     .method("MOVE")
//!     .uri("/dav/tmp")
//!     .header("host", "gateway:8080")
//!     .header("destination", "http://gateway:8080/dav/report")
//!     .body(())
//!     .unwrap();
//! let reached = reach(&moving, &rules, None).unwrap();
//! assert_eq!(reached.key, "/dav/tmp");
//! assert_eq!(reached.keys, ["/dav/report", "/dav/report/", "/dav/tmp", "/dav/tmp/"]);
//! ```

use http::header::HeaderName;
use http::Uri;

use crate::head::RequestView;
use crate::key::{normalize_path, subtree_key, HostError, PathError, Scope};

mod operation;

pub use operation::{destination_path, is_plain, lists_objects_in_body};
use operation::{Kind, Operation};

/// The header naming the target of a WebDAV `COPY` or `MOVE`.
pub const DESTINATION: HeaderName = HeaderName::from_static("destination");

/// The header saying how deep a WebDAV method acts on a collection.
pub const DEPTH: HeaderName = HeaderName::from_static("depth");

/// The most keys an S3 `DeleteObjects` may list.
pub const MAX_LISTED_OBJECTS: usize = 1000;

/// The largest `DeleteObjects` body read (S3 allows 1,000 keys of at most
/// 1,024 bytes each, and their XML).
pub const MAX_LISTING_BYTES: usize = 2 * 1024 * 1024;

/// How requests map to fence keys: what [`reach`] needs of the layer's
/// configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rules {
    /// The fence key scope.
    pub scope: Scope,
    /// The store has no collections (S3, GCS, Azure): no write acts on
    /// everything under its path (`--flat-keys`).
    pub flat_keys: bool,
}

/// A write that reaches beyond its path in a way the gateway cannot read:
/// 400 `unfenceable_write`, never forwarded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unfenceable(pub String);

/// Why [`reach`] found no keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReachError {
    /// A path (the request's, a `Destination`'s, an object name's) does not
    /// normalise: 400 `invalid_path`.
    #[error(transparent)]
    Path(#[from] PathError),
    /// In the `host+` scopes, the request names no valid host: 400
    /// `invalid_path`.
    #[error(transparent)]
    Host(#[from] HostError),
    /// 400 `unfenceable_write`.
    #[error(transparent)]
    Unfenceable(#[from] Unfenceable),
}

pub use crate::head::ListedObjects;

/// What [`reach`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reached {
    /// The key of the request's own path (of the object a JSON API request
    /// names): the one logs name.
    pub key: String,
    /// Every key the request must be admitted on, sorted: its own, but for
    /// an S3 `DeleteObjects`, whose keys are only those it lists.
    pub keys: Vec<String>,
}

/// Every fence key a write (or fenced read) of `request` changes or reads,
/// in path and `prefix:N` scope (in `header` scope the lock name is the
/// only key: do not ask). `listed` holds the keys of an S3 `DeleteObjects` read from
/// its body.
pub fn reach<R: RequestView + ?Sized>(
    request: &R,
    rules: &Rules,
    listed: Option<&ListedObjects>,
) -> Result<Reached, ReachError> {
    let Operation { kind, writes, host } = Operation::read(request, rules.scope.has_host())?;
    let uri = request.uri();
    let mut keys = Vec::new();
    let own = match gcs_objects(uri, writes, rules.flat_keys)? {
        Some(GcsObjects {
            object,
            copy_to,
            canonical,
        }) => {
            if let Some(destination) = copy_to {
                keys.push(rules.scope.key_for_path(&destination));
            }
            if canonical {
                object
            } else {
                // Another spelling (`/b/...`, a `//`): what another store
                // would read as its plain path is fenced as well.
                keys.push(rules.scope.key_for_path(&object));
                normalize_path(uri.path())?
            }
        }
        None => normalize_path(uri.path())?,
    };
    let subtree = |path: &str| -> Option<String> {
        let applies = !rules.flat_keys
            && match rules.scope.path_scope() {
                Scope::Path | Scope::HostPath => true,
                // Only a path shorter than the prefix has keys under it.
                Scope::Prefix(n) | Scope::HostPrefix(n) => {
                    path.matches('/').count() < n.get() || path == "/"
                }
                Scope::Header => false,
            };
        applies.then(|| subtree_key(path))
    };
    match kind {
        Kind::Plain => {}
        Kind::Delete => {
            // A store without collections still removes many objects at
            // once when it deletes a bucket or container (SPEC: fenced on
            // every fenced object under it).
            let whole = subtree(&own).or_else(|| {
                (rules.flat_keys
                    && matches!(rules.scope.path_scope(), Scope::Path | Scope::HostPath)
                    && removes_container(uri, &own))
                .then(|| subtree_key(&own))
            });
            keys.extend(whole);
        }
        Kind::Copy { destination, deep } => {
            keys.push(rules.scope.key_for_path(&destination));
            if deep {
                keys.extend(subtree(&destination));
            }
        }
        Kind::Move { destination } => {
            keys.push(rules.scope.key_for_path(&destination));
            keys.extend(subtree(&own));
            keys.extend(subtree(&destination));
        }
        Kind::Deep => keys.extend(subtree(&own)),
        Kind::DeleteObjects => {
            let Some(ListedObjects(listed)) = listed else {
                return Err(Unfenceable(
                    "an S3 DeleteObjects names its keys in its body, which the fencing layer was not given".into(),
                )
                .into());
            };
            let base = if own == "/" { "" } else { own.as_str() };
            for object in listed {
                let path = normalize_decoded(&format!("{base}/{object}"))?;
                keys.push(rules.scope.key_for_path(&path));
            }
            return Ok(with_host(
                host.as_deref(),
                Reached {
                    key: rules.scope.key_for_path(&own),
                    keys,
                },
            ));
        }
        // An S3 POST-policy upload: a form posted to a bucket (or,
        // virtual-hosted, to the root).
        Kind::Form if own.matches('/').count() <= 1 => {
            return Err(Unfenceable(
                "an S3 POST-policy form upload names its key in the form body, which the gateway does not read: upload with PUT".into(),
            )
            .into());
        }
        Kind::Form => {}
    }
    let key = rules.scope.key_for_path(&own);
    keys.push(key.clone());
    Ok(with_host(host.as_deref(), Reached { key, keys }))
}

/// `reached`, its keys (in path space) given `host` in front if there is
/// one, sorted and without repeats.
fn with_host(host: Option<&str>, mut reached: Reached) -> Reached {
    if let Some(host) = host {
        let prefixed = |key: &mut String| key.insert_str(0, host);
        prefixed(&mut reached.key);
        reached.keys.iter_mut().for_each(prefixed);
    }
    reached.keys.sort_unstable();
    reached.keys.dedup();
    reached
}

/// Whether a `DELETE` of the normalised `own` path with `uri`'s query
/// removes a bucket or container: Azure's Delete Container
/// (`?restype=container` alone), or a path-style `DELETE /bucket` with no
/// sub-resource (S3's DeleteBucket, GCS's XML API). A configuration delete
/// (`DELETE /bucket?cors`) removes no object.
fn removes_container(uri: &Uri, own: &str) -> bool {
    match uri.query().filter(|query| !query.is_empty()) {
        None => own != "/" && own.matches('/').count() == 1,
        Some(query) => {
            query_values(query, "restype").is_some_and(|values| values == ["container"])
                && query.split('&').count() == 1
        }
    }
}

/// The object keys of an S3 `DeleteObjects` body
/// (`<Delete><Object><Key>k</Key></Object>...</Delete>`), at most
/// [`MAX_LISTED_OBJECTS`].
///
/// ```
/// let body = br#"<?xml version="1.0"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
///   <Object><Key>a &amp; b</Key></Object><Object><Key>c/d</Key><VersionId>3</VersionId></Object>
///   <Quiet>true</Quiet></Delete>"#;
/// let listed = fencegate::reach::listed_objects(body).unwrap();
/// assert_eq!(listed.0, ["a & b", "c/d"]);
/// assert!(fencegate::reach::listed_objects(b"<Delete><Object/></Delete>").is_err());
/// // Read whole or not at all: a comment would hide the rest of the key.
/// assert!(fencegate::reach::listed_objects(b"<Delete><Object><Key>a<!--x-->b</Key></Object></Delete>").is_err());
/// let cdata = fencegate::reach::listed_objects(b"<Delete><Object><Key>a<![CDATA[/b]]>c</Key></Object></Delete>").unwrap();
/// assert_eq!(cdata.0, ["a/bc"]);
/// ```
pub fn listed_objects(body: &[u8]) -> Result<ListedObjects, Unfenceable> {
    let bad = |why: String| Unfenceable(format!("the DeleteObjects body cannot be read: {why}"));
    let text = std::str::from_utf8(body).map_err(|_| bad("not UTF-8".into()))?;
    // XML readers normalise a raw CR (and CR LF) to LF, as the standard
    // says, or keep it: a key with one names two objects, one per reader
    // (`&#13;` is one character everywhere).
    if memchr::memchr(b'\r', body).is_some() {
        return Err(bad(
            "a raw carriage return, which XML readers read differently (write it &#13;)".into(),
        ));
    }
    let document = roxmltree::Document::parse(text).map_err(|e| bad(e.to_string()))?;
    let root = document.root_element();
    if root.tag_name().name() != "Delete" {
        return Err(bad(format!(
            "the root element is <{}>",
            root.tag_name().name()
        )));
    }
    let mut keys = Vec::new();
    for object in root.children().filter(|node| node.is_element()) {
        match object.tag_name().name() {
            "Quiet" => continue,
            "Object" => {}
            other => return Err(bad(format!("unexpected <{other}> in <Delete>"))),
        }
        let mut key = None;
        for field in object.children().filter(|node| node.is_element()) {
            if field.tag_name().name() == "Key" {
                if key.is_some() {
                    return Err(bad("an <Object> with two <Key>s".into()));
                }
                key = Some(whole_text(field).map_err(bad)?);
            }
        }
        let key = key.ok_or_else(|| bad("an <Object> without <Key>".into()))?;
        if key.is_empty() {
            return Err(bad("an empty <Key>".into()));
        }
        keys.push(key);
        if keys.len() > MAX_LISTED_OBJECTS {
            return Err(bad(format!("more than {MAX_LISTED_OBJECTS} keys")));
        }
    }
    if keys.is_empty() {
        return Err(bad("no <Object>".into()));
    }
    Ok(ListedObjects(keys))
}

/// The whole text of `element`, which must hold nothing but text (CDATA
/// and character references are text): a comment, a processing
/// instruction or an element inside would make the gateway read part of
/// what the store reads (`roxmltree`'s `text()` is the first text node
/// only). A DTD, and so any entity beyond the five predefined, is refused
/// by the parser itself.
fn whole_text(element: roxmltree::Node<'_, '_>) -> Result<String, String> {
    let mut text = String::new();
    for child in element.children() {
        match child.text() {
            Some(part) if child.is_text() => text.push_str(part),
            _ => {
                return Err(format!(
                    "<{}> holds something besides text",
                    element.tag_name().name()
                ))
            }
        }
    }
    Ok(text)
}

/// Whether `path` is in one of the JSON API's trees (checked before
/// anything else is done with it: most paths fail at the first bytes).
fn is_gcs_api(path: &str) -> bool {
    matches!(path.as_bytes().get(1), Some(b's' | b'u' | b'd' | b'b'))
        && [
            "/storage/v1/",
            "/upload/storage/v1/",
            "/download/storage/v1/",
            "/batch/storage/v1",
        ]
        .iter()
        .any(|tree| path.starts_with(tree))
}

/// What a Google Cloud Storage JSON API request names.
struct GcsObjects {
    /// The object the request acts on, as the XML API's path `/bucket/name`.
    object: String,
    /// The destination of a `copyTo` or `rewriteTo`.
    copy_to: Option<String>,
    /// The request spelled the JSON API as Google does (`/storage/v1/...`
    /// with nothing to collapse): no other store reads its path as an
    /// object of its own.
    canonical: bool,
}

/// Whether `path` may be a JSON API request in some form a GCS store
/// serves: its own trees, the emulator's `/b/...` without `/storage/v1`,
/// or either behind `//` or dot segments, which the store collapses. A
/// cheap look at the first bytes first: this runs on every request.
fn might_name_gcs_objects(path: &str) -> bool {
    if !matches!(
        path.as_bytes().get(1),
        Some(b's' | b'u' | b'd' | b'b' | b'/' | b'.')
    ) {
        return false;
    }
    let collapsed = collapse(path);
    is_gcs_api(&collapsed) || collapsed.starts_with("/b/")
}

/// `path` with empty and `.` segments dropped and `..` resolved, not
/// percent-decoded (a JSON API name keeps its `%2F`): the path a store
/// that collapses slashes routes on.
fn collapse(path: &str) -> std::borrow::Cow<'_, str> {
    if !path.contains("//") && !path.contains("/.") {
        return std::borrow::Cow::Borrowed(path);
    }
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            segment => segments.push(segment),
        }
    }
    let mut collapsed = String::with_capacity(path.len());
    for segment in segments {
        collapsed.push('/');
        collapsed.push_str(segment);
    }
    if collapsed.is_empty() || path.ends_with('/') {
        collapsed.push('/');
    }
    std::borrow::Cow::Owned(collapsed)
}

/// Maps the JSON API's spellings of an object to the XML API's path
/// (`/bucket/name`), so that all three share one fence; `None` for a
/// request that is not a JSON API object request.
fn gcs_objects(uri: &Uri, write: bool, flat_keys: bool) -> Result<Option<GcsObjects>, ReachError> {
    let raw = uri.path();
    if !might_name_gcs_objects(raw) {
        return Ok(None);
    }
    let collapsed = collapse(raw);
    let canonical = collapsed == raw && is_gcs_api(raw);
    // The emulator's other spellings are read only for a store without
    // collections (GCS runs with flat keys): a WebDAV store's `/b/x/o/y`
    // is a path and nothing else.
    if !canonical && !flat_keys {
        return Ok(None);
    }
    let path = if is_gcs_api(&collapsed) {
        collapsed.into_owned()
    } else {
        // The emulator's form without `/storage/v1`, read as the API's.
        format!("/storage/v1{collapsed}")
    };
    match gcs_objects_in(&path, uri.query(), write) {
        Ok(found) => Ok(found.map(|mut found| {
            found.canonical = canonical;
            found
        })),
        // Another spelling the JSON API cannot read may be an ordinary
        // path at another store (`/b/...` in an S3 bucket `b`): it is
        // fenced on its path, and on the object the emulator's pattern
        // (`/b/BUCKET/o/NAME...`, the name running to the end) would take.
        Err(_) if !canonical => Ok(greedy_object(&path).map(|object| GcsObjects {
            object,
            copy_to: None,
            canonical: false,
        })),
        Err(refused) => Err(refused),
    }
}

/// The object of `/storage/v1/b/BUCKET/o/NAME...` with the name running to
/// the end of the path, as the GCS emulator's routes read it.
fn greedy_object(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/storage/v1/b/")?;
    let (bucket, rest) = rest.split_once('/')?;
    let name = rest.strip_prefix("o/")?;
    let bucket = decode(bucket).ok()?;
    let name = decode(name).ok()?;
    if bucket.is_empty() || name.is_empty() {
        return None;
    }
    normalize_decoded(&format!("/{bucket}/{name}")).ok()
}

/// [`gcs_objects`] of `path`, in one of the JSON API's trees.
fn gcs_objects_in(
    raw: &str,
    query: Option<&str>,
    write: bool,
) -> Result<Option<GcsObjects>, ReachError> {
    let segments: Vec<&str> = raw.split('/').skip(1).collect();
    let refuse = |why: &str| -> Result<Option<GcsObjects>, ReachError> {
        if write {
            Err(Unfenceable(format!("Google Cloud Storage JSON API: {why}")).into())
        } else {
            Ok(None)
        }
    };
    let object = |bucket: &str, name: &str| -> Result<Option<String>, ReachError> {
        let bucket = decode(bucket)?;
        let name = decode(name)?;
        if bucket.is_empty() || name.is_empty() {
            return Ok(None);
        }
        Ok(Some(normalize_decoded(&format!("/{bucket}/{name}"))?))
    };
    let unnamed = "a bucket or object name is empty";
    match segments.as_slice() {
        ["batch", "storage", "v1", ..] => refuse("a batch request names its objects in its body"),
        ["storage", "v1", "b", bucket, "o"] | ["upload", "storage", "v1", "b", bucket, "o"] => {
            let query = query.unwrap_or_default();
            if query_values(query, "upload_id").is_some() {
                return refuse(
                    "a resumable upload session names its object when it starts, not in this request",
                );
            }
            match query_values(query, "name").as_deref() {
                Some([name]) => match object(bucket, &percent_encode(name))? {
                    Some(object) => Ok(Some(GcsObjects {
                        object,
                        copy_to: None,
                        canonical: true,
                    })),
                    None => refuse(unnamed),
                },
                Some(_) => refuse("name appears more than once"),
                None if write => refuse("an upload without ?name= names its object in its body"),
                None => Ok(None),
            }
        }
        ["storage", "v1", "b", bucket, "o", name, rest @ ..]
        | ["download", "storage", "v1", "b", bucket, "o", name, rest @ ..] => {
            let copy_to = match rest {
                [] | ["acl"] | ["acl", _] | ["compose"] | ["restore"] => None,
                ["copyTo" | "rewriteTo", "b", to_bucket, "o", to_name] => {
                    match object(to_bucket, to_name)? {
                        Some(destination) => Some(destination),
                        None => return refuse(unnamed),
                    }
                }
                _ => return refuse(&format!("unknown object sub-resource /{}", rest.join("/"))),
            };
            match object(bucket, name)? {
                Some(object) => Ok(Some(GcsObjects {
                    object,
                    copy_to,
                    canonical: true,
                })),
                None => refuse(unnamed),
            }
        }
        // Bucket-level requests (`/storage/v1/b/bkt`, its ACLs) change no
        // object; anything else in an object tree is unknown.
        ["storage", "v1", "b", ..] if segments.get(4) != Some(&"o") => Ok(None),
        _ => refuse(&format!("unknown path {raw}")),
    }
}

/// The values of `name` in a query string (form-decoded), if it appears.
fn query_values(query: &str, name: &str) -> Option<Vec<String>> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).ok()?;
    let values: Vec<String> = pairs
        .into_iter()
        .filter(|(key, _)| key == name)
        .map(|(_, value)| value)
        .collect();
    (!values.is_empty()).then_some(values)
}

/// Percent-decodes one path segment (a JSON API object name encodes its
/// `/` as `%2F`).
fn decode(segment: &str) -> Result<String, PathError> {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .map_err(|_| PathError::NotUtf8)
}

/// Encodes the one character [`decode`] would read differently in a name
/// that was already decoded (from the query).
fn percent_encode(name: &str) -> String {
    name.replace('%', "%25")
}

/// [`normalize_path`] of a path that is already percent-decoded (an S3
/// key, a decoded object name): `%` is a plain character in it.
fn normalize_decoded(path: &str) -> Result<String, PathError> {
    normalize_path(&percent_encode(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn keys(
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
        rules: Rules,
    ) -> Result<Vec<String>, ReachError> {
        let mut request = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        reach(&request.body(()).unwrap(), &rules, None).map(|reached| reached.keys)
    }

    const PATH: Rules = Rules {
        scope: Scope::Path,
        flat_keys: false,
    };

    #[test]
    fn gcs_json_names_are_read_in_every_form_the_emulator_serves() {
        let flat = Rules {
            flat_keys: true,
            ..PATH
        };
        assert_eq!(
            keys("DELETE", "/storage/v1/b/bkt/o/x%2Fy", &[], flat).unwrap(),
            ["/bkt/x/y"]
        );
        // Without /storage/v1, and behind a `//`: its path, and the object.
        let prefixless = keys("DELETE", "/b/bkt/o/x%2Fy", &[], flat).unwrap();
        assert_eq!(prefixless, ["/b/bkt/o/x/y", "/bkt/x/y"]);
        let doubled = keys("PATCH", "///storage/v1/b/bkt/o/x", &[], flat).unwrap();
        assert_eq!(doubled, ["/bkt/x", "/storage/v1/b/bkt/o/x"]);
        let copy = keys("POST", "/b/bkt/o/x/copyTo/b/bkt2/o/y", &[], flat).unwrap();
        assert_eq!(copy, ["/b/bkt/o/x/copyTo/b/bkt2/o/y", "/bkt/x", "/bkt2/y"]);
        // What the API cannot read is still fenced on its path and on the
        // emulator's greedy name, never refused: it may be a plain path.
        let odd = keys("PUT", "/b/bkt/o/x/extra", &[], flat).unwrap();
        assert_eq!(odd, ["/b/bkt/o/x/extra", "/bkt/x/extra"]);
        assert_eq!(keys("PUT", "/b/plain", &[], flat).unwrap(), ["/b/plain"]);
    }

    #[test]
    fn in_host_scopes_every_key_carries_the_request_host() {
        let host_path = Rules {
            scope: Scope::HostPath,
            flat_keys: false,
        };
        let found = keys(
            "DELETE",
            "/dav/dir",
            &[("host", "Tenant-A.example")],
            host_path,
        );
        assert_eq!(
            found.unwrap(),
            ["tenant-a.example/dav/dir", "tenant-a.example/dav/dir/"]
        );
        let found = keys(
            "MOVE",
            "/dav/a",
            &[
                ("host", "t.example:8080"),
                ("destination", "http://T.example:8080/dav/b"),
            ],
            host_path,
        );
        assert_eq!(
            found.unwrap(),
            [
                "t.example:8080/dav/a",
                "t.example:8080/dav/a/",
                "t.example:8080/dav/b",
                "t.example:8080/dav/b/",
            ]
        );
        assert!(matches!(
            keys("DELETE", "/dav/dir", &[], host_path),
            Err(ReachError::Host(HostError::Missing))
        ));
        let bucket = Rules {
            scope: "host+prefix:1".parse().unwrap(),
            flat_keys: false,
        };
        let found = keys("DELETE", "/", &[("host", "b.s3")], bucket);
        assert_eq!(found.unwrap(), ["b.s3/", "b.s3//"]);
    }

    #[test]
    fn destinations_normalise_like_paths() {
        let host = ("host", "GW:8080");
        for destination in [
            "/dav/b",
            "http://gw:8080/dav/b",
            "http://GW:8080/dav/./x/../b/",
            "http://gw.:8080//dav/%62?q=1",
        ] {
            let found = keys(
                "COPY",
                "/dav/a",
                &[
                    host,
                    ("destination", destination),
                    ("depth", "0"),
                    ("overwrite", "F"),
                ],
                PATH,
            );
            assert_eq!(found.unwrap(), ["/dav/a", "/dav/b"], "{destination}");
        }
        // Default ports fold.
        let found = keys(
            "COPY",
            "/a",
            &[
                ("host", "gw"),
                ("destination", "http://gw:80/b"),
                ("depth", "0"),
                ("overwrite", "F"),
            ],
            PATH,
        );
        assert_eq!(found.unwrap(), ["/a", "/b"]);
        let found = keys(
            "COPY",
            "/a",
            &[
                ("host", "gw:443"),
                ("destination", "https://gw/b"),
                ("depth", "0"),
                ("overwrite", "F"),
            ],
            PATH,
        );
        assert_eq!(found.unwrap(), ["/a", "/b"]);
        for bad in [
            "http://elsewhere:8080/dav/b",
            "http://gw:8081/dav/b",
            "ftp://gw:8080/dav/b",
            "dav/b",
            "/dav/b#frag",
        ] {
            let found = keys("MOVE", "/dav/a", &[host, ("destination", bad)], PATH);
            assert!(
                matches!(found, Err(ReachError::Unfenceable(_))),
                "{bad}: {found:?}"
            );
        }
        assert!(matches!(
            keys("MOVE", "/dav/a", &[host], PATH),
            Err(ReachError::Unfenceable(_))
        ));
        assert_eq!(
            keys("MOVE", "/dav/a", &[host, ("destination", "/../x")], PATH),
            Err(ReachError::Path(PathError::EscapesRoot))
        );
    }

    #[test]
    fn collections_by_method_depth_and_scope() {
        let found = |method: &str, depth: Option<&str>, rules: Rules| {
            let mut headers = vec![("destination", "/d/b")];
            headers.extend(depth.map(|depth| ("depth", depth)));
            keys(method, "/d/a", &headers, rules)
        };
        assert_eq!(found("DELETE", None, PATH).unwrap(), ["/d/a", "/d/a/"]);
        assert_eq!(
            found("MOVE", Some("0"), PATH).unwrap(),
            ["/d/a", "/d/a/", "/d/b", "/d/b/"]
        );
        assert_eq!(
            found("COPY", None, PATH).unwrap(),
            ["/d/a", "/d/b", "/d/b/"]
        );
        assert_eq!(
            found("COPY", Some("infinity"), PATH).unwrap(),
            ["/d/a", "/d/b", "/d/b/"]
        );
        // Overwrite: T (the default) deletes the destination first,
        // members and all, whatever the depth (RFC 4918 §9.8.4).
        assert_eq!(
            found("COPY", Some("0"), PATH).unwrap(),
            ["/d/a", "/d/b", "/d/b/"]
        );
        let copy = |overwrite: &str| {
            let headers = [
                ("destination", "/d/b"),
                ("depth", "0"),
                ("overwrite", overwrite),
            ];
            keys("COPY", "/d/a", &headers, PATH)
        };
        assert_eq!(copy("F").unwrap(), ["/d/a", "/d/b"]);
        assert_eq!(copy("T").unwrap(), ["/d/a", "/d/b", "/d/b/"]);
        assert!(matches!(copy("t"), Err(ReachError::Unfenceable(_))));
        // A LOCK is Depth: infinity unless it says 0.
        assert_eq!(found("LOCK", None, PATH).unwrap(), ["/d/a", "/d/a/"]);
        assert_eq!(
            found("LOCK", Some("infinity"), PATH).unwrap(),
            ["/d/a", "/d/a/"]
        );
        assert_eq!(found("LOCK", Some("0"), PATH).unwrap(), ["/d/a"]);
        assert_eq!(found("PROPPATCH", None, PATH).unwrap(), ["/d/a"]);
        assert_eq!(
            found("PROPPATCH", Some("1"), PATH).unwrap(),
            ["/d/a", "/d/a/"]
        );
        assert_eq!(found("PUT", None, PATH).unwrap(), ["/d/a"]);
        assert_eq!(found("MKCOL", None, PATH).unwrap(), ["/d/a"]);
        assert!(matches!(
            found("DELETE", Some("bogus"), PATH),
            Err(ReachError::Unfenceable(_))
        ));
        let flat = Rules {
            flat_keys: true,
            ..PATH
        };
        assert_eq!(found("DELETE", None, flat).unwrap(), ["/d/a"]);
        assert_eq!(found("MOVE", None, flat).unwrap(), ["/d/a", "/d/b"]);
        // prefix:N: only a path shorter than N segments has keys under it.
        let prefix2 = Rules {
            scope: "prefix:2".parse().unwrap(),
            flat_keys: false,
        };
        assert_eq!(found("DELETE", None, prefix2).unwrap(), ["/d/a"]);
        assert_eq!(keys("DELETE", "/d", &[], prefix2).unwrap(), ["/d", "/d/"]);
        let prefix1 = Rules {
            scope: "prefix:1".parse().unwrap(),
            flat_keys: false,
        };
        assert_eq!(found("MOVE", None, prefix1).unwrap(), ["/d"]);
        assert_eq!(keys("DELETE", "/", &[], PATH).unwrap(), ["/", "//"]);
    }

    #[test]
    fn delete_objects_lists_its_keys() {
        let request = Request::post("/bkt?delete").body(()).unwrap();
        assert!(lists_objects_in_body(&request));
        assert!(!lists_objects_in_body(
            &Request::post("/bkt?deleted").body(()).unwrap()
        ));
        assert!(!lists_objects_in_body(
            &Request::put("/bkt?delete").body(()).unwrap()
        ));
        assert!(matches!(
            reach(&request, &PATH, None),
            Err(ReachError::Unfenceable(_))
        ));
        let listed = ListedObjects(vec!["a".into(), "b/../c".into(), "x%41".into(), "a".into()]);
        let reached = reach(&request, &PATH, Some(&listed)).unwrap();
        assert_eq!(reached.keys, ["/bkt/a", "/bkt/c", "/bkt/x%41"]);
        assert_eq!(reached.key, "/bkt");
        let root = Request::post("/?delete").body(()).unwrap();
        assert_eq!(
            reach(&root, &PATH, Some(&listed)).unwrap().keys,
            ["/a", "/c", "/x%41"]
        );
        let escaping = ListedObjects(vec!["../../x".into()]);
        assert!(matches!(
            reach(&request, &PATH, Some(&escaping)),
            Err(ReachError::Path(_))
        ));
        for bad in [
            &b"<Delete><Object><Key></Key></Object></Delete>"[..],
            b"<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>",
            b"<Other/>",
            b"<Delete><Object><Key>a</Key></Object>",
            b"\xff",
            b"<Delete><Thing/></Delete>",
            b"<Delete><Object><Key>a\r\nb</Key></Object></Delete>",
            b"<Delete>\r\n<Object><Key>a</Key></Object></Delete>",
        ] {
            assert!(
                listed_objects(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let many: String = (0..=MAX_LISTED_OBJECTS)
            .map(|i| format!("<Object><Key>{i}</Key></Object>"))
            .collect();
        assert!(listed_objects(format!("<Delete>{many}</Delete>").as_bytes()).is_err());
        assert!(listed_objects(b"<Delete><Quiet>true</Quiet></Delete>").is_err());
    }

    #[test]
    fn form_uploads_to_a_bucket_are_refused() {
        let form = ("content-type", "multipart/form-data; boundary=x");
        assert!(matches!(
            keys("POST", "/bkt", &[form], PATH),
            Err(ReachError::Unfenceable(_))
        ));
        assert!(matches!(
            keys("POST", "/", &[form], PATH),
            Err(ReachError::Unfenceable(_))
        ));
        assert_eq!(
            keys("POST", "/api/upload", &[form], PATH).unwrap(),
            ["/api/upload"]
        );
        assert_eq!(keys("POST", "/bkt", &[], PATH).unwrap(), ["/bkt"]);
    }

    #[test]
    fn gcs_json_api_names_share_the_xml_api_key() {
        let xml = keys("PUT", "/bkt/dir/obj", &[], PATH).unwrap();
        for (method, uri) in [
            (
                "POST",
                "/upload/storage/v1/b/bkt/o?uploadType=media&name=dir%2Fobj",
            ),
            (
                "POST",
                "/upload/storage/v1/b/bkt/o?uploadType=media&name=dir/obj",
            ),
            ("POST", "/storage/v1/b/bkt/o?name=dir%2Fobj"),
            ("DELETE", "/storage/v1/b/bkt/o/dir%2Fobj"),
            ("PATCH", "/storage/v1/b/bkt/o/dir%2Fobj"),
            ("POST", "/storage/v1/b/bkt/o/dir%2Fobj/acl"),
            ("POST", "/storage/v1/b/bkt/o/dir%2Fobj/compose"),
            ("GET", "/download/storage/v1/b/bkt/o/dir%2Fobj"),
        ] {
            let rules = Rules {
                flat_keys: true,
                ..PATH
            };
            assert_eq!(
                keys(method, uri, &[], rules).unwrap(),
                xml,
                "{method} {uri}"
            );
        }
        let copy = keys(
            "POST",
            "/storage/v1/b/bkt/o/a/rewriteTo/b/other/o/x%2Fy",
            &[],
            PATH,
        )
        .unwrap();
        assert_eq!(copy, ["/bkt/a", "/other/x/y"]);
        // A name with a literal % (from the query) is not decoded twice.
        let literal = keys(
            "POST",
            "/upload/storage/v1/b/bkt/o?name=100%2541",
            &[],
            PATH,
        )
        .unwrap();
        assert_eq!(literal, ["/bkt/100%41"]);
        for (method, uri) in [
            ("POST", "/upload/storage/v1/b/bkt/o?uploadType=multipart"),
            (
                "PUT",
                "/upload/storage/v1/b/bkt/o?uploadType=resumable&upload_id=xyz",
            ),
            ("POST", "/upload/storage/v1/b/bkt/o?name=a&name=b"),
            ("POST", "/batch/storage/v1"),
            ("POST", "/storage/v1/b/bkt/o/a/unknownThing"),
            ("POST", "/storage/v1/b/bkt/o/?name=x"),
            ("PUT", "/upload/storage/v1/b/bkt/o/x"),
            ("DELETE", "/storage/v1/b/bkt/o/"),
            ("POST", "/storage/v1/b/bkt/o/a/copyTo/b/other/o/"),
        ] {
            assert!(
                matches!(
                    keys(method, uri, &[], PATH),
                    Err(ReachError::Unfenceable(_))
                ),
                "{method} {uri}"
            );
        }
        // Listing a bucket is no object's read; a bucket's own requests
        // change no object.
        assert_eq!(
            keys("GET", "/storage/v1/b/bkt/o", &[], PATH).unwrap(),
            ["/storage/v1/b/bkt/o"]
        );
        let flat = Rules {
            flat_keys: true,
            ..PATH
        };
        assert_eq!(
            keys("PATCH", "/storage/v1/b/bkt", &[], flat).unwrap(),
            ["/storage/v1/b/bkt"]
        );
    }
}
