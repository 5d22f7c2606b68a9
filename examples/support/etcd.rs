//! etcd for the demos: a one-member etcd on loopback with a temporary data
//! dir, and a tiny client for its HTTP/JSON gateway (etcd's gRPC API as JSON
//! under `/v3/...`: keys and values base64, 64-bit numbers as strings), so
//! that no gRPC stack has to be built.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use http::{Method, StatusCode};
use serde_json::Value;

use super::port::free_port;
use super::process::{require_binary, temp_dir, Server};
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
        let dir = temp_dir("fencegate-etcd-", None)?;
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let client = format!("http://{addr}");
        let peer = format!("http://127.0.0.1:{}", free_port()?);
        let mut command = Command::new(require_binary("etcd"));
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
        let server = Server::start("etcd", &mut command, dir)?;
        // The port opens before the member has elected itself: wait for a read.
        let read = || {
            call(
                addr,
                "/v3/kv/range",
                serde_json::json!({ "key": b64(b"ping") }),
            )
        };
        server.serving(Duration::from_secs(40), read).await?;
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

/// Standard base64 with padding (how the gateway wants keys).
pub fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Decodes standard base64; `None` if malformed.
pub fn unb64(text: &str) -> Option<Vec<u8>> {
    STANDARD.decode(text).ok()
}
