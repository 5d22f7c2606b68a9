//! Step 2 of the data path: which fence a request belongs to.
//!
//! A fence is kept per *key*. The [`Scope`] says how a request maps to its key:
//! its whole normalised path, the first N segments of it (one fence per bucket
//! or folder), or the lock name the client sends in `X-Fencing-Lock`; and in
//! the `host+` scopes the request's host before either path key, for stores
//! that name a bucket or tenant in the host (S3's virtual-hosted style).
//!
//! Normalisation exists to defeat alias bypass: `/a/b`, `//a/b`, `/a/./b`,
//! `/a/x/../b` and `/a/%62` name one object at most backends, so they must share
//! one fence. The rule is that normalising may *merge* two objects into one
//! fence (safe: it only serialises more) but must never *split* one object into
//! two fences (unsafe: a stale holder would find a fence with no history).
//!
//! ```
//! use fencegate::key::{normalize_path, Scope};
//!
//! assert_eq!(normalize_path("//a/./x/../%62/").unwrap(), "/a/b");
//! assert!(normalize_path("/a/../../etc/passwd").is_err());
//!
//! let bucket: Scope = "prefix:1".parse().unwrap();
//! assert_eq!(bucket.key_for_path("/photos/2024/cat.jpg"), "/photos");
//!
//! let virtual_hosted: Scope = "host+path".parse().unwrap();
//! let host = fencegate::key::normalize_host("MyBucket.s3.amazonaws.com.:443").unwrap();
//! assert_eq!(virtual_hosted.key_for(Some(&host), "/reports/q3.csv"), "mybucket.s3.amazonaws.com/reports/q3.csv");
//! ```

use std::fmt;
use std::num::NonZeroUsize;
use std::str::FromStr;

use std::borrow::Cow;

use http::header::{HeaderName, HOST};
use http::Uri;

use crate::head::{visible_str, HeaderFields};

/// The header that names the lock in [`Scope::Header`].
pub const LOCK_HEADER: HeaderName = HeaderName::from_static("x-fencing-lock");

/// The longest lock name accepted in [`Scope::Header`].
pub const MAX_LOCK_NAME_LEN: usize = 256;

/// Why a request path cannot be given a fence key. Answered with 400
/// `invalid_path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// A `..` segment climbs above the root.
    #[error("the path climbs above the root with '..'")]
    EscapesRoot,
    /// The percent-decoded path is not UTF-8.
    #[error("the percent-decoded path is not UTF-8")]
    NotUtf8,
}

/// Why a request's host cannot be part of a fence key in the `host+`
/// scopes. Answered with 400 `invalid_path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// Neither the request target nor a `Host` header names a host.
    #[error("the request names no host (an absolute target, Host or :authority), which the host+ scopes key on")]
    Missing,
    /// `Host` appears more than once.
    #[error("Host appears more than once")]
    Repeated,
    /// Not a reg-name, IPv4 address or bracketed IPv6 address, with an
    /// optional numeric port.
    #[error("the request's host is not a valid host[:port]")]
    Malformed,
}

/// Why an `X-Fencing-Lock` header was refused. Answered with 400
/// `invalid_token`, since it is part of the token the client presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LockNameError {
    /// The header is absent on a fenced request in `header` scope.
    #[error("X-Fencing-Lock is required in header scope")]
    Missing,
    /// The header appears more than once.
    #[error("X-Fencing-Lock appears more than once")]
    Repeated,
    /// Empty, longer than 256 bytes, or not printable ASCII.
    #[error("X-Fencing-Lock must be 1 to 256 printable ASCII characters")]
    Malformed,
}

/// How a request maps to its fence key (`--scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// One fence per normalised path.
    #[default]
    Path,
    /// One fence per first N segments of the normalised path.
    Prefix(NonZeroUsize),
    /// One fence per value of `X-Fencing-Lock`.
    Header,
    /// One fence per host and normalised path (`host+path`): the host
    /// followed by the key of [`Scope::Path`].
    HostPath,
    /// One fence per host and first N segments (`host+prefix:N`): the host
    /// followed by the key of [`Scope::Prefix`].
    HostPrefix(NonZeroUsize),
}

