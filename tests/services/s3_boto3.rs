//! A real S3 client through the gateway to an S3 implementation served over
//! TLS: boto3 (SigV4) talking to moto's server (`moto_server --ssl-cert`)
//! behind `--upstream https://localhost:PORT`, with a certificate from a test
//! CA. Once with the gateway as the S3 endpoint, once with the gateway as
//! the client's HTTP proxy for `http://s3.us-east-1.amazonaws.com` (absolute
//! form, Host = the real endpoint). Both times a stale write is refused, a
//! threaded multipart `upload_file` carries the token on every part with a
//! holder object, and loses it on the worker threads with a contextvar.
//!
//! Needs the Python environment that `scripts/install-deps.sh` makes
//! (`target/venv`, or `FENCEGATE_VENV`); missing, the test fails and says so.

#[path = "../support/mod.rs"]
mod support;

use support::moto::{spawn_moto_server, venv};

use std::path::PathBuf;
use std::process::{Child, Command};

use support::tls::TestCa;
use support::GatewayProcess;

/// moto's server, killed on drop.
struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_moto(ca: &TestCa) -> (Moto, u16) {
    let leaf = ca.issue("moto", &["localhost", "127.0.0.1"]);
    let (child, port) = spawn_moto_server(&[
        "-s".as_ref(),
        "-c".as_ref(),
        leaf.cert.as_os_str(),
        "-k".as_ref(),
        leaf.key.as_os_str(),
    ]);
    (Moto(child), port)
}

/// moto over TLS with a certificate of a CA made for the test, and the
/// gateway in front of it trusting that CA, with `extra` options.
fn gateway_to_moto(ca_name: &str, extra: &[&str]) -> (Moto, GatewayProcess) {
    let ca = TestCa::new(ca_name);
    let (moto, port) = start_moto(&ca);
    let upstream = format!("https://localhost:{port}");
    let ca_file = ca.cert_path().display().to_string();
    let mut args = vec![
        "--upstream",
        &upstream,
        "--upstream-ca",
        &ca_file,
        "--upstream-timeout",
        "20",
        // The S3 dialect without custody: every write the SDK sends must
        // be a row of the operation table (docs/S3_OPERATIONS.md).
        "--store",
        "s3",
        // The proxy modes send AWS's own host names: the gateway reads a
        // bucket out of them only under the store's domain.
        "--s3-domain",
        "s3.us-east-1.amazonaws.com",
    ];
    args.extend_from_slice(extra);
    (moto, GatewayProcess::start(&args))
}

fn run_client(gateway: &GatewayProcess, mode: &str) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients/boto3_fenced.py");
    let out = Command::new(venv().join("bin/python"))
        .arg(script)
        .arg(gateway.data_url())
        .arg(mode)
        // The proxy mode must reach the gateway, not an environment's proxy.
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "boto3 client ({mode}) failed: {stdout}\n{}\ngateway stderr:\n{}",
        String::from_utf8_lossy(&out.stderr),
        gateway.stderr()
    );
    serde_json::from_str(stdout.trim()).unwrap()
}

#[test]
fn boto3_through_the_gateway_to_s3_over_tls_with_a_stale_write_refused() {
    let (_moto, gw) = gateway_to_moto("s3", &[]);
    for mode in ["endpoint", "proxy"] {
        let result = run_client(&gw, mode);
        assert_eq!(result["stale_write"], 409, "{result}");
        assert_eq!(result["stored"], "written by client 2", "{result}");
        let key = format!("/fenced-{mode}/report.csv");
        assert_eq!(gw.fence(&key), Some(34), "{mode}");
        // docs/CLIENTS.md's boto3 recipe: a holder object reaches the
        // threads of a multipart upload_file, a contextvar does not (its
        // calls go out without a token and get 428 missing_token, which
        // botocore reads from the gateway's S3 error document).
        assert_eq!(result["multipart_holder"], "ok", "{result}");
        let by_context = result["multipart_contextvar"].as_str().unwrap_or_default();
        assert!(by_context.contains("(missing_token)"), "{result}");
        assert_eq!(
            gw.fence(&format!("/fenced-{mode}/big-holder.bin")),
            Some(34)
        );
    }
    let metrics = gw.metrics();
    assert!(
        support::outcome(&metrics, "stale_token") >= 2.0,
        "{metrics}"
    );
}

