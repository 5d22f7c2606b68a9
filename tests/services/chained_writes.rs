//! Chained writes (`--conditional-writes s3`, SPEC "Chained writes")
//! through the real binary in front of moto's S3 server:
//!
//! - the proof: a relay between the gateway and moto holds a stale PUT (or
//!   DELETE) past `--upstream-timeout` and delivers it after the next
//!   holder's write; without the chain the stale bytes win (the residual
//!   window, measured here as a control), with it moto refuses them;
//! - the same across two instances sharing fences through etcd: the late
//!   write of one is refused after the other's write;
//! - Apache mod_dav (`--conditional-writes webdav`, the gateway's own
//!   `HEAD` before each write): the same proof, the relay holding only the
//!   stale `PUT` (the `HEAD`s pass);
//! - the embedded backend (`--conditional-writes http`, RFC 9110
//!   `If-Match`), run as the store of a second gateway process: the same
//!   proof, and one `HEAD` for a holder rewriting an object many times;
//! - the start-up probe: in front of nginx's WebDAV, which ignores
//!   conditions, the gateway refuses to start; in front of Apache it starts;
//! - Azurite through the Azure SDK for Python (`--conditional-writes azure`,
//!   an account SAS): the recipe, a staged block upload, a stale holder, and
//!   a SharedKey-signed write refused `unchainable_write`;
//! - boto3 following docs/CLIENTS.md's recipe (a fenced `HEAD` on 428 or
//!   on a `version_conflict` with `retry: true`);
//! - the steady state: one holder rewriting an object needs one fenced
//!   `HEAD` at first, then nothing more;
//! - the answers: 428 `version_unknown`, 428 `precondition_not_chainable`,
//!   409 `version_conflict` with `retry`, a client's own condition
//!   forwarded untouched, part uploads not chained; and the metrics.

#[path = "../support/mod.rs"]
mod support;

use std::time::Duration;

use support::apache::Apache;
use support::azurite::azurite;
use support::moto::{moto, run_client, S3_AUTH};
use support::*;

/// How long the relay holds a request: past the gateway's
/// `--upstream-timeout` of 1 s.
const HELD: Duration = Duration::from_millis(2500);

fn request(gw: &GatewayProcess, method: &str, target: &str, token: u64, body: &[u8]) -> Resp {
    let token = token.to_string();
    gw.req(
        method,
        target,
        &[("X-Fencing-Token", &token), S3_AUTH],
        body,
    )
}

fn make_bucket(bucket: &str) {
    let made = http(moto().addr, "PUT", &format!("/{bucket}"), &[S3_AUTH], b"");
    assert_eq!(made.status, 200, "CreateBucket at moto: {}", made.text());
}

/// The object's bytes at moto, asked directly (`None`: absent).
fn stored(target: &str) -> Option<String> {
    let got = http(moto().addr, "GET", target, &[S3_AUTH], b"");
    match got.status {
        200 => Some(got.text()),
        404 => None,
        other => panic!("GET {target} at moto: {other} {}", got.text()),
    }
}

/// A gateway in front of moto through a relay, with `mode`.
fn gateway(relay: &Relay, mode: &str) -> GatewayProcess {
    GatewayProcess::start(&[
        "--upstream",
        &relay.url(),
        "--flat-keys",
        "--upstream-timeout",
        "1",
        "--conditional-writes",
        mode,
    ])
}

