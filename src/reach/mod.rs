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

use http::Uri;

use crate::head::RequestView;
use crate::key::{normalize_path, subtree_key, Scope};

mod error;
mod gcs;
mod operation;

pub use error::{ReachError, Unfenceable};
use gcs::{gcs_objects, normalize_decoded, GcsObjects};
pub use operation::{destination_path, is_plain, lists_objects_in_body, DEPTH, DESTINATION};
use operation::{Kind, RequestOperation};

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
    let RequestOperation { kind, writes, host } =
        RequestOperation::read(request, rules.scope.has_host())?;
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
/// (`?restype=container`, whatever rides along), or a path-style `DELETE /bucket` with no
/// sub-resource (S3's DeleteBucket, GCS's XML API). A configuration delete
/// (`DELETE /bucket?cors`) removes no object.
fn removes_container(uri: &Uri, own: &str) -> bool {
    let mut only_inert = true;
    for pair in uri.query().unwrap_or("").split(['&', ';']) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = percent_encoding::percent_decode_str(name)
            .decode_utf8_lossy()
            .to_ascii_lowercase();
        let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        // Whatever rides along (a `timeout`, a SAS): a Delete Container.
        if name == "restype" && value == "container" {
            return true;
        }
        only_inert &= name.is_empty() || is_inert_parameter(&name);
    }
    only_inert && own != "/" && own.matches('/').count() == 1
}

/// A query parameter that does not make a `DELETE /bucket` another
/// operation than DeleteBucket: the service's time limit, the SDKs'
/// operation name, and credentials (a presigned URL's `X-Amz-*`, a SAS).
/// Read lowercase. Anything else (`cors`, `policy`, ...) is a
/// configuration delete, which removes no object.
fn is_inert_parameter(name: &str) -> bool {
    matches!(name, "timeout" | "x-id")
        || name.starts_with("x-amz-")
        || crate::chain::is_sas_parameter(name)
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
    if body.contains(&b'\r') {
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
pub(crate) fn whole_text(element: roxmltree::Node<'_, '_>) -> Result<String, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{HostError, PathError};
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
