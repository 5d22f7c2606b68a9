//! Writes that reach beyond their path (SPEC "Writes that reach beyond their
//! path", docs/BEYOND.md), through the real binary in front of real stores:
//! a stale holder cannot change a fenced object by naming another one.
//!
//! - Apache httpd's mod_dav (one server for the test binary, a collection
//!   per test): a stale `MOVE` or `COPY` onto a fenced object and a stale
//!   collection `DELETE` over a fenced member are refused and never reach
//!   Apache (its access log and its files on disk say so); current ones go
//!   through and raise every fence they touch, a collection `DELETE` over
//!   everything under it; a `Destination` the gateway cannot fence and a
//!   bad `Depth` are refused unforwarded; `--flat-keys` limits a `DELETE`
//!   to its own key.
//! - moto's S3 server through boto3 (`--flat-keys`): `DeleteObjects` is
//!   fenced on every key it lists, and a POST-policy form upload is refused.
//! - The recording backend: `DeleteObjects` bodies the gateway cannot read
//!   are refused unforwarded, a readable one is forwarded byte for byte, and
//!   it waits for a lower token in flight on any of its keys.
//!
//! Needs Apache (`/usr/sbin/apache2`) and the Python environment that
//! `scripts/install-deps.sh` makes (`target/venv`, or `FENCEGATE_VENV`);
//! missing, the tests that need them fail and say so.

#[path = "../support/mod.rs"]
mod support;

use std::io::{BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use support::apache::Apache;
use support::moto::{moto, run_client};
use support::variants::{Gateways, Variant};
use support::*;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A request with `X-Fencing-Token: token` and `headers`.
fn fenced(
    gw: &GatewayProcess,
    method: &str,
    target: &str,
    token: u64,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let token = token.to_string();
    let mut all = vec![("X-Fencing-Token", token.as_str())];
    all.extend_from_slice(headers);
    gw.req(method, target, &all, body)
}

/// Asserts `status` (the store's answer, relayed), showing the body if not.
fn assert_status(resp: &Resp, status: &[u16], what: &str) {
    assert!(
        status.contains(&resp.status),
        "{what}: expected {status:?}, got {} {}",
        resp.status,
        resp.text()
    );
}

/// Asserts a 409 `stale_token` refusal of `token` on `resource`, whose
/// highest is `highest`.
fn assert_stale(resp: &Resp, resource: &str, token: u64, highest: u64) {
    let json = resp.assert_gateway_error(409, "stale_token");
    assert_eq!(json["resource"], resource, "{json}");
    assert_eq!(json["token"], token, "{json}");
    assert_eq!(json["highest"], highest, "{json}");
    assert_eq!(json["reason"], "below_highest", "{json}");
    assert_eq!(
        resp.header("x-fencing-highest"),
        Some(highest.to_string().as_str()),
        "{json}"
    );
}

/// Asserts a 400 `unfenceable_write` with a `detail`.
fn assert_unfenceable(resp: &Resp, what: &str) {
    let json = resp.assert_gateway_error(400, "unfenceable_write");
    let detail = json["detail"].as_str().unwrap_or_default();
    assert!(!detail.is_empty(), "{what}: a detail in {json}");
}

/// Sends `raw` from a thread of its own while reading the answer: the
/// gateway may answer before it has read a large body.
fn send_while_reading(addr: SocketAddr, raw: Vec<u8>) -> Resp {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        // The gateway may close before the last byte: not an error here.
        let _ = writer.write_all(&raw);
    });
    let resp = read_response(&mut BufReader::new(stream.try_clone().unwrap()), false);
    // Unblocks the sender if the gateway stopped reading.
    let _ = stream.shutdown(Shutdown::Both);
    sender.join().unwrap();
    resp.unwrap_or_else(|e| panic!("no answer from {addr}: {e}"))
}

// ---------------------------------------------------------------------------
// WebDAV: Apache httpd with mod_dav
// ---------------------------------------------------------------------------

/// A gateway in front of the test binary's Apache (`--store webdav`), with
/// `extra` options.
fn dav_gateway(extra: &[&str]) -> GatewayProcess {
    let url = Apache::shared().url();
    let mut args = vec!["--upstream", url.as_str(), "--store", "webdav"];
    args.extend_from_slice(extra);
    GatewayProcess::start(&args)
}

