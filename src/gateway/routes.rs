//! Which `[[route]]` takes a request: compiled once per configuration, in
//! the order of the SPEC's "most specific match wins": an exact host over
//! a `*.` pattern (a longer suffix first) over no host; then the longest
//! path prefix; then the order in the file. The first entry that matches
//! is the route.
//!
//! A prefix is matched against the request's normalised path (the fence
//! key's own form, so `/billing-x/../docs/y` is `/docs/y` here as it is to
//! the fence), and a prefix ending in `/` also takes the collection it
//! names (`/dav/` takes `MKCOL /dav`). A gateway without routes has one
//! that matches everything, and looks at neither host nor path.

use std::borrow::Cow;

use crate::head::RequestView;
use crate::key::{normalize_path, request_host};

use super::config::RouteMatch;

/// The compiled match of every route.
#[derive(Debug, Clone)]
pub(crate) struct RouteTable {
    /// In the order they are tried.
    entries: Vec<Entry>,
    /// Some entry looks at the host / the path.
    needs_host: bool,
    needs_path: bool,
}

#[derive(Debug, Clone)]
struct Entry {
    host: HostPattern,
    prefix: Option<Prefix>,
    /// The route's index in the configuration.
    route: usize,
}

/// A path prefix, with its first eight bytes as a word: most entries a
/// request is not under are told by one comparison (20 routes cost W1 a
/// few dozen instructions, not a string comparison each).
#[derive(Debug, Clone)]
struct Prefix {
    text: String,
    head: u64,
    mask: u64,
}

impl Prefix {
    fn new(text: &str) -> Prefix {
        let (head, len) = head_word(text.as_bytes());
        Prefix {
            text: text.to_owned(),
            head,
            mask: if len == 8 {
                u64::MAX
            } else {
                (1u64 << (8 * len)) - 1
            },
        }
    }

    /// Whether the normalised `path` (whose [`head_word`] is `word`) is
    /// under it; a prefix ending in `/` also takes the collection it names.
    fn takes(&self, path: &str, word: u64) -> bool {
        if word & self.mask == self.head && path.starts_with(&self.text) {
            return true;
        }
        // `/dav/` takes `/dav`: one byte shorter, and a prefix of it.
        path.len() + 1 == self.text.len() && self.text.ends_with('/') && self.text.starts_with(path)
    }
}

/// The first (at most) eight bytes of `bytes` as a little-endian word, and
/// how many there were; missing bytes are zero, which no path or prefix
/// byte is.
fn head_word(bytes: &[u8]) -> (u64, usize) {
    let len = bytes.len().min(8);
    let mut word = [0u8; 8];
    word[..len].copy_from_slice(&bytes[..len]);
    (u64::from_le_bytes(word), len)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Exact(String),
    /// `*.example.com`: `.example.com`.
    Suffix(String),
    Any,
}

impl HostPattern {
    fn rank(&self) -> (u8, usize) {
        match self {
            HostPattern::Exact(_) => (0, 0),
            HostPattern::Suffix(suffix) => (1, usize::MAX - suffix.len()),
            HostPattern::Any => (2, 0),
        }
    }

    fn matches(&self, host: Option<&str>) -> bool {
        match (self, host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Exact(name), Some(host)) => host == name,
            (HostPattern::Suffix(suffix), Some(host)) => {
                host.len() > suffix.len() && host.ends_with(suffix.as_str())
            }
            (_, None) => false,
        }
    }
}

impl RouteTable {
    /// One route that takes every request.
    #[cfg(test)]
    pub(crate) fn everything() -> Self {
        Self::new(&[RouteMatch::default()])
    }

    /// The table of routes matching `matches`, in the file's order.
    pub(crate) fn new(matches: &[RouteMatch]) -> Self {
        let mut entries: Vec<Entry> = matches
            .iter()
            .enumerate()
            .map(|(route, m)| Entry {
                host: match m.host.as_deref() {
                    None => HostPattern::Any,
                    Some(host) => match host.strip_prefix('*') {
                        Some(suffix) => HostPattern::Suffix(suffix.to_owned()),
                        None => HostPattern::Exact(host.to_owned()),
                    },
                },
                prefix: m.path_prefix.as_deref().map(Prefix::new),
                route,
            })
            .collect();
        // Stable: equal ranks keep the file's order.
        entries.sort_by_key(|e| {
            (
                e.host.rank(),
                usize::MAX - e.prefix.as_ref().map_or(0, |p| p.text.len()),
            )
        });
        RouteTable {
            needs_host: entries.iter().any(|e| e.host != HostPattern::Any),
            needs_path: entries.iter().any(|e| e.prefix.is_some()),
            entries,
        }
    }

