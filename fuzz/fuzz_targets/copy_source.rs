//! S3's copy source (`x-amz-copy-source`, CopyObject and UploadPartCopy;
//! `fencegate::dialect::s3_copy_source`, what custody authorises a copy's
//! read by) against three other readings of the same value:
//!
//! - a plain reading of SPEC's grammar written here ("bucket/key, one
//!   optional leading `/`, optional `?versionId=`, percent-decoded once",
//!   with the rules the module documents): the gateway accepts exactly
//!   what it accepts, and reads the same bucket, key and version;
//! - moto's (`urlparse`, then `unquote(path).lstrip("/").split("/", 1)`,
//!   emulated as Python 3.11 does it): every source the gateway accepts,
//!   moto reads as the same bucket and key (a store copying another object
//!   than the one authorised is the misreading deny by default is for);
//! - the gateway's own: the source spelt again as SDKs spell it (botocore's
//!   quoting, every byte escaped, with and without the leading `/`) reads
//!   back the same; its object path is one the gateway takes as a
//!   request's own S3 key (`misread_s3_key`), and a valid bucket.

#![no_main]

use std::fmt::Write;

use fencegate::dialect::s3_copy_source::{copy_source, CopySource};
use fencegate::misreading::misread_s3_key;
use libfuzzer_sys::fuzz_target;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// botocore's quoting of a copy source's key (`percent_encode(key,
/// safe='-._~/')`).
const BOTOCORE_KEY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// Every escape of `raw` is `%` and two hex digits, seen one character
/// at a time.
fn escapes_are_whole(raw: &str) -> bool {
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            for _ in 0..2 {
                match chars.next() {
                    Some(h) if h.is_ascii_hexdigit() => {}
                    _ => return false,
                }
            }
        }
    }
    true
}

/// SPEC's grammar, read plainly: `Some((bucket, key, version))` or refused.
fn spec_reading(value: &str) -> Option<(String, String, Option<String>)> {
    if value
        .chars()
        .any(|c| !('!'..='~').contains(&c) || c == '#' || c == ';')
    {
        return None;
    }
    let value = value.strip_prefix('/').unwrap_or(value);
    let (path, version) = match value.find('?') {
        None => (value, None),
        Some(at) => {
            let version = value[at + 1..].strip_prefix("versionId=")?;
            if version.is_empty() || version.contains('&') {
                return None;
            }
            (&value[..at], Some(version.to_owned()))
        }
    };
    let slash = path.find('/')?;
    let (bucket, key) = (&path[..slash], &path[slash + 1..]);
    if !escapes_are_whole(bucket) || !escapes_are_whole(key) {
        return None;
    }
    let bucket = percent_decode_str(bucket).decode_utf8().ok()?.into_owned();
    let key = percent_decode_str(key).decode_utf8().ok()?.into_owned();
    let bucket_ok = bucket.len() >= 3
        && bucket.len() <= 63
        && bucket
            .chars()
            .all(|c| "abcdefghijklmnopqrstuvwxyz0123456789.-".contains(c));
    if !bucket_ok {
        return None;
    }
    let inner = key.trim_end_matches('/');
    if inner.is_empty()
        || inner
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return None;
    }
    Some((bucket, key, version))
}

/// moto's reading (`moto/s3/responses.py`, copy_object and
/// upload_part_copy): `urlparse(value)` as Python 3.11's `urllib.parse`
/// splits it, then `unquote(path).lstrip("/").split("/", 1)`; `None`
/// where moto fails (no `/` left: a 500).
fn moto_reading(value: &str) -> Option<(String, String)> {
    // urlsplit: leading C0 controls and spaces stripped, tabs and line
    // ends removed anywhere.
    let mut url: String = value
        .trim_start_matches(|c: char| c <= ' ')
        .chars()
        .filter(|c| !matches!(c, '\t' | '\r' | '\n'))
        .collect();
    if let Some(colon) = url.find(':') {
        let scheme = &url[..colon];
        let first_alpha = scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic());
        let all_scheme_chars = scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
        if colon > 0 && first_alpha && all_scheme_chars {
            url = url[colon + 1..].to_owned();
        }
    }
    if url.starts_with("//") {
        let end = url[2..].find(['/', '?', '#']).map_or(url.len(), |i| i + 2);
        url = url[end..].to_owned();
    }
    if let Some(hash) = url.find('#') {
        url.truncate(hash);
    }
    if let Some(question) = url.find('?') {
        url.truncate(question);
    }
    // urlparse: the last segment's `;parameters` are not path.
    let last = url.rfind('/').unwrap_or(0);
    if let Some(semicolon) = url[last..].find(';') {
        url.truncate(last + semicolon);
    }
    let path = percent_decode_str(&url).decode_utf8_lossy();
    let (bucket, key) = path.trim_start_matches('/').split_once('/')?;
    Some((bucket.to_owned(), key.to_owned()))
}

/// `source` spelt as a client would send it.
fn spellings(source: &CopySource) -> Vec<String> {
    let version = match &source.version_id {
        Some(v) => format!("?versionId={v}"),
        None => String::new(),
    };
    let botocore = utf8_percent_encode(&source.key, BOTOCORE_KEY).to_string();
    let all_escaped = |s: &str| {
        let mut escaped = String::with_capacity(3 * s.len());
        for b in s.bytes() {
            let _ = write!(escaped, "%{b:02X}");
        }
        escaped
    };
    vec![
        format!("{}/{botocore}{version}", source.bucket),
        format!("/{}/{botocore}{version}", source.bucket),
        format!(
            "{}/{}{version}",
            all_escaped(&source.bucket),
            all_escaped(&source.key)
        ),
    ]
}

fuzz_target!(|data: &[u8]| {
    // A field the gateway reads as text (`HeaderValue::to_str`) or a
    // presigned parameter made one: never other than UTF-8.
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let read = copy_source(value);
    let spec = spec_reading(value);
    let gateway = read
        .as_ref()
        .ok()
        .map(|s| (s.bucket.clone(), s.key.clone(), s.version_id.clone()));
    assert_eq!(gateway, spec, "{value:?}: the gateway {read:?}");
    let Ok(source) = read else {
        assert!(!read.unwrap_err().to_string().is_empty());
        return;
    };

    let (bucket, key) = (&source.bucket, &source.key);
    assert_eq!(
        moto_reading(value)
            .as_ref()
            .map(|(b, k)| (b.as_str(), k.as_str())),
        Some((bucket.as_str(), key.as_str())),
        "{value:?}: moto reads another object than the gateway"
    );
    assert_eq!(source.object(), format!("/{bucket}/{key}"));

    for spelt in spellings(&source) {
        assert_eq!(
            copy_source(&spelt).as_ref(),
            Ok(&source),
            "{value:?} spelt {spelt:?}"
        );
    }
    // The object path as a request's own target: a key the gateway takes.
    let path = format!("/{bucket}/{}", utf8_percent_encode(key, BOTOCORE_KEY));
    assert!(
        !misread_s3_key(&path),
        "{value:?}: {path:?} is no S3 key the gateway takes"
    );
});
