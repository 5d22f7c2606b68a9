//! Requests a store reads as another operation than the gateway would
//! (SPEC "Deny by default", rules in every mode), against the stores that
//! do read them so, with custody and without:
//!
//! - **a read becomes a delete** (issue class 1): Azurite runs a `GET`
//!   with `X-HTTP-Method: DELETE` as a Delete Blob. Without custody a stale
//!   holder deleted a fenced blob that way (a `GET` carries no token
//!   check); under custody a read-only identity did. Refused 400
//!   `method_override`, in every spelling of header and parameter.
//! - **the store's password, echoed** (class 2): Apache answers `TRACE`
//!   with the request it received, the gateway's `Authorization` in it.
//!   Refused 405, never forwarded; `CONNECT` too.
//! - **the asterisk form** (routes issue, class 3): `DELETE *` was fenced
//!   on a key of its own and forwarded as the upstream's base path, so a
//!   stale token deleted the whole collection. Refused 400 but for
//!   `OPTIONS`.
//!
//! Each attack is first shown to work at the store directly, so that the
//! test would fail if the gateway forwarded it.

#[path = "../support/mod.rs"]
mod support;

use std::time::SystemTime;

use fencegate::dialect::shared_key::Scheme;
use support::apache::Apache;
use support::apache_basic::ApacheBasic;
use support::azurite::{
    azure_custody_gateway, azurite, azurite_for_custody, shared_key_headers, AzureIdentity,
    AUDITOR, BILLING, OPS, STORE_ACCOUNT, STORE_KEY,
};
use support::*;

/// Azurite's development account, which the plain (no custody) Azurite
/// knows: a client without custody signs with the store's key itself.
const DEV_ACCOUNT: &str = "devstoreaccount1";
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The token header of the Azure custody gateway (a header Shared Key signs).
const MS_TOKEN: &str = "x-ms-fencing-token";

/// The header and parameter spellings of a method override the gateway
/// must refuse (SPEC: `X-HTTP-Method`, `X-HTTP-Method-Override`,
/// `X-Method-Override`, `_method`, `x-http-method`), with a few spellings a
/// store's parser reads the same (case, percent-encoding).
const OVERRIDE_HEADERS: [&str; 4] = [
    "X-HTTP-Method",
    "x-http-method",
    "X-HTTP-Method-Override",
    "X-Method-Override",
];
const OVERRIDE_QUERIES: [&str; 5] = [
    "_method=DELETE",
    "x-http-method=DELETE",
    "X-HTTP-Method=DELETE",
    "%5Fmethod=DELETE",
    "comp=list&_METHOD=DELETE",
];

/// Sends `method target` with `headers` signed with Shared Key by
/// `account` (key `key`) through `addr`.
fn shared_key_request(
    addr: std::net::SocketAddr,
    (account, key): (&str, &str),
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let date = httpdate::fmt_http_date(SystemTime::now());
    let headers = shared_key_headers(
        Scheme::SharedKey,
        account,
        key,
        &date,
        method,
        target,
        headers,
        body,
    );
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    http(addr, method, target, &headers, body)
}

fn dev(
    addr: std::net::SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    shared_key_request(addr, (DEV_ACCOUNT, DEV_KEY), method, target, headers, body)
}

fn identity(
    addr: std::net::SocketAddr,
    who: &AzureIdentity,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    shared_key_request(addr, (who.account, who.key), method, target, headers, body)
}

/// Asserts `resp` is the gateway's `status` refusal `code` in Azure's
/// error document.
fn assert_azure_error(resp: &Resp, status: u16, code: &str, what: &str) {
    assert_eq!(
        (resp.status, resp.header("x-ms-error-code")),
        (status, Some(code)),
        "{what}: {}",
        resp.text()
    );
}

#[test]
fn class1_azurite_runs_a_get_with_x_http_method_as_a_delete() {
    // The store's reading, shown directly: this is what the gateway must
    // never forward.
    let store = azurite();
    let made = dev(
        store,
        "PUT",
        "/devstoreaccount1/proof?restype=container",
        &[],
        b"",
    );
    assert!(matches!(made.status, 201 | 409), "{}", made.text());
    let blob = "/devstoreaccount1/proof/victim";
    let put = dev(
        store,
        "PUT",
        blob,
        &[("x-ms-blob-type", "BlockBlob")],
        b"v1",
    );
    assert_eq!(put.status, 201, "{}", put.text());
    let deleted = dev(store, "GET", blob, &[("X-HTTP-Method", "DELETE")], b"");
    assert_eq!(
        deleted.status,
        202,
        "Azurite ran the GET as a delete: {}",
        deleted.text()
    );
    assert_eq!(dev(store, "GET", blob, &[], b"").status, 404);
}

#[test]
fn class1_a_stale_holder_cannot_delete_a_fenced_blob_with_a_method_override() {
    let store = azurite();
    let upstream = format!("http://{store}");
    let gw = GatewayProcess::start(&["--upstream", &upstream, "--store", "azure"]);
    let made = dev(
        gw.data_addr(),
        "PUT",
        "/devstoreaccount1/fenced?restype=container",
        &[("X-Fencing-Token", "1")],
        b"",
    );
    assert!(matches!(made.status, 201 | 409), "{}", made.text());
    let blob = "/devstoreaccount1/fenced/report";
    let headers = [("x-ms-blob-type", "BlockBlob"), ("X-Fencing-Token", "5")];
    let put = dev(gw.data_addr(), "PUT", blob, &headers, b"v5");
    assert_eq!(put.status, 201, "{}", put.text());
    for name in OVERRIDE_HEADERS {
        let resp = dev(gw.data_addr(), "GET", blob, &[(name, "DELETE")], b"");
        assert_azure_error(&resp, 400, "method_override", name);
        assert!(
            resp.text().contains(&name.to_ascii_lowercase()),
            "{}",
            resp.text()
        );
    }
    for query in OVERRIDE_QUERIES {
        let target = format!("{blob}?{query}");
        let resp = dev(gw.data_addr(), "GET", &target, &[], b"");
        assert_azure_error(&resp, 400, "method_override", query);
    }
    // With a stale token too, and on a write: refused before fencing.
    let stale = [("X-HTTP-Method", "DELETE"), ("X-Fencing-Token", "3")];
    let resp = dev(gw.data_addr(), "PUT", blob, &stale, b"");
    assert_azure_error(&resp, 400, "method_override", "a stale PUT");
    let kept = dev(store, "GET", blob, &[], b"");
    assert_eq!((kept.status, kept.text()), (200, "v5".to_owned()));
    assert_eq!(gw.fence(blob), Some(5), "a refusal raised no fence");
}

