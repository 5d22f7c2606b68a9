//! Red team r6: a hostile client against the gateway's S3 upload-id
//! binding (without custody), the strict copy-source grammar and the Azure
//! operation table. Every attack is checked at the store (moto, Azurite),
//! not by the status code alone.
//!
//! Four of these attacks got through before the fixes that came with them
//! (a form body's upload id, at moto, with custody and without; a tab in
//! an Azure copy source's `..` segment, forwarded): each test's comment
//! says what the store did then.

#[path = "../support/mod.rs"]
mod support;

use support::moto::{moto, S3_AUTH};
use support::{build_request, http, GatewayProcess, Resp};

fn element(text: &str, name: &str) -> Option<String> {
    let (_, rest) = text.split_once(&format!("<{name}>"))?;
    let (inside, _) = rest.split_once(&format!("</{name}>"))?;
    Some(inside.to_owned())
}

/// An S3 bucket at moto, made directly.
fn bucket(name: &str) {
    let made = http(moto().addr, "PUT", &format!("/{name}"), &[S3_AUTH], b"");
    assert_eq!(made.status, 200, "CreateBucket at moto: {}", made.text());
}

fn send(gw: &GatewayProcess, method: &str, target: &str, token: u64, body: &[u8]) -> Resp {
    let token = token.to_string();
    gw.req(
        method,
        target,
        &[S3_AUTH, ("X-Fencing-Token", &token)],
        body,
    )
}

fn create(gw: &GatewayProcess, object: &str, token: u64) -> String {
    let created = send(gw, "POST", &format!("{object}?uploads"), token, b"");
    assert_eq!(
        created.status,
        200,
        "create on {object}: {}",
        created.text()
    );
    element(&created.text(), "UploadId").expect("an UploadId")
}

/// The parts of `bucket`'s upload `id` of `key`, asked of moto directly:
/// (part number, size) each; `None` if moto knows no such upload.
fn parts_at_moto(bucket: &str, key: &str, id: &str) -> Option<Vec<(u32, u64)>> {
    let resp = http(
        moto().addr,
        "GET",
        &format!("/{bucket}/{key}?uploadId={id}"),
        &[S3_AUTH],
        b"",
    );
    if resp.status != 200 {
        return None;
    }
    let text = resp.text();
    let mut parts = Vec::new();
    for part in text.split("<Part>").skip(1) {
        let number = element(part, "PartNumber").unwrap().parse().unwrap();
        let size = element(part, "Size").unwrap().parse().unwrap();
        parts.push((number, size));
    }
    Some(parts)
}

fn uploads_at_moto(bucket: &str) -> String {
    http(
        moto().addr,
        "GET",
        &format!("/{bucket}?uploads"),
        &[S3_AUTH],
        b"",
    )
    .text()
}

fn stored(bucket: &str, key: &str) -> Option<Vec<u8>> {
    let resp = http(
        moto().addr,
        "GET",
        &format!("/{bucket}/{key}"),
        &[S3_AUTH],
        b"",
    );
    (resp.status == 200).then_some(resp.body)
}

const BOUNDARY: &str = "rt6boundary";

/// A `multipart/form-data` body of `fields` (name, value) and, if given, a
/// file field `file` holding `file`.
fn form_body(fields: &[(&str, &str)], file: Option<&[u8]>) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    if let Some(file) = file {
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"p\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(file);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// Sends `method target` with a `multipart/form-data` body through `gw`
/// at `token`; prints the exact bytes sent.
fn send_form(gw: &GatewayProcess, method: &str, target: &str, token: u64, body: &[u8]) -> Resp {
    let token = token.to_string();
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let headers = [
        S3_AUTH,
        ("X-Fencing-Token", token.as_str()),
        ("Content-Type", content_type.as_str()),
    ];
    let raw = build_request(gw.data_addr(), method, target, &headers, body);
    eprintln!(
        "---- request bytes ----\n{}\n---- end ----",
        String::from_utf8_lossy(&raw)
    );
    gw.req(method, target, &headers, body)
}

/// Attack 1a: an abort through J's path (J's own bound id in the query,
/// so the gateway's binding check passes), with a `multipart/form-data`
/// body whose `uploadId` field names K's upload. moto's
/// `abort_multipart_upload` reads `uploadId` with `_get_param`, which
/// reads the form (when a form is present) instead of the query.
///
/// Before form bodies were refused, this got through: the gateway answered 204 and moto aborted
/// K's upload (gone from `?uploads`), while J's upload was left alone at
/// the store; the gateway, taking the 204 for J's abort, unbound J's id.
#[test]
fn form_body_upload_id_aborts_another_keys_upload() {
    let b = "rt6-form-abort";
    bucket(b);
    let gw = GatewayProcess::start(&["--upstream", &moto().url(), "--store", "s3"]);
    let k = format!("/{b}/ledger-k");
    let j = format!("/{b}/ledger-j");
    // K's upload belongs to the holder at 7; the attacker holds J at 5.
    let x = create(&gw, &k, 7);
    let sent = send(
        &gw,
        "PUT",
        &format!("{k}?partNumber=1&uploadId={x}"),
        7,
        b"k's part",
    );
    assert_eq!(sent.status, 200, "{}", sent.text());
    let y = create(&gw, &j, 5);
    // Direct refusal holds: K's id through J's path.
    let direct = send(&gw, "DELETE", &format!("{j}?uploadId={x}"), 5, b"");
    assert_eq!(direct.status, 404, "{}", direct.text());
    assert!(uploads_at_moto(b).contains(&x));
    // Through the form body.
    let body = form_body(&[("uploadId", &x)], None);
    let resp = send_form(&gw, "DELETE", &format!("{j}?uploadId={y}"), 5, &body);
    eprintln!("gateway answered {}: {}", resp.status, resp.text());
    let listing = uploads_at_moto(b);
    let j_still_at_moto = listing.contains(&y);
    let j_part = send(
        &gw,
        "PUT",
        &format!("{j}?partNumber=1&uploadId={y}"),
        5,
        b"j's part",
    );
    eprintln!(
        "J's upload still at moto: {j_still_at_moto}; a part to it through J now: {} {}",
        j_part.status,
        element(&j_part.text(), "Code").unwrap_or_default()
    );
    assert!(
        listing.contains(&x),
        "BREACH: K's upload {x} was aborted at moto through J's path (gateway answered {}); moto's uploads: {listing}",
        resp.status
    );
}

/// Attack 1b: a part written into K's upload through J's path: `PUT
/// J?partNumber=1&uploadId=<J's id>` with a `multipart/form-data` body
/// whose fields are `uploadId=<K's id>`, `partNumber=1` and a `file`.
/// moto's `upload_part` reads `uploadId` and `partNumber` from the form
/// and the part's bytes from the file. The rightful holder of K (token 7)
/// then resumes its upload as resuming clients do (ListParts, then
/// complete with what is listed).
///
/// Before form bodies were refused, this got through: the gateway answered 200, moto stored the
/// attacker's bytes as part 1 of K's upload, and K then held the bytes of
/// a holder whose token (5) is below K's fence (7).
#[test]
fn form_body_upload_id_writes_a_part_into_another_keys_upload() {
    let b = "rt6-form-part";
    bucket(b);
    let gw = GatewayProcess::start(&["--upstream", &moto().url(), "--store", "s3"]);
    let k = format!("/{b}/ledger-k");
    let j = format!("/{b}/ledger-j");
    // K's fence at 7: the attacker's 5 is stale for K, fresh for J.
    let fresh = send(&gw, "PUT", &k, 7, b"fresh at 7");
    assert_eq!(fresh.status, 200, "{}", fresh.text());
    let stale = send(&gw, "PUT", &k, 5, b"stale at 5");
    assert_eq!(stale.status, 409, "{}", stale.text());
    let x = create(&gw, &k, 7);
    let sent = send(
        &gw,
        "PUT",
        &format!("{k}?partNumber=1&uploadId={x}"),
        7,
        b"holder's part at 7",
    );
    assert_eq!(sent.status, 200, "{}", sent.text());
    let y = create(&gw, &j, 5);
    let before = parts_at_moto(b, "ledger-k", &x).expect("K's upload");
    assert_eq!(before, vec![(1, 18)]);
    let injected = b"ATTACKER BYTES WRITTEN WITH TOKEN 5";
    let body = form_body(&[("uploadId", &x), ("partNumber", "1")], Some(injected));
    let resp = send_form(
        &gw,
        "PUT",
        &format!("{j}?partNumber=1&uploadId={y}"),
        5,
        &body,
    );
    eprintln!("gateway answered {}: {}", resp.status, resp.text());
    let after = parts_at_moto(b, "ledger-k", &x).expect("K's upload");
    // The holder resumes: ListParts through the gateway, then complete.
    let listed = send(&gw, "GET", &format!("{k}?uploadId={x}"), 7, b"");
    let etag = element(&listed.text(), "ETag").unwrap_or_default();
    let complete = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
    );
    let done = send(
        &gw,
        "POST",
        &format!("{k}?uploadId={x}"),
        7,
        complete.as_bytes(),
    );
    eprintln!("completion by K's holder: {} {}", done.status, done.text());
    let k_now = stored(b, "ledger-k");
    assert_eq!(
        after,
        before,
        "BREACH: K's upload {x} at moto has parts {after:?} after a request through J's path (gateway answered {}); K now holds {:?}",
        resp.status,
        k_now.as_deref().map(String::from_utf8_lossy)
    );
}

