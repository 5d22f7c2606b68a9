//! Azurite, the Azure Blob Storage emulator, for the tests that speak to it
//! (`tests/services/chained_writes.rs`, `tests/services/azure_blob.rs`).

use super::*;

/// Azurite's blob service (`azurite-blob` from the npm package that
/// `scripts/install-deps.sh` installs under `target/node`), one per test
/// binary; killed once the binary exits.
pub fn azurite() -> std::net::SocketAddr {
    static AZURITE: std::sync::OnceLock<(std::process::Child, std::net::SocketAddr)> =
        std::sync::OnceLock::new();
    AZURITE.get_or_init(|| start_azurite(&[])).1
}

/// The account Azurite knows under credential custody (`azurite_for_custody`):
/// the gateway's alone.
pub const STORE_ACCOUNT: &str = "fgstore";
/// Its key (base64), which only the gateway is given.
pub const STORE_KEY: &str =
    "c3RvcmUta2V5LW9mLXRoZS1nYXRld2F5LW9ubHktNjQtYnl0ZXMtbG9uZy0wMTIzNDU2Nzg5YWJjZGVmZ2hpamtsbW4=";

/// Azurite knowing [`STORE_ACCOUNT`] alone (`AZURITE_ACCOUNTS`; its
/// development account is then disabled), one per test binary.
pub fn azurite_for_custody() -> std::net::SocketAddr {
    static AZURITE: std::sync::OnceLock<(std::process::Child, std::net::SocketAddr)> =
        std::sync::OnceLock::new();
    AZURITE
        .get_or_init(|| {
            start_azurite(&[("AZURITE_ACCOUNTS", &format!("{STORE_ACCOUNT}:{STORE_KEY}"))])
        })
        .1
}

fn start_azurite(envs: &[(&str, &str)]) -> (std::process::Child, std::net::SocketAddr) {
    use std::os::unix::process::CommandExt;
    let bin = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/node/node_modules/.bin/azurite-blob");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/install-deps.sh",
        bin.display()
    );
    let dir = tempfile::tempdir().unwrap().keep();
    let port = dead_port();
    let child = std::process::Command::new(&bin)
        .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
        .args(["--skipApiVersionCheck", "--silent", "--location"])
        .arg(&dir)
        .process_group(0)
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    kill_group_at_exit(child.id(), Some(&dir));
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        wait_until(HANG_GUARD, || std::net::TcpStream::connect(addr).is_ok()),
        "azurite did not listen on {port}"
    );
    (child, addr)
}

/// An identity of the gateway under Azure custody: the account name it
/// signs with and its key (base64), both unknown to Azurite.
pub struct AzureIdentity {
    pub name: &'static str,
    pub account: &'static str,
    pub key: &'static str,
}

/// May write `/billing/`, read `/shared/`.
pub const BILLING: AzureIdentity = AzureIdentity {
    name: "billing",
    account: "fgbilling",
    key: "YmlsbGluZy1rZXktb2YtYW4taWRlbnRpdHktb2YtdGhlLWdhdGV3YXktbm90LW9mLXRoZS1zdG9yZQ==",
};

/// May administer everything (containers).
pub const OPS: AzureIdentity = AzureIdentity {
    name: "ops",
    account: "fgops",
    key: "b3BzLWtleS1vZi1hbi1pZGVudGl0eS1vZi10aGUtZ2F0ZXdheS1ub3Qtb2YtdGhlLXN0b3JlLW9rYXk=",
};

/// May only read `/billing/`.
pub const AUDITOR: AzureIdentity = AzureIdentity {
    name: "auditor",
    account: "fgauditor",
    key: "YXVkaXRvci1rZXktb2YtYW4taWRlbnRpdHktb2YtdGhlLWdhdGV3YXktbm90LW9mLXRoZS1zdG9yZQ==",
};

/// A gateway in front of [`azurite_for_custody`] holding the store's key
/// (`--store azure --upstream-credentials`), its clients [`BILLING`],
/// [`OPS`] and [`AUDITOR`], the token in `x-ms-fencing-token` (a header
/// Shared Key signs), with `extra` arguments. The directory holds the
/// files and must outlive the gateway.
pub fn azure_custody_gateway(extra: &[&str]) -> (GatewayProcess, tempfile::TempDir) {
    azure_custody_gateway_via(azurite_for_custody(), extra)
}

