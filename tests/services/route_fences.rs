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

/// A gateway whose configuration file has route `billing` (prefix
/// `/billing/`) in front of `backend`, in `state`, with `extra` options.
fn routed_gateway(backend: &Backend, state: &str, extra: &[&str]) -> GatewayProcess {
    let dir = tempfile::tempdir().expect("a temporary folder").keep();
    let config = dir.join("fencegate.toml");
    std::fs::write(
        &config,
        format!(
            r#"state = "{state}"
upstream = "{backend}"

[[route]]
name = "billing"
match = {{ path_prefix = "/billing/" }}
"#,
            backend = backend.url(),
        ),
    )
    .expect("the configuration file");
    let config = config.display().to_string();
    let mut args = vec!["--config", config.as_str()];
    args.extend_from_slice(extra);
    GatewayProcess::start(&args)
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
