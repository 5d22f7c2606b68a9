//! etcd for the demos: a one-member etcd on loopback with a temporary data
//! dir, and a tiny client for its HTTP/JSON gateway (etcd's gRPC API as JSON
//! under `/v3/...`: keys and values base64, 64-bit numbers as strings), so
//! that no gRPC stack has to be built.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::Value;

use super::process::{free_port, require_binary, temp_dir, Server};
use super::{http, Result};

/// A running etcd; killed, and its data dir removed, on drop.
pub struct Etcd {
    /// Client URL's address (`http://{addr}`).
    pub addr: SocketAddr,
    _server: Server,
}

impl Etcd {
    /// Exits with one line naming the install script if etcd is missing.
    pub fn require() {
        require_binary("etcd");
    }

    /// Starts `etcd` on two free loopback ports (clients, peers) with a
    /// temporary data dir and waits until it answers a read.
    pub async fn start() -> Result<Etcd> {
        let binary = require_binary("etcd");
        let dir = temp_dir("fencegate-etcd-", None)?;
        let client = format!("http://127.0.0.1:{}", free_port()?);
        let peer = format!("http://127.0.0.1:{}", free_port()?);
        let addr: SocketAddr = client.trim_start_matches("http://").parse()?;
        let mut command = Command::new(binary);
        command
            .args(["--name", "default"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("default={peer}")])
            .args(["--initial-cluster-state", "new"])
            .args(["--logger", "zap", "--log-outputs", "stderr"]);
        // ETCD_* variables would override the flags above.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                command.env_remove(key);
            }
        }
        let mut server = Server::start("etcd", command, dir)?;
        tokio::task::block_in_place(|| server.wait_ready(addr, Duration::from_secs(20)))?;
        // The port opens before the member has elected itself: wait for a read.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match call(
                addr,
                "/v3/kv/range",
                serde_json::json!({ "key": b64(b"ping") }),
            )
            .await
            {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => {
                    return Err(format!(
                        "etcd does not serve reads: {e}; log:\n{}",
                        server.log_tail()
                    )
                    .into())
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        Ok(Etcd {
            addr,
            _server: server,
        })
    }
}

/// One call of etcd's JSON gateway: POST `path` with `body`, the answer as
/// JSON (an error if etcd answers with anything but 200).
pub async fn call(addr: SocketAddr, path: &str, body: Value) -> Result<Value> {
    let reply = http(addr, Method::POST, path, None, Some(&body.to_string())).await?;
    if reply.status != StatusCode::OK {
        return Err(format!("etcd {path}: {} {}", reply.status, reply.body.trim()).into());
    }
    Ok(serde_json::from_str(&reply.body)?)
}

/// A 64-bit number from the gateway's JSON (sent as a string, or a number;
/// absent means 0, as in proto3).
pub fn int(value: &Value) -> i64 {
    match value {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (how the gateway wants keys).
pub fn b64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding optional); `None` if malformed.
pub fn unb64(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}
