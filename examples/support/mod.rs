//! Shared pieces of the fencing demos (`mod support;` in each example):
//!
//! - [`Timeline`]: records `(time, lane, text)` events from every actor and
//!   renders them as an ASCII sequence diagram, one column per actor.
//! - [`LeaseLock`]: an in-process lease lock. Every grant carries a fencing
//!   token that only grows (33, 34, ...); a lease ends by real elapsed time.
//! - [`Storage`]: fencegate's embedded object store served on its own loopback
//!   port, unfenced, with a tap that puts what it stores on the timeline.
//! - [`start_gateway`]: a real fencegate in this process, in front of a
//!   [`Storage`].
//! - [`call`]: a tiny HTTP/1.1 client (one TCP connection per request).
//! - [`process`]: real server and worker processes for the lock-provider
//!   demos (SIGSTOP/SIGCONT, cleanup on drop and on Ctrl-C).
//! - [`lock_demo`]: the scenario of `etcd_lock`, `zookeeper_lock` and
//!   `postgres_lock` (worker processes, SIGSTOP past the lease, two runs);
//!   [`etcd`], [`zookeeper`], [`postgres`]: their servers and clients.
//! - [`spawn_process`] and [`freeze`]: each client runs on its own OS thread
//!   with its own runtime, so a simulated stop-the-world pause freezes the
//!   client and everything it runs, and nothing else.

#![allow(dead_code)]

pub mod etcd;
pub mod lock_demo;
pub mod postgres;
pub mod process;
pub mod redis;
pub mod zookeeper;

use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use fencegate::gateway::embedded::{self, ObjectStore};
use fencegate::gateway::upstream::Upstream;
use fencegate::gateway::{Config, Gateway, StateKind};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tower::ServiceExt;

/// Any error, with a message fit for one line.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// A result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The header carrying the token (fencegate's default).
pub const TOKEN_HEADER: &str = "x-fencing-token";

// ---------------------------------------------------------------------------
// Timeline
// ---------------------------------------------------------------------------

/// The rendered diagram is at most this wide.
const WIDTH: usize = 100;
/// Width of the time column on the left.
const TIME_COL: usize = 9;
/// A quiet stretch longer than this gets an empty row, so that long waits
/// are visible at a glance.
const GAP: Duration = Duration::from_millis(120);

/// One actor's column in the diagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane(usize);

#[derive(Debug)]
enum Kind {
    /// Something an actor did or saw on its own.
    Note { lane: Lane, text: String },
    /// A message (request or reply) from one actor to another.
    Msg {
        from: Lane,
        to: Lane,
        text: String,
        refused: bool,
    },
    /// From here on the lane's lifeline is frozen.
    PauseBegin { lane: Lane, text: String },
    /// The lane runs again.
    PauseEnd { lane: Lane, text: String },
}

#[derive(Debug)]
struct Event {
    at: Duration,
    seq: usize,
    kind: Kind,
}

#[derive(Debug)]
struct TimelineInner {
    start: Instant,
    lanes: Vec<String>,
    events: Mutex<Vec<Event>>,
}

/// Collects events from every actor (any thread) and renders them.
#[derive(Debug, Clone)]
pub struct Timeline {
    inner: Arc<TimelineInner>,
}