/// A `--scope` value that is not one of the scopes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid scope {0:?}: expected 'path', 'prefix:N' with N >= 1, 'header', 'host+path' or 'host+prefix:N'")]
pub struct ScopeParseError(String);

impl FromStr for Scope {
    type Err = ScopeParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let prefix = |n: &str| n.parse::<NonZeroUsize>().ok();
        let scope = match s {
            "path" => Some(Scope::Path),
            "header" => Some(Scope::Header),
            "host+path" => Some(Scope::HostPath),
            _ => match s.strip_prefix("host+prefix:") {
                Some(n) => prefix(n).map(Scope::HostPrefix),
                None => s
                    .strip_prefix("prefix:")
                    .and_then(prefix)
                    .map(Scope::Prefix),
            },
        };
        scope.ok_or_else(|| ScopeParseError(s.to_owned()))
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Path => f.write_str("path"),
            Scope::Prefix(n) => write!(f, "prefix:{n}"),
            Scope::Header => f.write_str("header"),
            Scope::HostPath => f.write_str("host+path"),
            Scope::HostPrefix(n) => write!(f, "host+prefix:{n}"),
        }
    }
}

impl Scope {
    /// Whether keys start with the request's host (the `host+` scopes).
    pub fn has_host(self) -> bool {
        matches!(self, Scope::HostPath | Scope::HostPrefix(_))
    }

    /// The scope of a key's path part: `path` for `host+path`,
    /// `prefix:N` for `host+prefix:N`, the scope itself otherwise.
    pub fn path_scope(self) -> Scope {
        match self {
            Scope::HostPath => Scope::Path,
            Scope::HostPrefix(n) => Scope::Prefix(n),
            other => other,
        }
    }

    /// The key of a request to `host` (normalised by [`normalize_host`];
    /// used in the `host+` scopes only) for an already normalised path.
    pub fn key_for(&self, host: Option<&str>, normalized: &str) -> String {
        match host.filter(|_| self.has_host()) {
            Some(host) => {
                let path = self.key_for_path(normalized);
                let mut key = String::with_capacity(host.len() + path.len());
                key.push_str(host);
                key.push_str(&path);
                key
            }
            None => self.key_for_path(normalized),
        }
    }

    /// [`key_for_path`](Self::key_for_path) for a path the caller owns:
    /// no copy in `path` scope.
    pub(crate) fn into_key(self, normalized: String) -> String {
        match self {
            Scope::Path | Scope::Header => normalized,
            _ => self.key_for_path(&normalized),
        }
    }

    /// The key for an already normalised path in `path` and `prefix:N`
    /// scope, and its path part in the `host+` scopes
    /// ([`key_for`](Self::key_for) adds the host). In `header` scope the
    /// key is the lock name instead; this returns the path unchanged.
    pub fn key_for_path(&self, normalized: &str) -> String {
        match self.path_scope() {
            Scope::Path | Scope::Header | Scope::HostPath => normalized.to_owned(),
            Scope::Prefix(n) | Scope::HostPrefix(n) => {
                // Segment i ends at the (i+1)-th '/' after the leading one.
                let end = normalized
                    .match_indices('/')
                    .nth(n.get())
                    .map_or(normalized.len(), |(i, _)| i);
                normalized[..end].to_owned()
            }
        }
    }
}

/// Normalises a request path (as sent, still percent-encoded, without the
/// query) into the canonical form used as a fence key.
///
/// Percent-decodes once (a decoded `/` is a separator like any other),
/// collapses repeated `/`, resolves `.` and `..`, drops a trailing `/`. The
/// result always starts with `/`; the root is `/`.
pub fn normalize_path(raw: &str) -> Result<String, PathError> {
    if is_normal(raw) {
        return Ok(raw.to_owned());
    }
    normalize_general(raw)
}

