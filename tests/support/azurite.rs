//! Azurite, the Azure Blob Storage emulator, for the tests that speak to it
//! (`tests/services/chained_writes.rs`, `tests/services/azure_blob.rs`).

use super::*;

/// Azurite's blob service (`azurite-blob` from the npm package that
/// `scripts/install-deps.sh` installs under `target/node`), one per test
/// binary; killed once the binary exits.
pub fn azurite() -> std::net::SocketAddr {
    static AZURITE: std::sync::OnceLock<(std::process::Child, std::net::SocketAddr)> =
        std::sync::OnceLock::new();
    AZURITE
        .get_or_init(|| {
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
        })
        .1
}
