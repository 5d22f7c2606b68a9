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
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name);
    let out = Command::new(venv().join("bin/python"))
        .arg(script)
        .args(args)
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
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
    // Without --store the same answer is the JSON of the SPEC.
    let json = GatewayProcess::start(&[
        "--upstream",
        &format!("http://127.0.0.1:{}", support::dead_port()),
    ]);
    let resp = json.req("GET", "/b/k", &[], b"");
    assert_eq!(resp.header("content-type"), Some("application/json"));
}