/// Whether `raw` is already its own normal form, the usual case, so that
/// normalising it is one copy: it starts with `/`, holds no `%`, and has no
/// empty, `.` or `..` segment (so no `//`, no trailing `/` but for the root).
fn is_normal(raw: &str) -> bool {
    // On bytes: `str`'s searches for a char cost more than the rest of the
    // key together, on every fenced request (callgrind).
    let raw = raw.as_bytes();
    if raw == b"/" {
        return true;
    }
    match raw.split_first() {
        Some((b'/', rest)) => {
            !raw.contains(&b'%')
                && rest
                    .split(|&b| b == b'/')
                    .all(|s| !matches!(s, b"" | b"." | b".."))
        }
        _ => false,
    }
}

fn normalize_general(raw: &str) -> Result<String, PathError> {
    let decoded = percent_encoding::percent_decode_str(raw).collect::<Vec<u8>>();
    let decoded = std::str::from_utf8(&decoded).map_err(|_| PathError::NotUtf8)?;
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop().ok_or(PathError::EscapesRoot)?;
            }
            s => segments.push(s),
        }
    }
    let mut key = String::with_capacity(decoded.len() + 1);
    for s in &segments {
        key.push('/');
        key.push_str(s);
    }
    if key.is_empty() {
        key.push('/');
    }
    Ok(key)
}

/// The request's host, normalised for a fence key: the target's authority
/// for a request in absolute form or over HTTP/2 (`:authority`), else the
/// `Host` header.
pub fn request_host<H: HeaderFields + ?Sized>(uri: &Uri, headers: &H) -> Result<String, HostError> {
    if let Some(authority) = uri.authority() {
        return normalize_host(authority.as_str());
    }
    let name = HOST;
    let mut values = headers.values_of(&name);
    let value = values.next().ok_or(HostError::Missing)?;
    if values.next().is_some() {
        return Err(HostError::Repeated);
    }
    normalize_host(visible_str(value).ok_or(HostError::Malformed)?)
}

/// A host (`host[:port]`, user info dropped) as the `host+` scopes key on
/// it: lowercased, without a trailing `.`, without port 80 or 443 (either
/// default), any other port kept. The host must be a reg-name (letters,
/// digits and `-._~!$&'()*+,;=`, percent escapes), an IPv4 address or a
/// bracketed IPv6 address (RFC 3986).
///
/// ```
/// use fencegate::key::normalize_host;
/// assert_eq!(normalize_host("Bucket.S3.Amazonaws.COM.").unwrap(), "bucket.s3.amazonaws.com");
/// assert_eq!(normalize_host("gw:80").unwrap(), "gw");
/// assert_eq!(normalize_host("gw:8080").unwrap(), "gw:8080");
/// assert_eq!(normalize_host("[::1]:443").unwrap(), "[::1]");
/// assert!(normalize_host("a/b").is_err() && normalize_host("").is_err() && normalize_host("h:x").is_err());
/// ```
pub fn normalize_host(raw: &str) -> Result<String, HostError> {
    let (host, port) = parse_host(raw.rsplit('@').next().unwrap_or(raw))?;
    let mut key = host.to_ascii_lowercase();
    if let Some(port) = port {
        key.push(':');
        key.push_str(&port.to_string());
    }
    Ok(key)
}

/// Whether `raw` is a valid `Host` field value (RFC 9110 §7.2: `uri-host
/// [":" port]`, no user info), without building its key: the check every
/// request's `Host` gets before routing ([`crate::misreading`]).
///
/// ```
/// use fencegate::key::check_host;
/// assert!(check_host("gw.example:8080").is_ok() && check_host("[::1]").is_ok());
/// assert!(check_host("a b").is_err() && check_host("user@gw").is_err() && check_host("gw:").is_err());
/// ```
pub fn check_host(raw: &str) -> Result<(), HostError> {
    // A comma is a reg-name character, and what a proxy joining two Host
    // lines makes: refused.
    if raw.contains(['@', ',']) {
        return Err(HostError::Malformed);
    }
    parse_host(raw).map(|_| ())
}

