//! Fence administration on the real binary: bearer authentication, admin
//! writes (raise, forced lower, delete) with each error of the contract, and
//! the audit log, also across kill -9.

#[path = "../support/mod.rs"]
mod support;

use std::time::Duration;

use serde_json::json;
use support::{http, pct, wait_until, Backend, GatewayProcess, Resp};

const TOKEN: &str = "s3cret-admin-token";

/// A gateway in front of `backend` whose admin plane takes [`TOKEN`]. The
/// token file lives in the returned directory.
fn gateway_with_token(backend: &Backend) -> (GatewayProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("admin-token");
    std::fs::write(&file, format!("  {TOKEN}\n")).unwrap();
    let gw = GatewayProcess::in_front_of(backend, &["--admin-token-file", file.to_str().unwrap()]);
    (gw, dir)
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

fn admin(gw: &GatewayProcess, method: &str, target: &str, body: &serde_json::Value) -> Resp {
    let auth = bearer();
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    http(
        gw.admin_addr(),
        method,
        target,
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        &body,
    )
}

/// A request to the admin plane of `gw` as it is sent: `auth`, if any, is
/// its only header.
fn admin_raw(
    gw: &GatewayProcess,
    auth: Option<&str>,
    method: &str,
    target: &str,
    body: &[u8],
) -> Resp {
    let headers: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
    http(gw.admin_addr(), method, target, &headers, body)
}

fn set(gw: &GatewayProcess, key: &str, body: serde_json::Value) -> Resp {
    admin(gw, "PUT", &format!("/fences/{}", pct(key)), &body)
}

fn forget(gw: &GatewayProcess, key: &str, query: &str) -> Resp {
    admin(
        gw,
        "DELETE",
        &format!("/fences/{}{query}", pct(key)),
        &serde_json::Value::Null,
    )
}

fn highest(gw: &GatewayProcess, key: &str) -> Option<u64> {
    let resp = admin(
        gw,
        "GET",
        &format!("/fences/{}", pct(key)),
        &serde_json::Value::Null,
    );
    match resp.status {
        200 => resp.json()["highest"].as_u64(),
        404 => None,
        other => panic!("GET fence: {other} {}", resp.text()),
    }
}

fn audit(gw: &GatewayProcess) -> Vec<serde_json::Value> {
    let resp = admin(gw, "GET", "/audit", &serde_json::Value::Null);
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["entries"].as_array().unwrap().clone()
}

/// A PUT of `token` to `path` held at the backend until `release(hold)`,
/// sent from a thread; returns once the backend has it.
fn held_put(
    gw: &GatewayProcess,
    backend: &Backend,
    path: &'static str,
    token: &'static str,
    hold: &'static str,
) -> std::thread::JoinHandle<Resp> {
    let data = gw.data_addr();
    let before = backend.count();
    let held = std::thread::spawn(move || {
        http(
            data,
            "PUT",
            path,
            &[("X-Fencing-Token", token), ("X-Test-Hold", hold)],
            b"x",
        )
    });
    assert!(backend.wait_for(Duration::from_secs(10), |r| r.len() > before));
    held
}

#[test]
fn the_token_guards_everything_but_the_probes() {
    let backend = Backend::start();
    let (gw, _dir) = gateway_with_token(&backend);
    for target in ["/fences", "/fences/%2Fa", "/metrics", "/audit"] {
        let resp = gw.admin_get(target);
        resp.assert_gateway_error(401, "unauthorized");
        assert_eq!(resp.header("www-authenticate"), Some("Bearer"), "{target}");
        let wrong = admin_raw(&gw, Some("Bearer s3cret-admin-tokem"), "GET", target, b"");
        wrong.assert_gateway_error(401, "unauthorized");
        let longer = format!("{} ", bearer()) + "x";
        let wrong = admin_raw(&gw, Some(&longer), "GET", target, b"");
        assert_eq!(wrong.status, 401, "{target}");
    }
    let ok = admin(&gw, "GET", "/fences", &serde_json::Value::Null);
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(
        admin(&gw, "GET", "/metrics", &serde_json::Value::Null).status,
        200
    );
    // Probes are open: load balancers and orchestrators carry no token.
    assert_eq!(gw.admin_get("/healthz").status, 200);
    assert_eq!(gw.admin_get("/readyz").status, 200);
    // A write without the token is 401 too, and changes nothing.
    let resp = admin_raw(
        &gw,
        None,
        "PUT",
        "/fences/%2Fa",
        br#"{"highest": 5, "reason": "x"}"#,
    );
    assert_eq!(resp.status, 401);
    assert_eq!(highest(&gw, "/a"), None);
}

#[test]
fn without_a_token_file_the_admin_plane_is_read_only() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    assert_eq!(gw.put("/a", 5).status, 200);
    let put = admin_raw(
        &gw,
        None,
        "PUT",
        "/fences/%2Fa",
        br#"{"highest": 9, "reason": "try"}"#,
    );
    put.assert_gateway_error(403, "admin_writes_disabled");
    let delete = admin_raw(&gw, None, "DELETE", "/fences/%2Fa?if_highest=5", b"");
    delete.assert_gateway_error(403, "admin_writes_disabled");
    assert_eq!(gw.fence("/a"), Some(5));
    assert_eq!(gw.admin_get("/fences").status, 200);
}

