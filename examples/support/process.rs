//! Real processes for the lock-provider demos: lock servers on loopback with
//! their own temporary data dirs, and workers (this same example binary,
//! re-executed) that a demo can freeze with SIGSTOP and resume with SIGCONT.
//!
//! Every process started here is registered, and killed when its guard drops
//! and on Ctrl-C ([`install_ctrl_c_cleanup`]), which also removes every
//! temporary dir made with [`temp_dir`].

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::Result;

/// A live process started here. One that must clean up after itself is
/// stopped with `graceful`'s signal first, and given a while until its file
/// is gone, before it is killed.
struct Live {
    pid: u32,
    graceful: Option<(Signal, PathBuf)>,
}

/// Every live process started here.
static LIVE: Mutex<Vec<Live>> = Mutex::new(Vec::new());
/// The servers' temporary dirs, removed on Ctrl-C too.
static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Set once Ctrl-C (or SIGTERM) arrived.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn locked<T>(list: &Mutex<T>) -> MutexGuard<'_, T> {
    list.lock().unwrap_or_else(|e| e.into_inner())
}

fn signal(pid: u32, signal: Signal) {
    // A process that is gone already needs nothing more.
    _ = kill(Pid::from_raw(pid as i32), signal);
}

/// Takes `pids` off the registry and stops them: the graceful ones with
/// their signal, then (after `grace` at most) all with SIGCONT, so that a
/// frozen one can die, and SIGKILL.
fn stop(pids: &[u32], grace: Duration) {
    let live: Vec<Live> = {
        let mut all = locked(&LIVE);
        let (stopping, staying) = all.drain(..).partition(|l| pids.contains(&l.pid));
        *all = staying;
        stopping
    };
    let graceful: Vec<_> = live
        .iter()
        .filter_map(|l| Some((l.pid, l.graceful.as_ref()?)))
        .collect();
    graceful
        .iter()
        .for_each(|(pid, (sig, _))| signal(*pid, *sig));
    let deadline = Instant::now() + grace;
    while graceful.iter().any(|(_, (_, file))| file.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for l in &live {
        signal(l.pid, Signal::SIGCONT);
        signal(l.pid, Signal::SIGKILL);
    }
}

/// A temporary dir named `prefix...` (in `base`, or the system's temporary
/// dir), registered so that Ctrl-C removes it too.
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

/// On Ctrl-C (or SIGTERM): stop every server and worker started here,
/// remove the temporary dirs, exit 130. Call once, inside a multi-threaded
/// tokio runtime, at the start of a demo.
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
    let paths = std::env::var_os("PATH").unwrap_or_default();
    let mut candidates = std::env::split_paths(&paths).map(|dir| dir.join(name));
    let found = match name.starts_with('/') {
        true => Some(PathBuf::from(name)).filter(|path| path.is_file()),
        false => candidates.find(|candidate| candidate.is_file()),
    };
    found.unwrap_or_else(|| {
        eprintln!("{name} is not installed: run scripts/install-deps.sh");
        std::process::exit(2);
    })
}

/// A child process started here: registered for Ctrl-C's cleanup, stopped
/// (gracefully first, if it was set up for that) and killed on drop.
struct Proc {
    name: String,
    child: Child,
}

impl Proc {
    fn spawn(name: &str, command: &mut Command) -> Result<Proc> {
        let child = command
            .spawn()
            .map_err(|e| format!("starting {name}: {e}"))?;
        locked(&LIVE).push(Live {
            pid: child.id(),
            graceful: None,
        });
        let name = name.to_owned();
        Ok(Proc { name, child })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        stop(&[self.child.id()], Duration::from_secs(5));
        // Killed already, unless Ctrl-C's cleanup took it off the registry.
        _ = self.child.kill();
        _ = self.child.wait();
    }
}

/// A server process (redis-server, etcd, ...) with a temporary data dir;
/// stopped, and then its dir removed, on drop.
pub struct Server {
    proc: Proc,
    dir: tempfile::TempDir,
}

impl Server {
    /// Starts `command`, its output going to a log file in `dir` (best made
    /// with [`temp_dir`]).
    pub fn start(name: &str, command: &mut Command, dir: tempfile::TempDir) -> Result<Server> {
        let log = std::fs::File::create(dir.path().join("server.log"))?;
        let command = command.stdin(Stdio::null()).stdout(log.try_clone()?);
        let proc = Proc::spawn(name, command.stderr(log))?;
        Ok(Server { proc, dir })
    }

    /// Stops this server with `signal` first, then waits until `file` is
    /// gone (at most 5 s on drop, 3 s on Ctrl-C) before it is killed: for
    /// servers that must clean up after themselves (PostgreSQL removes its
    /// shared memory only when it shuts down itself).
    pub fn graceful(&mut self, signal: Signal, file: PathBuf) {
        let pid = self.pid();
        if let Some(live) = locked(&LIVE).iter_mut().find(|live| live.pid == pid) {
            live.graceful = Some((signal, file));
        }
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    /// Retries `probe` (a connection, a read) every 50 ms until it succeeds,
    /// for at most `timeout`; the error has the end of the server's log.
    pub async fn serving<T, F>(&self, timeout: Duration, mut probe: impl FnMut() -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            match probe().await {
                Ok(value) => return Ok(value),
                Err(e) if Instant::now() > deadline => {
                    let log = std::fs::read_to_string(self.dir.path().join("server.log"));
                    let log = log.unwrap_or_default();
                    let lines: Vec<&str> = log.lines().collect();
                    let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                    let name = &self.proc.name;
                    return Err(format!("{name} does not serve: {e}; log:\n{tail}").into());
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// A worker: this example re-executed with `--worker ROLE ARGS...`, which
/// reports on its stdout, one line at a time. It can be frozen with SIGSTOP
/// (a real stop-the-world pause: every thread stops) and resumed with
/// SIGCONT. Killed on drop.
pub struct Worker {
    proc: Proc,
    lines: Receiver<String>,
}

impl Worker {
    /// Starts `current_exe --worker role args...`.
    pub fn spawn(name: &str, role: &str, args: &[String]) -> Result<Worker> {
        let mut command = Command::new(std::env::current_exe()?);
        command.arg("--worker").arg(role).args(args);
        let mut proc = Proc::spawn(name, command.stdin(Stdio::null()).stdout(Stdio::piped()))?;
        let stdout = proc.child.stdout.take().ok_or("a worker without stdout")?;
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            // Ends when the worker exits or the demo stops listening.
            for line in BufReader::new(stdout).lines().map_while(|line| line.ok()) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Worker { proc, lines })
    }

    /// The worker's name in the demo.
    pub fn name(&self) -> &str {
        &self.proc.name
    }

    /// The worker's pid.
    pub fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    /// The next line the worker printed, waiting at most `timeout`: `None`
    /// if there was none by then, an error once the worker has exited.
    pub fn recv(&self, timeout: Duration) -> Result<Option<String>> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Ok(Some(line)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(format!("{} exited", self.name()).into()),
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
