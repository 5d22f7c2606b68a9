//! Routes and their fence namespaces against a stale client (SPEC
//! "Configuration file and routes": one object, one fence, the key
//! qualified once), in every state: `memory`, `disk` and `etcd`, the last
//! two across a `kill -9` too.
//!
//! Each gateway reads a configuration with a route in a named namespace
//! (`billing`, the default: its name) in front of the recording backend,
//! which records every request that reaches it; the top level's upstream is
//! the same backend.

#[path = "../support/mod.rs"]
mod support;

use std::sync::OnceLock;

use support::*;

/// One etcd member for the `etcd` state's tests of this binary.
fn cluster() -> &'static EtcdCluster {
    static CLUSTER: OnceLock<EtcdCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| EtcdCluster::start(1))
}

/// A gateway whose configuration file is `state`, `backend` as the top
/// level's upstream, and `routes` (`[[route]]` tables), with `extra`
/// options.
fn gateway_with_routes(
    backend: &Backend,
    state: &str,
    routes: &str,
    extra: &[&str],
) -> GatewayProcess {
    let dir = tempfile::tempdir().expect("a temporary folder").keep();
    let config = dir.join("fencegate.toml");
    let text = format!(
        "state = \"{state}\"\nupstream = \"{}\"\n\n{routes}",
        backend.url()
    );
    std::fs::write(&config, text).expect("the configuration file");
    let config = config.display().to_string();
    let mut args = vec!["--config", config.as_str()];
    args.extend_from_slice(extra);
    GatewayProcess::start(&args)
}

/// A gateway with route `billing` (prefix `/billing/`) in front of
/// `backend`, in `state`, with `extra` options.
fn routed_gateway(backend: &Backend, state: &str, extra: &[&str]) -> GatewayProcess {
    const BILLING: &str = r#"[[route]]
name = "billing"
match = { path_prefix = "/billing/" }
"#;
    gateway_with_routes(backend, state, BILLING, extra)
}

/// The `etcd` options of a gateway on `prefix` of this binary's cluster.
fn etcd_args(prefix: &str) -> Vec<String> {
    vec![
        "--etcd-endpoints".into(),
        cluster().endpoints(),
        "--etcd-prefix".into(),
        prefix.into(),
    ]
}

fn write(gw: &GatewayProcess, method: &str, target: &str, token: u64) -> Resp {
    gw.req(
        method,
        target,
        &[("X-Fencing-Token", &token.to_string())],
        b"x",
    )
}

/// How many `method` requests of `target` reached the backend.
fn reached(backend: &Backend, method: &str, target: &str) -> usize {
    backend
        .records_for(target)
        .iter()
        .filter(|record| record.method == method)
        .count()
}

/// A stale client's collection `DELETE`, refused, then its stale `PUT`: the
/// `DELETE` makes subtree fences count; the `PUT` must still meet the
/// object's fence in the route's namespace (it was admitted on the key
/// qualified twice, a fence with no history).
fn stale_delete_then_stale_put(gw: &GatewayProcess, backend: &Backend, object: &str, highest: u64) {
    let stale = highest - 1;
    let json = write(gw, "DELETE", object, stale).assert_gateway_error(409, "stale_token");
    assert_eq!(json["highest"], highest, "{json}");
    let json = write(gw, "PUT", object, stale).assert_gateway_error(409, "stale_token");
    assert_eq!(json["highest"], highest, "{json}");
    assert_eq!(json["resource"], object, "{json}");
    assert_eq!(
        reached(backend, "DELETE", object),
        0,
        "a stale DELETE was forwarded"
    );
    let puts = reached(backend, "PUT", object);
    assert_eq!(
        puts,
        1,
        "a stale PUT was forwarded: {:#?}",
        backend.records_for(object)
    );
}

/// A subtree fence in the namespace (an admitted collection `DELETE`)
/// covers the objects under it, and a later token still writes.
fn subtree_fence_covers_its_members(gw: &GatewayProcess, collection: &str, token: u64) {
    let member = format!("{collection}/member");
    assert_eq!(write(gw, "PUT", &member, token - 2).status, 200);
    assert_eq!(write(gw, "DELETE", collection, token).status, 200);
    let json = write(gw, "PUT", &member, token - 1).assert_gateway_error(409, "stale_token");
    assert_eq!(json["highest"], token, "{json}");
    assert_eq!(write(gw, "PUT", &member, token).status, 200);
}

#[test]
fn a_named_namespace_keeps_its_fences_after_a_collection_delete_in_memory() {
    let backend = Backend::start();
    let gw = routed_gateway(&backend, "memory", &[]);
    assert_eq!(write(&gw, "PUT", "/billing/q3", 5).status, 200);
    stale_delete_then_stale_put(&gw, &backend, "/billing/q3", 5);
    subtree_fence_covers_its_members(&gw, "/billing/dir", 9);
    assert_eq!(
        gw.fence("/billing/q3"),
        None,
        "the default namespace has it"
    );
    let namespaced = gw.admin_get("/fences/%2Fbilling%2Fq3?namespace=billing");
    assert_eq!(namespaced.status, 200, "{}", namespaced.text());
    assert_eq!(namespaced.json()["highest"], 5);
}

