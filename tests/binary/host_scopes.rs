//! `--scope host+path` and `host+prefix:N` on the real binary: stores that
//! name a bucket or tenant in the host (S3's virtual-hosted style,
//! per-tenant host names) get a fence per host. Two buckets with the same
//! key fence independently; case, a trailing dot and the default ports fold;
//! the target's authority (absolute form, HTTP/2's `:authority`) and `Host`
//! name the same fence; a fenced request without a valid host is 400
//! `invalid_path` and never forwarded; the admin plane takes the keys.

#[path = "../support/mod.rs"]
mod support;

use support::tls::TestCa;
use support::*;

fn put_to(gw: &GatewayProcess, host: &str, target: &str, token: u64) -> Resp {
    gw.req(
        "PUT",
        target,
        &[("Host", host), ("X-Fencing-Token", &token.to_string())],
        b"data",
    )
}

#[test]
fn two_buckets_with_one_key_fence_independently_and_host_spellings_fold() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--scope", "host+path"]);

    assert_eq!(put_to(&gw, "a.s3.example", "/report.csv", 34).status, 200);
    // The same key in another bucket: a fence of its own.
    assert_eq!(put_to(&gw, "b.s3.example", "/report.csv", 5).status, 200);
    assert_eq!(gw.fence("a.s3.example/report.csv"), Some(34));
    assert_eq!(gw.fence("b.s3.example/report.csv"), Some(5));
    assert_eq!(gw.fence("/report.csv"), None);

    // Every spelling of bucket a's host is bucket a.
    for host in [
        "A.S3.Example",
        "a.s3.example.",
        "a.s3.example:80",
        "a.s3.example:443",
    ] {
        let stale = put_to(&gw, host, "/report.csv", 33);
        let err = stale.assert_gateway_error(409, "stale_token");
        assert_eq!(err["resource"], "a.s3.example/report.csv", "{host}");
    }
    // Another port is another server.
    assert_eq!(
        put_to(&gw, "a.s3.example:9000", "/report.csv", 1).status,
        200
    );
    assert_eq!(gw.fence("a.s3.example:9000/report.csv"), Some(1));

    // The absolute form's authority is the host, as a proxy client sends it.
    let raw = b"PUT http://A.s3.example/report.csv HTTP/1.1\r\nHost: a.s3.example\r\n\
X-Fencing-Token: 33\r\nContent-Length: 4\r\n\r\ndata";
    send_raw(gw.data_addr(), raw, false).assert_gateway_error(409, "stale_token");

    // No host (an HTTP/1.0 request), or one that is not a host: 400,
    // never forwarded. (An HTTP/1.1 request without Host is refused before
    // any fencing: tests/binary/framing.rs.)
    let raw = b"PUT /report.csv HTTP/1.0\r\nX-Fencing-Token: 40\r\nContent-Length: 4\r\n\r\ndata";
    send_raw(gw.data_addr(), raw, false).assert_gateway_error(400, "invalid_path");
    put_to(&gw, "a b", "/report.csv", 40).assert_gateway_error(400, "invalid_path");
    assert_eq!(backend.count(), 3);

    // Unfenced reads never need a host.
    let raw = b"GET /report.csv HTTP/1.0\r\n\r\n";
    assert_eq!(send_raw(gw.data_addr(), raw, false).status, 200);
}

/// The problem the host scopes solve: in `path` scope the same key of two
/// buckets is one fence, and bucket B's holder, whose lock hands out lower
/// tokens, is refused as stale because of bucket A's.
#[test]
fn in_path_scope_two_buckets_share_a_fence() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--scope", "path"]);
    assert_eq!(put_to(&gw, "a.s3.example", "/report.csv", 34).status, 200);
    put_to(&gw, "b.s3.example", "/report.csv", 5).assert_gateway_error(409, "stale_token");
    assert_eq!(backend.count(), 1);
}

#[test]
fn host_prefix_fences_one_bucket_per_host_and_first_segments() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--scope", "host+prefix:1"]);
    assert_eq!(put_to(&gw, "tenant-a", "/reports/q3.csv", 7).status, 200);
    put_to(&gw, "tenant-a", "/reports/q4.csv", 6).assert_gateway_error(409, "stale_token");
    assert_eq!(put_to(&gw, "tenant-b", "/reports/q4.csv", 6).status, 200);
    assert_eq!(gw.fence("tenant-a/reports"), Some(7));
    assert_eq!(gw.fence("tenant-b/reports"), Some(6));
}

#[test]
fn admin_writes_take_host_keys_and_refuse_what_no_request_maps_to() {
    let backend = Backend::start();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let gw = GatewayProcess::in_front_of(
        &backend,
        &[
            "--scope",
            "host+path",
            "--admin-token-file",
            token_file.to_str().unwrap(),
        ],
    );
    let admin = |method: &str, key: &str, body: &str| {
        http(
            gw.admin_addr(),
            method,
            &format!("/fences/{key}"),
            &[
                ("Authorization", "Bearer s3cret"),
                ("Content-Type", "application/json"),
            ],
            body.as_bytes(),
        )
    };
    let raised = admin(
        "PUT",
        "a.s3.example%2Freport.csv",
        r#"{"highest": 50, "reason": "seal"}"#,
    );
    assert_eq!(raised.status, 200, "{}", raised.text());
    put_to(&gw, "A.S3.EXAMPLE", "/report.csv", 49).assert_gateway_error(409, "stale_token");
    // A path key, or a host as no request would send it: no request maps
    // to it, refused.
    for key in [
        "%2Freport.csv",
        "A.s3.example%2Freport.csv",
        "a.s3.example%3A80%2Fx",
    ] {
        let refused = admin("PUT", key, r#"{"highest": 1, "reason": "x"}"#);
        assert_eq!(refused.status, 400, "{key}: {}", refused.text());
    }
}

#[test]
fn http2_authority_and_http1_host_name_the_same_fence() {
    let ca = TestCa::new("host-scopes");
    let leaf = ca.issue("gateway", &["a.s3.test", "localhost"]);
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(
        &backend,
        &[
            "--scope",
            "host+path",
            "--tls-cert",
            leaf.cert.to_str().unwrap(),
            "--tls-key",
            leaf.key.to_str().unwrap(),
        ],
    );
    let port = gw.data_addr().port();
    let resolve = format!("a.s3.test:{port}:127.0.0.1");
    let url = format!("https://A.S3.test:{port}/report.csv");
    let curl = |version: &str, token: u64| -> String {
        let token = format!("X-Fencing-Token: {token}");
        let args = [
            "--resolve",
            &resolve,
            "-X",
            "PUT",
            "--data",
            "x",
            "-H",
            &token,
        ];
        let (status, version) = support::tls::curl(&ca, version, &args, &url);
        format!("{status} {version}")
    };
    // Written over HTTP/2 (`:authority`), refused as stale over HTTP/1.1
    // (`Host`) and over HTTP/2 alike: one fence.
    assert_eq!(curl("--http2", 20), "200 2");
    assert_eq!(curl("--http1.1", 19), "409 1.1");
    assert_eq!(curl("--http2", 19), "409 2");
    assert_eq!(backend.count(), 1);
}
