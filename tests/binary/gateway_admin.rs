//! The admin plane of the real binary: `/fences/{key}`, `/fences?prefix&limit`,
//! `/metrics` and `/healthz`.

#[path = "../support/mod.rs"]
mod support;

use support::{dead_port, metric, outcome, pct, Backend, GatewayProcess};

#[test]
fn healthz_is_200() {
    let gw = GatewayProcess::start(&[]);
    assert_eq!(gw.admin_get("/healthz").status, 200);
}

#[test]
fn one_fence_by_percent_encoded_key() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    assert_eq!(gw.put("/bucket/obj", 7).status, 200);
    let resp = gw.admin_get("/fences/%2Fbucket%2Fobj");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp
        .header("content-type")
        .unwrap_or_default()
        .starts_with("application/json"));
    let json = resp.json();
    assert_eq!(json["resource"], "/bucket/obj");
    assert_eq!(json["highest"], 7);
    assert!(json["highest"].is_u64());
    // The key is the normalised path, whatever alias raised it.
    assert_eq!(gw.put("//bucket/./obj/", 8).status, 200);
    assert_eq!(gw.fence("/bucket/obj"), Some(8));
    // Unknown keys are 404.
    assert_eq!(gw.admin_get("/fences/%2Fnope").status, 404);
    assert_eq!(gw.admin_get("/fences/%2Fbucket").status, 404);
    // Keys with spaces and non-ASCII characters.
    assert_eq!(gw.put("/b/caf%C3%A9%20x", 3).status, 200);
    let resp = gw.admin_get(&format!("/fences/{}", pct("/b/café x")));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["resource"], "/b/café x");
    assert_eq!(resp.json()["highest"], 3);
}

