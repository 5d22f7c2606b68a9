//! Azure Blob with the gateway as the store's only door (`--store azure
//! --upstream-credentials`): Azurite knows only the store's account, whose
//! key only the gateway holds; clients sign with identities' account names
//! and keys, which Azurite refuses.
//!
//! - The Azure SDK for Python, unmodified but for the token header
//!   (`tests/clients/azure_custody.py`), under `--conditional-writes on`:
//!   uploads (single and staged blocks), ranged downloads, listings, a copy,
//!   deletes and a SAS it generated all served, with no 428 and no
//!   `unchainable_write`; a stale token's upload is 409 and the SDK's
//!   `error_code` is `stale_token`; a write beyond the identity's `allow`
//!   is `AuthorizationPermissionMismatch`; the identity's key goes nowhere
//!   at Azurite directly.
//! - A late Put Blob: a stale holder's upload held on its way to Azurite
//!   past `--upstream-timeout` (the relay) arrives after the next holder's;
//!   the gateway's chained condition, under the gateway's own signature,
//!   makes Azurite refuse it.
//!
//! Hand-built requests for what the SDK does not send (wrong keys, skewed
//! dates, bad SAS, `SharedKeyLite`, copy sources) are in
//! `azure_custody_requests.rs`. Needs what `scripts/install-deps.sh`
//! installs: Azurite under `target/node`, the Python environment.

#[path = "../support/mod.rs"]
mod support;

use std::time::Duration;

use support::azurite::{
    azure_custody_gateway, azure_custody_gateway_via, azurite_for_custody, shared_key_signed,
    BILLING, OPS, STORE_ACCOUNT, STORE_KEY,
};
use support::moto::run_client;
use support::{outcome_all_identities, Relay};

#[test]
fn the_azure_sdk_goes_through_the_gateway_and_not_around_it() {
    let (gw, _dir) = azure_custody_gateway(&["--conditional-writes", "on"]);
    let azurite = format!("http://{}", azurite_for_custody());
    let data_url = gw.data_url();
    let args = [
        data_url.as_str(),
        azurite.as_str(),
        STORE_ACCOUNT,
        BILLING.key,
        OPS.key,
    ];
    let result = run_client("azure_custody.py", &args, || gw.stderr());

    // Around the gateway, the identity's key opens nothing: Azurite does not
    // know its account, and the store's account does not take its key.
    assert_eq!(
        result["direct_own_account"], "404 ResourceNotFound",
        "{result}"
    );
    assert_eq!(
        result["direct_store_account"], "403 AuthorizationFailure",
        "{result}"
    );

    // Through it, every SDK call is served.
    assert_eq!(
        result["create"],
        serde_json::json!(["ok", "ok"]),
        "{result}"
    );
    for call in [
        "upload",
        "overwrite",
        "staged",
        "copy",
        "sas_upload",
        "sas_delete",
        "delete",
    ] {
        assert_eq!(result[call], "ok", "{call}: {result}");
    }
    assert_eq!(result["download"], "v5b", "{result}");
    assert_eq!(result["download_ranges"], "same", "{result}");
    assert_eq!(
        result["list"],
        serde_json::json!(["big", "report"]),
        "{result}"
    );
    assert_eq!(result["copied"], "v5b", "{result}");
    assert_eq!(result["sas_download"], "by sas", "{result}");
    assert_eq!(
        result["listed_after"],
        serde_json::json!(["copy", "report"]),
        "{result}"
    );

    // A stale token reads as an Azure error the SDK understands.
    let stale = &result["stale"];
    assert_eq!(stale["status"], 409, "{result}");
    assert_eq!(stale["error_code"], "stale_token", "{result}");
    assert_eq!(
        stale["message"], "token 4 is below the highest 5 admitted for /billing/report",
        "{result}"
    );
    assert_eq!(
        result["forbidden"], "403 AuthorizationPermissionMismatch",
        "{result}"
    );

    // One blob, one fence: the identity's account is not part of the key.
    assert_eq!(gw.fence("/billing/report"), Some(5));
    assert_eq!(gw.fence("/billing/copy"), Some(6));
    assert_eq!(gw.fence("/billing/big"), Some(9));

    // Chained writes were transparent: no 428 of any kind, no
    // unchainable_write; the chain observed versions itself.
    let metrics = gw.metrics();
    for refused in [
        "version_unknown",
        "missing_token",
        "unchainable_write",
        "precondition_not_chainable",
        "upstream_error",
    ] {
        assert_eq!(
            outcome_all_identities(&metrics, refused),
            0.0,
            "{refused}: {metrics}"
        );
    }
    assert!(
        outcome_all_identities(&metrics, "forwarded") >= 15.0,
        "{metrics}"
    );
    let stderr = gw.stderr();
    for key in [STORE_KEY, BILLING.key, OPS.key] {
        assert!(
            !stderr.contains(key),
            "a key in the gateway's log:\n{stderr}"
        );
    }
}