/// A host and its port (`None` for none, 80 or 443), checked as
/// [`normalize_host`] says; the host keeps its case.
fn parse_host(authority: &str) -> Result<(&str, Option<u16>), HostError> {
    let (host, port) = if authority.starts_with('[') {
        let end = authority.find(']').ok_or(HostError::Malformed)?;
        let (host, rest) = authority.split_at(end + 1);
        let inner = &host[1..host.len() - 1];
        let ipv6 = !inner.is_empty()
            && inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        if !ipv6 {
            return Err(HostError::Malformed);
        }
        match rest {
            "" => (host, None),
            _ => (
                host,
                Some(rest.strip_prefix(':').ok_or(HostError::Malformed)?),
            ),
        }
    } else {
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        };
        let host = host.strip_suffix('.').unwrap_or(host);
        let reg_name = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%".contains(&b));
        if !reg_name {
            return Err(HostError::Malformed);
        }
        (host, port)
    };
    let port = match port {
        None => None,
        Some(port) => {
            let number: u16 = port
                .parse()
                .ok()
                .filter(|_| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
                .ok_or(HostError::Malformed)?;
            (number != 80 && number != 443).then_some(number)
        }
    };
    Ok((host, port))
}

/// Whether the request path `raw` climbs above the root (`/../x`,
/// `/%2e%2e/x`), read as [`normalize_path`] reads it. Most paths hold no
/// `.` segment nor `%`, and are answered by one scan.
pub fn climbs_above_root(raw: &str) -> bool {
    // One look at each byte, no branch per byte: this runs on every
    // request.
    let (_, dots, percent) = raw
        .bytes()
        .fold((0u8, false, false), |(prev, dots, pc), b| {
            (b, dots | ((prev == b'.') & (b == b'.')), pc | (b == b'%'))
        });
    if !dots && !percent {
        return false;
    }
    normalize_path(raw) == Err(PathError::EscapesRoot)
}

/// A key's host part (empty for a key of the path scopes, which starts
/// with `/`) and its path part.
fn split_host(key: &str) -> (&str, &str) {
    if key.starts_with('/') {
        return ("", key);
    }
    match key.find('/') {
        Some(i) => key.split_at(i),
        None => (key, ""),
    }
}

/// The fence key of everything strictly *under* the normalised `path`: the
/// fence a write that acts on a whole collection (a WebDAV `DELETE` of a
/// folder) raises, so that no lower token may change anything below it
/// afterwards. `path` with a `/` appended; the root's is `//`. No
/// normalised path ends with `/` (but the root, which is one character), so
/// such keys never meet an object's.
///
/// ```
/// use fencegate::key::{subtree_key, subtree_path};
///
/// assert_eq!(subtree_key("/dav/reports"), "/dav/reports/");
/// assert_eq!(subtree_key("/"), "//");
/// assert_eq!(subtree_path("/dav/reports/"), Some("/dav/reports"));
/// assert_eq!(subtree_path("/dav/reports"), None);
/// ```
pub fn subtree_key(path: &str) -> String {
    let mut key = String::with_capacity(path.len() + 1);
    key.push_str(path);
    key.push('/');
    key
}

/// The path whose subtree `key` fences, if it is a [`subtree_key`] (in the
/// `host+` scopes, the host followed by one: `host//` fences everything
/// under the host's root `host/`).
pub fn subtree_path(key: &str) -> Option<&str> {
    let (host, path) = split_host(key);
    if path == "//" {
        return Some(&key[..host.len() + 1]);
    }
    (path.len() > 1 && path.ends_with('/')).then(|| &key[..key.len() - 1])
}