/// The AWS SDKs' default addressing, virtual-hosted style
/// (`bucket.s3.region.amazonaws.com/key`), with the gateway as boto3's HTTP
/// proxy, `--s3-domain` the region's endpoint and `--scope host+path`: each
/// bucket has its own fences, so a lower token of another bucket's lock on
/// the same key is no stale write.
#[test]
fn boto3_in_virtual_hosted_style_fences_per_bucket() {
    let (_moto, gw) = gateway_to_moto("s3-virtual", &["--scope", "host+path", "--flat-keys"]);
    let result = run_client(&gw, "virtual");
    assert_eq!(result["stale_write"], 409, "{result}");
    assert_eq!(result["stored"], "written by client 2", "{result}");
    assert_eq!(result["other_bucket"], "accepted", "{result}");
    assert_eq!(result["multipart_holder"], "ok", "{result}");
    // One key per object: the virtual-hosted bucket read path-style, under
    // the domain (the host scope keys on it, never on the bucket's host).
    let host = "s3.us-east-1.amazonaws.com";
    assert_eq!(
        gw.fence(&format!("{host}/fenced-virtual/report.csv")),
        Some(34)
    );
    assert_eq!(
        gw.fence(&format!("{host}/fenced-virtual/big-holder.bin")),
        Some(34)
    );
    assert_eq!(
        gw.fence(&format!("{host}/fenced-virtual-b/report.csv")),
        Some(5)
    );
    assert_eq!(
        gw.fence("fenced-virtual.s3.us-east-1.amazonaws.com/report.csv"),
        None
    );
}

/// rclone (`scripts/install-deps.sh` installs it) with its S3 backend, the
/// gateway as endpoint. Runs `rclone ARGS...` with the remote `gw:` and
/// returns whether it exited 0, and its stdout and stderr.
fn rclone(gateway: &GatewayProcess, args: &[&str]) -> (bool, String) {
    let out = Command::new("rclone")
        .args(args)
        // No retries: a refusal is an answer, not a glitch.
        .args(["--retries", "1", "--low-level-retries", "1", "-q"])
        .env("RCLONE_CONFIG", "/dev/null")
        .env("RCLONE_CONFIG_GW_TYPE", "s3")
        .env("RCLONE_CONFIG_GW_PROVIDER", "Other")
        .env("RCLONE_CONFIG_GW_ENDPOINT", gateway.data_url())
        .env("RCLONE_CONFIG_GW_ACCESS_KEY_ID", "testing")
        .env("RCLONE_CONFIG_GW_SECRET_ACCESS_KEY", "testing")
        .env("RCLONE_CONFIG_GW_REGION", "us-east-1")
        .env("RCLONE_CONFIG_GW_FORCE_PATH_STYLE", "true")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        // The AWS SDK inside rclone loads this bundle for its own transport,
        // which rclone replaces, and fails; the gateway is plain HTTP here.
        .env_remove("AWS_CA_BUNDLE")
        .output()
        .unwrap_or_else(|e| panic!("rclone: {e} (run scripts/install-deps.sh)"));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// docs/CLIENTS.md's rclone recipe: `--header` fences every request,
/// `--header-upload` only uploads, so a delete goes out without a token
/// (refused with 428 here, unfenced where writes without a token pass).
#[test]
fn rclone_header_fences_deletes_and_header_upload_does_not() {
    let ca = TestCa::new("s3");
    let (_moto, port) = start_moto(&ca);
    let upstream = format!("https://localhost:{port}");
    let ca_file = ca.cert_path().display().to_string();
    let gw = GatewayProcess::start(&[
        "--upstream",
        &upstream,
        "--upstream-ca",
        &ca_file,
        "--store",
        "s3",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.csv");
    std::fs::write(&file, "written by client 2").unwrap();
    let file = file.to_str().unwrap();
    let token = |t: u64| format!("X-Fencing-Token: {t}");

    let (ok, err) = rclone(&gw, &["mkdir", "gw:rcl", "--header", &token(1)]);
    assert!(ok, "{err}");
    let (ok, err) = rclone(
        &gw,
        &["copyto", file, "gw:rcl/report.csv", "--header", &token(34)],
    );
    assert!(ok, "{err}\n{}", gw.stderr());
    assert_eq!(gw.fence("/rcl/report.csv"), Some(34));
    // A paused holder's token: refused.
    std::fs::write(dir.path().join("report.csv"), "written by client 1").unwrap();
    let (ok, _) = rclone(
        &gw,
        &["copyto", file, "gw:rcl/report.csv", "--header", &token(33)],
    );
    assert!(!ok, "a stale upload must fail");
    // --header-upload leaves the delete without a token.
    let (ok, err) = rclone(
        &gw,
        &[
            "deletefile",
            "gw:rcl/report.csv",
            "--header-upload",
            &token(34),
        ],
    );
    assert!(!ok, "the delete went out unfenced and was refused: {err}");
    let (_, listing) = rclone(&gw, &["lsf", "gw:rcl"]);
    assert!(listing.contains("report.csv"), "still there: {listing}");
    let metrics = gw.metrics();
    assert!(
        support::outcome(&metrics, "missing_token") >= 1.0,
        "{metrics}"
    );
    let (ok, err) = rclone(
        &gw,
        &["deletefile", "gw:rcl/report.csv", "--header", &token(34)],
    );
    assert!(ok, "{err}");
    let (ok, listing) = rclone(&gw, &["lsf", "gw:rcl"]);
    assert!(ok && !listing.contains("report.csv"), "{listing}");
}
