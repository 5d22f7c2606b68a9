//! Azure Blob under credential custody, request by request: every request
//! here is built and signed by hand (`SharedKey`, `SharedKeyLite`, a
//! service SAS) with the library's own `fencegate::dialect::shared_key`,
//! so that each check of the gateway can be reached alone: a wrong key, an
//! unknown account, a signature over other headers, a skewed date, a SAS
//! expired, tampered, not yet valid, for another address or for HTTPS
//! only, a SAS form the gateway does not take, a SAS narrower than its
//! identity, copy sources outside what the identity may read or outside
//! its account, a reader raising a fence, a token header Shared Key cannot
//! sign. What the gateway serves it re-signs with the store's key, which
//! the clients never have: the identities' accounts are unknown to the
//! store, and one blob has one fence whichever account's path names it.
//! Every refusal is Azure's error document (`x-ms-error-code`), counted,
//! and never forwarded.
//!
//! Needs Azurite under `target/node` (`scripts/install-deps.sh`), started
//! knowing only the store's account (`support::azurite`).

#[path = "../support/mod.rs"]
mod support;

use std::time::{Duration, SystemTime};

use fencegate::dialect::shared_key::{
    parse_sas_time, sas_string_to_sign, AccountKey, Scheme, ServiceSas,
};
use support::azurite::{
    azure_custody_gateway, shared_key_headers, AzureIdentity, AUDITOR, BILLING, OPS,
};
use support::{metric, pct, wait_until, GatewayProcess, Resp};

/// The token header the gateway is started with (a header Shared Key
/// signs).
const TOKEN: &str = "x-ms-fencing-token";
/// The service version the requests and the SAS say.
const VERSION: &str = "2021-08-06";

// ---------------------------------------------------------------------------
// Signing by hand
// ---------------------------------------------------------------------------

/// `x-ms-date` for `at`.
fn http_date(at: SystemTime) -> String {
    httpdate::fmt_http_date(at)
}

/// Sends `headers` as they are.
fn send(
    gw: &GatewayProcess,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Resp {
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    gw.req(method, target, &headers, body)
}

/// A request of `who`, signed with SharedKey now.
fn request(
    gw: &GatewayProcess,
    who: &AzureIdentity,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let date = http_date(SystemTime::now());
    let headers = shared_key_headers(
        Scheme::SharedKey,
        who.account,
        who.key,
        &date,
        method,
        target,
        headers,
        body,
    );
    send(gw, method, target, &headers, body)
}

/// Put Blob of `who` at `target` with `token`.
fn put_blob(
    gw: &GatewayProcess,
    who: &AzureIdentity,
    target: &str,
    token: u64,
    body: &[u8],
) -> Resp {
    let token = token.to_string();
    request(
        gw,
        who,
        "PUT",
        target,
        &[("x-ms-blob-type", "BlockBlob"), (TOKEN, &token)],
        body,
    )
}

/// Get Blob of `who`.
fn get_blob(gw: &GatewayProcess, who: &AzureIdentity, target: &str) -> Resp {
    request(gw, who, "GET", target, &[], b"")
}

/// Creates `container` as OPS (an admin, with a token); one made by an
/// earlier test (Azurite is shared by the tests of this binary) will do.
fn ensure_container(gw: &GatewayProcess, container: &str) {
    let resp = request(
        gw,
        &OPS,
        "PUT",
        &format!("/{}/{container}?restype=container", OPS.account),
        &[(TOKEN, "1")],
        b"",
    );
    let exists =
        resp.status == 409 && resp.header("x-ms-error-code") == Some("ContainerAlreadyExists");
    assert!(
        resp.status == 201 || exists,
        "create container {container}: {} {:?} {}",
        resp.status,
        resp.header("x-ms-error-code"),
        resp.text()
    );
}

/// Asserts that `resp` is the blob `body`.
fn assert_body(resp: &Resp, body: &[u8], what: &str) {
    assert_eq!(resp.status, 200, "{what}: {}", resp.text());
    assert_eq!(resp.body, body, "{what}: {}", resp.text());
}

/// Asserts that `resp` is Azure's error document `status` with `code`.
fn assert_azure_error(resp: &Resp, status: u16, code: &str, what: &str) {
    assert_eq!(
        (resp.status, resp.header("x-ms-error-code")),
        (status, Some(code)),
        "{what}: {}",
        resp.text()
    );
    let text = resp.text();
    assert!(
        text.contains(&format!("<Code>{code}</Code>")),
        "{what}: {text}"
    );
}

/// `fencegate_requests_total` of `outcome`, summed over its series: one
/// without an identity (a request that did not authenticate) and one per
/// identity (custody counts an identified request under its identity).
fn count(gw: &GatewayProcess, outcome: &str) -> f64 {
    support::outcome_all_identities(&gw.metrics(), outcome)
}

/// Sends with `send`, asserts an Azure refusal `status` `code` counted once
/// under `outcome` and not forwarded; returns it.
fn refused(
    gw: &GatewayProcess,
    status: u16,
    code: &str,
    outcome: &str,
    what: &str,
    send: impl FnOnce() -> Resp,
) -> Resp {
    let (before, forwarded) = (count(gw, outcome), count(gw, "forwarded"));
    let resp = send();
    assert_azure_error(&resp, status, code, what);
    assert_eq!(
        count(gw, outcome),
        before + 1.0,
        "{what}: counted as {outcome}\n{}",
        gw.metrics()
    );
    assert_eq!(
        count(gw, "forwarded"),
        forwarded,
        "{what}: not forwarded\n{}",
        gw.metrics()
    );
    resp
}

/// A refusal of credentials (403 `AuthenticationFailed`, `unauthenticated`).
fn unauthenticated(gw: &GatewayProcess, what: &str, send: impl FnOnce() -> Resp) -> Resp {
    refused(
        gw,
        403,
        "AuthenticationFailed",
        "unauthenticated",
        what,
        send,
    )
}

/// A refusal of permission (403 `AuthorizationPermissionMismatch`,
/// `forbidden`).
fn forbidden(gw: &GatewayProcess, what: &str, send: impl FnOnce() -> Resp) -> Resp {
    refused(
        gw,
        403,
        "AuthorizationPermissionMismatch",
        "forbidden",
        what,
        send,
    )
}

// ---------------------------------------------------------------------------
// Service SAS by hand
// ---------------------------------------------------------------------------

/// A service SAS's limits, before it is signed.
struct Sas {
    resource: &'static str,
    permissions: &'static str,
    start: Option<String>,
    expiry: String,
    ip: Option<&'static str>,
    protocol: Option<&'static str>,
}

/// A SAS time `offset` from now (`ahead`) or before it.
fn sas_time(ahead: bool, offset: Duration) -> String {
    let now = SystemTime::now();
    let at = if ahead { now + offset } else { now - offset };
    let text = humantime::format_rfc3339_seconds(at).to_string();
    assert!(parse_sas_time(&text).is_some(), "{text} is a SAS time");
    text
}

impl Sas {
    /// `sp` for a blob, valid for an hour.
    fn blob(permissions: &'static str) -> Sas {
        Sas {
            resource: "b",
            permissions,
            start: None,
            expiry: sas_time(true, Duration::from_secs(3600)),
            ip: None,
            protocol: None,
        }
    }

    /// The query of this SAS signed by `who` for `path` (`/container/blob`
    /// or `/container`, decoded), values percent-encoded.
    fn query(&self, who: &AzureIdentity, path: &str) -> String {
        let sas = ServiceSas {
            version: VERSION.into(),
            resource: self.resource.into(),
            permissions: self.permissions.into(),
            start: self.start.clone(),
            expiry: self.expiry.clone(),
            ip: self.ip.map(String::from),
            protocol: self.protocol.map(String::from),
            encryption_scope: None,
            response_headers: Default::default(),
            signature: [0; 32],
        };
        let to_sign = sas_string_to_sign(&sas, who.account, path, None);
        let sig = AccountKey::from_base64(who.key).unwrap().sign(&to_sign);
        let mut pairs = vec![("sv", VERSION.to_owned()), ("sr", self.resource.into())];
        pairs.push(("sp", self.permissions.into()));
        if let Some(start) = &self.start {
            pairs.push(("st", start.clone()));
        }
        pairs.push(("se", self.expiry.clone()));
        if let Some(ip) = self.ip {
            pairs.push(("sip", ip.into()));
        }
        if let Some(protocol) = self.protocol {
            pairs.push(("spr", protocol.into()));
        }
        pairs.push(("sig", sig));
        pairs
            .iter()
            .map(|(n, v)| format!("{n}={}", pct(v)))
            .collect::<Vec<_>>()
            .join("&")
    }
}

/// A request with a SAS (no `Authorization`): `x-ms-date` and
/// `x-ms-version` as a client sends them.
fn sas_request(
    gw: &GatewayProcess,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let date = http_date(SystemTime::now());
    let mut all = vec![("x-ms-date", date.as_str()), ("x-ms-version", VERSION)];
    all.extend_from_slice(headers);
    gw.req(method, target, &all, body)
}

/// Put Blob with a SAS and `token` in the header `token_header`.
fn sas_put(gw: &GatewayProcess, target: &str, token_header: &str, token: u64, body: &[u8]) -> Resp {
    let token = token.to_string();
    sas_request(
        gw,
        "PUT",
        target,
        &[("x-ms-blob-type", "BlockBlob"), (token_header, &token)],
        body,
    )
}

// ---------------------------------------------------------------------------
// Shared Key
// ---------------------------------------------------------------------------

/// A Put Blob signed with the identity's key is served and stored; the
/// same request signed with another key is refused and writes nothing.
#[test]
fn shared_key_put_is_served_and_a_wrong_key_is_refused() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    ensure_container(&gw, "billing");
    let target = "/fgbilling/billing/t1-doc";
    let resp = put_blob(&gw, &BILLING, target, 1, b"first");
    assert_eq!(resp.status, 201, "put as billing: {}", resp.text());
    assert_body(&get_blob(&gw, &BILLING, target), b"first", "billing reads");

    unauthenticated(&gw, "signed with a wrong key", || {
        let date = http_date(SystemTime::now());
        let headers = shared_key_headers(
            Scheme::SharedKey,
            BILLING.account,
            AUDITOR.key,
            &date,
            "PUT",
            target,
            &[("x-ms-blob-type", "BlockBlob"), (TOKEN, "2")],
            b"second",
        );
        send(&gw, "PUT", target, &headers, b"second")
    });
    assert_body(
        &get_blob(&gw, &OPS, "/fgops/billing/t1-doc"),
        b"first",
        "unchanged after the wrong key",
    );
    assert_eq!(gw.fence("/billing/t1-doc"), Some(1), "the fence not raised");
}

