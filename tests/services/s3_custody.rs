//! The gateway in front of S3 in S3's own terms (`--store s3`): its
//! refusals are S3 error documents that a stock SDK reads, with the SPEC's
//! error name as the code.
//!
//! Against moto's server (`scripts/install-deps.sh` makes the Python
//! environment; missing, the test fails and says so).

#[path = "../support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::process::Command;

use support::moto::{moto, venv};
use support::GatewayProcess;

/// Runs `tests/clients/NAME` with `args` and returns its JSON line.
fn run_python(gateway: &GatewayProcess, name: &str, args: &[&str]) -> serde_json::Value {
    run_python_with(gateway, name, args, &[])
}

/// [`run_python`] with environment variables (a CA bundle).
fn run_python_with(
    gateway: &GatewayProcess,
    name: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name);
    let out = Command::new(venv().join("bin/python"))
        .arg(script)
        .args(args)
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed: {stdout}\n{}\ngateway stderr:\n{}",
        String::from_utf8_lossy(&out.stderr),
        gateway.stderr()
    );
    serde_json::from_str(stdout.trim()).unwrap()
}

#[test]
fn boto3_reads_the_gateways_refusals_as_s3_errors() {
    let moto = moto();
    let gw = GatewayProcess::start(&["--upstream", &moto.url(), "--store", "s3"]);
    let result = run_python(
        &gw,
        "boto3_dialect.py",
        &[&gw.data_url(), "dialect-answers"],
    );
    let stale = &result["stale"];
    assert_eq!(stale["status"], 409, "{result}");
    assert_eq!(stale["code"], "stale_token", "{result}");
    assert_eq!(
        stale["message"],
        "token 33 is below the highest 34 admitted for /dialect-answers/report.csv",
        "{result}"
    );
    assert_eq!(stale["highest"], "34", "{result}");
    assert!(
        stale["request_id"]
            .as_str()
            .is_some_and(|id| id.len() == 16),
        "{result}"
    );
    assert_eq!(result["missing"]["status"], 428, "{result}");
    assert_eq!(result["missing"]["code"], "missing_token", "{result}");
    assert_eq!(result["invalid"]["status"], 400, "{result}");
    assert_eq!(result["invalid"]["code"], "invalid_token", "{result}");
    assert_eq!(result["stored"], "written by client 2", "{result}");

    // The document itself, as a client without an SDK sees it.
    let resp = gw.req(
        "PUT",
        "/dialect-answers/report.csv",
        &[("X-Fencing-Token", "1"), support::moto::S3_AUTH],
        b"late",
    );
    assert_eq!(resp.status, 409);
    assert_eq!(resp.header("content-type"), Some("application/xml"));
    let text = resp.text();
    assert!(text.starts_with("<?xml"), "{text}");
    for part in [
        "<Code>stale_token</Code>",
        "<Resource>/dialect-answers/report.csv</Resource>",
        "<Token>1</Token>",
        "<Highest>34</Highest>",
        "<Reason>below_highest</Reason>",
    ] {
        assert!(text.contains(part), "{part} missing in {text}");
    }
}

/// A DeleteObjects S3 would refuse (1,001 keys) is S3's MalformedXML.
#[test]
fn a_delete_objects_of_too_many_keys_is_malformed_xml() {
    let moto = moto();
    let gw = GatewayProcess::start(&["--upstream", &moto.url(), "--store", "s3"]);
    let mut body = String::from("<Delete>");
    for i in 0..1001 {
        body.push_str(&format!("<Object><Key>k{i}</Key></Object>"));
    }
    body.push_str("</Delete>");
    let resp = gw.req(
        "POST",
        "/dialect-many?delete",
        &[("X-Fencing-Token", "1"), support::moto::S3_AUTH],
        body.as_bytes(),
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert!(
        resp.text().contains("<Code>MalformedXML</Code>"),
        "{}",
        resp.text()
    );
    assert!(
        resp.text().contains("more than 1000 keys"),
        "{}",
        resp.text()
    );
    let metrics = gw.metrics();
    assert_eq!(
        support::outcome(&metrics, "unfenceable_write"),
        1.0,
        "{metrics}"
    );
}

/// The proxy's own answers (the backend down: 502) are S3 documents too.
#[test]
fn the_proxys_own_errors_are_s3_documents() {
    let gw = GatewayProcess::start(&[
        "--upstream",
        &format!("http://127.0.0.1:{}", support::dead_port()),
        "--store",
        "s3",
    ]);
    let resp = gw.req("GET", "/b/k", &[], b"");
    assert_eq!(resp.status, 502);
    assert_eq!(resp.header("content-type"), Some("application/xml"));
    assert!(
        resp.text().contains("<Code>upstream_unavailable</Code>"),
        "{}",
        resp.text()
    );
    // A head the engine refuses before it is a request (ambiguous
    // framing) is answered in S3's shape too.
    let raw = b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    let resp = support::send_raw(gw.data_addr(), raw, false);
    assert_eq!(resp.status, 400);
    assert_eq!(resp.header("content-type"), Some("application/xml"));
    assert!(
        resp.text().contains("<Code>bad_request</Code>"),
        "{}",
        resp.text()
    );
    // Without --store the same answer is the JSON of the SPEC.
    let json = GatewayProcess::start(&[
        "--upstream",
        &format!("http://127.0.0.1:{}", support::dead_port()),
    ]);
    let resp = json.req("GET", "/b/k", &[], b"");
    assert_eq!(resp.header("content-type"), Some("application/json"));
}

// ---------------------------------------------------------------------
// Credential custody: moto enforcing authentication, whose only key the
// gateway holds; clients sign with identities of the gateway's own.

use std::path::Path;

use fencegate::dialect::sigv4;
use support::moto_auth::{moto_with_auth, MotoAuth};
use support::sigv4_client::Signer;

/// The identities of these tests: `owner` may do anything, `billing`
/// writes its bucket and reads a shared one, `reader` only reads
/// `cust-billing`.
const IDENTITIES: &str = r#"
[[identity]]
name = "owner"
access_key_id = "FGOWNER01"
secret_file = "owner.secret"
allow = [ { prefix = "/", access = "admin" } ]

[[identity]]
name = "billing"
access_key_id = "FGBILLING01"
secret_file = "billing.secret"
allow = [ { prefix = "/cust-billing/", access = "write" }, { prefix = "/cust-shared/", access = "read" } ]

[[identity]]
name = "reader"
access_key_id = "FGREADER01"
secret_file = "reader.secret"
allow = [ { prefix = "/cust-billing/", access = "read" } ]

[[identity]]
name = "reports"
access_key_id = "FGREPORTS01"
secret_file = "reports.secret"
allow = [ { prefix = "/cust-prefixed/reports/", access = "write" } ]
"#;

const OWNER: (&str, &str) = ("FGOWNER01", "owner-secret-0123456789");
const BILLING: (&str, &str) = ("FGBILLING01", "billing-secret-0123456789");
const READER: (&str, &str) = ("FGREADER01", "reader-secret-0123456789");
const REPORTS: (&str, &str) = ("FGREPORTS01", "reports-secret-0123456789");

/// Writes the identities and their secrets into `dir`.
fn write_identities(dir: &Path) -> std::path::PathBuf {
    std::fs::write(dir.join("owner.secret"), OWNER.1).unwrap();
    std::fs::write(dir.join("billing.secret"), BILLING.1).unwrap();
    std::fs::write(dir.join("reader.secret"), READER.1).unwrap();
    std::fs::write(dir.join("reports.secret"), REPORTS.1).unwrap();
    let path = dir.join("identities.toml");
    std::fs::write(&path, IDENTITIES).unwrap();
    path
}

/// A gateway under custody in front of `moto`, with `extra` options; the
/// directory holding its files lives as long as it.
fn custody_gateway(moto: &MotoAuth, extra: &[&str]) -> (tempfile::TempDir, GatewayProcess) {
    custody_gateway_to(moto, &moto.url, extra)
}

/// [`custody_gateway`] whose upstream is `upstream` (a relay in front of
/// `moto`).
fn custody_gateway_to(
    moto: &MotoAuth,
    upstream: &str,
    extra: &[&str],
) -> (tempfile::TempDir, GatewayProcess) {
    let dir = tempfile::tempdir().unwrap();
    let credentials = moto.write_credentials(dir.path());
    let identities = write_identities(dir.path());
    let mut args = vec![
        "--upstream",
        upstream,
        "--store",
        "s3",
        "--upstream-credentials",
        credentials.to_str().unwrap(),
        "--identities",
        identities.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let gw = GatewayProcess::start(&args);
    (dir, gw)
}

/// The steps of `tests/clients/boto3_custody.py` every custody run must
/// pass, and `extra` ones.
fn assert_steps_ok(result: &serde_json::Value, gw: &GatewayProcess, extra: &[&str]) {
    const STEPS: [&str; 12] = [
        "create_bucket",
        "put_new",
        "put_existing",
        "get",
        "upload_file_multipart",
        "abort_listed_upload",
        "download_file_ranges",
        "copy_object",
        "delete_object",
        "delete_objects",
        "presigned_get",
        "list_objects_v2",
    ];
    for step in STEPS.iter().chain(extra) {
        assert_eq!(result[step], "ok", "{step}: {result}\n{}", gw.stderr());
    }
}

/// An S3 error document's code.
fn s3_code(resp: &support::Resp) -> String {
    let text = resp.text();
    text.split_once("<Code>")
        .and_then(|(_, rest)| rest.split_once("</Code>"))
        .map(|(code, _)| code.to_owned())
        .unwrap_or_else(|| format!("no code in {text:?}"))
}

#[test]
fn stock_boto3_under_custody_goes_through_the_gateway_and_not_around_it() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto, &["--conditional-writes", "on"]);
    let result = run_python(
        &gw,
        "boto3_custody.py",
        &[&gw.data_url(), OWNER.0, OWNER.1, "cust-sdk"],
    );
    assert_steps_ok(&result, &gw, &[]);
    // A presigned PUT has no signed payload: refused on a plain-HTTP listener.
    assert_ne!(result["presigned_put"], "ok", "{result}");
    let stale = &result["stale_write"];
    assert_eq!(stale["code"], "stale_token", "{result}");
    assert_eq!(stale["status"], 409, "{result}");
    // The message names the token and the highest, under custody too.
    assert_eq!(
        stale["message"], "token 4 is below the highest 5 admitted for /cust-sdk/report.csv",
        "{result}"
    );
    let metrics = gw.metrics();
    assert_eq!(
        support::outcome(&metrics, "version_unknown"),
        0.0,
        "{metrics}"
    );

    // The same client straight to the store: its keys are the gateway's
    // own, which the store does not know.
    let direct = run_python(
        &gw,
        "boto3_custody.py",
        &[&moto.url, OWNER.0, OWNER.1, "cust-direct"],
    );
    assert_eq!(
        direct["create_bucket"], "403 InvalidAccessKeyId",
        "{direct}"
    );
}