/// The subtree keys that cover `key` (an object's or a subtree's), from the
/// root down: for `/a/b` (or `/a/b/`), `//` and `/a/`; for `h/a/b`, `h//`
/// and `h/a/`. The root object (`/`, `h/`) and the root subtree (`//`,
/// `h//`) have none.
pub fn covering_subtrees(key: &str) -> impl Iterator<Item = Cow<'_, str>> {
    let (host, _) = split_host(key);
    let whole = subtree_path(key).unwrap_or(key);
    let path = &whole[host.len()..];
    let last = path.len().saturating_sub(1);
    path.match_indices('/')
        .map(|(i, _)| i)
        .filter(move |&i| i < last)
        .map(move |i| match (i, host) {
            (0, "") => Cow::Borrowed("//"),
            (0, host) => Cow::Owned(format!("{host}//")),
            (i, host) => Cow::Borrowed(&whole[..host.len() + i + 1]),
        })
}

/// Ends a namespace's name in a key. No key of the default namespace has
/// it before its first `/` (paths start with `/`, hosts and lock names are
/// ASCII) and no namespace's name has it, so `name§key` meets no other
/// namespace's key.
pub const NAMESPACE_END: char = '§';

/// Whether `key` is in a namespace other than the default: its first
/// [`NAMESPACE_END`] comes before its first `/`.
pub(crate) fn is_namespaced(key: &str) -> bool {
    key.find(NAMESPACE_END)
        .is_some_and(|end| !key[..end].contains('/'))
}

/// Whether `key` is a fence key that requests can map to in `scope`: in
/// `path` scope a normalised path, in `prefix:N` one of at most N segments,
/// in `header` scope a lock name. For keys typed by an operator (admin
/// writes): a key that no request maps to would be a fence that fences
/// nothing, so it is refused with what is wrong.
pub fn check_key(key: &str, scope: Scope) -> Result<(), String> {
    if scope.has_host() {
        let (host, path) = split_host(key);
        if host.is_empty() || normalize_host(host).ok().as_deref() != Some(host) {
            return Err(format!(
                "in scope {scope} a key is a normalised host (lowercase, no default port) followed by a path: {key:?}"
            ));
        }
        return check_key(path, scope.path_scope());
    }
    match scope {
        Scope::Header => {
            let printable = key.bytes().all(|b| (0x20..=0x7e).contains(&b));
            if key.is_empty() || key.len() > MAX_LOCK_NAME_LEN || !printable {
                return Err(format!(
                    "in header scope a key is a lock name: 1 to {MAX_LOCK_NAME_LEN} printable ASCII characters"
                ));
            }
            Ok(())
        }
        Scope::Path | Scope::Prefix(_) | Scope::HostPath | Scope::HostPrefix(_) => {
            // A subtree's fence (left by a collection write) is named by its
            // path with a `/` appended: an operator may need to lower it.
            let subtree = subtree_path(key);
            let key = subtree.unwrap_or(key);
            let normal = key == "/"
                || key
                    .strip_prefix('/')
                    .is_some_and(|rest| rest.split('/').all(|s| !matches!(s, "" | "." | "..")));
            if !normal {
                return Err(format!(
                    "{key:?} is not a normalised path (leading /, no empty, . or .. segment; a trailing / names a subtree's fence)"
                ));
            }
            if let Scope::Prefix(n) = scope {
                let segments = if key == "/" {
                    0
                } else {
                    key.matches('/').count()
                };
                if segments > n.get() {
                    return Err(format!(
                        "{key:?} has more than {n} segments (scope prefix:{n})"
                    ));
                }
                // A collection of N segments is one fence already: only a
                // shorter path's collection spans several keys.
                if subtree.is_some() && segments >= n.get() {
                    return Err(format!(
                        "in scope prefix:{n} only a path of fewer than {n} segments has a subtree fence"
                    ));
                }
            }
            Ok(())
        }
    }
}

