//! Every row of the README's table of answers, through the real binary, plus the
//! order of checks. Each gateway-made answer must be JSON with an `error`
//! field, and a refused request must never reach the backend.

#[path = "../support/mod.rs"]
mod support;

use support::{dead_port, send_raw, Backend, GatewayProcess, HANG_GUARD};

/// `raw` must be a complete request to the data plane; returns the answer.
fn raw(gw: &GatewayProcess, request: &str) -> support::Resp {
    send_raw(gw.data_addr(), request.as_bytes(), false)
}

#[test]
fn invalid_token_malformed_values_are_400_and_never_forwarded() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let bad: &[&[u8]] = &[
        b"",
        b"   ",
        b"abc",
        b"+1",
        b"-1",
        b"0x10",
        b"1f",
        b"1.5",
        b"1e3",
        b"1,2",
        b"1 2",
        b"18446744073709551616",
        b"99999999999999999999",
        b"123456789012345678901",
        b"000000000000000000001", // 21 digits, even if the value fits
        b"\xff",
        "\u{0663}".as_bytes(), // ARABIC-INDIC DIGIT THREE
        "\u{FF13}".as_bytes(), // FULLWIDTH DIGIT THREE
    ];
    for (i, value) in bad.iter().enumerate() {
        for method in ["PUT", "GET"] {
            let mut request =
                format!("{method} /bucket/obj{i} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nX-Fencing-Token: ")
                    .into_bytes();
            request.extend_from_slice(value);
            request.extend_from_slice(b"\r\n\r\n");
            let resp = send_raw(gw.data_addr(), &request, false);
            let json = resp.assert_gateway_error(400, "invalid_token");
            assert!(
                json["detail"].is_string(),
                "{method} {:?}: {json}",
                String::from_utf8_lossy(value)
            );
        }
    }
    assert_eq!(backend.count(), 0, "{:#?}", backend.records());
}

#[test]
fn valid_token_spellings_are_accepted() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    // Surrounding spaces and tabs are trimmed; leading zeros spell the same number.
    for (i, value) in [" 7 ", "\t8\t", "009", "18446744073709551615", "0"]
        .iter()
        .enumerate()
    {
        let request = format!(
            "PUT /ok/{i} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nX-Fencing-Token: {value}\r\n\r\n"
        );
        let resp = raw(&gw, &request);
        assert_eq!(resp.status, 200, "{value:?}: {}", resp.text());
    }
    assert_eq!(gw.fence("/ok/2"), Some(9));
    assert_eq!(gw.fence("/ok/3"), Some(u64::MAX));
    // Zero is a token like any other.
    assert_eq!(gw.fence("/ok/4"), Some(0));
    assert_eq!(gw.put("/ok/4", 0).status, 200);
    assert_eq!(backend.count(), 6);
}

#[test]
fn invalid_token_repeated_header_is_400() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    for method in ["PUT", "GET"] {
        for (a, b) in [("5", "5"), ("5", "6")] {
            let resp = raw(
                &gw,
                &format!(
                    "{method} /bucket/obj HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\
                     X-Fencing-Token: {a}\r\nx-fencing-token: {b}\r\n\r\n"
                ),
            );
            resp.assert_gateway_error(400, "invalid_token");
        }
    }
    assert_eq!(backend.count(), 0);
    assert_eq!(
        gw.fence("/bucket/obj"),
        None,
        "a refused token raised the fence"
    );
}

#[test]
fn header_scope_lock_missing_repeated_or_bad_is_invalid_token() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--scope", "header"]);
    let long = "L".repeat(257);
    let cases: Vec<String> = vec![
        String::new(),                                       // missing
        "X-Fencing-Lock: a\r\nX-Fencing-Lock: a\r\n".into(), // repeated
        "X-Fencing-Lock: \r\n".into(),                       // empty
        format!("X-Fencing-Lock: {long}\r\n"),               // too long
        "X-Fencing-Lock: caf\u{e9}\r\n".into(),              // not ASCII
    ];
    for lock in &cases {
        for method in ["PUT", "GET"] {
            let resp = raw(
                &gw,
                &format!(
                    "{method} /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nX-Fencing-Token: 5\r\n{lock}\r\n"
                ),
            );
            let json = resp.assert_gateway_error(400, "invalid_token");
            assert!(json["detail"].is_string(), "{json}");
        }
    }
    assert_eq!(backend.count(), 0);
    // 256 printable characters are fine.
    let ok = "L".repeat(256);
    let resp = gw.req(
        "PUT",
        "/x",
        &[("X-Fencing-Token", "5"), ("X-Fencing-Lock", &ok)],
        b"",
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
}

