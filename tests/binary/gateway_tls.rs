//! TLS on both sides, black-box: an `https://` backend with a certificate
//! from a test CA (trusted, from another CA, for another host name), TLS
//! clients over HTTP/1.1 and HTTP/2 (curl and rustls), certificate reload on
//! `SIGHUP`, and bad certificate files at start.

#[path = "../support/mod.rs"]
mod support;

use support::tls::{curl, tls_request, TestCa};
use support::{build_request, run_on_free_ports, run_to_exit, Backend, GatewayProcess, HANG_GUARD};

/// The gateway in front of `backend` over TLS, trusting `ca`.
fn gateway_to_https(backend: &Backend, ca: &TestCa, extra: &[&str]) -> GatewayProcess {
    let url = backend.https_url("localhost");
    let ca = ca.cert_path().display().to_string();
    let mut args = vec!["--upstream", url.as_str(), "--upstream-ca", ca.as_str()];
    args.extend_from_slice(extra);
    GatewayProcess::start(&args)
}

#[test]
fn https_backend_with_a_trusted_certificate() {
    let ca = TestCa::new("backend");
    let backend = Backend::start_tls(&ca.issue("backend", &["localhost"]));
    let gw = gateway_to_https(&backend, &ca, &[]);

    let resp = gw.req("PUT", "/b/report", &[("X-Fencing-Token", "34")], b"v2");
    assert_eq!(resp.status, 200, "{}", resp.text());
    // The client's Host goes through unchanged (signatures cover it); SNI
    // and verification used the upstream's host name.
    let record = &backend.records_for("/b/report")[0];
    assert_eq!(
        record.header("host"),
        Some(gw.data_addr().to_string().as_str())
    );
    assert_eq!(record.header("x-forwarded-proto"), Some("http"));
    assert_eq!(record.body_len, Some(2));

    gw.req("PUT", "/b/report", &[("X-Fencing-Token", "33")], b"v1")
        .assert_gateway_error(409, "stale_token");
    assert_eq!(
        backend.records_for("/b/report").len(),
        1,
        "the stale write reached the backend"
    );
    // More requests reuse pooled TLS connections and still succeed.
    for i in 0..5 {
        let resp = gw.req("GET", &format!("/b/read{i}"), &[], b"");
        assert_eq!(resp.status, 200);
    }
}

#[test]
fn https_backend_signed_by_an_untrusted_ca_is_502_with_the_cause() {
    let backend_ca = TestCa::new("backend");
    let other_ca = TestCa::new("other");
    let backend = Backend::start_tls(&backend_ca.issue("backend", &["localhost"]));
    let gw = gateway_to_https(&backend, &other_ca, &[]);

    let resp = gw.req("PUT", "/x", &[("X-Fencing-Token", "1")], b"data");
    let json = resp.assert_gateway_error(502, "upstream_unavailable");
    let detail = json["detail"].as_str().unwrap();
    assert!(detail.contains("TLS handshake failed"), "{detail}");
    assert!(detail.contains("UnknownIssuer"), "{detail}");
    assert_eq!(
        backend.count(),
        0,
        "a request went to an unverified backend"
    );
    // The fence was raised before forwarding and stays raised.
    assert_eq!(gw.fence("/x"), Some(1));
}

#[test]
fn https_backend_with_a_certificate_for_another_host_is_502_with_the_cause() {
    let ca = TestCa::new("backend");
    let backend = Backend::start_tls(&ca.issue("backend", &["storage.example"]));
    let gw = gateway_to_https(&backend, &ca, &[]);

    let resp = gw.req("GET", "/x", &[], b"");
    let json = resp.assert_gateway_error(502, "upstream_unavailable");
    let detail = json["detail"].as_str().unwrap();
    assert!(detail.contains("not valid for name"), "{detail}");
    assert!(detail.contains("localhost"), "{detail}");
    assert_eq!(backend.count(), 0);
}

#[test]
fn https_upstream_ca_file_that_is_not_pem_is_a_start_error() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("ca.pem");
    std::fs::write(&bad, "not a certificate").unwrap();
    let dir = tmp.path().join("data").display().to_string();
    let bad = bad.display().to_string();
    let out = run_on_free_ports(&[
        "--data-dir",
        &dir,
        "--upstream",
        "https://localhost:1",
        "--upstream-ca",
        &bad,
    ]);
    assert!(!out.status.success());
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(lines[0].contains("ca.pem"), "{}", out.stderr);
}

/// The gateway serving TLS with a leaf for localhost and 127.0.0.1.
struct TlsGateway {
    ca: TestCa,
    /// The files the gateway serves (and re-reads on SIGHUP).
    leaf: support::tls::Leaf,
    backend: Backend,
    gw: GatewayProcess,
}

fn tls_gateway() -> TlsGateway {
    let ca = TestCa::new("gateway");
    let leaf = ca.issue("gateway", &["localhost", "127.0.0.1"]);
    let backend = Backend::start();
    let url = backend.url();
    let cert = leaf.cert.display().to_string();
    let key = leaf.key.display().to_string();
    let gw = GatewayProcess::start(&["--upstream", &url, "--tls-cert", &cert, "--tls-key", &key]);
    TlsGateway {
        ca,
        leaf,
        backend,
        gw,
    }
}

