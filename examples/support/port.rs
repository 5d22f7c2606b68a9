//! Free loopback ports for servers that must be told their port (etcd,
//! redis-server, PostgreSQL, ZooKeeper cannot be handed a bound socket).
//! Shared with the tests (`tests/support` includes this file).

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// The ports handed out: below Linux's ephemeral range (32768 and up), so
/// that no outgoing connection can take one between the pick and the
/// server's bind (port 0's answer is in that range: one possible cause of a
/// CI run whose test etcd cluster never came up; its logs were not kept then).
const LOW: u32 = 10_000;
const SPAN: u32 = 22_000;

/// A loopback port free now (bound, then released). Each process walks its
/// own stretch of the range and never hands out a port twice; another
/// process may still bind it first, which the caller's start-up check sees.
pub fn free_port() -> std::io::Result<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7_919) % SPAN;
    for _ in 0..SPAN {
        let port = LOW + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let port = port as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrNotAvailable,
        format!("no free loopback port in {LOW}..{}", LOW + SPAN),
    ))
}