#[test]
fn invalid_path_is_400_and_never_forwarded() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    for path in [
        "/..",
        "/a/../../x",
        "/%2e%2e/x",
        "/a/%2E%2E/%2e%2e/b",
        "/a%2f..%2f..%2fb",
        "/%ff",
        "/a/%c3",
        "/%ed%a0%80",
    ] {
        for (method, token) in [("PUT", Some("5")), ("GET", Some("5")), ("DELETE", None)] {
            let mut headers = vec![];
            if let Some(token) = token {
                headers.push(("X-Fencing-Token", token));
            }
            let resp = gw.req(method, path, &headers, b"");
            let json = resp.assert_gateway_error(400, "invalid_path");
            assert!(json["detail"].is_string(), "{method} {path}: {json}");
        }
    }
    assert_eq!(backend.count(), 0, "{:#?}", backend.records());
}

#[test]
fn stale_token_is_409_with_resource_token_highest_reason_and_header() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    assert_eq!(gw.put("/bucket/obj", 34).status, 200);
    let resp = gw.put("/bucket/obj", 33);
    let json = resp.assert_gateway_error(409, "stale_token");
    assert_eq!(json["resource"], "/bucket/obj", "{json}");
    assert_eq!(json["token"], 33, "{json}");
    assert_eq!(json["highest"], 34, "{json}");
    assert!(
        json["token"].is_u64() && json["highest"].is_u64(),
        "numbers: {json}"
    );
    assert_eq!(json["reason"], "below_highest", "{json}");
    assert_eq!(resp.header("x-fencing-highest"), Some("34"));
    // The same token again is admitted (equal is not stale).
    assert_eq!(gw.put("/bucket/obj", 34).status, 200);
    let tokens: Vec<_> = backend.records().iter().map(|r| r.token_u64()).collect();
    assert_eq!(
        tokens,
        [Some(34), Some(34)],
        "the stale write reached the backend"
    );
    // u64::MAX fences everything below it.
    assert_eq!(gw.put("/max", u64::MAX).status, 200);
    let json = gw
        .put("/max", u64::MAX - 1)
        .assert_gateway_error(409, "stale_token");
    assert_eq!(json["highest"].as_u64(), Some(u64::MAX), "{json}");
}

#[test]
fn missing_token_on_every_write_method_is_428_with_resource() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--store", "webdav"]);
    for method in [
        "PUT",
        "POST",
        "DELETE",
        "MKCOL",
        "COPY",
        "MOVE",
        "PROPPATCH",
        "LOCK",
    ] {
        let resp = gw.req(method, "//bucket/./obj/", &[], b"x");
        let json = resp.assert_gateway_error(428, "missing_token");
        assert_eq!(json["resource"], "/bucket/obj", "{method}: {json}");
    }
    // A write no row of the store's table takes is refused before the
    // token is looked for (docs/WEBDAV_OPERATIONS.md).
    gw.req("PATCH", "/bucket/obj", &[], b"x")
        .assert_gateway_error(400, "unfenceable_write");
    // A method no dialect lists is refused before anything else reads it.
    gw.req("FROBNICATE", "//bucket/./obj/", &[], b"x")
        .assert_gateway_error(501, "unknown_method");
    assert_eq!(backend.count(), 0, "{:#?}", backend.records());
    // Safe methods without a token go through untouched.
    for method in ["GET", "HEAD", "OPTIONS", "PROPFIND"] {
        let resp = gw.req(method, "/bucket/obj", &[], b"");
        assert_eq!(resp.status, 200, "{method}: {}", resp.text());
    }
    // TRACE is never forwarded (a store would echo what it received).
    gw.req("TRACE", "/bucket/obj", &[], b"")
        .assert_gateway_error(405, "method_not_allowed");
    let methods: Vec<_> = backend.records().into_iter().map(|r| r.method).collect();
    assert_eq!(methods, ["GET", "HEAD", "OPTIONS", "PROPFIND"]);
    assert_eq!(
        gw.fence("/bucket/obj"),
        None,
        "an unfenced read made a fence"
    );
}