/// A stale holder's `method` (with token 33) is held by the relay until
/// after the next holder (token 34) wrote `current`; returns what moto
/// holds once the late request had its chance.
fn stale_write_delivered_late(mode: &str, bucket: &str, method: &str) -> Option<String> {
    make_bucket(bucket);
    let relay = Relay::start(moto().addr, Fault::None);
    let gw = gateway(&relay, mode);
    let target = format!("/{bucket}/report");
    let chained = mode != "off";

    // Holder 33 learns the version (a fenced HEAD: absent), writes v33.
    if chained {
        assert_eq!(request(&gw, "HEAD", &target, 33, b"").status, 404);
    }
    let first = request(&gw, "PUT", &target, 33, b"v33");
    assert_eq!(first.status, 200, "{}", first.text());

    // Its next write is held on the way (a pause, a slow network), and the
    // gateway gives up on it.
    relay.set(Fault::DelayRequest(HELD));
    let body: &[u8] = if method == "PUT" { b"stale" } else { b"" };
    let given_up = request(&gw, method, &target, 33, body);
    assert_eq!(given_up.status, 504, "{}", given_up.text());
    relay.set(Fault::None);

    // The next holder writes; with the chain it first learns the version.
    if chained {
        let head = request(&gw, "HEAD", &target, 34, b"");
        assert_eq!(head.status, 200);
    }
    let current = request(&gw, "PUT", &target, 34, b"v34");
    assert_eq!(current.status, 200, "{}", current.text());
    assert_eq!(stored(&target).as_deref(), Some("v34"));

    // The held request reaches moto now.
    std::thread::sleep(HELD + Duration::from_millis(1500));
    stored(&target)
}

#[test]
fn without_the_chain_a_late_stale_put_overwrites_the_next_holder() {
    // The residual window the chain closes: the control for the next test.
    let after = stale_write_delivered_late("off", "window-open-put", "PUT");
    assert_eq!(after.as_deref(), Some("stale"));
}

#[test]
fn with_the_chain_a_late_stale_put_is_refused_by_the_store() {
    let after = stale_write_delivered_late("s3", "window-closed-put", "PUT");
    assert_eq!(after.as_deref(), Some("v34"));
}

#[test]
fn without_the_chain_a_late_stale_delete_removes_the_next_holders_object() {
    let after = stale_write_delivered_late("off", "window-open-delete", "DELETE");
    assert_eq!(after, None);
}

#[test]
fn with_the_chain_a_late_stale_delete_is_refused_by_the_store() {
    let after = stale_write_delivered_late("s3", "window-closed-delete", "DELETE");
    assert_eq!(after.as_deref(), Some("v34"));
}

#[test]
fn the_steady_state_needs_one_head_and_the_answers_say_what_to_do() {
    let bucket = "chain-answers";
    make_bucket(bucket);
    let gw = GatewayProcess::start(&[
        "--upstream",
        &moto().url(),
        "--flat-keys",
        "--conditional-writes",
        "s3",
    ]);
    let target = format!("/{bucket}/obj");

    // Unknown version: 428, nothing forwarded.
    let unknown = request(&gw, "PUT", &target, 40, b"a");
    assert_eq!(unknown.status, 428, "{}", unknown.text());
    let body = unknown.json();
    assert_eq!(body["error"], "version_unknown");
    assert_eq!(body["resource"], target.as_str());
    assert_eq!(body["object"], target.as_str());
    assert_eq!(stored(&target), None);

    // A fenced HEAD teaches it; then one holder rewrites without asking.
    assert_eq!(request(&gw, "HEAD", &target, 40, b"").status, 404);
    for (n, bytes) in ["a", "b", "c"].iter().enumerate() {
        let put = request(&gw, "PUT", &target, 40, bytes.as_bytes());
        assert_eq!(put.status, 200, "write {n}: {}", put.text());
    }
    assert_eq!(stored(&target).as_deref(), Some("c"));

    // Someone writes behind the gateway's back: the next chained write is
    // refused by moto and answered version_conflict, retry true (no higher
    // token was admitted).
    let behind = http(moto().addr, "PUT", &target, &[S3_AUTH], b"behind");
    assert_eq!(behind.status, 200);
    let conflict = request(&gw, "PUT", &target, 40, b"d");
    assert_eq!(conflict.status, 409, "{}", conflict.text());
    let body = conflict.json();
    assert_eq!(body["error"], "version_conflict");
    assert_eq!(body["token"], 40);
    assert_eq!(body["retry"], true);
    assert_eq!(stored(&target).as_deref(), Some("behind"));
    // The version is unknown again; a HEAD, and the retry goes through.
    assert_eq!(request(&gw, "PUT", &target, 40, b"d").status, 428);
    assert_eq!(request(&gw, "HEAD", &target, 40, b"").status, 200);
    assert_eq!(request(&gw, "PUT", &target, 40, b"d").status, 200);

    // A delete, then a create on the absent object.
    assert_eq!(request(&gw, "DELETE", &target, 41, b"").status, 204);
    assert_eq!(stored(&target), None);
    assert_eq!(request(&gw, "PUT", &target, 41, b"e").status, 200);
    assert_eq!(stored(&target).as_deref(), Some("e"));

    // The client's own condition is the chain, forwarded untouched: a
    // wrong tag gets moto's own 412.
    let own = gw.req(
        "PUT",
        &target,
        &[("X-Fencing-Token", "41"), S3_AUTH, ("If-Match", "\"0000\"")],
        b"f",
    );
    assert_eq!(own.status, 412, "{}", own.text());
    // One that names no version is refused before anything is raised.
    let star = gw.req(
        "PUT",
        &target,
        &[("X-Fencing-Token", "99"), S3_AUTH, ("If-Match", "*")],
        b"f",
    );
    assert_eq!(star.status, 428, "{}", star.text());
    assert_eq!(star.json()["error"], "precondition_not_chainable");
    assert_eq!(gw.fence(&target), Some(41));

    // Parts are not the object: fenced, not chained.
    let parts = format!("{target}?partNumber=1&uploadId=nope");
    let part = request(&gw, "PUT", &parts, 41, b"p");
    assert_ne!(part.status, 428, "{}", part.text());

    let metrics = gw.metrics();
    for line in [
        "fencegate_chain_observations_total{source=\"client_read\"} 2",
        "fencegate_chain_conflicts_total{retry=\"true\"} 1",
        "fencegate_chain_unknown_total 2",
        "fencegate_requests_total{outcome=\"version_conflict\"} 1",
        "fencegate_requests_total{outcome=\"version_unknown\"} 2",
        "fencegate_requests_total{outcome=\"precondition_not_chainable\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in:\n{metrics}");
    }
}

