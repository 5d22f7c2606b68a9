//! Shared helpers of the tests, one file per concern:
//!
//! - `gateway`: the real `fencegate` binary as a child process ([`GatewayProcess`]),
//!   runs to exit, and reading `/metrics`;
//! - `backend`: an in-process test backend that records what reaches it
//!   ([`Backend`]);
//! - `http`: a raw HTTP/1.1 client ([`http`], [`send_raw`]) that sends
//!   exactly the bytes a test asks for;
//! - `relay`: a fault-injecting TCP relay ([`Relay`], [`Fault`]);
//! - `etcd`: a real etcd cluster on loopback ([`EtcdCluster`]), on ports
//!   from the demos' `examples/support/port.rs`;
//! - `tls`: certificates made for a run, and a TLS client;
//! - `torture`: the lock-holder clients and the checker of the torture
//!   runs;
//! - `rng`: a seeded random generator whose seed is printed;
//! - `netns`: real network faults: parts of a run in network namespaces
//!   of their own, wired through a switch that cuts, delays and loses
//!   packets ([`netns::Network`]);
//! - `variants`: one check run through one gateway, two on one etcd
//!   prefix, and one with conditional writes ([`variants::Gateways`]);
//! - `apache`: a real Apache httpd serving WebDAV (mod_dav) from a
//!   temporary directory ([`apache::Apache`]).
//!
//! The library's own tests (no `gateway` feature) use `rng` alone. Every
//! wait is bounded (a hang guard, never a speed assertion).

#![allow(dead_code, unused_imports)]

pub mod rng;

#[cfg(feature = "gateway")]
pub mod apache;
#[cfg(feature = "gateway")]
pub mod apache_basic;
#[cfg(feature = "gateway")]
pub mod azurite;
#[cfg(feature = "gateway")]
mod backend;
#[cfg(feature = "gateway")]
mod etcd;
#[cfg(feature = "gateway")]
mod gateway;
#[cfg(feature = "gateway")]
mod http;
#[cfg(feature = "gateway")]
pub mod moto;
#[cfg(feature = "gateway")]
pub mod moto_auth;
#[cfg(feature = "gateway")]
pub mod netns;
#[cfg(feature = "gateway")]
#[path = "../../examples/support/port.rs"]
mod port;
#[cfg(feature = "gateway")]
mod relay;
#[cfg(feature = "gateway")]
pub mod sigv4_client;
#[cfg(feature = "gateway")]
pub mod tls;
#[cfg(feature = "gateway")]
pub mod torture;
#[cfg(feature = "gateway")]
pub mod variants;

#[cfg(feature = "gateway")]
pub use self::backend::*;
#[cfg(feature = "gateway")]
pub use self::etcd::*;
#[cfg(feature = "gateway")]
pub use self::gateway::*;
#[cfg(feature = "gateway")]
pub use self::http::*;
#[cfg(feature = "gateway")]
pub use self::relay::*;

use std::time::{Duration, Instant};

/// How long anything may take before a test calls it a hang.
pub const HANG_GUARD: Duration = Duration::from_secs(30);

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_fencegate");

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A loopback port where nothing listens now, for "nothing listens here"
/// (502) tests and for servers told their port (moto). It comes from
/// `port.rs`'s range below the ephemeral ports, so that no outgoing
/// connection can take it in between, nor connect to itself on it.
#[cfg(feature = "gateway")]
pub fn dead_port() -> u16 {
    port::free_port().unwrap()
}

/// Kills process group `pgid` (with SIGKILL) once this test binary has
/// exited, and removes `dir` if given: for servers kept in a `static`, whose
/// destructor never runs. A watchdog shell polls this process once a second.
pub fn kill_group_at_exit(pgid: u32, dir: Option<&std::path::Path>) {
    let dir = dir.map(|d| d.display().to_string()).unwrap_or_default();
    let _ = std::process::Command::new("sh")
        .args([
            "-c",
            r#"while kill -0 "$0" 2>/dev/null; do sleep 1; done; kill -9 "-$1" 2>/dev/null; [ -z "$2" ] || rm -rf "$2""#,
        ])
        .arg(std::process::id().to_string())
        .arg(pgid.to_string())
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

/// Percent-encodes everything but unreserved characters (for admin keys).
pub fn pct(raw: &str) -> String {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(raw, SET).to_string()
}