/// Deny by default without custody (docs/WEBDAV_OPERATIONS.md): a write
/// no row of the store's table takes is refused 400 `unfenceable_write`,
/// naming what was not understood, before its token is read; reads go on;
/// `--allow-unfenced-writes` lets such writes through as before.
#[test]
fn a_write_no_row_of_the_stores_table_takes_is_400_and_never_forwarded() {
    let backend = Backend::start();
    let token = [("X-Fencing-Token", "7")];
    let refused = |gw: &GatewayProcess, method: &str, extra: &[(&str, &str)], names: &str| {
        let mut headers = token.to_vec();
        headers.extend_from_slice(extra);
        let resp = gw.req(method, "/store/obj", &headers, b"x");
        let json = resp.assert_gateway_error(400, "unfenceable_write");
        let detail = json["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(names), "{method} {extra:?}: {json}");
    };
    // The default store is plain HTTP: WebDAV's writes and fields are not
    // its operations.
    let http = GatewayProcess::in_front_of(&backend, &[]);
    refused(&http, "MKCOL", &[], "--store webdav");
    refused(
        &http,
        "MOVE",
        &[("Destination", "/store/other")],
        "--store webdav",
    );
    refused(&http, "LOCK", &[], "--store webdav");
    refused(&http, "PUT", &[("Depth", "infinity")], "depth");
    refused(&http, "DELETE", &[("If", "(<urn:x>)")], "if");
    // A WebDAV store: no PATCH, and no field a method does not read.
    let webdav = GatewayProcess::in_front_of(&backend, &["--store", "webdav"]);
    refused(&webdav, "PATCH", &[], "PATCH");
    refused(
        &webdav,
        "PUT",
        &[("Destination", "/store/other")],
        "destination",
    );
    refused(&webdav, "UNLOCK", &[("Depth", "0")], "depth");
    assert_eq!(backend.count(), 0, "{:#?}", backend.records());
    assert_eq!(http.fence("/store/obj"), None);
    assert_eq!(webdav.fence("/store/obj"), None);
    // Reads, and what a row takes, go on.
    assert_eq!(http.req("PROPFIND", "/store/obj", &[], b"").status, 200);
    assert_eq!(http.req("PATCH", "/store/obj", &token, b"x").status, 200);
    assert_eq!(
        webdav
            .req(
                "MOVE",
                "/store/obj",
                &[("X-Fencing-Token", "8"), ("Destination", "/store/b")],
                b""
            )
            .status,
        200
    );
    let methods: Vec<_> = backend.records().into_iter().map(|r| r.method).collect();
    assert_eq!(methods, ["PROPFIND", "PATCH", "MOVE"]);
    // --allow-unfenced-writes: the operator chose to forward what the
    // gateway cannot fence.
    let open = GatewayProcess::in_front_of(&backend, &["--allow-unfenced-writes"]);
    assert_eq!(open.req("MKCOL", "/store/col", &token, b"").status, 200);
}

#[test]
fn upstream_unavailable_is_502_and_keeps_the_fence() {
    let port = dead_port();
    let url = format!("http://127.0.0.1:{port}");
    let gw = GatewayProcess::start(&["--upstream", &url]);
    let json = gw
        .put("/k", 5)
        .assert_gateway_error(502, "upstream_unavailable");
    assert!(json["detail"].is_string(), "{json}");
    // An upstream failure does not roll a fence back.
    assert_eq!(gw.fence("/k"), Some(5));
    gw.put("/k", 4).assert_gateway_error(409, "stale_token");
    // Unfenced reads fail the same way.
    gw.req("GET", "/k", &[], b"")
        .assert_gateway_error(502, "upstream_unavailable");
}

#[test]
fn backend_reset_is_502() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let resp = gw.req(
        "PUT",
        "/reset",
        &[("X-Fencing-Token", "3"), ("X-Test-Abort", "1")],
        b"",
    );
    resp.assert_gateway_error(502, "upstream_unavailable");
    assert_eq!(gw.fence("/reset"), Some(3));
}

