//! The S3 issue's (#48) attack classes under credential custody, one test
//! named by each class, and the per-row conformance test of the S3
//! operation table: the real binary under `--store s3 --conditional-writes
//! on` in front of moto, which verifies signatures and knows only the
//! gateway's key. Every test checks at moto, with the store's key
//! ([`MotoAuth::store`]), that the store did nothing the gateway did not
//! authorise and fence, not only the status the client got.
//!
//! Class 4 (an upload id through another key's path) is
//! `s3_custody::class4_an_upload_id_is_refused_through_another_keys_path`.

#[path = "../support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::Path;

use fencegate::dialect::s3_operations::{operations, Level, Need, Operation};
use fencegate::dialect::sigv4;
use support::moto_auth::{moto_with_auth, MotoAuth};
use support::sigv4_client::Signer;
use support::{Backend, GatewayProcess, Resp};

/// The identities of these tests. `owner` may do anything; `writer` writes
/// the class buckets and the conformance buckets; `reader` reads the
/// conformance buckets; `everything` reads everything (ListBuckets needs
/// `read` on `/`); `inside` is confined inside buckets (a prefix of
/// theirs); `stranger` reads a bucket nobody uses.
const IDENTITIES: &str = r#"
[[identity]]
name = "owner"
access_key_id = "FGOWNER01"
secret_file = "owner.secret"
allow = [ { prefix = "/", access = "admin" } ]

[[identity]]
name = "writer"
access_key_id = "FGWRITER01"
secret_file = "writer.secret"
allow = [
  { prefix = "/c1-mine/", access = "write" },
  { prefix = "/c2-mine/", access = "write" },
  { prefix = "/c3-del/", access = "write" },
  { prefix = "/c5-lock/", access = "write" },
  { prefix = "/c7-post/", access = "write" },
  { prefix = "/c8-tok/", access = "write" },
  { prefix = "/c9-sub/", access = "write" },
  { prefix = "/rows/", access = "write" },
  { prefix = "/rowslock/", access = "write" },
  { prefix = "/rowslock-empty/", access = "write" },
]

[[identity]]
name = "reader"
access_key_id = "FGREADER01"
secret_file = "reader.secret"
allow = [ { prefix = "/rows/", access = "read" }, { prefix = "/rowslock/", access = "read" } ]

[[identity]]
name = "everything"
access_key_id = "FGEVERY01"
secret_file = "every.secret"
allow = [ { prefix = "/", access = "read" } ]

[[identity]]
name = "inside"
access_key_id = "FGINSIDE01"
secret_file = "inside.secret"
allow = [
  { prefix = "/c6-conf/mine/", access = "write" },
  { prefix = "/c9-sub/mine/", access = "write" },
  { prefix = "/rows/sub/", access = "read" },
  { prefix = "/rowslock/sub/", access = "read" },
]

[[identity]]
name = "stranger"
access_key_id = "FGSTRANGER01"
secret_file = "stranger.secret"
allow = [ { prefix = "/elsewhere/", access = "read" } ]
"#;

const OWNER: (&str, &str) = ("FGOWNER01", "owner-secret-0123456789");
const WRITER: (&str, &str) = ("FGWRITER01", "writer-secret-0123456789");
const READER: (&str, &str) = ("FGREADER01", "reader-secret-0123456789");
const EVERYTHING: (&str, &str) = ("FGEVERY01", "every-secret-0123456789");
const INSIDE: (&str, &str) = ("FGINSIDE01", "inside-secret-0123456789");
const STRANGER: (&str, &str) = ("FGSTRANGER01", "stranger-secret-0123456789");

/// The identities and their secrets, written into `dir`.
fn write_identities(dir: &Path) -> std::path::PathBuf {
    for (file, (_, secret)) in [
        ("owner.secret", OWNER),
        ("writer.secret", WRITER),
        ("reader.secret", READER),
        ("every.secret", EVERYTHING),
        ("inside.secret", INSIDE),
        ("stranger.secret", STRANGER),
    ] {
        std::fs::write(dir.join(file), secret).unwrap();
    }
    let path = dir.join("identities.toml");
    std::fs::write(&path, IDENTITIES).unwrap();
    path
}

/// The gateway under custody, as the issue attacks it: `--store s3
/// --conditional-writes on` in front of `upstream`, signing with `moto`'s
/// key.
fn custody_gateway_to(moto: &MotoAuth, upstream: &str) -> (tempfile::TempDir, GatewayProcess) {
    custody_gateway_with(moto, upstream, &[])
}

/// [`custody_gateway_to`] with `extra` options.
fn custody_gateway_with(
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
        "--conditional-writes",
        "on",
        "--upstream-credentials",
        credentials.to_str().unwrap(),
        "--identities",
        identities.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let gw = GatewayProcess::start(&args);
    (dir, gw)
}

fn custody_gateway(moto: &MotoAuth) -> (tempfile::TempDir, GatewayProcess) {
    custody_gateway_to(moto, &moto.url)
}

/// An S3 error document's code.
fn s3_code(resp: &Resp) -> String {
    element_text(&resp.text(), "Code").unwrap_or_else(|| format!("no code in {:?}", resp.text()))
}

/// The text of the first `<name>` element of `text`.
fn element_text(text: &str, name: &str) -> Option<String> {
    let (_, rest) = text.split_once(&format!("<{name}>"))?;
    let (inside, _) = rest.split_once(&format!("</{name}>"))?;
    Some(inside.to_owned())
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

/// A presigned URL of `key` (id, secret) for `method path`, its query
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

/// Sends `method target` as `key` through the gateway, every field signed.
fn send(
    gw: &GatewayProcess,
    key: (&str, &str),
    method: &str,
    target: &str,
    fields: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    Signer::now(key).send(gw, method, target, fields, body)
}

/// Asserts `resp` is a refusal (4xx or 5xx), showing it if not.
fn refused(resp: &Resp, what: &str) {
    assert!(
        resp.status >= 400,
        "{what}: not refused: {} {}",
        resp.status,
        resp.text()
    );
}

/// Asserts a 403 `AccessDenied`.
fn denied(resp: &Resp, what: &str) {
    assert_eq!(resp.status, 403, "{what}: {}", resp.text());
    assert_eq!(s3_code(resp), "AccessDenied", "{what}");
    assert!(
        !resp.text().contains("only over TLS"),
        "{what}: refused for its body, not for what it asks: {}",
        resp.text()
    );
}

/// Makes `bucket` (as `owner`, token 1), with `fields`; it may exist.
fn make_bucket(gw: &GatewayProcess, bucket: &str, fields: &[(&str, &str)]) {
    let mut all = vec![("x-fencing-token", "1")];
    all.extend_from_slice(fields);
    let made = send(gw, OWNER, "PUT", &format!("/{bucket}"), &all, b"");
    assert!(
        made.status == 200 || s3_code(&made) == "BucketAlreadyOwnedByYou",
        "CreateBucket {bucket}: {} {}",
        made.status,
        made.text()
    );
}

/// Writes `body` at `target` as `owner` with `token`.
fn owner_put(gw: &GatewayProcess, target: &str, token: u64, body: &[u8]) {
    let token = token.to_string();
    let put = send(
        gw,
        OWNER,
        "PUT",
        target,
        &[("x-fencing-token", &token)],
        body,
    );
    assert_eq!(put.status, 200, "PUT {target}: {}", put.text());
}

/// What moto holds at `bucket/key` (the store's key, no gateway).
fn at_moto(moto: &MotoAuth, bucket: &str, key: &str) -> Option<Vec<u8>> {
    moto.read(bucket, key)
}

/// Whether moto's ACL of `target` (`/bucket/key` or `/bucket`) grants
/// anything to everyone.
fn public_at_moto(moto: &MotoAuth, target: &str) -> bool {
    let acl = moto.store("GET", &format!("{target}?acl"), &[], b"");
    assert_eq!(acl.status, 200, "{target}?acl at moto: {}", acl.text());
    acl.text().contains("AllUsers") || acl.text().contains("AuthenticatedUsers")
}

// ---------------------------------------------------------------------
// Class 1

/// Class 1: a presigned URL's `x-amz-*` query parameters become fields of
/// the request the store gets; they are authorised as those fields. A
/// writer confined to `c1-mine` copies out of `c1-secret` (which it may
/// not read) by CopyObject and by UploadPartCopy with `x-amz-copy-source`
/// as a query parameter, and makes its object public with `x-amz-acl` or
/// `x-amz-grant-read` as one: each refused, and at moto nothing was
/// copied, no part was added, the object is neither public nor rewritten.
#[test]
fn class1_presigned_amz_parameters_are_authorised_as_the_fields_they_become() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto);
    make_bucket(&gw, "c1-mine", &[]);
    make_bucket(&gw, "c1-secret", &[]);
    owner_put(&gw, "/c1-secret/k", 1, b"secret of class 1");
    owner_put(&gw, "/c1-mine/own", 1, b"mine");
    let token = [("x-fencing-token", "5")];

    // CopyObject, the source as a presigned parameter, in two spellings.
    for (i, param) in [
        "x-amz-copy-source=c1-secret%2Fk",
        "X-Amz-Copy-Source=c1-secret%2Fk",
        "x-amz-copy-source=%2Fc1-secret%2Fk",
    ]
    .iter()
    .enumerate()
    {
        let path = format!("/c1-mine/stolen{i}");
        let url = presigned_with(&gw, WRITER, "PUT", &path, param);
        let resp = gw.req("PUT", &url, &token, b"");
        assert_eq!(
            at_moto(moto, "c1-mine", &format!("stolen{i}")),
            None,
            "{param}: a copy reached moto"
        );
        refused(&resp, param);
    }
    // UploadPartCopy: an upload of the writer's own object, a part copied
    // from the secret bucket by a presigned parameter.
    let created = send(
        &gw,
        WRITER,
        "POST",
        "/c1-mine/mp?uploads",
        &[("x-fencing-token", "5")],
        b"",
    );
    assert_eq!(created.status, 200, "{}", created.text());
    let id = element_text(&created.text(), "UploadId").expect("an upload id");
    for param in [
        "x-amz-copy-source=c1-secret%2Fk",
        "X-Amz-Copy-Source=c1-secret%2Fk",
    ] {
        let url = presigned_with(
            &gw,
            WRITER,
            "PUT",
            "/c1-mine/mp",
            &format!("partNumber=1&uploadId={}&{param}", query_value(&id)),
        );
        let resp = gw.req("PUT", &url, &token, b"");
        refused(&resp, &format!("UploadPartCopy {param}"));
    }
    let uploads = moto.uploads("c1-mine");
    assert_eq!(uploads.len(), 1, "{uploads:?}");
    assert_eq!(uploads[0].0, "mp");
    assert_eq!(uploads[0].2, Vec::<u64>::new(), "a part was copied at moto");

    // A public ACL, or a grant to everyone, as presigned parameters.
    for param in [
        "x-amz-acl=public-read",
        "X-Amz-Acl=public-read",
        "x-amz-grant-read=uri%3D%22http%3A%2F%2Facs.amazonaws.com%2Fgroups%2Fglobal%2FAllUsers%22",
        "x-amz-grant-full-control=uri%3D%22http%3A%2F%2Facs.amazonaws.com%2Fgroups%2Fglobal%2FAllUsers%22",
    ] {
        // No body: a presigned request with one is taken only over TLS,
        // which would refuse it for another reason.
        let url = presigned_with(&gw, WRITER, "PUT", "/c1-mine/own", param);
        let resp = gw.req("PUT", &url, &token, b"");
        assert!(
            !public_at_moto(moto, "/c1-mine/own"),
            "{param}: made public at moto"
        );
        denied_or_refused(&resp, param);
        assert_eq!(
            at_moto(moto, "c1-mine", "own").as_deref(),
            Some(&b"mine"[..]),
            "{param}: the object was rewritten"
        );
    }
    // Object lock by presigned parameter: admin's only.
    let url = presigned_with(
        &gw,
        WRITER,
        "PUT",
        "/c1-mine/own",
        "x-amz-object-lock-legal-hold=ON",
    );
    denied_or_refused(&gw.req("PUT", &url, &token, b""), "a presigned legal hold");
    assert_eq!(
        at_moto(moto, "c1-mine", "own").as_deref(),
        Some(&b"mine"[..])
    );

    // The same URLs without the parameters are the writer's to use: the
    // refusals above were the parameters'.
    let url = presigned_with(&gw, WRITER, "PUT", "/c1-mine/own", "");
    let resp = gw.req("PUT", &url, &token, b"");
    assert_eq!(resp.status, 200, "a plain presigned PUT: {}", resp.text());
    assert_eq!(at_moto(moto, "c1-mine", "own").as_deref(), Some(&b""[..]));
    assert!(!public_at_moto(moto, "/c1-mine/own"));
}

