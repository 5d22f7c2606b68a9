//! Google Cloud Storage through the gateway, against a real GCS emulator
//! process (`gcp-storage-emulator`, pure Python, speaking the JSON API and
//! the XML API's object `PUT` and `GET`), with `--flat-keys` as for every
//! store without collections. The SPEC's promise: the JSON API's upload
//! (`POST /upload/storage/v1/b/B/o?name=N`), its object path
//! (`/storage/v1/b/B/o/N`, the name percent-encoded) and the XML API's path
//! (`/B/N`) share one fence, `/B/N`; uploads that name their object in the
//! body are refused (400 `unfenceable_write`) and never reach the store.
//!
//! Every check of the store's content asks the emulator directly, not
//! through the gateway. The emulator answers 404 to a `DELETE` of an object
//! that is not there, so a 2xx `DELETE` after a refused one also proves the
//! object survived it.
//!
//! The emulator enforces no generation preconditions
//! (`x-goog-if-generation-match`, `ifGenerationMatch`): it writes anyway, so
//! it cannot stand in for GCS under `--conditional-writes`.
//!
//! Needs the Python environment that `scripts/install-deps.sh` makes
//! (`target/venv`, or `FENCEGATE_VENV`); missing, the test fails and says so.

#[path = "../support/mod.rs"]
mod support;

use support::moto::venv;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use support::variants::{Gateways, Variant};
use support::{dead_port, http, try_http, wait_until, GatewayProcess, Resp, HANG_GUARD};

/// `gcp-storage-emulator start --in-memory` on a free loopback port, killed
/// on drop. Its log (it logs every request) goes to a file in its own
/// temporary directory, also its working directory.
struct Emulator {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Emulator {
    fn start() -> Emulator {
        let bin = venv().join("bin/gcp-storage-emulator");
        assert!(
            bin.exists(),
            "{} is missing: run scripts/install-deps.sh (it makes the Python environment)",
            bin.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("emulator.log")).unwrap();
        let port = dead_port();
        let child = Command::new(&bin)
            .args(["start", "--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--in-memory")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let emulator = Emulator {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            dir,
        };
        // `GET /` is the emulator's health check.
        assert!(
            wait_until(HANG_GUARD, || try_http(emulator.addr, "GET", "/", &[], b"")
                .is_ok_and(|resp| resp.status == 200)),
            "the GCS emulator did not answer on {}: {}",
            emulator.addr,
            emulator.log()
        );
        emulator
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("emulator.log")).unwrap_or_default()
    }