#[test]
fn upstream_timeout_is_504_and_keeps_the_fence() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--upstream-timeout", "0.5"]);
    let resp = gw.req(
        "PUT",
        "/slow",
        &[("X-Fencing-Token", "7"), ("X-Test-Hang", "1")],
        b"",
    );
    let json = resp.assert_gateway_error(504, "upstream_timeout");
    assert!(json["detail"].is_string(), "{json}");
    assert_eq!(backend.records_for("/slow").len(), 1, "forwarded once");
    assert_eq!(gw.fence("/slow"), Some(7));
    gw.put("/slow", 6).assert_gateway_error(409, "stale_token");
    // The timed-out request no longer counts as in flight: a higher token goes.
    assert_eq!(gw.put("/slow", 8).status, 200);
}

/// 503: the new highest cannot be made durable. Provoked black-box by
/// running the gateway under a file size limit (`prlimit --fsize`, with
/// SIGXFSZ ignored so that writes fail with EFBIG instead of killing the
/// process) and raising fences on ever new long keys until the store file
/// must grow past the limit.
#[test]
fn fence_store_unavailable_is_503_and_nothing_is_forwarded() {
    if std::process::Command::new("prlimit")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: prlimit(1) not available");
        return;
    }
    let backend = Backend::start();
    let url = backend.url();
    let gw = GatewayProcess::start_full(
        &[
            "sh",
            "-c",
            "trap '' XFSZ; exec prlimit --fsize=1100000:unlimited -- \"$0\" \"$@\"",
        ],
        &["--upstream", &url],
        &[],
    );
    let mut failed = None;
    for i in 0..5000 {
        let path = format!("/{i:01000}");
        let resp = gw.put(&path, 5);
        match resp.status {
            200 => continue,
            503 => {
                failed = Some((path, resp));
                break;
            }
            other => panic!("unexpected {other}: {}", resp.text()),
        }
    }
    let (path, resp) = failed.expect("the store never failed under a 1.1 MB file size limit");
    let json = resp.assert_gateway_error(503, "fence_store_unavailable");
    assert!(json["detail"].is_string(), "{json}");
    assert!(
        backend.records_for(&path).is_empty(),
        "a request whose fence was not made durable reached the backend"
    );
    // Not ready while its store cannot be written.
    let ready = gw.admin_get("/readyz");
    assert_eq!(ready.status, 503, "{}", ready.text());
    let json = ready.json();
    assert_eq!(json["status"], "not_ready", "{json}");
    assert!(
        json["detail"].as_str().unwrap().contains("fence store"),
        "{json}"
    );
    // Another new fence while the disk is still "full": refused and not
    // forwarded (unless it happens to fit in free pages of the file).
    let resp = gw.put("/another", 1);
    if resp.status == 503 {
        resp.assert_gateway_error(503, "fence_store_unavailable");
        assert!(backend.records_for("/another").is_empty());
    } else {
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    // The gateway is still up and answering.
    assert_eq!(gw.admin_get("/healthz").status, 200);

    // Space comes back (the soft limit is lifted): new raises succeed again
    // without a restart, and the refused request can be retried.
    let lifted = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &gw.pid().to_string(),
            "--fsize=unlimited:unlimited",
        ])
        .status()
        .unwrap();
    assert!(lifted.success(), "prlimit --pid failed");
    assert_eq!(gw.put("/recovered", 1).status, 200);
    assert_eq!(gw.admin_get("/readyz").status, 200);
    let resp = gw.put(&path, 5);
    assert_eq!(resp.status, 200, "retry after recovery: {}", resp.text());
    assert_eq!(backend.records_for(&path).len(), 1);
    assert_eq!(gw.fence("/recovered"), Some(1));
}

// ---------------------------------------------------------------------------
// Order of checks: token syntax and lock header, then the path, then a write
// without a token, then admission.
// ---------------------------------------------------------------------------

