//! What a configuration may say but probably does not mean: warnings,
//! not errors (`check-config` prints them last).

use super::super::config::RouteConfig;
use super::super::upstream::Upstream;
use super::secrets::mask;
use crate::dialect::StoreKind;

/// Routes that no request can reach: one with the same match as a route
/// before it.
pub(super) fn unreachable_routes(routes: &[RouteConfig]) -> Vec<String> {
    let mut warnings = Vec::new();
    for (i, route) in routes.iter().enumerate() {
        if let Some(earlier) = routes[..i].iter().find(|r| r.matches == route.matches) {
            warnings.push(format!(
                "route {:?} has the match of route {:?} before it: no request reaches it",
                route.name, earlier.name
            ));
        }
    }
    warnings
}

/// Routes of different fence namespaces whose upstreams are one store
/// (SPEC "Configuration file and routes": a warning, not an error): an
/// object that requests reach through both is fenced twice, under two
/// keys, and a stale token on one route is not refused by the other's
/// fence. One store: the same scheme, host (lowercased, without a
/// trailing dot) and port, and base paths one of which is the other or
/// under it (`http://h/a` and `http://h/a/b`); every route without an
/// upstream shares the embedded backend. Not warned: two such routes that
/// the router alone keeps apart, with the same base path and the same
/// host match (each request goes to one of them, and its path names the
/// same object under either), unless one is S3, whose virtual-hosted and
/// path-style requests name one object by two paths.
pub(super) fn overlapping_upstreams(routes: &[RouteConfig]) -> Vec<String> {
    let mut warnings = Vec::new();
    for (i, a) in routes.iter().enumerate() {
        for b in &routes[i + 1..] {
            if a.fence_namespace == b.fence_namespace {
                continue;
            }
            let (upstream_a, upstream_b) = (&a.options.upstream, &b.options.upstream);
            let same_base = match (upstream_a, upstream_b) {
                (None, None) => true,
                (Some(x), Some(y)) if one_store(x, y) => x.base() == y.base(),
                _ => continue,
            };
            let s3 = a.options.store == StoreKind::S3 || b.options.store == StoreKind::S3;
            if same_base && a.matches.host == b.matches.host && !s3 {
                continue;
            }
            let upstreams = match (upstream_a, upstream_b) {
                (Some(x), Some(y)) if x.base() != y.base() => format!(
                    "upstreams {} and {}",
                    mask(&x.to_string()),
                    mask(&y.to_string())
                ),
                (Some(x), _) => format!("upstream {}", mask(&x.to_string())),
                _ => "the embedded backend".to_owned(),
            };
            warnings.push(format!(
                "routes {:?} and {:?} reach one store ({upstreams}) under different fence namespaces ({:?} and {:?}): an object written through both is fenced twice, under two keys (give them one fence_namespace if they reach the same objects)",
                a.name, b.name, a.fence_namespace, b.fence_namespace
            ));
        }
    }
    warnings
}

/// Whether two upstreams are one store: the same scheme, host and port,
/// and base paths one of which is the other or under it.
fn one_store(x: &Upstream, y: &Upstream) -> bool {
    let host = |u: &Upstream| u.host().trim_end_matches('.').to_ascii_lowercase();
    let under = |inner: &str, outer: &str| {
        inner == outer
            || inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    x.is_tls() == y.is_tls()
        && x.port() == y.port()
        && host(x) == host(y)
        && (under(x.base(), y.base()) || under(y.base(), x.base()))
}
