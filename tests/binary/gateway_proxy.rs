//! Forwarding through the real binary: fenced reads, alias bypass, scopes,
//! options and their environment variables, header hygiene in both
//! directions, the upstream base path, and HTTP/2 (h2c) clients.

#[path = "../support/mod.rs"]
mod support;

use support::{http, send_raw, try_http, Backend, GatewayProcess, HANG_GUARD};

fn put_with(gw: &GatewayProcess, path: &str, headers: &[(&str, &str)]) -> support::Resp {
    gw.req("PUT", path, headers, b"data")
}

// ---------------------------------------------------------------------------
// Fenced and unfenced reads
// ---------------------------------------------------------------------------

#[test]
fn fenced_read_raises_the_fence() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let resp = gw.req("GET", "/r/obj", &[("X-Fencing-Token", "34")], b"");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(gw.fence("/r/obj"), Some(34));
    let json = gw
        .put("/r/obj", 33)
        .assert_gateway_error(409, "stale_token");
    assert_eq!(json["highest"], 34);
    // A fenced read below the highest is refused too.
    let head = gw.req("HEAD", "/r/obj", &[("X-Fencing-Token", "33")], b"");
    assert_eq!(head.status, 409);
    assert_eq!(head.header("x-fencing-highest"), Some("34"));
    let records = backend.records();
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0].method, "GET");
    assert_eq!(records[0].token.as_deref(), Some("34"));
}

#[test]
fn unfenced_read_is_forwarded_and_does_not_wait_behind_a_slow_write() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let addr = gw.data_addr();
    let held = std::thread::spawn(move || {
        http(
            addr,
            "PUT",
            "/slow/obj",
            &[("X-Fencing-Token", "30"), ("X-Test-Hold", "w")],
            b"v",
        )
    });
    assert!(backend.wait_for(HANG_GUARD, |r| r.len() == 1));
    // While the write is held at the backend, unfenced reads of the same key
    // are answered (they would hang here if they queued behind it).
    for method in ["GET", "HEAD"] {
        let resp = gw.req(method, "/slow/obj", &[], b"");
        assert_eq!(resp.status, 200, "{method}");
    }
    let records = backend.records();
    assert_eq!(records.len(), 3);
    assert!(records[1..].iter().all(|r| r.token.is_none()));
    backend.release("w");
    assert_eq!(held.join().unwrap().status, 200);
    assert_eq!(gw.fence("/slow/obj"), Some(30));
}

// ---------------------------------------------------------------------------
// Aliases
// ---------------------------------------------------------------------------

#[test]
fn aliases_share_one_fence() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    assert_eq!(gw.put("/bucket/obj", 34).status, 200);
    for alias in [
        "//bucket/obj",
        "/bucket//obj",
        "/bucket/./obj",
        "/./bucket/obj",
        "/bucket/x/../obj",
        "/x/../bucket/obj",
        "/bucket/%6fbj",
        "/bucket/%6Fbj",
        "/%62ucket/obj",
        "/bucket%2fobj",
        "/bucket/%2e/obj",
        "/bucket/x/%2e%2e/obj",
        "/bucket/obj/",
        "/bucket/obj//",
        "/bucket/obj/.",
        "/bucket/obj?versionId=1",
    ] {
        for method in ["PUT", "DELETE", "POST"] {
            let resp = gw.req(method, alias, &[("X-Fencing-Token", "33")], b"x");
            let json = resp.assert_gateway_error(409, "stale_token");
            assert_eq!(json["resource"], "/bucket/obj", "{method} {alias}: {json}");
        }
    }
    // The absolute form of the request target names the same object.
    let absolute = format!(
        "PUT http://{}/bucket//obj HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nX-Fencing-Token: 33\r\n\r\n",
        gw.data_addr(),
        gw.data_addr()
    );
    let json = send_raw(gw.data_addr(), absolute.as_bytes(), false)
        .assert_gateway_error(409, "stale_token");
    assert_eq!(json["resource"], "/bucket/obj");
    assert_eq!(backend.count(), 1, "{:#?}", backend.records());
}