#[test]
fn class1_a_read_only_identity_cannot_delete_with_a_method_override() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    let made = identity(
        gw.data_addr(),
        &OPS,
        "PUT",
        "/fgops/billing?restype=container",
        &[(MS_TOKEN, "1")],
        b"",
    );
    assert!(matches!(made.status, 201 | 409), "{}", made.text());
    let blob = "/fgops/billing/ledger";
    let headers = [("x-ms-blob-type", "BlockBlob"), (MS_TOKEN, "5")];
    let put = identity(gw.data_addr(), &OPS, "PUT", blob, &headers, b"v5");
    assert_eq!(put.status, 201, "{}", put.text());
    // The auditor may read /billing/ only.
    let auditor_blob = "/fgauditor/billing/ledger";
    let read = identity(gw.data_addr(), &AUDITOR, "GET", auditor_blob, &[], b"");
    assert_eq!((read.status, read.text()), (200, "v5".to_owned()));
    for name in OVERRIDE_HEADERS {
        let resp = identity(
            gw.data_addr(),
            &AUDITOR,
            "GET",
            auditor_blob,
            &[(name, "DELETE")],
            b"",
        );
        assert_azure_error(&resp, 400, "method_override", name);
    }
    // Unauthenticated, the same: the rule comes before custody.
    let resp = gw.req("GET", auditor_blob, &[("X-HTTP-Method", "DELETE")], b"");
    assert_azure_error(&resp, 400, "method_override", "anonymous");
    let read = identity(gw.data_addr(), &AUDITOR, "GET", auditor_blob, &[], b"");
    assert_eq!((read.status, read.text()), (200, "v5".to_owned()));
    let metrics = gw.metrics();
    assert_eq!(
        outcome_all_identities(&metrics, "forwarded"),
        4.0,
        "{metrics}"
    );
}

/// A gateway holding Apache's password, open to anonymous readers
/// (`--anonymous-clients read`), as in the attack.
fn webdav_custody_gateway(apache: &ApacheBasic) -> (tempfile::TempDir, GatewayProcess) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let credentials = apache.write_credentials(dir.path());
    let credentials = credentials.display().to_string();
    let upstream = apache.url();
    let gw = GatewayProcess::start(&[
        "--upstream",
        &upstream,
        "--store",
        "webdav",
        "--upstream-credentials",
        &credentials,
        "--anonymous-clients",
        "read",
    ]);
    (dir, gw)
}

#[test]
fn class2_trace_never_echoes_the_stores_password() {
    let apache = ApacheBasic::shared();
    // Apache echoes a TRACE, credentials and all.
    let (name, value) = apache.authorization();
    let echoed = http(apache.addr(), "TRACE", "/dav/", &[(name, &value)], b"");
    assert_eq!(echoed.status, 200, "{}", echoed.text());
    assert!(echoed.text().contains(&value), "{}", echoed.text());

    let (_dir, gw) = webdav_custody_gateway(apache);
    for target in ["/dav/", "/dav/x", "/"] {
        let resp = gw.req("TRACE", target, &[], b"");
        let json = resp.assert_gateway_error(405, "method_not_allowed");
        assert!(resp.header("allow").is_some(), "405 without Allow");
        let text = resp.text();
        assert!(!text.contains(&apache.password), "{text}");
        assert!(!text.contains(&value), "{text}");
        assert!(
            json["detail"].as_str().is_some_and(|d| d.contains("TRACE")),
            "{json}"
        );
    }
    let connect = b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n";
    send_raw(gw.data_addr(), connect, false).assert_gateway_error(405, "method_not_allowed");
    apache.settle();
    assert!(
        apache.requests("TRACE", "/dav/").len() == 1,
        "only the direct TRACE reached Apache"
    );
    assert!(apache.requests("TRACE", "/dav/x").is_empty());
}

#[test]
fn class2_trace_is_refused_without_custody_too() {
    let apache = Apache::shared();
    let upstream = apache.url();
    let gw = GatewayProcess::start(&["--upstream", &upstream, "--store", "webdav"]);
    let resp = gw.req("TRACE", "/dav/", &[("X-Secret", "s3cr3t")], b"");
    resp.assert_gateway_error(405, "method_not_allowed");
    assert!(!resp.text().contains("s3cr3t"));
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    gw.req("TRACE", "/x", &[], b"")
        .assert_gateway_error(405, "method_not_allowed");
    for name in OVERRIDE_HEADERS {
        let resp = gw.req("GET", "/x", &[(name, "DELETE")], b"");
        let json = resp.assert_gateway_error(400, "method_override");
        assert!(
            json["detail"]
                .as_str()
                .is_some_and(|d| d.contains("header")),
            "{json}"
        );
    }
    for query in OVERRIDE_QUERIES {
        let resp = gw.req("GET", &format!("/x?{query}"), &[], b"");
        resp.assert_gateway_error(400, "method_override");
    }
    // A parameter that only looks like one is forwarded.
    assert_eq!(gw.req("GET", "/x?prefix=_method", &[], b"").status, 200);
    assert_eq!(backend.count(), 1, "{:#?}", backend.records());
    let metrics = gw.metrics();
    assert_eq!(outcome(&metrics, "forwarded"), 1.0, "{metrics}");
}

