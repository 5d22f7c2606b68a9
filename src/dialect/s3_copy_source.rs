//! S3's copy source (`x-amz-copy-source`: CopyObject, UploadPartCopy), read
//! by one strict grammar (SPEC "Deny by default": copy and rename sources):
//!
//! ```text
//! copy-source = ["/"] bucket "/" key ["?versionId=" version]
//! ```
//!
//! `bucket` and `key` percent-decoded once (every `%` an escape of two hex
//! digits, the decoded key UTF-8); the bucket then one S3 accepts by name (3
//! to 63 of `a-z0-9.-`), the key not empty and without an empty, `.` or
//! `..` segment inside (a trailing `/` is a key of its own, kept: S3 keys are
//! literal, as for a request's own key); `version` not empty, as sent. The
//! whole value visible ASCII without `#` or `;`, which a URL reader takes for
//! a fragment or the last segment's parameters (moto, reading the source
//! with Python's `urlparse`, drops both from the key). Anything else is
//! refused: a store that reads a source otherwise than the gateway (moto
//! reads `//a/b/k` as bucket `b`, `urlparse` taking `a` for a host) would
//! copy an object the gateway never authorised.
//!
//! ```
//! use fencegate::dialect::s3_copy_source::{copy_source, CopySourceError};
//!
//! let source = copy_source("/bkt/a%20b/c?versionId=3").unwrap();
//! assert_eq!((source.bucket.as_str(), source.key.as_str()), ("bkt", "a b/c"));
//! assert_eq!(source.version_id.as_deref(), Some("3"));
//! assert_eq!(source.object(), "/bkt/a b/c");
//! assert_eq!(copy_source("//bkt/other/k"), Err(CopySourceError::Bucket));
//! assert_eq!(copy_source("bkt/../k"), Err(CopySourceError::Segment));
//! assert_eq!(copy_source("bkt/k?acl"), Err(CopySourceError::Query));
//! ```

use std::fmt;

/// A copy's source, as S3 reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySource {
    /// The bucket, decoded.
    pub bucket: String,
    /// The key, decoded (trailing `/`s kept).
    pub key: String,
    /// `?versionId=`'s value, as sent.
    pub version_id: Option<String>,
}

impl CopySource {
    /// `/bucket/key`: the object path a copy reads (and is authorised to).
    pub fn object(&self) -> String {
        format!("/{}/{}", self.bucket, self.key)
    }
}

/// Why a copy source is refused; each names the rule it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopySourceError {
    /// A byte outside visible ASCII, or a `#` or `;`.
    Character,
    /// No `/` after the bucket, or no bucket S3 accepts by name (an empty
    /// one: more than one leading `/`).
    Bucket,
    /// A `%` not followed by two hex digits, or a key not UTF-8 decoded.
    Escape,
    /// An empty key, or an empty, `.` or `..` segment inside it.
    Segment,
    /// A query other than one `versionId=` with a value (no `&`).
    Query,
}

impl fmt::Display for CopySourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CopySourceError::Character => {
                "x-amz-copy-source may hold only visible ASCII, and no '#' or ';' (percent-encode them)"
            }
            CopySourceError::Bucket => {
                "x-amz-copy-source must be bucket/key, with at most one leading '/' and a valid bucket name"
            }
            CopySourceError::Escape => {
                "x-amz-copy-source has a '%' that is no escape, or a key that is not UTF-8 once decoded"
            }
            CopySourceError::Segment => {
                "x-amz-copy-source's key may not be empty or have an empty, '.' or '..' segment (S3 keys are literal)"
            }
            CopySourceError::Query => {
                "x-amz-copy-source may carry no query but one ?versionId= with a value"
            }
        })
    }
}

impl std::error::Error for CopySourceError {}

/// S3's bucket naming rules, loosely: 3 to 63 of `a-z0-9.-`.
pub fn is_bucket_name(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
}