#[test]
fn requests_are_forwarded_with_the_path_as_sent() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let targets = [
        "//bucket/./x/../obj",
        "/bucket/%6fbj?q=%2F&x=1",
        "/bucket/obj/",
        "/bucket%2Fobj",
        "/a/b%20c",
    ];
    for (i, target) in targets.iter().enumerate() {
        let token = (40 + i).to_string();
        let resp = put_with(&gw, target, &[("X-Fencing-Token", &token)]);
        assert_eq!(resp.status, 200, "{target}: {}", resp.text());
    }
    let seen: Vec<String> = backend.records().into_iter().map(|r| r.target).collect();
    assert_eq!(seen, targets);
    assert_eq!(gw.fence("/bucket/obj"), Some(43));
    assert_eq!(gw.fence("/a/b c"), Some(44));
}

// ---------------------------------------------------------------------------
// Scopes
// ---------------------------------------------------------------------------

#[test]
fn prefix_scope_shares_one_fence_per_bucket() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--scope", "prefix:1"]);
    assert_eq!(gw.put("/photos/a.jpg", 10).status, 200);
    let json = gw
        .put("/photos/2024/b.jpg", 9)
        .assert_gateway_error(409, "stale_token");
    assert_eq!(json["resource"], "/photos", "{json}");
    gw.put("//photos/./c", 9)
        .assert_gateway_error(409, "stale_token");
    // The bucket itself is its own (the same) key.
    gw.put("/photos", 9)
        .assert_gateway_error(409, "stale_token");
    assert_eq!(gw.put("/videos/a", 9).status, 200);
    assert_eq!(gw.fence("/photos"), Some(10));
    assert_eq!(gw.fence("/videos"), Some(9));
    assert_eq!(gw.fence("/photos/a.jpg"), None);
    let json = gw
        .req("DELETE", "/photos/x", &[], b"")
        .assert_gateway_error(428, "missing_token");
    assert_eq!(json["resource"], "/photos");
    assert_eq!(backend.count(), 2);
}

#[test]
fn prefix_2_scope() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--scope", "prefix:2"]);
    assert_eq!(gw.put("/a/b/c", 10).status, 200);
    let json = gw
        .put("/a/b/d/e", 9)
        .assert_gateway_error(409, "stale_token");
    assert_eq!(json["resource"], "/a/b");
    assert_eq!(gw.put("/a/c/d", 9).status, 200);
    assert_eq!(gw.put("/a", 1).status, 200);
    assert_eq!(gw.fence("/a"), Some(1));
    assert_eq!(gw.fence("/a/c"), Some(9));
}

#[test]
fn header_scope_fences_per_lock_name() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--scope", "header"]);
    let ok = put_with(
        &gw,
        "/x",
        &[("X-Fencing-Token", "10"), ("X-Fencing-Lock", "L1")],
    );
    assert_eq!(ok.status, 200);
    // Another path, same lock: fenced.
    let json = put_with(
        &gw,
        "/y",
        &[("X-Fencing-Token", "9"), ("X-Fencing-Lock", "L1")],
    )
    .assert_gateway_error(409, "stale_token");
    assert_eq!(json["resource"], "L1", "{json}");
    // Same path, another lock: its own fence.
    let ok = put_with(
        &gw,
        "/x",
        &[("X-Fencing-Token", "9"), ("X-Fencing-Lock", "L2")],
    );
    assert_eq!(ok.status, 200);
    assert_eq!(gw.fence("L1"), Some(10));
    assert_eq!(gw.fence("L2"), Some(9));
    assert_eq!(gw.fence("/x"), None);
    // Missing lock on a fenced request: invalid_token.
    put_with(&gw, "/x", &[("X-Fencing-Token", "11")]).assert_gateway_error(400, "invalid_token");
    // An unfenced read needs no lock.
    assert_eq!(gw.req("GET", "/x", &[], b"").status, 200);
    // The lock header is forwarded.
    let records = backend.records();
    assert_eq!(records[0].header("x-fencing-lock"), Some("L1"));
    assert_eq!(records.len(), 3);
}

