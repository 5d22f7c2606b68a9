//! A real S3 client through the gateway to an S3 implementation served over
//! TLS: boto3 (SigV4) talking to moto's server (`moto_server --ssl-cert`)
//! behind `--upstream https://localhost:PORT`, with a certificate from a test
//! CA. Once with the gateway as the S3 endpoint, once with the gateway as
//! the client's HTTP proxy for `http://s3.us-east-1.amazonaws.com` (absolute
//! form, Host = the real endpoint). Both times a stale write is refused.
//!
//! Needs the Python environment that `scripts/install-deps.sh` makes
//! (`target/venv`, or `FENCEGATE_VENV`); missing, the test fails and says so.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use support::tls::TestCa;
use support::{dead_port, wait_until, Gateway, HANG_GUARD};

fn venv() -> PathBuf {
    std::env::var_os("FENCEGATE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venv"))
}

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
    let bin = venv().join("bin/moto_server");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/install-deps.sh (it makes the Python environment)",
        bin.display()
    );
    let port = dead_port();
    let child = Command::new(&bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string(), "-s", "-c"])
        .arg(&leaf.cert)
        .arg("-k")
        .arg(&leaf.key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let moto = Moto(child);
    assert!(
        wait_until(HANG_GUARD, || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok()),
        "moto_server did not listen on {port}"
    );
    (moto, port)
}

fn run_client(gateway: &Gateway, mode: &str) -> serde_json::Value {
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
    let ca = TestCa::new("s3");
    let (_moto, port) = start_moto(&ca);
    let upstream = format!("https://localhost:{port}");
    let ca_file = ca.cert_path().display().to_string();
    let gw = Gateway::start(&[
        "--upstream",
        &upstream,
        "--upstream-ca",
        &ca_file,
        "--upstream-timeout",
        "20",
    ]);
    for mode in ["endpoint", "proxy"] {
        let result = run_client(&gw, mode);
        assert_eq!(result["stale_write"], 409, "{result}");
        assert_eq!(result["stored"], "written by client 2", "{result}");
        let key = format!("/fenced-{mode}/report.csv");
        assert_eq!(gw.fence(&key), Some(34), "{mode}");
    }
    let metrics = gw.metrics();
    assert!(
        support::outcome(&metrics, "stale_token") >= 2.0,
        "{metrics}"
    );
}