impl Timeline {
    /// A timeline with these lanes, left to right; time 0 is now.
    pub fn new(lanes: &[&str]) -> Self {
        Timeline {
            inner: Arc::new(TimelineInner {
                start: Instant::now(),
                lanes: lanes.iter().map(|l| (*l).to_owned()).collect(),
                events: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The lane named `name`, if the timeline has one.
    pub fn find_lane(&self, name: &str) -> Option<Lane> {
        self.inner.lanes.iter().position(|l| l == name).map(Lane)
    }

    /// The lane named `name`; panics if there is none (a bug in the demo).
    pub fn lane(&self, name: &str) -> Lane {
        self.find_lane(name)
            .unwrap_or_else(|| panic!("timeline has no lane {name:?}"))
    }

    /// A lane's name.
    pub fn name(&self, lane: Lane) -> &str {
        &self.inner.lanes[lane.0]
    }

    /// Time since the timeline started.
    pub fn elapsed(&self) -> Duration {
        self.inner.start.elapsed()
    }

    fn events(&self) -> MutexGuard<'_, Vec<Event>> {
        // A panicking actor must not hide the rest of the timeline.
        self.inner
            .events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push_at(&self, at: Instant, kind: Kind) {
        let at = at.saturating_duration_since(self.inner.start);
        let mut events = self.events();
        let seq = events.len();
        events.push(Event { at, seq, kind });
    }

    fn push(&self, kind: Kind) {
        self.push_at(Instant::now(), kind);
    }

    /// Something `lane` did or saw, now.
    pub fn note(&self, lane: Lane, text: impl Into<String>) {
        self.push(Kind::Note {
            lane,
            text: text.into(),
        });
    }

    /// Something that happened at `at` (possibly noticed only later, such as
    /// a lease running out).
    pub fn note_at(&self, at: Instant, lane: Lane, text: impl Into<String>) {
        self.push_at(
            at,
            Kind::Note {
                lane,
                text: text.into(),
            },
        );
    }

    /// A message from one actor to another, now.
    pub fn msg(&self, from: Lane, to: Lane, text: impl Into<String>) {
        self.push(Kind::Msg {
            from,
            to,
            text: text.into(),
            refused: false,
        });
    }

    /// A refusal sent by `from` (drawn with an `X` on its lifeline).
    pub fn refused(&self, from: Lane, to: Lane, text: impl Into<String>) {
        self.push(Kind::Msg {
            from,
            to,
            text: text.into(),
            refused: true,
        });
    }

    /// A message that was sent at `at` (reported later, e.g. by a worker
    /// process that stamped it itself).
    pub fn msg_at(&self, at: Instant, from: Lane, to: Lane, text: impl Into<String>) {
        self.push_at(
            at,
            Kind::Msg {
                from,
                to,
                text: text.into(),
                refused: false,
            },
        );
    }

    /// A refusal that was sent at `at` (drawn with an `X` on `from`'s lifeline).
    pub fn refused_at(&self, at: Instant, from: Lane, to: Lane, text: impl Into<String>) {
        self.push_at(
            at,
            Kind::Msg {
                from,
                to,
                text: text.into(),
                refused: true,
            },
        );
    }

    /// `lane` freezes (its lifeline is drawn `~` until [`Timeline::pause_end`]).
    pub fn pause_begin(&self, lane: Lane, text: impl Into<String>) {
        self.push(Kind::PauseBegin {
            lane,
            text: text.into(),
        });
    }

    /// `lane` runs again.
    pub fn pause_end(&self, lane: Lane, text: impl Into<String>) {
        self.push(Kind::PauseEnd {
            lane,
            text: text.into(),
        });
    }

    /// `lane` runs again since `at` (for a pause ended by a signal sent at
    /// `at`, stamped before the resumed process could report anything).
    pub fn pause_end_at(&self, at: Instant, lane: Lane, text: impl Into<String>) {
        self.push_at(
            at,
            Kind::PauseEnd {
                lane,
                text: text.into(),
            },
        );
    }

    /// The ASCII sequence diagram: time runs down, one column per lane.
    pub fn render(&self) -> String {
        let lanes = &self.inner.lanes;
        let n = lanes.len().max(1);
        let lane_width = (WIDTH - TIME_COL) / n;
        let center = |lane: Lane| TIME_COL + lane.0 * lane_width + lane_width / 2;
        let all: Vec<Lane> = (0..lanes.len()).map(Lane).collect();

        let mut out = String::new();
        let mut header = blank();
        put(&mut header, 0, "   t (ms)");
        let mut rule = blank();
        for &lane in &all {
            let name = &lanes[lane.0];
            let start = center(lane).saturating_sub(name.len() / 2);
            put(&mut header, start, name);
            put(&mut rule, start, &"=".repeat(name.len()));
        }
        push_row(&mut out, header);
        push_row(&mut out, rule);

        let mut events = self.events();
        events.sort_by_key(|e| (e.at, e.seq));
        let mut paused = vec![false; lanes.len()];
        let lifelines = |paused: &[bool]| {
            let mut row = blank();
            for &lane in &all {
                row[center(lane)] = if paused[lane.0] { '~' } else { '|' };
            }
            row
        };
        let mut last: Option<Duration> = None;
        for event in events.iter() {
            if last.is_some_and(|last| event.at.saturating_sub(last) > GAP) {
                let mut row = lifelines(&paused);
                put(&mut row, 0, "      .");
                push_row(&mut out, row);
            }
            last = Some(event.at);
            let mut row = lifelines(&paused);
            put(
                &mut row,
                0,
                &format!("{:>7}  ", event.at.as_millis().to_string()),
            );
            match &event.kind {
                Kind::Note { lane, text } => {
                    row[center(*lane)] = 'o';
                    place_note(&mut row, center(*lane), text);
                }
                Kind::PauseBegin { lane, text } => {
                    row[center(*lane)] = '#';
                    place_note(&mut row, center(*lane), text);
                    paused[lane.0] = true;
                }
                Kind::PauseEnd { lane, text } => {
                    row[center(*lane)] = '#';
                    place_note(&mut row, center(*lane), text);
                    paused[lane.0] = false;
                }
                Kind::Msg {
                    from,
                    to,
                    text,
                    refused,
                } => place_arrow(&mut row, center(*from), center(*to), text, *refused),
            }
            push_row(&mut out, row);
        }
        out
    }
}

/// What the symbols in a rendered timeline mean.
pub fn legend() -> &'static str {
    "legend: ---> message   o event   # pause starts/ends   ~ frozen lifeline   X refusal"
}

fn blank() -> Vec<char> {
    vec![' '; WIDTH]
}

fn put(row: &mut Vec<char>, start: usize, text: &str) {
    for (i, c) in text.chars().enumerate() {
        let x = start + i;
        if x >= row.len() {
            row.resize(x + 1, ' ');
        }
        row[x] = c;
    }
}

fn push_row(out: &mut String, row: Vec<char>) {
    let line: String = row.into_iter().collect();
    out.push_str(line.trim_end());
    out.push('\n');
}

/// Text next to a lane: to its right if it fits, else to its left.
fn place_note(row: &mut Vec<char>, center: usize, text: &str) {
    let len = text.chars().count();
    let start = if center + 2 + len <= WIDTH {
        center + 2
    } else if center >= TIME_COL + len + 2 {
        center - 1 - len
    } else {
        WIDTH.saturating_sub(len).max(TIME_COL)
    };
    put(row, start, text);
}

/// An arrow between two lanes, its label on it if it fits, else beside it.
fn place_arrow(row: &mut Vec<char>, from: usize, to: usize, text: &str, refused: bool) {
    let (lo, hi) = (from.min(to), from.max(to));
    for cell in &mut row[lo + 1..hi] {
        *cell = '-';
    }
    if to > from {
        row[hi - 1] = '>';
    } else {
        row[lo + 1] = '<';
    }
    if refused {
        row[from] = 'X';
    }
    let interior = hi - lo - 1;
    let label = format!(" {text} ");
    let len = label.chars().count();
    if len + 4 <= interior {
        put(row, lo + 1 + (interior - len) / 2, &label);
        return;
    }
    let len = text.chars().count();
    if hi + 2 + len <= WIDTH {
        put(row, hi + 2, text);
    } else if lo >= TIME_COL + len + 2 {
        put(row, lo - 1 - len, text);
    } else {
        put(row, lo + 2, text);
    }
}

// ---------------------------------------------------------------------------
// Lease lock
// ---------------------------------------------------------------------------

/// How often a waiting client asks the lock again.
const POLL: Duration = Duration::from_millis(10);

/// A granted lease, as its holder knows it.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    /// The fencing token of this grant.
    pub token: u64,
    /// When the lease was granted.
    pub granted: Instant,
    /// When it runs out, by the lock's (and here also the client's) clock.
    pub expires: Instant,
}

impl Lease {
    /// Lease time left, as the holder would compute it right now.
    pub fn remaining(&self) -> Duration {
        self.expires.saturating_duration_since(Instant::now())
    }
}

/// The answer to one acquisition attempt.
#[derive(Debug, Clone, Copy)]
pub enum TryAcquire {
    /// The lock is yours, with this lease.
    Granted(Lease),
    /// Someone else holds a live lease.
    Busy {
        /// Who.
        holder: Lane,
        /// Lease time they have left.
        left: Duration,
    },
}

#[derive(Debug, Clone, Copy)]
struct Held {
    token: u64,
    holder: Lane,
    expires: Instant,
}

#[derive(Debug)]
struct LockState {
    next_token: u64,
    held: Option<Held>,
}

/// An in-process lease lock: one holder at a time, a lease that ends by real
/// elapsed time whatever the holder is doing, and a fencing token that grows
/// with every grant. It stands in for etcd, ZooKeeper, Redis, Chubby...
#[derive(Debug)]
pub struct LeaseLock {
    timeline: Timeline,
    lane: Lane,
    state: Mutex<LockState>,
}

impl LeaseLock {
    /// A free lock whose first grant carries `first_token`.
    pub fn new(timeline: &Timeline, first_token: u64) -> Arc<Self> {
        Arc::new(LeaseLock {
            timeline: timeline.clone(),
            lane: timeline.lane("lock"),
            state: Mutex::new(LockState {
                next_token: first_token,
                held: None,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, LockState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Forgets a lease that has run out, putting the moment it ran out on
    /// the timeline.
    fn expire(&self, state: &mut LockState, now: Instant) {
        if let Some(held) = state.held {
            if now >= held.expires {
                self.timeline.note_at(
                    held.expires,
                    self.lane,
                    format!(
                        "lease of token {} ({}) expires",
                        held.token,
                        self.timeline.name(held.holder)
                    ),
                );
                state.held = None;
            }
        }
    }

    /// One attempt, without waiting.
    pub fn try_acquire(&self, who: Lane, ttl: Duration) -> TryAcquire {
        let now = Instant::now();
        let mut state = self.state();
        self.expire(&mut state, now);
        if let Some(held) = state.held {
            return TryAcquire::Busy {
                holder: held.holder,
                left: held.expires - now,
            };
        }
        let token = state.next_token;
        state.next_token += 1;
        let expires = now + ttl;
        state.held = Some(Held {
            token,
            holder: who,
            expires,
        });
        TryAcquire::Granted(Lease {
            token,
            granted: now,
            expires,
        })
    }

    /// Asks for the lock and waits (polling) until it is granted; the
    /// request, the first "busy" and the grant go on the timeline.
    pub async fn acquire(&self, who: Lane, ttl: Duration) -> Lease {
        let tl = &self.timeline;
        tl.msg(who, self.lane, "acquire");
        let mut told_busy = false;
        loop {
            match self.try_acquire(who, ttl) {
                TryAcquire::Granted(lease) => {
                    tl.msg(
                        self.lane,
                        who,
                        format!("token {} (lease {} ms)", lease.token, ttl.as_millis()),
                    );
                    return lease;
                }
                TryAcquire::Busy { holder, left } => {
                    if !told_busy {
                        told_busy = true;
                        tl.msg(
                            self.lane,
                            who,
                            format!("busy ({}, {} ms left)", tl.name(holder), left.as_millis()),
                        );
                    }
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    }

    /// Gives the lock back; returns false (and changes nothing) if `lease`
    /// is no longer the live one.
    pub fn release(&self, who: Lane, lease: &Lease) -> bool {
        let mut state = self.state();
        self.expire(&mut state, Instant::now());
        let live = state.held.is_some_and(|held| held.token == lease.token);
        if live {
            state.held = None;
        }
        drop(state);
        let tl = &self.timeline;
        if live {
            tl.msg(who, self.lane, format!("release {}", lease.token));
        } else {
            tl.msg(
                who,
                self.lane,
                format!("release {} (ignored: not live)", lease.token),
            );
        }
        live
    }
}

// ---------------------------------------------------------------------------
// Client processes and pauses
// ---------------------------------------------------------------------------

/// Runs `f` as a separate "process": its own OS thread and its own
/// single-threaded tokio runtime. Await the receiver for its result (an
/// error means the client panicked).
pub fn spawn_process<F, Fut, T>(name: &str, f: F) -> tokio::sync::oneshot::Receiver<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("client runtime");
            let _ = tx.send(runtime.block_on(f()));
        })
        .expect("spawn client thread");
    rx
}

/// A simulated stop-the-world pause of the calling client process: its
/// thread (and so its whole runtime: every task, timer, keep-alive) is
/// blocked with `std::thread::sleep`. Everything else keeps running.
pub fn freeze(tl: &Timeline, lane: Lane, pause: Duration, why: &str) {
    tl.pause_begin(
        lane,
        format!(
            "~~ paused ({why}, simulated: thread frozen {} ms) ~~",
            pause.as_millis()
        ),
    );
    let start = Instant::now();
    std::thread::sleep(pause);
    tl.pause_end(
        lane,
        format!(
            "~~ resumes after {} ms, unaware of the pause ~~",
            start.elapsed().as_millis()
        ),
    );
}

// ---------------------------------------------------------------------------
// HTTP client
// ---------------------------------------------------------------------------

/// A response, reduced to what the demos look at.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// `X-Fencing-Highest`, on a gateway's 409.
    pub highest: Option<u64>,
    /// The `error` field of a gateway's JSON answer.
    pub error: Option<String>,
    /// The body as text.
    pub body: String,
}

impl Reply {
    /// 2xx.
    pub fn ok(&self) -> bool {
        self.status.is_success()
    }

    /// fencegate's 409 `stale_token`.
    pub fn is_stale(&self) -> bool {
        self.status == StatusCode::CONFLICT && self.error.as_deref() == Some("stale_token")
    }

    /// A short label for the timeline.
    pub fn label(&self) -> String {
        let code = self.status.as_u16();
        if self.is_stale() {
            return match self.highest {
                Some(highest) => format!("409 stale_token (highest {highest})"),
                None => "409 stale_token".to_owned(),
            };
        }
        if self.status == StatusCode::OK {
            return format!("{code} {:?}", shorten(&self.body, 24));
        }
        match &self.error {
            Some(error) => format!("{code} {error}"),
            None => code.to_string(),
        }
    }
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut short: String = text.chars().take(max - 3).collect();
        short.push_str("...");
        short
    }
}

/// One HTTP/1.1 request on a fresh TCP connection to `addr`.
pub async fn http(
    addr: SocketAddr,
    method: Method,
    path: &str,
    token: Option<u64>,
    body: Option<&str>,
) -> Result<Reply> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(connection);
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr.to_string());
    if let Some(token) = token {
        request = request.header(TOKEN_HEADER, token.to_string());
    }
    let body = Bytes::from(body.unwrap_or_default().to_owned());
    let response = sender.send_request(request.body(Full::new(body))?).await?;
    let status = response.status();
    let highest = response
        .headers()
        .get("x-fencing-highest")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let bytes = response.into_body().collect().await?.to_bytes();
    let body = String::from_utf8_lossy(&bytes).into_owned();
    let error = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned));
    Ok(Reply {
        status,
        highest,
        error,
        body,
    })
}

/// Where a client sends its requests: `addr` answers; the request arrow goes
/// to `via` (the first hop) and the reply comes back from `server`.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// Address to connect to.
    pub addr: SocketAddr,
    /// The lane the request goes to first.
    pub via: Lane,
    /// The lane that answers.
    pub server: Lane,
}