// ---------------------------------------------------------------------------
// Options and environment variables
// ---------------------------------------------------------------------------

#[test]
fn allow_unfenced_writes_forwards_writes_without_a_token() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--allow-unfenced-writes"]);
    for method in ["PUT", "POST", "DELETE", "PATCH"] {
        let resp = gw.req(method, "/free", &[], b"x");
        assert_eq!(resp.status, 200, "{method}: {}", resp.text());
    }
    assert_eq!(gw.fence("/free"), None);
    // Fenced writes are still fenced.
    assert_eq!(gw.put("/free", 5).status, 200);
    gw.put("/free", 4).assert_gateway_error(409, "stale_token");
    gw.req("PUT", "/free", &[("X-Fencing-Token", "x")], b"")
        .assert_gateway_error(400, "invalid_token");
    assert_eq!(backend.count(), 5);
}

#[test]
fn without_allow_unfenced_writes_the_default_is_428() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    gw.req("PUT", "/free", &[], b"x")
        .assert_gateway_error(428, "missing_token");
    assert_eq!(backend.count(), 0);
}

#[test]
fn custom_token_header() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--token-header", "X-Lock-Token"]);
    assert_eq!(put_with(&gw, "/t", &[("X-Lock-Token", "5")]).status, 200);
    let resp = put_with(&gw, "/t", &[("x-lock-token", "4")]);
    let json = resp.assert_gateway_error(409, "stale_token");
    assert_eq!(json["highest"], 5);
    // The default header name means nothing now: a write with only it has no token.
    put_with(&gw, "/t", &[("X-Fencing-Token", "9")]).assert_gateway_error(428, "missing_token");
    put_with(&gw, "/t", &[("X-Lock-Token", "five")]).assert_gateway_error(400, "invalid_token");
    let records = backend.records();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].header("x-lock-token"),
        Some("5"),
        "token header forwarded"
    );
}

#[test]
fn options_read_from_environment_variables() {
    let backend = Backend::start();
    let url = backend.url();
    let gw = GatewayProcess::start_with_env(
        &[],
        &[
            ("FENCEGATE_UPSTREAM", &url),
            ("FENCEGATE_SCOPE", "prefix:1"),
            ("FENCEGATE_TOKEN_HEADER", "X-Lock-Token"),
            ("FENCEGATE_UPSTREAM_TIMEOUT", "0.5"),
        ],
    );
    assert_eq!(
        put_with(&gw, "/bucket/a", &[("X-Lock-Token", "10")]).status,
        200
    );
    let json = put_with(&gw, "/bucket/b", &[("X-Lock-Token", "9")])
        .assert_gateway_error(409, "stale_token");
    assert_eq!(json["resource"], "/bucket");
    put_with(
        &gw,
        "/other/x",
        &[("X-Lock-Token", "1"), ("X-Test-Hang", "1")],
    )
    .assert_gateway_error(504, "upstream_timeout");
    assert_eq!(
        backend.records()[0].target,
        "/bucket/a",
        "FENCEGATE_UPSTREAM used"
    );
}

#[test]
fn addresses_data_dir_and_state_from_environment() {
    let backend = Backend::start();
    let url = backend.url();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("env-data");
    let dir_s = dir.display().to_string();
    let mut gw = GatewayProcess::start_with_env(
        &[],
        &[
            ("FENCEGATE_LISTEN", "127.0.0.1:0"),
            ("FENCEGATE_ADMIN_LISTEN", "127.0.0.1:0"),
            ("FENCEGATE_DATA_DIR", &dir_s),
            ("FENCEGATE_UPSTREAM", &url),
        ],
    );
    assert_eq!(gw.put("/e", 5).status, 200);
    assert!(
        dir.join("fences.redb").exists(),
        "FENCEGATE_DATA_DIR not used"
    );
    gw.kill9();
    gw.restart();
    assert_eq!(gw.fence("/e"), Some(5));
    drop(gw);

    let mem_dir = tmp.path().join("mem-data");
    let mem_dir_s = mem_dir.display().to_string();
    let gw = GatewayProcess::start_with_env(
        &["--upstream", &url, "--data-dir", &mem_dir_s],
        &[("FENCEGATE_STATE", "memory")],
    );
    assert!(gw.wait_stderr("memory", HANG_GUARD), "{}", gw.stderr());
    assert_eq!(gw.put("/e", 5).status, 200);
    assert!(
        !mem_dir.join("fences.redb").exists(),
        "FENCEGATE_STATE not used"
    );
}