#[test]
fn class3_the_asterisk_form_is_refused_but_for_options() {
    let apache = Apache::shared();
    apache.mkcol("/dav/fg-asterisk");
    apache.mkcol("/dav/fg-asterisk/tree");
    let put = http(
        apache.addr(),
        "PUT",
        "/dav/fg-asterisk/tree/kept",
        &[],
        b"kept",
    );
    assert_eq!(put.status, 201, "{}", put.text());
    let upstream = format!("{}/dav/fg-asterisk/tree", apache.url());
    let gw = GatewayProcess::start(&["--upstream", &upstream, "--store", "webdav"]);
    assert_eq!(gw.put("/kept", 5).status, 204);
    // DELETE / is refused to the stale token (the tree is fenced at 5).
    let stale = gw.req("DELETE", "/", &[("X-Fencing-Token", "3")], b"");
    stale.assert_gateway_error(409, "stale_token");
    for method in ["DELETE", "PUT", "MOVE", "GET", "PROPFIND", "PROPPATCH"] {
        let raw = format!(
            "{method} * HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Fencing-Token: 3\r\n\
             Destination: /elsewhere\r\nContent-Length: 0\r\n\r\n"
        );
        let resp = send_raw(gw.data_addr(), raw.as_bytes(), false);
        let json = resp.assert_gateway_error(400, "invalid_path");
        assert!(
            json["detail"]
                .as_str()
                .is_some_and(|d| d.contains("OPTIONS")),
            "{json}"
        );
    }
    assert!(
        apache.exists("/dav/fg-asterisk/tree/kept"),
        "the tree was deleted"
    );
    let options = b"OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    let resp = send_raw(gw.data_addr(), options, false);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(gw.fence("/kept"), Some(5));
}

/// Targets and hosts read once, before routing (routes issue, item 4): a
/// path that climbs above the root and a malformed or repeated `Host` are
/// refused in every mode, reads included; under the S3 dialect a key with
/// an empty, `.` or `..` segment is refused (S3 keys are literal: the store
/// writes `a/../k`, the gateway would fence `/k`).
#[test]
fn climbing_paths_bad_hosts_and_dotted_s3_keys_are_refused_in_every_mode() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    for target in ["/../x", "/a/../../x", "/%2e%2e/x", "/a/%2E%2E/%2e%2e/x"] {
        let resp = gw.req("GET", target, &[], b"");
        resp.assert_gateway_error(400, "invalid_path");
    }
    for host in ["a b", "user@gw", "gw:", "gw:99999"] {
        let raw = format!("GET /x HTTP/1.1\r\nHost: {host}\r\n\r\n");
        send_raw(gw.data_addr(), raw.as_bytes(), false).assert_gateway_error(400, "invalid_path");
    }
    assert_eq!(backend.count(), 0, "{:#?}", backend.records());

    let s3 = GatewayProcess::in_front_of(&backend, &["--store", "s3"]);
    for target in ["/bkt/a/../k", "/bkt/a//k", "/bkt/./k", "/bkt/a/%2e%2e/k"] {
        for (method, token) in [("PUT", Some("5")), ("GET", None)] {
            let headers: Vec<(&str, &str)> =
                token.iter().map(|t| ("X-Fencing-Token", *t)).collect();
            let resp = s3.req(method, target, &headers, b"x");
            assert_eq!(resp.status, 400, "{method} {target}: {}", resp.text());
            assert!(
                resp.text().contains("<Code>invalid_path</Code>"),
                "{}",
                resp.text()
            );
        }
    }
    assert_eq!(backend.count(), 0, "{:#?}", backend.records());
    // A folder marker is a key of its own, and goes on.
    assert_eq!(s3.put("/bkt/dir/", 5).status, 200);
    assert_eq!(backend.count(), 1);
}

/// A container deleted with a stale token while it held a blob fenced far
/// above it (Azure issue, class 7): with flat keys Delete Container was
/// fenced on the container alone. It is fenced on everything under it now.
#[test]
fn class7_a_stale_delete_container_is_refused_while_a_blob_under_it_is_fenced_above() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    let made = identity(
        gw.data_addr(),
        &OPS,
        "PUT",
        "/fgops/vault?restype=container",
        &[(MS_TOKEN, "1")],
        b"",
    );
    assert!(matches!(made.status, 201 | 409), "{}", made.text());
    let blob = "/fgops/vault/ledger";
    let headers = [("x-ms-blob-type", "BlockBlob"), (MS_TOKEN, "50")];
    let put = identity(gw.data_addr(), &OPS, "PUT", blob, &headers, b"v50");
    assert_eq!(put.status, 201, "{}", put.text());
    let stale = identity(
        gw.data_addr(),
        &OPS,
        "DELETE",
        "/fgops/vault?restype=container",
        &[(MS_TOKEN, "10")],
        b"",
    );
    assert_azure_error(&stale, 409, "stale_token", "a stale Delete Container");
    let read = identity(gw.data_addr(), &OPS, "GET", blob, &[], b"");
    assert_eq!((read.status, read.text()), (200, "v50".to_owned()));
    // The holder of 50 may delete it, and then no lower token writes there.
    let deleted = identity(
        gw.data_addr(),
        &OPS,
        "DELETE",
        "/fgops/vault?restype=container",
        &[(MS_TOKEN, "50")],
        b"",
    );
    assert_eq!(deleted.status, 202, "{}", deleted.text());
    let late = identity(
        gw.data_addr(),
        &OPS,
        "PUT",
        "/fgops/vault/other",
        &[("x-ms-blob-type", "BlockBlob"), (MS_TOKEN, "49")],
        b"late",
    );
    assert_azure_error(
        &late,
        409,
        "stale_token",
        "a lower token under the deleted container",
    );
}