/// How long the relay holds a request: past the gateway's
/// `--upstream-timeout` of 1 s.
const HELD: Duration = Duration::from_millis(2500);

#[test]
fn a_late_put_blob_is_refused_by_azurite_under_the_gateways_signature() {
    assert_eq!(late_put_blob("on", "late-chained"), "v34");
}

#[test]
fn without_the_chain_a_late_put_blob_overwrites_the_next_holder() {
    // The control: the window the chain closes is open without it.
    assert_eq!(late_put_blob("off", "late-open"), "stale");
}

/// Holder 33's upload is held on its way to Azurite until after holder 34
/// wrote `v34`; returns what Azurite holds once the held one arrived.
fn late_put_blob(mode: &str, container: &str) -> String {
    let relay = Relay::start(azurite_for_custody(), support::Fault::None);
    let (gw, _dir) = azure_custody_gateway_via(
        relay.addr(),
        &["--conditional-writes", mode, "--upstream-timeout", "1"],
    );
    let blob = format!("/fgops/{container}/report");
    let ops = |method: &str, target: &str, token: &str, body: &[u8]| {
        // Put Blob's selecting header; a container's creation and a read
        // take none.
        let headers: &[(&str, &str)] = if method != "PUT" || target.contains("restype=container") {
            &[("x-ms-fencing-token", token)]
        } else {
            &[
                ("x-ms-fencing-token", token),
                ("x-ms-blob-type", "BlockBlob"),
            ]
        };
        let fields = shared_key_signed(&OPS, method, target, headers, body.len());
        let fields: Vec<(&str, &str)> = fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        gw.req(method, target, &fields, body)
    };
    let made = ops(
        "PUT",
        &format!("/fgops/{container}?restype=container"),
        "1",
        b"",
    );
    assert_eq!(made.status, 201, "{}", made.text());
    let first = ops("PUT", &blob, "33", b"v33");
    assert_eq!(first.status, 201, "{}", first.text());

    // Holder 33's next upload is held on its way, and the gateway gives up.
    relay.set(support::Fault::DelayRequest(HELD));
    let given_up = ops("PUT", &blob, "33", b"stale");
    assert_eq!(given_up.status, 504, "{}", given_up.text());
    relay.set(support::Fault::None);

    // The next holder writes (the gateway reads the version itself).
    let current = ops("PUT", &blob, "34", b"v34");
    assert_eq!(current.status, 201, "{}", current.text());

    // The held upload reaches Azurite now; with the chain it carries the
    // gateway's condition under the gateway's signature: refused.
    std::thread::sleep(HELD + Duration::from_millis(1500));
    let read = ops("GET", &blob, "34", b"");
    assert_eq!(read.status, 200, "{}", read.text());
    read.text()
}

/// The gateway's own key is wrong: Azurite's `AuthenticationFailed` is the
/// gateway's 502 `upstream_credentials_rejected`, with none of Azurite's
/// body (it would name the gateway's string to sign).
#[test]
fn a_store_refusing_the_gateways_key_is_upstream_credentials_rejected() {
    let (gw, dir) = azure_custody_gateway(&[]);
    // Another key, of the right shape, in the store's key file; reloaded.
    std::fs::write(dir.path().join("store.key"), BILLING.key).unwrap();
    gw.sighup();
    assert!(
        gw.wait_stderr("upstream credentials reloaded", support::HANG_GUARD),
        "{}",
        gw.stderr()
    );
    let fields = shared_key_signed(&OPS, "GET", "/fgops?comp=list", &[], 0);
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let resp = gw.req("GET", "/fgops?comp=list", &fields, b"");
    assert_eq!(resp.status, 502, "{}", resp.text());
    assert_eq!(
        resp.header("x-ms-error-code"),
        Some("upstream_credentials_rejected"),
        "{}",
        resp.text()
    );
    assert!(!resp.text().contains(STORE_ACCOUNT), "{}", resp.text());
    // No key, the store's (old or new) or an identity's, in any log line
    // or answer.
    let stderr = gw.stderr();
    for key in [STORE_KEY, BILLING.key, OPS.key] {
        assert!(
            !stderr.contains(key),
            "a key in the gateway's log:\n{stderr}"
        );
        assert!(!resp.text().contains(key), "a key in the answer");
    }
}