#[test]
fn with_shared_fences_a_late_stale_put_from_one_instance_is_refused_after_another_wrote() {
    let bucket = "shared-window";
    make_bucket(bucket);
    let etcd = EtcdCluster::start(1);
    let endpoints = etcd.endpoints();
    let relay = Relay::start(moto().addr, Fault::None);
    let shared = |upstream: &str, name: &str| {
        GatewayProcess::start(&[
            "--upstream",
            upstream,
            "--flat-keys",
            "--upstream-timeout",
            "1",
            "--conditional-writes",
            "s3",
            "--state",
            "etcd",
            "--etcd-endpoints",
            &endpoints,
            "--etcd-prefix",
            "/chained/",
            "--instance-name",
            name,
        ])
    };
    let a = shared(&relay.url(), "a");
    let b = shared(&moto().url(), "b");
    let target = format!("/{bucket}/report");

    // A learns the version (absent; confirmed by a read of etcd), writes.
    assert_eq!(request(&a, "HEAD", &target, 33, b"").status, 404);
    assert_eq!(request(&a, "PUT", &target, 33, b"v33").status, 200);
    // A's next write is held on the way, and A gives up on it.
    relay.set(Fault::DelayRequest(HELD));
    assert_eq!(request(&a, "PUT", &target, 33, b"stale").status, 504);
    relay.set(Fault::None);
    // B, the next holder, learns the version and writes.
    assert_eq!(request(&b, "HEAD", &target, 34, b"").status, 200);
    let current = request(&b, "PUT", &target, 34, b"v34");
    assert_eq!(current.status, 200, "{}", current.text());
    // A's held write reaches moto now, chained to v33's version: refused.
    std::thread::sleep(HELD + Duration::from_millis(1500));
    assert_eq!(stored(&target).as_deref(), Some("v34"));
    // A's stale holder, back: refused by the fence (B's 34 is in etcd).
    assert_eq!(request(&a, "PUT", &target, 33, b"again").status, 409);
    // Each instance read etcd once, for the first write after its HEAD;
    // A's second write carried the version its first returned (rule (a)).
    for gateway in [&a, &b] {
        let metrics = gateway.metrics();
        for series in [
            "fencegate_shared_highest_reads_total",
            "fencegate_shared_highest_read_transactions_total",
        ] {
            assert_eq!(
                metric(&metrics, series),
                Some(1.0),
                "{series} in:\n{metrics}"
            );
        }
    }
}

