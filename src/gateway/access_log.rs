//! The access log (`--access-log PATH`): one JSON object per line per data
//! plane request, written once its response has been relayed (or failed).
//!
//! A line is serialized straight into a shared buffer (a lock held for the
//! few hundred nanoseconds that takes, no allocation of its own); one writer
//! thread takes the buffer every [`FLUSH_EVERY`], or as soon as it holds
//! [`FLUSH_SIZE`] bytes, and writes it with one system call. Not a channel
//! per line: that wakes the writer on every request (a futex and a `write`
//! each), which halved the throughput of the core the gateway runs on
//! (docs/BENCHMARKS.md). If the disk falls so far behind
//! that [`MAX_BUFFERED`] bytes wait, lines are dropped and counted
//! (`fencegate_access_log_dropped_total`) rather than slowing requests or
//! growing memory without bound. With the log off, none of this exists: the
//! data plane holds an `Option`.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use http::{Method, StatusCode, Uri};
use serde::{Serialize, Serializer};

use super::clock;
use super::config::AccessLogTarget;
use super::outcome::RequestOutcome;

/// How long a line may wait in memory before it is written.
const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// A buffer this full is written at once.
const FLUSH_SIZE: usize = 256 * 1024;
/// Past this many waiting bytes, lines are dropped.
const MAX_BUFFERED: usize = 16 * 1024 * 1024;

/// The access log, shared by every connection. Cheap to clone.
#[derive(Clone)]
pub(crate) struct AccessLog {
    shared: Arc<LogShared>,
}

struct LogShared {
    /// Lines not yet written. A std mutex: held to append one line or to
    /// swap the buffer out, never across I/O.
    buffer: Mutex<Vec<u8>>,
    /// Wakes the writer early (a full buffer, or closing).
    wake: Condvar,
    closed: AtomicBool,
    dropped: AtomicU64,
    warned: AtomicBool,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog")
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

impl AccessLog {
    /// Opens `target` (a file is created if missing and appended to) and
    /// starts the writer thread.
    pub(crate) fn open(target: &AccessLogTarget) -> std::io::Result<AccessLog> {
        let out: Box<dyn Write + Send> = match target {
            AccessLogTarget::Stdout => Box::new(std::io::stdout()),
            AccessLogTarget::File(path) => {
                Box::new(OpenOptions::new().create(true).append(true).open(path)?)
            }
        };
        let shared = Arc::new(LogShared {
            buffer: Mutex::new(Vec::with_capacity(FLUSH_SIZE)),
            wake: Condvar::new(),
            closed: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            warned: AtomicBool::new(false),
            writer: Mutex::new(None),
        });
        let writer = std::thread::Builder::new()
            .name("fencegate-access-log".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || write_loop(&shared, out)
            })?;
        *lock(&shared.writer) = Some(writer);
        Ok(AccessLog { shared })
    }