/// Attack 1c (holds): the binding, spelled otherwise. K's upload `x`
/// through J's path with the parameter or the path spelled oddly, a
/// presigned-looking query, virtual-hosted addressing, an id begun at
/// moto directly, and after a restart on disk state. Each must be refused
/// (or, where the store would read no upload at all, write only J, which
/// the token passes); K's upload at moto must keep exactly its one part,
/// and K its content.
#[test]
fn upload_id_spellings_and_addressings_never_reach_another_keys_upload() {
    let b = "rt6-spellings";
    bucket(b);
    let mut gw = GatewayProcess::start(&[
        "--upstream",
        &moto().url(),
        "--store",
        "s3",
        "--s3-domain",
        "localhost",
    ]);
    let k = format!("/{b}/ledger-k");
    let fresh = send(&gw, "PUT", &k, 7, b"fresh at 7");
    assert_eq!(fresh.status, 200, "{}", fresh.text());
    let x = create(&gw, &k, 7);
    let sent = send(
        &gw,
        "PUT",
        &format!("{k}?partNumber=1&uploadId={x}"),
        7,
        b"holder's part",
    );
    assert_eq!(sent.status, 200, "{}", sent.text());
    let port = gw.data_addr().port();
    let vhost = format!("{b}.localhost:{port}");
    let mut outcomes = Vec::new();
    let mut check = |gw: &GatewayProcess,
                     what: &str,
                     method: &str,
                     target: &str,
                     headers: &[(&str, &str)],
                     body: &[u8]| {
        let mut all = vec![S3_AUTH, ("X-Fencing-Token", "5")];
        all.extend_from_slice(headers);
        let resp = gw.req(method, target, &all, body);
        let parts = parts_at_moto(b, "ledger-k", &x);
        let code = element(&resp.text(), "Code").unwrap_or_default();
        outcomes.push(format!("{what}: {} {code}", resp.status));
        assert_eq!(
            parts,
            Some(vec![(1, 13)]),
            "{what}: K's upload changed at moto: {parts:?} (gateway {} {})",
            resp.status,
            resp.text()
        );
        assert_eq!(
            stored(b, "ledger-k").as_deref(),
            Some(&b"fresh at 7"[..]),
            "{what}: K changed"
        );
        resp
    };
    let part = |target: &str| target.to_string();
    let j = format!("/{b}/ledger-j");
    for (what, target) in [
        ("plain", format!("{j}?partNumber=1&uploadId={x}")),
        ("%75ploadId", format!("{j}?partNumber=1&%75ploadId={x}")),
        ("upload%49d", format!("{j}?partNumber=1&upload%49d={x}")),
        ("uploadid lowercase", format!("{j}?partNumber=1&uploadid={x}")),
        ("UploadId", format!("{j}?partNumber=1&UploadId={x}")),
        ("uploadId twice (J's bogus, K's)", format!("{j}?partNumber=1&uploadId=bogus&uploadId={x}")),
        ("uploadId and %75ploadId", format!("{j}?partNumber=1&uploadId=bogus&%75ploadId={x}")),
        ("uploadId+ name", format!("{j}?partNumber=1&uploadId+={x}")),
        ("uploadId;", format!("{j}?partNumber=1;uploadId={x}")),
        ("id value percent-encoded", format!("{j}?partNumber=1&uploadId={}", support::pct(&x))),
        ("K spelled %6B (J-less)", format!("/{b}/ledger-%6B?partNumber=1&uploadId={x}")),
        ("K with trailing slash", format!("{k}/?partNumber=1&uploadId={x}")),
        ("K via dot segment", format!("/{b}/ledger-j/../ledger-k?partNumber=1&uploadId={x}")),
        ("K via dot segment encoded", format!("/{b}/ledger-j/%2E%2E/ledger-k?partNumber=1&uploadId={x}")),
        ("K via double slash", format!("/{b}//ledger-k?partNumber=1&uploadId={x}")),
        ("K via %2F", format!("/{b}/x%2F..%2Fledger-k?partNumber=1&uploadId={x}")),
        ("presigned", format!("{j}?partNumber=1&uploadId={x}&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=test%2F20261125%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261125T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=00")),
    ] {
        let _ = check(&gw, what, "PUT", &part(&target), &[], b"injected");
    }
    // Virtual-hosted: J's key under the bucket's host.
    let _ = check(
        &gw,
        "virtual-hosted J",
        "PUT",
        &format!("/ledger-j?partNumber=1&uploadId={x}"),
        &[("Host", vhost.as_str())],
        b"injected",
    );
    // Completion and abort through J, by every spelling above's base.
    let complete = b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>";
    let _ = check(
        &gw,
        "complete through J",
        "POST",
        &format!("{j}?uploadId={x}"),
        &[],
        complete,
    );
    let _ = check(
        &gw,
        "complete through J, virtual-hosted",
        "POST",
        &format!("/ledger-j?uploadId={x}"),
        &[("Host", vhost.as_str())],
        complete,
    );
    let _ = check(
        &gw,
        "complete with uploads too",
        "POST",
        &format!("{j}?uploads&uploadId={x}"),
        &[],
        b"",
    );
    let _ = check(
        &gw,
        "part copy through J",
        "PUT",
        &format!("{j}?partNumber=1&uploadId={x}"),
        &[("x-amz-copy-source", &k[1..])],
        b"",
    );
    // A urlencoded form is refused 501 (any case of its type).
    let form = format!("uploadId={x}");
    let _ = check(
        &gw,
        "urlencoded form",
        "DELETE",
        &format!("{j}?uploadId=bogus"),
        &[("Content-Type", "Application/X-WWW-Form-Urlencoded")],
        form.as_bytes(),
    );
    // Begun at moto directly: refused through its own path too.
    let direct = http(
        moto().addr,
        "POST",
        &format!("{j}?uploads"),
        &[S3_AUTH],
        b"",
    );
    let direct_id = element(&direct.text(), "UploadId").expect("moto's id");
    let resp = check(
        &gw,
        "id begun at moto",
        "PUT",
        &format!("{j}?partNumber=1&uploadId={direct_id}"),
        &[],
        b"unseen",
    );
    assert_eq!(resp.status, 404, "{}", resp.text());
    assert_eq!(parts_at_moto(b, "ledger-j", &direct_id), Some(vec![]));
    // After a restart on disk state the binding holds.
    gw.restart();
    let resp = check(
        &gw,
        "after restart, through J",
        "PUT",
        &format!("{j}?partNumber=1&uploadId={x}"),
        &[],
        b"after",
    );
    assert_eq!(resp.status, 404, "{}", resp.text());
    let own = send(
        &gw,
        "PUT",
        &format!("{k}?partNumber=2&uploadId={x}"),
        7,
        b"own after restart",
    );
    assert_eq!(own.status, 200, "{}", own.text());
    eprintln!("outcomes:\n{}", outcomes.join("\n"));
}