impl Route {
    /// Straight to `server` at `addr`.
    pub fn direct(addr: SocketAddr, server: Lane) -> Self {
        Route {
            addr,
            via: server,
            server,
        }
    }
}

/// The label of a request: method, token, body.
pub fn request_label(method: &Method, token: Option<&str>, body: Option<&str>) -> String {
    let mut label = method.to_string();
    match token {
        Some(token) => {
            let _ = write!(label, " t={token}");
        }
        None => label.push_str(" (no token)"),
    }
    if let Some(body) = body.filter(|b| !b.is_empty()) {
        let _ = write!(label, " {:?}", shorten(body, 20));
    }
    label
}

/// `who` sends a request along `route`; the request and its reply go on
/// the timeline.
pub async fn call(
    tl: &Timeline,
    who: Lane,
    route: &Route,
    method: Method,
    path: &str,
    token: Option<u64>,
    body: Option<&str>,
) -> Result<Reply> {
    let token_text = token.map(|t| t.to_string());
    tl.msg(
        who,
        route.via,
        request_label(&method, token_text.as_deref(), body),
    );
    match http(route.addr, method, path, token, body).await {
        Ok(reply) => {
            if reply.is_stale() {
                tl.refused(route.server, who, reply.label());
            } else {
                tl.msg(route.server, who, reply.label());
            }
            Ok(reply)
        }
        Err(e) => {
            tl.note(who, format!("request failed: {e}"));
            Err(e)
        }
    }
}