#[test]
fn tls_clients_over_http1_and_http2_on_both_planes() {
    let t = tls_gateway();
    let data = format!("https://localhost:{}", t.gw.data_addr().port());
    let admin = format!("https://localhost:{}", t.gw.admin_addr().port());

    let token = ["-X", "PUT", "-H", "X-Fencing-Token: 7", "--data", "v"];
    assert_eq!(
        curl(&t.ca, "--http1.1", &token, &format!("{data}/h1")),
        ("200".into(), "1.1".into())
    );
    assert_eq!(
        curl(&t.ca, "--http2", &token, &format!("{data}/h2")),
        ("200".into(), "2".into())
    );
    let stale = ["-X", "PUT", "-H", "X-Fencing-Token: 6", "--data", "v"];
    assert_eq!(
        curl(&t.ca, "--http2", &stale, &format!("{data}/h2")).0,
        "409"
    );
    for path in ["/h1", "/h2"] {
        let records = t.backend.records_for(path);
        assert_eq!(records.len(), 1, "{path}");
        assert_eq!(
            records[0].header("x-forwarded-proto"),
            Some("https"),
            "{path}"
        );
    }
    // The admin plane speaks TLS too.
    assert_eq!(
        curl(&t.ca, "--http2", &[], &format!("{admin}/healthz")).0,
        "200"
    );
    assert_eq!(
        curl(&t.ca, "--http1.1", &[], &format!("{admin}/fences/%2Fh2")).0,
        "200"
    );

    // ALPN offers h2 and http/1.1; plain HTTP on the TLS port gets nothing.
    let raw = build_request(t.gw.data_addr(), "GET", "/x", &[], b"");
    let h1 = tls_request(t.gw.data_addr(), &t.ca, "127.0.0.1", &[b"http/1.1"], &raw).unwrap();
    assert_eq!(h1.alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert_eq!(h1.response.status, 200);
    assert!(support::try_send_raw(t.gw.data_addr(), &raw, false).is_err());
}

#[test]
fn sighup_reloads_the_certificate_and_keeps_the_old_one_when_the_new_is_bad() {
    let t = tls_gateway();
    let addr = t.gw.data_addr();
    let raw = build_request(addr, "GET", "/x", &[], b"");
    let first = tls_request(addr, &t.ca, "localhost", &[], &raw).unwrap();

    // A renewed certificate replaces the files; SIGHUP; new connections get it.
    let renewed = t.ca.issue("renewed", &["localhost", "127.0.0.1"]);
    let served_files = &t.leaf;
    std::fs::copy(&renewed.cert, &served_files.cert).unwrap();
    std::fs::copy(&renewed.key, &served_files.key).unwrap();
    assert_ne!(first.served, renewed.der);
    t.gw.sighup();
    assert!(
        t.gw.wait_stderr("TLS certificates reloaded", HANG_GUARD),
        "{}",
        t.gw.stderr()
    );
    let after = tls_request(addr, &t.ca, "localhost", &[], &raw).unwrap();
    assert_eq!(
        after.served, renewed.der,
        "a new connection still got the old certificate"
    );
    assert_eq!(after.response.status, 200);

    // Garbage in the certificate file: one error line, the renewed one stays.
    std::fs::write(&served_files.cert, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    t.gw.sighup();
    assert!(
        t.gw.wait_stderr("cannot reload the TLS certificate", HANG_GUARD),
        "{}",
        t.gw.stderr()
    );
    let kept = tls_request(addr, &t.ca, "localhost", &[], &raw).unwrap();
    assert_eq!(kept.served, renewed.der);
    assert_eq!(kept.response.status, 200);
    // And a key that belongs to another certificate is refused the same way.
    let stranger = t.ca.issue("stranger", &["localhost"]);
    std::fs::copy(&renewed.cert, &served_files.cert).unwrap();
    std::fs::copy(&stranger.key, &served_files.key).unwrap();
    t.gw.sighup();
    assert!(wait_count(&t.gw, "cannot reload the TLS certificate", 2));
    let kept = tls_request(addr, &t.ca, "localhost", &[], &raw).unwrap();
    assert_eq!(kept.served, renewed.der);
}

fn wait_count(gw: &GatewayProcess, needle: &str, count: usize) -> bool {
    support::wait_until(HANG_GUARD, || gw.stderr().matches(needle).count() >= count)
}

#[test]
fn bad_certificate_files_are_one_line_start_errors() {
    let ca = TestCa::new("gateway");
    let leaf = ca.issue("gateway", &["localhost"]);
    let other = ca.issue("other", &["localhost"]);
    let missing = ca.dir().join("missing.pem");
    let garbage = ca.dir().join("garbage.pem");
    std::fs::write(&garbage, "hello").unwrap();
    let dir = ca.dir().join("data").display().to_string();
    for (cert, key, expect) in [
        (&leaf.cert, &other.key, "gateway.pem"),
        (&missing, &leaf.key, "missing.pem"),
        (&garbage, &leaf.key, "garbage.pem"),
        (&leaf.cert, &garbage, "garbage.pem"),
    ] {
        let (cert, key) = (cert.display().to_string(), key.display().to_string());
        let out = run_on_free_ports(&["--data-dir", &dir, "--tls-cert", &cert, "--tls-key", &key]);
        assert!(!out.status.success(), "{cert:?} {key:?} started");
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{}", out.stderr);
        assert!(lines[0].contains(expect), "{}", out.stderr);
        assert!(!lines[0].contains("panicked"), "{}", out.stderr);
    }
    // One of the pair alone is a usage error.
    let out = run_to_exit(&["--tls-cert", &leaf.cert.display().to_string()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
}
