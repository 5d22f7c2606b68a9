//! Real processes for the lock-provider demos: lock servers started on
//! loopback with their own temporary data dirs, and worker processes (this
//! same example binary, re-executed) that a demo can freeze with SIGSTOP and
//! resume with SIGCONT.
//!
//! Every process started here is registered, and killed when its guard drops
//! and on Ctrl-C ([`install_ctrl_c_cleanup`]); so is every temporary dir made
//! with [`temp_dir`], which Ctrl-C removes too.

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::Result;

/// The script that installs the lock servers, named when one is missing.
pub const INSTALL_HINT: &str = "scripts/install-deps.sh";

/// A server that shuts down cleanly on a signal: it is sent that, then given
/// a while until `gone_when_stopped` is gone, before it is killed.
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

fn locked<T>(list: &Mutex<T>) -> MutexGuard<'_, T> {
    list.lock().unwrap_or_else(|e| e.into_inner())
}

fn signal(pid: u32, signal: Signal) {
    // The process may be gone already: nothing left to do then.
    _ = kill(Pid::from_raw(pid as i32), signal);
}

/// Takes `pids` out of the registry and stops them: the graceful ones with
/// their signal first, then (after `grace` at most) every one with SIGCONT,
/// so that a frozen one can die, and SIGKILL.
fn stop(pids: &[u32], grace: Duration) {
    let live: Vec<Live> = {
        let mut all = locked(&LIVE);
        let (stopping, staying) = all.drain(..).partition(|l| pids.contains(&l.pid));
        *all = staying;
        stopping
    };
    let graceful: Vec<&Graceful> = live.iter().filter_map(|l| l.graceful.as_ref()).collect();
    for l in &live {
        if let Some(graceful) = &l.graceful {
            signal(l.pid, graceful.signal);
        }
    }
    let deadline = Instant::now() + grace;
    while graceful.iter().any(|g| g.gone_when_stopped.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for l in &live {
        signal(l.pid, Signal::SIGCONT);
        signal(l.pid, Signal::SIGKILL);
    }
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
        let pids: Vec<u32> = locked(&LIVE).iter().map(|l| l.pid).collect();
        stop(&pids, Duration::from_secs(3));
        for dir in std::mem::take(&mut *locked(&DIRS)) {
            // A killed server may still be closing its files.
            for _ in 0..20 {
                if std::fs::remove_dir_all(&dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
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
        let paths = std::env::var_os("PATH").unwrap_or_default();
        let mut candidates = std::env::split_paths(&paths).map(|dir| dir.join(name));
        candidates.find(|candidate| candidate.is_file())
    };
    found.unwrap_or_else(|| {
        eprintln!("{name} is not installed: run {INSTALL_HINT}");
        std::process::exit(2);
    })
}

/// A free loopback port (bound, then released; good enough on one machine).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
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
        let child = command.stdin(Stdio::null()).stdout(out).stderr(err).spawn();
        let child = child.map_err(|e| format!("starting {name}: {e}"))?;
        locked(&LIVE).push(Live {
            pid: child.id(),
            graceful: None,
        });
        let (name, dir) = (name.to_owned(), Some(dir));
        Ok(Server {
            name,
            child,
            dir,
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

    /// Waits until something accepts TCP connections on `addr`, with the
    /// server's log in the error if nothing does within `timeout`.
    pub fn wait_ready(&mut self, addr: SocketAddr, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let exited = self.child.try_wait().ok().flatten();
        let (name, log) = (&self.name, self.log_tail());
        let error = format!("nothing listening on {addr} after {timeout:?}");
        Err(format!("{name} did not start ({error}; exit status {exited:?}); log:\n{log}").into())
    }

    /// Retries `probe` (say, opening a session) every 50 ms until it
    /// succeeds, for at most `timeout`, with the server's log in the error.
    pub async fn serving<T, F>(&self, timeout: Duration, mut probe: impl FnMut() -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            match probe().await {
                Ok(value) => return Ok(value),
                Err(e) if Instant::now() > deadline => {
                    let (name, log) = (&self.name, self.log_tail());
                    return Err(format!("{name} does not serve: {e}; log:\n{log}").into());
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        stop(&[self.child.id()], Duration::from_secs(5));
        // Killed already, unless Ctrl-C's cleanup took it off the registry.
        _ = self.child.kill();
        _ = self.child.wait();
        if let Some(dir) = self.dir.take() {
            locked(&DIRS).retain(|d| d != dir.path());
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
        let mut command = Command::new(std::env::current_exe()?);
        command.arg("--worker").arg(role).args(args);
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|e| format!("starting {name}: {e}"))?;
        locked(&LIVE).push(Live {
            pid: child.id(),
            graceful: None,
        });
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            return Err(format!("{name} has no stdin or stdout").into());
        };
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|line| line.ok()) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let name = name.to_owned();
        Ok(Worker {
            name,
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
        Ok(self.stdin.flush()?)
    }

    /// The next line the worker printed, waiting at most `timeout`; `None`
    /// once it has exited and every line was read.
    pub fn recv(&self, timeout: Duration) -> Result<Option<String>> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Ok(Some(line)),
            Err(RecvTimeoutError::Disconnected) => Ok(None),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("{} said nothing for {timeout:?}", self.name).into())
            }
        }
    }

    /// Every line printed so far, without waiting, and whether the worker
    /// has exited (its output is over).
    pub fn drain(&self) -> (Vec<String>, bool) {
        let mut lines = Vec::new();
        loop {
            match self.lines.try_recv() {
                Ok(line) => lines.push(line),
                Err(mpsc::TryRecvError::Empty) => return (lines, false),
                Err(mpsc::TryRecvError::Disconnected) => return (lines, true),
            }
        }
    }

    /// SIGSTOP: the whole process stops, as in a long GC pause.
    pub fn freeze(&self) -> Result<()> {
        Ok(kill(Pid::from_raw(self.pid() as i32), Signal::SIGSTOP)?)
    }

    /// SIGCONT: the process resumes where it was, unaware of the pause.
    pub fn resume(&self) -> Result<()> {
        Ok(kill(Pid::from_raw(self.pid() as i32), Signal::SIGCONT)?)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        stop(&[self.child.id()], Duration::ZERO);
        _ = self.child.kill();
        _ = self.child.wait();
    }
}

/// In a worker: reads command lines from stdin.
pub fn worker_commands() -> impl Iterator<Item = String> {
    std::io::stdin().lines().map_while(|line| line.ok())
}

/// In a worker: prints one line to the parent, flushed at once.
pub fn report(line: &str) {
    let mut out = std::io::stdout().lock();
    // The parent gone means nobody is left to tell.
    _ = writeln!(out, "{line}").and_then(|()| out.flush());
}