#[test]
fn allow_unfenced_writes_from_environment() {
    let backend = Backend::start();
    let url = backend.url();
    let gw = GatewayProcess::start_with_env(
        &["--upstream", &url],
        &[("FENCEGATE_ALLOW_UNFENCED_WRITES", "true")],
    );
    assert_eq!(gw.req("PUT", "/free", &[], b"x").status, 200);
}

#[test]
fn command_line_wins_over_environment() {
    let backend = Backend::start();
    let url = backend.url();
    let gw = GatewayProcess::start_with_env(
        &["--upstream", &url, "--scope", "path"],
        &[("FENCEGATE_SCOPE", "prefix:1")],
    );
    assert_eq!(gw.put("/bucket/a", 10).status, 200);
    assert_eq!(gw.put("/bucket/b", 9).status, 200);
}

// ---------------------------------------------------------------------------
// Header hygiene
// ---------------------------------------------------------------------------

#[test]
fn hop_by_hop_request_headers_are_not_forwarded() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let request = "PUT /hop HTTP/1.1\r\n\
        Host: x\r\n\
        Content-Length: 4\r\n\
        X-Fencing-Token: 7\r\n\
        Connection: keep-alive, X-Secret\r\n\
        Connection: x-other\r\n\
        X-Secret: 1\r\n\
        X-Other: 2\r\n\
        Keep-Alive: timeout=5\r\n\
        TE: trailers\r\n\
        Proxy-Authorization: Basic Zm9vOmJhcg==\r\n\
        Proxy-Connection: keep-alive\r\n\
        Authorization: AWS4-HMAC-SHA256 Credential=abc\r\n\
        X-Regular: yes\r\n\
        \r\n\
        body";
    let resp = send_raw(gw.data_addr(), request.as_bytes(), false);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let record = &backend.records()[0];
    for name in [
        "x-secret",
        "x-other",
        "keep-alive",
        "te",
        "proxy-authorization",
        "proxy-connection",
        "upgrade",
    ] {
        assert!(
            record.header(name).is_none(),
            "{name} reached the backend: {:?}",
            record.headers
        );
    }
    for value in record.header_all("connection") {
        let value = value.to_ascii_lowercase();
        assert!(
            !value.contains("x-secret") && !value.contains("x-other"),
            "client's Connection forwarded: {value}"
        );
    }
    assert_eq!(record.header("x-regular"), Some("yes"));
    assert_eq!(
        record.header("authorization"),
        Some("AWS4-HMAC-SHA256 Credential=abc")
    );
    assert_eq!(
        record.header("x-fencing-token"),
        Some("7"),
        "token forwarded"
    );
    assert_eq!(record.body_len, Some(4));
}