    /// The index of the route that takes `request`; `None`: no route does.
    pub(crate) fn pick<R: RequestView + ?Sized>(&self, request: &R) -> Option<usize> {
        if !self.needs_host && !self.needs_path {
            return self.entries.first().map(|e| e.route);
        }
        let host = if self.needs_host {
            request_host(request.uri(), request.fields())
                .ok()
                .map(|host| without_port(&host).to_owned())
        } else {
            None
        };
        let path = if self.needs_path {
            matching_path(request.uri().path())
        } else {
            None
        };
        let word = path.as_deref().map_or(0, |p| head_word(p.as_bytes()).0);
        self.entries
            .iter()
            .find(|e| {
                e.host.matches(host.as_deref())
                    && match &e.prefix {
                        None => true,
                        Some(prefix) => path.as_deref().is_some_and(|p| prefix.takes(p, word)),
                    }
            })
            .map(|e| e.route)
    }
}

fn without_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// The request path in the fence key's form; `None` if it has none (a
/// path that escapes the root): only routes without a prefix take it.
fn matching_path(raw: &str) -> Option<Cow<'_, str>> {
    // Most paths are already normal: no copy for them.
    let plain = !raw.contains('%')
        && !raw.contains("//")
        && !raw
            .split('/')
            .any(|segment| segment == "." || segment == "..");
    if plain && raw.starts_with('/') {
        let trimmed = if raw.len() > 1 {
            raw.strip_suffix('/').unwrap_or(raw)
        } else {
            raw
        };
        return Some(Cow::Borrowed(trimmed));
    }
    normalize_path(raw).ok().map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(host: Option<&str>, prefix: Option<&str>) -> RouteMatch {
        RouteMatch {
            host: host.map(str::to_owned),
            path_prefix: prefix.map(str::to_owned),
        }
    }

    fn pick(table: &RouteTable, host: &str, path: &str) -> Option<usize> {
        let request = http::Request::builder()
            .uri(path)
            .header("host", host)
            .body(())
            .unwrap();
        table.pick(&request)
    }

    #[test]
    fn the_most_specific_route_wins() {
        let table = RouteTable::new(&[
            route(None, Some("/")),
            route(None, Some("/billing-")),
            route(Some("*.s3.internal"), None),
            route(Some("eu.s3.internal"), Some("/logs/")),
            route(Some("*.eu.s3.internal"), None),
            route(None, Some("/dav/")),
        ]);
        assert_eq!(pick(&table, "gw", "/billing-2026/x"), Some(1));
        assert_eq!(pick(&table, "gw", "/other"), Some(0));
        assert_eq!(pick(&table, "a.s3.internal", "/billing-2026/x"), Some(2));
        assert_eq!(pick(&table, "eu.s3.internal:9000", "/logs/today"), Some(3));
        assert_eq!(pick(&table, "eu.s3.internal", "/other"), Some(2));
        assert_eq!(pick(&table, "b.eu.s3.internal", "/x"), Some(4));
        assert_eq!(pick(&table, "s3.internal", "/x"), Some(0));
        // The fence's form of the path, not the text sent.
        assert_eq!(pick(&table, "gw", "/billing-x/../dav/y"), Some(5));
        assert_eq!(pick(&table, "gw", "/%64av/y"), Some(5));
        assert_eq!(pick(&table, "gw", "/dav"), Some(5));
        assert_eq!(pick(&table, "gw", "/dav/"), Some(5));
        assert_eq!(pick(&table, "gw", "/davx"), Some(0));
    }

    #[test]
    fn the_quick_path_is_the_normalised_one() {
        for raw in [
            "/",
            "/a",
            "/a/",
            "/a/b",
            "/a//b",
            "/a/./b",
            "/a/../b",
            "/a/.b",
            "/a/..b",
            "/.",
            "/..",
            "/a/.",
            "/a/..",
            "/%61",
            "/a/b.",
            "/.well-known/x",
            "//",
            "/a/b/",
        ] {
            assert_eq!(
                matching_path(raw).map(Cow::into_owned),
                normalize_path(raw).ok(),
                "{raw}"
            );
        }
    }

    #[test]
    fn a_request_no_route_takes_is_none() {
        let table = RouteTable::new(&[route(None, Some("/a/")), route(Some("h"), None)]);
        assert_eq!(pick(&table, "gw", "/b/x"), None);
        assert_eq!(pick(&table, "gw", "/a/../../etc"), None);
        assert_eq!(pick(&table, "h", "/b/x"), Some(1));
        assert_eq!(pick(&RouteTable::everything(), "any", "/../x"), Some(0));
    }
}