/// An account no identity has is refused, whatever key signed it.
#[test]
fn an_unknown_account_is_refused() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    ensure_container(&gw, "billing");
    let resp = unauthenticated(&gw, "account fgnobody", || {
        let target = "/fgnobody/billing/t2-x";
        let date = http_date(SystemTime::now());
        let headers = shared_key_headers(
            Scheme::SharedKey,
            "fgnobody",
            BILLING.key,
            &date,
            "PUT",
            target,
            &[("x-ms-blob-type", "BlockBlob"), (TOKEN, "1")],
            b"x",
        );
        send(&gw, "PUT", target, &headers, b"x")
    });
    assert!(resp.text().contains("fgnobody"), "{}", resp.text());
    assert_eq!(
        get_blob(&gw, &OPS, "/fgops/billing/t2-x").status,
        404,
        "nothing written"
    );
}

/// A signature over other header values than those sent does not verify.
#[test]
fn a_signature_over_other_headers_is_refused() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    ensure_container(&gw, "billing");
    let target = "/fgbilling/billing/t3-meta";
    unauthenticated(&gw, "x-ms-meta-a signed 1, sent 2", || {
        let date = http_date(SystemTime::now());
        let mut headers = shared_key_headers(
            Scheme::SharedKey,
            BILLING.account,
            BILLING.key,
            &date,
            "PUT",
            target,
            &[
                ("x-ms-blob-type", "BlockBlob"),
                ("x-ms-meta-a", "1"),
                (TOKEN, "1"),
            ],
            b"meta",
        );
        for (name, value) in &mut headers {
            if name == "x-ms-meta-a" {
                *value = "2".into();
            }
        }
        send(&gw, "PUT", target, &headers, b"meta")
    });
    let resp = get_blob(&gw, &OPS, "/fgops/billing/t3-meta");
    assert_eq!(resp.status, 404, "nothing written: {}", resp.text());
    assert_eq!(gw.fence("/billing/t3-meta"), None, "no fence raised");
}

/// A request signed 20 minutes ago (correctly) is refused: the skew
/// allowed is 15 minutes.
#[test]
fn a_skewed_date_is_refused() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    ensure_container(&gw, "billing");
    let target = "/fgbilling/billing/t4-old";
    let resp = unauthenticated(&gw, "x-ms-date 20 minutes old", || {
        let date = http_date(SystemTime::now() - Duration::from_secs(20 * 60));
        let headers = shared_key_headers(
            Scheme::SharedKey,
            BILLING.account,
            BILLING.key,
            &date,
            "PUT",
            target,
            &[("x-ms-blob-type", "BlockBlob"), (TOKEN, "1")],
            b"old",
        );
        send(&gw, "PUT", target, &headers, b"old")
    });
    assert!(resp.text().contains("15 minutes"), "{}", resp.text());
    assert_eq!(get_blob(&gw, &OPS, "/fgops/billing/t4-old").status, 404);
}