// ---------------------------------------------------------------------------
// Storage and gateway
// ---------------------------------------------------------------------------

/// fencegate's embedded object store (in memory), served unfenced on its own
/// loopback port, with a tap that records what reaches it.
pub struct Storage {
    /// Where it listens.
    pub addr: SocketAddr,
    objects: Router,
    task: JoinHandle<std::io::Result<()>>,
}

#[derive(Clone)]
struct Tap {
    timeline: Timeline,
    lane: Lane,
    from: Option<Lane>,
    objects: Router,
}

impl Storage {
    /// Starts the store on `127.0.0.1:0`, recording on the timeline's
    /// `storage` lane. With `from`, each request that reaches it is drawn as
    /// an arrow from that lane (the gateway); without, only what it stores or
    /// reads is drawn (the client drew its own arrow).
    pub async fn start(tl: &Timeline, from: Option<Lane>) -> Result<Storage> {
        let objects = embedded::router(ObjectStore::in_memory());
        let tap = Tap {
            timeline: tl.clone(),
            lane: tl.lane("storage"),
            from,
            objects: objects.clone(),
        };
        let app = objects
            .clone()
            .layer(axum::middleware::from_fn_with_state(tap, record));
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Storage {
            addr,
            objects,
            task,
        })
    }

    /// The object at `path`, read inside the store (not recorded).
    pub async fn peek(&self, path: &str) -> Result<Option<String>> {
        peek(&self.objects, path).await
    }

    /// Stores `value` at `path` inside the store (not through HTTP, not
    /// recorded): the state before the scenario starts.
    pub async fn seed(&self, path: &str, value: &str) -> Result<()> {
        let request = http::Request::put(path).body(Body::from(value.to_owned()))?;
        let response = self.objects.clone().oneshot(request).await?;
        if !response.status().is_success() {
            return Err(format!("seeding {path}: {}", response.status()).into());
        }
        Ok(())
    }

    /// Stops serving.
    pub fn stop(self) {
        self.task.abort();
    }
}