/// One blob, two fence keys (Azure issue, class 4): Azurite stores a name
/// with a backslash as the name with a slash, while the gateway keyed it as
/// written; a stale token overwrote a fenced blob. A backslash (raw or
/// `%5C`) is refused in every mode under the Azure dialect, and under
/// custody in a copy source too (class 3).
#[test]
fn class4_a_backslash_in_a_blob_name_is_refused() {
    let store = azurite();
    // The store's reading, shown directly.
    let made = dev(
        store,
        "PUT",
        "/devstoreaccount1/slashes?restype=container",
        &[],
        b"",
    );
    assert!(matches!(made.status, 201 | 409), "{}", made.text());
    let put = dev(
        store,
        "PUT",
        "/devstoreaccount1/slashes/p%5Cq",
        &[("x-ms-blob-type", "BlockBlob")],
        b"bs",
    );
    assert_eq!(put.status, 201, "{}", put.text());
    let read = dev(store, "GET", "/devstoreaccount1/slashes/p/q", &[], b"");
    assert_eq!(
        (read.status, read.text()),
        (200, "bs".to_owned()),
        "Azurite reads \\ as /"
    );

    let upstream = format!("http://{store}");
    let gw = GatewayProcess::start(&["--upstream", &upstream, "--store", "azure"]);
    let blob = "/devstoreaccount1/slashes/x/y";
    let headers = [("x-ms-blob-type", "BlockBlob"), ("X-Fencing-Token", "34")];
    let put = dev(gw.data_addr(), "PUT", blob, &headers, b"v34");
    assert_eq!(put.status, 201, "{}", put.text());
    let stale = [("x-ms-blob-type", "BlockBlob"), ("X-Fencing-Token", "33")];
    for spelling in [
        "/devstoreaccount1/slashes/x%5Cy",
        "/devstoreaccount1/slashes/x%5cy",
    ] {
        let resp = dev(gw.data_addr(), "PUT", spelling, &stale, b"v33");
        assert_azure_error(&resp, 400, "invalid_path", spelling);
        let resp = dev(gw.data_addr(), "GET", spelling, &[], b"");
        assert_azure_error(&resp, 400, "invalid_path", spelling);
    }
    let kept = dev(store, "GET", blob, &[], b"");
    assert_eq!((kept.status, kept.text()), (200, "v34".to_owned()));

    // Under custody: a copy source spelt with a backslash names another
    // container at the store than the one the gateway would authorise.
    let (gw, _dir) = azure_custody_gateway(&[]);
    let source = format!("{}/fgauditor/billing%5C..%5Cother/x", gw.data_url());
    let resp = identity(
        gw.data_addr(),
        &AUDITOR,
        "PUT",
        "/fgauditor/billing/copied",
        &[
            ("x-ms-blob-type", "BlockBlob"),
            ("x-ms-copy-source", &source),
            (MS_TOKEN, "5"),
        ],
        b"",
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert_eq!(
        resp.header("x-ms-error-code"),
        Some("invalid_path"),
        "{}",
        resp.text()
    );
}

/// What a red-team pass over this round's rules found, each refused now:
/// an Azure batch or a rename without custody (its objects are in its body
/// or in a field nobody fences), `Host` or the token named in `Connection`,
/// an absolute target with user info or another scheme, a `Destination`
/// sent to an upstream with a base path (forwarded as sent, read outside
/// the base); and a GCS-shaped path on a WebDAV route is no GCS name.
#[test]
fn what_a_red_team_found_is_refused() {
    let backend = Backend::start();
    let azure = GatewayProcess::in_front_of(&backend, &["--store", "azure"]);
    let token = ("X-Fencing-Token", "1");
    let batch = azure.req(
        "POST",
        "/acct/ctr?restype=container&comp=batch",
        &[token, ("Content-Type", "multipart/mixed; boundary=b")],
        b"--b\r\n\r\nDELETE /acct/ctr/victim HTTP/1.1\r\n\r\n--b--\r\n",
    );
    assert_eq!(batch.status, 400, "{}", batch.text());
    assert_eq!(batch.header("x-ms-error-code"), Some("unfenceable_write"));
    for name in ["x-ms-rename-source", "x-amz-rename-source"] {
        let resp = azure.req(
            "PUT",
            "/acct/ctr/new",
            &[token, (name, "/acct/ctr/victim")],
            b"",
        );
        assert_eq!(
            resp.header("x-ms-error-code"),
            Some("unfenceable_write"),
            "{name}"
        );
    }
    let plain = GatewayProcess::in_front_of(&backend, &[]);
    for named in [
        "host",
        "Host",
        "x-fencing-token",
        "keep-alive, X-Fencing-Token",
    ] {
        let resp = plain.req("PUT", "/x", &[token, ("Connection", named)], b"");
        resp.assert_gateway_error(400, "bad_request");
    }
    for target in ["http://x@h.example/a/x", "ftp://h.example/a/x"] {
        let raw = format!("PUT {target} HTTP/1.1\r\nHost: h.example\r\nX-Fencing-Token: 1\r\nContent-Length: 0\r\n\r\n");
        send_raw(plain.data_addr(), raw.as_bytes(), false)
            .assert_gateway_error(400, "invalid_path");
    }
    let comma = b"GET /x HTTP/1.1\r\nHost: h.example,gw\r\n\r\n";
    send_raw(plain.data_addr(), comma, false).assert_gateway_error(400, "invalid_path");
    let based = format!("{}/base", backend.url());
    let under_base = GatewayProcess::start(&["--upstream", &based]);
    for method in ["MOVE", "COPY"] {
        let resp = under_base.req(method, "/x", &[token, ("Destination", "/base/x2")], b"");
        resp.assert_gateway_error(400, "unfenceable_write");
    }
    assert_eq!(backend.count(), 0, "{:#?}", backend.records());
    // Without flat keys (a WebDAV store) /b/docs/o/readme is a path, fenced
    // as one: no GCS object key beside it.
    assert_eq!(plain.put("/b/docs/o/readme", 5).status, 200);
    assert_eq!(plain.fence("/b/docs/o/readme"), Some(5));
    assert_eq!(plain.fence("/docs/readme"), None);
}

/// Without custody the client signs with the store's key and the gateway
/// forwards as sent: a write the Azure table does not read (Azurite runs
/// a `PUT` with an unknown `comp` and `x-ms-blob-type` as Put Blob,
/// unfenced by what the gateway would take it for) is 400
/// `unfenceable_write` unless `--allow-unfenced-writes`; reads go on.
#[test]
fn deny_by_default_without_custody_an_azure_write_the_table_does_not_read_is_unfenceable() {
    let store = azurite();
    let upstream = format!("http://{store}");
    let gw = GatewayProcess::start(&["--upstream", &upstream, "--store", "azure"]);
    let made = dev(
        gw.data_addr(),
        "PUT",
        "/devstoreaccount1/unread?restype=container",
        &[("X-Fencing-Token", "1")],
        b"",
    );
    assert!(matches!(made.status, 201 | 409), "{}", made.text());
    let blob = "/devstoreaccount1/unread/report";
    let put = |addr, query: &str, extra: &[(&str, &str)], body: &[u8]| {
        let mut headers = vec![("x-ms-blob-type", "BlockBlob"), ("X-Fencing-Token", "5")];
        headers.extend_from_slice(extra);
        dev(addr, "PUT", &format!("{blob}{query}"), &headers, body)
    };
    let resp = put(gw.data_addr(), "", &[], b"v5");
    assert_eq!(resp.status, 201, "{}", resp.text());
    // A block: a row of the table, forwarded (with Put Blob's selecting
    // header it would be none).
    let target = format!("{blob}?comp=block&blockid=QQ%3D%3D&timeout=30");
    let resp = dev(
        gw.data_addr(),
        "PUT",
        &target,
        &[("X-Fencing-Token", "5")],
        b"b",
    );
    assert_eq!(resp.status, 201, "{}", resp.text());
    let resp = put(gw.data_addr(), "?comp=block&blockid=QQ%3D%3D", &[], b"b");
    assert_azure_error(
        &resp,
        400,
        "unfenceable_write",
        "a block with x-ms-blob-type",
    );
    for (query, extra) in [
        ("?comp=bogus", &[][..]),
        ("?Comp=tier", &[][..]),
        ("", &[("x-ms-copy-source-authorization", "Bearer x")][..]),
        ("", &[("x-ms-requires-sync", "true")][..]),
    ] {
        let resp = put(gw.data_addr(), query, extra, b"overwritten");
        assert_azure_error(&resp, 400, "unfenceable_write", query);
    }
    let kept = dev(store, "GET", blob, &[], b"");
    assert_eq!((kept.status, kept.text()), (200, "v5".to_owned()));
    // Reads without custody are as they were: Azurite runs this as Get
    // Blob.
    let read = dev(
        gw.data_addr(),
        "GET",
        &format!("{blob}?comp=bogus"),
        &[],
        b"",
    );
    assert_eq!((read.status, read.text()), (200, "v5".to_owned()));
    // --allow-unfenced-writes forwards it, and Azurite overwrites.
    let open = GatewayProcess::start(&[
        "--upstream",
        &upstream,
        "--store",
        "azure",
        "--allow-unfenced-writes",
    ]);
    let resp = put(open.data_addr(), "?comp=bogus", &[], b"overwritten");
    assert_eq!(resp.status, 201, "{}", resp.text());
    let now = dev(store, "GET", blob, &[], b"");
    assert_eq!(now.text(), "overwritten");
}

/// One blob, one fence key, whatever the spelling (issue 49, item 3, the
/// Azure parts). Without custody Azurite decodes the whole path and keeps
/// `.`, `..` and empty segments literal; the gateway's key is that name,
/// normalised, so every spelling of one stored blob is fenced on one key
/// (`x/../y` and `y` share one: more fenced, never less). Under custody a
/// name with an encoded slash, or an empty, `.` or `..` segment, is
/// refused, and percent-encoded letters name the same blob.
#[test]
fn class4_one_azure_blob_has_one_fence_key_whatever_the_spelling() {
    let store = azurite();
    let upstream = format!("http://{store}");
    let gw = GatewayProcess::start(&["--upstream", &upstream, "--store", "azure"]);
    let made = dev(
        gw.data_addr(),
        "PUT",
        "/devstoreaccount1/spellings?restype=container",
        &[("X-Fencing-Token", "1")],
        b"",
    );
    assert!(matches!(made.status, 201 | 409), "{}", made.text());
    let put = |target: &str, token: &str| {
        let headers = [("x-ms-blob-type", "BlockBlob"), ("X-Fencing-Token", token)];
        dev(gw.data_addr(), "PUT", target, &headers, b"x")
    };
    for (fenced, others) in [
        ("ab", &["a%62", "%61%62"][..]),
        ("sub/x", &["sub%2Fx", "sub%2fx"][..]),
        ("x/../y", &["x/%2E%2E/y", "x/.%2e/y"][..]),
        ("q//z", &["q/%2Fz"][..]),
        ("m/./n", &["m/%2E/n"][..]),
    ] {
        let target = format!("/devstoreaccount1/spellings/{fenced}");
        let resp = put(&target, "5");
        assert_eq!(resp.status, 201, "{fenced}: {}", resp.text());
        for other in others {
            let spelling = format!("/devstoreaccount1/spellings/{other}");
            let resp = put(&spelling, "3");
            assert_azure_error(&resp, 409, "stale_token", &spelling);
        }
    }
    // The container segment spelt with an encoded slash, too.
    let resp = put("/devstoreaccount1/spellings%2Fsub/x", "3");
    assert_azure_error(&resp, 409, "stale_token", "spellings%2Fsub/x");

    let (gw, _dir) = azure_custody_gateway(&[]);
    let ops = |target: &str, token: &str| {
        identity(
            gw.data_addr(),
            &OPS,
            "PUT",
            target,
            &[("x-ms-blob-type", "BlockBlob"), (MS_TOKEN, token)],
            b"x",
        )
    };
    let made = identity(
        gw.data_addr(),
        &OPS,
        "PUT",
        "/fgops/spellings?restype=container",
        &[(MS_TOKEN, "1")],
        b"",
    );
    assert!(matches!(made.status, 201 | 409), "{}", made.text());
    assert_eq!(ops("/fgops/spellings/ab", "5").status, 201);
    for spelling in ["/fgops/spellings/a%62", "/fgops/spel%6Cings/ab"] {
        assert_azure_error(&ops(spelling, "3"), 409, "stale_token", spelling);
    }
    for spelling in [
        "/fgops/spellings/sub%2Fx",
        "/fgops/spellings%2Fsub/x",
        "/fgops/spellings/x/%2E%2E/y",
        "/fgops/spellings/q//z",
        "/fgops/spellings/m/./n",
    ] {
        assert_azure_error(&ops(spelling, "3"), 400, "invalid_path", spelling);
    }
}

/// A Put Blob (or Copy Blob) of `who` at `target` that copies from
/// `source`, with `token`, through `gw`.
fn copy_from(gw: &GatewayProcess, who: &AzureIdentity, target: &str, source: &str) -> Resp {
    identity(
        gw.data_addr(),
        who,
        "PUT",
        target,
        &[("x-ms-copy-source", source), (MS_TOKEN, "5")],
        b"",
    )
}

/// A request to Azurite itself signed with the store's key, which only
/// the gateway holds: what the store holds, seen around the gateway.
fn at_store(method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    shared_key_request(
        azurite_for_custody(),
        (STORE_ACCOUNT, STORE_KEY),
        method,
        target,
        headers,
        body,
    )
}

/// A copy source read differently by the store (Azure issue, class 3):
/// the gateway took a source path as a literal name inside the identity's
/// prefix while Azurite normalised it (dot segments, `%2e%2e`, a
/// backslash, which WHATWG URL parsing reads as `/`, encoded slashes) to a
/// blob of another container; an identity confined to one prefix copied,
/// so read, any blob of the account. Billing may read `/billing/` and
/// `/shared/`, never `/private/`: every spelling of a source that the
/// store could read as `/private/t3-secret` is refused before anything is
/// forwarded, and the destination does not exist at the store afterwards
/// (asked with the store's key).
/// On 8011800 (before issue 49's first change) `/billing/..\private/...`
/// copied the private blob; on 34c9afc every spelling is refused.
#[test]
fn class3_a_copy_source_the_store_normalises_into_another_container_is_refused() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    for container in ["billing", "private"] {
        let made = identity(
            gw.data_addr(),
            &OPS,
            "PUT",
            &format!("/fgops/{container}?restype=container"),
            &[(MS_TOKEN, "1")],
            b"",
        );
        assert!(matches!(made.status, 201 | 409), "{}", made.text());
    }
    let put = identity(
        gw.data_addr(),
        &OPS,
        "PUT",
        "/fgops/private/t3-secret",
        &[("x-ms-blob-type", "BlockBlob"), (MS_TOKEN, "1")],
        b"classified",
    );
    assert_eq!(put.status, 201, "{}", put.text());
    // Billing reads /private/t3-secret neither directly nor by a plain copy.
    let direct = identity(
        gw.data_addr(),
        &BILLING,
        "GET",
        "/fgbilling/private/t3-secret",
        &[],
        b"",
    );
    assert_eq!(direct.status, 403, "{}", direct.text());
    let base = format!("{}/fgbilling", gw.data_url());
    // Spellings the store may read outside `/billing/`: refused.
    let escaping = [
        "/billing/../private/t3-secret",
        "/billing/x/../../private/t3-secret",
        "/billing/%2e%2e/private/t3-secret",
        "/billing/%2E%2E/private/t3-secret",
        "/billing/.%2e/private/t3-secret",
        "/billing/%2e./private/t3-secret",
        "/billing/./../private/t3-secret",
        "/billing//../private/t3-secret",
        "/billing/..//private/t3-secret",
        "//billing/../private/t3-secret",
        "/billing\\..\\private\\t3-secret",
        "/billing\\../private/t3-secret",
        "/billing/..\\private/t3-secret",
        "/billing%5C..%5Cprivate%5Ct3-secret",
        "/billing%5c..%5cprivate/t3-secret",
        "/billing%2F..%2Fprivate%2Ft3-secret",
        "/billing%2f..%2fprivate/t3-secret",
        "/billing/..%2Fprivate/t3-secret",
        "/billing/%2e%2e%2fprivate%2ft3-secret",
        "/billing/%2E%2E%5Cprivate%5Ct3-secret",
    ];
    // Spellings both read as a name inside `/billing/` (a literal `%2e`,
    // a NUL, a query): refused or forwarded, never the private blob.
    let literal = [
        "/billing/%252e%252e/private/t3-secret",
        "/billing/..%00/private/t3-secret",
        "/billing/t3?/../../private/t3-secret",
        "/billing/t3#/../../private/t3-secret",
    ];
    // What Azurite itself makes of each spelling, for the test's output:
    // the attack is real when the store copies the private blob.
    let mut store_reads = Vec::new();
    for (n, spelling) in escaping.iter().chain(&literal).enumerate() {
        let source = format!("http://{}/{STORE_ACCOUNT}{spelling}", azurite_for_custody());
        let target = format!("/{STORE_ACCOUNT}/billing/t3-direct-{n}");
        let resp = at_store("PUT", &target, &[("x-ms-copy-source", &source)], b"");
        let copied = resp.status < 300
            && wait_until(std::time::Duration::from_secs(3), || {
                at_store("GET", &target, &[], b"").body == b"classified"
            });
        if copied {
            store_reads.push(*spelling);
        }
    }
    println!("Azurite copies the private blob for: {store_reads:#?}");
    assert!(
        !store_reads.is_empty(),
        "no spelling reaches the private blob at Azurite: the test shows nothing"
    );
    assert!(
        store_reads.iter().all(|s| escaping.contains(s)),
        "a spelling taken for literal escapes at the store: {store_reads:?}"
    );

    let mut served = Vec::new();
    for (n, spelling) in escaping.iter().chain(&literal).enumerate() {
        let target = format!("/fgbilling/billing/t3-copy-{n}");
        let before = outcome_all_identities(&gw.metrics(), "forwarded");
        let resp = copy_from(&gw, &BILLING, &target, &format!("{base}{spelling}"));
        let forwarded = outcome_all_identities(&gw.metrics(), "forwarded") - before;
        // The destination at the store, asked around the gateway (an
        // asynchronous copy may land after the answer).
        let stored = format!("/{STORE_ACCOUNT}/billing/t3-copy-{n}");
        std::thread::sleep(std::time::Duration::from_millis(100));
        let at = at_store("GET", &stored, &[], b"");
        let must_refuse = escaping.contains(spelling);
        let refused = (400..500).contains(&resp.status) && forwarded == 0.0;
        if (must_refuse && !refused) || at.status != 404 || at.body == b"classified" {
            served.push(format!(
                "{spelling}: {} {:?}, forwarded {forwarded}, destination at the store {}",
                resp.status,
                resp.header("x-ms-error-code"),
                at.status
            ));
        }
    }
    assert!(served.is_empty(), "not refused:\n{}", served.join("\n"));
    // A source inside what billing reads still copies.
    let put = identity(
        gw.data_addr(),
        &OPS,
        "PUT",
        "/fgops/billing/t3-own",
        &[("x-ms-blob-type", "BlockBlob"), (MS_TOKEN, "1")],
        b"own",
    );
    assert_eq!(put.status, 201, "{}", put.text());
    let resp = copy_from(
        &gw,
        &BILLING,
        "/fgbilling/billing/t3-copy-own",
        &format!("{base}/billing/t3-own"),
    );
    assert_eq!(resp.status, 202, "{}", resp.text());
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        at_store(
            "GET",
            &format!("/{STORE_ACCOUNT}/billing/t3-copy-own"),
            &[],
            b"",
        )
        .body
            == b"own"
    }));
}