mod custody_copy {
    use super::support;
    use support::moto_auth::moto_with_auth;
    use support::sigv4_client::Signer;
    use support::GatewayProcess;

    const IDENTITIES: &str = r#"
[[identity]]
name = "owner"
access_key_id = "RT6OWNER01"
secret_file = "owner.secret"
allow = [ { prefix = "/", access = "admin" } ]

[[identity]]
name = "billing"
access_key_id = "RT6BILLING01"
secret_file = "billing.secret"
allow = [ { prefix = "/rt6c-billing/", access = "write" }, { prefix = "/rt6c-shared/", access = "read" } ]
"#;
    const OWNER: (&str, &str) = ("RT6OWNER01", "rt6-owner-secret-0123456789");
    const BILLING: (&str, &str) = ("RT6BILLING01", "rt6-billing-secret-0123456789");

    /// Attack 2 (holds): copy sources that Python's `urlparse` + `unquote`
    /// (moto's reading) would take for another bucket or key than a loose
    /// reading would: the billing identity (write `/rt6c-billing/`, read
    /// `/rt6c-shared/`) copies into its own bucket from spellings that
    /// could reach `/rt6c-secret/x`. Checked at moto: no copy holds the
    /// secret. CopyObject and UploadPartCopy.
    #[test]
    fn copy_source_spellings_never_read_another_bucket() {
        let moto = moto_with_auth();
        let dir = tempfile::tempdir().unwrap();
        let credentials = moto.write_credentials(dir.path());
        std::fs::write(dir.path().join("owner.secret"), OWNER.1).unwrap();
        std::fs::write(dir.path().join("billing.secret"), BILLING.1).unwrap();
        let identities = dir.path().join("identities.toml");
        std::fs::write(&identities, IDENTITIES).unwrap();
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
        for bucket in ["rt6c-billing", "rt6c-shared", "rt6c-secret"] {
            let made = owner.send(
                &gw,
                "PUT",
                &format!("/{bucket}"),
                &[("x-fencing-token", "1")],
                b"",
            );
            assert_eq!(made.status, 200, "{}", made.text());
        }
        for (object, body) in [
            ("/rt6c-secret/x", &b"SECRET"[..]),
            ("/rt6c-shared/x", b"shared"),
            ("/rt6c-billing/x", b"billing"),
        ] {
            let put = owner.send(&gw, "PUT", object, &[("x-fencing-token", "2")], body);
            assert_eq!(put.status, 200, "{}", put.text());
        }
        let billing = Signer::now(BILLING);
        let mut outcomes = Vec::new();
        let sources = [
            "rt6c-secret/x",
            "/rt6c-secret/x",
            "//rt6c-billing/rt6c-secret/x",
            "%2Frt6c-secret/x",
            "/%2Frt6c-secret/x",
            "rt6c-billing%2F..%2Frt6c-secret/x",
            "rt6c-billing/..%2F..%2Frt6c-secret/x",
            "rt6c-shared/..%2Frt6c-secret%2Fx",
            "rt6c-shared/x/../../rt6c-secret/x",
            "http://h/rt6c-secret/x",
            "rt6c-shared:80/rt6c-secret/x",
            "//rt6c-secret/x",
            "rt6c-shared/x#/../../rt6c-secret/x",
            "rt6c-shared/x;/../rt6c-secret/x",
            "rt6c-shared/x?versionId=1/../../rt6c-secret/x",
            "rt6c-shared/x?/../../rt6c-secret/x",
            "rt6c-shared/%3F/../../rt6c-secret/x",
            "rt6c-shared\\..\\rt6c-secret/x",
            "rt6c-shared/x\t/../rt6c-secret/x",
            "RT6C-SECRET/x",
        ];
        for (n, source) in sources.iter().enumerate() {
            let dest = format!("/rt6c-billing/copy-{n}");
            let resp = billing.send(
                &gw,
                "PUT",
                &dest,
                &[("x-fencing-token", "3"), ("x-amz-copy-source", source)],
                b"",
            );
            let code = super::element(&resp.text(), "Code").unwrap_or_default();
            let at_store = moto.read("rt6c-billing", &format!("copy-{n}"));
            outcomes.push(format!(
                "CopyObject {source:?}: {} {code}; store holds {:?}",
                resp.status,
                at_store.as_deref().map(String::from_utf8_lossy)
            ));
            assert_ne!(
                at_store.as_deref(),
                Some(&b"SECRET"[..]),
                "BREACH: {source:?} copied the secret"
            );
        }
        // Twice: an allowed source, then the secret (moto joins them).
        let resp = billing.send(
            &gw,
            "PUT",
            "/rt6c-billing/copy-twice",
            &[
                ("x-fencing-token", "3"),
                ("x-amz-copy-source", "rt6c-shared/x"),
                ("x-amz-copy-source", "rt6c-secret/x"),
            ],
            b"",
        );
        outcomes.push(format!(
            "CopyObject source twice: {} {}",
            resp.status,
            super::element(&resp.text(), "Code").unwrap_or_default()
        ));
        assert_ne!(
            moto.read("rt6c-billing", "copy-twice").as_deref(),
            Some(&b"SECRET"[..])
        );
        // UploadPartCopy: an upload of its own, then the same spellings.
        let created = billing.send(
            &gw,
            "POST",
            "/rt6c-billing/parts?uploads",
            &[("x-fencing-token", "3")],
            b"",
        );
        assert_eq!(created.status, 200, "{}", created.text());
        let id = super::element(&created.text(), "UploadId").unwrap();
        for (n, source) in sources.iter().enumerate() {
            let target = format!(
                "/rt6c-billing/parts?partNumber={}&uploadId={}",
                n + 1,
                support::pct(&id)
            );
            let resp = billing.send(
                &gw,
                "PUT",
                &target,
                &[("x-fencing-token", "3"), ("x-amz-copy-source", source)],
                b"",
            );
            let code = super::element(&resp.text(), "Code").unwrap_or_default();
            outcomes.push(format!("UploadPartCopy {source:?}: {} {code}", resp.status));
        }
        let uploads = moto.uploads("rt6c-billing");
        eprintln!(
            "outcomes:\n{}\nuploads at moto: {uploads:?}",
            outcomes.join("\n")
        );
        for (key, _, parts) in &uploads {
            assert!(
                parts.is_empty(),
                "BREACH: a part was copied into {key}: {parts:?}"
            );
        }
    }
}

