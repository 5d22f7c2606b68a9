//! Google Cloud Storage's JSON API: the objects a request to its trees
//! (`/storage/v1/b/...`, `/upload/...`, `/download/...`, an emulator's
//! `/b/...`) names, read apart from the path as a store that collapses
//! slashes would route it; and the path helpers [`reach`](super::reach)
//! shares with it.

use http::Uri;

use super::error::{ReachError, Unfenceable};
use crate::key::{normalize_path, PathError};

/// Whether `path` is in one of the JSON API's trees (checked before
/// anything else is done with it: most paths fail at the first bytes).
pub(super) fn is_gcs_api(path: &str) -> bool {
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
pub(super) struct GcsObjects {
    /// The object the request acts on, as the XML API's path `/bucket/name`.
    pub(super) object: String,
    /// The destination of a `copyTo` or `rewriteTo`.
    pub(super) copy_to: Option<String>,
    /// The request spelled the JSON API as Google does (`/storage/v1/...`
    /// with nothing to collapse): no other store reads its path as an
    /// object of its own.
    pub(super) canonical: bool,
}

/// Whether `path` may be a JSON API request in some form a GCS store
/// serves: its own trees, the emulator's `/b/...` without `/storage/v1`,
/// or either behind `//` or dot segments, which the store collapses. A
/// cheap look at the first bytes first: this runs on every request.
pub(super) fn might_name_gcs_objects(path: &str) -> bool {
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
pub(super) fn collapse(path: &str) -> std::borrow::Cow<'_, str> {
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
pub(super) fn gcs_objects(
    uri: &Uri,
    write: bool,
    flat_keys: bool,
) -> Result<Option<GcsObjects>, ReachError> {
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
pub(super) fn greedy_object(path: &str) -> Option<String> {
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
pub(super) fn gcs_objects_in(
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
pub(super) fn query_values(query: &str, name: &str) -> Option<Vec<String>> {
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
pub(super) fn decode(segment: &str) -> Result<String, PathError> {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .map_err(|_| PathError::NotUtf8)
}

/// Encodes the one character [`decode`] would read differently in a name
/// that was already decoded (from the query).
pub(super) fn percent_encode(name: &str) -> String {
    name.replace('%', "%25")
}

/// [`normalize_path`] of a path that is already percent-decoded (an S3
/// key, a decoded object name): `%` is a plain character in it.
pub(super) fn normalize_decoded(path: &str) -> Result<String, PathError> {
    normalize_path(&percent_encode(path))
}