/// WebDAV on Apache: a stale holder's `PUT` is held by the relay until
/// after the next holder's write; returns what Apache holds once the late
/// request had its chance.
fn stale_dav_put_delivered_late(mode: &str, name: &str) -> Option<String> {
    let apache = Apache::shared();
    let collection = format!("/dav/{name}");
    apache.mkcol(&collection);
    let relay = Relay::start(apache.addr(), Fault::None);
    let gw = GatewayProcess::start(&[
        "--upstream",
        &relay.url(),
        "--upstream-timeout",
        "1",
        "--conditional-writes",
        mode,
    ]);
    let target = format!("{collection}/report");
    let put = |token: u64, body: &[u8]| {
        gw.req(
            "PUT",
            &target,
            &[("X-Fencing-Token", &token.to_string())],
            body,
        )
    };
    let first = put(33, b"v33");
    assert_eq!(first.status, 201, "{}", first.text());
    relay.set(Fault::DelayMethod("PUT", HELD));
    let given_up = put(33, b"stale");
    assert_eq!(given_up.status, 504, "{}", given_up.text());
    relay.set(Fault::None);
    let current = put(34, b"v34");
    assert_eq!(current.status, 204, "{}", current.text());
    std::thread::sleep(HELD + Duration::from_millis(1500));
    apache
        .read(&target)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

#[test]
fn on_webdav_without_the_chain_a_late_stale_put_overwrites_the_next_holder() {
    let after = stale_dav_put_delivered_late("off", "chain-open");
    assert_eq!(after.as_deref(), Some("stale"));
}

#[test]
fn on_webdav_with_the_chain_a_late_stale_put_is_refused_by_apache() {
    let after = stale_dav_put_delivered_late("webdav", "chain-closed");
    assert_eq!(after.as_deref(), Some("v34"));
}

#[test]
fn on_webdav_the_gateway_learns_versions_itself_and_answers_conflicts() {
    let apache = Apache::shared();
    let collection = "/dav/chain-answers";
    apache.mkcol(collection);
    let gw = GatewayProcess::start(&[
        "--upstream",
        &apache.url(),
        "--store",
        "webdav",
        "--conditional-writes",
        "on",
    ]);
    let target = format!("{collection}/doc");
    let req = |method: &str, token: u64, body: &[u8]| {
        gw.req(
            method,
            &target,
            &[("X-Fencing-Token", &token.to_string())],
            body,
        )
    };
    // No HEAD from the client: the gateway sends its own.
    assert_eq!(req("PUT", 40, b"a").status, 201);
    assert_eq!(req("PUT", 40, b"b").status, 204);
    // A write behind the gateway's back between the gateway's HEAD and
    // its PUT cannot be staged here; one before the HEAD is simply seen.
    let behind = http(apache.addr(), "PUT", &target, &[], b"behind");
    assert_eq!(behind.status, 204);
    assert_eq!(req("PUT", 40, b"c").status, 204);
    assert_eq!(apache.read(&target).as_deref(), Some(&b"c"[..]));
    // A delete, then a create.
    assert_eq!(req("DELETE", 41, b"").status, 204);
    assert_eq!(apache.read(&target), None);
    assert_eq!(req("PUT", 41, b"d").status, 201);
    // A collection: Apache answers a HEAD of it 404, its PROPFIND names the
    // version its DELETE's If list needs; the gateway reads that.
    let sub = format!("{collection}/sub");
    apache.mkcol(&sub);
    let gone = gw.req("DELETE", &sub, &[("X-Fencing-Token", "41")], b"");
    assert_eq!(gone.status, 204, "{}", gone.text());
    assert!(!apache.exists(&sub));
    // A client's own WebDAV If header (lock tokens) cannot be combined yet.
    let locked = gw.req(
        "PUT",
        &target,
        &[("X-Fencing-Token", "41"), ("If", "(<opaquelocktoken:x>)")],
        b"e",
    );
    assert_eq!(locked.status, 428, "{}", locked.text());
    assert_eq!(locked.json()["error"], "precondition_not_chainable");
    // A read before each write but the create after the delete (absent,
    // learned from the delete's own answer): a, b, c, the delete and the
    // collection's delete.
    let metrics = gw.metrics();
    assert!(
        metrics.contains("fencegate_chain_observations_total{source=\"gateway_head\"} 5"),
        "{metrics}"
    );
}

#[test]
fn webdav_chaining_under_an_upstream_base_path_is_refused_at_start() {
    let output = std::process::Command::new(support::BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--state",
            "memory",
            "--upstream",
            "http://127.0.0.1:1/base",
            "--conditional-writes",
            "webdav",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("webdav needs an upstream without a base path"),
        "{stderr}"
    );
}

/// nginx serving WebDAV (`dav_methods PUT DELETE`) from a temporary
/// directory: it ignores every precondition. Stopped on drop.
struct NginxDav {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl NginxDav {
    fn start() -> NginxDav {
        let dir = tempfile::tempdir().unwrap();
        let port = dead_port();
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let conf = format!(
            "daemon off;\nmaster_process off;\nerror_log {dir}/error.log;\npid {dir}/nginx.pid;\n\
             events {{ worker_connections 64; }}\n\
             http {{ access_log off; client_body_temp_path {dir}/body;\n\
               server {{ listen 127.0.0.1:{port}; root {root};\n\
                 location / {{ dav_methods PUT DELETE; create_full_put_path on; }} }} }}\n",
            dir = dir.path().display(),
            root = root.display(),
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = std::process::Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nginx (scripts/install-deps.sh installs it)");
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        assert!(
            wait_until(HANG_GUARD, || std::net::TcpStream::connect(addr).is_ok()),
            "nginx did not listen on {port}"
        );
        NginxDav {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for NginxDav {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The gateway's exit status and stderr, started with `args`, if it exits
/// within the hang guard (`None`: it started and was killed).
fn start_or_exit(args: &[&str]) -> Option<(bool, String)> {
    let mut child = std::process::Command::new(support::BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--state",
            "memory",
        ])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let exited = wait_until(Duration::from_secs(5), || {
        child.try_wait().unwrap().is_some()
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    let output = child.wait_with_output().unwrap();
    Some((
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[test]
fn in_front_of_a_store_that_ignores_conditions_the_gateway_refuses_to_start() {
    let nginx = NginxDav::start();
    let url = format!("http://127.0.0.1:{}", nginx.port);
    let (ok, stderr) = start_or_exit(&["--upstream", &url, "--conditional-writes", "webdav"])
        .expect("the gateway started in front of nginx's WebDAV");
    assert!(!ok);
    // One line (besides --state memory's warning), no backtrace.
    let errors: Vec<&str> = stderr.lines().filter(|l| !l.contains(" WARN ")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains("ignores conditions"), "{stderr}");
    // Without the chain, nginx is a store like any other.
    assert!(start_or_exit(&["--upstream", &url]).is_none());
    // Apache checks them: the gateway starts (and leaves no probe object).
    let apache = Apache::shared();
    apache.mkcol("/dav/chain-probe");
    let args = [
        "--upstream",
        &apache.url(),
        "--conditional-writes",
        "webdav",
        "--conditional-probe",
        "/dav/chain-probe/p",
    ];
    assert!(
        start_or_exit(&args).is_none(),
        "refused to start in front of Apache"
    );
    assert!(!apache.exists("/dav/chain-probe/p"));
}

/// A fencegate process used as a plain store: its embedded backend (ETags,
/// RFC 9110 conditions), its fencing out of the way (another token header,
/// unfenced writes allowed).
fn embedded_store() -> GatewayProcess {
    GatewayProcess::start(&[
        "--state",
        "memory",
        "--token-header",
        "x-unused-token",
        "--allow-unfenced-writes",
    ])
}

fn stale_put_to_the_embedded_store_delivered_late(mode: &str) -> Option<String> {
    let store = embedded_store();
    let relay = Relay::start(store.data_addr(), Fault::None);
    let gw = GatewayProcess::start(&[
        "--upstream",
        &relay.url(),
        "--upstream-timeout",
        "1",
        "--conditional-writes",
        mode,
    ]);
    let put = |token: u64, body: &[u8]| {
        gw.req(
            "PUT",
            "/doc",
            &[("X-Fencing-Token", &token.to_string())],
            body,
        )
    };
    assert_eq!(put(33, b"v33").status, 204);
    relay.set(Fault::DelayMethod("PUT", HELD));
    assert_eq!(put(33, b"stale").status, 504);
    relay.set(Fault::None);
    let current = put(34, b"v34");
    assert_eq!(current.status, 204, "{}", current.text());
    std::thread::sleep(HELD + Duration::from_millis(1500));
    let got = store.req("GET", "/doc", &[], b"");
    (got.status == 200).then(|| got.text())
}

#[test]
fn on_the_embedded_backend_without_the_chain_a_late_stale_put_overwrites_the_next_holder() {
    let after = stale_put_to_the_embedded_store_delivered_late("off");
    assert_eq!(after.as_deref(), Some("stale"));
}

#[test]
fn on_the_embedded_backend_with_the_chain_a_late_stale_put_is_refused() {
    let after = stale_put_to_the_embedded_store_delivered_late("http");
    assert_eq!(after.as_deref(), Some("v34"));
}

#[test]
fn a_holder_rewriting_an_object_pays_one_head_in_all() {
    let store = embedded_store();
    let gw = GatewayProcess::start(&[
        "--upstream",
        &store.data_url(),
        "--conditional-writes",
        "http",
    ]);
    for n in 0..20 {
        let put = gw.req(
            "PUT",
            "/steady",
            &[("X-Fencing-Token", "7")],
            format!("v{n}").as_bytes(),
        );
        assert_eq!(put.status, 204, "write {n}: {}", put.text());
    }
    // A write behind the gateway's back: the next chained write is refused
    // by the store, and the gateway says so (retry: no higher token).
    let behind = store.req("PUT", "/steady", &[], b"behind");
    assert_eq!(behind.status, 204);
    let conflict = gw.req("PUT", "/steady", &[("X-Fencing-Token", "7")], b"late");
    assert_eq!(conflict.status, 409, "{}", conflict.text());
    assert_eq!(conflict.json()["retry"], true);
    // The version is unknown again: the gateway's HEAD, and it goes through.
    assert_eq!(
        gw.req("PUT", "/steady", &[("X-Fencing-Token", "7")], b"again")
            .status,
        204
    );
    let metrics = gw.metrics();
    for line in [
        "fencegate_chain_observations_total{source=\"gateway_head\"} 2",
        "fencegate_chain_conflicts_total{retry=\"true\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in:\n{metrics}");
    }
    assert_eq!(store.req("GET", "/steady", &[], b"").text(), "again");
}

#[test]
fn boto3_following_the_recipe_writes_through_the_chain() {
    let gw = GatewayProcess::start(&[
        "--upstream",
        &moto().url(),
        "--flat-keys",
        "--conditional-writes",
        "s3",
    ]);
    let url = moto().url();
    let args = [gw.data_url(), url, "chain-boto3".to_owned()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = run_client("boto3_chained.py", &args, || gw.stderr());
    for step in [
        "first",
        "write_2",
        "write_3",
        "write_4",
        "write_5",
        "after_behind",
    ] {
        assert_eq!(result[step], true, "{step}: {result}");
    }
    // One 428 before the first write, one conflict after the write behind
    // the gateway's back, and no HEAD in between.
    assert_eq!(
        result["log"],
        serde_json::json!([
            "version_unknown",
            "put",
            "put",
            "put",
            "put",
            "put",
            "version_conflict",
            "put"
        ]),
        "{result}"
    );
    assert_eq!(result["stored"], "v6", "{result}");
}

#[test]
fn the_azure_sdk_writes_through_the_chain_to_azurite() {
    let azurite = format!("http://{}", azurite());
    let gw = GatewayProcess::start(&[
        "--upstream",
        &azurite,
        "--flat-keys",
        "--conditional-writes",
        "azure",
    ]);
    let data_url = gw.data_url();
    let args = [data_url.as_str(), azurite.as_str(), "chain-azure"];
    let result = run_client("azure_chained.py", &args, || gw.stderr());
    for step in [
        "first",
        "write_2",
        "write_3",
        "write_4",
        "after_behind",
        "blocks",
        "next_holder",
    ] {
        assert_eq!(result[step], true, "{step}: {result}");
    }
    assert_eq!(result["stale"], false, "{result}");
    assert_eq!(result["shared_key"], "unchainable_write", "{result}");
    assert_eq!(result["stored"], "v41", "{result}");
    let log = result["log"].as_array().unwrap();
    assert_eq!(log[0], "version_unknown", "{result}");
    assert!(
        log.contains(&serde_json::json!("version_conflict")),
        "{result}"
    );
    assert!(log.contains(&serde_json::json!("stale_token")), "{result}");
}

/// An account SAS for Azurite, with `container` made there.
fn azurite_sas(container: &str) -> String {
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients/azure_chained.py");
    let out = std::process::Command::new(support::moto::venv().join("bin/python"))
        .arg(script)
        .arg("sas")
        .arg(format!("http://{}", azurite()))
        .arg(container)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn stale_blob_put_delivered_late(mode: &str, container: &str) -> Option<String> {
    let sas = azurite_sas(container);
    let relay = Relay::start(azurite(), Fault::None);
    let gw = GatewayProcess::start(&[
        "--upstream",
        &relay.url(),
        "--flat-keys",
        "--upstream-timeout",
        "1",
        "--conditional-writes",
        mode,
    ]);
    let blob = format!("/devstoreaccount1/{container}/report?{sas}");
    let call = |method: &str, token: u64, body: &[u8]| {
        gw.req(
            method,
            &blob,
            &[
                ("X-Fencing-Token", &token.to_string()),
                ("x-ms-blob-type", "BlockBlob"),
                ("x-ms-version", "2021-12-02"),
            ],
            body,
        )
    };
    if mode != "off" {
        assert_eq!(call("HEAD", 33, b"").status, 404);
    }
    let first = call("PUT", 33, b"v33");
    assert_eq!(first.status, 201, "{}", first.text());
    relay.set(Fault::DelayMethod("PUT", HELD));
    assert_eq!(call("PUT", 33, b"stale").status, 504);
    relay.set(Fault::None);
    if mode != "off" {
        assert_eq!(call("HEAD", 34, b"").status, 200);
    }
    let current = call("PUT", 34, b"v34");
    assert_eq!(current.status, 201, "{}", current.text());
    std::thread::sleep(HELD + Duration::from_millis(1500));
    let got = http(
        azurite(),
        "GET",
        &blob,
        &[("x-ms-version", "2021-12-02")],
        b"",
    );
    (got.status == 200).then(|| got.text())
}

#[test]
fn on_azurite_without_the_chain_a_late_stale_put_overwrites_the_next_holder() {
    let after = stale_blob_put_delivered_late("off", "window-open");
    assert_eq!(after.as_deref(), Some("stale"));
}

#[test]
fn on_azurite_with_the_chain_a_late_stale_put_is_refused() {
    let after = stale_blob_put_delivered_late("azure", "window-closed");
    assert_eq!(after.as_deref(), Some("v34"));
}

/// Issue 33, defects 1 and 3, in a versioned bucket: a write the chain did
/// not make (a `DELETE ?versionId=` of the current version) makes the
/// object's version unknown, so the holder's next `PUT` goes through
/// instead of a 409 for a write nothing raced; and a copy whose own
/// source condition fails gets the store's 412, not `version_conflict`.
#[test]
fn writes_the_chain_did_not_make_forget_the_version_and_own_conditions_answer_as_the_store() {
    let bucket = "chain-versioned";
    make_bucket(bucket);
    let versioning = http(
        moto().addr,
        "PUT",
        &format!("/{bucket}?versioning"),
        &[S3_AUTH],
        b"<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>",
    );
    assert_eq!(versioning.status, 200, "{}", versioning.text());
    let gw = GatewayProcess::start(&[
        "--upstream",
        &moto().url(),
        "--store",
        "s3",
        "--conditional-writes",
        "on",
        "--chain-observe",
        "gateway-head",
    ]);
    let target = format!("/{bucket}/report");
    assert_eq!(request(&gw, "PUT", &target, 5, b"v1").status, 200);
    let second = request(&gw, "PUT", &target, 5, b"v2");
    assert_eq!(second.status, 200, "{}", second.text());
    let version = second
        .header("x-amz-version-id")
        .expect("a version id")
        .to_owned();
    // Deleting the current version by id: fenced, not chained.
    let deleted = request(
        &gw,
        "DELETE",
        &format!("{target}?versionId={version}"),
        5,
        b"",
    );
    assert_eq!(deleted.status, 204, "{}", deleted.text());
    // The cached version (v2's) is gone with it: the next PUT learns v1's.
    let third = request(&gw, "PUT", &target, 5, b"v3");
    assert_eq!(third.status, 200, "{}", third.text());
    assert_eq!(stored(&target).as_deref(), Some("v3"));

    // Deleting it twice: two delete markers, as S3 does directly (the
    // second delete's object is absent behind a marker: it goes on without
    // a condition, which no marker could meet).
    let markers = |key: &str| {
        let listing = http(
            moto().addr,
            "GET",
            &format!("/{bucket}?versions&prefix={key}"),
            &[S3_AUTH],
            b"",
        );
        listing.text().matches("<DeleteMarker>").count()
    };
    let marker_key = format!("/{bucket}/marked");
    assert_eq!(request(&gw, "PUT", &marker_key, 5, b"m").status, 200);
    for expected in 1..=2 {
        let deleted = request(&gw, "DELETE", &marker_key, 5, b"");
        assert_eq!(deleted.status, 204, "{}", deleted.text());
        assert_eq!(markers("marked"), expected);
    }

    // A copy whose source condition fails: S3's 412, unchanged.
    let source_tag = request(&gw, "HEAD", &target, 5, b"")
        .header("etag")
        .unwrap()
        .to_owned();
    let copy = gw.req(
        "PUT",
        &format!("/{bucket}/copy"),
        &[
            ("X-Fencing-Token", "5"),
            S3_AUTH,
            ("x-amz-copy-source", &format!("/{bucket}/report")),
            ("x-amz-copy-source-if-none-match", &source_tag),
        ],
        b"",
    );
    assert_eq!(copy.status, 412, "{}", copy.text());
    assert!(!copy.text().contains("version_conflict"), "{}", copy.text());
}

/// Issue 33, defect 4: several writes of one object at once under one
/// token conflict by design (the chain serialises an object's writers);
/// every such 409 says `retry: true`, and a retry goes through.
#[test]
fn concurrent_writes_of_one_object_under_one_token_conflict_with_retry_true() {
    let bucket = "chain-concurrent";
    make_bucket(bucket);
    let gw = GatewayProcess::start(&[
        "--upstream",
        &moto().url(),
        "--flat-keys",
        "--conditional-writes",
        "s3",
        "--chain-observe",
        "gateway-head",
    ]);
    let target = format!("/{bucket}/report");
    assert_eq!(request(&gw, "PUT", &target, 5, b"v0").status, 200);
    let answers: Vec<(u16, serde_json::Value)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..5)
            .map(|i| {
                let gw = &gw;
                let target = &target;
                scope.spawn(move || {
                    let body = format!("writer {i}");
                    let resp = request(gw, "PUT", target, 5, body.as_bytes());
                    let json = serde_json::from_str(&resp.text()).unwrap_or_default();
                    (resp.status, json)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        answers.iter().any(|(status, _)| *status == 200),
        "{answers:?}"
    );
    for (status, json) in &answers {
        match status {
            200 => {}
            409 => {
                assert_eq!(json["error"], "version_conflict", "{json}");
                assert_eq!(json["retry"], true, "{json}");
            }
            other => panic!("{other}: {json}"),
        }
    }
    // A retry of each conflicted write goes through (bounded: others may
    // still be retrying at the same moment).
    let conflicts = answers.iter().filter(|(status, _)| *status == 409).count();
    for i in 0..conflicts {
        let body = format!("retry {i}");
        let went = (0..10).any(|_| request(&gw, "PUT", &target, 5, body.as_bytes()).status == 200);
        assert!(went, "retry {i} never went through");
    }
}