/// SharedKeyLite, which the store never sees (the gateway signs with
/// SharedKey), is verified and served.
#[test]
fn shared_key_lite_is_verified_and_served() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    ensure_container(&gw, "billing");
    let target = "/fgbilling/billing/t5-lite";
    let lite = |method: &str, headers: &[(&str, &str)], body: &[u8]| {
        let date = http_date(SystemTime::now());
        let headers = shared_key_headers(
            Scheme::SharedKeyLite,
            BILLING.account,
            BILLING.key,
            &date,
            method,
            target,
            headers,
            body,
        );
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == "Authorization" && v.starts_with("SharedKeyLite fgbilling:")),
            "{headers:?}"
        );
        send(&gw, method, target, &headers, body)
    };
    let resp = lite(
        "PUT",
        &[
            ("x-ms-blob-type", "BlockBlob"),
            ("Content-Type", "text/plain"),
            (TOKEN, "1"),
        ],
        b"lite",
    );
    assert_eq!(resp.status, 201, "SharedKeyLite put: {}", resp.text());
    assert_body(&lite("GET", &[], b""), b"lite", "SharedKeyLite get");
    // Signed with the wrong key, Lite is refused like SharedKey.
    unauthenticated(&gw, "SharedKeyLite with a wrong key", || {
        let date = http_date(SystemTime::now());
        let headers = shared_key_headers(
            Scheme::SharedKeyLite,
            BILLING.account,
            OPS.key,
            &date,
            "GET",
            target,
            &[],
            b"",
        );
        send(&gw, "GET", target, &headers, b"")
    });
}

// ---------------------------------------------------------------------------
// Service SAS
// ---------------------------------------------------------------------------

/// A valid blob SAS writes and reads; each limit of a SAS is enforced by
/// the gateway (the store sees only its own signature); a SAS's
/// permissions narrow its identity's.
#[test]
fn service_sas_is_verified_and_its_limits_enforced() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    ensure_container(&gw, "billing");
    let path = "/billing/t6-sas";
    let target = |query: &str| format!("/fgbilling{path}?{query}");

    let rw = Sas::blob("rw").query(&BILLING, path);
    let resp = sas_put(&gw, &target(&rw), TOKEN, 1, b"by sas");
    assert_eq!(resp.status, 201, "SAS put: {}", resp.text());
    assert_body(
        &sas_request(&gw, "GET", &target(&rw), &[], b""),
        b"by sas",
        "SAS get",
    );

    let mut expired = Sas::blob("rw");
    expired.expiry = sas_time(false, Duration::from_secs(3600));
    let resp = unauthenticated(&gw, "expired SAS", || {
        sas_put(
            &gw,
            &target(&expired.query(&BILLING, path)),
            TOKEN,
            2,
            b"late",
        )
    });
    assert!(resp.text().contains("expired"), "{}", resp.text());

    // Signed for r, sent as rw.
    let read_only = Sas::blob("r").query(&BILLING, path);
    let tampered = read_only.replace("sp=r&", "sp=rw&");
    assert_ne!(tampered, read_only);
    unauthenticated(&gw, "sp changed after signing", || {
        sas_put(&gw, &target(&tampered), TOKEN, 2, b"tampered")
    });

    unauthenticated(&gw, "SAS with a stored access policy", || {
        sas_request(&gw, "GET", &target(&format!("{rw}&si=policy")), &[], b"")
    });

    let account_sas = format!(
        "sv={VERSION}&ss=b&srt=sco&sp=rw&se={}&sig={}",
        pct(&sas_time(true, Duration::from_secs(3600))),
        pct(&AccountKey::from_base64(BILLING.key)
            .unwrap()
            .sign("account"))
    );
    unauthenticated(&gw, "account SAS", || {
        sas_request(&gw, "GET", &target(&account_sas), &[], b"")
    });

    let mut not_yet = Sas::blob("rw");
    not_yet.start = Some(sas_time(true, Duration::from_secs(3600)));
    unauthenticated(&gw, "st in the future", || {
        sas_request(
            &gw,
            "GET",
            &target(&not_yet.query(&BILLING, path)),
            &[],
            b"",
        )
    });

    let mut elsewhere = Sas::blob("rw");
    elsewhere.ip = Some("10.0.0.1");
    unauthenticated(&gw, "sip=10.0.0.1", || {
        sas_request(
            &gw,
            "GET",
            &target(&elsewhere.query(&BILLING, path)),
            &[],
            b"",
        )
    });
    let mut loopback = Sas::blob("rw");
    loopback.ip = Some("127.0.0.0-127.0.0.255");
    assert_body(
        &sas_request(
            &gw,
            "GET",
            &target(&loopback.query(&BILLING, path)),
            &[],
            b"",
        ),
        b"by sas",
        "sip=127.0.0.0-127.0.0.255",
    );

    let mut https = Sas::blob("rw");
    https.protocol = Some("https");
    unauthenticated(&gw, "spr=https over plain HTTP", || {
        sas_request(&gw, "GET", &target(&https.query(&BILLING, path)), &[], b"")
    });

    // Billing may write (and so delete) the blob; its SAS says rw only.
    forbidden(&gw, "DELETE with sp=rw", || {
        sas_request(&gw, "DELETE", &target(&rw), &[(TOKEN, "2")], b"")
    });

    assert_body(
        &get_blob(&gw, &OPS, "/fgops/billing/t6-sas"),
        b"by sas",
        "the refused requests changed nothing",
    );
    assert_eq!(
        gw.fence(path),
        Some(1),
        "no refused request raised the fence"
    );
}

// ---------------------------------------------------------------------------
// Mapping, copies, fences
// ---------------------------------------------------------------------------

/// One blob, one fence, whichever identity's account path names it.
#[test]
fn accounts_map_to_one_blob_and_one_fence() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    ensure_container(&gw, "billing");
    let resp = put_blob(&gw, &BILLING, "/fgbilling/billing/t7-doc", 5, b"five");
    assert_eq!(resp.status, 201, "billing put: {}", resp.text());
    assert_body(
        &get_blob(&gw, &OPS, "/fgops/billing/t7-doc"),
        b"five",
        "ops reads billing's blob",
    );
    assert_eq!(gw.fence("/billing/t7-doc"), Some(5));
    let (before, forwarded) = (count(&gw, "stale_token"), count(&gw, "forwarded"));
    let resp = put_blob(&gw, &OPS, "/fgops/billing/t7-doc", 4, b"four");
    assert_azure_error(&resp, 409, "stale_token", "ops with token 4 after 5");
    assert_eq!(count(&gw, "stale_token"), before + 1.0, "{}", gw.metrics());
    assert_eq!(count(&gw, "forwarded"), forwarded, "{}", gw.metrics());
    assert_body(
        &get_blob(&gw, &BILLING, "/fgbilling/billing/t7-doc"),
        b"five",
        "unchanged after the stale write",
    );
    assert_eq!(gw.fence("/billing/t7-doc"), Some(5));
}