/// `/dav/NAME`, a collection of the calling test's own, made at Apache
/// directly (no fence is involved).
fn collection(name: &str) -> String {
    let path = format!("/dav/{name}");
    Apache::shared().mkcol(&path);
    path
}

/// A `Destination` naming `path` on the gateway's own authority, as a
/// client that addresses the gateway writes it.
fn destination(gw: &GatewayProcess, path: &str) -> String {
    format!("http://{}{}", gw.data_addr(), path)
}

/// The deployments the core's reading is checked in against Apache: one
/// gateway, two on one etcd prefix, and `--conditional-writes webdav`.
fn dav_variants() -> [(&'static str, Variant); 3] {
    [
        ("single", Variant::Single),
        ("etcd", Variant::TwoOnEtcd),
        ("conditional", Variant::Conditional("webdav")),
    ]
}

/// Token 34 holds `report`; the stale holder (33) writes `tmp`, then tries
/// to `method` it onto `report`.
fn stale_onto_a_fenced_object(method: &str, name: &str) {
    let apache = Apache::shared();
    let base = collection(name);
    let gw = dav_gateway(&[]);
    let report = format!("{base}/report");
    let tmp = format!("{base}/tmp");
    let resp = fenced(&gw, "PUT", &report, 34, &[], b"written at 34");
    assert_status(&resp, &[201], "PUT report at 34");
    let resp = fenced(&gw, "PUT", &tmp, 33, &[], b"written at 33");
    assert_status(&resp, &[201], "PUT tmp at 33");

    let to = destination(&gw, &report);
    let resp = fenced(&gw, method, &tmp, 33, &[("Destination", &to)], b"");
    assert_stale(&resp, &report, 33, 34);

    assert_eq!(
        apache.requests(method, &base),
        Vec::<String>::new(),
        "the stale {method} reached Apache"
    );
    assert_eq!(apache.read(&report).as_deref(), Some(&b"written at 34"[..]));
    assert_eq!(apache.read(&tmp).as_deref(), Some(&b"written at 33"[..]));
    // All or none: the refused request raised none of its keys.
    assert_eq!(gw.fence(&tmp), Some(33));
    assert_eq!(gw.fence(&report), Some(34));
}

#[test]
fn a_stale_move_onto_a_fenced_object_is_refused_and_never_reaches_apache() {
    stale_onto_a_fenced_object("MOVE", "stale-move");
}

#[test]
fn a_stale_copy_onto_a_fenced_object_is_refused_and_never_reaches_apache() {
    stale_onto_a_fenced_object("COPY", "stale-copy");
}

#[test]
fn a_current_move_goes_through_and_raises_both_fences() {
    let apache = Apache::shared();
    let base = collection("current-move");
    let gw = dav_gateway(&[]);
    let report = format!("{base}/report");
    let tmp = format!("{base}/tmp");
    assert_status(
        &fenced(&gw, "PUT", &report, 34, &[], b"written at 34"),
        &[201],
        "PUT report",
    );
    assert_status(
        &fenced(&gw, "PUT", &tmp, 33, &[], b"written at 33"),
        &[201],
        "PUT tmp",
    );

    let to = destination(&gw, &report);
    let resp = fenced(&gw, "MOVE", &tmp, 35, &[("Destination", &to)], b"");
    assert_status(&resp, &[201, 204], "MOVE at 35");
    assert_eq!(apache.requests("MOVE", &base).len(), 1);
    assert_eq!(apache.read(&report).as_deref(), Some(&b"written at 33"[..]));
    assert!(!apache.exists(&tmp), "MOVE removes its source");
    assert_eq!(gw.fence(&report), Some(35));
    assert_eq!(gw.fence(&tmp), Some(35));

    // A Destination that is a path alone names the same object: a stale
    // MOVE onto it is refused the same way.
    let other = format!("{base}/other");
    assert_status(
        &fenced(&gw, "PUT", &other, 33, &[], b"other at 33"),
        &[201],
        "PUT other",
    );
    let resp = fenced(&gw, "MOVE", &other, 34, &[("Destination", &report)], b"");
    assert_stale(&resp, &report, 34, 35);
    assert_eq!(
        apache.requests("MOVE", &base).len(),
        1,
        "stale MOVE forwarded"
    );
    assert_eq!(apache.read(&report).as_deref(), Some(&b"written at 33"[..]));

    // A current one is fenced on its Destination and forwarded. (Apache's
    // mod_dav itself wants an absolute URI there and answers 400: its
    // answer, not the gateway's, is relayed.)
    let resp = fenced(&gw, "MOVE", &other, 36, &[("Destination", &report)], b"");
    let content_type = resp.header("content-type").unwrap_or_default();
    assert!(
        !content_type.starts_with("application/json"),
        "the gateway answered itself: {} {}",
        resp.status,
        resp.text()
    );
    assert_eq!(apache.requests("MOVE", &base).len(), 2, "current MOVE");
    assert_eq!(gw.fence(&report), Some(36));
    assert_eq!(gw.fence(&other), Some(36));
}

#[test]
fn a_stale_collection_delete_over_a_fenced_member_is_refused() {
    let apache = Apache::shared();
    let base = collection("stale-delete");
    let gw = dav_gateway(&[]);
    let dir = format!("{base}/dir");
    let member = format!("{dir}/member");
    // The collection itself at 33: the only fence above 33 is the member's,
    // so the refusal can come from nothing but the subtree.
    assert_status(&fenced(&gw, "MKCOL", &dir, 33, &[], b""), &[201], "MKCOL");
    assert_status(
        &fenced(&gw, "PUT", &member, 34, &[], b"member at 34"),
        &[201],
        "PUT member",
    );

    let resp = fenced(&gw, "DELETE", &dir, 33, &[], b"");
    assert_stale(&resp, &member, 33, 34);
    assert_eq!(
        apache.requests("DELETE", &base),
        Vec::<String>::new(),
        "the stale DELETE reached Apache"
    );
    assert_eq!(apache.read(&member).as_deref(), Some(&b"member at 34"[..]));
}

#[test]
fn a_current_collection_delete_fences_everything_under_it() {
    let apache = Apache::shared();
    let base = collection("current-delete");
    let gw = dav_gateway(&[]);
    let dir = format!("{base}/dir2");
    let member = format!("{dir}/member");
    assert_status(&fenced(&gw, "MKCOL", &dir, 35, &[], b""), &[201], "MKCOL");
    assert_status(
        &fenced(&gw, "PUT", &member, 35, &[], b"member at 35"),
        &[201],
        "PUT member",
    );
    let resp = fenced(&gw, "DELETE", &dir, 36, &[], b"");
    assert_status(&resp, &[204], "DELETE at 36");
    assert!(!apache.exists(&dir), "Apache removed the collection");

    // The holder of 35 cannot recreate what 36 removed, nor add what was
    // never there (the refusal names the object or the subtree fence over
    // it: both are at 36).
    let subtree = format!("{dir}/");
    for path in [member.clone(), format!("{dir}/never-existed")] {
        let resp = fenced(&gw, "PUT", &path, 35, &[], b"late at 35");
        let json = resp.assert_gateway_error(409, "stale_token");
        assert!(
            json["resource"] == path.as_str() || json["resource"] == subtree.as_str(),
            "{json}"
        );
        assert_eq!(json["token"], 35, "{json}");
        assert_eq!(json["highest"], 36, "{json}");
        assert!(!apache.exists(&path), "{path} was written");
    }
    assert_eq!(apache.requests("PUT", &dir).len(), 1, "only the first PUT");

    let listing = gw.admin_get(&format!("/fences?prefix={}", pct(&dir)));
    assert_eq!(listing.status, 200, "{}", listing.text());
    let json = listing.json();
    let fences = json["fences"].as_array().expect("fences");
    assert!(
        fences
            .iter()
            .any(|f| f["resource"] == subtree.as_str() && f["highest"] == 36),
        "{subtree} at 36 in {json}"
    );
}

#[test]
fn writes_whose_objects_the_gateway_cannot_tell_are_refused_unforwarded() {
    let apache = Apache::shared();
    let base = collection("unfenceable");
    let gw = dav_gateway(&[]);
    let src = format!("{base}/src");
    assert_status(
        &fenced(&gw, "PUT", &src, 34, &[], b"src at 34"),
        &[201],
        "PUT src",
    );
    let elsewhere = format!("http://elsewhere.example:9{base}/report");
    // A Destination on another authority, none at all, a Depth that is no
    // depth: (method, the one header it carries).
    let cases = [
        ("MOVE", Some(("Destination", elsewhere.as_str()))),
        ("COPY", Some(("Destination", elsewhere.as_str()))),
        ("MOVE", None),
        ("COPY", None),
        ("DELETE", Some(("Depth", "bogus"))),
    ];
    for (method, header) in cases {
        let headers: Vec<(&str, &str)> = header.into_iter().collect();
        let resp = fenced(&gw, method, &src, 35, &headers, b"");
        assert_unfenceable(&resp, &format!("{method} with {header:?}"));
    }
    for method in ["MOVE", "COPY", "DELETE"] {
        assert_eq!(
            apache.requests(method, &base),
            Vec::<String>::new(),
            "a refused {method} reached Apache"
        );
    }
    assert_eq!(apache.read(&src).as_deref(), Some(&b"src at 34"[..]));
    assert_eq!(gw.fence(&src), Some(34), "a refused write raised its fence");
}

/// `--flat-keys` is for stores without collections: a `DELETE` is fenced
/// on its own key only, so a stale one over a fenced member is forwarded,
/// and Apache removes the member with its collection. This is why WebDAV
/// must not run with it.
#[test]
fn with_flat_keys_a_delete_is_fenced_on_its_own_key_only() {
    let apache = Apache::shared();
    let base = collection("flat-keys");
    let gw = dav_gateway(&["--flat-keys"]);
    let dir = format!("{base}/dir");
    let member = format!("{dir}/member");
    assert_status(&fenced(&gw, "MKCOL", &dir, 33, &[], b""), &[201], "MKCOL");
    assert_status(
        &fenced(&gw, "PUT", &member, 34, &[], b"member at 34"),
        &[201],
        "PUT member",
    );
    let resp = fenced(&gw, "DELETE", &dir, 33, &[], b"");
    assert_status(&resp, &[204], "DELETE at 33, forwarded");
    assert_eq!(apache.requests("DELETE", &base).len(), 1);
    assert!(!apache.exists(&member), "Apache removed the member too");
}

// ---------------------------------------------------------------------------
// S3: moto's server, through boto3
// ---------------------------------------------------------------------------

/// A gateway for S3 in front of moto: `--flat-keys`, as S3 has no
/// collections.
fn s3_gateway() -> GatewayProcess {
    let url = moto().url();
    GatewayProcess::start(&["--upstream", &url, "--flat-keys"])
}

#[test]
fn boto3_delete_objects_is_fenced_on_every_key_it_lists() {
    let moto = moto();
    let gw = s3_gateway();
    let bucket = "fenced-delete";
    let args = [gw.data_url(), moto.url(), bucket.to_owned()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = run_client("boto3_delete_objects.py", &args, || gw.stderr());

    assert_eq!(result["stale_put"], 409, "{result}");
    assert_eq!(result["stale_delete_objects"], 409, "{result}");
    assert_eq!(
        result["after_stale"],
        serde_json::json!({
            "obj": "obj written at 34",
            "dir/two": "dir/two written at 34",
            "three": "three written at 34",
        }),
        "the stale DeleteObjects deleted something: {result}"
    );
    assert_eq!(result["current_delete_objects"], 200, "{result}");
    assert_eq!(
        result["deleted"],
        serde_json::json!(["dir/two", "obj", "three"]),
        "{result}"
    );
    assert_eq!(result["errors"], serde_json::json!([]), "{result}");
    assert_eq!(result["left"], serde_json::json!([]), "{result}");
    for key in ["obj", "dir/two", "three"] {
        assert_eq!(gw.fence(&format!("/{bucket}/{key}")), Some(35), "{key}");
    }
    // The request changes the listed objects, not the bucket.
    assert_eq!(gw.fence(&format!("/{bucket}")), Some(1));
}

#[test]
fn an_s3_post_policy_form_upload_is_refused_unforwarded() {
    let moto = moto();
    let gw = s3_gateway();
    let bucket = "form-upload";
    let made = http(moto.addr, "PUT", &format!("/{bucket}"), &[], b"");
    assert_eq!(made.status, 200, "CreateBucket at moto: {}", made.text());
    let boundary = "fencegate-form-boundary";
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let form = format!(
        "--{boundary}\r\n\
         Content-Disposition: form-data; name=\"key\"\r\n\r\n\
         uploaded.txt\r\n\
         --{boundary}\r\n\
         Content-Disposition: form-data; name=\"file\"; filename=\"uploaded.txt\"\r\n\
         Content-Type: text/plain\r\n\r\n\
         written by a form\r\n\
         --{boundary}--\r\n"
    );
    let target = format!("/{bucket}");
    let headers = [("Content-Type", content_type.as_str())];

    let resp = fenced(&gw, "POST", &target, 5, &headers, form.as_bytes());
    assert_unfenceable(&resp, "POST-policy form upload");
    assert!(!moto.lists(bucket, "uploaded.txt"), "the form reached moto");

    // The same form sent to moto directly does create the object: the
    // gateway's refusal is what kept it out.
    let direct = http(moto.addr, "POST", &target, &headers, form.as_bytes());
    assert_status(&direct, &[200, 201, 204], "the form at moto directly");
    assert!(moto.lists(bucket, "uploaded.txt"), "moto took the form");
}

// ---------------------------------------------------------------------------
// S3 DeleteObjects: the recording backend
// ---------------------------------------------------------------------------

/// A `DeleteObjects` body listing `keys`.
fn delete_body(keys: &[&str]) -> String {
    let objects: String = keys
        .iter()
        .map(|key| format!("<Object><Key>{key}</Key></Object>"))
        .collect();
    format!("<Delete>{objects}</Delete>")
}

#[test]
fn delete_objects_bodies_the_gateway_cannot_read_are_refused_unforwarded() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--flat-keys"]);
    let too_many: Vec<String> = (0..1001).map(|i| format!("k{i}")).collect();
    let too_many: Vec<&str> = too_many.iter().map(String::as_str).collect();
    // Well-formed, one key, over 2 MiB: whitespace between elements.
    let too_big = format!(
        "<Delete>{}<Object><Key>a</Key></Object></Delete>",
        " ".repeat(2 * 1024 * 1024)
    );
    let cases: [(&str, Vec<u8>); 4] = [
        (
            "unterminated XML",
            b"<Delete><Object><Key>a</Key></Object>".to_vec(),
        ),
        ("not XML", b"this is not xml".to_vec()),
        ("1,001 keys", delete_body(&too_many).into_bytes()),
        ("over 2 MiB", too_big.into_bytes()),
    ];
    for (what, body) in cases {
        let raw = build_request(
            gw.data_addr(),
            "POST",
            "/bkt?delete",
            &[
                ("X-Fencing-Token", "34"),
                ("Content-Type", "application/xml"),
            ],
            &body,
        );
        let resp = send_while_reading(gw.data_addr(), raw);
        assert_unfenceable(&resp, what);
    }
    assert_eq!(backend.count(), 0, "{:?}", backend.records());
    assert_eq!(gw.fence("/bkt/a"), None);
}

#[test]
fn a_readable_delete_objects_is_fenced_on_its_keys_and_forwarded_byte_for_byte() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--flat-keys"]);
    let body = b"<Delete><Object><Key>a</Key></Object><Object><Key>b/c</Key></Object></Delete>";
    let resp = fenced(
        &gw,
        "POST",
        "/bkt?delete",
        34,
        &[
            ("Content-Type", "application/xml"),
            ("X-Test-Keep-Body", "1"),
        ],
        body,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let records = backend.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].method, "POST");
    assert_eq!(records[0].target, "/bkt?delete");
    assert_eq!(records[0].body.as_deref(), Some(&body[..]));
    assert_eq!(gw.fence("/bkt/a"), Some(34));
    assert_eq!(gw.fence("/bkt/b/c"), Some(34));
    assert_eq!(gw.fence("/bkt"), None, "the bucket is not what changes");

    // A stale one naming a fenced key among unfenced ones: none of them.
    let body = delete_body(&["fresh", "a"]);
    let resp = fenced(&gw, "POST", "/bkt?delete", 33, &[], body.as_bytes());
    assert_stale(&resp, "/bkt/a", 33, 34);
    assert_eq!(backend.count(), 1, "the stale DeleteObjects was forwarded");
    assert_eq!(gw.fence("/bkt/fresh"), None, "all or none");
}