async fn peek(objects: &Router, path: &str) -> Result<Option<String>> {
    let request = http::Request::get(path).body(Body::empty())?;
    let response = objects.clone().oneshot(request).await?;
    if response.status() == StatusCode::NOT_FOUND {
        return Ok(None);
    }
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// A stored value for display: quoted, or `nothing`.
pub fn shown(value: &Option<String>) -> String {
    match value {
        Some(value) => format!("{:?}", shorten(value, 20)),
        None => "nothing".to_owned(),
    }
}

async fn record(State(tap): State<Tap>, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let token = request
        .headers()
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(from) = tap.from {
        tap.timeline.msg(
            from,
            tap.lane,
            request_label(&method, token.as_deref(), None),
        );
    }
    let before = peek(&tap.objects, &path).await.ok().flatten();
    let response = next.run(request).await;
    let after = peek(&tap.objects, &path).await.ok().flatten();
    let status = response.status().as_u16();
    let text = match method {
        Method::GET | Method::HEAD => format!("read {}", shown(&after)),
        _ if response.status().is_success() => {
            format!("stored {} (was {})", shown(&after), shown(&before))
        }
        _ => format!("{method} failed: {status}"),
    };
    tap.timeline.note(tap.lane, text);
    response
}

/// A real fencegate in this process on `127.0.0.1:0` (data and admin
/// planes), fences in memory, in front of `upstream`.
pub async fn start_gateway(upstream: SocketAddr) -> Result<Gateway> {
    let config = Config {
        listen: "127.0.0.1:0".parse()?,
        admin_listen: "127.0.0.1:0".parse()?,
        state: StateKind::Memory,
        upstream: Some(Upstream::from_addr(upstream)?),
        token_header: http::HeaderName::from_static(TOKEN_HEADER),
        shutdown_timeout: Duration::from_secs(2),
        ..Config::default()
    };
    Ok(Gateway::start(config).await?)
}

/// The admin plane's path for the fence of `key`: `/fences/{key}`, the key
/// percent-encoded.
pub fn fence_path(key: &str) -> String {
    let encoded = percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC);
    format!("/fences/{encoded}")
}