/// A copy's source is read with the gateway's key: it must be one the
/// identity may read, in its own account's path, behind the gateway.
#[test]
fn copy_sources_are_authorised_as_reads() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    for container in ["billing", "shared", "private"] {
        ensure_container(&gw, container);
    }
    let resp = put_blob(&gw, &OPS, "/fgops/shared/t8-src", 1, b"source");
    assert_eq!(resp.status, 201, "ops puts the source: {}", resp.text());
    let resp = put_blob(&gw, &OPS, "/fgops/private/t8-src", 1, b"private");
    assert_eq!(
        resp.status,
        201,
        "ops puts the private blob: {}",
        resp.text()
    );

    let copy = |source: &str, token: &str| {
        request(
            &gw,
            &BILLING,
            "PUT",
            "/fgbilling/billing/t8-copy",
            &[("x-ms-copy-source", source), (TOKEN, token)],
            b"",
        )
    };
    let source = format!("http://{}/fgbilling/shared/t8-src", gw.data_addr());
    let resp = copy(&source, "1");
    assert_eq!(resp.status, 202, "copy from shared: {}", resp.text());
    let mut last = None;
    let copied = wait_until(Duration::from_secs(10), || {
        let resp = get_blob(&gw, &BILLING, "/fgbilling/billing/t8-copy");
        let done = resp.status == 200 && resp.body == b"source";
        last = Some(resp);
        done
    });
    assert!(copied, "the copy has the source's content: {last:?}");

    let private = format!("http://{}/fgbilling/private/t8-src", gw.data_addr());
    forbidden(&gw, "copy from a container billing may not read", || {
        copy(&private, "2")
    });
    forbidden(&gw, "copy from another account's path", || {
        copy("http://x/fgops/shared/t8-src", "2")
    });
    forbidden(&gw, "copy from another storage account's container", || {
        copy("https://other.blob.core.windows.net/container/b", "2")
    });
    // The same with a one-letter container, which is no account name.
    forbidden(&gw, "copy from another storage account", || {
        copy("https://other.blob.core.windows.net/c/b", "2")
    });
    assert_body(
        &get_blob(&gw, &BILLING, "/fgbilling/billing/t8-copy"),
        b"source",
        "the refused copies changed nothing",
    );
}

/// An identity that may only read cannot raise a fence with a read.
#[test]
fn a_reader_cannot_raise_a_fence() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    ensure_container(&gw, "billing");
    let resp = put_blob(&gw, &BILLING, "/fgbilling/billing/t9-doc", 5, b"five");
    assert_eq!(resp.status, 201, "billing put: {}", resp.text());
    let target = "/fgauditor/billing/t9-doc";
    assert_body(
        &get_blob(&gw, &AUDITOR, target),
        b"five",
        "the auditor reads",
    );
    forbidden(&gw, "auditor GET with token 6 above 5", || {
        request(&gw, &AUDITOR, "GET", target, &[(TOKEN, "6")], b"")
    });
    assert_eq!(gw.fence("/billing/t9-doc"), Some(5), "the fence not raised");
}

/// With the token in `X-Fencing-Token` (no `x-ms-*` header), Shared Key
/// cannot sign it and is refused, saying so; a SAS, which signs no
/// header, carries it.
#[test]
fn a_token_header_shared_key_cannot_sign_needs_a_sas() {
    let (gw, _dir) = azure_custody_gateway(&["--token-header", "X-Fencing-Token"]);
    ensure_container_with(&gw, "X-Fencing-Token");
    let target = "/fgbilling/billing/t10-doc";
    let resp = unauthenticated(&gw, "Shared Key with X-Fencing-Token", || {
        request(
            &gw,
            &BILLING,
            "PUT",
            target,
            &[("x-ms-blob-type", "BlockBlob"), ("X-Fencing-Token", "1")],
            b"shared key",
        )
    });
    let text = resp.text();
    assert!(
        text.contains("x-fencing-token") && text.contains("SAS"),
        "the refusal says why: {text}"
    );
    let sas = Sas::blob("rw").query(&BILLING, "/billing/t10-doc");
    let resp = sas_put(
        &gw,
        &format!("{target}?{sas}"),
        "X-Fencing-Token",
        1,
        b"by sas",
    );
    assert_eq!(
        resp.status,
        201,
        "SAS put with X-Fencing-Token: {}",
        resp.text()
    );
    assert_body(
        &sas_request(&gw, "GET", &format!("{target}?{sas}"), &[], b""),
        b"by sas",
        "SAS get",
    );
    assert_eq!(gw.fence("/billing/t10-doc"), Some(1));
}

/// [`ensure_container`] for a gateway whose token header is `header`:
/// Shared Key cannot sign it, so OPS creates the container with a
/// container SAS.
fn ensure_container_with(gw: &GatewayProcess, header: &str) {
    let mut sas = Sas::blob("rwdlc");
    sas.resource = "c";
    let query = sas.query(&OPS, "/billing");
    let resp = sas_request(
        gw,
        "PUT",
        &format!("/fgops/billing?restype=container&{query}"),
        &[(header, "1")],
        b"",
    );
    let exists =
        resp.status == 409 && resp.header("x-ms-error-code") == Some("ContainerAlreadyExists");
    assert!(
        resp.status == 201 || exists,
        "create container billing with a SAS: {} {:?} {}",
        resp.status,
        resp.header("x-ms-error-code"),
        resp.text()
    );
}

