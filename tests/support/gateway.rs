//! The real `fencegate` binary as a child process, runs to exit, `/metrics`.

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
// The gateway process
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Output {
    stdout: Vec<String>,
    stderr: Vec<String>,
    stdout_closed: bool,
}

/// The real `fencegate` binary, running. Killed on drop.
pub struct GatewayProcess {
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

impl GatewayProcess {
    /// Starts the gateway in front of `backend` (`--upstream`), with `extra`
    /// options.
    pub fn in_front_of(backend: &Backend, extra: &[&str]) -> GatewayProcess {
        let url = backend.url();
        let mut args = vec!["--upstream", url.as_str()];
        args.extend_from_slice(extra);
        GatewayProcess::start(&args)
    }

    /// Starts the gateway with `args`, adding `--listen 127.0.0.1:0
    /// --admin-listen 127.0.0.1:0` and a fresh temporary `--data-dir` unless
    /// given, and waits (bounded) until both addresses are printed.
    pub fn start(args: &[&str]) -> GatewayProcess {
        Self::start_full(&[], args, &[])
    }

    /// As [`start`](Self::start), with extra `FENCEGATE_*` (or other)
    /// environment variables. Every `FENCEGATE_*` variable inherited from the
    /// test's environment is removed first.
    pub fn start_with_env(args: &[&str], envs: &[(&str, &str)]) -> GatewayProcess {
        Self::start_full(&[], args, envs)
    }

    /// As [`start`](Self::start), but runs `wrapper... BIN args...`, e.g.
    /// a shell that sets resource limits and then `exec`s the binary.
    pub fn start_full(wrapper: &[&str], args: &[&str], envs: &[(&str, &str)]) -> GatewayProcess {
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
        let mut gateway = GatewayProcess {
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

impl Drop for GatewayProcess {
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

/// [`run_to_exit`] with both planes on free ports, then `extra`.
pub fn run_on_free_ports(extra: &[&str]) -> Finished {
    run_on_free_ports_with_env(extra, &[])
}

/// [`run_on_free_ports`] with `envs` as well.
pub fn run_on_free_ports_with_env(extra: &[&str], envs: &[(&str, &str)]) -> Finished {
    let mut args = vec!["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    run_to_exit(&args, envs)
}

/// What a run of the binary to completion produced.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// Asserts that the run failed with exactly one non-empty line on stderr
    /// besides logged warnings (a configuration's, such as two routes of
    /// different namespaces in front of one store) and no panic (`what`
    /// names the case); that line.
    pub fn start_error(&self, what: &str) -> &str {
        assert!(!self.status.success(), "{what}: {self:?}");
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.contains(" WARN "))
            .collect();
        assert_eq!(lines.len(), 1, "{what}: one line: {}", self.stderr);
        assert!(!self.stderr.contains("panicked"), "{what}: {}", self.stderr);
        lines[0]
    }
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

/// `fencegate_requests_total` of `outcome` summed over every identity
/// (credential custody labels requests with theirs).
pub fn outcome_all_identities(text: &str, outcome: &str) -> f64 {
    let start = format!("fencegate_requests_total{{outcome=\"{outcome}\"");
    text.lines()
        .filter(|line| line.starts_with(&start))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub fn outcome(text: &str, outcome: &str) -> f64 {
    metric(
        text,
        &format!("fencegate_requests_total{{outcome=\"{outcome}\"}}"),
    )
    .unwrap_or_else(|| panic!("no fencegate_requests_total{{outcome={outcome:?}}} in:\n{text}"))
}
