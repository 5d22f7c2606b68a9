//! Chained writes in a VERSIONED S3 bucket (issue 33), against moto's S3
//! server, through `fencegate --store s3 --conditional-writes on`:
//!
//! - the same boto3 script (`tests/clients/boto3_versioned.py`: puts,
//!   deletes that leave delete markers, a delete of the current version by
//!   id, a listing of the versions, copies under each copy-source
//!   condition) runs once directly against moto and once through the
//!   gateway, in each `--chain-observe` mode; every answer and the final
//!   listing must be equal (SPEC, Data plane: a request through the gateway
//!   gets the answer it would get from the backend directly). In
//!   `client-head` mode the script answers 428 `version_unknown` as
//!   docs/CHAINED.md says: a fenced `HEAD`, then the retry;
//! - the relay proof of chained writes in a versioned bucket: a stale
//!   holder's `PUT` held past `--upstream-timeout` and delivered after the
//!   next holder's write is refused by moto, and the current version stays
//!   the next holder's (without the chain, the control, the stale bytes
//!   become the current version).
//!
//! `scripts/install-deps.sh` makes the Python environment; missing, the
//! tests fail and say so.

#[path = "../support/mod.rs"]
mod support;

use std::time::Duration;

use serde_json::Value;
use support::moto::{moto, run_client, S3_AUTH};
use support::*;

/// Runs `boto3_versioned.py` against `endpoint` on `bucket`.
fn run_script(endpoint: &str, bucket: &str, stderr: impl FnOnce() -> String) -> Value {
    run_client("boto3_versioned.py", &[endpoint, bucket], stderr)
}

/// Every difference between the direct result and the gateway's, one line
/// each: a step's answer (in the direct run's order), the final listing of
/// versions, the bytes stored.
fn differences(direct: &Value, gateway: &Value) -> Vec<String> {
    let mut found = Vec::new();
    if direct["order"] != gateway["order"] {
        found.push(format!(
            "steps: direct {} / gateway {}",
            direct["order"], gateway["order"]
        ));
    }
    for step in direct["order"].as_array().into_iter().flatten() {
        let step = step.as_str().unwrap_or_default();
        let (mine, theirs) = (&direct["answers"][step], &gateway["answers"][step]);
        if mine != theirs {
            found.push(format!("{step}: direct {mine} / gateway {theirs}"));
        }
    }
    for part in ["versions", "stored"] {
        if direct[part] != gateway[part] {
            found.push(format!(
                "{part}: direct {} / gateway {}",
                direct[part], gateway[part]
            ));
        }
    }
    found
}

/// The script directly against moto, then through a gateway in `observe`
/// mode, each in a bucket of its own; returns the gateway run's result
/// once every answer was found equal.
fn versioned_bucket_through_the_gateway_answers_as_moto(observe: &str) -> Value {
    let direct = run_script(
        &moto().url(),
        &format!("versioned-direct-{observe}"),
        String::new,
    );
    let gw = GatewayProcess::start(&[
        "--upstream",
        &moto().url(),
        "--store",
        "s3",
        "--conditional-writes",
        "on",
        "--chain-observe",
        observe,
    ]);
    let through = run_script(&gw.data_url(), &format!("versioned-{observe}"), || {
        gw.stderr()
    });
    let found = differences(&direct, &through);
    assert!(
        found.is_empty(),
        "--chain-observe {observe}: {} difference(s) between moto directly and through the gateway:\n{}\n\ndirect: {direct}\ngateway: {through}\ngateway stderr:\n{}",
        found.len(),
        found.join("\n"),
        gw.stderr()
    );
    // Sanity: the sequence did what it was meant to, directly.
    assert_eq!(
        direct["answers"]["delete_1"]["delete_marker"], true,
        "{direct}"
    );
    assert_eq!(direct["stored"]["report"], "v3", "{direct}");
    through
}

#[test]
fn in_a_versioned_bucket_the_gateway_answers_as_moto_with_gateway_head() {
    let through = versioned_bucket_through_the_gateway_answers_as_moto("gateway-head");
    // The gateway learns versions itself: the client never meets a 428.
    assert_eq!(through["version_unknown_total"], 0, "{through}");
}