#[test]
fn delete_objects_waits_for_a_lower_token_in_flight_on_one_of_its_keys() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--flat-keys"]);
    let addr = gw.data_addr();
    let put = std::thread::spawn(move || {
        http(
            addr,
            "PUT",
            "/bkt/a",
            &[("X-Fencing-Token", "34"), ("X-Test-Hold", "put-a")],
            b"a at 34",
        )
    });
    assert!(
        backend.wait_for(HANG_GUARD, |r| r.len() == 1),
        "the PUT never arrived"
    );
    let body = delete_body(&["a", "b"]);
    let delete = std::thread::spawn(move || {
        http(
            addr,
            "POST",
            "/bkt?delete",
            &[("X-Fencing-Token", "35")],
            body.as_bytes(),
        )
    });
    // Admitted on both keys: both raised to 35.
    assert!(
        wait_until(HANG_GUARD, || gw.fence("/bkt/a") == Some(35)
            && gw.fence("/bkt/b") == Some(35)),
        "the DeleteObjects was never admitted"
    );
    // Give a wrong gateway every chance to forward it early.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        backend.count(),
        1,
        "the DeleteObjects reached the backend while 34 was in flight on /bkt/a"
    );
    backend.release("put-a");
    let resp = put.join().unwrap();
    assert_eq!(resp.status, 200, "{}", resp.text());
    let resp = delete.join().unwrap();
    assert_eq!(resp.status, 200, "{}", resp.text());
    let records = backend.records();
    assert_eq!(records.len(), 2, "{records:?}");
    let (put_seq, delete_seq) = (records[0].seq, records[1].seq);
    assert_eq!(records[1].target, "/bkt?delete");
    let events = backend.events();
    let pos = |e: Event| events.iter().position(|x| *x == e).unwrap();
    assert!(
        pos(Event::Responded(put_seq)) < pos(Event::Arrived(delete_seq)),
        "the DeleteObjects arrived before 34 was answered: {events:?}"
    );
}

