//! The access log (`--access-log PATH`): one JSON object per line per data
//! plane request, written once its response has been relayed (or failed).
//!
//! Lines are formatted on the request's task and handed to one writer thread
//! through a bounded queue, so that a slow disk never stalls a request: when
//! the queue is full the line is dropped and counted
//! (`fencegate_access_log_dropped_total`), and a warning says so once.
//! With the log off, none of this exists: the data plane holds an `Option`.

use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use http::{Method, StatusCode};
use serde::Serialize;

use super::config::AccessLogTarget;
use super::outcome::Outcome;

/// Lines waiting for the writer; past this, lines are dropped.
const QUEUE: usize = 64 * 1024;

/// The access log's writer, shared by every connection.
#[derive(Debug, Clone)]
pub struct AccessLog {
    queue: mpsc::SyncSender<String>,
    dropped: Arc<AtomicU64>,
    warned: Arc<AtomicBool>,
}

impl AccessLog {
    /// Opens `target` (a file is created if missing and appended to) and
    /// starts the writer thread.
    pub fn open(target: &AccessLogTarget) -> std::io::Result<AccessLog> {
        let out: Box<dyn Write + Send> = match target {
            AccessLogTarget::Stdout => Box::new(std::io::stdout()),
            AccessLogTarget::File(path) => {
                Box::new(OpenOptions::new().create(true).append(true).open(path)?)
            }
        };
        let (queue, lines) = mpsc::sync_channel::<String>(QUEUE);
        std::thread::Builder::new()
            .name("fencegate-access-log".into())
            .spawn(move || write_lines(BufWriter::new(out), lines))?;
        Ok(AccessLog {
            queue,
            dropped: Arc::new(AtomicU64::new(0)),
            warned: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Lines dropped because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn write(&self, line: String) {
        if self.queue.try_send(line).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!("the access log cannot keep up: lines are being dropped (see fencegate_access_log_dropped_total)");
            }
        }
    }
}

/// Writes lines as they come, flushing whenever the queue is empty, so
/// that a line is on disk soon after its request and bursts share a write.
fn write_lines(mut out: BufWriter<Box<dyn Write + Send>>, lines: mpsc::Receiver<String>) {
    while let Ok(line) = lines.recv() {
        let mut next = Some(line);
        while let Some(line) = next {
            if let Err(error) = out.write_all(line.as_bytes()) {
                tracing::error!(%error, "cannot write the access log");
            }
            next = lines.try_recv().ok();
        }
        if let Err(error) = out.flush() {
            tracing::error!(%error, "cannot write the access log");
        }
    }
}

/// One request's line, filled in as the request goes and written when it
/// is dropped: with the response body once relayed, or with the request if
/// the client went away before an answer (status 499, as nginx logs it).
#[derive(Debug)]
pub(crate) struct Entry {
    log: AccessLog,
    started: Instant,
    client: SocketAddr,
    method: Method,
    path: String,
    key: Option<String>,
    token: Option<u64>,
    answered: Option<(Outcome, StatusCode)>,
    pub(crate) bytes_in: Arc<AtomicU64>,
    pub(crate) bytes_out: u64,
}

#[derive(Serialize)]
struct Line<'a> {
    time: String,
    client: String,
    method: &'a str,
    path: &'a str,
    key: Option<&'a str>,
    token: Option<u64>,
    outcome: &'static str,
    status: u16,
    upstream_status: Option<u16>,
    bytes_in: u64,
    bytes_out: u64,
    duration_ms: f64,
}

impl Entry {
    pub(crate) fn new(
        log: &AccessLog,
        client: SocketAddr,
        method: Method,
        path: String,
        fence: (Option<String>, Option<u64>),
    ) -> Entry {
        Entry {
            log: log.clone(),
            started: Instant::now(),
            client,
            method,
            path,
            key: fence.0,
            token: fence.1,
            answered: None,
            bytes_in: Arc::new(AtomicU64::new(0)),
            bytes_out: 0,
        }
    }

    /// The response headers are out.
    pub(crate) fn answered(&mut self, outcome: Outcome, status: StatusCode) {
        self.answered = Some((outcome, status));
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let (outcome, status, upstream_status) = match self.answered {
            Some((outcome, status)) => (
                outcome,
                status.as_u16(),
                (outcome == Outcome::Forwarded).then_some(status.as_u16()),
            ),
            None => (Outcome::ClientError, 499, None),
        };
        let line = Line {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            client: self.client.to_string(),
            method: self.method.as_str(),
            path: &self.path,
            key: self.key.as_deref(),
            token: self.token,
            outcome: outcome.as_str(),
            status,
            upstream_status,
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out,
            duration_ms: (self.started.elapsed().as_secs_f64() * 1e6).round() / 1e3,
        };
        if let Ok(mut text) = serde_json::to_string(&line) {
            text.push('\n');
            self.log.write(text);
        }
    }
}

pin_project_lite::pin_project! {
    /// A request body that counts its bytes into an [`Entry`]'s `bytes_in`.
    pub(crate) struct Counted<B> {
        #[pin]
        body: B,
        count: Arc<AtomicU64>,
    }
}

impl<B> Counted<B> {
    pub(crate) fn new(body: B, count: Arc<AtomicU64>) -> Self {
        Counted { body, count }
    }
}

impl<B: http_body::Body> http_body::Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.body.poll_frame(cx));
        if let Some(Ok(frame)) = &frame {
            if let Some(data) = frame.data_ref() {
                this.count
                    .fetch_add(bytes::Buf::remaining(data) as u64, Ordering::Relaxed);
            }
        }
        std::task::Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