#[test]
fn a_named_namespace_keeps_its_fences_after_a_collection_delete_on_disk_and_a_restart() {
    let backend = Backend::start();
    let mut gw = routed_gateway(&backend, "disk", &[]);
    assert_eq!(write(&gw, "PUT", "/billing/q3", 5).status, 200);
    stale_delete_then_stale_put(&gw, &backend, "/billing/q3", 5);
    subtree_fence_covers_its_members(&gw, "/billing/dir", 9);
    gw.restart();
    // Loaded from disk: the subtree fence counts at once, the object's
    // fence is found under the namespace.
    let json = write(&gw, "PUT", "/billing/q3", 4).assert_gateway_error(409, "stale_token");
    assert_eq!(json["highest"], 5, "{json}");
    let json = write(&gw, "PUT", "/billing/dir/member", 8).assert_gateway_error(409, "stale_token");
    assert_eq!(json["highest"], 9, "{json}");
    assert_eq!(reached(&backend, "PUT", "/billing/q3"), 1);
}

#[test]
fn a_named_namespace_keeps_its_fences_after_a_collection_delete_in_etcd_and_a_restart() {
    let backend = Backend::start();
    let etcd = etcd_args("/fg-route-fences/");
    let etcd: Vec<&str> = etcd.iter().map(String::as_str).collect();
    let mut gw = routed_gateway(&backend, "etcd", &etcd);
    assert_eq!(write(&gw, "PUT", "/billing/q3", 5).status, 200);
    stale_delete_then_stale_put(&gw, &backend, "/billing/q3", 5);
    subtree_fence_covers_its_members(&gw, "/billing/dir", 9);
    // A second instance on the same prefix sees the same fences.
    let other = routed_gateway(&backend, "etcd", &etcd);
    stale_delete_then_stale_put(&other, &backend, "/billing/q3", 5);
    gw.restart();
    stale_delete_then_stale_put(&gw, &backend, "/billing/q3", 5);
    let json = write(&gw, "PUT", "/billing/dir/member", 8).assert_gateway_error(409, "stale_token");
    assert_eq!(json["highest"], 9, "{json}");
}

/// A gateway with routes `a` (`/a/`), `deep` (`/a/deep/`), `b` (`/b/`) and
/// `logs` (`/logs/`, `enforce = "off"`), all in front of `backend`.
fn crossing_gateway(backend: &Backend) -> GatewayProcess {
    let mut routes = String::new();
    for (name, prefix, extra) in [
        ("a", "/a/", ""),
        ("deep", "/a/deep/", ""),
        ("b", "/b/", ""),
        ("logs", "/logs/", "enforce = \"off\"\n"),
    ] {
        routes.push_str(&format!(
            "[[route]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"{prefix}\" }}\n{extra}\n"
        ));
    }
    // WebDAV's writes (MOVE, COPY) are no plain HTTP store's.
    gateway_with_routes(backend, "memory", &routes, &["--store", "webdav"])
}

/// Writes that reach beyond their path were fenced only in the route their
/// own path picked (and not at all from an `enforce = "off"` route): a
/// `Destination`, a parent collection's `DELETE`, `DeleteObjects` keys in
/// another route are refused 400 `cross_route`, never forwarded (routes
/// issue, class 2).
#[test]
fn class2_writes_that_reach_another_routes_objects_are_refused() {
    let backend = Backend::start();
    let gw = crossing_gateway(&backend);
    assert_eq!(write(&gw, "PUT", "/b/report", 34).status, 200);
    assert_eq!(write(&gw, "PUT", "/a/deep/kept", 34).status, 200);
    let before = backend.count();
    let cross = |method: &str, target: &str, headers: &[(&str, &str)], body: &[u8], what: &str| {
        let mut all = vec![("X-Fencing-Token", "33")];
        all.extend_from_slice(headers);
        let resp = gw.req(method, target, &all, body);
        let json = resp.assert_gateway_error(400, "cross_route");
        let detail = json["detail"].as_str().unwrap_or_default().to_owned();
        assert!(!detail.is_empty(), "{what}: {json}");
        detail
    };
    let detail = cross(
        "MOVE",
        "/a/tmp",
        &[("Destination", "/b/report")],
        b"",
        "MOVE onto b",
    );
    assert!(
        detail.contains("/b/report") && detail.contains("\"b\""),
        "{detail}"
    );
    cross(
        "COPY",
        "/a/tmp",
        &[("Destination", "/a/deep/kept")],
        b"",
        "COPY onto deep",
    );
    cross(
        "MOVE",
        "/a/tmp",
        &[("Destination", "/nowhere/x")],
        b"",
        "MOVE to no route",
    );
    // From the route that does not fence.
    cross(
        "MOVE",
        "/logs/x",
        &[("Destination", "/b/report")],
        b"",
        "MOVE from logs",
    );
    let detail = cross("DELETE", "/a", &[], b"", "a collection DELETE over deep");
    assert!(
        detail.contains("everything under /a") && detail.contains("deep"),
        "{detail}"
    );
    let body = b"<Delete><Object><Key>deep/kept</Key></Object></Delete>";
    cross(
        "POST",
        "/a?delete",
        &[],
        body,
        "DeleteObjects of a key of deep",
    );
    assert_eq!(backend.count(), before, "{:#?}", backend.records());
    // Within one route, the same writes go on (to the fencing layer).
    let resp = write(&gw, "DELETE", "/a/deep", 35);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let moved = gw.req(
        "MOVE",
        "/a/x",
        &[("X-Fencing-Token", "35"), ("Destination", "/a/y")],
        b"",
    );
    assert_eq!(moved.status, 200, "{}", moved.text());
}
