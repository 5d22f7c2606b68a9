//! The gateway's SigV4 re-signing under credential custody (SPEC
//! "Credential custody", S3), checked by an independent verifier: a store
//! (`tests/support/sigv4_store.py`) written from AWS's documentation alone,
//! which checks what moto does not: the body against its
//! `x-amz-content-sha256`, every chunk signature of an aws-chunked body in
//! chain from the header's, and the trailer signature. It passes AWS's
//! published vectors before it serves (`--selftest`).
//!
//! The test is the client: it signs with an identity's key (FGOWNER01)
//! using `fencegate::dialect` as a plain SigV4 client library; what is
//! checked is what the gateway forwards, signed with the store's key
//! (AKIDSTORE), as the store judges it.

#[path = "../support/mod.rs"]
mod support;

use support::sigv4_client::Signer;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use fencegate::dialect::chunked::{Chunk, ChunkResigner, Event, Trailer};
use fencegate::dialect::sigv4;
use support::GatewayProcess;

const STORE: (&str, &str) = ("AKIDSTORE", "store-secret-0123456789");
const OWNER: (&str, &str) = ("FGOWNER01", "owner-secret-0123456789");

const IDENTITIES: &str = r#"
[[identity]]
name = "owner"
access_key_id = "FGOWNER01"
secret_file = "owner.secret"
allow = [ { prefix = "/", access = "admin" } ]
"#;

// ---------------------------------------------------------------------------
// The verifying store
// ---------------------------------------------------------------------------

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/sigv4_store.py")
}