// ---------------------------------------------------------------------------
// The core's reading (SPEC "Deny by default", rules in every mode): each
// class a place where the gateway and the store read one request apart.
// ---------------------------------------------------------------------------

/// Class 1: a `COPY` onto an existing collection with `Depth: 0` (and
/// `Overwrite: T`, the default) makes Apache delete the destination's
/// members first (RFC 4918 §9.8.4); it is fenced on the destination's
/// subtree whatever the depth. `Depth` named in `Connection` would be read
/// by the gateway and dropped before Apache: refused 400.
#[test]
fn class1_a_stale_depth_0_copy_onto_a_collection_is_fenced_on_its_members() {
    for (name, variant) in dav_variants() {
        class1_copy_depth_0(&format!("copy-depth-0-{name}"), variant);
    }
}

fn class1_copy_depth_0(name: &str, variant: Variant) {
    let apache = Apache::shared();
    let base = collection(name);
    let url = apache.url();
    let gateways = Gateways::start(variant, &["--upstream", &url, "--store", "webdav"]);
    let gw = &gateways.writer;
    let dest = format!("{base}/dest");
    let member = format!("{dest}/member");
    let src = format!("{base}/src");
    assert_status(
        &fenced(gw, "MKCOL", &dest, 33, &[], b""),
        &[201],
        "MKCOL dest",
    );
    assert_status(
        &fenced(gw, "PUT", &member, 34, &[], b"member at 34"),
        &[201],
        "PUT member",
    );
    assert_status(
        &fenced(gw, "PUT", &src, 33, &[], b"src at 33"),
        &[201],
        "PUT src",
    );
    let gw = gateways.stale();
    let to = destination(gw, &dest);
    let resp = fenced(
        gw,
        "COPY",
        &src,
        33,
        &[("Destination", &to), ("Depth", "0")],
        b"",
    );
    assert_stale(&resp, &member, 33, 34);
    let hop = [
        ("Destination", to.as_str()),
        ("Depth", "0"),
        ("Connection", "Depth"),
    ];
    let resp = fenced(gw, "COPY", &src, 33, &hop, b"");
    let json = resp.assert_gateway_error(400, "bad_request");
    assert!(
        json["detail"].as_str().is_some_and(|d| d.contains("depth")),
        "{json}"
    );
    let twice = [
        ("Destination", to.as_str()),
        ("Depth", "0"),
        ("Depth", "infinity"),
    ];
    fenced(gw, "COPY", &src, 33, &twice, b"").assert_gateway_error(400, "bad_request");
    assert_eq!(
        apache.requests("COPY", &base),
        Vec::<String>::new(),
        "a stale COPY reached Apache"
    );
    assert_eq!(apache.read(&member).as_deref(), Some(&b"member at 34"[..]));
    // With Overwrite: F Apache deletes nothing: the subtree is not fenced,
    // and Apache refuses to copy onto what exists.
    let keep = [
        ("Destination", to.as_str()),
        ("Depth", "0"),
        ("Overwrite", "F"),
    ];
    let resp = fenced(gw, "COPY", &src, 33, &keep, b"");
    assert_status(
        &resp,
        &[412],
        "COPY with Overwrite: F onto an existing collection",
    );
    assert_eq!(apache.read(&member).as_deref(), Some(&b"member at 34"[..]));
}

