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
    entries: Vec<RouteEntry>,
    /// Some entry looks at the host / the path.
    needs_host: bool,
    needs_path: bool,
    /// For each value of a path's second byte (the first after its `/`),
    /// the entries it may match, in order: most routes of a file differ
    /// there, so a request tries one or two instead of every route.
    by_second_byte: Vec<Vec<u16>>,
}

#[derive(Debug, Clone)]
struct RouteEntry {
    host: HostPattern,
    prefix: Option<Prefix>,
    /// The route's index in the configuration.
    route: usize,
}

/// A path prefix.
#[derive(Debug, Clone)]
struct Prefix {
    text: String,
}

impl Prefix {
    fn new(text: &str) -> Prefix {
        Prefix {
            text: text.to_owned(),
        }
    }

    /// Whether the normalised `path` is under it; a prefix ending in `/`
    /// also takes the collection it names (`/dav/` takes `/dav`).
    fn takes(&self, path: &str) -> bool {
        path.starts_with(&self.text)
            || (path.len() + 1 == self.text.len()
                && self.text.ends_with('/')
                && self.text.starts_with(path))
    }

    /// The byte a path it takes has after its leading `/`, if the prefix
    /// says (a one-byte prefix, `/`, takes any).
    fn second_byte(&self) -> Option<u8> {
        self.text.as_bytes().get(1).copied()
    }
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
        let mut entries: Vec<RouteEntry> = matches
            .iter()
            .enumerate()
            .map(|(route, m)| RouteEntry {
                // Matched as the request's host is read: lowercased,
                // without a trailing dot (or a port).
                host: match m.host.as_deref().map(|host| {
                    without_port(host.trim_end_matches('.'))
                        .trim_end_matches('.')
                        .to_ascii_lowercase()
                }) {
                    None => HostPattern::Any,
                    Some(host) => match host.strip_prefix('*') {
                        Some(suffix) => HostPattern::Suffix(suffix.to_owned()),
                        None => HostPattern::Exact(host),
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
        let by_second_byte = (0..=u8::MAX)
            .map(|byte| {
                (0..entries.len())
                    .filter(|&i| {
                        entries[i]
                            .prefix
                            .as_ref()
                            .and_then(Prefix::second_byte)
                            .is_none_or(|second| second == byte)
                    })
                    .filter_map(|i| u16::try_from(i).ok())
                    .collect()
            })
            .collect();
        RouteTable {
            needs_host: entries.iter().any(|e| e.host != HostPattern::Any),
            needs_path: entries.iter().any(|e| e.prefix.is_some()),
            entries,
            by_second_byte,
        }
    }

    /// Whether any route looks at the host or the path: then a request's
    /// objects may belong to several routes.
    #[inline]
    pub(crate) fn is_routed(&self) -> bool {
        self.needs_host || self.needs_path
    }

    /// The host the routes match `request` on (lowercased, without a
    /// trailing dot or a port), if any route looks at hosts.
    pub(crate) fn host_of<R: RequestView + ?Sized>(&self, request: &R) -> Option<String> {
        if !self.needs_host {
            return None;
        }
        request_host(request.uri(), request.fields())
            .ok()
            .map(|host| without_port(&host).to_owned())
    }

    /// The route that owns the object at the normalised `path` under
    /// `host` (as [`RouteTable::host_of`] gives it); `None`: no route does.
    pub(crate) fn owner(&self, host: Option<&str>, path: &str) -> Option<usize> {
        if !self.is_routed() {
            return self.entries.first().map(|e| e.route);
        }
        self.pick_in(host, self.needs_path.then_some(Cow::Borrowed(path)))
    }

    /// A route other than `own` that takes objects strictly under the
    /// normalised collection `path` under `host`: a write to the whole
    /// subtree (a collection `DELETE`) would reach its objects.
    pub(crate) fn other_under(&self, host: Option<&str>, path: &str, own: usize) -> Option<usize> {
        let under = if path == "/" {
            "/".to_owned()
        } else {
            format!("{path}/")
        };
        self.entries
            .iter()
            .filter(|e| e.route != own && e.host.matches(host))
            .find(|e| {
                e.prefix
                    .as_ref()
                    .is_some_and(|p| p.text.starts_with(&under))
            })
            .map(|e| e.route)
    }

    /// The index of the route that takes `request`; `None`: no route does.
    pub(crate) fn pick<R: RequestView + ?Sized>(&self, request: &R) -> Option<usize> {
        if !self.needs_host && !self.needs_path {
            return self.entries.first().map(|e| e.route);
        }
        let host = self.host_of(request);
        let path = if self.needs_path {
            matching_path(request.uri().path())
        } else {
            None
        };
        self.pick_in(host.as_deref(), path)
    }

    /// The first entry that takes `host` and the normalised `path`.
    fn pick_in(&self, host: Option<&str>, path: Option<Cow<'_, str>>) -> Option<usize> {
        let takes = |e: &RouteEntry| {
            e.host.matches(host)
                && match &e.prefix {
                    None => true,
                    Some(prefix) => path.as_deref().is_some_and(|p| prefix.takes(p)),
                }
        };
        let second = path.as_deref().and_then(|p| p.as_bytes().get(1));
        match second {
            Some(&byte) => self.by_second_byte[usize::from(byte)]
                .iter()
                .map(|&i| &self.entries[usize::from(i)])
                .find(|e| takes(e)),
            // `/`, or no path: every entry may.
            None => self.entries.iter().find(|e| takes(e)),
        }
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
    // Most paths are already normal: no copy for them. One pass: no `%`,
    // and no `/` followed by `/` or a `.` or `..` segment.
    let bytes = raw.as_bytes();
    let plain = bytes.first() == Some(&b'/')
        && bytes.iter().enumerate().all(|(i, &b)| match b {
            b'%' => false,
            b'/' => match bytes.get(i + 1) {
                Some(b'/') => false,
                Some(b'.') => !matches!(
                    (bytes.get(i + 2), bytes.get(i + 3)),
                    (None | Some(b'/'), _) | (Some(b'.'), None | Some(b'/'))
                ),
                _ => true,
            },
            _ => true,
        });
    if plain {
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