mod azure {
    use super::support;
    use fencegate::dialect::shared_key::Scheme;
    use std::time::Duration;
    use support::azurite::{
        azure_custody_gateway, azurite_for_custody, shared_key_headers, AzureIdentity, AUDITOR,
        BILLING, OPS, STORE_ACCOUNT, STORE_KEY,
    };
    use support::{build_request, http, wait_until, GatewayProcess, Resp};

    const TOKEN: &str = "x-ms-fencing-token";

    fn signed(
        who: &AzureIdentity,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Vec<(String, String)> {
        shared_key_headers(
            Scheme::SharedKey,
            who.account,
            who.key,
            &httpdate::fmt_http_date(std::time::SystemTime::now()),
            method,
            target,
            headers,
            body,
        )
    }

    fn request(
        gw: &GatewayProcess,
        who: &AzureIdentity,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Resp {
        let headers = signed(who, method, target, headers, body);
        let refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        gw.req(method, target, &refs, body)
    }

    /// What Azurite holds at `container`/`blob`, asked directly with the
    /// store's key (no gateway).
    fn at_store(container: &str, blob: &str) -> Option<Vec<u8>> {
        let target = format!("/{STORE_ACCOUNT}/{container}/{blob}");
        let headers = shared_key_headers(
            Scheme::SharedKey,
            STORE_ACCOUNT,
            STORE_KEY,
            &httpdate::fmt_http_date(std::time::SystemTime::now()),
            "GET",
            &target,
            &[],
            b"",
        );
        let refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let resp = http(azurite_for_custody(), "GET", &target, &refs, b"");
        (resp.status == 200).then_some(resp.body)
    }

    fn ensure_container(gw: &GatewayProcess, container: &str) {
        let resp = request(
            gw,
            &OPS,
            "PUT",
            &format!("/{}/{container}?restype=container", OPS.account),
            &[(TOKEN, "1")],
            b"",
        );
        assert!(
            resp.status == 201 || resp.status == 409,
            "create {container}: {} {}",
            resp.status,
            resp.text()
        );
    }

    /// Attack 3a: an Azure copy source with a TAB inside a `..` segment.
    /// The gateway reads `x-ms-copy-source` with `visible_str` (which lets
    /// a TAB through), checks the decoded blob name's segments (`..<TAB>`
    /// is no `..`), authorises `/shared/..<TAB>/secret/...` as a read under
    /// billing's `/shared/` grant, and forwards the URL with the TAB.
    /// Azurite parses the source with WHATWG `new URL()`, which removes
    /// every TAB and then resolves the `..`: it copies `/secret/...`.
    ///
    /// Seen on this run: NOT a store breach on Azurite, but a misreading
    /// the gateway forwards. The gateway authorised the source as
    /// `/shared/..<TAB>/secret/rt6-x` (a read under `/shared/`) and
    /// forwarded it, re-signed; Azurite refused the gateway's signature
    /// (502 `upstream_credentials_rejected`): the gateway's Shared Key
    /// canonicalisation turns the TAB into a space, Azurite's keeps it. A
    /// store whose signature check agrees with the gateway's (Azure
    /// documents whitespace runs as one space) and that reads the source
    /// with a WHATWG URL parser would copy `/secret/rt6-x`. This test fails
    /// on the gateway forwarding it at all (it should be refused as an
    /// invalid copy source), and checks the store holds no copy.
    #[test]
    fn a_tab_in_a_copy_source_dot_segment_reads_another_container() {
        let (gw, _dir) = azure_custody_gateway(&[]);
        for container in ["billing", "shared", "secret"] {
            ensure_container(&gw, container);
        }
        let resp = request(
            &gw,
            &OPS,
            "PUT",
            "/fgops/secret/rt6-x",
            &[("x-ms-blob-type", "BlockBlob"), (TOKEN, "1")],
            b"SECRET",
        );
        assert_eq!(resp.status, 201, "{}", resp.text());
        // The direct attempt is refused.
        let direct = format!("http://{}/fgbilling/secret/rt6-x", gw.data_addr());
        let resp = request(
            &gw,
            &BILLING,
            "PUT",
            "/fgbilling/billing/rt6-direct",
            &[("x-ms-copy-source", &direct), (TOKEN, "1")],
            b"",
        );
        assert_eq!(resp.status, 403, "{}", resp.text());
        // Through `..<TAB>`.
        let source = format!(
            "http://{}/fgbilling/shared/..\t/secret/rt6-x",
            gw.data_addr()
        );
        let target = "/fgbilling/billing/rt6-stolen";
        let headers = signed(
            &BILLING,
            "PUT",
            target,
            &[("x-ms-copy-source", &source), (TOKEN, "1")],
            b"",
        );
        let refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let raw = build_request(gw.data_addr(), "PUT", target, &refs, b"");
        eprintln!(
            "---- request bytes ----\n{}\n---- end ----",
            String::from_utf8_lossy(&raw).replace('\t', "<TAB>")
        );
        let resp = gw.req("PUT", target, &refs, b"");
        eprintln!(
            "gateway answered {} {:?}: {}",
            resp.status,
            resp.header("x-ms-error-code"),
            resp.text()
        );
        let mut held = None;
        wait_until(Duration::from_secs(5), || {
            held = at_store("billing", "rt6-stolen");
            held.is_some()
        });
        assert_ne!(
            held.as_deref(),
            Some(&b"SECRET"[..]),
            "BREACH: Azurite copied /secret/rt6-x into /billing/rt6-stolen (gateway answered {})",
            resp.status
        );
        assert!(
            resp.status == 400 || resp.status == 403,
            "the gateway forwarded a copy source it read as /shared/..<TAB>/secret/rt6-x: {} {:?}",
            resp.status,
            resp.header("x-ms-error-code")
        );
    }

    fn tier_at_store(container: &str, blob: &str) -> Option<String> {
        let target = format!("/{STORE_ACCOUNT}/{container}/{blob}");
        let headers = shared_key_headers(
            Scheme::SharedKey,
            STORE_ACCOUNT,
            STORE_KEY,
            &httpdate::fmt_http_date(std::time::SystemTime::now()),
            "HEAD",
            &target,
            &[],
            b"",
        );
        let refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let resp = http(azurite_for_custody(), "HEAD", &target, &refs, b"");
        resp.header("x-ms-access-tier").map(str::to_owned)
    }

    fn metadata_at_store(container: &str, blob: &str) -> Vec<String> {
        let target = format!("/{STORE_ACCOUNT}/{container}/{blob}");
        let headers = shared_key_headers(
            Scheme::SharedKey,
            STORE_ACCOUNT,
            STORE_KEY,
            &httpdate::fmt_http_date(std::time::SystemTime::now()),
            "HEAD",
            &target,
            &[],
            b"",
        );
        let refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let resp = http(azurite_for_custody(), "HEAD", &target, &refs, b"");
        let mut meta: Vec<String> = resp
            .headers
            .iter()
            .filter(|(n, _)| n.to_ascii_lowercase().starts_with("x-ms-meta-"))
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        meta.sort();
        meta
    }

    /// Attack 3b (holds): the Azure operation table, read otherwise than
    /// Azurite might: selectors given twice, in odd case, with odd
    /// whitespace or non-ASCII bytes; `comp` and `restype` percent-encoded,
    /// given twice, in another case. The auditor (read `/billing/`) tries
    /// to write; billing (write `/billing/`, no admin) tries admin
    /// operations (tier, container ACL). Checked at Azurite: the blob's
    /// content, metadata and tier are unchanged.
    #[test]
    fn operation_table_spellings_never_write_beyond_the_grant() {
        let (gw, _dir) = azure_custody_gateway(&[]);
        ensure_container(&gw, "billing");
        let resp = request(
            &gw,
            &OPS,
            "PUT",
            "/fgops/billing/rt6-t",
            &[("x-ms-blob-type", "BlockBlob"), (TOKEN, "1")],
            b"orig",
        );
        assert_eq!(resp.status, 201, "{}", resp.text());
        let tier = tier_at_store("billing", "rt6-t");
        let meta = metadata_at_store("billing", "rt6-t");
        let mut outcomes = Vec::new();
        let mut check = |what: &str,
                         who: &AzureIdentity,
                         method: &str,
                         target: &str,
                         headers: &[(&str, &str)],
                         body: &[u8]| {
            let resp = request(&gw, who, method, target, headers, body);
            outcomes.push(format!(
                "{what}: {} {:?}",
                resp.status,
                resp.header("x-ms-error-code")
            ));
            assert_eq!(
                at_store("billing", "rt6-t").as_deref(),
                Some(&b"orig"[..]),
                "{what}: the blob changed ({} {})",
                resp.status,
                resp.text()
            );
            assert_eq!(
                tier_at_store("billing", "rt6-t"),
                tier,
                "{what}: the tier changed"
            );
            assert_eq!(
                metadata_at_store("billing", "rt6-t"),
                meta,
                "{what}: the metadata changed"
            );
            resp
        };
        let blob = "/fgauditor/billing/rt6-t";
        let t = (TOKEN, "2");
        // The auditor writes.
        check(
            "blob type twice",
            &AUDITOR,
            "PUT",
            blob,
            &[
                ("x-ms-blob-type", "BlockBlob"),
                ("x-ms-blob-type", "BlockBlob"),
                t,
            ],
            b"pwned",
        );
        check(
            "blob type odd case",
            &AUDITOR,
            "PUT",
            blob,
            &[("X-MS-BLOB-TYPE", "blockblob"), t],
            b"pwned",
        );
        check(
            "blob type non-ASCII",
            &AUDITOR,
            "PUT",
            blob,
            &[("x-ms-blob-type", "BlockBlob\u{e9}"), t],
            b"pwned",
        );
        check(
            "blob type inner tab",
            &AUDITOR,
            "PUT",
            blob,
            &[("x-ms-blob-type", "Block\tBlob"), t],
            b"pwned",
        );
        check("no blob type", &AUDITOR, "PUT", blob, &[t], b"pwned");
        check(
            "comp=metadata twice",
            &AUDITOR,
            "PUT",
            &format!("{blob}?comp=metadata&comp=metadata"),
            &[("x-ms-meta-pwned", "1"), t],
            b"",
        );
        check(
            "%63omp=metadata",
            &AUDITOR,
            "PUT",
            &format!("{blob}?%63omp=metadata"),
            &[("x-ms-meta-pwned", "1"), t],
            b"",
        );
        check(
            "Comp=metadata",
            &AUDITOR,
            "PUT",
            &format!("{blob}?Comp=metadata"),
            &[("x-ms-meta-pwned", "1"), t],
            b"",
        );
        check(
            "comp=Metadata",
            &AUDITOR,
            "PUT",
            &format!("{blob}?comp=Metadata"),
            &[("x-ms-meta-pwned", "1"), t],
            b"",
        );
        check(
            "comp=meta%64ata",
            &AUDITOR,
            "PUT",
            &format!("{blob}?comp=meta%64ata"),
            &[("x-ms-meta-pwned", "1"), t],
            b"",
        );
        check(
            "comp[]=metadata",
            &AUDITOR,
            "PUT",
            &format!("{blob}?comp[]=metadata"),
            &[("x-ms-meta-pwned", "1"), t],
            b"",
        );
        check(
            "comp%5B0%5D=metadata",
            &AUDITOR,
            "PUT",
            &format!("{blob}?comp%5B0%5D=metadata"),
            &[("x-ms-meta-pwned", "1"), t],
            b"",
        );
        check(
            "GET with comp=metadata (a read)",
            &AUDITOR,
            "GET",
            &format!("{blob}?comp=metadata"),
            &[],
            b"",
        );
        check(
            "copy source twice",
            &AUDITOR,
            "PUT",
            blob,
            &[
                ("x-ms-copy-source", "http://x/fgauditor/billing/rt6-t"),
                ("x-ms-copy-source", "http://x/fgauditor/billing/rt6-t"),
                t,
            ],
            b"",
        );
        // Billing, a writer, sets the tier or metadata disguised.
        let own = "/fgbilling/billing/rt6-t";
        check(
            "billing comp=tier",
            &BILLING,
            "PUT",
            &format!("{own}?comp=tier"),
            &[("x-ms-access-tier", "Cool"), t],
            b"",
        );
        check(
            "billing %63omp=%74ier",
            &BILLING,
            "PUT",
            &format!("{own}?%63omp=%74ier"),
            &[("x-ms-access-tier", "Cool"), t],
            b"",
        );
        check(
            "billing comp=tier twice",
            &BILLING,
            "PUT",
            &format!("{own}?comp=tier&comp=tier"),
            &[("x-ms-access-tier", "Cool"), t],
            b"",
        );
        check(
            "billing comp=tier plus sas-named param",
            &BILLING,
            "PUT",
            &format!("{own}?comp=tier&sv=2021-08-06"),
            &[("x-ms-access-tier", "Cool"), t],
            b"",
        );
        check(
            "billing put with tier field",
            &BILLING,
            "PUT",
            own,
            &[
                ("x-ms-blob-type", "BlockBlob"),
                ("x-ms-access-tier", "Cool"),
                t,
            ],
            b"orig",
        );
        // Container ACL by billing, restype spelled otherwise.
        for (what, query) in [
            ("restype plain", "restype=container&comp=acl"),
            ("restype encoded", "%72estype=container&comp=acl"),
            (
                "restype twice",
                "restype=container&restype=container&comp=acl",
            ),
            ("restype value encoded", "restype=%63ontainer&comp=%61cl"),
        ] {
            let resp = check(
                what,
                &BILLING,
                "PUT",
                &format!("/fgbilling/billing?{query}"),
                &[("x-ms-blob-public-access", "container"), t],
                b"",
            );
            assert!(resp.status >= 400, "{what}: {}", resp.status);
        }
        eprintln!("outcomes:\n{}", outcomes.join("\n"));
        // Public access stays off: an anonymous read of the blob at Azurite.
        let anonymous = http(
            azurite_for_custody(),
            "GET",
            &format!("/{STORE_ACCOUNT}/billing/rt6-t"),
            &[],
            b"",
        );
        assert_ne!(anonymous.status, 200, "the container became public");
    }
}

mod custody_form {
    use super::support;
    use support::moto_auth::moto_with_auth;
    use support::sigv4_client::Signer;
    use support::{build_request, GatewayProcess};

    const IDENTITIES: &str = r#"
[[identity]]
name = "owner"
access_key_id = "RT6FOWNER01"
secret_file = "owner.secret"
allow = [ { prefix = "/", access = "admin" } ]

[[identity]]
name = "mixed"
access_key_id = "RT6FMIXED01"
secret_file = "mixed.secret"
allow = [ { prefix = "/rt6u/mixed/", access = "write" }, { prefix = "/rt6u/", access = "read" } ]
"#;
    const OWNER: (&str, &str) = ("RT6FOWNER01", "rt6f-owner-secret-0123456789");
    const MIXED: (&str, &str) = ("RT6FMIXED01", "rt6f-mixed-secret-0123456789");

    /// Attack 1d, under custody: the identity `mixed` may write
    /// `/rt6u/mixed/` and only read the rest of the bucket. The owner has
    /// an upload in progress on `/rt6u/owner/k`. `mixed` lists the
    /// bucket's uploads (a read it may do): the sealed id is
    /// `<store id>.<seal>`, the store's id in clear. It then sends, through
    /// its own upload's path (its own sealed id in the query), a
    /// `multipart/form-data` body whose `uploadId` field is the owner's
    /// store id: a part, then an abort.
    ///
    /// Before form bodies were refused, this got through: the gateway answered 200 to the part and
    /// moto's upload of `owner/k` gained part 2 (parts [1, 2]); it answered
    /// 204 to the abort and the upload was gone from moto. (An
    /// `application/x-www-form-urlencoded` body is refused 501: attack 1e.)
    #[test]
    fn under_custody_a_form_body_upload_id_reaches_an_upload_the_identity_may_only_read() {
        let moto = moto_with_auth();
        let dir = tempfile::tempdir().unwrap();
        let credentials = moto.write_credentials(dir.path());
        std::fs::write(dir.path().join("owner.secret"), OWNER.1).unwrap();
        std::fs::write(dir.path().join("mixed.secret"), MIXED.1).unwrap();
        let identities = dir.path().join("identities.toml");
        std::fs::write(&identities, IDENTITIES).unwrap();
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
        let mixed = Signer::now(MIXED);
        let made = owner.send(&gw, "PUT", "/rt6u", &[("x-fencing-token", "1")], b"");
        assert!(made.status == 200 || made.status == 409, "{}", made.text());
        let created = owner.send(
            &gw,
            "POST",
            "/rt6u/owner/k?uploads",
            &[("x-fencing-token", "2")],
            b"",
        );
        assert_eq!(created.status, 200, "{}", created.text());
        let sealed_x = super::element(&created.text(), "UploadId").unwrap();
        let part = owner.send(
            &gw,
            "PUT",
            &format!(
                "/rt6u/owner/k?partNumber=1&uploadId={}",
                support::pct(&sealed_x)
            ),
            &[("x-fencing-token", "2")],
            b"owner's part",
        );
        assert_eq!(part.status, 200, "{}", part.text());
        // mixed reads the uploads listing (its read grant covers it).
        let listed = mixed.send(&gw, "GET", "/rt6u?uploads", &[], b"");
        eprintln!("mixed's listing: {} {}", listed.status, listed.text());
        let listed_text = listed.text();
        let seen = listed_text
            .split("<Upload>")
            .skip(1)
            .find(|u| u.contains("<Key>owner/k</Key>"))
            .and_then(|u| super::element(u, "UploadId"));
        let seen = seen.unwrap_or_else(|| sealed_x.clone());
        let raw_x = seen.split('.').next().unwrap().to_owned();
        // Its own upload, through its own path.
        let created = mixed.send(
            &gw,
            "POST",
            "/rt6u/mixed/j?uploads",
            &[("x-fencing-token", "3")],
            b"",
        );
        assert_eq!(created.status, 200, "{}", created.text());
        let sealed_y = super::element(&created.text(), "UploadId").unwrap();
        let store_parts = |moto: &support::moto_auth::MotoAuth| {
            moto.uploads("rt6u")
                .into_iter()
                .find(|(key, id, _)| key == "owner/k" && *id == raw_x)
                .map(|(_, _, parts)| parts)
        };
        assert_eq!(store_parts(moto), Some(vec![1]));
        let boundary = "rt6boundary";
        let body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"uploadId\"\r\n\r\n{raw_x}\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"partNumber\"\r\n\r\n2\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"p\"\r\n\r\nWRITTEN BY AN IDENTITY THAT MAY ONLY READ owner/k\r\n--{boundary}--\r\n"
        );
        let content_type = format!("multipart/form-data; boundary={boundary}");
        let target = format!(
            "/rt6u/mixed/j?partNumber=2&uploadId={}",
            support::pct(&sealed_y)
        );
        let fields = [
            ("x-fencing-token", "3"),
            ("content-type", content_type.as_str()),
        ];
        let headers = mixed.headers(
            &gw.data_addr().to_string(),
            "PUT",
            &target,
            &fields,
            &[],
            body.as_bytes(),
        );
        let refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        eprintln!(
            "---- request bytes ----\n{}\n---- end ----",
            String::from_utf8_lossy(&build_request(
                gw.data_addr(),
                "PUT",
                &target,
                &refs,
                body.as_bytes()
            ))
        );
        let resp = gw.req("PUT", &target, &refs, body.as_bytes());
        eprintln!("part through mixed/j: {} {}", resp.status, resp.text());
        let after_part = store_parts(moto);
        // The abort.
        let abort_body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"uploadId\"\r\n\r\n{raw_x}\r\n--{boundary}--\r\n"
        );
        let target = format!("/rt6u/mixed/j?uploadId={}", support::pct(&sealed_y));
        let headers = mixed.headers(
            &gw.data_addr().to_string(),
            "DELETE",
            &target,
            &fields,
            &[],
            abort_body.as_bytes(),
        );
        let refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        eprintln!(
            "---- request bytes ----\n{}\n---- end ----",
            String::from_utf8_lossy(&build_request(
                gw.data_addr(),
                "DELETE",
                &target,
                &refs,
                abort_body.as_bytes()
            ))
        );
        let aborted = gw.req("DELETE", &target, &refs, abort_body.as_bytes());
        eprintln!(
            "abort through mixed/j: {} {}",
            aborted.status,
            aborted.text()
        );
        let after_abort = store_parts(moto);
        assert_eq!(
            (after_part.clone(), after_abort.clone()),
            (Some(vec![1]), Some(vec![1])),
            "BREACH: owner/k's upload at moto after the part: {after_part:?} (gateway {}), after the abort: {after_abort:?} (gateway {})",
            resp.status,
            aborted.status
        );
    }