/// Class 5: a `LOCK` with `Depth: infinity` (or none, which means it) on a
/// collection locks every member: a stale one would make the current
/// holder's writes fail with 423. Fenced on the subtree.
#[test]
fn class5_a_stale_depth_infinity_lock_on_a_collection_is_refused() {
    for (name, variant) in dav_variants() {
        class5_lock_infinity(&format!("lock-infinity-{name}"), variant);
    }
}

fn class5_lock_infinity(name: &str, variant: Variant) {
    let apache = Apache::shared();
    let base = collection(name);
    let url = apache.url();
    let gateways = Gateways::start(variant, &["--upstream", &url, "--store", "webdav"]);
    let gw = &gateways.writer;
    let dir = format!("{base}/dir");
    let member = format!("{dir}/member");
    assert_status(&fenced(gw, "MKCOL", &dir, 33, &[], b""), &[201], "MKCOL");
    assert_status(
        &fenced(gw, "PUT", &member, 34, &[], b"member at 34"),
        &[201],
        "PUT member",
    );
    let lock = br#"<?xml version="1.0" encoding="utf-8"?>
<D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype><D:owner>stale</D:owner></D:lockinfo>"#;
    let xml = [("Content-Type", "application/xml")];
    let stale = gateways.stale();
    for depth in [None, Some("infinity"), Some("Infinity")] {
        let mut headers = xml.to_vec();
        headers.extend(depth.map(|depth| ("Depth", depth)));
        let resp = fenced(stale, "LOCK", &dir, 33, &headers, lock);
        assert_stale(&resp, &member, 33, 34);
    }
    assert_eq!(apache.requests("LOCK", &base), Vec::<String>::new());
    // The holder of 35 writes the member: no lock is in its way.
    let resp = fenced(gw, "PUT", &member, 35, &[], b"member at 35");
    assert_status(&resp, &[204], "PUT member at 35");
    // A Depth: 0 lock of the collection reaches only the collection.
    let mut headers = xml.to_vec();
    headers.push(("Depth", "0"));
    let resp = fenced(stale, "LOCK", &dir, 33, &headers, lock);
    assert_status(&resp, &[200], "LOCK Depth: 0 at 33");
}