/// boto3 in the SDKs' default virtual-hosted style (`BUCKET.<--s3-domain>`,
/// through the gateway as its HTTP proxy since `bucket.localhost` does not
/// resolve here): fenced on `/BUCKET/key` like the path-style twin, and
/// forwarded path-style.
#[test]
fn stock_boto3_under_custody_in_virtual_hosted_style() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(
        moto,
        &["--conditional-writes", "on", "--s3-domain", "localhost"],
    );
    let result = run_python(
        &gw,
        "boto3_custody.py",
        &[
            &gw.data_url(),
            OWNER.0,
            OWNER.1,
            "cust-virtual",
            "--virtual-domain",
            "localhost",
        ],
    );
    assert_steps_ok(&result, &gw, &[]);
    assert_eq!(result["stale_write"]["code"], "stale_token", "{result}");
    assert_eq!(gw.fence("/cust-virtual/report.csv"), Some(5));
    // A Host naming neither the domain nor a bucket of it.
    let owner = Signer::now(OWNER);
    let resp = owner.send(
        &gw,
        "GET",
        "/cust-virtual/report.csv",
        &[("host", "elsewhere.example")],
        b"",
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
    // The bucket a Host names is authorised like a path's: the owner
    // reads through it, billing may not.
    let host = format!("cust-virtual.localhost:{}", gw.data_addr().port());
    let read = owner.send(&gw, "GET", "/report.csv", &[("host", &host)], b"");
    assert_eq!(read.status, 200, "{}", read.text());
    let billing = Signer::now(BILLING);
    let denied = billing.send(&gw, "GET", "/report.csv", &[("host", &host)], b"");
    assert_eq!(denied.status, 403, "{}", denied.text());
    assert_eq!(s3_code(&denied), "AccessDenied");
    assert!(
        denied.text().contains("/cust-virtual/report.csv"),
        "{}",
        denied.text()
    );
}

/// boto3 over the gateway's TLS listener, where it sends its payloads as
/// it does to AWS (unsigned, with checksum trailers) and presigned `PUT`s
/// are taken.
#[test]
fn stock_boto3_under_custody_over_tls() {
    let moto = moto_with_auth();
    let ca = support::tls::TestCa::new("custody");
    let leaf = ca.issue("gateway", &["localhost", "127.0.0.1"]);
    let cert = leaf.cert.display().to_string();
    let key = leaf.key.display().to_string();
    let (_dir, gw) = custody_gateway(
        moto,
        &[
            "--conditional-writes",
            "on",
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ],
    );
    let url = format!("https://localhost:{}", gw.data_addr().port());
    let bundle = ca.cert_path().display().to_string();
    let result = run_python_with(
        &gw,
        "boto3_custody.py",
        &[&url, OWNER.0, OWNER.1, "cust-tls"],
        &[("AWS_CA_BUNDLE", &bundle), ("REQUESTS_CA_BUNDLE", &bundle)],
    );
    assert_steps_ok(&result, &gw, &["presigned_put"]);
    // What makes this run differ from the plain one: boto3's uploads went
    // unsigned with checksum trailers, and were stored.
    for operation in ["PutObject", "UploadPart"] {
        let kinds = &result["payloads"][operation];
        assert!(
            kinds
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "STREAMING-UNSIGNED-PAYLOAD-TRAILER")),
            "{operation}: {result}"
        );
    }
    assert_eq!(result["stale_write"]["code"], "stale_token", "{result}");
}