/// Each kind of refusal is counted under its outcome, and none reaches
/// the store: `forwarded` stays where it was while they are refused.
#[test]
fn every_refusal_is_counted_and_not_forwarded() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    ensure_container(&gw, "billing");
    ensure_container(&gw, "shared");
    let target = "/fgbilling/billing/t11-doc";
    let resp = put_blob(&gw, &BILLING, target, 1, b"one");
    assert_eq!(resp.status, 201, "billing put: {}", resp.text());

    let (unauth, forwarded) = (
        support::outcome(&gw.metrics(), "unauthenticated"),
        count(&gw, "forwarded"),
    );
    let forbidden_as = |identity: &str| {
        let series =
            format!("fencegate_requests_total{{outcome=\"forbidden\",identity=\"{identity}\"}}");
        metric(&gw.metrics(), &series).unwrap_or(0.0)
    };
    let (billing, auditor) = (forbidden_as("billing"), forbidden_as("auditor"));
    // A wrong key, an unknown account, a skewed date, a bad SAS: none
    // authenticated, so counted under no identity.
    let wrong_key = || {
        let date = http_date(SystemTime::now());
        let headers = shared_key_headers(
            Scheme::SharedKey,
            BILLING.account,
            OPS.key,
            &date,
            "GET",
            target,
            &[],
            b"",
        );
        send(&gw, "GET", target, &headers, b"")
    };
    assert_azure_error(&wrong_key(), 403, "AuthenticationFailed", "wrong key");
    let unknown = {
        let date = http_date(SystemTime::now());
        let target = "/fgnobody/billing/t11-doc";
        let headers = shared_key_headers(
            Scheme::SharedKey,
            "fgnobody",
            BILLING.key,
            &date,
            "GET",
            target,
            &[],
            b"",
        );
        send(&gw, "GET", target, &headers, b"")
    };
    assert_azure_error(&unknown, 403, "AuthenticationFailed", "unknown account");
    let skewed = {
        let date = http_date(SystemTime::now() + Duration::from_secs(20 * 60));
        let headers = shared_key_headers(
            Scheme::SharedKey,
            BILLING.account,
            BILLING.key,
            &date,
            "GET",
            target,
            &[],
            b"",
        );
        send(&gw, "GET", target, &headers, b"")
    };
    assert_azure_error(&skewed, 403, "AuthenticationFailed", "20 minutes ahead");
    let mut expired = Sas::blob("r");
    expired.expiry = sas_time(false, Duration::from_secs(60));
    let sas = expired.query(&BILLING, "/billing/t11-doc");
    let resp = sas_request(&gw, "GET", &format!("{target}?{sas}"), &[], b"");
    assert_azure_error(&resp, 403, "AuthenticationFailed", "expired SAS");
    assert_eq!(
        support::outcome(&gw.metrics(), "unauthenticated"),
        unauth + 4.0,
        "four unauthenticated\n{}",
        gw.metrics()
    );

    // Not allowed: a write outside billing's prefixes, a reader's token;
    // counted under the identity that sent each.
    let resp = put_blob(&gw, &BILLING, "/fgbilling/shared/t11-doc", 1, b"no");
    assert_azure_error(
        &resp,
        403,
        "AuthorizationPermissionMismatch",
        "billing writes shared",
    );
    let resp = request(
        &gw,
        &AUDITOR,
        "GET",
        "/fgauditor/billing/t11-doc",
        &[(TOKEN, "2")],
        b"",
    );
    assert_azure_error(
        &resp,
        403,
        "AuthorizationPermissionMismatch",
        "auditor raises",
    );
    assert_eq!(
        (forbidden_as("billing"), forbidden_as("auditor")),
        (billing + 1.0, auditor + 1.0),
        "one forbidden each\n{}",
        gw.metrics()
    );
    assert_eq!(
        count(&gw, "forwarded"),
        forwarded,
        "none forwarded\n{}",
        gw.metrics()
    );
    assert_body(
        &get_blob(&gw, &OPS, "/fgops/billing/t11-doc"),
        b"one",
        "unchanged",
    );
    assert_eq!(gw.fence("/billing/t11-doc"), Some(1));
}

/// What Azurite cannot show, against the gateway's own verifier: a Put
/// Blob From URL's source is authorised as a read like a copy's, and a
/// SAS for a blob version (`sr=bv`) is verified over its `versionid`. What
/// Azurite then answers is its own (it supports neither); the test shows
/// the gateway's decision: refused before anything, or forwarded.
#[test]
fn put_blob_from_url_and_version_sas_are_decided_by_the_gateway() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    for container in ["billing", "private"] {
        ensure_container(&gw, container);
    }
    let from_url = |source: &str| {
        request(
            &gw,
            &BILLING,
            "PUT",
            "/fgbilling/billing/t12-from-url",
            &[
                ("x-ms-copy-source", source),
                ("x-ms-blob-type", "BlockBlob"),
                (TOKEN, "1"),
            ],
            b"",
        )
    };
    let private = format!("http://{}/fgbilling/private/t12-src", gw.data_addr());
    forbidden(
        &gw,
        "Put Blob From URL of a source billing may not read",
        || from_url(&private),
    );
    let readable = format!("http://{}/fgbilling/billing/t12-src", gw.data_addr());
    let before = count(&gw, "forwarded");
    let resp = from_url(&readable);
    assert_ne!(
        resp.header("x-ms-error-code"),
        Some("AuthorizationPermissionMismatch")
    );
    assert_eq!(count(&gw, "forwarded"), before + 1.0, "{}", resp.text());

    let version = "2026-11-27T08:00:00.0000000Z";
    let sas = ServiceSas {
        version: VERSION.into(),
        resource: "bv".into(),
        permissions: "r".into(),
        start: None,
        expiry: sas_time(true, Duration::from_secs(3600)),
        ip: None,
        protocol: None,
        encryption_scope: None,
        response_headers: Default::default(),
        signature: [0; 32],
    };
    let to_sign = sas_string_to_sign(&sas, BILLING.account, "/billing/t12-src", Some(version));
    let sig = AccountKey::from_base64(BILLING.key).unwrap().sign(&to_sign);
    let query = |versionid: &str| {
        format!(
            "/fgbilling/billing/t12-src?versionid={}&sv={VERSION}&sr=bv&sp=r&se={}&sig={}",
            pct(versionid),
            pct(&sas.expiry),
            pct(&sig)
        )
    };
    let before = count(&gw, "forwarded");
    let resp = sas_request(&gw, "GET", &query(version), &[], b"");
    assert_ne!(resp.header("x-ms-error-code"), Some("AuthenticationFailed"));
    assert_eq!(count(&gw, "forwarded"), before + 1.0, "{}", resp.text());
    unauthenticated(&gw, "a version SAS for another version", || {
        sas_request(&gw, "GET", &query("2026-11-27T09:00:00.0000000Z"), &[], b"")
    });
}

/// What the store receives, seen by a backend standing in for it: the
/// target without the client's account or SAS, the upstream's `Host`, and
/// a Shared Key signature of the store's account over exactly the fields
/// that arrived, which the store's key verifies.
#[test]
fn the_store_receives_the_stores_signature_over_what_arrives() {
    let backend = support::Backend::start();
    let (gw, _dir) = support::azurite::azure_custody_gateway_via(backend.addr(), &[]);
    let sas = Sas::blob("rw");
    let target = format!(
        "/fgbilling/billing/t13?comp=block&blockid=QQ%3D%3D&{}",
        sas.query(&BILLING, "/billing/t13")
    );
    let resp = sas_request(&gw, "PUT", &target, &[(TOKEN, "3")], b"block");
    assert!(resp.status < 300, "{} {}", resp.status, resp.text());
    let record = backend
        .records()
        .into_iter()
        .last()
        .expect("the backend got the request");
    assert_eq!(
        record.target,
        "/fgstore/billing/t13?comp=block&blockid=QQ%3D%3D"
    );
    assert_eq!(
        record.header("host"),
        Some(backend.addr().to_string().as_str())
    );
    assert_eq!(record.header(TOKEN), Some("3"));
    let authorization = record.header("authorization").expect("signed");
    let (scheme, rest) = authorization.split_once(' ').unwrap();
    let (account, signature) = rest.split_once(':').unwrap();
    assert_eq!(
        (scheme, account),
        ("SharedKey", support::azurite::STORE_ACCOUNT)
    );
    let fields: Vec<(&str, &[u8])> = record
        .headers
        .iter()
        .filter(|(name, _)| name != "authorization")
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .collect();
    let (path, query) = record.target.split_once('?').unwrap();
    let to_sign = fencegate::dialect::shared_key::string_to_sign(
        Scheme::SharedKey,
        "PUT",
        support::azurite::STORE_ACCOUNT,
        path,
        query,
        &fields,
    )
    .unwrap();
    let store_key = AccountKey::from_base64(support::azurite::STORE_KEY).unwrap();
    assert_eq!(store_key.sign(&to_sign), signature, "{to_sign}");
}