/// Class 2: methods are case-sensitive. A `post ?delete` or a `post` form
/// upload in another case skipped every check that compared method names;
/// a store that upper-cases methods then ran them. Refused 501, never
/// forwarded, in every mode.
#[test]
fn class2_a_method_in_another_case_is_refused_unforwarded() {
    for variant in [
        Variant::Single,
        Variant::TwoOnEtcd,
        Variant::Conditional("http"),
    ] {
        class2_method_case(variant);
    }
}

fn class2_method_case(variant: Variant) {
    // A store that checks versions: the conditional variant's probe needs one.
    let backend = Backend::start_conditional();
    let url = backend.url();
    let gateways = Gateways::start(variant, &["--upstream", &url, "--flat-keys"]);
    let gw = gateways.stale();
    let body = delete_body(&["obj"]);
    for method in ["post", "Post", "pOST", "delete", "put", "Get", "FROBNICATE"] {
        let resp = fenced(gw, method, "/bkt?delete", 33, &[], body.as_bytes());
        let json = resp.assert_gateway_error(501, "unknown_method");
        assert!(
            json["detail"].as_str().is_some_and(|d| d.contains(method)),
            "{json}"
        );
        // Without a token too: a read in another case is no read.
        let resp = gw.req(method, "/bkt/obj", &[], b"");
        resp.assert_gateway_error(501, "unknown_method");
    }
    // The conditional variant's start-up probe is the one request allowed.
    let reached: Vec<_> = backend
        .records()
        .into_iter()
        .filter(|record| record.target.starts_with("/bkt"))
        .collect();
    assert!(reached.is_empty(), "{variant:?}: {reached:#?}");
}