/// 403 `AccessDenied`, or another refusal (a spelling the table does not
/// take: 501).
fn denied_or_refused(resp: &Resp, what: &str) {
    if resp.status != 501 {
        denied(resp, what);
    }
}

// ---------------------------------------------------------------------
// Class 2

/// Class 2: a copy source the gateway would normalise into a bucket the
/// writer may read, which the store reads as another bucket's object. The
/// writer may write `c2-mine` and read nothing else; the secret is at
/// `c2-secret/k`. Every spelling (dot segments, encoded slashes and dots,
/// double encoding, backslashes, `//`, a version id hiding a path, a URL)
/// is refused by the gateway, or forwarded as what moto reads alike (a
/// literal key of `c2-mine`, which moto does not have), and at moto no
/// destination object exists. moto itself (sent each spelling with the store's key)
/// reads `///c2-secret/k` and a URL's path as `c2-secret/k`: it parses the
/// source as a URL and strips every leading `/`.
#[test]
fn class2_a_copy_source_spelled_into_another_bucket_copies_nothing() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto);
    make_bucket(&gw, "c2-mine", &[]);
    make_bucket(&gw, "c2-secret", &[]);
    owner_put(&gw, "/c2-secret/k", 1, b"secret of class 2");
    let sources = [
        "c2-mine/../c2-secret/k",
        "/c2-mine/../c2-secret/k",
        "c2-mine/./../c2-secret/k",
        "c2-mine/x/../../c2-secret/k",
        "c2-mine/%2e%2e/c2-secret/k",
        "c2-mine/%2E%2E/c2-secret/k",
        "c2-mine/.%2e/c2-secret/k",
        "c2-mine%2F..%2Fc2-secret%2Fk",
        "c2-mine/..%2Fc2-secret%2Fk",
        "c2-mine%2f..%2fc2-secret%2fk",
        "c2-mine%252F..%252Fc2-secret%252Fk",
        "c2-mine/%252e%252e/c2-secret/k",
        "c2-mine\\..\\c2-secret\\k",
        "c2-mine/..\\c2-secret/k",
        "c2-mine%5C..%5Cc2-secret%5Ck",
        "//c2-secret/k",
        "c2-mine//../c2-secret/k",
        "c2-mine/k?versionId=x/../../c2-secret/k",
        "c2-mine/k%3FversionId%3D/../../c2-secret/k",
        "c2-mine/%00/../../c2-secret/k",
        "c2-mine;/../c2-secret/k",
        // moto reads these two as c2-secret/k (it parses the source as a
        // URL and strips every leading '/').
        "///c2-secret/k",
        "http://c2-mine/c2-secret/k",
    ];
    let forwarded = || support::outcome_all_identities(&gw.metrics(), "forwarded");
    // Sent to moto directly with the store's key, which spellings copy the
    // secret: what the gateway must not let through.
    let mut copied_directly = Vec::new();
    for (i, source) in sources.iter().enumerate() {
        let target = format!("/c2-mine/direct{i}");
        moto.store("PUT", &target, &[("x-amz-copy-source", source)], b"");
        if at_moto(moto, "c2-mine", &format!("direct{i}")).as_deref()
            == Some(&b"secret of class 2"[..])
        {
            copied_directly.push(*source);
        }
    }
    println!("copy sources moto itself reads as c2-secret/k: {copied_directly:?}");
    for (i, source) in sources.iter().enumerate() {
        let before = forwarded();
        let resp = send(
            &gw,
            WRITER,
            "PUT",
            &format!("/c2-mine/dst{i}"),
            &[("x-amz-copy-source", source), ("x-fencing-token", "5")],
            b"",
        );
        assert_eq!(
            at_moto(moto, "c2-mine", &format!("dst{i}")),
            None,
            "{source}: copied at moto ({} {})",
            resp.status,
            resp.text()
        );
        refused(&resp, source);
        // Forwarded only as what both read alike: a literal key (or
        // version) of c2-mine, which moto does not have.
        if forwarded() != before {
            assert!(
                resp.status == 404
                    && ["NoSuchKey", "NoSuchVersion"].contains(&s3_code(&resp).as_str()),
                "{source}: forwarded: {} {}",
                resp.status,
                resp.text()
            );
        }
    }
    // And as UploadPartCopy: no part reaches moto.
    let created = send(
        &gw,
        WRITER,
        "POST",
        "/c2-mine/mp?uploads",
        &[("x-fencing-token", "5")],
        b"",
    );
    assert_eq!(created.status, 200, "{}", created.text());
    let id = element_text(&created.text(), "UploadId").expect("an upload id");
    for source in sources {
        let resp = send(
            &gw,
            WRITER,
            "PUT",
            &format!("/c2-mine/mp?partNumber=1&uploadId={}", query_value(&id)),
            &[("x-amz-copy-source", source), ("x-fencing-token", "5")],
            b"",
        );
        refused(&resp, source);
    }
    let uploads = moto.uploads("c2-mine");
    assert_eq!(uploads.len(), 1, "{uploads:?}");
    assert_eq!(uploads[0].2, Vec::<u64>::new(), "a part was copied at moto");
    // The owner, who may read c2-secret, copies with the plain spelling:
    // the grammar is not what stopped the writer's.
    let resp = send(
        &gw,
        OWNER,
        "PUT",
        "/c2-mine/granted",
        &[
            ("x-amz-copy-source", "c2-secret/k"),
            ("x-fencing-token", "5"),
        ],
        b"",
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        at_moto(moto, "c2-mine", "granted").as_deref(),
        Some(&b"secret of class 2"[..])
    );
}

// ---------------------------------------------------------------------
// Class 3