/// `value` (an `x-amz-copy-source` field, or the presigned parameter that
/// becomes one) read by the grammar of this module.
pub fn copy_source(value: &str) -> Result<CopySource, CopySourceError> {
    if !value
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'#' && b != b';')
    {
        return Err(CopySourceError::Character);
    }
    let (path, query) = match value.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (value, None),
    };
    let version_id = match query {
        None => None,
        Some(query) => match query.strip_prefix("versionId=") {
            Some(version) if !version.is_empty() && !version.contains('&') => {
                Some(version.to_owned())
            }
            _ => return Err(CopySourceError::Query),
        },
    };
    let path = path.strip_prefix('/').unwrap_or(path);
    let (bucket, key) = path.split_once('/').ok_or(CopySourceError::Bucket)?;
    let bucket = decoded(bucket)?;
    if !is_bucket_name(&bucket) {
        return Err(CopySourceError::Bucket);
    }
    let key = decoded(key)?;
    let mut segments = key.trim_end_matches('/').split('/');
    if key.trim_end_matches('/').is_empty()
        || segments.any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return Err(CopySourceError::Segment);
    }
    Ok(CopySource {
        bucket,
        key,
        version_id,
    })
}

/// `raw` percent-decoded once, every `%` an escape, as UTF-8.
fn decoded(raw: &str) -> Result<String, CopySourceError> {
    let bytes = raw.as_bytes();
    let malformed = bytes.iter().enumerate().any(|(i, &b)| {
        b == b'%'
            && !bytes
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return Err(CopySourceError::Escape);
    }
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map(|key| key.into_owned())
        .map_err(|_| CopySourceError::Escape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(value: &str) -> Result<(String, String, Option<String>), CopySourceError> {
        copy_source(value).map(|source| (source.bucket, source.key, source.version_id))
    }

    #[test]
    fn the_forms_s3_documents_are_read() {
        let plain = |b: &str, k: &str| Ok((b.to_owned(), k.to_owned(), None));
        assert_eq!(read("bkt/k"), plain("bkt", "k"));
        assert_eq!(read("/bkt/k"), plain("bkt", "k"));
        assert_eq!(read("bkt/a%20b/c%2Fd"), plain("bkt", "a b/c/d"));
        assert_eq!(read("bkt/%E2%82%AC"), plain("bkt", "€"));
        assert_eq!(read("bkt/a%252F"), plain("bkt", "a%2F"));
        assert_eq!(read("bkt/dir/"), plain("bkt", "dir/"));
        assert_eq!(read("bkt/a\\b"), plain("bkt", "a\\b"));
        assert_eq!(read("%62kt/k"), plain("bkt", "k"));
        assert_eq!(
            read("/my.bucket-1/k?versionId=3/L4kq+tJ.x_y"),
            Ok((
                "my.bucket-1".into(),
                "k".into(),
                Some("3/L4kq+tJ.x_y".into())
            ))
        );
        assert_eq!(copy_source("bkt/a%20b").unwrap().object(), "/bkt/a b");
    }

    #[test]
    fn every_other_form_is_refused() {
        use CopySourceError::*;
        for (value, why) in [
            // What moto's urlparse reads as a host, a scheme, a fragment
            // or parameters.
            ("//bkt/other/k", Bucket),
            ("///bkt/k", Bucket),
            ("bkt:80/other/k", Bucket),
            ("http://h/bkt/k", Bucket),
            ("bkt/k#frag", Character),
            ("bkt/dir/f;x", Character),
            ("bkt/a b", Character),
            ("bkt/a\tb", Character),
            ("bkt/é", Character),
            ("", Bucket),
            ("bkt", Bucket),
            ("/bkt", Bucket),
            ("BKT/k", Bucket),
            ("ab/k", Bucket),
            ("b%2Fc/k", Bucket),
            ("bkt/", Segment),
            ("bkt//", Segment),
            ("bkt//k", Segment),
            ("bkt/a//b", Segment),
            ("bkt/../other/k", Segment),
            ("bkt/a/%2E%2E/k", Segment),
            ("bkt/a%2F%2Fb", Segment),
            ("bkt/.", Segment),
            ("bkt/a%zz", Escape),
            ("bkt/a%4", Escape),
            ("bkt/%FF", Escape),
            ("bkt/k?", Query),
            ("bkt/k?versionId=", Query),
            ("bkt/k?versionId=1&acl", Query),
            ("bkt/k?acl", Query),
            ("bkt/k?versionid=1", Query),
        ] {
            assert_eq!(copy_source(value), Err(why), "{value:?}");
        }
    }
}