/// Class 6: two `Content-Type` lines hid a form upload (the gateway read
/// the first, the store the second, and wrote the key named in the form).
#[test]
fn class6_two_content_types_are_refused_unforwarded() {
    for (name, variant) in [
        ("single", Variant::Single),
        ("etcd", Variant::TwoOnEtcd),
        ("conditional", Variant::Conditional("s3")),
    ] {
        class6_two_content_types(&format!("two-content-types-{name}"), variant);
    }
}

fn class6_two_content_types(bucket: &str, variant: Variant) {
    let moto = moto();
    let url = moto.url();
    let gateways = Gateways::start(variant, &["--upstream", &url, "--flat-keys"]);
    let gw = gateways.stale();
    let made = http(moto.addr, "PUT", &format!("/{bucket}"), &[], b"");
    assert_eq!(made.status, 200, "CreateBucket at moto: {}", made.text());
    let boundary = "fencegate-form-boundary";
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let form = format!(
        "--{boundary}\r\n\
         Content-Disposition: form-data; name=\"key\"\r\n\r\n\
         hidden.txt\r\n\
         --{boundary}\r\n\
         Content-Disposition: form-data; name=\"file\"; filename=\"hidden.txt\"\r\n\
         Content-Type: text/plain\r\n\r\n\
         written by a hidden form\r\n\
         --{boundary}--\r\n"
    );
    let target = format!("/{bucket}");
    let headers = [
        ("Content-Type", "text/plain"),
        ("Content-Type", content_type.as_str()),
    ];
    let resp = fenced(gw, "POST", &target, 5, &headers, form.as_bytes());
    let json = resp.assert_gateway_error(400, "bad_request");
    assert!(
        json["detail"]
            .as_str()
            .is_some_and(|d| d.contains("content-type")),
        "{json}"
    );
    assert!(!moto.lists(bucket, "hidden.txt"), "the form reached moto");
}