#[test]
fn in_a_versioned_bucket_the_gateway_answers_as_moto_with_client_head() {
    let through = versioned_bucket_through_the_gateway_answers_as_moto("client-head");
    // The first write of an object whose version is unknown met a 428,
    // answered by the recipe's HEAD; the listing above shows the HEADs
    // changed nothing.
    assert_eq!(through["version_unknown"]["put_1"], 1, "{through}");
    println!(
        "client-head: {} 428 version_unknown met: {}",
        through["version_unknown_total"], through["version_unknown"]
    );
}

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

/// `bucket` made at moto directly, with versioning enabled.
fn make_versioned_bucket(bucket: &str) {
    let made = http(moto().addr, "PUT", &format!("/{bucket}"), &[S3_AUTH], b"");
    assert_eq!(made.status, 200, "CreateBucket at moto: {}", made.text());
    let versioning = http(
        moto().addr,
        "PUT",
        &format!("/{bucket}?versioning"),
        &[S3_AUTH],
        b"<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>",
    );
    assert_eq!(versioning.status, 200, "{}", versioning.text());
}

/// The current object's bytes at moto, asked directly (`None`: absent).
fn stored(target: &str) -> Option<String> {
    let got = http(moto().addr, "GET", target, &[S3_AUTH], b"");
    match got.status {
        200 => Some(got.text()),
        404 => None,
        other => panic!("GET {target} at moto: {other} {}", got.text()),
    }
}

/// A stale holder's `PUT` (token 33) in a versioned bucket is held by the
/// relay until after the next holder (token 34) wrote; returns the current
/// object's bytes at moto once the late request had its chance. `observe`
/// is the `--chain-observe` mode, or `None` for no chain at all.
fn stale_put_delivered_late(observe: Option<&str>, bucket: &str) -> Option<String> {
    make_versioned_bucket(bucket);
    let relay = Relay::start(moto().addr, Fault::None);
    let upstream = relay.url();
    let mut args = vec!["--upstream", upstream.as_str(), "--store", "s3"];
    args.extend(["--upstream-timeout", "1"]);
    match observe {
        Some(mode) => args.extend(["--conditional-writes", "on", "--chain-observe", mode]),
        None => args.extend(["--conditional-writes", "off"]),
    }
    let gw = GatewayProcess::start(&args);
    let target = format!("/{bucket}/report");
    let client_head = observe == Some("client-head");

    // Holder 33 (with client-head: after a fenced HEAD, absent) writes v33.
    if client_head {
        assert_eq!(request(&gw, "HEAD", &target, 33, b"").status, 404);
    }
    let first = request(&gw, "PUT", &target, 33, b"v33");
    assert_eq!(first.status, 200, "{}", first.text());

    // Its next write is held on the way, and the gateway gives up on it.
    relay.set(Fault::DelayRequest(HELD));
    let given_up = request(&gw, "PUT", &target, 33, b"stale");
    assert_eq!(given_up.status, 504, "{}", given_up.text());
    relay.set(Fault::None);

    // The next holder writes (with client-head: after a fenced HEAD).
    if client_head {
        assert_eq!(request(&gw, "HEAD", &target, 34, b"").status, 200);
    }
    let current = request(&gw, "PUT", &target, 34, b"v34");
    assert_eq!(current.status, 200, "{}\n{}", current.text(), gw.stderr());
    assert_eq!(stored(&target).as_deref(), Some("v34"));

    // The held request reaches moto now.
    std::thread::sleep(HELD + Duration::from_millis(1500));
    let listing = http(
        moto().addr,
        "GET",
        &format!("/{bucket}?versions"),
        &[S3_AUTH],
        b"",
    );
    println!(
        "{bucket} ({observe:?}): versions after the late PUT: {}",
        listing.text()
    );
    stored(&target)
}

#[test]
fn in_a_versioned_bucket_without_the_chain_a_late_stale_put_becomes_the_current_version() {
    // The control: the relay does deliver the stale PUT after v34.
    let after = stale_put_delivered_late(None, "versioned-late-open");
    assert_eq!(after.as_deref(), Some("stale"));
}

#[test]
fn in_a_versioned_bucket_a_late_stale_put_is_refused_by_the_store_with_gateway_head() {
    let after = stale_put_delivered_late(Some("gateway-head"), "versioned-late-gateway-head");
    assert_eq!(after.as_deref(), Some("v34"));
}

#[test]
fn in_a_versioned_bucket_a_late_stale_put_is_refused_by_the_store_with_client_head() {
    let after = stale_put_delivered_late(Some("client-head"), "versioned-late-client-head");
    assert_eq!(after.as_deref(), Some("v34"));
}
