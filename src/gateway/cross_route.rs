//! One object, one route (SPEC "Configuration file and routes"): a request
//! whose reach ([`crate::reach`]) includes an object another route owns (a
//! WebDAV `Destination`, a collection `DELETE` over a more specific route's
//! prefix, a `DeleteObjects` key, a GCS JSON name) is refused 400
//! `cross_route` and never forwarded.
//!
//! The SPEC allows such a request when both routes share an upstream and a
//! dialect, fenced in each object's own namespace; admitting one request in
//! several namespaces and `enforce` modes at once is not built, so it is
//! refused too: a refusal is safe, a request fenced in the wrong namespace
//! is not (docs/CONFIGURATION.md says so).

use crate::head::RequestView;
use crate::key::{subtree_path, Scope};
use crate::reach::{self, ListedObjects, Rules};

use super::routes::RouteTable;

/// An object a request reaches that its own route does not own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Crossing {
    /// The object's path (a collection's, for a subtree).
    pub(crate) path: String,
    /// The request reaches everything under `path`.
    pub(crate) subtree: bool,
    /// The route that owns it (for a subtree: owns objects under it);
    /// `None`: no route does.
    pub(crate) owner: Option<usize>,
}

impl Crossing {
    /// The refusal's sentence, with `name` giving a route's name.
    pub(crate) fn detail(&self, own: &str, name: impl Fn(usize) -> String) -> String {
        let owner = self.owner.map_or_else(
            || "no route".to_owned(),
            |route| format!("route {:?}", name(route)),
        );
        if self.subtree {
            format!(
                "the request reaches everything under {}, where {owner} owns objects, not route {own:?} alone: send a request to each route",
                self.path
            )
        } else {
            format!(
                "the request reaches {}, which {owner} owns, not route {own:?}: send a request to each route",
                self.path
            )
        }
    }
}

/// The first object of `request` that a route other than `own` owns (or
/// that no route owns); `None` if every object is `own`'s. A request whose
/// reach the gateway cannot read is left to the fencing layer, which
/// refuses it with its own reason.
pub(crate) fn cross_route<R: RequestView + ?Sized>(
    table: &RouteTable,
    own: usize,
    request: &R,
    flat_keys: bool,
    listed: Option<&ListedObjects>,
) -> Option<Crossing> {
    if !table.is_routed() || (listed.is_none() && reach::is_plain(request)) {
        return None;
    }
    let rules = Rules {
        scope: Scope::Path,
        flat_keys,
    };
    let reached = reach::reach(request, &rules, listed).ok()?;
    let host = table.host_of(request);
    let host = host.as_deref();
    for key in &reached.keys {
        let (path, subtree) = match subtree_path(key) {
            Some(path) => (path, true),
            None => (key.as_str(), false),
        };
        let owner = table.owner(host, path);
        if owner != Some(own) {
            return Some(Crossing {
                path: path.to_owned(),
                subtree: false,
                owner,
            });
        }
        if subtree {
            if let Some(other) = table.other_under(host, path, own) {
                return Some(Crossing {
                    path: path.to_owned(),
                    subtree: true,
                    owner: Some(other),
                });
            }
        }
    }
    None
}