#[test]
fn order_invalid_token_before_invalid_path() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    gw.req("PUT", "/a/../../x", &[("X-Fencing-Token", "abc")], b"")
        .assert_gateway_error(400, "invalid_token");
    let resp = raw(
        &gw,
        "PUT /%ff HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nX-Fencing-Token: 1\r\nX-Fencing-Token: 2\r\n\r\n",
    );
    resp.assert_gateway_error(400, "invalid_token");
    assert_eq!(backend.count(), 0);
}

#[test]
fn order_lock_header_before_invalid_path() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--scope", "header"]);
    gw.req("PUT", "/a/../../x", &[("X-Fencing-Token", "1")], b"")
        .assert_gateway_error(400, "invalid_token");
    assert_eq!(backend.count(), 0);
}

#[test]
fn order_invalid_path_before_missing_token() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    for path in ["/a/../../x", "/%ff"] {
        gw.req("PUT", path, &[], b"")
            .assert_gateway_error(400, "invalid_path");
        gw.req("DELETE", path, &[], b"")
            .assert_gateway_error(400, "invalid_path");
    }
    assert_eq!(backend.count(), 0);
}

#[test]
fn order_invalid_token_and_path_before_admission() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    assert_eq!(gw.put("/k", 10).status, 200);
    // A malformed token on a fenced key is 400, not 409.
    gw.req("PUT", "/k", &[("X-Fencing-Token", "9x")], b"")
        .assert_gateway_error(400, "invalid_token");
    // A stale token on a bad alias of the key is 400 invalid_path, not 409.
    gw.req("PUT", "/k/../../k", &[("X-Fencing-Token", "9")], b"")
        .assert_gateway_error(400, "invalid_path");
    // A write without a token on a fenced key is 428, not 409.
    let json = gw
        .req("PUT", "/k", &[], b"")
        .assert_gateway_error(428, "missing_token");
    assert_eq!(json["resource"], "/k");
    assert_eq!(backend.count(), 1);
}

#[test]
fn refusals_do_not_wait_for_slow_requests() {
    // A stale or malformed request is answered while a request on the same
    // key is held at the backend (it never queues behind it).
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let data = gw.data_addr();
    let held = std::thread::spawn(move || {
        support::http(
            data,
            "PUT",
            "/busy",
            &[("X-Fencing-Token", "20"), ("X-Test-Hold", "busy")],
            b"",
        )
    });
    assert!(backend.wait_for(HANG_GUARD, |r| r.len() == 1));
    gw.put("/busy", 19).assert_gateway_error(409, "stale_token");
    gw.req("PUT", "/busy", &[], b"")
        .assert_gateway_error(428, "missing_token");
    backend.release("busy");
    assert_eq!(held.join().unwrap().status, 200);
    assert_eq!(backend.count(), 1);
}

#[test]
fn refused_request_body_is_never_taken_for_a_request() {
    // A stale request whose body is itself a valid request, pipelined with a
    // second request on the same connection: the body must not be parsed as
    // a request (token 99 must never reach the backend), whether the gateway
    // skips the unread body or closes the connection.
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    assert_eq!(gw.put("/k", 34).status, 200);
    let inner = "PUT /k HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 99\r\nContent-Length: 0\r\n\r\n";
    let pipelined = format!(
        "PUT /k HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 33\r\nContent-Length: {}\r\n\r\n{inner}\
         GET /after HTTP/1.1\r\nHost: x\r\n\r\n",
        inner.len()
    );
    let mut stream = std::net::TcpStream::connect(gw.data_addr()).unwrap();
    stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
    std::io::Write::write_all(&mut stream, pipelined.as_bytes()).unwrap();
    let mut reader = std::io::BufReader::new(stream);
    let first = support::read_response(&mut reader, false).unwrap();
    first.assert_gateway_error(409, "stale_token");
    match support::read_response(&mut reader, false) {
        Ok(second) => {
            assert_eq!(second.status, 200, "{}", second.text());
            assert_eq!(second.json()["target"], "/after");
        }
        Err(e) => eprintln!("second response: connection closed ({e})"),
    }
    assert!(
        backend
            .records()
            .iter()
            .all(|r| r.token.as_deref() != Some("99")),
        "the refused body was taken for a request: {:#?}",
        backend.records()
    );
    assert_eq!(gw.fence("/k"), Some(34));
}