#[test]
fn forwarded_headers_are_added_and_host_is_kept() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let resp = gw.req(
        "PUT",
        "/fw",
        &[
            ("Host", "bucket.s3.example.com:9000"),
            ("X-Fencing-Token", "1"),
        ],
        b"",
    );
    assert_eq!(resp.status, 200);
    let resp = gw.req(
        "GET",
        "/fw",
        &[("Host", "other.example"), ("X-Forwarded-For", "10.1.2.3")],
        b"",
    );
    assert_eq!(resp.status, 200);
    let records = backend.records();
    assert_eq!(
        records[0].header_all("host"),
        ["bucket.s3.example.com:9000"]
    );
    assert_eq!(records[0].header_all("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(records[0].header_all("x-forwarded-proto"), ["http"]);
    assert_eq!(records[0].header("x-fencing-token"), Some("1"));
    assert_eq!(records[1].header_all("host"), ["other.example"]);
    let xff = records[1].header_all("x-forwarded-for").join(", ");
    assert_eq!(xff, "10.1.2.3, 127.0.0.1");
    assert_eq!(records[1].header_all("x-forwarded-proto"), ["http"]);
}

#[test]
fn hop_by_hop_response_headers_are_dropped_and_the_rest_relayed() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let resp = gw.req(
        "PUT",
        "/resp",
        &[
            ("X-Fencing-Token", "1"),
            ("X-Test-Status", "201"),
            ("X-Test-Response-Header", "Connection: x-hop"),
            ("X-Test-Response-Header", "X-Hop: 1"),
            ("X-Test-Response-Header", "Keep-Alive: timeout=5"),
            (
                "X-Test-Response-Header",
                "Proxy-Authenticate: Basic realm=x",
            ),
            ("X-Test-Response-Header", "X-Keep: yes"),
            ("X-Test-Response-Header", "ETag: \"abc\""),
        ],
        b"",
    );
    assert_eq!(resp.status, 201, "status relayed");
    assert_eq!(resp.header("x-keep"), Some("yes"));
    assert_eq!(resp.header("etag"), Some("\"abc\""));
    assert_eq!(resp.header("content-type"), Some("application/json"));
    for name in ["x-hop", "keep-alive", "proxy-authenticate"] {
        assert!(
            resp.header(name).is_none(),
            "{name} relayed: {:?}",
            resp.headers
        );
    }
    for value in resp.header_all("connection") {
        assert!(!value.to_ascii_lowercase().contains("x-hop"), "{value}");
    }
    // The body is the backend's, unchanged.
    let json = resp.json();
    assert_eq!(json["target"], "/resp");
}

#[test]
fn backend_errors_are_relayed_unchanged() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    for status in ["404", "409", "500", "503"] {
        let resp = gw.req(
            "PUT",
            "/err",
            &[("X-Fencing-Token", "1"), ("X-Test-Status", status)],
            b"",
        );
        assert_eq!(resp.status.to_string(), status);
        // The backend's JSON echo, not a gateway error.
        assert!(resp.json().get("error").is_none(), "{}", resp.text());
        assert_eq!(resp.json()["method"], "PUT");
    }
}

#[test]
fn response_body_is_streamed_back() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let resp = gw.req("GET", "/big", &[("X-Test-Response-Bytes", "5000000")], b"");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body.len(), 5_000_000);
    assert!(resp.body.iter().all(|b| *b == 0));
}

#[test]
fn request_body_is_forwarded_intact_chunked_and_sized() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let chunked = "PUT /chunked HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 1\r\n\
        Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    let resp = send_raw(gw.data_addr(), chunked.as_bytes(), false);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let resp = gw.req(
        "PUT",
        "/sized",
        &[("X-Fencing-Token", "1")],
        &[7u8; 100_000],
    );
    assert_eq!(resp.status, 200);
    let records = backend.records();
    assert_eq!(records[0].body_len, Some(11));
    assert_eq!(records[1].body_len, Some(100_000));
}

#[test]
fn upstream_base_path_is_prepended() {
    let backend = Backend::start();
    for base in ["/base", "/base/"] {
        let url = format!("{}{base}", backend.url());
        let gw = GatewayProcess::start(&["--upstream", &url]);
        let resp = gw.put("/bucket/obj?x=1", 3);
        assert_eq!(resp.status, 200);
        assert_eq!(gw.req("GET", "/", &[], b"").status, 200);
        // The fence key is the client's path, not the backend's.
        assert_eq!(gw.fence("/bucket/obj"), Some(3));
    }
    let targets: Vec<String> = backend.records().into_iter().map(|r| r.target).collect();
    assert_eq!(
        targets,
        [
            "/base/bucket/obj?x=1",
            "/base/",
            "/base/bucket/obj?x=1",
            "/base/"
        ]
    );
}