/// Class 3: a DeleteObjects key the gateway and the store read
/// differently. `fenced` holds a fresh holder's bytes at token 20; a stale
/// holder (token 10) lists it in XML constructs the store reads as
/// `fenced` (a comment, a processing instruction, an entity of a DTD,
/// CDATA, a character reference, an element inside the key): each refused,
/// and at moto `fenced` is still the fresh holder's.
#[test]
fn class3_a_delete_objects_key_in_xml_constructs_deletes_nothing_fenced() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto);
    make_bucket(&gw, "c3-del", &[]);
    owner_put(&gw, "/c3-del/fenced", 20, b"fresh");
    let keys = [
        "fen<!-- a comment -->ced",
        "fen<?pi x?>ced",
        "fen<![CDATA[ced]]>",
        "<![CDATA[fenced]]>",
        "fen&#99;ed",
        "fen&#x63;ed",
        "&k;",
        "fen<i/>ced",
        "fen<i>ced</i>",
    ];
    for key in keys {
        let doctype = if key == "&k;" {
            "<!DOCTYPE Delete [<!ENTITY k \"fenced\">]>"
        } else {
            ""
        };
        let body = format!(
            "{doctype}<Delete><Quiet>false</Quiet><Object><Key>{key}</Key></Object></Delete>"
        );
        let resp = send(
            &gw,
            WRITER,
            "POST",
            "/c3-del?delete",
            &[
                ("content-type", "application/xml"),
                ("x-fencing-token", "10"),
            ],
            body.as_bytes(),
        );
        assert_eq!(
            at_moto(moto, "c3-del", "fenced").as_deref(),
            Some(&b"fresh"[..]),
            "{key}: the fenced object was deleted at moto ({} {})",
            resp.status,
            resp.text()
        );
        refused(&resp, key);
    }
    // The plain key at a current token is deleted: what refused the
    // others was their reading.
    let resp = send(
        &gw,
        WRITER,
        "POST",
        "/c3-del?delete",
        &[("x-fencing-token", "20")],
        b"<Delete><Object><Key>fenced</Key></Object></Delete>",
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(at_moto(moto, "c3-del", "fenced"), None);
}

// ---------------------------------------------------------------------
// Class 5

/// The retention document of `mode` until 2099.
fn retention(mode: &str) -> String {
    format!(
        "<Retention xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Mode>{mode}</Mode><RetainUntilDate>2099-01-01T00:00:00Z</RetainUntilDate></Retention>"
    )
}

/// Class 5: object lock is `admin`'s. A plain writer of an object-lock
/// bucket sets a COMPLIANCE retention (which nobody could undo), a legal
/// hold, lock headers on a put (also in other cases and as presigned
/// parameters), and deletes a version under GOVERNANCE retention with
/// `x-amz-bypass-governance-retention`: each refused 403, and at moto the
/// object has no retention but the owner's GOVERNANCE one, no legal hold,
/// the locked put wrote nothing and the version is still there.
#[test]
fn class5_object_lock_needs_admin() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto);
    make_bucket(
        &gw,
        "c5-lock",
        &[("x-amz-bucket-object-lock-enabled", "true")],
    );
    let put = send(
        &gw,
        OWNER,
        "PUT",
        "/c5-lock/k",
        &[("x-fencing-token", "1")],
        b"not locked",
    );
    assert_eq!(put.status, 200, "{}", put.text());
    let version = put
        .header("x-amz-version-id")
        .expect("a version id: object lock versions the bucket")
        .to_owned();
    // moto answers no GetObjectRetention (a GET ?retention is the
    // object): its HEAD shows the lock.
    let retention_at_moto = || {
        let got = moto.store("HEAD", "/c5-lock/k", &[], b"");
        assert_eq!(got.status, 200);
        (
            got.header("x-amz-object-lock-mode").map(str::to_owned),
            got.header("x-amz-object-lock-retain-until-date")
                .map(str::to_owned),
        )
    };
    let before = retention_at_moto();
    assert_eq!(before, (None, None), "a retention already");
    let token = ("x-fencing-token", "5");

    for mode in ["COMPLIANCE", "GOVERNANCE"] {
        for target in [
            "/c5-lock/k?retention".to_owned(),
            format!("/c5-lock/k?retention&versionId={}", query_value(&version)),
        ] {
            let resp = send(
                &gw,
                WRITER,
                "PUT",
                &target,
                &[token],
                retention(mode).as_bytes(),
            );
            denied(&resp, &format!("{mode} {target}"));
        }
    }
    let resp = send(
        &gw,
        WRITER,
        "PUT",
        "/c5-lock/k?legal-hold",
        &[token],
        b"<LegalHold xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Status>ON</Status></LegalHold>",
    );
    denied(&resp, "a legal hold");
    for fields in [
        vec![
            ("x-amz-object-lock-mode", "COMPLIANCE"),
            (
                "x-amz-object-lock-retain-until-date",
                "2099-01-01T00:00:00Z",
            ),
        ],
        vec![
            ("X-Amz-Object-Lock-Mode", "COMPLIANCE"),
            (
                "X-AMZ-OBJECT-LOCK-RETAIN-UNTIL-DATE",
                "2099-01-01T00:00:00Z",
            ),
        ],
        vec![("x-amz-object-lock-legal-hold", "ON")],
    ] {
        let mut all = fields.clone();
        all.push(token);
        let resp = send(&gw, WRITER, "PUT", "/c5-lock/locked", &all, b"locked");
        denied(&resp, &format!("{fields:?}"));
        // A copy and a multipart upload carry them too.
        let mut copy = all.clone();
        copy.push(("x-amz-copy-source", "c5-lock/k"));
        let resp = send(&gw, WRITER, "PUT", "/c5-lock/locked", &copy, b"");
        denied(&resp, &format!("a copy with {fields:?}"));
        let resp = send(&gw, WRITER, "POST", "/c5-lock/locked?uploads", &all, b"");
        denied(&resp, &format!("an upload with {fields:?}"));
    }
    let url = presigned_with(
        &gw,
        WRITER,
        "PUT",
        "/c5-lock/locked",
        "x-amz-object-lock-mode=COMPLIANCE&x-amz-object-lock-retain-until-date=2099-01-01T00%3A00%3A00Z",
    );
    denied(
        &gw.req("PUT", &url, &[token], b""),
        "presigned lock parameters",
    );
    assert_eq!(retention_at_moto(), before, "a retention was set at moto");
    let hold = moto.store("GET", "/c5-lock/k?legal-hold", &[], b"");
    assert!(
        !hold.text().contains("<Status>ON</Status>"),
        "{}",
        hold.text()
    );
    assert_eq!(
        at_moto(moto, "c5-lock", "locked"),
        None,
        "a locked put at moto"
    );
    assert!(
        moto.uploads("c5-lock").is_empty(),
        "a locked upload at moto"
    );

    // The owner (admin) sets GOVERNANCE; the writer's bypass is refused and
    // the version is still at moto.
    let resp = send(
        &gw,
        OWNER,
        "PUT",
        "/c5-lock/k?retention",
        &[token],
        retention("GOVERNANCE").as_bytes(),
    );
    assert_eq!(resp.status, 200, "the owner's retention: {}", resp.text());
    let resp = send(
        &gw,
        WRITER,
        "DELETE",
        &format!("/c5-lock/k?versionId={}", query_value(&version)),
        &[("x-amz-bypass-governance-retention", "true"), token],
        b"",
    );
    denied(&resp, "a governance bypass");
    let resp = send(
        &gw,
        WRITER,
        "POST",
        "/c5-lock?delete",
        &[("x-amz-bypass-governance-retention", "true"), token],
        format!("<Delete><Object><Key>k</Key><VersionId>{version}</VersionId></Object></Delete>")
            .as_bytes(),
    );
    denied(&resp, "a governance bypass in DeleteObjects");
    let kept = moto.store(
        "GET",
        &format!("/c5-lock/k?versionId={}", query_value(&version)),
        &[],
        b"",
    );
    assert_eq!(
        kept.status,
        200,
        "the version is gone at moto: {}",
        kept.text()
    );
    assert_eq!(kept.body, b"not locked");
    assert_eq!(
        retention_at_moto().0.as_deref(),
        Some("GOVERNANCE"),
        "the owner's retention at moto"
    );
}

// ---------------------------------------------------------------------
// Class 6

