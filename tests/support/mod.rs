//! Shared helpers for the black-box gateway tests: the real `fencegate`
//! binary as a child process ([`Gateway`]), an in-process test backend that
//! records what reaches it ([`Backend`]), and a raw HTTP/1.1 client
//! ([`http`], [`send_raw`]) that sends exactly the bytes a test asks for.
//!
//! Every wait is bounded (a hang guard, never a speed assertion).

#![allow(dead_code)]

pub mod tls;

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

/// A free loopback port: bound, then released. Used for "nothing listens
/// here" (502) tests.
pub fn dead_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
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

// ---------------------------------------------------------------------------
// The gateway process
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Output {
    stdout: Vec<String>,
    stderr: Vec<String>,
    stdout_closed: bool,
}

/// The real `fencegate` binary, running. Killed on drop.
pub struct Gateway {
    child: Option<Child>,
    program: Vec<String>,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    data: SocketAddr,
    admin: SocketAddr,
    output: Arc<(Mutex<Output>, Condvar)>,
}

fn has_option(args: &[String], envs: &[(String, String)], flag: &str, var: &str) -> bool {
    args.iter()
        .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
        || envs.iter().any(|(k, _)| k == var)
}

impl Gateway {
    /// Starts the gateway with `args`, adding `--listen 127.0.0.1:0
    /// --admin-listen 127.0.0.1:0` and a fresh temporary `--data-dir` unless
    /// given, and waits (bounded) until both addresses are printed.
    pub fn start(args: &[&str]) -> Gateway {
        Self::start_full(&[], args, &[])
    }

    /// As [`start`](Self::start), with extra `FENCEGATE_*` (or other)
    /// environment variables. Every `FENCEGATE_*` variable inherited from the
    /// test's environment is removed first.
    pub fn start_with_env(args: &[&str], envs: &[(&str, &str)]) -> Gateway {
        Self::start_full(&[], args, envs)
    }

    /// As [`start`](Self::start), but runs `wrapper... BIN args...`, e.g.
    /// a shell that sets resource limits and then `exec`s the binary.
    pub fn start_full(wrapper: &[&str], args: &[&str], envs: &[(&str, &str)]) -> Gateway {
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let envs: Vec<(String, String)> = envs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if !has_option(&args, &envs, "--listen", "FENCEGATE_LISTEN") {
            args.extend(["--listen".into(), "127.0.0.1:0".into()]);
        }
        if !has_option(&args, &envs, "--admin-listen", "FENCEGATE_ADMIN_LISTEN") {
            args.extend(["--admin-listen".into(), "127.0.0.1:0".into()]);
        }
        let (tmp, data_dir) = if let Some(i) = args.iter().position(|a| a == "--data-dir") {
            (None, PathBuf::from(&args[i + 1]))
        } else if let Some((_, dir)) = envs.iter().find(|(k, _)| k == "FENCEGATE_DATA_DIR") {
            (None, PathBuf::from(dir))
        } else {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("data");
            args.extend(["--data-dir".into(), dir.display().to_string()]);
            (Some(tmp), dir)
        };
        let mut program: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
        program.push(BIN.to_string());
        let mut gateway = Gateway {
            child: None,
            program,
            args,
            envs,
            data_dir,
            _tmp: tmp,
            data: "0.0.0.0:0".parse().unwrap(),
            admin: "0.0.0.0:0".parse().unwrap(),
            output: Arc::default(),
        };
        gateway.spawn();
        gateway
    }

