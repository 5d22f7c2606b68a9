//! A raw HTTP/1.1 client that sends exactly the bytes a test asks for.

use std::collections::HashSet;
use std::convert::Infallible;
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;

use super::*;

// ---------------------------------------------------------------------------
// Raw HTTP/1.1 client
// ---------------------------------------------------------------------------

/// A response as read off the wire.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    /// In order, names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Every value of header `name` (any case) in a lower-cased header list.
pub(crate) fn header_values<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    let name = name.to_ascii_lowercase();
    headers
        .iter()
        .filter(|(k, _)| *k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        header_values(&self.headers, name).into_iter().next()
    }

    pub fn header_all(&self, name: &str) -> Vec<&str> {
        header_values(&self.headers, name)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("body is not JSON ({e}): {:?}", self.text());
        })
    }

    /// Asserts a response the gateway made itself: `status`, `Content-Type:
    /// application/json`, a JSON body with `error == code`. Returns the body.
    pub fn assert_gateway_error(&self, status: u16, code: &str) -> serde_json::Value {
        assert_eq!(
            self.status,
            status,
            "expected {status} {code}, got {} {}",
            self.status,
            self.text()
        );
        let content_type = self.header("content-type").unwrap_or_default();
        assert!(
            content_type.starts_with("application/json"),
            "content-type {content_type:?} for {status} {code}"
        );
        let json = self.json();
        assert_eq!(json["error"], code, "{json}");
        json
    }
}

/// Builds and sends one request; `Host` is the target address unless given,
/// `Content-Length` is added for a non-empty body or a write method.
pub fn http(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let raw = build_request(addr, method, target, headers, body);
    send_raw(addr, &raw, method == "HEAD")
}

/// Builds the bytes of one request, as [`http`] sends them.
pub fn build_request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut raw = format!("{method} {target} HTTP/1.1\r\n").into_bytes();
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        raw.extend_from_slice(format!("Host: {addr}\r\n").as_bytes());
    }
    for (k, v) in headers {
        raw.extend_from_slice(k.as_bytes());
        raw.extend_from_slice(b": ");
        raw.extend_from_slice(v.as_bytes());
        raw.extend_from_slice(b"\r\n");
    }
    let safe = matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE" | "DELETE");
    if !body.is_empty() || !safe {
        raw.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    raw.extend_from_slice(body);
    raw
}

/// As [`http`], returning I/O errors instead of panicking.
pub fn try_http(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Resp> {
    let raw = build_request(addr, method, target, headers, body);
    try_send_raw(addr, &raw, method == "HEAD")
}

/// Writes `raw` as is on a new connection and reads one response (`head`:
/// the request was a HEAD, so the response has no body). Panics on an I/O
/// error.
pub fn send_raw(addr: SocketAddr, raw: &[u8], head: bool) -> Resp {
    try_send_raw(addr, raw, head).unwrap_or_else(|e| panic!("request to {addr}: {e}"))
}

/// As [`send_raw`], returning I/O errors (connection refused or reset).
pub fn try_send_raw(addr: SocketAddr, raw: &[u8], head: bool) -> std::io::Result<Resp> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(HANG_GUARD))?;
    stream.set_nodelay(true)?;
    stream.write_all(raw)?;
    read_response(&mut BufReader::new(stream), head)
}

fn bad_data(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

/// Reads one HTTP/1.1 response (Content-Length, chunked, or to EOF).
pub fn read_response(reader: &mut impl BufRead, head: bool) -> std::io::Result<Resp> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    if !line.starts_with("HTTP/1.") {
        return Err(bad_data(format!("bad status line {line:?}")));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad_data(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| bad_data(format!("bad header line {line:?}")))?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if head || status == 204 || status == 304 || (100..200).contains(&status) {
        // no body
    } else if find("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = size.trim().split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(size, 16)
                .map_err(|_| bad_data(format!("bad chunk size {size:?}")))?;
            if size == 0 {
                // trailers
                loop {
                    let mut l = String::new();
                    reader.read_line(&mut l)?;
                    if l.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..])?;
            let mut crlf = [0u8; 2];
            reader.read_exact(&mut crlf)?;
        }
    } else if let Some(len) = find("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| bad_data(format!("bad content-length {len:?}")))?;
        body.resize(len, 0);
        reader.read_exact(&mut body)?;
    } else {
        reader.read_to_end(&mut body)?;
    }
    Ok(Resp {
        status,
        headers,
        body,
    })
}