    /// The object's content, asked of the emulator directly through the JSON
    /// API's download path; `None` when it answers 404.
    fn object(&self, bucket: &str, name: &str) -> Option<String> {
        let target = format!(
            "/download/storage/v1/b/{bucket}/o/{}?alt=media",
            support::pct(name)
        );
        let resp = http(self.addr, "GET", &target, &[], b"");
        match resp.status {
            200 => Some(resp.text()),
            404 => None,
            other => panic!("GET {target} from the emulator: {other} {}", resp.text()),
        }
    }
}

/// The gateway in front of the emulator, with `--flat-keys` (GCS has no
/// collections).
fn gcs_gateway(emulator: &Emulator) -> GatewayProcess {
    let url = emulator.url();
    GatewayProcess::start(&["--upstream", &url, "--flat-keys"])
}

fn token(t: u64) -> String {
    t.to_string()
}

/// `POST /storage/v1/b?project=...` through the gateway with token `t`.
fn create_bucket(gw: &GatewayProcess, bucket: &str, t: u64) {
    let body = format!(r#"{{"name":"{bucket}"}}"#);
    let resp = gw.req(
        "POST",
        "/storage/v1/b?project=fencegate-test",
        &[
            ("X-Fencing-Token", &token(t)),
            ("Content-Type", "application/json"),
        ],
        body.as_bytes(),
    );
    assert_eq!(resp.status, 200, "bucket {bucket}: {}", resp.text());
    assert_eq!(resp.json()["name"], bucket, "{}", resp.text());
}

/// A JSON-API media upload through the gateway: `?uploadType=media&name=`.
fn json_upload(gw: &GatewayProcess, bucket: &str, name: &str, t: u64, data: &str) -> Resp {
    let target = format!(
        "/upload/storage/v1/b/{bucket}/o?uploadType=media&name={}",
        support::pct(name)
    );
    gw.req(
        "POST",
        &target,
        &[
            ("X-Fencing-Token", &token(t)),
            ("Content-Type", "text/plain"),
        ],
        data.as_bytes(),
    )
}

/// A JSON-API object delete through the gateway: `/storage/v1/b/B/o/N`.
fn json_delete(gw: &GatewayProcess, bucket: &str, name: &str, t: u64) -> Resp {
    let target = format!("/storage/v1/b/{bucket}/o/{}", support::pct(name));
    gw.req("DELETE", &target, &[("X-Fencing-Token", &token(t))], b"")
}

/// An XML-API object write through the gateway: `PUT /B/N`.
fn xml_put(gw: &GatewayProcess, bucket: &str, name: &str, t: u64, data: &str) -> Resp {
    gw.req(
        "PUT",
        &format!("/{bucket}/{name}"),
        &[
            ("X-Fencing-Token", &token(t)),
            ("Content-Type", "text/plain"),
        ],
        data.as_bytes(),
    )
}

/// Asserts a 409 `stale_token` on `resource` for token `t` below `highest`.
fn assert_stale(resp: &Resp, resource: &str, t: u64, highest: u64) {
    let json = resp.assert_gateway_error(409, "stale_token");
    assert_eq!(json["resource"], resource, "{json}");
    assert_eq!(json["token"], t, "{json}");
    assert_eq!(json["highest"], highest, "{json}");
    assert_eq!(
        resp.header("x-fencing-highest"),
        Some(highest.to_string().as_str())
    );
}

#[test]
fn json_upload_json_delete_and_xml_put_of_one_object_share_one_fence() {
    let emulator = Emulator::start();
    let gw = gcs_gateway(&emulator);
    let key = "/bkt/dir/obj";
    create_bucket(&gw, "bkt", 1);

    // Holder 34 uploads dir/obj through the JSON API.
    let resp = json_upload(&gw, "bkt", "dir/obj", 34, "written by 34");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["name"], "dir/obj", "{}", resp.text());
    assert_eq!(gw.fence(key), Some(34));
    assert_eq!(
        emulator.object("bkt", "dir/obj").as_deref(),
        Some("written by 34")
    );

    // Holder 33 is stale in every spelling of the object: its JSON delete,
    // its JSON upload and its XML write are refused, and the object is as
    // holder 34 left it.
    assert_stale(&json_delete(&gw, "bkt", "dir/obj", 33), key, 33, 34);
    assert_eq!(
        emulator.object("bkt", "dir/obj").as_deref(),
        Some("written by 34")
    );
    assert_stale(
        &json_upload(&gw, "bkt", "dir/obj", 33, "written by 33"),
        key,
        33,
        34,
    );
    assert_stale(
        &xml_put(&gw, "bkt", "dir/obj", 33, "written by 33 (XML)"),
        key,
        33,
        34,
    );
    assert_eq!(
        emulator.object("bkt", "dir/obj").as_deref(),
        Some("written by 34")
    );
    assert_eq!(gw.fence(key), Some(34));

    // Holder 35 deletes it through the JSON API (the emulator would answer
    // 404 had the object gone).
    let resp = json_delete(&gw, "bkt", "dir/obj", 35);
    assert!(
        (200..300).contains(&resp.status),
        "{} {}",
        resp.status,
        resp.text()
    );
    assert_eq!(emulator.object("bkt", "dir/obj"), None);
    assert_eq!(gw.fence(key), Some(35));

    // A stale holder cannot bring it back, in either API.
    assert_stale(
        &json_upload(&gw, "bkt", "dir/obj", 34, "recreated by 34"),
        key,
        34,
        35,
    );
    assert_stale(
        &xml_put(&gw, "bkt", "dir/obj", 34, "recreated by 34 (XML)"),
        key,
        34,
        35,
    );
    assert_eq!(emulator.object("bkt", "dir/obj"), None);

    // The other way round: an XML write raises the fence the JSON API meets.
    let resp = xml_put(&gw, "bkt", "dir/obj", 36, "written by 36 (XML)");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(gw.fence(key), Some(36));
    assert_stale(&json_delete(&gw, "bkt", "dir/obj", 35), key, 35, 36);
    assert_stale(
        &json_upload(&gw, "bkt", "dir/obj", 35, "written by 35"),
        key,
        35,
        36,
    );
    assert_eq!(
        emulator.object("bkt", "dir/obj").as_deref(),
        Some("written by 36 (XML)")
    );

    // One fence for all three spellings, none for the JSON paths themselves.
    let listed = gw.admin_get("/fences?prefix=/bkt").json();
    let keys: Vec<&str> = listed["fences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|fence| fence["resource"].as_str().unwrap())
        .collect();
    assert_eq!(keys, [key], "{listed}");
    assert_eq!(gw.fence("/upload/storage/v1/b/bkt/o"), None);
    assert_eq!(gw.fence("/storage/v1/b/bkt/o/dir/obj"), None);
}

/// A multipart upload: a JSON metadata part naming `name`, then `data`.
fn multipart_body(name: &str, data: &str) -> String {
    format!(
        "--fg\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{{\"name\":\"{name}\"}}\r\n\
         --fg\r\nContent-Type: text/plain\r\n\r\n{data}\r\n--fg--\r\n"
    )
}

const MULTIPART: &str = "multipart/related; boundary=fg";

#[test]
fn uploads_named_in_their_body_are_refused_and_never_reach_the_emulator() {
    let emulator = Emulator::start();
    let gw = gcs_gateway(&emulator);
    create_bucket(&gw, "bkt", 1);

    // Control: the emulator itself applies such an upload, straight to it.
    let direct = http(
        emulator.addr,
        "POST",
        "/upload/storage/v1/b/bkt/o?uploadType=multipart",
        &[("Content-Type", MULTIPART)],
        multipart_body("dir/direct", "straight to the emulator").as_bytes(),
    );
    assert_eq!(direct.status, 200, "{}", direct.text());
    assert_eq!(
        emulator.object("bkt", "dir/direct").as_deref(),
        Some("straight to the emulator")
    );

    // Through the gateway: the name is in the body, so it is refused.
    let resp = gw.req(
        "POST",
        "/upload/storage/v1/b/bkt/o?uploadType=multipart",
        &[("X-Fencing-Token", "50"), ("Content-Type", MULTIPART)],
        multipart_body("dir/multi", "through the gateway").as_bytes(),
    );
    let json = resp.assert_gateway_error(400, "unfenceable_write");
    assert!(
        json["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("?name="),
        "{json}"
    );
    assert_eq!(emulator.object("bkt", "dir/multi"), None);

    // A resumable session started with the name in its JSON body: refused
    // (the chunks that follow could not be fenced either).
    let resp = gw.req(
        "POST",
        "/upload/storage/v1/b/bkt/o?uploadType=resumable",
        &[
            ("X-Fencing-Token", "50"),
            ("Content-Type", "application/json"),
        ],
        br#"{"name":"dir/resumable"}"#,
    );
    resp.assert_gateway_error(400, "unfenceable_write");

    // A batch request: its objects are in its body.
    let batch = "--fg\r\nContent-Type: application/http\r\n\r\n\
                 DELETE /storage/v1/b/bkt/o/dir%2Fdirect HTTP/1.1\r\n\r\n--fg--\r\n";
    let resp = gw.req(
        "POST",
        "/batch/storage/v1",
        &[
            ("X-Fencing-Token", "50"),
            ("Content-Type", "multipart/mixed; boundary=fg"),
        ],
        batch.as_bytes(),
    );
    resp.assert_gateway_error(400, "unfenceable_write");
    assert_eq!(
        emulator.object("bkt", "dir/direct").as_deref(),
        Some("straight to the emulator"),
        "the refused batch delete reached the emulator"
    );

    // None of them raised a fence; nothing under the bucket is fenced.
    let listed = gw.admin_get("/fences?prefix=/bkt").json();
    assert_eq!(listed["fences"], serde_json::json!([]), "{listed}");

    // The same multipart upload with ?name= in the query is fenced on that
    // name (GCS and the emulator take the query's name over the body's).
    let resp = gw.req(
        "POST",
        "/upload/storage/v1/b/bkt/o?uploadType=multipart&name=dir%2Fnamed",
        &[("X-Fencing-Token", "51"), ("Content-Type", MULTIPART)],
        multipart_body("dir/named", "named in the query").as_bytes(),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(gw.fence("/bkt/dir/named"), Some(51));
    assert_eq!(
        emulator.object("bkt", "dir/named").as_deref(),
        Some("named in the query")
    );
    let resp = gw.req(
        "POST",
        "/upload/storage/v1/b/bkt/o?uploadType=multipart&name=dir%2Fnamed",
        &[("X-Fencing-Token", "50"), ("Content-Type", MULTIPART)],
        multipart_body("dir/named", "stale").as_bytes(),
    );
    assert_stale(&resp, "/bkt/dir/named", 50, 51);
    assert_eq!(
        emulator.object("bkt", "dir/named").as_deref(),
        Some("named in the query")
    );
}

/// Runs `tests/clients/gcs_fenced.py` (Google's `google-cloud-storage`
/// client) against the gateway; returns what it printed.
fn run_python_client(gw: &GatewayProcess, bucket: &str, name: &str) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients/gcs_fenced.py");
    let out = Command::new(venv().join("bin/python"))
        .arg(script)
        .arg(gw.data_url())
        .args([bucket, name])
        // The client must talk to the gateway, not to a real GCS or an
        // emulator named by the environment.
        .env_remove("STORAGE_EMULATOR_HOST")
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "gcs client failed: {stdout}\n{}\ngateway stderr:\n{}",
        String::from_utf8_lossy(&out.stderr),
        gw.stderr()
    );
    serde_json::from_str(stdout.trim()).unwrap()
}

/// The one request a step sent, asserted to be `request` answered `status`
/// (and the gateway's `error`, if given).
fn assert_one_exchange(
    result: &serde_json::Value,
    step: &str,
    request: &str,
    status: u16,
    error: Option<&str>,
) {
    let exchanges = result[step]["exchanges"].as_array().unwrap();
    assert_eq!(exchanges.len(), 1, "{step}: {result:#}");
    let exchange = &exchanges[0];
    assert_eq!(exchange["request"], request, "{step}: {result:#}");
    assert_eq!(exchange["status"], status, "{step}: {result:#}");
    assert_eq!(exchange["error"].as_str(), error, "{step}: {result:#}");
}

#[test]
fn google_cloud_storage_client_through_the_gateway() {
    let emulator = Emulator::start();
    let gw = gcs_gateway(&emulator);
    let r = run_python_client(&gw, "pybkt", "py/report.csv");
    let key = "/pybkt/py/report.csv";

    assert_eq!(r["create_bucket"]["returned"], "pybkt", "{r:#}");

    // Blob.upload_from_string of a small payload is one multipart upload
    // that names the object in its body only: refused, unforwarded, and the
    // client raises BadRequest.
    assert_one_exchange(
        &r,
        "upload_from_string",
        "POST /upload/storage/v1/b/pybkt/o?uploadType=multipart",
        400,
        Some("unfenceable_write"),
    );
    assert_eq!(r["upload_from_string"]["raised"], "BadRequest", "{r:#}");

    // The recipe: a media upload named in the query, through the client's
    // session; the client reads the object back.
    assert_one_exchange(
        &r,
        "media_upload",
        "POST /upload/storage/v1/b/pybkt/o?uploadType=media&name=py%2Freport.csv",
        200,
        None,
    );
    assert_eq!(r["download"]["returned"], "written by holder 34", "{r:#}");

    // Holder 33's delete through the client is refused. google-api-core
    // reads an error body as GCS's `{"error": {"message": ...}}` and fails
    // on the gateway's `{"error": "stale_token"}` (AttributeError instead of
    // Conflict): the refusal holds, whatever the client makes of it.
    assert_one_exchange(
        &r,
        "stale_delete",
        "DELETE /storage/v1/b/pybkt/o/py%2Freport.csv?prettyPrint=false",
        409,
        Some("stale_token"),
    );
    assert!(r["stale_delete"]["raised"].is_string(), "{r:#}");
    assert_eq!(r["stale_media_upload"]["returned"], 409, "{r:#}");
    assert_eq!(
        r["download_after_stale"]["returned"], "written by holder 34",
        "{r:#}"
    );

    // Holder 35 deletes it through the client.
    assert_one_exchange(
        &r,
        "delete",
        "DELETE /storage/v1/b/pybkt/o/py%2Freport.csv?prettyPrint=false",
        200,
        None,
    );
    assert_eq!(r["exists_after_delete"]["returned"], false, "{r:#}");
    assert_eq!(emulator.object("pybkt", "py/report.csv"), None);
    assert_eq!(gw.fence(key), Some(35));
}

/// The emulator serves the JSON API without `/storage/v1` (`/b/B/o/N`, the
/// form Google's Node client uses against an emulator), and after
/// collapsing a `//` before it. Both were fenced on their raw path alone,
/// so a stale token deleted, changed or copied onto a fenced object (core
/// reading issue, classes 3 and 4).
#[test]
fn class3_and_class4_every_spelling_of_the_json_api_is_fenced_as_its_object() {
    // The emulator checks no versions: no conditional-writes variant. An
    // emulator each, as the requests name one bucket.
    for variant in [Variant::Single, Variant::TwoOnEtcd] {
        every_spelling_is_fenced_as_its_object(&Emulator::start(), variant);
    }
}

fn every_spelling_is_fenced_as_its_object(emulator: &Emulator, variant: Variant) {
    let url = emulator.url();
    let gateways = Gateways::start(variant, &["--upstream", &url, "--flat-keys"]);
    let gw = &gateways.writer;
    create_bucket(gw, "spelt", 1);
    let key = "/spelt/ledger";
    let resp = json_upload(gw, "spelt", "ledger", 34, "written by 34");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let resp = json_upload(gw, "spelt", "scratch", 33, "scratch at 33");
    assert_eq!(resp.status, 200, "{}", resp.text());

    // The emulator reads both spellings as the JSON API: a proof on an
    // object of its own, at the emulator directly.
    let resp = json_upload(gw, "spelt", "proof", 40, "proof");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let direct = http(emulator.addr, "DELETE", "/b/spelt/o/proof", &[], b"");
    assert!((200..300).contains(&direct.status), "{}", direct.text());
    assert_eq!(emulator.object("spelt", "proof"), None);

    let t33 = [
        ("X-Fencing-Token", "33"),
        ("Content-Type", "application/json"),
    ];
    let gw = gateways.stale();
    for (method, target, body) in [
        ("DELETE", "/b/spelt/o/ledger", ""),
        ("PATCH", "/b/spelt/o/ledger", r#"{"metadata":{"by":"33"}}"#),
        ("POST", "/b/spelt/o/scratch/copyTo/b/spelt/o/ledger", ""),
        ("DELETE", "///storage/v1/b/spelt/o/ledger", ""),
        (
            "PATCH",
            "//./storage/v1/b/spelt/o/ledger",
            r#"{"metadata":{"by":"33"}}"#,
        ),
        (
            "POST",
            "///storage/v1/b/spelt/o/scratch/rewriteTo/b/spelt/o/ledger",
            "",
        ),
    ] {
        let resp = gw.req(method, target, &t33, body.as_bytes());
        let json = resp.assert_gateway_error(409, "stale_token");
        assert_eq!(json["resource"], key, "{method} {target}: {json}");
        assert_eq!(json["highest"], 34, "{method} {target}: {json}");
    }
    assert_eq!(
        emulator.object("spelt", "ledger").as_deref(),
        Some("written by 34")
    );
    let metadata = http(
        emulator.addr,
        "GET",
        "/storage/v1/b/spelt/o/ledger",
        &[],
        b"",
    );
    assert_eq!(metadata.status, 200, "{}", metadata.text());
    assert!(
        metadata.json()["metadata"]["by"].is_null(),
        "{}",
        metadata.text()
    );
    // The current holder writes through the same spelling.
    let t35 = [("X-Fencing-Token", "35")];
    let resp = gw.req("DELETE", "/b/spelt/o/ledger", &t35, b"");
    assert!((200..300).contains(&resp.status), "{}", resp.text());
    assert_eq!(emulator.object("spelt", "ledger"), None);
    assert_eq!(gw.fence(key), Some(35));
}