/// The fence's highest token for `key`, asked of the gateway's admin plane.
pub async fn fence_highest(gateway: &Gateway, key: &str) -> Result<Option<u64>> {
    let reply = http(
        gateway.admin_addr(),
        Method::GET,
        &fence_path(key),
        None,
        None,
    )
    .await?;
    if reply.status == StatusCode::NOT_FOUND {
        return Ok(None);
    }
    let value: serde_json::Value = serde_json::from_str(&reply.body)?;
    Ok(value.get("highest").and_then(|h| h.as_u64()))
}

/// A heading line for one run.
pub fn heading(text: &str) -> String {
    let line = format!("== {text} ");
    let pad = WIDTH.saturating_sub(line.chars().count());
    format!("{line}{}", "=".repeat(pad))
}

// ---------------------------------------------------------------------------
// Running a demo: end of a run, what it showed, verdict
// ---------------------------------------------------------------------------

/// Ends a run: the storage's final value of `key` and, through fencegate,
/// the fence's highest token for it; then stops the gateway and the storage.
pub async fn end_run(
    storage: Storage,
    gateway: Option<Gateway>,
    key: &str,
) -> Result<(Option<String>, Option<u64>)> {
    let stored = storage.peek(key).await?;
    let highest = match &gateway {
        Some(gateway) => fence_highest(gateway, key).await?,
        None => None,
    };
    if let Some(gateway) = gateway {
        gateway.shutdown().await;
    }
    storage.stop();
    Ok((stored, highest))
}