// ---------------------------------------------------------------------------
// Deny by default (issue 49, item 2): one reading of every operation
// ---------------------------------------------------------------------------

/// A request to Azurite itself, signed with the store's key (which only
/// the gateway holds): what the store holds, seen around the gateway.
fn at_store(method: &str, target: &str, headers: &[(&str, &str)]) -> Resp {
    let date = http_date(SystemTime::now());
    let headers = shared_key_headers(
        Scheme::SharedKey,
        support::azurite::STORE_ACCOUNT,
        support::azurite::STORE_KEY,
        &date,
        method,
        target,
        headers,
        b"",
    );
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    support::http(
        support::azurite::azurite_for_custody(),
        method,
        target,
        &headers,
        b"",
    )
}

/// A refusal by the operation table: Azure's `code`, counted as
/// `other_refusal`, not forwarded.
fn not_read(gw: &GatewayProcess, code: &str, what: &str, send: impl FnOnce() -> Resp) -> Resp {
    refused(gw, 400, code, "other_refusal", what, send)
}

/// Azurite runs an unknown `comp` as the operation without one (a `PUT`
/// with `x-ms-blob-type` as Put Blob, which overwrites the blob), a
/// parameter name in another case as no parameter, and ignores fields it
/// does not know: the gateway forwards none of them, and says which
/// part it did not understand.
#[test]
fn deny_by_default_an_unknown_comp_parameter_or_field_never_reaches_the_store() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    ensure_container(&gw, "billing");
    let target = "/fgbilling/billing/t14-doc";
    let resp = put_blob(&gw, &BILLING, target, 1, b"kept");
    assert_eq!(resp.status, 201, "{}", resp.text());
    let put_with = |query: &str, extra: &[(&str, &str)]| {
        let mut headers = vec![("x-ms-blob-type", "BlockBlob"), (TOKEN, "1")];
        headers.extend_from_slice(extra);
        request(
            &gw,
            &BILLING,
            "PUT",
            &format!("{target}{query}"),
            &headers,
            b"overwritten",
        )
    };
    // (a) A comp no row takes, and comp spelled in another case.
    let resp = not_read(&gw, "InvalidQueryParameterValue", "comp=bogus", || {
        put_with("?comp=bogus", &[])
    });
    assert!(resp.text().contains("comp=bogus"), "{}", resp.text());
    let resp = not_read(&gw, "UnsupportedQueryParameter", "Comp=tier", || {
        put_with("?Comp=tier", &[])
    });
    assert!(resp.text().contains("Comp"), "{}", resp.text());
    not_read(&gw, "UnsupportedQueryParameter", "comp twice", || {
        put_with("?comp=block&blockid=QQ%3D%3D&comp=tier", &[])
    });
    // (b) An x-ms-* field Put Blob does not take.
    let resp = not_read(&gw, "UnsupportedHeader", "an unlisted field", || {
        put_with("", &[("x-ms-copy-source-authorization", "Bearer x")])
    });
    assert!(
        resp.text().contains("x-ms-copy-source-authorization"),
        "{}",
        resp.text()
    );
    // Selecting headers no row takes together, and one named in
    // Connection (dropped on the way: the store would read another
    // operation than the gateway did).
    not_read(&gw, "UnsupportedHeader", "requires-sync alone", || {
        put_with("", &[("x-ms-requires-sync", "true")])
    });
    not_read(
        &gw,
        "UnsupportedHeader",
        "x-ms-blob-type hop-by-hop",
        || put_with("", &[("connection", "x-ms-blob-type")]),
    );
    // A batch (its requests would be signed unread) and a reader's GET
    // that names a lease action.
    refused(
        &gw,
        405,
        "UnsupportedHttpVerb",
        "other_refusal",
        "batch",
        || {
            request(
                &gw,
                &OPS,
                "POST",
                "/fgops/billing?restype=container&comp=batch",
                &[("content-type", "multipart/mixed; boundary=b")],
                b"--b--",
            )
        },
    );
    // Query Blob Contents: a read sent as a POST, which the fencing core
    // would take for a write; refused, as S3's SelectObjectContent is.
    refused(
        &gw,
        405,
        "UnsupportedHttpVerb",
        "other_refusal",
        "query blob contents",
        || {
            request(
                &gw,
                &AUDITOR,
                "POST",
                "/fgauditor/billing/t14-doc?comp=query",
                &[("content-type", "application/xml")],
                b"<QueryRequest><QueryType>SQL</QueryType><Expression>SELECT * from BlobStorage</Expression></QueryRequest>",
            )
        },
    );
    not_read(&gw, "UnsupportedHeader", "GET with a lease action", || {
        request(
            &gw,
            &AUDITOR,
            "GET",
            "/fgauditor/billing/t14-doc",
            &[("x-ms-lease-action", "break")],
            b"",
        )
    });
    // Nothing reached the store: the blob is as it was, unleased.
    let stored = at_store(
        "GET",
        &format!("/{}/billing/t14-doc", support::azurite::STORE_ACCOUNT),
        &[],
    );
    assert_body(&stored, b"kept", "the store's blob");
    assert_eq!(stored.header("x-ms-lease-state"), Some("available"));
    assert_eq!(gw.fence("/billing/t14-doc"), Some(1));
}

/// Tier, immutability, legal hold, expiry and undelete need `admin`: a
/// writer's request for them is refused before the store sees it, and
/// a write carrying the tier needs `admin` too.
#[test]
fn deny_by_default_admin_comps_by_a_writer_are_refused() {
    let (gw, _dir) = azure_custody_gateway(&[]);
    ensure_container(&gw, "billing");
    let target = "/fgbilling/billing/t15-doc";
    let resp = put_blob(&gw, &BILLING, target, 1, b"kept");
    assert_eq!(resp.status, 201, "{}", resp.text());
    for (method, comp, headers) in [
        ("PUT", "tier", &[("x-ms-access-tier", "Archive")][..]),
        (
            "PUT",
            "immutabilityPolicies",
            &[
                (
                    "x-ms-immutability-policy-until-date",
                    "Fri, 01 Jan 2100 00:00:00 GMT",
                ),
                ("x-ms-immutability-policy-mode", "Locked"),
            ][..],
        ),
        ("DELETE", "immutabilityPolicies", &[][..]),
        ("PUT", "legalhold", &[("x-ms-legal-hold", "true")][..]),
        (
            "PUT",
            "expiry",
            &[
                ("x-ms-expiry-option", "RelativeToNow"),
                ("x-ms-expiry-time", "1"),
            ][..],
        ),
        ("PUT", "undelete", &[][..]),
    ] {
        let mut headers = headers.to_vec();
        headers.push((TOKEN, "1"));
        forbidden(&gw, comp, || {
            request(
                &gw,
                &BILLING,
                method,
                &format!("{target}?comp={comp}"),
                &headers,
                b"",
            )
        });
    }
    // Put Blob setting the tier or a legal hold: admin's too.
    for field in [("x-ms-access-tier", "Archive"), ("x-ms-legal-hold", "true")] {
        forbidden(&gw, field.0, || {
            request(
                &gw,
                &BILLING,
                "PUT",
                target,
                &[("x-ms-blob-type", "BlockBlob"), (TOKEN, "1"), field],
                b"overwritten",
            )
        });
    }
    // The store's blob: as written, in its default tier.
    let stored = at_store(
        "GET",
        &format!("/{}/billing/t15-doc", support::azurite::STORE_ACCOUNT),
        &[],
    );
    assert_body(&stored, b"kept", "the store's blob");
    assert_ne!(stored.header("x-ms-access-tier"), Some("Archive"));
    // An admin may: Azurite moves the blob to the cool tier.
    let resp = request(
        &gw,
        &OPS,
        "PUT",
        "/fgops/billing/t15-doc?comp=tier",
        &[("x-ms-access-tier", "Cool"), (TOKEN, "1")],
        b"",
    );
    assert!(resp.status < 300, "{} {}", resp.status, resp.text());
    let stored = at_store(
        "HEAD",
        &format!("/{}/billing/t15-doc", support::azurite::STORE_ACCOUNT),
        &[],
    );
    assert_eq!(stored.header("x-ms-access-tier"), Some("Cool"));
}

