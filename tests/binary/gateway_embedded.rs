//! The embedded backend (no `--upstream`): PUT/GET/HEAD/DELETE/POST through
//! the gateway, in `disk` and `memory` state.

#[path = "../support/mod.rs"]
mod support;

use support::GatewayProcess;

fn check_object_semantics(gw: &GatewayProcess) {
    let tok = |t: u64| t.to_string();
    let put = |path: &str, t: u64, body: &[u8]| {
        gw.req("PUT", path, &[("X-Fencing-Token", &tok(t))], body)
    };
    // Absent.
    assert_eq!(gw.req("GET", "/b/o", &[], b"").status, 404);
    assert_eq!(gw.req("HEAD", "/b/o", &[], b"").status, 404);
    // PUT stores, GET returns, HEAD has the length and no body.
    let resp = put("/b/o", 1, b"v1");
    assert!((200..300).contains(&resp.status), "{}", resp.status);
    let resp = gw.req("GET", "/b/o", &[], b"");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, b"v1");
    let resp = gw.req("HEAD", "/b/o", &[], b"");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-length"), Some("2"));
    assert!(resp.body.is_empty());
    // Aliases name the same object.
    assert_eq!(gw.req("GET", "//b/./o/", &[], b"").body, b"v1");
    // PUT replaces.
    assert!((200..300).contains(&put("/b/o", 2, b"version2").status));
    assert_eq!(gw.req("GET", "/b/o", &[], b"").body, b"version2");
    // POST appends.
    let resp = gw.req("POST", "/b/o", &[("X-Fencing-Token", "3")], b"+more");
    assert!((200..300).contains(&resp.status), "{}", resp.status);
    assert_eq!(gw.req("GET", "/b/o", &[], b"").body, b"version2+more");
    // POST to an absent object creates it.
    let resp = gw.req("POST", "/b/new", &[("X-Fencing-Token", "1")], b"abc");
    assert!((200..300).contains(&resp.status));
    assert_eq!(gw.req("GET", "/b/new", &[], b"").body, b"abc");
    // A stale write changes nothing.
    put("/b/o", 1, b"stale").assert_gateway_error(409, "stale_token");
    gw.req("POST", "/b/o", &[("X-Fencing-Token", "2")], b"stale")
        .assert_gateway_error(409, "stale_token");
    assert_eq!(gw.req("GET", "/b/o", &[], b"").body, b"version2+more");
    // DELETE removes; deleting again is 404.
    let resp = gw.req("DELETE", "/b/o", &[("X-Fencing-Token", "4")], b"");
    assert!((200..300).contains(&resp.status));
    assert_eq!(gw.req("GET", "/b/o", &[], b"").status, 404);
    let resp = gw.req("DELETE", "/b/o", &[("X-Fencing-Token", "4")], b"");
    assert_eq!(resp.status, 404);
    // Binary bodies and empty bodies round-trip.
    let binary: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    assert!((200..300).contains(&put("/b/bin", 1, &binary).status));
    assert_eq!(gw.req("GET", "/b/bin", &[], b"").body, binary);
    assert!((200..300).contains(&put("/b/empty", 1, b"").status));
    let resp = gw.req("GET", "/b/empty", &[], b"");
    assert_eq!(resp.status, 200);
    assert!(resp.body.is_empty());
    // Writes without a token are still refused.
    gw.req("PUT", "/b/o", &[], b"x")
        .assert_gateway_error(428, "missing_token");
}

#[test]
fn embedded_backend_on_disk() {
    let mut gw = GatewayProcess::start(&[]);
    assert!(
        gw.wait_stdout("curl", support::HANG_GUARD),
        "no curl hint on stdout: {:?}",
        gw.stdout()
    );
    check_object_semantics(&gw);
    // Objects and fences survive a restart in disk state.
    assert!((200..300).contains(&gw.put("/keep/me", 9).status));
    gw.kill9();
    gw.restart();
    assert_eq!(gw.req("GET", "/keep/me", &[], b"").body, b"data");
    assert_eq!(gw.req("GET", "/b/new", &[], b"").body, b"abc");
    gw.put("/keep/me", 8)
        .assert_gateway_error(409, "stale_token");
}

#[test]
fn embedded_backend_in_memory() {
    let mut gw = GatewayProcess::start(&["--state", "memory"]);
    check_object_semantics(&gw);
    assert!((200..300).contains(&gw.put("/keep/me", 9).status));
    gw.kill9();
    gw.restart();
    // Memory state forgets objects and fences alike.
    assert_eq!(gw.req("GET", "/keep/me", &[], b"").status, 404);
    assert!((200..300).contains(&gw.put("/keep/me", 1).status));
    // Nothing was written under the data dir's objects.
    let objects = gw.data_dir().join("objects");
    let count = std::fs::read_dir(&objects).map_or(0, |d| d.count());
    assert_eq!(
        count,
        0,
        "memory state wrote objects to {}",
        objects.display()
    );
}