/// Prints one run: its heading, diagram and legend, the final stored value
/// of `key` (followed by `more` on the same line), and the fence's highest
/// token when the run went through fencegate.
pub fn show_run(
    title: &str,
    diagram: &str,
    key: &str,
    stored: &Option<String>,
    more: &str,
    highest: Option<u64>,
) {
    println!("{}", heading(title));
    print!("{diagram}");
    println!("{}", legend());
    println!();
    println!("final stored value of {key}: {}{more}", shown(stored));
    if let Some(highest) = highest {
        println!(
            "fencegate admin plane: GET {} -> highest {highest}",
            fence_path(key)
        );
    }
}

/// What one run of a demo showed, printed with [`show_run`].
pub trait Shown {
    /// Prints the run under `title`.
    fn show(&self, title: &str);
}

/// The two runs of a pause demo: straight to the storage, then through
/// fencegate. `run(fenced)` plays one; `judge(fenced, outcome)` prints what
/// it showed (the `=>` lines) and says whether that is what the demo claims.
/// `None` if a run failed (said so already); else whether both runs showed
/// what they should.
pub fn direct_then_fenced<O: Shown>(
    mut run: impl FnMut(bool) -> Result<O, String>,
    mut judge: impl FnMut(bool, &O) -> bool,
) -> Option<bool> {
    let mut pass = true;
    for fenced in [false, true] {
        let outcome = match run(fenced) {
            Ok(outcome) => outcome,
            Err(e) => {
                process::wait_if_interrupted();
                let which = if fenced { "fenced" } else { "direct" };
                println!("{which} run failed: {e}");
                return None;
            }
        };
        outcome.show(if fenced {
            "run 2 of 2: through fencegate"
        } else {
            "run 1 of 2: straight to the storage, nothing checks tokens"
        });
        pass &= judge(fenced, &outcome);
        println!();
    }
    Some(pass)
}

/// Prints the verdict line (`claim` is what a pass showed) with the time
/// since `started`; the demo's exit status.
pub fn verdict(pass: bool, started: std::time::Instant, claim: &str) -> std::process::ExitCode {
    let elapsed = started.elapsed().as_secs_f64();
    if pass {
        println!("VERDICT: PASS: {claim} ({elapsed:.1} s)");
        std::process::ExitCode::SUCCESS
    } else {
        println!("VERDICT: FAIL: the runs did not show what this demo claims ({elapsed:.1} s)");
        std::process::ExitCode::FAILURE
    }
}