/// A `DeleteObjects` key written with XML constructs besides text: the
/// gateway read the first text node (and fenced that key), moto read the
/// whole key and deleted a fenced object with a stale token (S3 issue,
/// class 3). Now any key holding something besides text (and CDATA) is
/// refused unforwarded; CDATA is read whole, as the store reads it.
#[test]
fn a_delete_objects_key_is_read_whole_or_refused() {
    let moto = moto();
    let gw = s3_gateway();
    let bucket = "xml-keys";
    let made = http(moto.addr, "PUT", &format!("/{bucket}"), &[], b"");
    assert_eq!(made.status, 200, "CreateBucket at moto: {}", made.text());
    for key in ["ab", "a/b"] {
        let resp = fenced(&gw, "PUT", &format!("/{bucket}/{key}"), 34, &[], b"at 34");
        assert_status(&resp, &[200], "PUT at 34");
    }
    let target = format!("/{bucket}?delete");
    for body in [
        "<Delete><Object><Key>a<!-- hidden -->b</Key></Object></Delete>",
        "<Delete><Object><Key>a<?pi x?>b</Key></Object></Delete>",
        "<Delete><Object><Key>a<i/>b</Key></Object></Delete>",
        "<!DOCTYPE Delete [<!ENTITY k \"ab\">]><Delete><Object><Key>&k;</Key></Object></Delete>",
    ] {
        let resp = fenced(&gw, "POST", &target, 33, &[], body.as_bytes());
        assert_unfenceable(&resp, body);
    }
    // CDATA is text: the whole key is fenced, and the stale token refused.
    let body = "<Delete><Object><Key>a<![CDATA[/]]>b</Key></Object></Delete>";
    let resp = fenced(&gw, "POST", &target, 33, &[], body.as_bytes());
    assert_stale(&resp, &format!("/{bucket}/a/b"), 33, 34);
    assert!(
        moto.lists(bucket, "ab") && moto.lists(bucket, "a/b"),
        "a key was deleted"
    );
}