/// May read `/cfg/inside/` and nothing else: an identity confined inside
/// one container.
const INSIDER: AzureIdentity = AzureIdentity {
    name: "insider",
    account: "fginsider",
    key: "aW5zaWRlci1rZXktb2YtYW4taWRlbnRpdHktb2YtdGhlLWdhdGV3YXktbm90LW9mLXRoZS1zdG9yZQ==",
};

/// A gateway in front of [`azurite_for_custody`] holding the store's key,
/// its clients [`OPS`] (admin of everything) and [`INSIDER`] (read on
/// `/cfg/inside/`). The directory must outlive the gateway.
fn insider_gateway() -> (GatewayProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("store.key"), STORE_KEY).unwrap();
    std::fs::write(
        dir.path().join("upstream.toml"),
        format!("kind = \"azure-shared-key\"\naccount = \"{STORE_ACCOUNT}\"\nkey_file = \"store.key\"\n"),
    )
    .unwrap();
    let mut identities = String::new();
    for (who, allow) in [
        (&OPS, r#"[{ prefix = "/", access = "admin" }]"#),
        (
            &INSIDER,
            r#"[{ prefix = "/cfg/inside/", access = "read" }]"#,
        ),
    ] {
        std::fs::write(dir.path().join(format!("{}.key", who.name)), who.key).unwrap();
        identities.push_str(&format!(
            "[[identity]]\nname = \"{}\"\naccess_key_id = \"{}\"\nsecret_file = \"{}.key\"\nallow = {allow}\n\n",
            who.name, who.account, who.name
        ));
    }
    std::fs::write(dir.path().join("identities.toml"), identities).unwrap();
    let upstream = format!("http://{}/{STORE_ACCOUNT}", azurite_for_custody());
    let upstream_file = dir.path().join("upstream.toml").display().to_string();
    let identities_file = dir.path().join("identities.toml").display().to_string();
    let gw = GatewayProcess::start(&[
        "--upstream",
        &upstream,
        "--store",
        "azure",
        "--upstream-credentials",
        &upstream_file,
        "--identities",
        &identities_file,
        "--token-header",
        MS_TOKEN,
    ]);
    (gw, dir)
}

