//! Real processes for the lock-provider demos: lock servers started on
//! loopback with their own temporary data dirs, and worker processes (this
//! same example binary, re-executed) that a demo can freeze with SIGSTOP and
//! resume with SIGCONT.
//!
//! Every process started here is registered, and killed when its guard drops,
//! when the demo returns, and on Ctrl-C ([`install_ctrl_c_cleanup`]); so is
//! every temporary dir made with [`temp_dir`], which Ctrl-C removes too.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The one line printed when a server binary is missing.
pub const INSTALL_HINT: &str = "scripts/install-deps.sh";

/// A server that shuts down cleanly on a signal: sent it, then wait (for a
/// while) until `gone_when_stopped` is gone, before it is killed.
#[derive(Debug, Clone)]
struct Graceful {
    signal: Signal,
    gone_when_stopped: PathBuf,
}

/// A live process started here, for the Ctrl-C handler.
struct Live {
    pid: u32,
    graceful: Option<Graceful>,
}

/// Every live process started here.
static LIVE: Mutex<Vec<Live>> = Mutex::new(Vec::new());
/// Temporary dirs of the servers, removed on Ctrl-C too.
static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Set once Ctrl-C (or SIGTERM) arrived.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn locked<T>(list: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    list.lock().unwrap_or_else(|e| e.into_inner())
}

fn register(pid: u32) {
    locked(&LIVE).push(Live {
        pid,
        graceful: None,
    });
}

fn unregister(pid: u32) {
    locked(&LIVE).retain(|live| live.pid != pid);
}

/// A temporary dir named `prefix...` (in `base`, or the system's temporary
/// dir), registered so that Ctrl-C removes it; a [`Server`] given it removes
/// it when it stops.
pub fn temp_dir(prefix: &str, base: Option<&Path>) -> Result<tempfile::TempDir> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    let dir = match base {
        Some(base) => builder.tempdir_in(base)?,
        None => builder.tempdir()?,
    };
    locked(&DIRS).push(dir.path().to_owned());
    Ok(dir)
}

fn unregister_dir(path: &Path) {
    locked(&DIRS).retain(|dir| dir != path);
}

/// Sends `graceful.signal` to `pid`, waits at most `timeout` for the server
/// to stop.
fn stop_gracefully(pid: u32, graceful: &Graceful, timeout: Duration) {
    let _ = kill(Pid::from_raw(pid as i32), graceful.signal);
    let deadline = Instant::now() + timeout;
    while graceful.gone_when_stopped.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops every registered process: the graceful ones first (signal, then
/// 3 s at most for all of them), then SIGCONT (so a frozen one can die) and
/// SIGKILL for all; then removes every registered dir.
fn stop_all() {
    let live = std::mem::take(&mut *locked(&LIVE));
    let graceful: Vec<&Graceful> = live.iter().filter_map(|l| l.graceful.as_ref()).collect();
    for l in &live {
        if let Some(graceful) = &l.graceful {
            let _ = kill(Pid::from_raw(l.pid as i32), graceful.signal);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while graceful.iter().any(|g| g.gone_when_stopped.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for l in &live {
        let pid = Pid::from_raw(l.pid as i32);
        let _ = kill(pid, Signal::SIGCONT);
        let _ = kill(pid, Signal::SIGKILL);
    }
    let dirs = std::mem::take(&mut *locked(&DIRS));
    for dir in dirs {
        // A killed server may still be closing its files.
        for _ in 0..20 {
            if std::fs::remove_dir_all(&dir).is_ok() || !dir.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// On Ctrl-C (or SIGTERM): stop every server and worker started here (the
/// ones with a graceful stop, such as PostgreSQL, with their signal first),
/// remove the registered temporary dirs, exit 130. Call once, inside a
/// multi-threaded tokio runtime, at the start of a demo.
pub fn install_ctrl_c_cleanup() {
    tokio::spawn(async {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        INTERRUPTED.store(true, Ordering::SeqCst);
        stop_all();
        eprintln!("interrupted: servers and workers stopped, data dirs removed");
        std::process::exit(130);
    });
}

/// After Ctrl-C a run fails because its processes died: wait here (without
/// saying anything) for the Ctrl-C handler, which exits the process.
pub fn wait_if_interrupted() {
    while INTERRUPTED.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_secs(1));
    }
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
/// stopped (gracefully first, if it was set up with [`Server::graceful`]),
/// killed, and its data dir removed, on drop.
pub struct Server {
    name: String,
    child: Child,
    /// Removed on drop, once the server is gone.
    dir: Option<tempfile::TempDir>,
    log: PathBuf,
}

impl Server {
    /// Starts `command` (its stdout and stderr go to a log file in `dir`,
    /// best made with [`temp_dir`]).
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
            dir: Some(dir),
            log,
        })
    }

    /// Stop this server with `signal`, then wait until `gone_when_stopped`
    /// is gone (at most 5 s on drop, 3 s on Ctrl-C), before it is killed:
    /// for servers that must clean up after themselves (PostgreSQL removes
    /// its shared memory only when it shuts down itself).
    pub fn graceful(&mut self, signal: Signal, gone_when_stopped: PathBuf) {
        let pid = self.child.id();
        if let Some(live) = locked(&LIVE).iter_mut().find(|live| live.pid == pid) {
            live.graceful = Some(Graceful {
                signal,
                gone_when_stopped,
            });
        }
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
        let pid = self.child.id();
        let graceful = locked(&LIVE)
            .iter()
            .find(|live| live.pid == pid)
            .and_then(|live| live.graceful.clone());
        if let Some(graceful) = graceful {
            stop_gracefully(pid, &graceful, Duration::from_secs(5));
        }
        unregister(pid);
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = self.dir.take() {
            let path = dir.path().to_owned();
            drop(dir);
            unregister_dir(&path);
        }
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
