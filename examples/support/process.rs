//! Real processes for the lock-provider demos: lock servers started on
//! loopback with their own temporary data dirs, and worker processes (this
//! same example binary, re-executed) that a demo can freeze with SIGSTOP and
//! resume with SIGCONT.
//!
//! Every process started here is registered, and killed when its guard drops,
//! when the demo returns, and on Ctrl-C ([`install_ctrl_c_cleanup`]).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The one line printed when a server binary is missing.
pub const INSTALL_HINT: &str = "scripts/install-deps.sh";

/// Pids of every live process started here, for the Ctrl-C handler.
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn register(pid: u32) {
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
}

fn unregister(pid: u32) {
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|p| *p != pid);
}

/// Kills every registered process (SIGCONT first, so a frozen one can die).
pub fn kill_all() {
    let pids = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    for pid in pids {
        let pid = Pid::from_raw(pid as i32);
        let _ = kill(pid, Signal::SIGCONT);
        let _ = kill(pid, Signal::SIGKILL);
    }
}

/// On Ctrl-C (or SIGTERM), kill every process started here and exit 130.
/// Call once, inside a tokio runtime, at the start of a demo.
pub fn install_ctrl_c_cleanup() {
    tokio::spawn(async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        kill_all();
        eprintln!("interrupted: servers and workers stopped");
        std::process::exit(130);
    });
}

/// Finds a server binary (a name on PATH or an absolute path); when it is
/// missing, prints one line naming the install script and exits 2.
pub fn require_binary(name: &str) -> PathBuf {
    let found = if name.starts_with('/') {
        Path::new(name).is_file().then(|| PathBuf::from(name))
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
    };
    match found {
        Some(path) => path,
        None => {
            eprintln!("{name} is not installed: run {INSTALL_HINT}");
            std::process::exit(2);
        }
    }
}

/// A free loopback port (bound, then released; good enough on one machine).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until something accepts TCP connections on `addr`.
pub fn wait_for_port(addr: SocketAddr, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("nothing listening on {addr} after {timeout:?}")
}

/// A server process (redis-server, etcd, ...) with a temporary data dir;
/// killed, and its data dir removed, on drop.
pub struct Server {
    name: String,
    child: Child,
    /// Kept for its `Drop`, which deletes the directory.
    _dir: tempfile::TempDir,
    log: PathBuf,
}

impl Server {
    /// Starts `command` (its stdout and stderr go to a log file in `dir`).
    pub fn start(name: &str, mut command: Command, dir: tempfile::TempDir) -> Result<Server> {
        let log = dir.path().join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        let err = out.try_clone()?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        register(child.id());
        Ok(Server {
            name: name.to_owned(),
            child,
            _dir: dir,
            log,
        })
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of the server's log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// Waits for the server's port, with its log in the error if it never opens.
    pub fn wait_ready(&mut self, addr: SocketAddr, timeout: Duration) -> Result<()> {
        if let Err(error) = wait_for_port(addr, timeout) {
            let exited = self.child.try_wait().ok().flatten();
            bail!(
                "{} did not start ({error}; exit status {exited:?}); log:\n{}",
                self.name,
                self.log_tail()
            );
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        unregister(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A worker: this example re-executed with `--worker ROLE ARGS...`. It talks
/// over stdin/stdout lines, and can be frozen with SIGSTOP (a real
/// stop-the-world pause: every thread of the process stops) and resumed with
/// SIGCONT. Killed on drop.
pub struct Worker {
    name: String,
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Worker {
    /// Starts `current_exe --worker role args...`.
    pub fn spawn(name: &str, role: &str, args: &[String]) -> Result<Worker> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .arg("--worker")
            .arg(role)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting worker {name}"))?;
        register(child.id());
        let stdin = child.stdin.take().context("worker stdin")?;
        let stdout = child.stdout.take().context("worker stdout")?;
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Worker {
            name: name.to_owned(),
            child,
            stdin,
            lines,
        })
    }

    /// The worker's name in the demo.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The worker's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one command line.
    pub fn send(&mut self, line: &str) -> Result<()> {
        writeln!(self.stdin, "{line}")?;
        self.stdin.flush()?;
        Ok(())
    }

    /// The next line the worker printed, waiting at most `timeout`.
    pub fn recv(&self, timeout: Duration) -> Result<String> {
        self.lines
            .recv_timeout(timeout)
            .with_context(|| format!("worker {} said nothing for {timeout:?}", self.name))
    }

    /// Every line already printed, without waiting.
    pub fn drain(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    /// SIGSTOP: the whole process stops, as in a long GC pause.
    pub fn freeze(&self) -> Result<()> {
        kill(Pid::from_raw(self.pid() as i32), Signal::SIGSTOP)?;
        Ok(())
    }

    /// SIGCONT: the process resumes where it was, unaware of the pause.
    pub fn resume(&self) -> Result<()> {
        kill(Pid::from_raw(self.pid() as i32), Signal::SIGCONT)?;
        Ok(())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        unregister(self.child.id());
        let pid = Pid::from_raw(self.child.id() as i32);
        let _ = kill(pid, Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// In a worker: reads command lines from stdin.
pub fn worker_commands() -> impl Iterator<Item = String> {
    std::io::stdin().lines().map_while(|line| line.ok())
}

/// In a worker: prints one line to the parent, flushed at once.
pub fn report(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