/// Reads the lock name from `X-Fencing-Lock`.
pub fn lock_name_from_headers<H: HeaderFields + ?Sized>(
    headers: &H,
) -> Result<String, LockNameError> {
    let name = LOCK_HEADER;
    let mut values = headers.values_of(&name);
    let bytes = values.next().ok_or(LockNameError::Missing)?;
    if values.next().is_some() {
        return Err(LockNameError::Repeated);
    }
    let printable = bytes.iter().all(|b| (0x20..=0x7e).contains(b));
    if bytes.is_empty() || bytes.len() > MAX_LOCK_NAME_LEN || !printable {
        return Err(LockNameError::Malformed);
    }
    // Checked printable ASCII just above, so this cannot fail; mapping the error
    // keeps the function total anyway.
    String::from_utf8(bytes.to_vec()).map_err(|_| LockNameError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use proptest::prelude::*;

    /// At least 20 spellings of `/bucket/obj.txt` that common backends treat
    /// as one object.
    const ALIASES: &[&str] = &[
        "/bucket/obj.txt",
        "//bucket/obj.txt",
        "/bucket//obj.txt",
        "///bucket///obj.txt",
        "/bucket/obj.txt/",
        "/bucket/obj.txt//",
        "/./bucket/obj.txt",
        "/bucket/./obj.txt",
        "/bucket/obj.txt/.",
        "/bucket/x/../obj.txt",
        "/x/../bucket/obj.txt",
        "/bucket/x/y/../../obj.txt",
        "/bucket/%6fbj.txt",
        "/bucket/%6Fbj.txt",
        "/%62%75%63%6b%65%74/%6f%62%6a%2e%74%78%74",
        "/bucket/obj%2etxt",
        "/bucket%2fobj.txt",
        "/bucket%2Fobj.txt",
        "/bucket/%2e/obj.txt",
        "/bucket/%2e%2e/bucket/obj.txt",
        "/bucket/x/%2E%2E/obj.txt",
        "/bucket/.%2e/bucket/obj.txt",
        "/.//bucket/./x/..//obj.txt/./",
        "%2fbucket%2fobj.txt",
        "bucket/obj.txt",
    ];

    #[test]
    fn every_alias_maps_to_one_key() {
        for alias in ALIASES {
            assert_eq!(
                normalize_path(alias).as_deref(),
                Ok("/bucket/obj.txt"),
                "{alias}"
            );
        }
        assert!(ALIASES.len() >= 20);
    }

    #[test]
    fn root_spellings() {
        for root in ["", "/", "//", "/.", "/a/..", "/%2e/", "/a/b/../.."] {
            assert_eq!(normalize_path(root).as_deref(), Ok("/"), "{root}");
        }
    }

    #[test]
    fn climbing_above_root_is_an_error() {
        for bad in [
            "/..",
            "/../a",
            "/a/../..",
            "/a/../../b",
            "/%2e%2e/a",
            "/a/%2E%2E/%2e%2e/b",
            "/a%2f..%2f..%2fb",
        ] {
            assert_eq!(normalize_path(bad), Err(PathError::EscapesRoot), "{bad}");
        }
    }

    #[test]
    fn non_utf8_is_an_error() {
        for bad in ["/%ff", "/a/%c3", "/%c3%28", "/%ed%a0%80"] {
            assert_eq!(normalize_path(bad), Err(PathError::NotUtf8), "{bad}");
        }
        assert_eq!(normalize_path("/caf%C3%A9").as_deref(), Ok("/café"));
    }

    #[test]
    fn distinct_objects_stay_distinct() {
        // Case and double encoding are the backend's business: %252e is the
        // three characters "%2e" after one decode, not a dot.
        let distinct = ["/a/b", "/a/B", "/a/b.", "/a/%252e", "/a/b c", "/a/..b"];
        let keys: std::collections::HashSet<_> = distinct
            .iter()
            .map(|p| normalize_path(p).unwrap())
            .collect();
        assert_eq!(keys.len(), distinct.len());
    }

    #[test]
    fn scope_parsing_and_prefixes() {
        assert_eq!("path".parse(), Ok(Scope::Path));
        assert_eq!("header".parse(), Ok(Scope::Header));
        let p2: Scope = "prefix:2".parse().unwrap();
        assert_eq!(p2.to_string(), "prefix:2");
        for bad in ["", "prefix:0", "prefix:", "prefix:-1", "prefix:x", "Path"] {
            assert!(bad.parse::<Scope>().is_err(), "{bad}");
        }
        assert_eq!(p2.key_for_path("/a/b/c/d"), "/a/b");
        assert_eq!(p2.key_for_path("/a/b"), "/a/b");
        assert_eq!(p2.key_for_path("/a"), "/a");
        assert_eq!(p2.key_for_path("/"), "/");
        let p1: Scope = "prefix:1".parse().unwrap();
        assert_eq!(p1.key_for_path("/bucket/k"), "/bucket");
    }

    #[test]
    fn host_scopes() {
        let hp: Scope = "host+path".parse().unwrap();
        let hp1: Scope = "host+prefix:1".parse().unwrap();
        assert_eq!(
            (hp.to_string(), hp1.to_string()),
            ("host+path".into(), "host+prefix:1".into())
        );
        for bad in [
            "host+",
            "host+prefix:0",
            "host+header",
            "Host+path",
            "host+prefix",
        ] {
            assert!(bad.parse::<Scope>().is_err(), "{bad}");
        }
        assert_eq!(hp.key_for(Some("a.s3"), "/k/x"), "a.s3/k/x");
        assert_eq!(hp1.key_for(Some("a.s3"), "/k/x"), "a.s3/k");
        assert_eq!(hp1.key_for(Some("a.s3"), "/"), "a.s3/");
        // Case, a trailing dot and the default ports fold; user info and
        // other ports do not split or merge hosts wrongly.
        for same in [
            "A.S3",
            "a.s3.",
            "a.s3:80",
            "a.s3:443",
            "u@a.s3",
            "A.S3.:443",
        ] {
            assert_eq!(normalize_host(same).unwrap(), "a.s3", "{same}");
        }
        assert_eq!(normalize_host("a.s3:8080").unwrap(), "a.s3:8080");
        assert_eq!(normalize_host("10.0.0.1:9000").unwrap(), "10.0.0.1:9000");
        assert_eq!(normalize_host("[FE80::1]").unwrap(), "[fe80::1]");
        for bad in [
            "", ".", ":80", "a b", "a/b", "a:", "a:99999", "a:8x", "[zz]", "[::1", "[::1]x", "a\\b",
        ] {
            assert!(normalize_host(bad).is_err(), "{bad:?}");
        }
        // Subtree keys carry the host too, and the host's root is no subtree.
        assert_eq!(subtree_path("h/a/"), Some("h/a"));
        assert_eq!(subtree_path("h//"), Some("h/"));
        assert_eq!(subtree_path("h/"), None);
        assert_eq!(subtree_path("h/a"), None);
        let above: Vec<_> = covering_subtrees("h/a/b").collect();
        assert_eq!(above, ["h//", "h/a/"]);
        let above: Vec<_> = covering_subtrees("h/a/b/").collect();
        assert_eq!(above, ["h//", "h/a/"]);
        assert_eq!(covering_subtrees("h/").count(), 0);
        assert_eq!(covering_subtrees("h//").count(), 0);
        assert_eq!(covering_subtrees("h:81/a").collect::<Vec<_>>(), ["h:81//"]);
        // Admin keys: a normalised host, then a key of the path scope.
        assert!(check_key("a.s3/k/x", hp).is_ok());
        assert!(check_key("a.s3/k/", hp).is_ok());
        assert!(check_key("a.s3//", hp).is_ok());
        assert!(check_key("a.s3/k", hp1).is_ok());
        assert!(check_key("a.s3/k/x", hp1).is_err());
        for bad in ["/k/x", "A.S3/k", "a.s3:80/k", "a.s3", "a.s3/k//x", "/"] {
            assert!(check_key(bad, hp).is_err(), "{bad}");
        }
    }

    #[test]
    fn request_hosts() {
        let mut headers = HeaderMap::new();
        let origin: Uri = "/k".parse().unwrap();
        assert_eq!(request_host(&origin, &headers), Err(HostError::Missing));
        headers.insert(HOST, "Bucket.Example:80".parse().unwrap());
        assert_eq!(request_host(&origin, &headers).unwrap(), "bucket.example");
        // An absolute target (proxy form, HTTP/2's :authority) wins.
        let absolute: Uri = "http://other.example:8080/k".parse().unwrap();
        assert_eq!(
            request_host(&absolute, &headers).unwrap(),
            "other.example:8080"
        );
        headers.append(HOST, "x".parse().unwrap());
        assert_eq!(request_host(&origin, &headers), Err(HostError::Repeated));
    }

    #[test]
    fn lock_names() {
        let mut h = HeaderMap::new();
        assert_eq!(lock_name_from_headers(&h), Err(LockNameError::Missing));
        h.insert(LOCK_HEADER, "orders-table".parse().unwrap());
        assert_eq!(lock_name_from_headers(&h).as_deref(), Ok("orders-table"));
        h.insert(LOCK_HEADER, "x".repeat(257).parse().unwrap());
        assert_eq!(lock_name_from_headers(&h), Err(LockNameError::Malformed));
        h.insert(LOCK_HEADER, "x".repeat(256).parse().unwrap());
        assert!(lock_name_from_headers(&h).is_ok());
        h.insert(
            LOCK_HEADER,
            http::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        );
        assert_eq!(lock_name_from_headers(&h), Err(LockNameError::Malformed));
        h.insert(LOCK_HEADER, "a".parse().unwrap());
        h.append(LOCK_HEADER, "b".parse().unwrap());
        assert_eq!(lock_name_from_headers(&h), Err(LockNameError::Repeated));
    }

    fn path_strategy() -> impl Strategy<Value = String> {
        let segment = prop_oneof![
            Just("".to_owned()),
            Just(".".to_owned()),
            Just("..".to_owned()),
            Just("%2e".to_owned()),
            Just("%2F".to_owned()),
            "[a-c%]{1,3}",
            "[a-zA-Z0-9._~-]{1,6}",
        ];
        proptest::collection::vec(segment, 0..8).prop_map(|s| format!("/{}", s.join("/")))
    }

    proptest! {
        #[test]
        fn normalising_is_idempotent(path in path_strategy()) {
            if let Ok(once) = normalize_path(&path) {
                // A normalised key contains no '%' that could decode again only
                // if the input held a literal "%25"; the strategy can produce
                // "%" followed by hex, so compare on re-encoded '%'.
                let reencoded = once.replace('%', "%25");
                prop_assert_eq!(normalize_path(&reencoded), Ok(once.clone()));
                prop_assert!(once.starts_with('/'));
                prop_assert!(once == "/" || !once.ends_with('/'));
                prop_assert!(!once.contains("//"));
                prop_assert!(!once.split('/').any(|s| s == "." || s == ".."));
            }
        }

        #[test]
        fn extra_slashes_and_dots_never_split(path in path_strategy()) {
            if let Ok(key) = normalize_path(&path) {
                let noisy = format!("/.{}/", path.replace('/', "//./"));
                prop_assert_eq!(normalize_path(&noisy), Ok(key));
            }
        }

        #[test]
        fn the_fast_path_agrees_with_the_general_rule(path in path_strategy(), plain in "(/[a-z.]{1,4}){0,4}/?") {
            for p in [path.as_str(), plain.as_str()] {
                prop_assert_eq!(normalize_path(p), normalize_general(p), "{}", p);
            }
        }

        #[test]
        fn prefix_key_is_a_prefix_of_the_path_key(path in path_strategy(), n in 1usize..5) {
            if let Ok(key) = normalize_path(&path) {
                let scope = Scope::Prefix(NonZeroUsize::new(n).unwrap());
                let prefix = scope.key_for_path(&key);
                prop_assert!(key.starts_with(&prefix));
                prop_assert!(prefix.matches('/').count() <= n);
            }
        }
    }
}
