//! Azure Blob Storage through the gateway, fenced, against Azurite (the
//! emulator Microsoft ships, from the npm registry) with the Azure SDK for
//! Python signing every request with SharedKey (`tests/clients/azure_fenced.py`):
//! the token on every request through the client's `raw_request_hook`, single
//! uploads and a staged multi-block upload accepted, a stale holder's
//! upload, delete and staged upload refused by the gateway (its own 409,
//! the store's content unchanged), a write without a token refused (428),
//! and a wrong account key refused by Azurite itself through the gateway:
//! the store verifies the client's signature, which the gateway leaves
//! intact. `--flat-keys`, as for every store without collections.
//!
//! Needs what `scripts/install-deps.sh` installs: Azurite under
//! `target/node`, and the Python environment with `azure-storage-blob`.

#[path = "../support/mod.rs"]
mod support;

use support::azurite::azurite;
use support::moto::run_client;
use support::GatewayProcess;

#[test]
fn the_azure_sdk_signing_with_shared_key_writes_fenced_through_the_gateway() {
    let azurite = format!("http://{}", azurite());
    let gw = GatewayProcess::start(&["--upstream", &azurite, "--flat-keys"]);
    let data_url = gw.data_url();
    let args = [data_url.as_str(), azurite.as_str(), "fenced-azure"];
    let result = run_client("azure_fenced.py", &args, || gw.stderr());
    assert_eq!(result["first"], "ok", "{result}");
    assert_eq!(result["staged"], "ok", "{result}");
    assert_eq!(result["staged_intact"], true, "{result}");
    assert_eq!(result["next_holder"], "ok", "{result}");
    for stale in ["stale_put", "stale_delete", "stale_blocks"] {
        assert_eq!(result[stale], "stale_token", "{stale}: {result}");
    }
    assert_eq!(result["stored"], "v41", "{result}");
    assert_eq!(result["no_token"], "missing_token", "{result}");
    assert_eq!(result["wrong_key"], "403", "{result}");
    assert_eq!(result["stored_after"], "v41", "{result}");
    // The fences the SDK's requests landed on: the blob's path, one per blob.
    assert_eq!(gw.fence("/devstoreaccount1/fenced-azure/report"), Some(41));
    assert_eq!(gw.fence("/devstoreaccount1/fenced-azure/big"), Some(40));
}