/// The venv's interpreter if there is one, else `python3` (the store needs
/// the standard library only).
fn python() -> PathBuf {
    let venv = std::env::var_os("FENCEGATE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venv"))
        .join("bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// `sigv4_store.py` serving with the store's key; killed on drop.
struct VerifyingStore {
    child: Child,
    addr: SocketAddr,
}

impl VerifyingStore {
    fn start() -> VerifyingStore {
        // The verifier first proves itself on AWS's published examples.
        let selftest = Command::new(python())
            .arg(script())
            .arg("--selftest")
            .output()
            .expect("run sigv4_store.py --selftest");
        assert!(
            selftest.status.success(),
            "sigv4_store.py --selftest failed: {}{}",
            String::from_utf8_lossy(&selftest.stdout),
            String::from_utf8_lossy(&selftest.stderr)
        );
        let mut child = Command::new(python())
            .arg(script())
            .args([STORE.0, STORE.1, "us-east-1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sigv4_store.py");
        let mut line = String::new();
        // Bounded: the script prints its port or exits (EOF) at once.
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = match line.trim().strip_prefix("listening on ") {
            Some(port) => port.parse().unwrap(),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("sigv4_store.py did not start: {line:?}");
            }
        };
        VerifyingStore {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every verdict so far, in order.
    fn verdicts(&self) -> Vec<serde_json::Value> {
        let resp = support::http(self.addr, "GET", "/_verdicts", &[], b"");
        assert_eq!(resp.status, 200, "{}", resp.text());
        resp.json().as_array().expect("a list of verdicts").clone()
    }

    /// The verdicts on `method` requests whose target is `target`.
    fn verdicts_on(&self, method: &str, target: &str) -> Vec<serde_json::Value> {
        self.verdicts()
            .into_iter()
            .filter(|v| v["method"] == method && v["target"] == target)
            .collect()
    }

    /// The one verdict on `method target`, asserted verified.
    fn verified(&self, method: &str, target: &str) -> serde_json::Value {
        let found = self.verdicts_on(method, target);
        assert_eq!(
            found.len(),
            1,
            "one verdict on {method} {target}, all: {:#?}",
            self.verdicts()
        );
        let verdict = found.into_iter().next().unwrap();
        assert_eq!(
            verdict["verified"], true,
            "the store refused {method} {target}: {verdict:#}"
        );
        verdict
    }

    /// Asserts that the store verified every request it received.
    fn assert_all_verified(&self) {
        let verdicts = self.verdicts();
        let refused: Vec<_> = verdicts.iter().filter(|v| v["verified"] != true).collect();
        assert!(refused.is_empty(), "refused by the store: {refused:#?}");
    }
}

impl Drop for VerifyingStore {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The store, and the gateway in front of it under custody (`--store s3`)
/// with `extra` options; the directory of its files lives as long as they.
fn setup(extra: &[&str]) -> (VerifyingStore, tempfile::TempDir, GatewayProcess) {
    let store = VerifyingStore::start();
    let dir = tempfile::tempdir().unwrap();
    let credentials = write_files(dir.path());
    let identities = dir.path().join("identities.toml");
    let upstream = store.url();
    let mut args = vec![
        "--upstream",
        upstream.as_str(),
        "--store",
        "s3",
        "--upstream-credentials",
        credentials.to_str().unwrap(),
        "--identities",
        identities.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let gw = GatewayProcess::start(&args);
    (store, dir, gw)
}

/// The store's credentials and the identities, with their secrets, in `dir`;
/// returns the credentials file.
fn write_files(dir: &Path) -> PathBuf {
    let secret = dir.join("store.secret");
    std::fs::write(&secret, STORE.1).unwrap();
    let credentials = dir.join("upstream.toml");
    std::fs::write(
        &credentials,
        format!(
            "kind = \"aws-sigv4\"\naccess_key_id = \"{}\"\nsecret_access_key_file = \"{}\"\nregion = \"us-east-1\"\n",
            STORE.0,
            secret.display()
        ),
    )
    .unwrap();
    std::fs::write(dir.join("owner.secret"), OWNER.1).unwrap();
    std::fs::write(dir.join("identities.toml"), IDENTITIES).unwrap();
    credentials
}

// ---------------------------------------------------------------------------
// The client's side: SigV4 (support::sigv4_client's `Signer`)
// ---------------------------------------------------------------------------

/// What these tests add to the shared client signer
/// (`support::sigv4_client`): every field signed for `to`, and aws-chunked
/// bodies.
trait SignerExt {
    fn signed(
        &self,
        to: SocketAddr,
        method: &str,
        target: &str,
        fields: &[(&str, &str)],
        body: &[u8],
    ) -> Vec<(String, String)>;
    fn frame(&self, parts: &[Vec<u8>], trailer: Option<&Trailer>, seed: [u8; 32]) -> Vec<u8>;
    fn put_chunked(
        &self,
        to: SocketAddr,
        target: &str,
        parts: &[Vec<u8>],
        trailer: Option<&Trailer>,
        fields: &[(&str, &str)],
    ) -> support::Resp;
    fn put_chunked_tampered(
        &self,
        to: SocketAddr,
        target: &str,
        parts: &[Vec<u8>],
        trailer: Option<&Trailer>,
        fields: &[(&str, &str)],
        tamper: &dyn Fn(&mut Vec<u8>),
    ) -> support::Resp;
}

impl SignerExt for Signer<'_> {
    /// The request's fields, every one signed, for `to`.
    fn signed(
        &self,
        to: SocketAddr,
        method: &str,
        target: &str,
        fields: &[(&str, &str)],
        body: &[u8],
    ) -> Vec<(String, String)> {
        self.headers(&to.to_string(), method, target, fields, &[], body)
    }

    /// The aws-chunked body of `parts` (then the final, empty chunk, and
    /// `trailer` if given), its chain starting at `seed`.
    fn frame(&self, parts: &[Vec<u8>], trailer: Option<&Trailer>, seed: [u8; 32]) -> Vec<u8> {
        let mut resigner =
            ChunkResigner::new(self.signing_key(), &self.amz_date(), &self.scope(), seed);
        let mut pieces = Vec::new();
        for part in parts {
            resigner.resign(
                &Event::Chunk(Chunk::new(Bytes::from(part.clone()))),
                &mut pieces,
            );
        }
        resigner.resign(&Event::Chunk(Chunk::new(Bytes::new())), &mut pieces);
        if let Some(trailer) = trailer {
            resigner.resign(&Event::Trailer(trailer.clone()), &mut pieces);
        }
        resigner.resign(&Event::End, &mut pieces);
        pieces.concat()
    }

    /// A signed aws-chunked `PUT` of `parts` (`STREAMING-AWS4-HMAC-SHA256-
    /// PAYLOAD`, or `-TRAILER` with `trailer`), with `fields` signed too.
    fn put_chunked(
        &self,
        to: SocketAddr,
        target: &str,
        parts: &[Vec<u8>],
        trailer: Option<&Trailer>,
        fields: &[(&str, &str)],
    ) -> support::Resp {
        self.put_chunked_tampered(to, target, parts, trailer, fields, &|_| {})
    }

    /// [`put_chunked`](Self::put_chunked), with `tamper` applied to the
    /// framed body before it is sent (its length unchanged).
    fn put_chunked_tampered(
        &self,
        to: SocketAddr,
        target: &str,
        parts: &[Vec<u8>],
        trailer: Option<&Trailer>,
        fields: &[(&str, &str)],
        tamper: &dyn Fn(&mut Vec<u8>),
    ) -> support::Resp {
        // The body's length is the same whatever the signatures.
        let length = self.frame(parts, trailer, [0; 32]).len().to_string();
        let decoded = parts.iter().map(Vec::len).sum::<usize>().to_string();
        let trailer_names = trailer.map(|t| {
            t.fields()
                .map(|(n, _)| n.to_owned())
                .collect::<Vec<_>>()
                .join(",")
        });
        let mut all: Vec<(&str, &str)> = vec![
            (
                "x-amz-content-sha256",
                if trailer.is_some() {
                    sigv4::STREAMING_PAYLOAD_TRAILER
                } else {
                    sigv4::STREAMING_PAYLOAD
                },
            ),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", decoded.as_str()),
            ("content-length", length.as_str()),
        ];
        if let Some(names) = &trailer_names {
            all.push(("x-amz-trailer", names.as_str()));
        }
        all.extend_from_slice(fields);
        let headers = self.signed(to, "PUT", target, &all, b"");
        let authorization = &headers
            .iter()
            .find(|(n, _)| n == "authorization")
            .unwrap()
            .1;
        let seed = authorization.rsplit("Signature=").next().unwrap();
        let seed = sigv4::parse_hex32(seed.as_bytes()).unwrap();
        let mut body = self.frame(parts, trailer, seed);
        tamper(&mut body);
        assert_eq!(body.len().to_string(), length);
        // `support::http` writes Content-Length itself (the same value).
        let headers: Vec<(String, String)> = headers
            .into_iter()
            .filter(|(n, _)| n != "content-length")
            .collect();
        send(to, "PUT", target, &headers, &body)
    }
}

fn send(
    to: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> support::Resp {
    let refs: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    support::http(to, method, target, &refs, body)
}

/// CRC-32 (IEEE 802.3, reflected, as `x-amz-checksum-crc32`), bitwise.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Standard base64 with padding.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for group in data.chunks(3) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn two_chunks() -> Vec<Vec<u8>> {
    vec![
        vec![b'a'; 8192],
        (0..1000u32).map(|i| (i % 251) as u8).collect(),
    ]
}

// ---------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------

#[test]
fn the_helpers_compute_known_values() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(&0xCBF4_3926u32.to_be_bytes()), "y/Q5Jg==");
}

/// A PUT with a hex payload hash: the gateway's header signature verifies
/// at the store, and so does the body against the hash it forwards.
#[test]
fn a_plain_put_is_re_signed_and_its_body_hash_holds() {
    let (store, _dir, gw) = setup(&[]);
    let owner = Signer::now(OWNER);
    let body = b"plain body, signed by its hash\n";
    let resp = owner.send(
        &gw,
        "PUT",
        "/bkt/plain.txt",
        &[("x-fencing-token", "1"), ("content-type", "text/plain")],
        body,
    );
    assert_eq!(resp.status, 200, "{}\n{}", resp.text(), gw.stderr());
    let verdict = store.verified("PUT", "/bkt/plain.txt");
    assert_eq!(verdict["access_key"], STORE.0, "{verdict:#}");
    assert_eq!(verdict["payload"], sigv4::sha256_hex(body), "{verdict:#}");
    assert_eq!(verdict["body_verified"], true, "{verdict:#}");
    assert_eq!(verdict["decoded"], sigv4::sha256_hex(body), "{verdict:#}");
    let signed: Vec<&str> = verdict["signed_headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    // What the client signed stays signed (SPEC: the forwarded request
    // carries the client's signed headers, under the gateway's signature).
    for name in ["host", "x-amz-date", "x-amz-content-sha256", "content-type"] {
        assert!(signed.contains(&name), "{name} not signed: {verdict:#}");
    }
    store.assert_all_verified();
}

/// A client's own signed `x-amz-security-token` is its credential: the
/// gateway, which has no session token here, removes it like the client's
/// `Authorization`, and the store gets the request signed without it, on a
/// read (re-signed over the client's list, less the token) and on a write.
#[test]
fn a_clients_signed_session_token_is_not_forwarded() {
    let (store, _dir, gw) = setup(&[]);
    let owner = Signer::now(OWNER);
    for (method, body) in [("PUT", &b"with a token"[..]), ("GET", &b""[..])] {
        let resp = owner.send(
            &gw,
            method,
            "/bkt/session.txt",
            &[
                ("x-fencing-token", "1"),
                ("x-amz-security-token", "the-clients-own-session-token"),
            ],
            body,
        );
        assert_eq!(
            resp.status,
            200,
            "{method}: {}\n{}",
            resp.text(),
            gw.stderr()
        );
        let verdict = store.verified(method, "/bkt/session.txt");
        assert_eq!(verdict["access_key"], STORE.0, "{verdict:#}");
        assert!(
            verdict["headers"].get("x-amz-security-token").is_none(),
            "{method}: the client's session token reached the store: {verdict:#}"
        );
        let signed = verdict["signed_headers"].as_array().unwrap();
        assert!(
            !signed.iter().any(|name| name == "x-amz-security-token"),
            "{verdict:#}"
        );
    }
    store.assert_all_verified();
}

/// A listing with a query (a percent-encoded space): the canonical query at
/// the store matches what the gateway signed.
#[test]
fn a_get_with_a_query_is_re_signed() {
    let (store, _dir, gw) = setup(&[]);
    let owner = Signer::now(OWNER);
    let target = "/bkt?list-type=2&prefix=a%20b";
    let resp = owner.send(&gw, "GET", target, &[], b"");
    assert_eq!(resp.status, 200, "{}\n{}", resp.text(), gw.stderr());
    let verdicts: Vec<_> = store
        .verdicts()
        .into_iter()
        .filter(|v| v["method"] == "GET" && v["target"].as_str().unwrap().starts_with("/bkt?"))
        .collect();
    assert_eq!(verdicts.len(), 1, "{verdicts:#?}");
    let verdict = &verdicts[0];
    assert_eq!(verdict["verified"], true, "{verdict:#}");
    assert_eq!(
        verdict["canonical_query"], "list-type=2&prefix=a%20b",
        "{verdict:#}"
    );
    assert_eq!(verdict["canonical_uri"], "/bkt", "{verdict:#}");
    // The relayed answer is the store's own.
    assert_eq!(resp.json()["verified"], true, "{}", resp.text());
    store.assert_all_verified();
}

/// A signed aws-chunked upload: the store checks the seed signature and
/// every chunk's signature in chain from it (the gateway's chain, not the
/// client's), and the decoded data.
#[test]
fn a_signed_aws_chunked_put_verifies_chunk_by_chunk() {
    let (store, _dir, gw) = setup(&[]);
    let owner = Signer::now(OWNER);
    let parts = two_chunks();
    let resp = owner.put_chunked(
        gw.data_addr(),
        "/bkt/chunked.bin",
        &parts,
        None,
        &[("x-fencing-token", "1")],
    );
    assert_eq!(resp.status, 200, "{}\n{}", resp.text(), gw.stderr());
    let verdict = store.verified("PUT", "/bkt/chunked.bin");
    assert_eq!(verdict["access_key"], STORE.0, "{verdict:#}");
    assert_eq!(verdict["payload"], sigv4::STREAMING_PAYLOAD, "{verdict:#}");
    assert_eq!(verdict["chunks"], 3, "{verdict:#}");
    assert_eq!(
        verdict["chunk_sizes"],
        serde_json::json!([8192, 1000, 0]),
        "{verdict:#}"
    );
    assert_eq!(verdict["body_verified"], true, "{verdict:#}");
    assert_eq!(
        verdict["decoded"],
        sigv4::sha256_hex(&parts.concat()),
        "{verdict:#}"
    );
    assert_eq!(verdict["decoded_length"], 9192, "{verdict:#}");
    // S3 wants the body's length up front (411 without it).
    assert_eq!(verdict["framing"], "content-length", "{verdict:#}");
    store.assert_all_verified();
}

/// The same with a signed trailer (`-TRAILER`, `x-amz-checksum-crc32`): the
/// store also checks the trailer signature, re-signed by the gateway, and
/// the checksum against the data.
#[test]
fn a_signed_aws_chunked_put_with_a_trailer_verifies_the_trailer_signature() {
    let (store, _dir, gw) = setup(&[]);
    let owner = Signer::now(OWNER);
    let parts = two_chunks();
    let checksum = base64(&crc32(&parts.concat()).to_be_bytes());
    let trailer = Trailer::new(&[("x-amz-checksum-crc32", checksum.as_str())]);
    let resp = owner.put_chunked(
        gw.data_addr(),
        "/bkt/trailer.bin",
        &parts,
        Some(&trailer),
        &[("x-fencing-token", "1")],
    );
    assert_eq!(resp.status, 200, "{}\n{}", resp.text(), gw.stderr());
    let verdict = store.verified("PUT", "/bkt/trailer.bin");
    assert_eq!(
        verdict["payload"],
        sigv4::STREAMING_PAYLOAD_TRAILER,
        "{verdict:#}"
    );
    assert_eq!(verdict["chunks"], 3, "{verdict:#}");
    assert_eq!(
        verdict["decoded"],
        sigv4::sha256_hex(&parts.concat()),
        "{verdict:#}"
    );
    assert_eq!(
        verdict["trailer"],
        serde_json::json!({ "x-amz-checksum-crc32": checksum }),
        "{verdict:#}"
    );
    assert_eq!(verdict["trailer_signature"], true, "{verdict:#}");
    assert_eq!(
        verdict["checksums_checked"]["x-amz-checksum-crc32"], true,
        "{verdict:#}"
    );
    assert_eq!(verdict["framing"], "content-length", "{verdict:#}");
    store.assert_all_verified();
}

/// Under `--conditional-writes on` the gateway HEADs the object (signed with
/// the store's key) and adds its condition to the PUT under its own
/// signature: `If-Match: "x"` for an object the store has (ETag `"x"`),
/// `If-None-Match: *` for one it has not (HEAD 404), with a plain body and
/// with an aws-chunked one (the seed signature covers the condition).
#[test]
fn a_chained_writes_condition_is_signed_by_the_gateway() {
    let (store, _dir, gw) = setup(&["--conditional-writes", "on"]);
    let owner = Signer::now(OWNER);
    let signed = |verdict: &serde_json::Value| -> Vec<String> {
        verdict["signed_headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };

    // An existing object: HEAD 200 ETag "x", then PUT If-Match: "x".
    let body = b"chained body\n";
    let resp = owner.send(
        &gw,
        "PUT",
        "/bkt/chained.txt",
        &[("x-fencing-token", "1")],
        body,
    );
    assert_eq!(resp.status, 200, "{}\n{}", resp.text(), gw.stderr());
    let head = store.verified("HEAD", "/bkt/chained.txt");
    assert_eq!(head["access_key"], STORE.0, "{head:#}");
    let put = store.verified("PUT", "/bkt/chained.txt");
    assert_eq!(put["headers"]["if-match"], "\"x\"", "{put:#}");
    assert!(signed(&put).contains(&"if-match".to_owned()), "{put:#}");
    assert_eq!(put["body_verified"], true, "{put:#}");

    // An absent object: HEAD 404, then PUT If-None-Match: *.
    let resp = owner.send(
        &gw,
        "PUT",
        "/bkt/absent.txt",
        &[("x-fencing-token", "1")],
        body,
    );
    assert_eq!(resp.status, 200, "{}\n{}", resp.text(), gw.stderr());
    store.verified("HEAD", "/bkt/absent.txt");
    let put = store.verified("PUT", "/bkt/absent.txt");
    assert_eq!(put["headers"]["if-none-match"], "*", "{put:#}");
    assert!(
        signed(&put).contains(&"if-none-match".to_owned()),
        "{put:#}"
    );

    // An aws-chunked PUT: the condition under the seed signature, the chunks
    // in chain from it.
    let parts = two_chunks();
    let resp = owner.put_chunked(
        gw.data_addr(),
        "/bkt/chained.bin",
        &parts,
        None,
        &[("x-fencing-token", "1")],
    );
    assert_eq!(resp.status, 200, "{}\n{}", resp.text(), gw.stderr());
    store.verified("HEAD", "/bkt/chained.bin");
    let put = store.verified("PUT", "/bkt/chained.bin");
    assert_eq!(put["headers"]["if-match"], "\"x\"", "{put:#}");
    assert!(signed(&put).contains(&"if-match".to_owned()), "{put:#}");
    assert_eq!(put["chunks"], 3, "{put:#}");
    assert_eq!(
        put["decoded"],
        sigv4::sha256_hex(&parts.concat()),
        "{put:#}"
    );
    store.assert_all_verified();
}

/// The verifier has teeth: sent straight to it, signed with the store's own
/// key, what is right verifies and what is wrong (a body that is not its
/// hash, an hour-old date, another key, a target other than the signed
/// one, an unsigned `x-amz-*` header, a chunk altered or chained from
/// another seed, a trailer altered after signing or whose checksum is not
/// the data's) is refused, each for its reason.
#[test]
fn the_verifier_refuses_what_it_should() {
    let store = VerifyingStore::start();
    let to = store.addr;
    let client = Signer::now(STORE);
    let why = |resp: &support::Resp| -> String {
        assert_eq!(resp.status, 403, "{}", resp.text());
        let json = resp.json();
        assert_eq!(json["verified"], false, "{json:#}");
        json["why"].as_str().unwrap().to_owned()
    };

    let headers = client.signed(to, "PUT", "/bkt/ok.txt", &[], b"right");
    assert_eq!(
        send(to, "PUT", "/bkt/ok.txt", &headers, b"right").status,
        200
    );
    let headers = client.signed(to, "PUT", "/bkt/ok.txt", &[], b"right");
    let reason = why(&send(to, "PUT", "/bkt/ok.txt", &headers, b"wrong"));
    assert!(reason.contains("body hash"), "{reason}");

    let late = Signer {
        key: STORE,
        at: client.at - 3600,
    };
    let headers = late.signed(to, "GET", "/bkt/ok.txt", &[], b"");
    let reason = why(&send(to, "GET", "/bkt/ok.txt", &headers, b""));
    assert!(reason.contains("RequestTimeTooSkewed"), "{reason}");

    let other = Signer::now(OWNER);
    let headers = other.signed(to, "GET", "/bkt?list-type=2", &[], b"");
    let reason = why(&send(to, "GET", "/bkt?list-type=2", &headers, b""));
    assert!(reason.contains("unknown access key"), "{reason}");

    let headers = client.signed(to, "GET", "/bkt/k?a=1", &[], b"");
    assert_eq!(send(to, "GET", "/bkt/k?a=1", &headers, b"").status, 200);
    let reason = why(&send(to, "GET", "/bkt/k?a=2", &headers, b""));
    assert!(reason.contains("SignatureDoesNotMatch"), "{reason}");
    let mut unsigned = headers.clone();
    unsigned.push(("x-amz-meta-extra".into(), "1".into()));
    let reason = why(&send(to, "GET", "/bkt/k?a=1", &unsigned, b""));
    assert!(reason.contains("not signed"), "{reason}");

    let parts = two_chunks();
    let resp = client.put_chunked(to, "/bkt/c.bin", &parts, None, &[]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["chunks"], 3, "{}", resp.text());
    // A byte of the second chunk's data.
    let flip: &dyn Fn(&mut Vec<u8>) = &|body| {
        let at = body.len() - 200;
        body[at] ^= 1;
    };
    let resp = client.put_chunked_tampered(to, "/bkt/c.bin", &parts, None, &[], flip);
    let reason = why(&resp);
    assert!(reason.starts_with("chunk 1 "), "{reason}");
    // The right chunks, chained from another seed than the header's.
    let client2 = Signer::now(STORE);
    let reseeded: &dyn Fn(&mut Vec<u8>) = &|body| {
        *body = client2.frame(&two_chunks(), None, [7; 32]);
    };
    let resp = client.put_chunked_tampered(to, "/bkt/c.bin", &parts, None, &[], reseeded);
    let reason = why(&resp);
    assert!(reason.starts_with("chunk 0 "), "{reason}");

    let checksum = base64(&crc32(&parts.concat()).to_be_bytes());
    let trailer = Trailer::new(&[("x-amz-checksum-crc32", checksum.as_str())]);
    let resp = client.put_chunked(to, "/bkt/t.bin", &parts, Some(&trailer), &[]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["trailer_signature"], true, "{}", resp.text());
    // The trailer's value changed after it was signed.
    let altered: &dyn Fn(&mut Vec<u8>) = &|body| {
        let at = body
            .windows(b"x-amz-checksum-crc32:".len())
            .position(|w| w == b"x-amz-checksum-crc32:")
            .unwrap()
            + b"x-amz-checksum-crc32:".len();
        body[at] = if body[at] == b'A' { b'B' } else { b'A' };
    };
    let resp = client.put_chunked_tampered(to, "/bkt/t.bin", &parts, Some(&trailer), &[], altered);
    let reason = why(&resp);
    assert!(reason.starts_with("trailer signature"), "{reason}");
    // Signed, but not the data's checksum.
    let wrong = base64(&(crc32(&parts.concat()) ^ 1).to_be_bytes());
    let trailer = Trailer::new(&[("x-amz-checksum-crc32", wrong.as_str())]);
    let resp = client.put_chunked(to, "/bkt/t.bin", &parts, Some(&trailer), &[]);
    let reason = why(&resp);
    assert!(reason.contains("BadDigest"), "{reason}");
}

/// Keys and queries whose canonical forms take work (percent-encoded UTF-8
/// and reserved characters, raw sub-delimiters the canonical form encodes,
/// `~` and `/` in a query value, a parameter without a value) and signed
/// headers with inner runs of spaces and a repeated line: the gateway's
/// canonical request over what it forwards is the store's.
#[test]
fn awkward_targets_and_header_values_are_re_signed() {
    let (store, _dir, gw) = setup(&[]);
    let owner = Signer::now(OWNER);
    for target in [
        "/bkt/dir/%C3%A9t%C3%A9%20%21%2A%24~x.txt",
        "/bkt/raw!$&'()*,;=:@sub-delims.txt",
        "/bkt/k.txt?tagging",
        "/bkt?list-type=2&prefix=dir%2Fsub%20x~&delimiter=/&start-after=%C3%A9",
        // A sub-resource without a value (not `?uploads`: under custody
        // its answer is read to seal upload ids, and this store answers
        // JSON).
        "/bkt?versions&prefix=p&max-keys=2",
    ] {
        let resp = owner.send(&gw, "GET", target, &[], b"");
        assert_eq!(
            resp.status,
            200,
            "{target}: {}\n{}",
            resp.text(),
            gw.stderr()
        );
        assert_eq!(resp.json()["verified"], true, "{target}: {}", resp.text());
    }

    let body = b"with metadata";
    let headers = owner.signed(
        gw.data_addr(),
        "PUT",
        "/bkt/meta.txt",
        &[
            ("x-fencing-token", "1"),
            ("x-amz-meta-note", "two  spaces   and\ttab"),
            ("x-amz-meta-multi", "first"),
            ("x-amz-meta-multi", "second"),
        ],
        body,
    );
    let resp = send(gw.data_addr(), "PUT", "/bkt/meta.txt", &headers, body);
    assert_eq!(resp.status, 200, "{}\n{}", resp.text(), gw.stderr());
    let verdict = store.verified("PUT", "/bkt/meta.txt");
    let signed: Vec<&str> = verdict["signed_headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(signed.contains(&"x-amz-meta-note"), "{verdict:#}");
    assert!(signed.contains(&"x-amz-meta-multi"), "{verdict:#}");
    assert_eq!(
        verdict["headers"]["x-amz-meta-multi"], "first,second",
        "{verdict:#}"
    );
    store.assert_all_verified();
}