    /// Lines dropped because the writer fell behind.
    pub(crate) fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Writes what is buffered and stops the writer; later lines are
    /// dropped. Called at shutdown, after the last request.
    pub(crate) fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        if let Some(writer) = lock(&self.shared.writer).take() {
            let _ = writer.join();
        }
    }

    fn append(&self, line: &Line<'_>) {
        let shared = &self.shared;
        let mut buffer = lock(&shared.buffer);
        if buffer.len() >= MAX_BUFFERED || shared.closed.load(Ordering::Relaxed) {
            drop(buffer);
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            if !shared.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!("the access log cannot keep up: lines are being dropped (see fencegate_access_log_dropped_total)");
            }
            return;
        }
        let start = buffer.len();
        if serde_json::to_writer(&mut *buffer, line).is_err() {
            // Nothing of a line that failed half-way stays behind.
            buffer.truncate(start);
            return;
        }
        buffer.push(b'\n');
        if buffer.len() >= FLUSH_SIZE {
            shared.wake.notify_one();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Appending or swapping leaves the buffer consistent whatever happens.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes the buffer every [`FLUSH_EVERY`] (sooner when it is full) and
/// writes it, until closed; then writes what is left.
fn write_loop(shared: &LogShared, mut out: Box<dyn Write + Send>) {
    let mut spare = Vec::with_capacity(FLUSH_SIZE);
    loop {
        let closed = {
            let buffer = lock(&shared.buffer);
            let (mut buffer, _) = shared
                .wake
                .wait_timeout_while(buffer, FLUSH_EVERY, |buffer| {
                    buffer.len() < FLUSH_SIZE && !shared.closed.load(Ordering::Acquire)
                })
                .unwrap_or_else(PoisonError::into_inner);
            std::mem::swap(&mut *buffer, &mut spare);
            shared.closed.load(Ordering::Acquire)
        };
        if !spare.is_empty() {
            if let Err(error) = out.write_all(&spare).and_then(|()| out.flush()) {
                tracing::error!(%error, "cannot write the access log");
            }
            spare.clear();
        }
        if closed {
            break;
        }
    }
}

/// One request's line, filled in as the request goes and written when it
/// is dropped: with the response body once relayed, or with the request if
/// the client went away before an answer (status 499, as nginx logs it).
#[derive(Debug)]
pub(crate) struct LogEntry {
    log: AccessLog,
    started: Instant,
    client: SocketAddr,
    /// Cloned from the request (the URI's bytes are shared, not copied);
    /// `None` for a head refused before it could be read as a request.
    request: Option<(Method, Uri)>,
    key: Option<String>,
    token: Option<u64>,
    /// The `[[route]]` that took it (`default` without routes).
    pub(crate) route: Option<Arc<str>>,
    /// Credential custody: the identity the request authenticated as.
    pub(crate) identity: Option<String>,
    /// `--enforce report`: why `on` would have refused it.
    pub(crate) would_refuse: Option<&'static str>,
    answered: Option<(RequestOutcome, StatusCode)>,
    /// The response body failed after its head was out, and why.
    cut: Option<RequestOutcome>,
    pub(crate) bytes_in: Arc<AtomicU64>,
    pub(crate) bytes_out: u64,
}

#[derive(Serialize)]
struct Line<'a> {
    #[serde(serialize_with = "rfc3339")]
    time: SystemTime,
    #[serde(serialize_with = "display")]
    client: SocketAddr,
    method: Option<&'a str>,
    path: Option<&'a str>,
    route: Option<&'a str>,
    key: Option<&'a str>,
    token: Option<u64>,
    identity: Option<&'a str>,
    outcome: &'static str,
    would_refuse: Option<&'static str>,
    status: u16,
    upstream_status: Option<u16>,
    bytes_in: u64,
    bytes_out: u64,
    duration_ms: f64,
}

impl LogEntry {
    pub(crate) fn new(
        log: &AccessLog,
        started: Instant,
        client: SocketAddr,
        request: Option<(Method, Uri)>,
        fence: (Option<String>, Option<u64>),
    ) -> LogEntry {
        LogEntry {
            log: log.clone(),
            started,
            client,
            request,
            key: fence.0,
            token: fence.1,
            route: None,
            identity: None,
            would_refuse: None,
            answered: None,
            cut: None,
            bytes_in: Arc::new(AtomicU64::new(0)),
            bytes_out: 0,
        }
    }

    /// The fence key and token, once known.
    pub(crate) fn fence(&mut self, fence: (Option<String>, Option<u64>)) {
        (self.key, self.token) = fence;
    }

    /// The response headers are out.
    pub(crate) fn answered(&mut self, outcome: RequestOutcome, status: StatusCode) {
        self.answered = Some((outcome, status));
    }

    /// The response body failed after its head was out, for `why`
    /// (`upstream_error`, `fence_store_unavailable`): the line says so, with
    /// the status the client already had.
    pub(crate) fn cut(&mut self, why: RequestOutcome) {
        self.cut = Some(why);
    }
}

impl Drop for LogEntry {
    fn drop(&mut self) {
        let (outcome, status, upstream_status) = match self.answered {
            Some((outcome, status)) => (
                self.cut.unwrap_or(outcome),
                status.as_u16(),
                (outcome == RequestOutcome::Forwarded).then_some(status.as_u16()),
            ),
            None => (RequestOutcome::ClientError, 499, None),
        };
        let line = Line {
            time: SystemTime::now(),
            client: self.client,
            method: self.request.as_ref().map(|(method, _)| method.as_str()),
            path: self.request.as_ref().map(|(_, uri)| uri.path()),
            route: self.route.as_deref(),
            key: self.key.as_deref(),
            token: self.token,
            identity: self.identity.as_deref(),
            outcome: outcome.as_str(),
            would_refuse: self.would_refuse,
            status,
            upstream_status,
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out,
            duration_ms: (clock::now_std()
                .saturating_duration_since(self.started)
                .as_secs_f64()
                * 1e6)
                .round()
                / 1e3,
        };
        self.log.append(&line);
    }
}

fn rfc3339<S: Serializer>(time: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&humantime::format_rfc3339_millis(*time))
}

fn display<S: Serializer, T: std::fmt::Display>(
    value: &T,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}