// ---------------------------------------------------------------------------
// The in-process demos' two clients (`gc_pause`, `delayed_write`)
// ---------------------------------------------------------------------------

/// Starts a run's storage and, for a fenced run, fencegate in front of it
/// (drawn on the `fencegate` lane); also where requests are answered: the
/// gateway's data plane, or the storage itself.
pub async fn start_backend(
    tl: &Timeline,
    fenced: bool,
) -> Result<(Storage, Option<Gateway>, SocketAddr, Lane)> {
    let gateway_lane = tl.find_lane("fencegate");
    let storage = Storage::start(tl, gateway_lane).await?;
    let gateway = match fenced {
        true => Some(start_gateway(storage.addr).await?),
        false => None,
    };
    let (addr, lane) = match (&gateway, gateway_lane) {
        (Some(gateway), Some(lane)) => (gateway.data_addr(), lane),
        _ => (storage.addr, tl.lane("storage")),
    };
    Ok((storage, gateway, addr, lane))
}

/// Client 2 of the two-client demos, as a process: shows up `after` client
/// 1, takes the lock for `lease`, writes `body` to `key` along `route` and
/// releases the lock.
pub fn spawn_client_2(
    tl: &Timeline,
    lock: &Arc<LeaseLock>,
    route: Route,
    after: Duration,
    lease: Duration,
    key: &'static str,
    body: &'static str,
) -> tokio::sync::oneshot::Receiver<Result<Reply>> {
    let (tl, lock) = (tl.clone(), lock.clone());
    spawn_process("client 2", move || async move {
        let me = tl.lane("client 2");
        tokio::time::sleep(after).await;
        let lease = lock.acquire(me, lease).await;
        let reply = call(
            &tl,
            me,
            &route,
            Method::PUT,
            key,
            Some(lease.token),
            Some(body),
        )
        .await;
        lock.release(me, &lease);
        reply
    })
}

/// What a two-client run showed: client 1 (token 33) writes `values[0]`
/// after its lease is over, client 2 (token 34) writes `values[1]`.
pub struct TwoClients {
    /// The object both write, and what each writes.
    pub key: &'static str,
    pub values: [&'static str; 2],
    pub diagram: String,
    pub client_1: Reply,
    pub client_2: Reply,
    pub stored: Option<String>,
    pub highest: Option<u64>,
}

/// What a two-client demo says about a run that showed what it should.
pub struct TwoClientsText {
    /// The direct run: client 1's write replaced client 2's.
    pub corrupted: &'static [&'static str],
    /// Client 1's write, as the direct run's failure calls it (`stale`).
    pub write: &'static str,
    /// The fenced run: client 1's write was refused.
    pub safe: &'static [&'static str],
}

impl Shown for TwoClients {
    fn show(&self, title: &str) {
        show_run(
            title,
            &self.diagram,
            self.key,
            &self.stored,
            "",
            self.highest,
        );
    }
}

impl TwoClients {
    /// Prints what the run showed (`text`); whether it is what the demo
    /// claims: direct, client 1's write replaced client 2's; fenced, it was
    /// refused as stale and client 2's stands.
    pub fn judge(&self, fenced: bool, text: &TwoClientsText) -> bool {
        let print = |lines: &[&str]| lines.iter().for_each(|line| println!("{line}"));
        if !fenced {
            let corrupted = self.client_1.ok()
                && self.client_2.ok()
                && self.stored.as_deref() == Some(self.values[0]);
            if corrupted {
                print(text.corrupted);
            } else {
                println!(
                    "=> expected the {} write to overwrite client 2's, but it did not",
                    text.write
                );
            }
            return corrupted;
        }
        let refused = self.client_1.is_stale()
            && self.client_2.ok()
            && self.stored.as_deref() == Some(self.values[1]);
        if refused {
            print(text.safe);
        } else {
            println!(
                "=> expected 409 for client 1 and client 2's value stored; client 1 got {}",
                self.client_1.status
            );
        }
        refused
    }
}