#[test]
fn fence_list_is_sorted_prefixed_and_limited() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    for (path, token) in [
        ("/p/c", 3),
        ("/q/a", 9),
        ("/p/a", 1),
        ("/p/b", 2),
        ("/pz", 5),
    ] {
        assert_eq!(gw.put(path, token).status, 200);
    }
    let list = |query: &str| -> Vec<(String, u64)> {
        let resp = gw.admin_get(&format!("/fences{query}"));
        assert_eq!(resp.status, 200, "{query}: {}", resp.text());
        resp.json()["fences"]
            .as_array()
            .expect("fences array")
            .iter()
            .map(|f| {
                (
                    f["resource"].as_str().unwrap().to_string(),
                    f["highest"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let all = |items: &[(&str, u64)]| -> Vec<(String, u64)> {
        items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    };
    assert_eq!(
        list(""),
        all(&[
            ("/p/a", 1),
            ("/p/b", 2),
            ("/p/c", 3),
            ("/pz", 5),
            ("/q/a", 9)
        ])
    );
    assert_eq!(
        list("?prefix=%2Fp%2F"),
        all(&[("/p/a", 1), ("/p/b", 2), ("/p/c", 3)])
    );
    // A plain string prefix, not a path prefix.
    assert_eq!(
        list("?prefix=/p"),
        all(&[("/p/a", 1), ("/p/b", 2), ("/p/c", 3), ("/pz", 5)])
    );
    assert_eq!(
        list("?prefix=%2Fp&limit=2"),
        all(&[("/p/a", 1), ("/p/b", 2)])
    );
    assert_eq!(list("?limit=1"), all(&[("/p/a", 1)]));
    assert_eq!(list("?prefix=%2Fnone"), all(&[]));
}

#[test]
fn fence_list_limit_defaults_to_1000() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--state", "memory"]);
    let addr = gw.data_addr();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in (t..1001).step_by(4) {
                    let resp = support::http(
                        addr,
                        "PUT",
                        &format!("/many/{i:04}"),
                        &[("X-Fencing-Token", "1")],
                        b"",
                    );
                    assert_eq!(resp.status, 200);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let resp = gw.admin_get("/fences");
    let fences = resp.json()["fences"].as_array().unwrap().clone();
    assert_eq!(fences.len(), 1000);
    assert_eq!(fences[0]["resource"], "/many/0000");
    assert_eq!(fences[999]["resource"], "/many/0999");
    let resp = gw.admin_get("/fences?limit=2000");
    assert_eq!(resp.json()["fences"].as_array().unwrap().len(), 1001);
    let text = gw.metrics();
    assert_eq!(metric(&text, "fencegate_fences"), Some(1001.0), "{text}");
}

#[test]
fn metrics_count_every_outcome() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let before = gw.metrics();
    let outcomes = [
        "forwarded",
        "stale_token",
        "missing_token",
        "invalid_token",
        "invalid_path",
        "upstream_error",
    ];
    for o in outcomes {
        assert_eq!(outcome(&before, o), 0.0, "{o} before any request");
    }
    assert_eq!(metric(&before, "fencegate_fences"), Some(0.0), "{before}");

    assert_eq!(gw.put("/m", 5).status, 200); // forwarded
    assert_eq!(gw.req("GET", "/m", &[], b"").status, 200); // forwarded
    gw.put("/m", 4).assert_gateway_error(409, "stale_token");
    gw.req("PUT", "/m", &[], b"")
        .assert_gateway_error(428, "missing_token");
    gw.req("PUT", "/m", &[("X-Fencing-Token", "x")], b"")
        .assert_gateway_error(400, "invalid_token");
    gw.req("PUT", "/../m", &[("X-Fencing-Token", "1")], b"")
        .assert_gateway_error(400, "invalid_path");
    gw.req(
        "PUT",
        "/n",
        &[("X-Fencing-Token", "1"), ("X-Test-Abort", "1")],
        b"",
    )
    .assert_gateway_error(502, "upstream_unavailable");

    let after = gw.metrics();
    let delta = |o: &str| outcome(&after, o) - outcome(&before, o);
    assert_eq!(delta("forwarded"), 2.0, "{after}");
    for o in [
        "stale_token",
        "missing_token",
        "invalid_token",
        "invalid_path",
        "upstream_error",
    ] {
        assert_eq!(delta(o), 1.0, "{o}:\n{after}");
    }
    // A latency histogram that saw every request.
    let hist = after
        .lines()
        .find(|l| l.starts_with("# TYPE ") && l.ends_with(" histogram"))
        .unwrap_or_else(|| panic!("no histogram in:\n{after}"));
    let name = hist.split_whitespace().nth(2).unwrap();
    let count = metric(&after, &format!("{name}_count")).expect("histogram _count");
    assert_eq!(count, 7.0, "{after}");
    assert!(
        after.contains(&format!("{name}_bucket{{le=\"+Inf\"}} 7")),
        "{after}"
    );
    assert!(metric(&after, &format!("{name}_sum")).unwrap() > 0.0);
    // Two fences: /m and /n (the upstream failure does not roll /n back).
    assert_eq!(metric(&after, "fencegate_fences"), Some(2.0), "{after}");
}

#[test]
fn metrics_count_upstream_timeouts_and_unreachable_upstreams() {
    let port = dead_port();
    let gw = GatewayProcess::start(&["--upstream", &format!("http://127.0.0.1:{port}")]);
    gw.put("/x", 1)
        .assert_gateway_error(502, "upstream_unavailable");
    gw.req("GET", "/x", &[], b"")
        .assert_gateway_error(502, "upstream_unavailable");
    let text = gw.metrics();
    assert_eq!(outcome(&text, "upstream_error"), 2.0, "{text}");
    assert_eq!(outcome(&text, "forwarded"), 0.0, "{text}");

    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--upstream-timeout", "0.3"]);
    gw.req("GET", "/h", &[("X-Test-Hang", "1")], b"")
        .assert_gateway_error(504, "upstream_timeout");
    let text = gw.metrics();
    assert_eq!(outcome(&text, "upstream_error"), 1.0, "{text}");
}

#[test]
fn admin_plane_is_separate_from_the_data_plane() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    // /metrics on the data plane is an ordinary (unfenced) read: forwarded.
    let resp = gw.req("GET", "/metrics", &[], b"");
    assert_eq!(resp.status, 200);
    assert_eq!(backend.records()[0].target, "/metrics");
    assert_eq!(gw.admin_get("/nope").status, 404);
}