#[test]
fn h2c_prior_knowledge_clients_are_served() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let base = gw.data_url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use http_body_util::{BodyExt, Full};
        let client: hyper_util::client::legacy::Client<_, Full<bytes::Bytes>> =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(true)
                .build_http();
        let send = |method: &str, path: &str, token: Option<&str>| {
            let mut builder = http::Request::builder()
                .method(method)
                .uri(format!("{base}{path}"));
            if let Some(token) = token {
                builder = builder.header("x-fencing-token", token);
            }
            let request = builder
                .body(Full::new(bytes::Bytes::from_static(b"h2")))
                .unwrap();
            let client = client.clone();
            async move {
                let response = tokio::time::timeout(HANG_GUARD, client.request(request))
                    .await
                    .expect("hang guard")
                    .expect("h2 request");
                assert_eq!(response.version(), http::Version::HTTP_2);
                let (parts, body) = response.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                (parts, body)
            }
        };
        let (parts, _) = send("PUT", "/h2/obj", Some("5")).await;
        assert_eq!(parts.status, 200);
        let (parts, body) = send("PUT", "/h2/obj", Some("4")).await;
        assert_eq!(parts.status, 409);
        assert_eq!(parts.headers["content-type"], "application/json");
        assert_eq!(parts.headers["x-fencing-highest"], "5");
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"], "stale_token");
        let (parts, _) = send("GET", "/h2/obj", None).await;
        assert_eq!(parts.status, 200);
    });
    let records = backend.records();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].version, "HTTP/1.1");
    assert_eq!(records[0].body_len, Some(2));
    // HTTP/2 has no Host: the backend gets the client's :authority.
    let authority = gw.data_addr().to_string();
    assert_eq!(records[0].header_all("host"), [authority.as_str()]);
    assert_eq!(records[1].method, "GET");
}

/// `curl --http2 http://...` (and other HTTP/1.1 clients that offer h2c)
/// send `Upgrade: h2c`. The upgrade offer is hop-by-hop and optional (RFC
/// 9110 §7.8: a server may ignore it); a reverse proxy ignores it and
/// answers in HTTP/1.1 rather than refusing the request.
#[test]
fn h2c_upgrade_offer_is_ignored_not_refused() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let request = "GET /up HTTP/1.1\r\nHost: x\r\n\
        Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
        HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n";
    let resp = send_raw(gw.data_addr(), request.as_bytes(), false);
    assert_eq!(
        resp.status,
        200,
        "an h2c upgrade offer was refused: {}",
        resp.text()
    );
    let record = &backend.records()[0];
    assert!(record.header("upgrade").is_none());
    assert!(record.header("http2-settings").is_none());
}

/// A real protocol switch (WebSocket) is not proxied: 501
/// `upgrade_not_supported`, whatever the field name's case, and nothing
/// reaches the backend (the misreading pass says whether `Upgrade` came;
/// the proxy reads its value).
#[test]
fn a_websocket_upgrade_is_refused_in_any_case_and_never_forwarded() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    for name in ["Upgrade", "UPGRADE", "upgrade"] {
        let request = format!(
            "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: {name}\r\n{name}: h2c, websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        );
        let resp = send_raw(gw.data_addr(), request.as_bytes(), false);
        assert_eq!(resp.status, 501, "{name}: {}", resp.text());
        assert!(
            resp.text().contains("upgrade_not_supported"),
            "{}",
            resp.text()
        );
    }
    assert!(
        backend.records().is_empty(),
        "an upgrade reached the backend"
    );
}

#[test]
fn expect_100_continue_is_honoured() {
    use std::io::{BufRead, BufReader, Write};
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let mut stream = std::net::TcpStream::connect(gw.data_addr()).unwrap();
    stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
    stream
        .write_all(
            b"PUT /expect HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 5\r\nContent-Length: 5\r\n\
              Expect: 100-continue\r\n\r\n",
        )
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 100"), "{line:?}");
    reader.read_line(&mut line).unwrap();
    stream.write_all(b"hello").unwrap();
    let resp = support::read_response(&mut reader, false).unwrap();
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(backend.records()[0].body_len, Some(5));

    // A stale request is refused at once: no 100 Continue, no body read.
    let mut stream = std::net::TcpStream::connect(gw.data_addr()).unwrap();
    stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
    stream
        .write_all(
            b"PUT /expect HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 4\r\nContent-Length: 5\r\n\
              Expect: 100-continue\r\n\r\n",
        )
        .unwrap();
    let resp = support::read_response(&mut BufReader::new(stream), false).unwrap();
    resp.assert_gateway_error(409, "stale_token");
    assert_eq!(backend.count(), 1);
}