/// One request of the conformance run: what is sent, and whether Azurite
/// implements the operation (then it must succeed; else the store's own
/// answer, whatever it is, shows that the gateway forwarded it).
struct Step {
    method: &'static str,
    target: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    implemented: bool,
}

fn step(
    method: &'static str,
    target: String,
    headers: &[(&'static str, &str)],
    body: &[u8],
    implemented: bool,
) -> Step {
    Step {
        method,
        target,
        headers: headers.iter().map(|(n, v)| (*n, v.to_string())).collect(),
        body: body.to_vec(),
        implemented,
    }
}

/// The requests that exercise `op` (by `method`), an admin's, at
/// `/fgops/conformance`.
fn conformance_steps(
    gw: &GatewayProcess,
    op: &str,
    method: &'static str,
    level: fencegate::dialect::azure_operations::Level,
) -> Vec<Step> {
    let account = "/fgops".to_owned();
    let container = "/fgops/conformance".to_owned();
    let blob = format!("{container}/b");
    let source = format!("http://{}{blob}", gw.data_addr());
    let at_level = match level {
        fencegate::dialect::azure_operations::Level::Account => account.clone(),
        fencegate::dialect::azure_operations::Level::Container => container.clone(),
        fencegate::dialect::azure_operations::Level::Blob => blob.clone(),
    };
    let w = |target: String, headers: &[(&'static str, &str)], body: &[u8], implemented: bool| {
        let mut with_token = headers.to_vec();
        with_token.push((TOKEN, "1"));
        step(method, target, &with_token, body, implemented)
    };
    let r = |target: String, headers: &[(&'static str, &str)], implemented: bool| {
        step(method, target, headers, b"", implemented)
    };
    let preflight = |target: String| {
        step(
            method,
            target,
            &[
                ("origin", "http://example.com"),
                ("access-control-request-method", "GET"),
            ],
            b"",
            false,
        )
    };
    let tags_xml = b"<?xml version=\"1.0\" encoding=\"utf-8\"?><Tags><TagSet><Tag><Key>k</Key><Value>v</Value></Tag></TagSet></Tags>";
    let until = "Fri, 01 Jan 2100 00:00:00 GMT";
    let lease = |target: String| {
        vec![
            w(
                target.clone(),
                &[
                    ("x-ms-lease-action", "acquire"),
                    ("x-ms-lease-duration", "15"),
                ],
                b"",
                true,
            ),
            w(
                target,
                &[
                    ("x-ms-lease-action", "break"),
                    ("x-ms-lease-break-period", "0"),
                ],
                b"",
                true,
            ),
        ]
    };
    match op {
        "List Containers" => vec![r(format!("{account}?comp=list"), &[], true)],
        "Get Blob Service Properties" => vec![r(format!("{account}?restype=service&comp=properties"), &[], true)],
        "Set Blob Service Properties" => vec![w(
            format!("{account}?restype=service&comp=properties"),
            &[("content-type", "application/xml")],
            b"<?xml version=\"1.0\" encoding=\"utf-8\"?><StorageServiceProperties><DefaultServiceVersion>2021-08-06</DefaultServiceVersion></StorageServiceProperties>",
            true,
        )],
        "Get Blob Service Stats" => vec![r(format!("{account}?restype=service&comp=stats"), &[], false)],
        "Get Account Information" => vec![r(
            format!("{at_level}?restype=account&comp=properties"),
            &[],
            true,
        )],
        "Find Blobs by Tags" => vec![r(format!("{account}?comp=blobs&where=%22k%22%3D%27v%27"), &[], true)],
        "Preflight Blob Request" => vec![preflight(at_level)],
        "Create Container" => vec![w(format!("{container}?restype=container"), &[], b"", true)],
        "Get Container Properties" => vec![r(format!("{container}?restype=container"), &[], true)],
        "Get Container Metadata" => vec![r(format!("{container}?restype=container&comp=metadata"), &[], true)],
        "Set Container Metadata" => vec![w(format!("{container}?restype=container&comp=metadata"), &[("x-ms-meta-a", "b")], b"", true)],
        "Get Container ACL" => vec![r(format!("{container}?restype=container&comp=acl"), &[], true)],
        "Set Container ACL" => vec![w(format!("{container}?restype=container&comp=acl"), &[], b"", true)],
        "Lease Container" => lease(format!("{container}?restype=container&comp=lease")),
        "List Blobs" => vec![r(format!("{container}?restype=container&comp=list&prefix=b"), &[], true)],
        "Find Blobs by Tags in Container" => vec![r(format!("{container}?restype=container&comp=blobs&where=%22k%22%3D%27v%27"), &[], true)],
        "Delete Container" => vec![w(format!("{container}?restype=container"), &[], b"", true)],
        "Put Blob" => vec![
            w(blob.clone(), &[("x-ms-blob-type", "BlockBlob"), ("x-ms-meta-a", "b")], b"blob", true),
            w(format!("{container}/p"), &[("x-ms-blob-type", "PageBlob"), ("x-ms-blob-content-length", "1024")], b"", true),
            w(format!("{container}/a"), &[("x-ms-blob-type", "AppendBlob")], b"", true),
        ],
        "Get Blob" => vec![r(blob, &[("x-ms-range", "bytes=0-1")], true)],
        "Get Blob Properties" => vec![r(blob, &[], true)],
        "Get Blob Metadata" => vec![r(format!("{blob}?comp=metadata"), &[], true)],
        "Set Blob Properties" => vec![w(format!("{blob}?comp=properties"), &[("x-ms-blob-content-type", "text/plain")], b"", true)],
        "Set Blob Metadata" => vec![w(format!("{blob}?comp=metadata"), &[("x-ms-meta-c", "d")], b"", true)],
        "Get Blob Tags" => vec![r(format!("{blob}?comp=tags"), &[], true)],
        "Set Blob Tags" => vec![w(format!("{blob}?comp=tags"), &[("content-type", "application/xml")], tags_xml, true)],
        "Delete Blob" => vec![
            step("PUT", format!("{container}/gone"), &[("x-ms-blob-type", "BlockBlob"), (TOKEN, "1")], b"x", true),
            w(format!("{container}/gone"), &[], b"", true),
        ],
        "Undelete Blob" => vec![w(format!("{container}/gone?comp=undelete"), &[], b"", false)],
        "Snapshot Blob" => vec![w(format!("{blob}?comp=snapshot"), &[], b"", true)],
        "Copy Blob" => vec![w(format!("{container}/copy"), &[("x-ms-copy-source", &source)], b"", true)],
        "Copy Blob From URL" => vec![w(format!("{container}/copy-sync"), &[("x-ms-copy-source", &source), ("x-ms-requires-sync", "true")], b"", true)],
        "Abort Copy Blob" => vec![w(format!("{container}/copy?comp=copy&copyid=00000000-0000-0000-0000-000000000000"), &[("x-ms-copy-action", "abort")], b"", false)],
        "Set Blob Tier" => vec![w(format!("{blob}?comp=tier"), &[("x-ms-access-tier", "Cool")], b"", true)],
        "Lease Blob" => lease(format!("{blob}?comp=lease")),
        "Set Blob Expiry" => vec![w(format!("{blob}?comp=expiry"), &[("x-ms-expiry-option", "NeverExpire")], b"", false)],
        "Set Blob Immutability Policy" => vec![w(format!("{blob}?comp=immutabilityPolicies"), &[("x-ms-immutability-policy-until-date", until), ("x-ms-immutability-policy-mode", "Unlocked")], b"", false)],
        "Delete Blob Immutability Policy" => vec![w(format!("{blob}?comp=immutabilityPolicies"), &[], b"", false)],
        "Set Blob Legal Hold" => vec![w(format!("{blob}?comp=legalhold"), &[("x-ms-legal-hold", "false")], b"", false)],
        "Put Blob From URL" => vec![w(format!("{container}/from-url"), &[("x-ms-blob-type", "BlockBlob"), ("x-ms-copy-source", &source)], b"", false)],
        "Put Block" => vec![w(format!("{container}/staged?comp=block&blockid=QQ%3D%3D"), &[], b"block", true)],
        "Put Block From URL" => vec![w(format!("{container}/staged?comp=block&blockid=Qg%3D%3D"), &[("x-ms-copy-source", &source)], b"", false)],
        "Put Block List" => vec![w(
            format!("{container}/staged?comp=blocklist"),
            &[("content-type", "application/xml")],
            b"<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList><Latest>QQ==</Latest></BlockList>",
            true,
        )],
        "Get Block List" => vec![r(format!("{container}/staged?comp=blocklist&blocklisttype=all"), &[], true)],
        "Put Page" => vec![w(format!("{container}/p?comp=page"), &[("x-ms-page-write", "update"), ("x-ms-range", "bytes=0-511")], &[7; 512], true)],
        "Put Page From URL" => vec![w(format!("{container}/p?comp=page"), &[("x-ms-page-write", "update"), ("x-ms-range", "bytes=512-1023"), ("x-ms-source-range", "bytes=0-511"), ("x-ms-copy-source", &source)], b"", false)],
        "Get Page Ranges" => vec![r(format!("{container}/p?comp=pagelist"), &[], true)],
        "Incremental Copy Blob" => vec![w(format!("{container}/incremental?comp=incrementalcopy"), &[("x-ms-copy-source", &format!("{source}?snapshot=2026-01-01T00:00:00.0000000Z"))], b"", false)],
        "Append Block" => vec![w(format!("{container}/a?comp=appendblock"), &[], b"appended", true)],
        "Append Block From URL" => vec![w(format!("{container}/a?comp=appendblock"), &[("x-ms-copy-source", &source)], b"", false)],
        "Seal Append Blob" => vec![w(format!("{container}/a?comp=seal"), &[], b"", true)],
        other => panic!("no conformance request for the row {other:?}: add one"),
    }
}

/// Every row of the Azure table, sent by an admin identity through the
/// gateway under custody to Azurite: each is forwarded (no refusal of the
/// gateway's, `forwarded` counts it), and each operation Azurite
/// implements succeeds there. Rows run in an order that makes what they
/// need (the container, the blobs), Delete Container last.
#[test]
fn deny_by_default_every_row_of_the_azure_table_reaches_azurite() {
    use fencegate::dialect::azure_operations::operations;
    // A CORS preflight carries no credentials: forwarded (unsigned) when
    // anonymous clients may read.
    let (gw, _dir) = azure_custody_gateway(&["--anonymous-clients", "read"]);
    let mut rows: Vec<_> = operations()
        .flat_map(|op| {
            op.methods
                .iter()
                .map(move |method| (op.name, *method, op.level))
        })
        .collect();
    let first = ["Create Container", "Put Blob", "Put Block", "Delete Blob"];
    let last = ["Delete Container"];
    rows.sort_by_key(|(name, _, _)| {
        if let Some(at) = first.iter().position(|f| f == name) {
            at as i32 - 10
        } else if last.contains(name) {
            10
        } else {
            0
        }
    });
    let mut seen = Vec::new();
    for (name, method, level) in rows {
        for step in conformance_steps(&gw, name, method, level) {
            let before = count(&gw, "forwarded");
            let headers: Vec<(&str, &str)> =
                step.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let resp = if step.method == "OPTIONS" {
                gw.req(step.method, &step.target, &headers, b"")
            } else {
                request(&gw, &OPS, step.method, &step.target, &headers, &step.body)
            };
            let what = format!("{name} ({} {})", step.method, step.target);
            let code = resp.header("x-ms-error-code").unwrap_or("").to_owned();
            // Azurite answers some with the codes the gateway refuses
            // with (InvalidQueryParameterValue): the count tells them apart.
            assert_eq!(
                count(&gw, "forwarded"),
                before + 1.0,
                "{what}: not forwarded: {} {}",
                resp.status,
                resp.text()
            );
            if step.implemented {
                assert!(
                    resp.status < 300,
                    "{what}: Azurite did not do it: {} {code} {}",
                    resp.status,
                    resp.text()
                );
            }
            seen.push(format!("{what}: {} {code}", resp.status));
        }
    }
    // What Azurite answered to each, for the test's output.
    println!("{}", seen.join("\n"));
    // The container is gone at the store.
    let gone = at_store(
        "GET",
        &format!(
            "/{}/conformance?restype=container",
            support::azurite::STORE_ACCOUNT
        ),
        &[],
    );
    assert_eq!(gone.status, 404, "{}", gone.text());
}