#[test]
fn an_unreadable_or_empty_token_file_is_a_start_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n  \n").unwrap();
    for file in [empty, dir.path().join("missing")] {
        let run = support::run_on_free_ports(&["--admin-token-file", file.to_str().unwrap()]);
        let line = run.start_error(&file.display().to_string());
        assert!(line.contains("admin token file"), "{}", run.stderr);
    }
}

/// The forged-token story, end to end: one `u64::MAX` blocks the resource,
/// an operator lowers the fence with a reason, real tokens go through again,
/// and the audit log says who did what.
#[test]
fn a_forged_huge_token_is_undone_by_a_forced_lowering() {
    let backend = Backend::start();
    let (gw, _dir) = gateway_with_token(&backend);
    let max = u64::MAX;
    assert_eq!(gw.put("/bucket/report", max).status, 200);
    let refused = gw.put("/bucket/report", 42);
    refused.assert_gateway_error(409, "stale_token");

    let body = |extra: serde_json::Value| {
        let mut body = json!({ "highest": 41, "reason": "forged token from 10.0.0.9" });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let resp = set(&gw, "/bucket/report", body(json!({})));
    let err = resp.assert_gateway_error(409, "would_lower");
    assert_eq!(err["highest"], max);
    let resp = set(&gw, "/bucket/report", body(json!({ "force": true })));
    resp.assert_gateway_error(409, "would_lower");
    let resp = set(
        &gw,
        "/bucket/report",
        body(json!({ "force": true, "if_highest": 7 })),
    );
    let err = resp.assert_gateway_error(409, "highest_changed");
    assert_eq!(err["highest"], max);
    assert_eq!(highest(&gw, "/bucket/report"), Some(max));

    let resp = set(
        &gw,
        "/bucket/report",
        body(json!({ "force": true, "if_highest": max })),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.json(),
        json!({ "resource": "/bucket/report", "highest": 41, "previous": max })
    );
    assert_eq!(highest(&gw, "/bucket/report"), Some(41));
    assert_eq!(gw.put("/bucket/report", 40).status, 409);
    assert_eq!(gw.put("/bucket/report", 42).status, 200);
    let tokens: Vec<_> = backend
        .records_for("/bucket/report")
        .iter()
        .filter_map(|r| r.token_u64())
        .collect();
    assert_eq!(tokens, vec![max, 42]);

    let entries = audit(&gw);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    assert_eq!(entry["action"], "lower");
    assert_eq!(entry["resource"], "/bucket/report");
    assert_eq!(entry["previous"], max);
    assert_eq!(entry["highest"], 41);
    assert_eq!(entry["reason"], "forged token from 10.0.0.9");
    assert!(
        entry["actor"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{entry}"
    );
    let time = entry["time"].as_str().unwrap();
    assert!(time.ends_with('Z') && time.contains('T'), "{time}");
    assert!(gw.wait_stderr("admin write", Duration::from_secs(5)));
    assert!(gw.stderr().contains("WARN"), "{}", gw.stderr());
}

#[test]
fn a_raise_seals_the_fence_before_the_new_holder_writes() {
    let backend = Backend::start();
    let (gw, _dir) = gateway_with_token(&backend);
    assert_eq!(gw.put("/doc", 33).status, 200);
    // The lock service grants token 34 and seals the fence at once.
    let resp = set(
        &gw,
        "/doc",
        json!({ "highest": 34, "reason": "lock granted" }),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.json(),
        json!({ "resource": "/doc", "highest": 34, "previous": 33 })
    );
    // The previous holder's late write bounces before 34 wrote anything.
    let late = gw.put("/doc", 33);
    let err = late.assert_gateway_error(409, "stale_token");
    assert_eq!(err["highest"], 34);
    assert_eq!(gw.put("/doc", 34).status, 200);
    // Raising to the current value is allowed (and audited); a new fence
    // has no previous.
    let same = set(&gw, "/doc", json!({ "highest": 34, "reason": "again" }));
    assert_eq!(same.json()["previous"], 34);
    let new = set(&gw, "/fresh", json!({ "highest": 3, "reason": "seal" }));
    assert_eq!(
        new.json(),
        json!({ "resource": "/fresh", "highest": 3, "previous": null })
    );
    let actions: Vec<_> = audit(&gw)
        .iter()
        .map(|e| (e["action"].clone(), e["resource"].clone()))
        .collect();
    assert_eq!(
        actions,
        vec![
            (json!("raise"), json!("/fresh")),
            (json!("raise"), json!("/doc")),
            (json!("raise"), json!("/doc")),
        ]
    );
    assert!(gw.stderr().contains("fence raised"));
}

/// An admin raise behaves like an admission's: a request waiting for a
/// lower token in flight is overtaken, exactly as if a client had sent the
/// higher token.
#[test]
fn an_admin_raise_overtakes_waiters_below_it() {
    let backend = Backend::start();
    let (gw, _dir) = gateway_with_token(&backend);
    let held = held_put(&gw, &backend, "/k", "5", "five");
    let data = gw.data_addr();
    let waiting =
        std::thread::spawn(move || http(data, "PUT", "/k", &[("X-Fencing-Token", "6")], b"y"));
    assert!(wait_until(Duration::from_secs(10), || highest(&gw, "/k") == Some(6)));
    let resp = set(&gw, "/k", json!({ "highest": 7, "reason": "granted 7" }));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let overtaken = waiting.join().unwrap();
    let err = overtaken.assert_gateway_error(409, "stale_token");
    assert_eq!(err["reason"], "overtaken");
    backend.release("five");
    assert_eq!(held.join().unwrap().status, 200);
    assert_eq!(backend.count(), 1, "6 never reached the backend");
}

#[test]
fn lowering_and_forgetting_wait_for_an_idle_fence() {
    let backend = Backend::start();
    let (gw, _dir) = gateway_with_token(&backend);
    let held = held_put(&gw, &backend, "/busy", "9", "slow");
    let lower = set(
        &gw,
        "/busy",
        json!({ "highest": 1, "reason": "r", "force": true, "if_highest": 9 }),
    );
    lower.assert_gateway_error(409, "fence_busy");
    forget(&gw, "/busy", "?if_highest=9").assert_gateway_error(409, "fence_busy");
    // A raise is fine while busy.
    assert_eq!(
        set(&gw, "/busy", json!({ "highest": 10, "reason": "r" })).status,
        200
    );
    backend.release("slow");
    assert_eq!(held.join().unwrap().status, 200);

    forget(&gw, "/busy", "?if_highest=9").assert_gateway_error(409, "highest_changed");
    forget(&gw, "/busy", "").assert_gateway_error(400, "invalid_request");
    forget(&gw, "/busy", "?if_highest=ten").assert_gateway_error(400, "invalid_request");
    let resp = forget(&gw, "/busy", "?if_highest=10&reason=retired");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json(), json!({ "resource": "/busy", "previous": 10 }));
    assert_eq!(highest(&gw, "/busy"), None);
    forget(&gw, "/busy", "?if_highest=10").assert_gateway_error(404, "unknown_fence");
    // Forgotten: any token starts the fence afresh.
    assert_eq!(gw.put("/busy", 1).status, 200);
    assert_eq!(highest(&gw, "/busy"), Some(1));
    let entry = &audit(&gw)[0];
    assert_eq!(entry["action"], "delete");
    assert_eq!(entry["highest"], serde_json::Value::Null);
    assert_eq!(entry["reason"], "retired");
}

#[test]
fn malformed_admin_writes_are_400_and_change_nothing() {
    let backend = Backend::start();
    let (gw, _dir) = gateway_with_token(&backend);
    assert_eq!(gw.put("/a", 5).status, 200);
    let long = "x".repeat(201);
    for body in [
        json!({ "highest": 9 }),
        json!({ "highest": 9, "reason": "" }),
        json!({ "highest": 9, "reason": long }),
        json!({ "highest": 9, "reason": "line\nbreak" }),
        json!({ "highest": -1, "reason": "r" }),
        json!({ "highest": "9", "reason": "r" }),
        json!({ "highest": 9, "reason": "r", "if_higest": 5 }),
        json!([9]),
    ] {
        let resp = set(&gw, "/a", body.clone());
        let err = resp.assert_gateway_error(400, "invalid_request");
        assert!(err["detail"].is_string(), "{body}: {err}");
    }
    let auth = bearer();
    let not_json = admin_raw(&gw, Some(&auth), "PUT", "/fences/%2Fa", b"highest=9");
    not_json.assert_gateway_error(400, "invalid_request");
    let above_u64 = admin_raw(
        &gw,
        Some(&auth),
        "PUT",
        "/fences/%2Fa",
        br#"{"highest": 18446744073709551616, "reason": "r"}"#,
    );
    above_u64.assert_gateway_error(400, "invalid_request");
    // Keys no request maps to in path scope (`/a/` does: the fence of
    // everything under `/a`, left by a collection write).
    for key in ["a", "/a//", "/a//b", "/a/../b", "/./a"] {
        let resp = set(&gw, key, json!({ "highest": 9, "reason": "r" }));
        resp.assert_gateway_error(400, "invalid_request");
    }
    assert_eq!(highest(&gw, "/a"), Some(5));
    assert!(audit(&gw).is_empty());
}

#[test]
fn admin_writes_and_their_audit_survive_kill_9() {
    let backend = Backend::start();
    let (mut gw, _dir) = gateway_with_token(&backend);
    assert_eq!(gw.put("/x", u64::MAX).status, 200);
    assert_eq!(gw.put("/y", 8).status, 200);
    let lowered = set(
        &gw,
        "/x",
        json!({ "highest": 3, "reason": "forged", "force": true, "if_highest": u64::MAX }),
    );
    assert_eq!(lowered.status, 200, "{}", lowered.text());
    assert_eq!(forget(&gw, "/y", "?if_highest=8").status, 200);
    assert_eq!(
        set(&gw, "/z", json!({ "highest": 12, "reason": "sealed" })).status,
        200
    );
    gw.restart();
    assert_eq!(highest(&gw, "/x"), Some(3));
    assert_eq!(highest(&gw, "/y"), None);
    assert_eq!(highest(&gw, "/z"), Some(12));
    let entries = audit(&gw);
    let summary: Vec<_> = entries
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["resource"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [("raise", "/z"), ("delete", "/y"), ("lower", "/x")]
            .map(|(a, r)| (a.to_owned(), r.to_owned()))
    );
    let limited = admin(&gw, "GET", "/audit?limit=1", &serde_json::Value::Null);
    assert_eq!(limited.json()["entries"].as_array().unwrap().len(), 1);
    admin(&gw, "GET", "/audit?limit=x", &serde_json::Value::Null)
        .assert_gateway_error(400, "invalid_query");
    assert_eq!(gw.put("/x", 4).status, 200);
}