#[test]
fn upstream_timeout_bounds_each_pause_of_a_response_body_not_the_whole() {
    // The backend sends its headers and half the body at once, the rest
    // after 1.5 s. With --upstream-timeout 3 that pause is allowed: the body
    // is relayed whole, however long the whole takes.
    let backend = Backend::start();
    let slow_body = [
        ("X-Test-Response-Bytes", "200000"),
        ("X-Test-Body-Delay-Ms", "1500"),
    ];
    let gw = GatewayProcess::in_front_of(&backend, &["--upstream-timeout", "3"]);
    let resp = gw.req("GET", "/slow-body", &slow_body, b"");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body.len(), 200_000);

    // With --upstream-timeout 0.5 the same pause cuts the relayed response
    // (its headers are already out: the connection is closed short), and the
    // next request is served normally.
    let gw = GatewayProcess::in_front_of(&backend, &["--upstream-timeout", "0.5"]);
    let cut = try_http(gw.data_addr(), "GET", "/slow-body", &slow_body, b"");
    assert!(
        cut.is_err(),
        "a response body that paused past the timeout was relayed whole"
    );
    let resp = gw.req("GET", "/after", &[], b"");
    assert_eq!(resp.status, 200, "{}", resp.text());
}

/// Request trailers are part of the message, not hop-by-hop (RFC 9110
/// §7.6.1 lists Connection, Proxy-Connection, Keep-Alive, TE,
/// Transfer-Encoding and Upgrade; `Trailer` is not among them): a chunked
/// upload's trailer fields reach the backend.
#[test]
fn request_trailers_are_forwarded() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let request = "PUT /trailers HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 1\r\n\
        Transfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n\
        5\r\nhello\r\n0\r\nX-Checksum: abc123\r\n\r\n";
    // Control: sent straight to the backend, the trailer is received.
    let direct = send_raw(backend.addr(), request.as_bytes(), false);
    assert_eq!(direct.status, 200);
    assert_eq!(
        backend.records()[0].trailers,
        [("x-checksum".to_string(), "abc123".to_string())]
    );
    let resp = send_raw(gw.data_addr(), request.as_bytes(), false);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let record = &backend.records()[1];
    assert_eq!(record.body_len, Some(5));
    assert_eq!(
        record.trailers,
        [("x-checksum".to_string(), "abc123".to_string())],
        "trailers lost on the way (headers seen: {:?})",
        record.headers
    );
}

#[test]
fn over_http2_a_backend_answers_fields_arrive_without_its_hop_by_hop_ones() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            "--http2-prior-knowledge",
            "-D",
            "-",
            "-o",
            "/dev/null",
        ])
        .args([
            "-X",
            "PUT",
            "-H",
            "X-Fencing-Token: 1",
            "-H",
            "X-Test-Status: 201",
        ])
        .args(["-H", "X-Test-Response-Header: Connection: x-hop"])
        .args(["-H", "X-Test-Response-Header: X-Hop: 1"])
        .args(["-H", "X-Test-Response-Header: Keep-Alive: timeout=5"])
        .args(["-H", "X-Test-Response-Header: X-Keep: yes"])
        .args(["-H", "X-Test-Response-Header: ETag: \"abc\""])
        .arg(format!("{}/resp-h2", gw.data_url()))
        .output()
        .expect("curl (scripts/install-deps.sh installs it)");
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(head.starts_with("http/2 201"), "{head}");
    assert!(head.contains("\r\nx-keep: yes\r\n"), "{head}");
    assert!(head.contains("\r\netag: \"abc\"\r\n"), "{head}");
    for name in ["x-hop", "keep-alive", "connection"] {
        assert!(
            !head.contains(&format!("\r\n{name}:")),
            "{name} relayed: {head}"
        );
    }
}