/// Container configuration read through a listing parameter (Azure issue,
/// class 5): a `prefix` widens only a listing, so an identity that may read
/// `/cfg/inside/` alone is refused every read of the container's
/// configuration (properties, metadata, stored access policies, a tag
/// query) whatever `prefix` rides along, and the store's answer (its
/// metadata, its policy id, its tags) never reaches it; a listing of its
/// prefix still works.
/// On 8011800 (before issue 49's first change) the properties, metadata,
/// ACL and tag query were served with a prefix; on 34c9afc only a
/// duplicated `comp` was forwarded (and refused by Azurite, 502).
#[test]
fn class5_container_configuration_is_not_read_through_a_listing_prefix() {
    let (gw, _dir) = insider_gateway();
    let ops = |method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]| {
        let mut headers = headers.to_vec();
        headers.push((MS_TOKEN, "1"));
        identity(gw.data_addr(), &OPS, method, target, &headers, body)
    };
    let made = ops("PUT", "/fgops/cfg?restype=container", &[], b"");
    assert!(matches!(made.status, 201 | 409), "{}", made.text());
    let meta = ops(
        "PUT",
        "/fgops/cfg?restype=container&comp=metadata",
        &[("x-ms-meta-secret", "t5-classified-meta")],
        b"",
    );
    assert_eq!(meta.status, 200, "{}", meta.text());
    let acl = ops(
        "PUT",
        "/fgops/cfg?restype=container&comp=acl",
        &[("content-type", "application/xml")],
        b"<?xml version=\"1.0\" encoding=\"utf-8\"?><SignedIdentifiers><SignedIdentifier><Id>t5-classified-policy</Id><AccessPolicy><Start>2026-01-01T00:00:00.0000000Z</Start><Expiry>2100-01-01T00:00:00.0000000Z</Expiry><Permission>r</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>",
    );
    assert_eq!(acl.status, 200, "{}", acl.text());
    for (blob, tag) in [
        ("inside/mine", "t5-inside"),
        ("outside/theirs", "t5-classified-tag"),
    ] {
        let put = ops(
            "PUT",
            &format!("/fgops/cfg/{blob}"),
            &[
                ("x-ms-blob-type", "BlockBlob"),
                ("x-ms-tags", &format!("k={tag}")),
            ],
            b"x",
        );
        assert_eq!(put.status, 201, "{blob}: {}", put.text());
    }
    // The store serves each of these with a prefix riding along, and the
    // answer holds the container's configuration: shown directly.
    let shown = at_store(
        "GET",
        &format!("/{STORE_ACCOUNT}/cfg?restype=container&comp=acl&prefix=inside%2F"),
        &[],
        b"",
    );
    assert!(
        shown.text().contains("t5-classified-policy"),
        "{}",
        shown.text()
    );

    let insider =
        |method: &str, target: &str| identity(gw.data_addr(), &INSIDER, method, target, &[], b"");
    let mut served = Vec::new();
    for prefix in ["inside/", "inside%2F", "inside/mine"] {
        for (method, path, query) in [
            ("GET", "cfg", "restype=container"),
            ("HEAD", "cfg", "restype=container"),
            ("GET", "cfg", "restype=container&comp=metadata"),
            ("HEAD", "cfg", "restype=container&comp=metadata"),
            ("GET", "cfg", "restype=container&comp=acl"),
            ("HEAD", "cfg", "restype=container&comp=acl"),
            (
                "GET",
                "cfg",
                "restype=container&comp=blobs&where=%22k%22%3D%27t5-classified-tag%27",
            ),
            (
                "GET",
                "cfg",
                "restype=container&comp=list&include=metadata&comp=acl",
            ),
            (
                "GET",
                "cfg",
                "restype=container&comp=acl&restype=container&comp=list",
            ),
            (
                "GET",
                "",
                "comp=blobs&where=%22k%22%3D%27t5-classified-tag%27",
            ),
            ("GET", "", "restype=service&comp=properties"),
            ("GET", "cfg", "restype=account&comp=properties"),
        ] {
            let target = format!("/fginsider/{path}?{query}&prefix={prefix}");
            let before = outcome_all_identities(&gw.metrics(), "forwarded");
            let resp = insider(method, &target);
            let forwarded = outcome_all_identities(&gw.metrics(), "forwarded") - before;
            let leaked = resp.text().contains("t5-classified")
                || resp
                    .headers
                    .iter()
                    .any(|(_, v)| v.contains("t5-classified"));
            if !(400..500).contains(&resp.status) || forwarded != 0.0 || leaked {
                served.push(format!(
                    "{method} {target}: {} {:?}, forwarded {forwarded}, leaked {leaked}: {}",
                    resp.status,
                    resp.header("x-ms-error-code"),
                    resp.text()
                ));
            }
        }
    }
    // Without a prefix, the read of the configuration needs read on the
    // whole container.
    for query in [
        "restype=container",
        "restype=container&comp=metadata",
        "restype=container&comp=acl",
        "restype=container&comp=blobs&where=%22k%22%3D%27t5-classified-tag%27",
    ] {
        let resp = insider("GET", &format!("/fginsider/cfg?{query}"));
        if resp.status != 403 || resp.text().contains("t5-classified") {
            served.push(format!("GET ?{query}: {} {}", resp.status, resp.text()));
        }
    }
    assert!(served.is_empty(), "served:\n{}", served.join("\n"));

    // A listing of its own prefix still works, and lists only it.
    let list = insider(
        "GET",
        "/fginsider/cfg?restype=container&comp=list&prefix=inside%2F",
    );
    assert_eq!(list.status, 200, "{}", list.text());
    assert!(list.text().contains("inside/mine"), "{}", list.text());
    assert!(!list.text().contains("outside/theirs"), "{}", list.text());
    let wider = insider(
        "GET",
        "/fginsider/cfg?restype=container&comp=list&prefix=out",
    );
    assert_eq!(wider.status, 403, "{}", wider.text());
}