    fn spawn(&mut self) {
        let mut command = Command::new(&self.program[0]);
        command
            .args(&self.program[1..])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, _) in std::env::vars() {
            if key.starts_with("FENCEGATE_") {
                command.env_remove(key);
            }
        }
        command.env("NO_COLOR", "1");
        command.envs(self.envs.iter().map(|(k, v)| (k, v)));
        let mut child = command.spawn().expect("spawn fencegate");
        let output: Arc<(Mutex<Output>, Condvar)> = Arc::default();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        {
            let output = Arc::clone(&output);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    output.0.lock().unwrap().stdout.push(line);
                    output.1.notify_all();
                }
                output.0.lock().unwrap().stdout_closed = true;
                output.1.notify_all();
            });
        }
        {
            let output = Arc::clone(&output);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    output.0.lock().unwrap().stderr.push(line);
                    output.1.notify_all();
                }
            });
        }
        self.output = output;
        self.child = Some(child);

        let deadline = Instant::now() + HANG_GUARD;
        let (lock, cvar) = &*self.output;
        let mut out = lock.lock().unwrap();
        loop {
            let find = |prefix: &str| {
                out.stdout.iter().find_map(|l| {
                    l.strip_prefix(prefix)
                        .and_then(|a| a.trim().parse::<SocketAddr>().ok())
                })
            };
            if let (Some(data), Some(admin)) = (
                find("data plane listening on "),
                find("admin plane listening on "),
            ) {
                self.data = data;
                self.admin = admin;
                return;
            }
            let now = Instant::now();
            if out.stdout_closed || now >= deadline {
                let stdout = out.stdout.join("\n");
                let stderr = out.stderr.join("\n");
                drop(out);
                let status = self.kill9();
                panic!(
                    "fencegate did not print its addresses (exit {status:?})\n\
                     stdout:\n{stdout}\nstderr:\n{stderr}"
                );
            }
            out = cvar.wait_timeout(out, deadline - now).unwrap().0;
        }
    }

    /// `http://127.0.0.1:PORT` of the data plane.
    pub fn data_url(&self) -> String {
        format!("http://{}", self.data)
    }

    /// `http://127.0.0.1:PORT` of the admin plane.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin)
    }

    pub fn data_addr(&self) -> SocketAddr {
        self.data
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("gateway not running").id()
    }

    /// Stdout lines of the current run.
    pub fn stdout(&self) -> Vec<String> {
        self.output.0.lock().unwrap().stdout.clone()
    }

    /// Stderr of the current run so far.
    pub fn stderr(&self) -> String {
        self.output.0.lock().unwrap().stderr.join("\n")
    }

    /// Waits (bounded) until stdout of the current run has a line
    /// containing `needle`.
    pub fn wait_stdout(&self, needle: &str, timeout: Duration) -> bool {
        wait_until(timeout, || self.stdout().iter().any(|l| l.contains(needle)))
    }

    /// Waits (bounded) until stderr of the current run has a line
    /// containing `needle`.
    pub fn wait_stderr(&self, needle: &str, timeout: Duration) -> bool {
        wait_until(timeout, || self.stderr().contains(needle))
    }

    /// SIGKILL, then reap. Returns the exit status if there was a child.
    pub fn kill9(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        Some(child.wait().unwrap())
    }

    /// Sends SIGTERM (through `kill(1)`), leaving the child to exit.
    /// Sends SIGHUP (reload the TLS certificate).
    pub fn sighup(&self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid() as i32),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap();
    }

    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Whether the process has exited (without reaping it twice).
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().unwrap()
    }

    /// Waits (bounded) for the process to exit, reaps it, returns its status.
    /// Panics (after SIGKILL) if it does not exit in `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return status;
            }
            if Instant::now() >= deadline {
                self.kill9();
                panic!(
                    "fencegate did not exit within {timeout:?}; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the gateway again with the same arguments and data dir (killing
    /// the current process first if it still runs). New ports.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Resident set size of the gateway process, in bytes.
    pub fn rss_bytes(&self) -> Option<u64> {
        rss_of(self.pid())
    }

    // Admin plane shortcuts.

    pub fn admin_get(&self, target: &str) -> Resp {
        http(self.admin, "GET", target, &[], b"")
    }

    /// The highest token of fence `key` from `GET /fences/{key}`, `None` on
    /// 404 (any other status fails the test).
    pub fn fence(&self, key: &str) -> Option<u64> {
        let resp = self.admin_get(&format!("/fences/{}", pct(key)));
        match resp.status {
            200 => {
                let json = resp.json();
                assert_eq!(json["resource"], key, "{json}");
                Some(json["highest"].as_u64().expect("highest is a number"))
            }
            404 => None,
            other => panic!("GET /fences/{key}: unexpected {other}: {}", resp.text()),
        }
    }

    pub fn metrics(&self) -> String {
        let resp = self.admin_get("/metrics");
        assert_eq!(resp.status, 200, "{}", resp.text());
        resp.text()
    }

    /// A data plane request.
    pub fn req(&self, method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        http(self.data, method, target, headers, body)
    }

    /// A fenced data plane request with `X-Fencing-Token: token`.
    pub fn put(&self, target: &str, token: u64) -> Resp {
        let token = token.to_string();
        http(
            self.data,
            "PUT",
            target,
            &[("X-Fencing-Token", &token)],
            b"data",
        )
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// What a run of the binary to completion produced.
/// [`run_to_exit`] with both planes on free ports, then `extra`.
pub fn run_on_free_ports(extra: &[&str]) -> Finished {
    let mut args = vec!["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    run_to_exit(&args, &[])
}

#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the binary with exactly `args` and `envs` (inherited `FENCEGATE_*`
/// removed, `RUST_BACKTRACE=1` so that a panic would show a backtrace) until
/// it exits; kills it and panics if it is still running after `HANG_GUARD`.
pub fn run_to_exit(args: &[&str], envs: &[(&str, &str)]) -> Finished {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RUST_BACKTRACE", "1")
        .env("NO_COLOR", "1");
    for (key, _) in std::env::vars() {
        if key.starts_with("FENCEGATE_") {
            command.env_remove(key);
        }
    }
    command.envs(envs.iter().copied());
    let mut child = command.spawn().expect("spawn fencegate");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + HANG_GUARD;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fencegate {args:?} did not exit: {}", err.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Finished {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

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
fn header_values<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
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

// ---------------------------------------------------------------------------
// The test backend
// ---------------------------------------------------------------------------

/// One request as the backend received it.
#[derive(Debug, Clone)]
pub struct Record {
    /// Arrival order, from 0.
    pub seq: usize,
    pub method: String,
    /// The request target exactly as received (path and query).
    pub target: String,
    pub version: String,
    /// In order, names lower-cased; repeated lines kept.
    pub headers: Vec<(String, String)>,
    /// The `X-Fencing-Token` value, if any.
    pub token: Option<String>,
    /// Bytes of body read; `None` until the body has been read to its end.
    pub body_len: Option<u64>,
    /// Trailer fields received after the body, names lower-cased.
    pub trailers: Vec<(String, String)>,
}

impl Record {
    pub fn header(&self, name: &str) -> Option<&str> {
        header_values(&self.headers, name).into_iter().next()
    }

    pub fn header_all(&self, name: &str) -> Vec<&str> {
        header_values(&self.headers, name)
    }

    pub fn token_u64(&self) -> Option<u64> {
        self.token.as_deref().and_then(|t| t.trim().parse().ok())
    }
}

/// What happened at the backend, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Request `seq`'s head arrived.
    Arrived(usize),
    /// Request `seq`'s response was handed to the server (headers).
    Responded(usize),
}

#[derive(Default)]
struct Log {
    records: Vec<Record>,
    events: Vec<Event>,
}

struct BackendState {
    log: Mutex<Log>,
    changed: Condvar,
    released: tokio::sync::watch::Sender<HashSet<String>>,
}

/// An HTTP/1.1 backend on 127.0.0.1:0 in its own tokio runtime. Controlled
/// by request headers (which the gateway forwards):
///
/// - `X-Test-Delay-Ms: N`: answer after N ms.
/// - `X-Test-Hold: NAME`: answer only after [`Backend::release`]`(NAME)`.
/// - `X-Test-Hang: 1`: never answer.
/// - `X-Test-Abort: 1`: close the connection without answering.
/// - `X-Test-Status: N`: answer with status N (default 200).
/// - `X-Test-Response-Header: Name: value` (repeatable): add to the answer.
/// - `X-Test-Response-Bytes: N`: answer with N streamed zero bytes instead
///   of the JSON echo.
/// - `X-Test-Body-Delay-Ms: N`: send the response headers and half of the
///   body at once, the rest after N ms.
///
/// The body is read and discarded (counted). The default answer is a JSON
/// echo: `{"seq", "method", "target", "headers": [[name, value], ...],
/// "body_len"}`.
pub struct Backend {
    addr: SocketAddr,
    state: Arc<BackendState>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Backend {
    pub fn start() -> Backend {
        Self::start_with(None)
    }

    /// The same backend speaking only TLS (HTTP/1.1), with `leaf`'s
    /// certificate: `https://localhost:PORT` for a leaf issued for localhost.
    pub fn start_tls(leaf: &tls::Leaf) -> Backend {
        use rustls::pki_types::pem::PemObject;
        let chain = vec![rustls::pki_types::CertificateDer::from_pem_file(&leaf.cert).unwrap()];
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&leaf.key).unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self::start_with(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
    }

    fn start_with(tls: Option<tokio_rustls::TlsAcceptor>) -> Backend {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(BackendState {
            log: Mutex::default(),
            changed: Condvar::new(),
            released: tokio::sync::watch::Sender::new(HashSet::new()),
        });
        let accept_state = Arc::clone(&state);
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = Arc::clone(&accept_state);
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        handle(Arc::clone(&state), request)
                    });
                    let builder = hyper::server::conn::http1::Builder::new();
                    match tls {
                        None => {
                            let io = hyper_util::rt::TokioIo::new(stream);
                            let _ = builder.serve_connection(io, service).await;
                        }
                        Some(tls) => {
                            // A failed handshake (the gateway refused our
                            // certificate) just ends the connection.
                            let Ok(stream) = tls.accept(stream).await else {
                                return;
                            };
                            let io = hyper_util::rt::TokioIo::new(stream);
                            let _ = builder.serve_connection(io, service).await;
                        }
                    }
                });
            }
        });
        Backend {
            addr,
            state,
            runtime: Some(runtime),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for `--upstream`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `https://HOST:PORT`, for a backend started with [`Backend::start_tls`].
    pub fn https_url(&self, host: &str) -> String {
        format!("https://{host}:{}", self.addr.port())
    }

    /// Every request received so far, in arrival order.
    pub fn records(&self) -> Vec<Record> {
        self.state.log.lock().unwrap().records.clone()
    }

    pub fn events(&self) -> Vec<Event> {
        self.state.log.lock().unwrap().events.clone()
    }

    /// Requests received whose target is exactly `target`.
    pub fn records_for(&self, target: &str) -> Vec<Record> {
        self.records()
            .into_iter()
            .filter(|r| r.target == target)
            .collect()
    }

    pub fn count(&self) -> usize {
        self.state.log.lock().unwrap().records.len()
    }

    /// Waits (bounded) until `cond(records)` holds; returns whether it did.
    pub fn wait_for(&self, timeout: Duration, mut cond: impl FnMut(&[Record]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut log = self.state.log.lock().unwrap();
        loop {
            if cond(&log.records) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            log = self
                .state
                .changed
                .wait_timeout(log, deadline - now)
                .unwrap()
                .0;
        }
    }

    /// Lets every request held with `X-Test-Hold: name` (now or later) answer.
    pub fn release(&self, name: &str) {
        self.state.released.send_modify(|set| {
            set.insert(name.to_string());
        });
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

type BackendBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// `N` zero bytes, streamed in 64 KiB frames.
struct Zeros {
    remaining: u64,
}

impl http_body::Body for Zeros {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        static CHUNK: [u8; 65536] = [0; 65536];
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let n = self.remaining.min(CHUNK.len() as u64);
        self.remaining -= n;
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
            &CHUNK[..n as usize],
        )))))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