#[test]
fn bad_credentials_are_refused_before_anything_else() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto, &[]);
    let owner = Signer::now(OWNER);
    let created = owner.send(
        &gw,
        "PUT",
        "/cust-billing",
        &[("x-fencing-token", "1")],
        b"",
    );
    assert_eq!(created.status, 200, "{}", created.text());
    let put = owner.send(
        &gw,
        "PUT",
        "/cust-billing/q3.csv",
        &[("x-fencing-token", "10")],
        b"v10",
    );
    assert_eq!(put.status, 200, "{}", put.text());

    let refused = |resp: support::Resp, status: u16, code: &str| {
        assert_eq!(resp.status, status, "{code}: {}", resp.text());
        for secret in [
            OWNER.1,
            BILLING.1,
            READER.1,
            moto.secret_access_key.as_str(),
        ] {
            assert!(
                !resp.text().contains(secret),
                "{code}: a secret in the answer"
            );
        }
        assert_eq!(s3_code(&resp), code);
        assert!(resp.header("x-fencing-highest").is_none(), "{code}");
        assert_eq!(resp.header("content-type"), Some("application/xml"));
    };
    let write = [("x-fencing-token", "20")];
    // A wrong secret, an unknown key.
    let wrong = Signer::now((OWNER.0, "not-the-secret"));
    refused(
        wrong.send(&gw, "PUT", "/cust-billing/q3.csv", &write, b"x"),
        403,
        "SignatureDoesNotMatch",
    );
    let unknown = Signer::now(("FGNOBODY", "x"));
    refused(
        unknown.send(&gw, "PUT", "/cust-billing/q3.csv", &write, b"x"),
        403,
        "InvalidAccessKeyId",
    );
    // The token header not signed.
    refused(
        owner.send_unsigned(
            &gw,
            "PUT",
            "/cust-billing/q3.csv",
            &write,
            &["x-fencing-token"],
            b"x",
        ),
        403,
        "SignatureDoesNotMatch",
    );
    // A signature over other headers: a signed field, then the token,
    // changed after signing.
    let host = gw.data_addr().to_string();
    let resent = |changed: &str, to: &str| {
        let mut fields = owner.headers(
            &host,
            "PUT",
            "/cust-billing/q3.csv",
            &[("x-fencing-token", "20"), ("x-amz-meta-owner", "billing")],
            &[],
            b"x",
        );
        for (name, value) in &mut fields {
            if name == changed {
                *value = to.to_owned();
            }
        }
        let refs: Vec<(&str, &str)> = fields
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        gw.req("PUT", "/cust-billing/q3.csv", &refs, b"x")
    };
    refused(
        resent("x-amz-meta-owner", "someone-else"),
        403,
        "SignatureDoesNotMatch",
    );
    refused(
        resent("x-fencing-token", "21"),
        403,
        "SignatureDoesNotMatch",
    );
    // A Content-Type the client did not sign.
    refused(
        owner.send_unsigned(
            &gw,
            "PUT",
            "/cust-billing/q3.csv",
            &[("x-fencing-token", "20"), ("content-type", "text/html")],
            &["content-type"],
            b"x",
        ),
        403,
        "AccessDenied",
    );
    // An absolute-form target: its authority is not where the bucket comes
    // from, whatever the signature covers.
    let fields = owner.headers(&host, "PUT", "/cust-billing/q3.csv", &write, &[], b"x");
    let refs: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let raw = support::build_request(
        gw.data_addr(),
        "PUT",
        "http://cust-other.example/cust-billing/q3.csv",
        &refs,
        b"x",
    );
    refused(
        support::send_raw(gw.data_addr(), &raw, false),
        400,
        "invalid_path",
    );
    // An x-amz-acl the client did not sign.
    refused(
        owner.send_unsigned(
            &gw,
            "PUT",
            "/cust-billing/q3.csv",
            &[("x-fencing-token", "20"), ("x-amz-acl", "public-read")],
            &["x-amz-acl"],
            b"x",
        ),
        403,
        "AccessDenied",
    );
    // A clock 20 minutes off.
    let skewed = Signer {
        key: OWNER,
        at: owner.at - 20 * 60,
    };
    refused(
        skewed.send(&gw, "PUT", "/cust-billing/q3.csv", &write, b"x"),
        403,
        "RequestTimeTooSkewed",
    );
    // No credentials at all, anonymous access off.
    refused(
        gw.req("GET", "/cust-billing/q3.csv", &[], b""),
        403,
        "AccessDenied",
    );
    // SigV2 is not SigV4: refused, never anonymous.
    refused(
        gw.req(
            "GET",
            "/cust-billing/q3.csv",
            &[("Authorization", "AWS FGOWNER01:c2lnbmF0dXJl")],
            b"",
        ),
        400,
        "AuthorizationHeaderMalformed",
    );
    // A key with a `..` segment: S3 keys are literal.
    refused(
        owner.send(&gw, "PUT", "/cust-billing/secret/../q3.csv", &write, b"x"),
        400,
        "invalid_path",
    );
    // The billing identity outside its prefixes.
    let billing = Signer::now(BILLING);
    refused(
        billing.send(&gw, "PUT", "/cust-other/x", &write, b"x"),
        403,
        "AccessDenied",
    );
    // A copy from a bucket it cannot read.
    refused(
        billing.send(
            &gw,
            "PUT",
            "/cust-billing/copy.csv",
            &[
                ("x-fencing-token", "20"),
                ("x-amz-copy-source", "/cust-other/x"),
            ],
            b"",
        ),
        403,
        "AccessDenied",
    );
    // A copy source read by no other grammar than SPEC's: moto's urlparse
    // reads `//cust-billing/cust-other/x` as bucket cust-other's `x`, which
    // a looser reading authorised as `/cust-billing/cust-other/x`.
    refused(
        billing.send(
            &gw,
            "PUT",
            "/cust-billing/copy.csv",
            &[
                ("x-fencing-token", "20"),
                ("x-amz-copy-source", "//cust-billing/cust-other/x"),
            ],
            b"",
        ),
        400,
        "invalid_path",
    );
    // A listing outside its prefixes; ListBuckets needs `/`.
    refused(
        billing.send(&gw, "GET", "/cust-other?list-type=2", &[], b""),
        403,
        "AccessDenied",
    );
    refused(billing.send(&gw, "GET", "/", &[], b""), 403, "AccessDenied");
    // Version and multipart-upload listings outside them.
    for listing in ["/cust-other?versions", "/cust-other?uploads"] {
        refused(
            billing.send(&gw, "GET", listing, &[], b""),
            403,
            "AccessDenied",
        );
    }
    // An UploadPartCopy from a bucket it cannot read.
    refused(
        billing.send(
            &gw,
            "PUT",
            "/cust-billing/parts.bin?partNumber=1&uploadId=u1",
            &[
                ("x-fencing-token", "20"),
                ("x-amz-copy-source", "/cust-other/x"),
            ],
            b"",
        ),
        403,
        "AccessDenied",
    );
    // A POST-policy upload, signed or not, stays refused: its key is in
    // the form, past the head; a bucket-level POST is DeleteObjects or no
    // operation the gateway forwards.
    let form = owner.send(
        &gw,
        "POST",
        "/cust-billing",
        &[
            ("x-fencing-token", "20"),
            ("content-type", "multipart/form-data; boundary=b"),
        ],
        b"--b\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nq3.csv\r\n--b--\r\n",
    );
    assert_eq!(form.status, 501, "{}", form.text());
    assert_eq!(s3_code(&form), "NotImplemented");
    // A bucket ACL write without admin.
    refused(
        billing.send(
            &gw,
            "PUT",
            "/cust-billing?acl",
            &[("x-fencing-token", "20"), ("x-amz-acl", "public-read")],
            b"",
        ),
        403,
        "AccessDenied",
    );
    // A DeleteObjects naming a key outside its prefixes.
    let listing = b"<Delete><Object><Key>q3.csv</Key></Object><Object><Key>../cust-other/x</Key></Object></Delete>";
    refused(
        billing.send(
            &gw,
            "POST",
            "/cust-billing?delete",
            &[("x-fencing-token", "20")],
            listing,
        ),
        400,
        "invalid_path",
    );
    // A DeleteObjects from an identity that may only read the bucket.
    let reader = Signer::now(READER);
    refused(
        reader.send(
            &gw,
            "POST",
            "/cust-billing?delete",
            &[("x-fencing-token", "20")],
            listing,
        ),
        403,
        "AccessDenied",
    );
    // A read-only identity's token above the highest raises nothing.
    refused(
        reader.send(
            &gw,
            "GET",
            "/cust-billing/q3.csv",
            &[("x-fencing-token", "99")],
            b"",
        ),
        403,
        "AccessDenied",
    );
    assert_eq!(gw.fence("/cust-billing/q3.csv"), Some(10));
    // ... but may read at or below it.
    let read = reader.send(
        &gw,
        "GET",
        "/cust-billing/q3.csv",
        &[("x-fencing-token", "10")],
        b"",
    );
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(read.text(), "v10");

    // No secret in any log line: the identities', and the store's.
    let stderr = gw.stderr();
    for secret in [
        OWNER.1,
        BILLING.1,
        READER.1,
        moto.secret_access_key.as_str(),
    ] {
        assert!(!stderr.contains(secret), "a secret in the log:\n{stderr}");
    }
    // Nothing refused reached the store.
    assert_eq!(
        moto.read("cust-billing", "q3.csv").as_deref(),
        Some(&b"v10"[..])
    );
    assert_eq!(moto.read("cust-billing", "copy.csv"), None);
    assert_eq!(gw.fence("/cust-billing/q3.csv"), Some(10));
    let metrics = gw.metrics();
    assert!(all_series(&metrics, "unauthenticated") >= 7.0, "{metrics}");
    assert!(all_series(&metrics, "forbidden") >= 5.0, "{metrics}");
    // Identified requests are counted per identity.
    assert!(
        support::metric(
            &metrics,
            "fencegate_requests_total{outcome=\"forbidden\",identity=\"billing\"}"
        )
        .is_some_and(|n| n >= 4.0),
        "{metrics}"
    );
    assert!(
        support::metric(
            &metrics,
            "fencegate_requests_total{outcome=\"forwarded\",identity=\"owner\"}"
        )
        .is_some_and(|n| n >= 2.0),
        "{metrics}"
    );
    // The raise names who raised.
    assert!(
        gw.stderr().contains("identity=\"owner\"") || gw.stderr().contains("identity=owner"),
        "{}",
        gw.stderr()
    );
}