    /// Attack 1e, under custody: the same with an
    /// `application/x-www-form-urlencoded` body (which moto also reads as
    /// the form). Recorded, with the store's state.
    #[test]
    fn under_custody_an_urlencoded_form_upload_id_is_refused() {
        let moto = moto_with_auth();
        let dir = tempfile::tempdir().unwrap();
        let credentials = moto.write_credentials(dir.path());
        std::fs::write(dir.path().join("owner.secret"), OWNER.1).unwrap();
        std::fs::write(dir.path().join("mixed.secret"), MIXED.1).unwrap();
        let identities = dir.path().join("identities.toml");
        std::fs::write(&identities, IDENTITIES).unwrap();
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
        let mixed = Signer::now(MIXED);
        let made = owner.send(&gw, "PUT", "/rt6u", &[("x-fencing-token", "1")], b"");
        assert!(made.status == 200 || made.status == 409, "{}", made.text());
        let created = owner.send(
            &gw,
            "POST",
            "/rt6u/owner/k2?uploads",
            &[("x-fencing-token", "2")],
            b"",
        );
        let sealed_x = super::element(&created.text(), "UploadId").unwrap();
        let raw_x = sealed_x.split('.').next().unwrap().to_owned();
        let created = mixed.send(
            &gw,
            "POST",
            "/rt6u/mixed/j2?uploads",
            &[("x-fencing-token", "3")],
            b"",
        );
        assert_eq!(created.status, 200, "{}", created.text());
        let sealed_y = super::element(&created.text(), "UploadId").unwrap();
        let body = format!("uploadId={raw_x}");
        let target = format!("/rt6u/mixed/j2?uploadId={}", support::pct(&sealed_y));
        let resp = mixed.send(
            &gw,
            "DELETE",
            &target,
            &[
                ("x-fencing-token", "3"),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
            body.as_bytes(),
        );
        let still = moto
            .uploads("rt6u")
            .iter()
            .any(|(key, id, _)| key == "owner/k2" && *id == raw_x);
        eprintln!(
            "urlencoded abort through mixed/j: {} {}; owner/k's upload still at moto: {still}",
            resp.status,
            resp.text()
        );
        assert!(
            still,
            "BREACH: an urlencoded form aborted owner/k's upload (gateway {})",
            resp.status
        );
    }
}

mod azure_plain {
    use super::support;
    use fencegate::dialect::shared_key::Scheme;
    use support::azurite::{azurite, shared_key_headers};
    use support::{http, GatewayProcess, Resp};