/// Two chunks with a pause between them.
struct SlowBody {
    first: Option<Bytes>,
    pause: Pin<Box<tokio::time::Sleep>>,
    second: Option<Bytes>,
}

impl http_body::Body for SlowBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(first))));
        }
        if self.second.is_none() {
            return Poll::Ready(None);
        }
        std::task::ready!(self.pause.as_mut().poll(cx));
        let second = self.second.take().unwrap();
        Poll::Ready(Some(Ok(http_body::Frame::data(second))))
    }
}

async fn handle(
    state: Arc<BackendState>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<BackendBody>, std::io::Error> {
    let (parts, mut body) = request.into_parts();
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let seq = {
        let mut log = state.log.lock().unwrap();
        let seq = log.records.len();
        log.records.push(Record {
            seq,
            method: parts.method.to_string(),
            target: parts
                .uri
                .path_and_query()
                .map_or_else(|| parts.uri.to_string(), |pq| pq.as_str().to_string()),
            version: format!("{:?}", parts.version),
            headers: headers.clone(),
            token: get("x-fencing-token"),
            body_len: None,
            trailers: Vec::new(),
        });
        log.events.push(Event::Arrived(seq));
        seq
    };
    state.changed.notify_all();

    let mut body_len = 0u64;
    let mut trailers = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) => body_len += data.len() as u64,
                Err(frame) => {
                    if let Ok(map) = frame.into_trailers() {
                        for (k, v) in &map {
                            trailers.push((
                                k.as_str().to_string(),
                                String::from_utf8_lossy(v.as_bytes()).into_owned(),
                            ));
                        }
                    }
                }
            },
            Err(_) => break,
        }
    }
    {
        let mut log = state.log.lock().unwrap();
        log.records[seq].body_len = Some(body_len);
        log.records[seq].trailers = trailers;
    }
    state.changed.notify_all();

    if get("x-test-abort").is_some() {
        return Err(std::io::Error::other("aborted on request"));
    }
    if get("x-test-hang").is_some() {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    if let Some(ms) = get("x-test-delay-ms").and_then(|v| v.parse().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(name) = get("x-test-hold") {
        let mut released = state.released.subscribe();
        let _ = released.wait_for(|set| set.contains(&name)).await;
    }

    let status = get("x-test-status")
        .and_then(|v| v.parse().ok())
        .unwrap_or(200u16);
    let mut builder = hyper::Response::builder().status(status);
    for (k, v) in &headers {
        if k == "x-test-response-header" {
            if let Some((name, value)) = v.split_once(':') {
                builder = builder.header(name.trim(), value.trim());
            }
        }
    }
    let body_delay = get("x-test-body-delay-ms").and_then(|v| v.parse::<u64>().ok());
    let body: BackendBody = match get("x-test-response-bytes").and_then(|v| v.parse::<u64>().ok()) {
        Some(n) if body_delay.is_some() => {
            builder = builder.header("content-length", n.to_string());
            let half = (n / 2) as usize;
            BackendBody::new(SlowBody {
                first: Some(Bytes::from(vec![0u8; half])),
                pause: Box::pin(tokio::time::sleep(Duration::from_millis(
                    body_delay.unwrap(),
                ))),
                second: Some(Bytes::from(vec![0u8; n as usize - half])),
            })
        }
        Some(n) => BackendBody::new(Zeros { remaining: n }),
        None => {
            let echo = serde_json::json!({
                "seq": seq,
                "method": parts.method.as_str(),
                "target": parts.uri.to_string(),
                "headers": headers,
                "body_len": body_len,
            });
            builder = builder.header("content-type", "application/json");
            BackendBody::new(http_body_util::Full::new(Bytes::from(echo.to_string())))
        }
    };
    let response = builder.body(body).unwrap();
    state.log.lock().unwrap().events.push(Event::Responded(seq));
    state.changed.notify_all();
    Ok(response)
}

// ---------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------

/// The value of the sample `series` (name with labels, exactly as printed,
/// e.g. `fencegate_requests_total{outcome="forwarded"}`).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(series)?;
        let value = rest.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

pub fn outcome(text: &str, outcome: &str) -> f64 {
    metric(
        text,
        &format!("fencegate_requests_total{{outcome=\"{outcome}\"}}"),
    )
    .unwrap_or_else(|| panic!("no fencegate_requests_total{{outcome={outcome:?}}} in:\n{text}"))
}