/// [`azure_custody_gateway`] reaching Azurite at `azurite` (a relay in
/// front of [`azurite_for_custody`]).
pub fn azure_custody_gateway_via(
    azurite: std::net::SocketAddr,
    extra: &[&str],
) -> (GatewayProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("store.key"), STORE_KEY).unwrap();
    std::fs::write(
        dir.path().join("upstream.toml"),
        format!("kind = \"azure-shared-key\"\naccount = \"{STORE_ACCOUNT}\"\nkey_file = \"store.key\"\n"),
    )
    .unwrap();
    let mut identities = String::new();
    for (identity, allow) in [
        (
            &BILLING,
            r#"[{ prefix = "/billing/", access = "write" }, { prefix = "/shared/", access = "read" }]"#,
        ),
        (&OPS, r#"[{ prefix = "/", access = "admin" }]"#),
        (&AUDITOR, r#"[{ prefix = "/billing/", access = "read" }]"#),
    ] {
        std::fs::write(
            dir.path().join(format!("{}.key", identity.name)),
            identity.key,
        )
        .unwrap();
        identities.push_str(&format!(
            "[[identity]]\nname = \"{}\"\naccess_key_id = \"{}\"\nsecret_file = \"{}.key\"\nallow = {allow}\n\n",
            identity.name, identity.account, identity.name
        ));
    }
    std::fs::write(dir.path().join("identities.toml"), identities).unwrap();
    let upstream = format!("http://{azurite}/{STORE_ACCOUNT}");
    let upstream_file = dir.path().join("upstream.toml").display().to_string();
    let identities_file = dir.path().join("identities.toml").display().to_string();
    let mut args = vec![
        "--upstream",
        &upstream,
        "--store",
        "azure",
        "--upstream-credentials",
        &upstream_file,
        "--identities",
        &identities_file,
        "--token-header",
        "x-ms-fencing-token",
    ];
    args.extend_from_slice(extra);
    (GatewayProcess::start(&args), dir)
}

/// The fields of a request signed with Shared Key by `identity` now, as
/// the SDKs sign one (see [`shared_key_headers`]).
pub fn shared_key_signed(
    identity: &AzureIdentity,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body_len: usize,
) -> Vec<(String, String)> {
    shared_key_headers(
        fencegate::dialect::shared_key::Scheme::SharedKey,
        identity.account,
        identity.key,
        &httpdate::fmt_http_date(std::time::SystemTime::now()),
        method,
        target,
        headers,
        &vec![0; body_len],
    )
}

/// The fields to send for a request signed with `scheme` by `account`
/// with `key` (base64) at `date`: `headers`, `x-ms-date`, `x-ms-version`,
/// and `Authorization`. The signature covers the `Content-Length` that
/// [`http`] sends for `body`. `target` is path-style, as sent.
#[allow(clippy::too_many_arguments)]
pub fn shared_key_headers(
    scheme: fencegate::dialect::shared_key::Scheme,
    account: &str,
    key: &str,
    date: &str,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<(String, String)> {
    use fencegate::dialect::shared_key::{string_to_sign, AccountKey, Scheme};
    let mut sent: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    sent.push(("x-ms-date".into(), date.into()));
    sent.push(("x-ms-version".into(), "2021-08-06".into()));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let length = body.len().to_string();
    let safe = matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE" | "DELETE");
    let mut fields: Vec<(&str, &[u8])> = sent
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()))
        .collect();
    if !body.is_empty() || !safe {
        fields.push(("Content-Length", length.as_bytes()));
    }
    let to_sign = string_to_sign(scheme, method, account, path, query, &fields)
        .unwrap_or_else(|e| panic!("string to sign for {method} {target}: {e}"));
    let signature = AccountKey::from_base64(key).unwrap().sign(&to_sign);
    let name = match scheme {
        Scheme::SharedKey => "SharedKey",
        Scheme::SharedKeyLite => "SharedKeyLite",
    };
    sent.push((
        "Authorization".into(),
        format!("{name} {account}:{signature}"),
    ));
    sent
}