/// Class 6: an identity confined inside a bucket (`inside`: write on
/// `c6-conf/mine/`) reads the bucket's configuration by adding a parameter
/// the store ignores for that sub-resource (`prefix`, `list-type`,
/// `delimiter`), also in encoded spellings: each refused, and nothing of
/// the configuration moto holds (a policy, tags, the ACL's owner) is in
/// any answer.
#[test]
fn class6_bucket_configuration_is_not_read_through_an_ignored_parameter() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto);
    make_bucket(&gw, "c6-conf", &[]);
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Sid":"c6classified","Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::c6-conf/secret/*"}]}"#;
    let resp = send(
        &gw,
        OWNER,
        "PUT",
        "/c6-conf?policy",
        &[("x-fencing-token", "1")],
        policy.as_bytes(),
    );
    assert!(resp.status < 300, "{}", resp.text());
    let resp = send(
        &gw,
        OWNER,
        "PUT",
        "/c6-conf?tagging",
        &[("x-fencing-token", "1")],
        b"<Tagging><TagSet><Tag><Key>c6classified</Key><Value>c6classified</Value></Tag></TagSet></Tagging>",
    );
    assert!(resp.status < 300, "{}", resp.text());
    // What a leak would show is at moto.
    assert!(moto
        .store("GET", "/c6-conf?policy", &[], b"")
        .text()
        .contains("c6classified"));
    assert!(moto
        .store("GET", "/c6-conf?tagging", &[], b"")
        .text()
        .contains("c6classified"));
    let owner_id = element_text(&moto.store("GET", "/c6-conf?acl", &[], b"").text(), "ID")
        .expect("the ACL's owner id");
    let leaked = |resp: &Resp| {
        let text = resp.text();
        text.contains("c6classified")
            || text.contains(&owner_id)
            || text.contains("AccessControlPolicy")
            || text.contains("LocationConstraint")
            || text.contains("VersioningConfiguration")
    };
    for query in [
        "acl&prefix=mine%2F",
        "acl&prefix=mine/",
        "acl&list-type=2&prefix=mine%2F",
        "policy&list-type=2",
        "policy&prefix=mine%2F",
        "policy&delimiter=%2F&prefix=mine%2F",
        "tagging&prefix=mine%2F",
        "versioning&prefix=mine%2F",
        "location&prefix=mine%2F",
        "policyStatus&prefix=mine%2F",
        "%61cl&prefix=mine%2F",
        "p%6flicy&list-type=2&prefix=mine%2F",
        "ta%67ging&prefix=mine%2F",
        "prefix=mine%2F&acl",
    ] {
        let resp = send(&gw, INSIDE, "GET", &format!("/c6-conf?{query}"), &[], b"");
        refused(&resp, query);
        assert!(!leaked(&resp), "{query}: {}", resp.text());
        let url = presigned_with(&gw, INSIDE, "GET", "/c6-conf", query);
        let resp = gw.req("GET", &url, &[("x-fencing-token", "5")], b"");
        refused(&resp, &format!("presigned {query}"));
        assert!(!leaked(&resp), "presigned {query}: {}", resp.text());
    }
    // A listing of its own prefix is inside's to read.
    let listed = send(
        &gw,
        INSIDE,
        "GET",
        "/c6-conf?list-type=2&prefix=mine%2F",
        &[],
        b"",
    );
    assert_eq!(listed.status, 200, "{}", listed.text());
}

// ---------------------------------------------------------------------
// Class 7

/// Class 7: bucket-level `POST`s a store takes as an object upload (a
/// POST-policy form, in every form a store accepts, with the operation
/// sub-resources a client may add) were fenced on the bucket, not on the
/// object they write: a stale holder overwrote a fenced object. `fenced`
/// holds the fresh holder's bytes at token 20; the stale holder (token 10)
/// posts forms naming it: each refused, and at moto `fenced` is unchanged
/// and no other object appeared.
#[test]
fn class7_a_bucket_post_does_not_overwrite_a_fenced_object() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto);
    make_bucket(&gw, "c7-post", &[]);
    owner_put(&gw, "/c7-post/fenced", 20, b"fresh");
    let listing = || moto.store("GET", "/c7-post?list-type=2", &[], b"").text();
    let keys_before: Vec<String> = keys_of(&listing());
    let boundary = "class7-boundary";
    let multipart = format!(
        "--{boundary}\r\n\
         Content-Disposition: form-data; name=\"key\"\r\n\r\n\
         fenced\r\n\
         --{boundary}\r\n\
         Content-Disposition: form-data; name=\"file\"; filename=\"fenced\"\r\n\
         Content-Type: text/plain\r\n\r\n\
         stale\r\n\
         --{boundary}--\r\n"
    );
    let multipart_type = format!("multipart/form-data; boundary={boundary}");
    let forms: [(&str, &[u8]); 3] = [
        (multipart_type.as_str(), multipart.as_bytes()),
        (
            "application/x-www-form-urlencoded",
            b"key=fenced&file=stale",
        ),
        ("text/plain", b"stale"),
    ];
    for target in [
        "/c7-post",
        "/c7-post/",
        "/c7-post?uploads",
        "/c7-post?x-id=PutObject",
        "/c7-post?delete",
        "/c7-post?key=fenced",
        "/c7-post?uploadId=x",
        "/c7-post?restore",
    ] {
        for (content_type, body) in forms {
            for who in [OWNER, WRITER] {
                let resp = send(
                    &gw,
                    who,
                    "POST",
                    target,
                    &[("content-type", content_type), ("x-fencing-token", "10")],
                    body,
                );
                let what = format!("{} POST {target} {content_type}", who.0);
                assert_eq!(
                    at_moto(moto, "c7-post", "fenced").as_deref(),
                    Some(&b"fresh"[..]),
                    "{what}: the fenced object was overwritten at moto ({} {})",
                    resp.status,
                    resp.text()
                );
                refused(&resp, &what);
            }
        }
    }
    assert_eq!(
        keys_of(&listing()),
        keys_before,
        "an object appeared at moto"
    );
}

/// The `<Key>`s of a listing.
fn keys_of(listing: &str) -> Vec<String> {
    listing
        .split("<Key>")
        .skip(1)
        .filter_map(|rest| rest.split_once("</Key>").map(|(key, _)| key.to_owned()))
        .collect()
}

// ---------------------------------------------------------------------
// Class 8

/// One way of sending a write with the session token, to a target.
type Attempt = Box<dyn Fn(&GatewayProcess, &str) -> Resp>;

/// Class 8: a client's session token, in any spelling S3 accepts (the
/// field in other cases, signed or not; the query parameter in any case,
/// on a header-signed request or a presigned URL), is the client's
/// credential and never reaches the store. At moto (which answers a
/// request carrying `X-Amz-Security-Token` beside an IAM user's key 403
/// `InvalidToken`) each write either was refused by the gateway or was
/// done without the token; at a recording store under the same custody no
/// request carries it anywhere.
#[test]
fn class8_a_session_token_in_another_spelling_never_reaches_the_store() {
    let moto = moto_with_auth();
    let recording = Backend::start();
    let (_dir, gw) = custody_gateway(moto);
    let (_rdir, rgw) = custody_gateway_to(moto, &recording.url());
    make_bucket(&gw, "c8-tok", &[]);
    const SESSION: &str = "FwoGZXIvYXdzEclass8session";
    let field_spellings = [
        "x-amz-security-token",
        "X-Amz-Security-Token",
        "X-AMZ-SECURITY-TOKEN",
        "x-Amz-security-TOKEN",
    ];
    let query_spellings = [
        "x-amz-security-token",
        "X-Amz-Security-Token",
        "X-AMZ-SECURITY-TOKEN",
        "x-amz-security-token%20",
        "x%2Damz%2Dsecurity%2Dtoken",
    ];
    let mut n = 0;
    let mut attempts: Vec<(String, Attempt)> = Vec::new();
    for name in field_spellings {
        for signed in [true, false] {
            attempts.push((
                format!("field {name} signed={signed}"),
                Box::new(move |gw: &GatewayProcess, target: &str| {
                    let unsigned: &[&str] = if signed {
                        &[]
                    } else {
                        &["x-amz-security-token"]
                    };
                    Signer::now(WRITER).send_unsigned(
                        gw,
                        "PUT",
                        target,
                        &[(name, SESSION), ("x-fencing-token", "5")],
                        unsigned,
                        b"written",
                    )
                }),
            ));
        }
    }
    for name in query_spellings {
        attempts.push((
            format!("query {name}"),
            Box::new(move |gw: &GatewayProcess, target: &str| {
                Signer::now(WRITER).send(
                    gw,
                    "PUT",
                    &format!("{target}?{name}={SESSION}"),
                    &[("x-fencing-token", "5")],
                    b"written",
                )
            }),
        ));
        attempts.push((
            format!("presigned {name}"),
            Box::new(move |gw: &GatewayProcess, target: &str| {
                let url = presigned_with(gw, WRITER, "PUT", target, &format!("{name}={SESSION}"));
                gw.req("PUT", &url, &[("x-fencing-token", "5")], b"written")
            }),
        ));
    }
    for (what, attempt) in &attempts {
        n += 1;
        let key = format!("k{n}");
        let resp = attempt(&gw, &format!("/c8-tok/{key}"));
        assert_ne!(
            s3_code(&resp),
            "InvalidToken",
            "{what}: the session token reached moto"
        );
        if resp.status < 300 {
            assert_eq!(
                at_moto(moto, "c8-tok", &key).as_deref(),
                Some(&b"written"[..]),
                "{what}"
            );
        } else {
            assert_eq!(
                at_moto(moto, "c8-tok", &key),
                None,
                "{what}: {}",
                resp.text()
            );
        }
        attempt(&rgw, &format!("/c8-tok/{key}"));
    }
    for record in recording.records() {
        let target = record.target.to_ascii_lowercase();
        let decoded = percent_encoding::percent_decode_str(&target).decode_utf8_lossy();
        assert!(
            !decoded.contains("security-token") && !decoded.contains("class8session"),
            "{} {}",
            record.method,
            record.target
        );
        for (name, value) in &record.headers {
            assert!(
                !name.contains("security-token") && !value.contains("class8session"),
                "{} {}: {name}: {value}",
                record.method,
                record.target
            );
        }
    }
}

// ---------------------------------------------------------------------
// Class 9

/// Fields of a request, as given.
type Fields<'a> = Vec<(&'a str, &'a str)>;

/// Class 9: sub-resource names are compared as the store compares them,
/// after percent-decoding. A writer of `c9-sub` (not its admin) sets an
/// object's ACL, retention or legal hold, and the bucket's ACL, policy or
/// tags, by `?%61cl`, `?ac%6C` and the like; an identity confined inside
/// the bucket reads its configuration the same way: each refused, and at
/// moto the object is not public, the bucket has no policy and its tags
/// and ACL are the owner's.
#[test]
fn class9_a_percent_encoded_sub_resource_is_the_one_the_store_acts_on() {
    let moto = moto_with_auth();
    let (_dir, gw) = custody_gateway(moto);
    make_bucket(&gw, "c9-sub", &[]);
    owner_put(&gw, "/c9-sub/k", 1, b"nine");
    let resp = send(
        &gw,
        OWNER,
        "PUT",
        "/c9-sub?tagging",
        &[("x-fencing-token", "1")],
        b"<Tagging><TagSet><Tag><Key>c9classified</Key><Value>owner</Value></Tag></TagSet></Tagging>",
    );
    assert!(resp.status < 300, "{}", resp.text());
    let public_acl = |owner: &str| {
        format!(
            "<AccessControlPolicy xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Owner><ID>{owner}</ID></Owner><AccessControlList><Grant><Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:type=\"Group\"><URI>http://acs.amazonaws.com/groups/global/AllUsers</URI></Grantee><Permission>FULL_CONTROL</Permission></Grant></AccessControlList></AccessControlPolicy>"
        )
    };
    let owner_id = element_text(&moto.store("GET", "/c9-sub?acl", &[], b"").text(), "ID")
        .expect("the ACL's owner id");
    let acl = public_acl(&owner_id);
    let token = ("x-fencing-token", "5");
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::c9-sub/*"}]}"#;
    let writes: Vec<(&str, String, Fields, Vec<u8>)> = vec![
        ("PUT", "/c9-sub/k?%61cl".into(), vec![], acl.clone().into_bytes()),
        ("PUT", "/c9-sub/k?ac%6C".into(), vec![], acl.clone().into_bytes()),
        ("PUT", "/c9-sub/k?%61%63%6c".into(), vec![], acl.clone().into_bytes()),
        ("PUT", "/c9-sub/k?%61cl".into(), vec![("x-amz-acl", "public-read-write")], vec![]),
        ("PUT", "/c9-sub/k?%61cl=".into(), vec![], acl.clone().into_bytes()),
        ("PUT", "/c9-sub/k?%72etention".into(), vec![], retention("COMPLIANCE").into_bytes()),
        ("PUT", "/c9-sub/k?legal%2Dhold".into(), vec![], b"<LegalHold><Status>ON</Status></LegalHold>".to_vec()),
        ("PUT", "/c9-sub?%61cl".into(), vec![], acl.clone().into_bytes()),
        ("PUT", "/c9-sub?ac%6C".into(), vec![("x-amz-acl", "public-read-write")], vec![]),
        ("PUT", "/c9-sub?%70olicy".into(), vec![], policy.as_bytes().to_vec()),
        ("PUT", "/c9-sub?polic%79".into(), vec![], policy.as_bytes().to_vec()),
        ("PUT", "/c9-sub?%74agging".into(), vec![], b"<Tagging><TagSet><Tag><Key>c9classified</Key><Value>writer</Value></Tag></TagSet></Tagging>".to_vec()),
        ("DELETE", "/c9-sub?t%61gging".into(), vec![], vec![]),
    ];
    for (method, target, fields, body) in writes {
        let mut all = fields.clone();
        all.push(token);
        let resp = send(&gw, WRITER, method, &target, &all, &body);
        denied_or_refused(&resp, &target);
        assert!(
            !public_at_moto(moto, "/c9-sub/k"),
            "{target}: the object is public at moto"
        );
        assert!(
            !public_at_moto(moto, "/c9-sub"),
            "{target}: the bucket is public at moto"
        );
        assert_eq!(
            at_moto(moto, "c9-sub", "k").as_deref(),
            Some(&b"nine"[..]),
            "{target}"
        );
        let policy_at = moto.store("GET", "/c9-sub?policy", &[], b"");
        assert_eq!(
            policy_at.status,
            404,
            "{target}: a policy at moto: {}",
            policy_at.text()
        );
        let tags = moto.store("GET", "/c9-sub?tagging", &[], b"").text();
        assert!(tags.contains("<Value>owner</Value>"), "{target}: {tags}");
        let hold = moto.store("GET", "/c9-sub/k?legal-hold", &[], b"").text();
        assert!(!hold.contains("<Status>ON</Status>"), "{target}: {hold}");
        let head = moto.store("HEAD", "/c9-sub/k", &[], b"");
        assert_eq!(head.header("x-amz-object-lock-mode"), None, "{target}");
    }
    for query in [
        "%61cl",
        "ac%6C",
        "%74agging",
        "t%61gging",
        "%70olicy",
        "ver%73ioning",
    ] {
        let resp = send(&gw, INSIDE, "GET", &format!("/c9-sub?{query}"), &[], b"");
        denied_or_refused(&resp, query);
        assert!(
            !resp.text().contains("c9classified") && !resp.text().contains(&owner_id),
            "{query}: {}",
            resp.text()
        );
    }
}

// ---------------------------------------------------------------------
// Conformance: every row of the S3 table, at moto

/// The conformance test's buckets: most rows act on `rows`; object lock
/// and replication on `rowslock` (made with object lock, so versioned);
/// CreateBucket and DeleteBucket on `rows-new`.
const ROWS: &str = "rows";
const ROWS_LOCK: &str = "rowslock";
const ROWS_NEW: &str = "rows-new";
const ROWS_LOCK_EMPTY: &str = "rowslock-empty";

/// The bucket configurations a snapshot reads.
const CONFIGURATIONS: [&str; 16] = [
    "acl",
    "policy",
    "lifecycle",
    "cors",
    "website",
    "replication",
    "notification",
    "versioning",
    "object-lock",
    "encryption",
    "ownershipControls",
    "publicAccessBlock",
    "tagging",
    "logging",
    "accelerate",
    "requestPayment",
];

/// What a row declares it changes at the store, in its case's bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    /// An object (its versions, body, metadata, ACL, tags, retention,
    /// legal hold).
    Object(&'static str),
    /// A multipart upload in progress of this key.
    Upload(&'static str),
    /// A bucket configuration (its sub-resource).
    Config(&'static str),
    /// The bucket itself (made or deleted): anything.
    Bucket,
}

impl Change {
    /// Whether the snapshot entry `entry` is one this change may alter.
    fn covers(&self, entry: &str) -> bool {
        match self {
            Change::Object(key) => entry.starts_with(&format!("object {key} ")),
            Change::Upload(key) => entry.starts_with(&format!("upload {key} ")),
            Change::Config(sub) => entry == format!("config {sub}"),
            Change::Bucket => true,
        }
    }
}

/// One row's request, and what it declares.
struct Case {
    bucket: &'static str,
    method: &'static str,
    target: String,
    fields: Vec<(&'static str, String)>,
    body: Vec<u8>,
    changes: Vec<Change>,
}

impl Case {
    fn new(bucket: &'static str, method: &'static str, target: impl Into<String>) -> Case {
        Case {
            bucket,
            method,
            target: target.into(),
            fields: Vec::new(),
            body: Vec::new(),
            changes: Vec::new(),
        }
    }

    fn field(mut self, name: &'static str, value: impl Into<String>) -> Case {
        self.fields.push((name, value.into()));
        self
    }

    fn body(mut self, body: impl Into<Vec<u8>>) -> Case {
        self.body = body.into();
        self
    }

    fn changes(mut self, change: Change) -> Case {
        self.changes.push(change);
        self
    }

    /// Sends it through `gw` as `key` (unsigned when `None`), with
    /// `x-fencing-token: token` on a write.
    fn send(&self, gw: &GatewayProcess, key: Option<(&str, &str)>, token: u64) -> Resp {
        let token = token.to_string();
        let mut fields: Vec<(&str, &str)> = self
            .fields
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        if is_write(self.method) {
            fields.push(("x-fencing-token", &token));
        }
        match key {
            Some(key) => send(gw, key, self.method, &self.target, &fields, &self.body),
            None => gw.req(self.method, &self.target, &fields, &self.body),
        }
    }
}

fn is_write(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD" | "OPTIONS")
}

/// A body without what differs between two answers of one state (request
/// ids).
fn normalised(text: &str) -> String {
    let mut out = text.to_owned();
    for name in ["RequestId", "RequestID", "HostId"] {
        let (open, close) = (format!("<{name}>"), format!("</{name}>"));
        while let Some(start) = out.find(&open) {
            let Some(end) = out[start..].find(&close) else {
                break;
            };
            out.replace_range(start..start + end + close.len(), "");
        }
    }
    out
}

/// Each `<name>...</name>` element of `text`, whole.
fn elements<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(&open) {
        let Some(end) = rest[start..].find(&close) else {
            break;
        };
        out.push(&rest[start..start + end + close.len()]);
        rest = &rest[start + end + close.len()..];
    }
    out
}

/// Everything moto holds of `bucket`, read with the store's key: whether
/// it exists, each configuration, each version and delete marker, each
/// current object's body, metadata, ACL, tags, retention and legal hold,
/// and each multipart upload with its parts.
fn snapshot(moto: &MotoAuth, bucket: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let answer = |resp: Resp| format!("{} {}", resp.status, normalised(&resp.text()));
    let head = moto.store("HEAD", &format!("/{bucket}"), &[], b"");
    out.insert("bucket".to_owned(), head.status.to_string());
    if head.status != 200 {
        return out;
    }
    for sub in CONFIGURATIONS {
        let got = moto.store("GET", &format!("/{bucket}?{sub}"), &[], b"");
        // moto implements no requestPayment: its GET is a listing.
        let got = if got.text().contains("<ListBucketResult") {
            "not implemented by moto (answered as a listing)".to_owned()
        } else {
            answer(got)
        };
        out.insert(format!("config {sub}"), got);
    }
    let versions = moto.store("GET", &format!("/{bucket}?versions"), &[], b"");
    assert_eq!(
        versions.status,
        200,
        "{bucket}?versions: {}",
        versions.text()
    );
    let versions = versions.text();
    let mut current = Vec::new();
    for kind in ["Version", "DeleteMarker"] {
        for element in elements(&versions, kind) {
            let key = element_text(element, "Key").unwrap_or_default();
            let id = element_text(element, "VersionId").unwrap_or_default();
            if kind == "Version" && element.contains("<IsLatest>true</IsLatest>") {
                current.push(key.clone());
            }
            out.insert(format!("object {key} {kind} {id}"), element.to_owned());
        }
    }
    for key in current {
        let path = format!("/{bucket}/{key}");
        // A GET's fields are the HEAD's: one request reads both (but where
        // the GET is refused, as for an archived object).
        let got = moto.store("GET", &path, &[], b"");
        let head = if got.status == 200 {
            None
        } else {
            Some(moto.store("HEAD", &path, &[], b""))
        };
        let mut kept: Vec<String> = head
            .as_ref()
            .unwrap_or(&got)
            .headers
            .iter()
            .filter(|(name, _)| {
                name.starts_with("x-amz-meta-")
                    || name.starts_with("x-amz-object-lock-")
                    || [
                        "etag",
                        "content-type",
                        "content-length",
                        "last-modified",
                        "x-amz-storage-class",
                        "x-amz-restore",
                        "x-amz-tagging-count",
                        "x-amz-server-side-encryption",
                    ]
                    .contains(&name.as_str())
            })
            .map(|(name, value)| format!("{name}: {value}"))
            .collect();
        kept.sort();
        out.insert(format!("object {key} head"), kept.join("\n"));
        out.insert(format!("object {key} body"), answer(got));
        for sub in ["acl", "tagging", "retention", "legal-hold"] {
            let got = moto.store("GET", &format!("{path}?{sub}"), &[], b"");
            out.insert(format!("object {key} {sub}"), answer(got));
        }
    }
    let uploads = moto.uploads(bucket);
    for (key, id, parts) in uploads {
        out.insert(format!("upload {key} {id}"), format!("{parts:?}"));
    }
    out
}

/// The entries that differ between two snapshots.
fn differences(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|key| before.get(*key) != after.get(*key))
        .cloned()
        .collect()
}

/// Rows whose answer moto makes of another operation, and the element the
/// row's own answer starts with: moto has no GetObjectRetention (a GET
/// `?retention` is GetObject) and no requestPayment (its GET is a listing,
/// its PUT CreateBucket).
const ANSWER_ROOTS: [(&str, &str); 2] = [
    ("GetObjectRetention", "<Retention"),
    ("GetBucketRequestPayment", "<RequestPaymentConfiguration"),
];

/// The identity a row's access allows, and one with less (refused 403).
fn identities_of(op: &Operation) -> ((&'static str, &'static str), (&'static str, &'static str)) {
    match (op.need, op.level) {
        (Need::Read, Level::Service) => (EVERYTHING, READER),
        (Need::Read, _) => (READER, STRANGER),
        (Need::ReadBucket, _) => (READER, INSIDE),
        (Need::Write, _) => (WRITER, READER),
        (Need::Admin, _) => (OWNER, WRITER),
    }
}

/// The conformance run's state: the gateway, moto, the next token.
struct Rows<'a> {
    gw: &'a GatewayProcess,
    moto: &'a MotoAuth,
    token: std::cell::Cell<u64>,
}

impl Rows<'_> {
    /// A token above every one sent so far.
    fn next_token(&self) -> u64 {
        self.token.set(self.token.get() + 10);
        self.token.get()
    }

    /// A write of the owner's, through the gateway, at a fresh token.
    fn owner(&self, method: &str, target: &str, fields: &[(&str, &str)], body: &[u8]) -> Resp {
        let token = self.next_token().to_string();
        let mut all = fields.to_vec();
        all.push(("x-fencing-token", &token));
        let resp = send(self.gw, OWNER, method, target, &all, body);
        assert!(
            resp.status < 300,
            "setup {method} {target}: {} {}",
            resp.status,
            resp.text()
        );
        resp
    }

    /// An upload of `bucket/key` created through the gateway: its id.
    fn upload(&self, key: &str) -> String {
        let created = self.owner("POST", &format!("/{ROWS}/{key}?uploads"), &[], b"");
        element_text(&created.text(), "UploadId").expect("an upload id")
    }

    /// Puts `body` at `bucket?sub` at moto directly unless it has one.
    fn ensure_config(&self, bucket: &str, sub: &str, body: &str) {
        let target = format!("/{bucket}?{sub}");
        if self.moto.store("GET", &target, &[], b"").status == 200 {
            return;
        }
        let put = self.moto.store("PUT", &target, &[], body.as_bytes());
        assert!(
            put.status < 300,
            "setting {target} at moto: {} {}",
            put.status,
            put.text()
        );
    }

    /// The request of `op`, its setup done.
    fn case(&self, op: &Operation) -> Option<Case> {
        let obj = |key: &str| format!("/{ROWS}/{key}");
        let upload_target = |key: &str, id: &str, rest: &str| {
            format!("/{ROWS}/{key}?{rest}uploadId={}", query_value(id))
        };
        let config = |bucket: &'static str, method: &'static str, sub: &'static str| {
            Case::new(bucket, method, format!("/{bucket}?{sub}"))
        };
        let put_config = |bucket: &'static str, sub: &'static str, body: &str| {
            config(bucket, "PUT", sub)
                .body(body.as_bytes().to_vec())
                .changes(Change::Config(sub))
        };
        // What a delete removes is there first, whichever rows ran before.
        let delete_config = |bucket: &'static str, sub: &'static str, initial: &str| {
            self.ensure_config(bucket, sub, initial);
            config(bucket, "DELETE", sub).changes(Change::Config(sub))
        };
        Some(match op.name {
            "PreflightObject" => Case::new(ROWS, "OPTIONS", obj("k"))
                .field("origin", "https://app.example")
                .field("access-control-request-method", "GET"),
            "PreflightBucket" => Case::new(ROWS, "OPTIONS", format!("/{ROWS}"))
                .field("origin", "https://app.example")
                .field("access-control-request-method", "GET"),
            "CopyObject" => Case::new(ROWS, "PUT", obj("copy"))
                .field("x-amz-copy-source", format!("{ROWS}/src"))
                .changes(Change::Object("copy")),
            "ListBuckets" => Case::new(ROWS, "GET", "/"),
            "CreateBucket" => Case::new(ROWS_NEW, "PUT", format!("/{ROWS_NEW}")).changes(Change::Bucket),
            "DeleteBucket" => {
                if self.moto.store("HEAD", &format!("/{ROWS_NEW}"), &[], b"").status != 200 {
                    let put = self.moto.store("PUT", &format!("/{ROWS_NEW}"), &[], b"");
                    assert!(put.status < 300, "creating {ROWS_NEW} at moto: {}", put.text());
                }
                Case::new(ROWS_NEW, "DELETE", format!("/{ROWS_NEW}")).changes(Change::Bucket)
            }
            "HeadBucket" => Case::new(ROWS, "HEAD", format!("/{ROWS}")),
            "ListObjects" => Case::new(ROWS, "GET", format!("/{ROWS}?list-type=2")),
            "ListObjectVersions" => Case::new(ROWS, "GET", format!("/{ROWS}?versions")),
            "ListMultipartUploads" => Case::new(ROWS, "GET", format!("/{ROWS}?uploads")),
            "DeleteObjects" => Case::new(ROWS, "POST", format!("/{ROWS}?delete"))
                .field("content-type", "application/xml")
                .body(b"<Delete><Object><Key>d1</Key></Object></Delete>".to_vec())
                .changes(Change::Object("d1")),
            "GetBucketLocation" => Case::new(ROWS, "GET", format!("/{ROWS}?location")),
            "GetBucketPolicyStatus" => {
                self.ensure_config(ROWS, "policy", &policy_of("initial"));
                Case::new(ROWS, "GET", format!("/{ROWS}?policyStatus"))
            }
            "GetObject" => Case::new(ROWS, "GET", obj("k")),
            "HeadObject" => Case::new(ROWS, "HEAD", obj("k")),
            "PutObject" => Case::new(ROWS, "PUT", obj("k"))
                .field("x-amz-meta-row", "PutObject")
                .body(b"k, rewritten".to_vec())
                .changes(Change::Object("k")),
            "DeleteObject" => Case::new(ROWS, "DELETE", obj("del")).changes(Change::Object("del")),
            "CreateMultipartUpload" => Case::new(ROWS, "POST", format!("/{ROWS}/mp-new?uploads"))
                .changes(Change::Upload("mp-new")),
            "UploadPart" => {
                let id = self.upload("mp-part");
                Case::new(ROWS, "PUT", upload_target("mp-part", &id, "partNumber=1&"))
                    .body(b"a part".to_vec())
                    .changes(Change::Upload("mp-part"))
            }
            "CompleteMultipartUpload" => {
                let id = self.upload("mp-done");
                let part = self.owner("PUT", &upload_target("mp-done", &id, "partNumber=1&"), &[], b"the part");
                let etag = part.header("etag").unwrap_or_default().to_owned();
                Case::new(ROWS, "POST", upload_target("mp-done", &id, ""))
                    .body(format!("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"))
                    .changes(Change::Upload("mp-done"))
                    .changes(Change::Object("mp-done"))
            }
            "AbortMultipartUpload" => {
                let id = self.upload("mp-abort");
                Case::new(ROWS, "DELETE", upload_target("mp-abort", &id, ""))
                    .changes(Change::Upload("mp-abort"))
            }
            "ListParts" => {
                let id = self.upload("mp-list");
                Case::new(ROWS, "GET", upload_target("mp-list", &id, ""))
            }
            "GetObjectTagging" => Case::new(ROWS, "GET", format!("{}?tagging", obj("k"))),
            "PutObjectTagging" => Case::new(ROWS, "PUT", format!("{}?tagging", obj("k")))
                .body(b"<Tagging><TagSet><Tag><Key>row</Key><Value>PutObjectTagging</Value></Tag></TagSet></Tagging>".to_vec())
                .changes(Change::Object("k")),
            "DeleteObjectTagging" => {
                let put = self.moto.store(
                    "PUT",
                    &format!("{}?tagging", obj("k")),
                    &[],
                    b"<Tagging><TagSet><Tag><Key>row</Key><Value>initial</Value></Tag></TagSet></Tagging>",
                );
                assert!(put.status < 300, "tagging /{ROWS}/k at moto: {}", put.text());
                Case::new(ROWS, "DELETE", format!("{}?tagging", obj("k"))).changes(Change::Object("k"))
            }
            "GetObjectAcl" => Case::new(ROWS, "GET", format!("{}?acl", obj("k"))),
            "PutObjectAcl" => Case::new(ROWS, "PUT", format!("{}?acl", obj("k")))
                .field("x-amz-acl", "public-read")
                .changes(Change::Object("k")),
            "GetObjectAttributes" => Case::new(ROWS, "GET", format!("{}?attributes", obj("k")))
                .field("x-amz-object-attributes", "ETag,ObjectSize"),
            "GetObjectRetention" => Case::new(ROWS_LOCK, "GET", format!("/{ROWS_LOCK}/held?retention")),
            "PutObjectRetention" => Case::new(ROWS_LOCK, "PUT", format!("/{ROWS_LOCK}/k?retention"))
                .body(retention("GOVERNANCE"))
                .changes(Change::Object("k")),
            "GetObjectLegalHold" => Case::new(ROWS_LOCK, "GET", format!("/{ROWS_LOCK}/held?legal-hold")),
            "PutObjectLegalHold" => Case::new(ROWS_LOCK, "PUT", format!("/{ROWS_LOCK}/k?legal-hold"))
                .body(b"<LegalHold xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Status>ON</Status></LegalHold>".to_vec())
                .changes(Change::Object("k")),
            "RestoreObject" => Case::new(ROWS, "POST", format!("{}?restore", obj("glacier")))
                .body(b"<RestoreRequest xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Days>1</Days></RestoreRequest>".to_vec())
                .changes(Change::Object("glacier")),
            "GetBucketAcl" => config(ROWS, "GET", "acl"),
            "PutBucketAcl" => config(ROWS, "PUT", "acl")
                .field("x-amz-acl", "public-read")
                .changes(Change::Config("acl")),
            "GetBucketPolicy" => {
                self.ensure_config(ROWS, "policy", &policy_of("initial"));
                config(ROWS, "GET", "policy")
            }
            "PutBucketPolicy" => put_config(ROWS, "policy", &policy_of("PutBucketPolicy")),
            "DeleteBucketPolicy" => delete_config(ROWS, "policy", &policy_of("initial")),
            "GetBucketLifecycleConfiguration" => {
                self.ensure_config(ROWS, "lifecycle", &lifecycle_of("initial"));
                config(ROWS, "GET", "lifecycle")
            }
            "PutBucketLifecycleConfiguration" => put_config(ROWS, "lifecycle", &lifecycle_of("PutBucketLifecycle")),
            "DeleteBucketLifecycle" => delete_config(ROWS, "lifecycle", &lifecycle_of("initial")),
            "GetBucketCors" => {
                self.ensure_config(ROWS, "cors", &cors_of("initial"));
                config(ROWS, "GET", "cors")
            }
            "PutBucketCors" => put_config(ROWS, "cors", &cors_of("put")),
            "DeleteBucketCors" => delete_config(ROWS, "cors", &cors_of("initial")),
            "GetBucketWebsite" => {
                self.ensure_config(ROWS, "website", &website_of("initial"));
                config(ROWS, "GET", "website")
            }
            "PutBucketWebsite" => put_config(ROWS, "website", &website_of("put")),
            "DeleteBucketWebsite" => delete_config(ROWS, "website", &website_of("initial")),
            "GetBucketReplication" => {
                self.ensure_config(ROWS_LOCK, "replication", &replication_of("initial"));
                config(ROWS_LOCK, "GET", "replication")
            }
            "PutBucketReplication" => put_config(ROWS_LOCK, "replication", &replication_of("put")),
            "DeleteBucketReplication" => delete_config(ROWS_LOCK, "replication", &replication_of("initial")),
            "GetBucketNotificationConfiguration" => config(ROWS, "GET", "notification"),
            "PutBucketNotificationConfiguration" => put_config(
                ROWS,
                "notification",
                "<NotificationConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><EventBridgeConfiguration></EventBridgeConfiguration></NotificationConfiguration>",
            ),
            "GetBucketVersioning" => config(ROWS, "GET", "versioning"),
            "PutBucketVersioning" => put_config(
                ROWS,
                "versioning",
                "<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Status>Suspended</Status></VersioningConfiguration>",
            ),
            "GetObjectLockConfiguration" => config(ROWS_LOCK, "GET", "object-lock"),
            // moto takes an object lock configuration only on an empty
            // bucket.
            "PutObjectLockConfiguration" => put_config(
                ROWS_LOCK_EMPTY,
                "object-lock",
                "<ObjectLockConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention><Mode>GOVERNANCE</Mode><Days>1</Days></DefaultRetention></Rule></ObjectLockConfiguration>",
            ),
            "GetBucketEncryption" => {
                self.ensure_config(ROWS, "encryption", &encryption_of(false));
                config(ROWS, "GET", "encryption")
            }
            "PutBucketEncryption" => put_config(ROWS, "encryption", &encryption_of(true)),
            "DeleteBucketEncryption" => delete_config(ROWS, "encryption", &encryption_of(false)),
            "GetBucketOwnershipControls" => {
                self.ensure_config(ROWS, "ownershipControls", &ownership_of("ObjectWriter"));
                config(ROWS, "GET", "ownershipControls")
            }
            "PutBucketOwnershipControls" => put_config(ROWS, "ownershipControls", &ownership_of("BucketOwnerPreferred")),
            "DeleteBucketOwnershipControls" => delete_config(ROWS, "ownershipControls", &ownership_of("ObjectWriter")),
            "GetPublicAccessBlock" => {
                self.ensure_config(ROWS, "publicAccessBlock", &public_access_block_of(false));
                config(ROWS, "GET", "publicAccessBlock")
            }
            "PutPublicAccessBlock" => put_config(ROWS, "publicAccessBlock", &public_access_block_of(true)),
            "DeletePublicAccessBlock" => delete_config(ROWS, "publicAccessBlock", &public_access_block_of(false)),
            "GetBucketTagging" => {
                self.ensure_config(ROWS, "tagging", &tagging_of("initial"));
                config(ROWS, "GET", "tagging")
            }
            "PutBucketTagging" => put_config(ROWS, "tagging", &tagging_of("PutBucketTagging")),
            "DeleteBucketTagging" => delete_config(ROWS, "tagging", &tagging_of("initial")),
            "GetBucketLogging" => config(ROWS, "GET", "logging"),
            "PutBucketLogging" => {
                // The target must let the log delivery group write.
                let acl = self.moto.store("PUT", &format!("/{ROWS_LOCK}?acl"), &[("x-amz-acl", "log-delivery-write")], b"");
                assert!(acl.status < 300, "{}", acl.text());
                put_config(
                    ROWS,
                    "logging",
                    &format!("<BucketLoggingStatus xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LoggingEnabled><TargetBucket>{ROWS_LOCK}</TargetBucket><TargetPrefix>logs/</TargetPrefix></LoggingEnabled></BucketLoggingStatus>"),
                )
            }
            "GetBucketAccelerateConfiguration" => config(ROWS, "GET", "accelerate"),
            "PutBucketAccelerateConfiguration" => put_config(
                ROWS,
                "accelerate",
                "<AccelerateConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Status>Enabled</Status></AccelerateConfiguration>",
            ),
            "GetBucketRequestPayment" => config(ROWS, "GET", "requestPayment"),
            "PutBucketRequestPayment" => put_config(
                ROWS,
                "requestPayment",
                "<RequestPaymentConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Payer>Requester</Payer></RequestPaymentConfiguration>",
            ),
            _ => return None,
        })
    }
}

fn policy_of(sid: &str) -> String {
    format!(
        r#"{{"Version":"2012-10-17","Statement":[{{"Sid":"{sid}","Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::{ROWS}/never/*"}}]}}"#
    )
}

fn lifecycle_of(id: &str) -> String {
    format!("<LifecycleConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Rule><ID>{id}</ID><Filter><Prefix>tmp/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule></LifecycleConfiguration>")
}

fn cors_of(host: &str) -> String {
    format!("<CORSConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><CORSRule><AllowedMethod>GET</AllowedMethod><AllowedOrigin>https://{host}.example</AllowedOrigin></CORSRule></CORSConfiguration>")
}

fn website_of(index: &str) -> String {
    format!("<WebsiteConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><IndexDocument><Suffix>{index}.html</Suffix></IndexDocument></WebsiteConfiguration>")
}

fn replication_of(id: &str) -> String {
    format!("<ReplicationConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Role>arn:aws:iam::123456789012:role/{id}</Role><Rule><ID>{id}</ID><Status>Enabled</Status><Priority>1</Priority><DeleteMarkerReplication><Status>Disabled</Status></DeleteMarkerReplication><Filter><Prefix>{id}/</Prefix></Filter><Destination><Bucket>arn:aws:s3:::{ROWS}</Bucket></Destination></Rule></ReplicationConfiguration>")
}

fn encryption_of(bucket_key: bool) -> String {
    format!("<ServerSideEncryptionConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionByDefault><BucketKeyEnabled>{bucket_key}</BucketKeyEnabled></Rule></ServerSideEncryptionConfiguration>")
}

fn ownership_of(rule: &str) -> String {
    format!("<OwnershipControls xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Rule><ObjectOwnership>{rule}</ObjectOwnership></Rule></OwnershipControls>")
}

fn public_access_block_of(all: bool) -> String {
    format!("<PublicAccessBlockConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><BlockPublicAcls>true</BlockPublicAcls><IgnorePublicAcls>{all}</IgnorePublicAcls><BlockPublicPolicy>{all}</BlockPublicPolicy><RestrictPublicBuckets>{all}</RestrictPublicBuckets></PublicAccessBlockConfiguration>")
}

fn tagging_of(value: &str) -> String {
    format!("<Tagging xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><TagSet><Tag><Key>row</Key><Value>{value}</Value></Tag></TagSet></Tagging>")
}

/// Every row of the S3 operation table, iterated from the table itself
/// (a row without a case here fails the test), sent through the gateway
/// under custody (`--conditional-writes on`) and checked at moto with the
/// store's key: a snapshot of the row's bucket (its configurations, every
/// version, each object's body, metadata, ACL, tags, retention and legal
/// hold, the uploads in progress) before and after. For each row:
///
/// - an identity with less access than the row needs (a stranger for a
///   read, an identity confined inside the bucket for a configuration
///   read, a reader for a write, a writer for an admin row) is refused 403
///   and nothing changes;
/// - an identity with exactly the access it needs (for an admin row, the
///   owner, who is admin) sends it: what changes at moto is only what the
///   row declares (the object, upload or configuration it names), and it
///   does change; a read changes nothing, and is also the owner's to send;
/// - a write is then sent again with a token one below the one it went
///   through with: 409, and nothing changes; a write a writer sent is
///   then sent by the owner (admin) at a fresh token: allowed, and
///   nothing changes but what the row declares.
///
/// Rows moto does not implement (it answers 501 `NotImplemented`) are
/// listed in the output, not failed; CORS preflights carry no credentials
/// (they are forwarded unsigned; moto, enforcing, answers them as it does).
///
/// The rows are checked in two halves, each against a moto of its own:
/// moto is one Python process answering one request at a time, and the
/// snapshots are thousands of requests, so two processes check the table
/// on two cores in about half the time.
#[test]
fn conformance_every_row_of_the_s3_table_does_at_moto_what_it_declares_first_half() {
    conformance_of_rows(0);
}

/// [`conformance_every_row_of_the_s3_table_does_at_moto_what_it_declares_first_half`]
/// for the other half of the table.
#[test]
fn conformance_every_row_of_the_s3_table_does_at_moto_what_it_declares_second_half() {
    conformance_of_rows(1);
}

/// The conformance check of the first (`half` 0) or the second half of
/// the table's rows, on a moto of their own.
fn conformance_of_rows(half: usize) {
    let own = MotoAuth::start();
    let moto = &own;
    // A CORS preflight carries no credentials: forwarded (unsigned) when
    // anonymous clients may read.
    let (_dir, gw) = custody_gateway_with(moto, &moto.url, &["--anonymous-clients", "read"]);
    let rows = Rows {
        gw: &gw,
        moto,
        token: std::cell::Cell::new(100),
    };
    make_bucket(&gw, ROWS, &[]);
    for bucket in [ROWS_LOCK, ROWS_LOCK_EMPTY] {
        make_bucket(&gw, bucket, &[("x-amz-bucket-object-lock-enabled", "true")]);
    }
    for key in ["k", "src", "del", "d1", "sub/inside"] {
        rows.owner(
            "PUT",
            &format!("/{ROWS}/{key}"),
            &[],
            format!("{key}, as made").as_bytes(),
        );
    }
    rows.owner(
        "PUT",
        &format!("/{ROWS}/glacier"),
        &[("x-amz-storage-class", "GLACIER")],
        b"frozen",
    );
    for key in ["k", "held"] {
        rows.owner("PUT", &format!("/{ROWS_LOCK}/{key}"), &[], b"locked bucket");
    }
    rows.owner(
        "PUT",
        &format!("/{ROWS_LOCK}/held?retention"),
        &[],
        retention("GOVERNANCE").as_bytes(),
    );
    rows.owner(
        "PUT",
        &format!("/{ROWS_LOCK}/held?legal-hold"),
        &[],
        b"<LegalHold xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Status>ON</Status></LegalHold>",
    );

    let mut failures: Vec<String> = Vec::new();
    let mut not_implemented: Vec<&str> = Vec::new();
    let mut answered_as_another: Vec<&str> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let forwarded = || support::outcome_all_identities(&gw.metrics(), "forwarded");
    // Halves of consecutive rows: a row's case may build on the rows
    // before it (DeleteBucket deletes the bucket CreateBucket made).
    let middle = operations().count() / 2;
    for op in operations()
        .enumerate()
        .filter(|(at, _)| (*at < middle) == (half == 0))
        .map(|(_, op)| op)
    {
        let Some(case) = rows.case(op) else {
            failures.push(format!("{}: no conformance case for this row", op.name));
            continue;
        };
        let what = format!("{} ({} {})", op.name, case.method, case.target);
        let preflight = case.method == "OPTIONS";
        let (allowed, lesser) = identities_of(op);
        let token = rows.next_token();
        let mut fail = |message: String| failures.push(format!("{what}: {message}"));

        // Each snapshot taken after a request is the next step's "before":
        // nothing else writes to moto in between (a snapshot reads about
        // seventy documents from moto, the bulk of this test's time).
        let mut before = snapshot(moto, case.bucket);

        // Less access than the row needs: 403, nothing changed.
        if !preflight {
            let resp = case.send(&gw, Some(lesser), token);
            if resp.status != 403 {
                fail(format!(
                    "{} (less access) got {} {}",
                    lesser.0,
                    resp.status,
                    resp.text()
                ));
            }
            let after = snapshot(moto, case.bucket);
            let changed = differences(&before, &after);
            if !changed.is_empty() {
                fail(format!(
                    "refused to {}, yet changed at moto: {changed:?}",
                    lesser.0
                ));
            }
            before = after;
        }

        // The access it needs: only what it declares changes.
        let sent = forwarded();
        let resp = case.send(&gw, (!preflight).then_some(allowed), token);
        let after = snapshot(moto, case.bucket);
        let changed = differences(&before, &after);
        let by_moto = forwarded() > sent;
        seen.push(format!(
            "{what}: {} {}",
            resp.status,
            element_text(&resp.text(), "Code").unwrap_or_default()
        ));
        if !by_moto {
            fail(format!("not forwarded: {} {}", resp.status, resp.text()));
        }
        let undeclared: Vec<String> = changed
            .iter()
            .filter(|entry| !case.changes.iter().any(|change| change.covers(entry)))
            .map(|entry| {
                format!(
                    "{entry}: {:?} -> {:?}",
                    before.get(entry).map(|v| &v[..v.len().min(300)]),
                    after.get(entry).map(|v| &v[..v.len().min(300)])
                )
            })
            .collect();
        if !undeclared.is_empty() {
            fail(format!(
                "changed at moto beyond what it declares ({:?}): {undeclared:?}",
                case.changes
            ));
        }
        if resp.status == 501 && s3_code(&resp) == "NotImplemented" && by_moto {
            not_implemented.push(op.name);
            continue;
        }
        if !preflight && resp.status >= 300 {
            fail(format!("{} got {} {}", allowed.0, resp.status, resp.text()));
            continue;
        }
        // What moto answers as another operation: a read whose answer is
        // not the row's document, a configuration write whose
        // configuration moto does not keep.
        let other_answer = ANSWER_ROOTS
            .iter()
            .any(|(name, root)| *name == op.name && !resp.text().contains(root));
        let not_kept = case.changes.iter().any(|change| match change {
            Change::Config(sub) => after
                .get(&format!("config {sub}"))
                .is_some_and(|entry| entry.starts_with("not implemented by moto")),
            _ => false,
        });
        if other_answer || not_kept {
            answered_as_another.push(op.name);
            continue;
        }
        for change in &case.changes {
            if !changed.iter().any(|entry| change.covers(entry)) {
                fail(format!("{change:?} did not change at moto"));
            }
        }
        if !is_write(case.method) && !preflight {
            // A read is also the owner's (admin) to send.
            let resp = case.send(&gw, Some(OWNER), token);
            if resp.status >= 300 {
                fail(format!("the owner got {} {}", resp.status, resp.text()));
            }
            let changed = differences(&after, &snapshot(moto, case.bucket));
            if !changed.is_empty() {
                fail(format!("the owner's read changed at moto: {changed:?}"));
            }
        }
        if is_write(case.method) {
            // A stale token: 409, nothing changed.
            let resp = case.send(&gw, Some(allowed), token - 1);
            if resp.status != 409 {
                fail(format!("a stale token got {} {}", resp.status, resp.text()));
            }
            let after_stale = snapshot(moto, case.bucket);
            let changed = differences(&after, &after_stale);
            if !changed.is_empty() {
                fail(format!("a stale token changed at moto: {changed:?}"));
            }
            if allowed != OWNER {
                // The owner (admin) sends it too, at a fresh token: allowed,
                // and nothing beyond what the row declares changes (the
                // store may answer it as done already: a second completion
                // of one upload is NoSuchUpload).
                let before = after_stale;
                let resp = case.send(&gw, Some(OWNER), rows.next_token());
                if matches!(resp.status, 401 | 403 | 409) || resp.status >= 500 {
                    fail(format!("the owner got {} {}", resp.status, resp.text()));
                }
                let undeclared: Vec<String> = differences(&before, &snapshot(moto, case.bucket))
                    .into_iter()
                    .filter(|entry| !case.changes.iter().any(|change| change.covers(entry)))
                    .collect();
                if !undeclared.is_empty() {
                    fail(format!(
                        "the owner's changed beyond what it declares: {undeclared:?}"
                    ));
                }
            }
        }
    }
    println!("What the store answered, row by row:\n{}", seen.join("\n"));
    println!("Rows moto does not implement (501 NotImplemented): {not_implemented:?}");
    println!("Rows moto answers as another operation (nothing of the row's done): {answered_as_another:?}");
    assert!(
        failures.is_empty(),
        "{} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