/// An identity allowed a prefix inside a bucket: every key a request
/// names is held to it, a `DeleteObjects` key and a copy source included,
/// and a listing must stay under it.
#[test]
fn a_prefix_inside_a_bucket_bounds_every_key_a_request_names() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto, &[]);
    let owner = Signer::now(OWNER);
    let reports = Signer::now(REPORTS);
    for (target, body) in [
        ("/cust-prefixed", &b""[..]),
        ("/cust-prefixed/q3.csv", b"owner's"),
        ("/cust-prefixed/reports/a.csv", b"a"),
    ] {
        let resp = owner.send(&gw, "PUT", target, &[("x-fencing-token", "1")], body);
        assert_eq!(resp.status, 200, "{target}: {}", resp.text());
    }
    let write = [("x-fencing-token", "2")];
    let resp = reports.send(&gw, "PUT", "/cust-prefixed/reports/b.csv", &write, b"b");
    assert_eq!(resp.status, 200, "{}", resp.text());

    let refused = |resp: support::Resp, object: &str| {
        assert_eq!(resp.status, 403, "{object}: {}", resp.text());
        assert_eq!(s3_code(&resp), "AccessDenied", "{object}");
        assert!(resp.text().contains(object), "{object}: {}", resp.text());
        assert!(resp.header("x-fencing-highest").is_none(), "{object}");
    };
    refused(
        reports.send(&gw, "PUT", "/cust-prefixed/q3.csv", &write, b"x"),
        "/cust-prefixed/q3.csv",
    );
    // A DeleteObjects whose second key is outside the prefix.
    let listing = b"<Delete><Object><Key>reports/a.csv</Key></Object><Object><Key>q3.csv</Key></Object></Delete>";
    refused(
        reports.send(&gw, "POST", "/cust-prefixed?delete", &write, listing),
        "/cust-prefixed/q3.csv",
    );
    // A copy from outside it.
    refused(
        reports.send(
            &gw,
            "PUT",
            "/cust-prefixed/reports/c.csv",
            &[
                ("x-fencing-token", "2"),
                ("x-amz-copy-source", "/cust-prefixed/q3.csv"),
            ],
            b"",
        ),
        "/cust-prefixed/q3.csv",
    );
    // A listing of the whole bucket; one under the prefix is served.
    let whole = reports.send(&gw, "GET", "/cust-prefixed?list-type=2", &[], b"");
    assert_eq!(whole.status, 403, "{}", whole.text());
    assert_eq!(s3_code(&whole), "AccessDenied");
    let under = reports.send(
        &gw,
        "GET",
        "/cust-prefixed?list-type=2&prefix=reports%2F",
        &[],
        b"",
    );
    assert_eq!(under.status, 200, "{}", under.text());
    assert!(under.text().contains("reports/b.csv"), "{}", under.text());
    assert!(!under.text().contains("q3.csv"), "{}", under.text());

    // Nothing refused reached the store.
    assert_eq!(
        moto.read("cust-prefixed", "q3.csv").as_deref(),
        Some(&b"owner's"[..])
    );
    assert_eq!(
        moto.read("cust-prefixed", "reports/a.csv").as_deref(),
        Some(&b"a"[..])
    );
    assert_eq!(moto.read("cust-prefixed", "reports/c.csv"), None);
    assert_eq!(gw.fence("/cust-prefixed/q3.csv"), Some(1));
}

/// In `header` scope the lock header names the fence: a signed request
/// must have signed it as it signs the token, or anyone on the path could
/// move a write onto another fence.
#[test]
fn in_header_scope_the_lock_header_must_be_signed() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto, &["--scope", "header"]);
    let owner = Signer::now(OWNER);
    let lock = [("x-fencing-token", "1"), ("x-fencing-lock", "reports")];
    let made = owner.send(&gw, "PUT", "/cust-lock", &lock, b"");
    assert_eq!(made.status, 200, "{}", made.text());
    let put = owner.send(&gw, "PUT", "/cust-lock/a.csv", &lock, b"signed");
    assert_eq!(put.status, 200, "{}", put.text());
    let unsigned = owner.send_unsigned(
        &gw,
        "PUT",
        "/cust-lock/a.csv",
        &[("x-fencing-token", "2"), ("x-fencing-lock", "reports")],
        &["x-fencing-lock"],
        b"unsigned",
    );
    assert_eq!(unsigned.status, 403, "{}", unsigned.text());
    assert_eq!(s3_code(&unsigned), "SignatureDoesNotMatch");
    assert!(unsigned.header("x-fencing-highest").is_none());
    assert_eq!(
        moto.read("cust-lock", "a.csv").as_deref(),
        Some(&b"signed"[..])
    );
}

/// The store refuses the gateway's own key (revoked): 502
/// `upstream_credentials_rejected`, none of the store's body.
#[test]
fn a_revoked_store_key_is_a_502_without_the_stores_answer() {
    let moto = moto_with_auth();
    let key = moto.new_key();
    let dir = tempfile::tempdir().unwrap();
    let credentials = support::moto_auth::write_upstream_credentials(dir.path(), &key);
    let identities = write_identities(dir.path());
    let gw = GatewayProcess::start(&[
        "--upstream",
        &moto.url,
        "--store",
        "s3",
        "--upstream-credentials",
        credentials.to_str().unwrap(),
        "--identities",
        identities.to_str().unwrap(),
    ]);
    let owner = Signer::now(OWNER);
    let created = owner.send(
        &gw,
        "PUT",
        "/cust-revoked",
        &[("x-fencing-token", "1")],
        b"",
    );
    assert_eq!(created.status, 200, "{}", created.text());
    moto.revoke(&key.access_key_id);
    let resp = owner.send(
        &gw,
        "PUT",
        "/cust-revoked/k",
        &[("x-fencing-token", "2")],
        b"x",
    );
    assert_eq!(resp.status, 502, "{}", resp.text());
    assert_eq!(s3_code(&resp), "upstream_credentials_rejected");
    let text = resp.text();
    assert!(!text.contains(&key.access_key_id), "{text}");
    assert!(!text.contains("StringToSign"), "{text}");
    assert!(resp.header("www-authenticate").is_none());
}

#[test]
fn custody_start_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let key = support::moto_auth::S3Key {
        access_key_id: "AKIA".into(),
        secret_access_key: "secret".into(),
    };
    let credentials = support::moto_auth::write_upstream_credentials(dir.path(), &key);
    let credentials = credentials.to_str().unwrap();
    let finished = support::run_on_free_ports(&[
        "--store",
        "s3",
        "--upstream",
        "http://127.0.0.1:9",
        "--upstream-credentials",
        credentials,
    ]);
    assert!(
        finished
            .start_error("custody")
            .contains("--identities or --anonymous-clients"),
        "{}",
        finished.stderr
    );
    let finished = support::run_on_free_ports(&[
        "--store",
        "webdav",
        "--upstream",
        "http://127.0.0.1:9",
        "--upstream-credentials",
        credentials,
        "--anonymous-clients",
        "read",
    ]);
    assert!(
        finished
            .start_error("custody")
            .contains("--store webdav signs with kind = \"basic\" or \"bearer\""),
        "{}",
        finished.stderr
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[identity]]\nname = \"x\"\nsecret = \"inline\"\n").unwrap();
    let finished = support::run_on_free_ports(&[
        "--store",
        "s3",
        "--upstream",
        "http://127.0.0.1:9",
        "--upstream-credentials",
        credentials,
        "--identities",
        bad.to_str().unwrap(),
    ]);
    assert!(
        finished.start_error("custody").contains("unknown field"),
        "{}",
        finished.stderr
    );
}

/// The relay test of chained writes, under custody: a stale holder's PUT,
/// signed by the gateway and given up on (504), reaches the store after
/// the next holder wrote, and the store refuses it (the gateway's
/// condition is under the gateway's signature). Without the chain the
/// same late PUT overwrites the next holder's object: the control.
#[test]
fn under_custody_a_late_stale_put_is_refused_by_the_store() {
    use support::{Fault, Relay};
    const HELD: std::time::Duration = std::time::Duration::from_millis(2500);
    let moto = moto_with_auth();
    for (mode, bucket, expected) in [
        ("on", "cust-late-chained", "v34"),
        ("off", "cust-late-open", "stale"),
    ] {
        let relay = Relay::start(moto.addr, Fault::None);
        let (_dir, gw) = custody_gateway_to(
            moto,
            &relay.url(),
            &["--conditional-writes", mode, "--upstream-timeout", "1"],
        );
        let owner = Signer::now(OWNER);
        let target = format!("/{bucket}/report");
        let made = owner.send(
            &gw,
            "PUT",
            &format!("/{bucket}"),
            &[("x-fencing-token", "1")],
            b"",
        );
        assert_eq!(made.status, 200, "{}", made.text());
        let first = owner.send(&gw, "PUT", &target, &[("x-fencing-token", "33")], b"v33");
        assert_eq!(first.status, 200, "{}", first.text());
        relay.set(Fault::DelayRequest(HELD));
        let given_up = owner.send(&gw, "PUT", &target, &[("x-fencing-token", "33")], b"stale");
        assert_eq!(given_up.status, 504, "{}", given_up.text());
        relay.set(Fault::None);
        let current = owner.send(&gw, "PUT", &target, &[("x-fencing-token", "34")], b"v34");
        assert_eq!(current.status, 200, "{}", current.text());
        assert_eq!(moto.read(bucket, "report").as_deref(), Some(&b"v34"[..]));
        std::thread::sleep(HELD + std::time::Duration::from_millis(1500));
        assert_eq!(
            moto.read(bucket, "report").as_deref(),
            Some(expected.as_bytes()),
            "--conditional-writes {mode}"
        );
    }
}