    const DEV_ACCOUNT: &str = "devstoreaccount1";
    const DEV_KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    fn dev(
        addr: std::net::SocketAddr,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Resp {
        let headers = shared_key_headers(
            Scheme::SharedKey,
            DEV_ACCOUNT,
            DEV_KEY,
            &httpdate::fmt_http_date(std::time::SystemTime::now()),
            method,
            target,
            headers,
            body,
        );
        let refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        http(addr, method, target, &refs, body)
    }

    /// Attack 3c (holds), without custody (`--store azure`): the client
    /// holds the store's key, the gateway fences. A blob fenced at 5; a
    /// holder at 3 writes or deletes it, or deletes its container, through
    /// other spellings of the path and of `restype`/`comp`, and with the
    /// selectors given twice or oddly. Checked at Azurite: the blob keeps
    /// its content, the container stays.
    #[test]
    fn without_custody_a_stale_token_never_reaches_a_fenced_blob_by_another_spelling() {
        let store = azurite();
        let gw =
            GatewayProcess::start(&["--upstream", &format!("http://{store}"), "--store", "azure"]);
        let made = dev(
            gw.data_addr(),
            "PUT",
            "/devstoreaccount1/rt6plain?restype=container",
            &[("X-Fencing-Token", "1")],
            b"",
        );
        assert!(matches!(made.status, 201 | 409), "{}", made.text());
        let blob = "/devstoreaccount1/rt6plain/report";
        let put = dev(
            gw.data_addr(),
            "PUT",
            blob,
            &[("x-ms-blob-type", "BlockBlob"), ("X-Fencing-Token", "5")],
            b"v5",
        );
        assert_eq!(put.status, 201, "{}", put.text());
        let mut outcomes = Vec::new();
        let mut check =
            |what: &str, method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]| {
                let mut all = vec![("X-Fencing-Token", "3")];
                all.extend_from_slice(headers);
                let resp = dev(gw.data_addr(), method, target, &all, body);
                outcomes.push(format!(
                    "{what}: {} {:?}",
                    resp.status,
                    resp.header("x-ms-error-code")
                ));
                let kept = dev(store, "GET", blob, &[], b"");
                assert_eq!(
                    (kept.status, kept.text()),
                    (200, "v5".to_owned()),
                    "{what}: the fenced blob changed ({} {})",
                    resp.status,
                    resp.text()
                );
            };
        let bt = ("x-ms-blob-type", "BlockBlob");
        check("plain stale put", "PUT", blob, &[bt], b"v3");
        check(
            "account upper case",
            "PUT",
            "/DEVSTOREACCOUNT1/rt6plain/report",
            &[bt],
            b"v3",
        );
        check(
            "container upper case",
            "PUT",
            "/devstoreaccount1/RT6PLAIN/report",
            &[bt],
            b"v3",
        );
        check(
            "trailing slash",
            "PUT",
            "/devstoreaccount1/rt6plain/report/",
            &[bt],
            b"v3",
        );
        check(
            "encoded letter",
            "PUT",
            "/devstoreaccount1/rt6plain/r%65port",
            &[bt],
            b"v3",
        );
        check(
            "encoded slash",
            "PUT",
            "/devstoreaccount1/rt6plain%2Freport",
            &[bt],
            b"v3",
        );
        check(
            "dot segment",
            "PUT",
            "/devstoreaccount1/rt6plain/x/../report",
            &[bt],
            b"v3",
        );
        check(
            "double slash",
            "PUT",
            "/devstoreaccount1//rt6plain/report",
            &[bt],
            b"v3",
        );
        check("blob type twice", "PUT", blob, &[bt, bt], b"v3");
        check(
            "blob type lower case",
            "PUT",
            blob,
            &[("x-ms-blob-type", "blockblob")],
            b"v3",
        );
        check(
            "blob type non-ASCII",
            "PUT",
            blob,
            &[("x-ms-blob-type", "BlockBlob\u{e9}")],
            b"v3",
        );
        check(
            "comp=block encoded name",
            "PUT",
            &format!("{blob}?%63omp=block&blockid=YQ%3D%3D"),
            &[],
            b"v3",
        );
        check(
            "comp twice",
            "PUT",
            &format!("{blob}?comp=metadata&comp=metadata"),
            &[("x-ms-meta-a", "1")],
            b"",
        );
        check("stale delete", "DELETE", blob, &[], b"");
        check(
            "stale delete, X-HTTP-Method on GET",
            "GET",
            blob,
            &[("X-HTTP-Method", "DELETE")],
            b"",
        );
        check(
            "stale delete, x-http-method lower",
            "GET",
            blob,
            &[("x-http-method", " DELETE")],
            b"",
        );
        for (what, target) in [
            (
                "delete container",
                "/devstoreaccount1/rt6plain?restype=container".to_owned(),
            ),
            (
                "delete container, trailing slash",
                "/devstoreaccount1/rt6plain/?restype=container".to_owned(),
            ),
            (
                "delete container, restype encoded",
                "/devstoreaccount1/rt6plain?%72estype=container".to_owned(),
            ),
            (
                "delete container, restype value encoded",
                "/devstoreaccount1/rt6plain?restype=%63ontainer".to_owned(),
            ),
            (
                "delete container, restype twice",
                "/devstoreaccount1/rt6plain?restype=container&restype=container".to_owned(),
            ),
            (
                "delete container, upper case",
                "/devstoreaccount1/RT6PLAIN?restype=container".to_owned(),
            ),
            (
                "delete container, via dot segment",
                "/devstoreaccount1/rt6plain/x/..?restype=container".to_owned(),
            ),
        ] {
            check(what, "DELETE", &target, &[], b"");
        }
        eprintln!("outcomes:\n{}", outcomes.join("\n"));
    }
}