/// The sum of `fencegate_requests_total` for `outcome` over every identity
/// (and none).
fn all_series(metrics: &str, outcome: &str) -> f64 {
    let prefix = format!("fencegate_requests_total{{outcome=\"{outcome}\"");
    metrics
        .lines()
        .filter(|line| line.starts_with(&prefix))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A signed aws-chunked upload (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`, as
/// the AWS SDKs for Java and Go send over plain HTTP): the gateway verifies
/// each chunk against the client's chain and re-signs it into its own; a
/// tampered chunk cuts the upload and the store keeps nothing.
#[test]
fn signed_aws_chunked_uploads_are_verified_and_re_signed_chunk_by_chunk() {
    use bytes::Bytes;
    use fencegate::dialect::chunked::{Chunk, ChunkResigner, Event};
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto, &[]);
    let owner = Signer::now(OWNER);
    let made = owner.send(
        &gw,
        "PUT",
        "/cust-chunked",
        &[("x-fencing-token", "1")],
        b"",
    );
    assert_eq!(made.status, 200, "{}", made.text());
    let data: Vec<Vec<u8>> = vec![vec![b'a'; 8192], vec![b'b'; 1000]];
    let decoded: usize = data.iter().map(Vec::len).sum();
    let upload = |key: &str, tamper: bool| -> (support::Resp, Vec<u8>) {
        // The body's length is the same whatever the signatures: frame it
        // once with a dummy chain to learn it.
        let frame = |seed: [u8; 32], signing: &sigv4::SigningKey, amz_date: &str, scope: &str| {
            let mut resigner = ChunkResigner::new(signing.clone(), amz_date, scope, seed);
            let mut pieces = Vec::new();
            for part in &data {
                resigner.resign(
                    &Event::Chunk(Chunk::new(Bytes::from(part.clone()))),
                    &mut pieces,
                );
            }
            resigner.resign(&Event::Chunk(Chunk::new(Bytes::new())), &mut pieces);
            resigner.resign(&Event::End, &mut pieces);
            pieces.concat()
        };
        let amz_date = sigv4::format_amz_date(owner.at);
        let scope = format!("{}/us-east-1/s3/aws4_request", &amz_date[..8]);
        let signing = sigv4::signing_key(OWNER.1.as_bytes(), &amz_date[..8], "us-east-1", "s3");
        let length = frame([0; 32], &signing, &amz_date, &scope)
            .len()
            .to_string();
        let decoded = decoded.to_string();
        let target = format!("/cust-chunked/{key}");
        let fields = [
            ("x-fencing-token", "2"),
            ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", decoded.as_str()),
            ("content-length", length.as_str()),
        ];
        let headers = owner.headers(
            &gw.data_addr().to_string(),
            "PUT",
            &target,
            &fields,
            &[],
            b"",
        );
        let authorization = &headers
            .iter()
            .find(|(n, _)| n == "authorization")
            .unwrap()
            .1;
        let seed_hex = authorization.rsplit("Signature=").next().unwrap();
        let seed = sigv4::parse_hex32(seed_hex.as_bytes()).unwrap();
        let mut body = frame(seed, &signing, &amz_date, &scope);
        if tamper {
            // A byte of the second chunk's data.
            let at = body.len() - 200;
            body[at] ^= 1;
        }
        let refs: Vec<(&str, &str)> = headers
            .iter()
            .filter(|(n, _)| n != "content-length")
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        (gw.req("PUT", &target, &refs, &body), body)
    };
    let (resp, _) = upload("whole.bin", false);
    assert_eq!(resp.status, 200, "{}\n{}", resp.text(), gw.stderr());
    let stored = moto.read("cust-chunked", "whole.bin").expect("stored");
    assert_eq!(stored, data.concat());

    let (resp, _) = upload("tampered.bin", true);
    assert_eq!(resp.status, 403, "{}", resp.text());
    assert_eq!(s3_code(&resp), "SignatureDoesNotMatch", "{}", resp.text());
    assert!(resp.header("x-fencing-highest").is_none());
    assert_eq!(resp.header("content-type"), Some("application/xml"));
    assert_eq!(moto.read("cust-chunked", "tampered.bin"), None);
}

/// rclone with an S3 remote signing with an identity's keys, the token in
/// `--header` (docs/CLIENTS.md): rclone adds such a header after its SDK
/// signed the request, so under custody the token is unsigned, and the
/// gateway refuses it as a bad signature (SPEC: a signed request's token
/// header must be signed). Nothing reaches the store; the refusal is
/// logged. rclone cannot carry a signed token today (docs/CUSTODY.md).
#[test]
fn rclone_under_custody_sends_its_token_unsigned_and_is_refused() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto, &[]);
    let owner = Signer::now(OWNER);
    let made = owner.send(&gw, "PUT", "/cust-rclone", &[("x-fencing-token", "1")], b"");
    assert_eq!(made.status, 200, "{}", made.text());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rclone.csv");
    std::fs::write(&file, "written by rclone").unwrap();
    let out = Command::new("rclone")
        .arg("copyto")
        .args([file.to_str().unwrap(), "gw:cust-rclone/rclone.csv"])
        .args(["--header", "X-Fencing-Token: 40"])
        .args(["--retries", "1", "--low-level-retries", "1", "-q"])
        .env("RCLONE_CONFIG", "/dev/null")
        .env("RCLONE_CONFIG_GW_TYPE", "s3")
        .env("RCLONE_CONFIG_GW_PROVIDER", "Other")
        .env("RCLONE_CONFIG_GW_ENDPOINT", gw.data_url())
        .env("RCLONE_CONFIG_GW_ACCESS_KEY_ID", OWNER.0)
        .env("RCLONE_CONFIG_GW_SECRET_ACCESS_KEY", OWNER.1)
        .env("RCLONE_CONFIG_GW_REGION", "us-east-1")
        .env("RCLONE_CONFIG_GW_FORCE_PATH_STYLE", "true")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("AWS_CA_BUNDLE")
        .output()
        .unwrap_or_else(|e| panic!("rclone: {e} (run scripts/install-deps.sh)"));
    assert!(!out.status.success());
    assert_eq!(moto.read("cust-rclone", "rclone.csv"), None);
    assert!(
        gw.wait_stderr(
            "x-fencing-token must be among the signed headers",
            std::time::Duration::from_secs(5)
        ),
        "{}",
        gw.stderr()
    );
}

/// SIGHUP re-reads the identities: a key added is taken, a file that does
/// not load keeps the identities in force and says why.
#[test]
fn identities_are_reloaded_on_sighup() {
    let moto = moto_with_auth();
    let (dir, gw) = custody_gateway(moto, &[]);
    let newcomer = ("FGNEW01", "newcomer-secret-0123456789");
    let signer = Signer::now(newcomer);
    let resp = signer.send(&gw, "GET", "/", &[], b"");
    assert_eq!(s3_code(&resp), "InvalidAccessKeyId");
    std::fs::write(dir.path().join("new.secret"), newcomer.1).unwrap();
    let file = dir.path().join("identities.toml");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(
        "\n[[identity]]\nname = \"newcomer\"\naccess_key_id = \"FGNEW01\"\nsecret_file = \"new.secret\"\nallow = [ { prefix = \"/\", access = \"read\" } ]\n",
    );
    std::fs::write(&file, &text).unwrap();
    gw.sighup();
    assert!(
        gw.wait_stderr("why=\"SIGHUP\"", std::time::Duration::from_secs(10)),
        "{}",
        gw.stderr()
    );
    let resp = signer.send(&gw, "GET", "/", &[], b"");
    assert_eq!(resp.status, 200, "{}", resp.text());
    // A rotated secret: the old one no longer verifies (its signing key
    // was cached), the new one does.
    let rotated = ("FGNEW01", "rotated-secret-0123456789");
    std::fs::write(dir.path().join("new.secret"), rotated.1).unwrap();
    gw.sighup();
    assert!(support::wait_until(
        std::time::Duration::from_secs(10),
        || { s3_code(&signer.send(&gw, "GET", "/", &[], b"")) == "SignatureDoesNotMatch" }
    ));
    let resp = Signer::now(rotated).send(&gw, "GET", "/", &[], b"");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let signer = Signer::now(rotated);
    // A broken file keeps what was in force.
    std::fs::write(&file, "[[identity]]\nname = 3\n").unwrap();
    gw.sighup();
    assert!(gw.wait_stderr(
        "cannot reload the identities",
        std::time::Duration::from_secs(10)
    ));
    let resp = signer.send(&gw, "GET", "/", &[], b"");
    assert_eq!(resp.status, 200, "{}", resp.text());
}

/// The credential files are read again when they change on disk, with no
/// SIGHUP: an identity added is taken, the store's key rotated is signed
/// with (the old one then revoked in moto), and a file that does not load
/// keeps what is in force and is logged once until it loads again.
#[test]
fn credential_files_are_reread_when_they_change_on_disk() {
    use std::time::Duration;
    // A server of its own: IAM allows two keys per user, and the setup's
    // key is revoked below.
    let moto = MotoAuth::start();
    let (dir, gw) = custody_gateway(&moto, &[]);
    let identities = dir.path().join("identities.toml");
    let owner = Signer::now(OWNER);
    let put = |token: &str, key: &str, body: &[u8]| {
        owner.send(
            &gw,
            "PUT",
            &format!("/cust-watched{key}"),
            &[("x-fencing-token", token)],
            body,
        )
    };
    let created = put("1", "", b"");
    assert_eq!(created.status, 200, "{}", created.text());

    let newcomer = Signer::now(("FGWATCH01", "watched-secret-0123456789"));
    assert_eq!(
        s3_code(&newcomer.send(&gw, "GET", "/", &[], b"")),
        "InvalidAccessKeyId"
    );
    std::fs::write(
        dir.path().join("watched.secret"),
        "watched-secret-0123456789",
    )
    .unwrap();
    let mut text = std::fs::read_to_string(&identities).unwrap();
    text.push_str(
        "\n[[identity]]\nname = \"watched\"\naccess_key_id = \"FGWATCH01\"\nsecret_file = \"watched.secret\"\nallow = [ { prefix = \"/\", access = \"read\" } ]\n",
    );
    std::fs::write(&identities, &text).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(20), || {
            newcomer.send(&gw, "GET", "/", &[], b"").status == 200
        }),
        "the identity added on disk was not taken:\n{}",
        gw.stderr()
    );
    assert!(gw.stderr().contains("changed on disk"), "{}", gw.stderr());

    // The store's key rotated: a second key for the gateway's IAM user,
    // written over the first; once the gateway signs with it, the first
    // is revoked and writes still go through.
    let second = moto.new_key();
    support::moto_auth::write_upstream_credentials(dir.path(), &second);
    assert!(
        gw.wait_stderr("upstream credentials reloaded", Duration::from_secs(20)),
        "{}",
        gw.stderr()
    );
    moto.revoke_key();
    let written = put("2", "/after-rotation", b"x");
    assert_eq!(written.status, 200, "{}", written.text());

    // A broken identities file: logged once, what is in force stays, and
    // the file put right loads again.
    std::fs::write(&identities, "[[identity]]\nname = 3\n").unwrap();
    assert!(
        gw.wait_stderr("the credential files do not load", Duration::from_secs(20)),
        "{}",
        gw.stderr()
    );
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(newcomer.send(&gw, "GET", "/", &[], b"").status, 200);
    std::fs::write(&identities, &text).unwrap();
    assert!(
        gw.wait_stderr("the credential files load again", Duration::from_secs(20)),
        "{}",
        gw.stderr()
    );
    assert_eq!(
        gw.stderr()
            .matches("the credential files do not load")
            .count(),
        1,
        "{}",
        gw.stderr()
    );
    assert_eq!(newcomer.send(&gw, "GET", "/", &[], b"").status, 200);
}

/// A presigned URL made with an identity's key: served while it lives,
/// refused once expired (and when its signature is not the identity's).
#[test]
fn presigned_urls_expire() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto, &[]);
    let owner = Signer::now(OWNER);
    assert_eq!(
        owner
            .send(
                &gw,
                "PUT",
                "/cust-presigned",
                &[("x-fencing-token", "1")],
                b""
            )
            .status,
        200
    );
    assert_eq!(
        owner
            .send(
                &gw,
                "PUT",
                "/cust-presigned/k",
                &[("x-fencing-token", "1")],
                b"v1"
            )
            .status,
        200
    );
    let presign = |at: u64, expires: u64, secret: &str| -> String {
        let amz_date = sigv4::format_amz_date(at);
        let date = &amz_date[..8];
        let credential = format!("{}%2F{date}%2Fus-east-1%2Fs3%2Faws4_request", OWNER.0);
        let query = format!(
            "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={credential}&X-Amz-Date={amz_date}&X-Amz-Expires={expires}&X-Amz-SignedHeaders=host"
        );
        let host = gw.data_addr().to_string();
        let canonical = sigv4::canonical_request(
            "GET",
            "/cust-presigned/k",
            &query,
            &|_| false,
            &|name, out| {
                if name == "host" {
                    out.push(host.as_bytes());
                }
            },
            &sigv4::SignedHeaders::parse("host").unwrap(),
            "UNSIGNED-PAYLOAD",
        )
        .unwrap();
        let scope = format!("{date}/us-east-1/s3/aws4_request");
        let to_sign = sigv4::string_to_sign(&amz_date, &scope, &canonical);
        let key = sigv4::signing_key(secret.as_bytes(), date, "us-east-1", "s3");
        let signature = sigv4::hex(&sigv4::signature(&key, &to_sign));
        format!("/cust-presigned/k?{query}&X-Amz-Signature={signature}")
    };
    let fresh = gw.req("GET", &presign(owner.at, 600, OWNER.1), &[], b"");
    assert_eq!(fresh.status, 200, "{}", fresh.text());
    assert_eq!(fresh.text(), "v1");
    let expired = gw.req("GET", &presign(owner.at - 3600, 600, OWNER.1), &[], b"");
    assert_eq!(expired.status, 403, "{}", expired.text());
    assert_eq!(s3_code(&expired), "AccessDenied");
    assert!(expired.text().contains("expired"), "{}", expired.text());
    let forged = gw.req("GET", &presign(owner.at, 600, "not-the-secret"), &[], b"");
    assert_eq!(s3_code(&forged), "SignatureDoesNotMatch");
    // Longer than seven days: malformed, as S3 has it.
    let too_long = gw.req("GET", &presign(owner.at, 8 * 24 * 3600, OWNER.1), &[], b"");
    assert_eq!(too_long.status, 400, "{}", too_long.text());
    assert_eq!(s3_code(&too_long), "AuthorizationHeaderMalformed");
}

/// `--store azure` answers in Azure's error shape: the SPEC's error name in
/// `x-ms-error-code` (which the Azure SDKs read first) and an XML body.
#[test]
fn azure_dialect_answers_carry_x_ms_error_code() {
    let backend = support::Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--store", "azure"]);
    // A Put Blob as the Azure table reads one: the account first (at an IP
    // address Azurite reads it from the path) and its selecting header.
    let put = |token: &str| {
        gw.req(
            "PUT",
            "/acct/container/blob",
            &[("X-Fencing-Token", token), ("x-ms-blob-type", "BlockBlob")],
            b"x",
        )
    };
    assert_eq!(put("34").status, 200);
    let stale = put("33");
    assert_eq!(stale.status, 409);
    assert_eq!(stale.header("x-ms-error-code"), Some("stale_token"));
    assert_eq!(stale.header("x-fencing-highest"), Some("34"));
    assert_eq!(stale.header("content-type"), Some("application/xml"));
    let text = stale.text();
    assert!(text.contains("<Code>stale_token</Code>"), "{text}");
    assert!(text.contains("token 33 is below the highest 34"), "{text}");
    assert_eq!(backend.records_for("/acct/container/blob").len(), 1);
}

/// A client signing with SigV2 (boto3's default for presigned URLs in some
/// configurations, older SDKs for everything) is told so, and what to do:
/// not "the request carries no credentials" (client kit issue, item 4).
#[test]
fn a_sigv2_request_is_told_to_sign_with_sigv4() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto, &[]);
    let presigned = format!(
        "/cust-billing/q3.csv?AWSAccessKeyId={}&Expires=4102444800&Signature=dGVzdA%3D%3D",
        OWNER.0
    );
    let header = format!("AWS {}:dGVzdA==", OWNER.0);
    for (target, headers) in [
        (presigned.as_str(), vec![]),
        (
            "/cust-billing/q3.csv",
            vec![("Authorization", header.as_str())],
        ),
    ] {
        let resp = gw.req("GET", target, &headers, b"");
        assert_eq!(resp.status, 400, "{target}: {}", resp.text());
        assert_eq!(s3_code(&resp), "AuthorizationHeaderMalformed");
        let text = resp.text();
        assert!(text.contains("SigV2"), "{text}");
        assert!(
            text.contains("signature_version=&quot;s3v4&quot;"),
            "{text}"
        );
        assert!(!text.contains("no credentials"), "{text}");
    }
}

/// A presigned URL of `key` (id, secret) for `method target`, its query
/// `extra` (already encoded) signed with the authentication parameters,
/// and the field `x-fencing-token: 5` signed (send it).
fn presigned_with(
    gw: &GatewayProcess,
    key: (&str, &str),
    method: &str,
    path: &str,
    extra: &str,
) -> String {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let amz_date = sigv4::format_amz_date(at);
    let date = &amz_date[..8];
    let credential = format!("{}%2F{date}%2Fus-east-1%2Fs3%2Faws4_request", key.0);
    let mut query = format!(
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={credential}&X-Amz-Date={amz_date}&X-Amz-Expires=600&X-Amz-SignedHeaders=host%3Bx-fencing-token"
    );
    if !extra.is_empty() {
        query = format!("{extra}&{query}");
    }
    let host = gw.data_addr().to_string();
    let canonical = sigv4::canonical_request(
        method,
        path,
        &query,
        &|_| false,
        &|name, out| match name {
            "host" => out.push(host.as_bytes()),
            "x-fencing-token" => out.push(b"5"),
            _ => {}
        },
        &sigv4::SignedHeaders::parse("host;x-fencing-token").expect("signed headers"),
        "UNSIGNED-PAYLOAD",
    )
    .expect("a canonical request");
    let scope = format!("{date}/us-east-1/s3/aws4_request");
    let to_sign = sigv4::string_to_sign(&amz_date, &scope, &canonical);
    let signing = sigv4::signing_key(key.1.as_bytes(), date, "us-east-1", "s3");
    let signature = sigv4::hex(&sigv4::signature(&signing, &to_sign));
    format!("{path}?{query}&X-Amz-Signature={signature}")
}

/// The S3 issue's classes 1, 5, 6 and 9: a presigned URL's `x-amz-*`
/// parameters are authorised as the fields they become (a copy out of a
/// bucket the identity cannot read, an ACL that only `admin` may set);
/// object lock and governance bypass need `admin`; a bucket configuration
/// read needs `read` on the whole bucket whatever `prefix` rides along; a
/// percent-encoded sub-resource name is the name S3 acts on.
#[test]
fn presigned_parameters_lock_headers_and_configuration_reads_are_authorised_as_the_store_reads_them(
) {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto, &[]);
    let owner = Signer::now(OWNER);
    for bucket in ["/cust-secret", "/cust-billing", "/cust-prefixed"] {
        let made = owner.send(&gw, "PUT", bucket, &[("x-fencing-token", "1")], b"");
        assert!(
            matches!(made.status, 200 | 409),
            "{bucket}: {}",
            made.text()
        );
    }
    let put = owner.send(
        &gw,
        "PUT",
        "/cust-secret/k",
        &[("x-fencing-token", "1")],
        b"secret",
    );
    assert_eq!(put.status, 200, "{}", put.text());

    let denied = |resp: support::Resp, what: &str| {
        assert_eq!(resp.status, 403, "{what}: {}", resp.text());
        assert_eq!(s3_code(&resp), "AccessDenied", "{what}");
    };
    // Class 1: a copy from a bucket billing cannot read, and a public ACL.
    let url = presigned_with(
        &gw,
        BILLING,
        "PUT",
        "/cust-billing/stolen",
        "x-amz-copy-source=cust-secret%2Fk",
    );
    let token = [("x-fencing-token", "5")];
    denied(gw.req("PUT", &url, &token, b""), "a presigned copy source");
    let url = presigned_with(
        &gw,
        BILLING,
        "PUT",
        "/cust-billing/pub",
        "x-amz-acl=public-read",
    );
    denied(gw.req("PUT", &url, &token, b""), "a presigned ACL");
    // The same URL without the parameter is billing's to use.
    let url = presigned_with(&gw, BILLING, "PUT", "/cust-billing/own", "");
    let resp = gw.req("PUT", &url, &token, b"");
    assert_eq!(resp.status, 200, "a plain presigned PUT: {}", resp.text());
    let copied = owner.send(&gw, "HEAD", "/cust-billing/stolen", &[], b"");
    assert_eq!(copied.status, 404, "the copy reached moto");
    // Class 5: object lock and a governance bypass need admin.
    let billing = Signer::now(BILLING);
    for (name, value) in [
        ("x-amz-object-lock-mode", "COMPLIANCE"),
        (
            "x-amz-object-lock-retain-until-date",
            "2099-01-01T00:00:00Z",
        ),
        ("x-amz-object-lock-legal-hold", "ON"),
    ] {
        let resp = billing.send(
            &gw,
            "PUT",
            "/cust-billing/locked",
            &[(name, value), ("x-fencing-token", "5")],
            b"x",
        );
        denied(resp, name);
    }
    let resp = billing.send(
        &gw,
        "DELETE",
        "/cust-billing/locked",
        &[
            ("x-amz-bypass-governance-retention", "true"),
            ("x-fencing-token", "5"),
        ],
        b"",
    );
    denied(resp, "a governance bypass");
    for query in ["retention", "legal-hold", "%61cl"] {
        let resp = billing.send(
            &gw,
            "PUT",
            &format!("/cust-billing/locked?{query}"),
            &[("x-fencing-token", "5")],
            b"<x/>",
        );
        denied(resp, query);
    }
    // Class 6: reports may write /cust-prefixed/reports/ only; the
    // bucket's policy is no listing of its prefix.
    let reports = Signer::now(REPORTS);
    for query in ["policy", "acl", "p%6flicy", "location"] {
        let resp = reports.send(&gw, "GET", &format!("/cust-prefixed?{query}"), &[], b"");
        denied(resp, query);
    }
    // With a prefix the store ignores for it: no such operation at all.
    for query in ["policy&prefix=reports%2F", "p%6flicy&prefix=reports%2F"] {
        let resp = reports.send(&gw, "GET", &format!("/cust-prefixed?{query}"), &[], b"");
        assert_eq!(resp.status, 501, "{query}: {}", resp.text());
        assert_eq!(s3_code(&resp), "NotImplemented", "{query}");
    }
    // Deny by default: what the table does not list is refused, named.
    let owner_refused = |method: &str, target: &str, fields: &[(&str, &str)], what: &str| {
        let resp = owner.send(&gw, method, target, fields, b"");
        assert_eq!(resp.status, 501, "{what}: {}", resp.text());
        assert_eq!(s3_code(&resp), "NotImplemented", "{what}");
        resp.text()
    };
    let text = owner_refused("GET", "/cust-billing/k?torrent", &[], "GetObjectTorrent");
    assert!(text.contains("torrent"), "{text}");
    // A rename is refused before custody reads it, in every mode: its
    // source is deleted, named in a field nobody fences.
    let renamed = owner.send(
        &gw,
        "PUT",
        "/cust-billing/renamed",
        &[
            ("x-amz-rename-source", "/cust-billing/k"),
            ("x-fencing-token", "9"),
        ],
        b"",
    );
    assert_eq!(renamed.status, 400, "{}", renamed.text());
    assert_eq!(s3_code(&renamed), "unfenceable_write");
    assert!(
        renamed.text().contains("x-amz-rename-source"),
        "{}",
        renamed.text()
    );
    // And one the table does not know, by its field.
    let text = owner_refused(
        "PUT",
        "/cust-billing/other",
        &[("x-amz-write-offset-bytes", "0"), ("x-fencing-token", "9")],
        "PutObject with an append offset",
    );
    assert!(text.contains("x-amz-write-offset-bytes"), "{text}");
    owner_refused(
        "POST",
        "/cust-billing/k?select&select-type=2",
        &[],
        "SelectObjectContent",
    );
    // A browser's CORS preflight is an operation of the table.
    let preflight = gw.req(
        "OPTIONS",
        "/cust-billing/k",
        &[
            ("Origin", "https://app.example"),
            ("Access-Control-Request-Method", "PUT"),
        ],
        b"",
    );
    assert_ne!(preflight.status, 501, "{}", preflight.text());
}

/// A query value as SigV4 writes it (RFC 3986's unreserved kept).
fn query_value(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The text of the first `<name>` element of `text`.
fn element_text(text: &str, name: &str) -> Option<String> {
    let (_, rest) = text.split_once(&format!("<{name}>"))?;
    let (inside, _) = rest.split_once(&format!("</{name}>"))?;
    Some(inside.to_owned())
}

/// The S3 issue's class 4: an upload id belongs to the object it was
/// created for. A part, a part copy, a completion, an abort or a parts
/// listing through another key's path is refused 404 `NoSuchUpload` and
/// nothing changes at the store (moto, read with the store's key, does not
/// check the key itself); the store's own id is refused too; a stale
/// holder cannot complete its upload through a fresh key's path onto an
/// object whose fence moved past its token; the ordinary flow (create,
/// part, list, complete; create, abort) goes through.
#[test]
fn class4_an_upload_id_is_refused_through_another_keys_path() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto, &["--conditional-writes", "on"]);
    let owner = Signer::now(OWNER);
    const BUCKET: &str = "cust-uploads";
    let made = owner.send(
        &gw,
        "PUT",
        "/cust-uploads",
        &[("x-fencing-token", "1")],
        b"",
    );
    assert_eq!(made.status, 200, "{}", made.text());
    let source = owner.send(
        &gw,
        "PUT",
        "/cust-uploads/src",
        &[("x-fencing-token", "1")],
        b"copied",
    );
    assert_eq!(source.status, 200, "{}", source.text());
    let create = |key: &str, token: &str| -> String {
        let created = owner.send(
            &gw,
            "POST",
            &format!("/{BUCKET}/{key}?uploads"),
            &[("x-fencing-token", token)],
            b"",
        );
        assert_eq!(created.status, 200, "{}", created.text());
        element_text(&created.text(), "UploadId")
            .unwrap_or_else(|| panic!("no UploadId in {}", created.text()))
    };
    let part = |key: &str, id: &str, number: u32, token: &str, body: &[u8]| {
        owner.send(
            &gw,
            "PUT",
            &format!(
                "/{BUCKET}/{key}?partNumber={number}&uploadId={}",
                query_value(id)
            ),
            &[("x-fencing-token", token)],
            body,
        )
    };
    let complete_body = |etag: &str| {
        format!(
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
        )
    };
    let complete = |key: &str, id: &str, token: &str, etag: &str| {
        owner.send(
            &gw,
            "POST",
            &format!("/{BUCKET}/{key}?uploadId={}", query_value(id)),
            &[("x-fencing-token", token)],
            complete_body(etag).as_bytes(),
        )
    };
    let no_such_upload = |resp: support::Resp, what: &str| {
        assert_eq!(resp.status, 404, "{what}: {}", resp.text());
        assert_eq!(s3_code(&resp), "NoSuchUpload", "{what}");
    };

    // An upload created for `a`, one part through `a`'s own path.
    let id = create("a", "5");
    let store = moto.uploads(BUCKET);
    assert_eq!(store.len(), 1, "{store:?}");
    let store_id = store[0].1.clone();
    let first = part("a", &id, 1, "5", b"part one of a");
    assert_eq!(first.status, 200, "{}", first.text());
    let etag = first.header("etag").unwrap_or_default().to_owned();

    // Through `b`'s path: refused, whatever the operation.
    no_such_upload(part("b", &id, 2, "10", b"through b"), "a part through b");
    let copied = owner.send(
        &gw,
        "PUT",
        &format!("/{BUCKET}/b?partNumber=2&uploadId={}", query_value(&id)),
        &[
            ("x-amz-copy-source", "cust-uploads/src"),
            ("x-fencing-token", "10"),
        ],
        b"",
    );
    no_such_upload(copied, "a part copy through b");
    no_such_upload(complete("b", &id, "10", &etag), "a completion through b");
    let target = format!("/{BUCKET}/b?uploadId={}", query_value(&id));
    no_such_upload(
        owner.send(&gw, "DELETE", &target, &[("x-fencing-token", "10")], b""),
        "an abort through b",
    );
    no_such_upload(
        owner.send(&gw, "GET", &target, &[], b""),
        "a parts listing through b",
    );
    // The same through a form body, which moto reads its parameters from
    // instead of the query: b's own sealed id in the query, a's store id
    // in the body (red-team, class 4): refused, not forwarded.
    let b_id = create("b", "10");
    let formed = owner.send(
        &gw,
        "DELETE",
        &format!("/{BUCKET}/b?uploadId={}", query_value(&b_id)),
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("x-fencing-token", "10"),
        ],
        format!("uploadId={store_id}").as_bytes(),
    );
    assert_eq!(formed.status, 501, "{}", formed.text());
    assert!(
        moto.uploads(BUCKET)
            .iter()
            .any(|upload| upload.1 == store_id),
        "a's upload was aborted through a form body"
    );
    let aborted = owner.send(
        &gw,
        "DELETE",
        &format!("/{BUCKET}/b?uploadId={}", query_value(&b_id)),
        &[("x-fencing-token", "10")],
        b"",
    );
    assert_eq!(aborted.status, 204, "b's own abort: {}", aborted.text());
    // A presigned parts listing: its query is the client's signed one, and
    // what goes on carries the store's id (moto answers it header-signed).
    let url = presigned_with(
        &gw,
        OWNER,
        "GET",
        "/cust-uploads/b",
        &format!("uploadId={}", query_value(&id)),
    );
    no_such_upload(
        gw.req("GET", &url, &[("x-fencing-token", "5")], b""),
        "a presigned parts listing through b",
    );
    let url = presigned_with(
        &gw,
        OWNER,
        "GET",
        "/cust-uploads/a",
        &format!("uploadId={}", query_value(&id)),
    );
    let listed = gw.req("GET", &url, &[("x-fencing-token", "5")], b"");
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert!(
        listed.text().contains("<PartNumber>1</PartNumber>"),
        "{}",
        listed.text()
    );
    // The store's own id, even through `a`'s path, and a forged seal.
    no_such_upload(part("a", &store_id, 2, "5", b"raw"), "the store's id");
    no_such_upload(
        part(
            "a",
            &format!("{store_id}.AAAAAAAAAAAAAAAAAAAAAA"),
            2,
            "5",
            b"forged",
        ),
        "a forged seal",
    );
    // Nothing changed at the store: the upload is `a`'s, with its one part,
    // and neither `a` nor `b` was written.
    assert_eq!(
        moto.uploads(BUCKET),
        vec![("a".to_owned(), store_id.clone(), vec![1])]
    );
    assert_eq!(moto.read(BUCKET, "b"), None);
    assert_eq!(moto.read(BUCKET, "a"), None);
    // The client never saw the store's id.
    assert_ne!(id, store_id, "the store's id was handed out as it is");
    // A listing of the bucket's uploads hands out the same id, never the
    // store's.
    let uploads = owner.send(&gw, "GET", "/cust-uploads?uploads", &[], b"");
    assert_eq!(uploads.status, 200, "{}", uploads.text());
    assert_eq!(
        element_text(&uploads.text(), "UploadId").as_deref(),
        Some(id.as_str()),
        "{}",
        uploads.text()
    );
    assert!(
        !uploads.text().contains(&format!(">{store_id}<")),
        "{}",
        uploads.text()
    );

    // Through `a`'s own path the upload goes on: listed (at another
    // instance with the same store credentials, which shares no state with
    // the first: the id verifies there too), completed.
    let (_other_dir, other_gw) = custody_gateway(moto, &["--conditional-writes", "on"]);
    let listed = owner.send(
        &other_gw,
        "GET",
        &format!("/{BUCKET}/a?uploadId={}", query_value(&id)),
        &[],
        b"",
    );
    assert_eq!(listed.status, 200, "{}", listed.text());
    let done = complete("a", &id, "5", &etag);
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(
        moto.read(BUCKET, "a").as_deref(),
        Some(&b"part one of a"[..])
    );

    // A stale holder: its upload of `fenced` (token 10), then a fresh
    // holder writes `fenced` at 20. Through its own path the completion is
    // stale; through `other`'s (whose fence it may pass) it is no upload
    // of `other`'s, and `fenced` keeps the fresh holder's bytes.
    let stale_id = create("fenced", "10");
    let stale_part = part("fenced", &stale_id, 1, "10", b"stale");
    assert_eq!(stale_part.status, 200, "{}", stale_part.text());
    let stale_etag = stale_part.header("etag").unwrap_or_default().to_owned();
    let fresh = owner.send(
        &gw,
        "PUT",
        "/cust-uploads/fenced",
        &[("x-fencing-token", "20")],
        b"fresh",
    );
    assert_eq!(fresh.status, 200, "{}", fresh.text());
    let own_path = complete("fenced", &stale_id, "10", &stale_etag);
    assert_eq!(own_path.status, 409, "{}", own_path.text());
    assert_eq!(s3_code(&own_path), "stale_token");
    no_such_upload(
        complete("other", &stale_id, "10", &stale_etag),
        "a stale completion through another key",
    );
    assert_eq!(moto.read(BUCKET, "fenced").as_deref(), Some(&b"fresh"[..]));
    assert_eq!(moto.read(BUCKET, "other"), None);

    // An abort through the upload's own path goes through.
    let aborted = owner.send(
        &gw,
        "DELETE",
        &format!("/{BUCKET}/fenced?uploadId={}", query_value(&stale_id)),
        &[("x-fencing-token", "20")],
        b"",
    );
    assert_eq!(aborted.status, 204, "{}", aborted.text());
    assert_eq!(moto.uploads(BUCKET), vec![]);
}
