//! The scenario shared by the lock-provider demos (`etcd_lock`,
//! `zookeeper_lock`, `postgres_lock`), played by real processes against a
//! real lock service:
//!
//! 1. worker 1 (a process: this example re-executed) takes the lock with the
//!    provider's own recipe, gets the provider's natural fencing token, keeps
//!    its lease alive in the background, checks that the lease is good and
//!    starts preparing its write;
//! 2. the demo freezes worker 1 with SIGSTOP: every thread of it stops, the
//!    lease keep-alive included, as in a long stop-the-world pause;
//! 3. worker 2 (another process) asks for the lock and waits; the lock service
//!    lets worker 1's lease run out and grants worker 2 a higher token;
//!    worker 2 writes and releases the lock;
//! 4. the demo resumes worker 1 with SIGCONT; it finishes its write with its
//!    old token, unaware of the pause.
//!
//! The scenario runs twice: straight to the storage, then through fencegate.
//! Workers do the lock calls and the HTTP writes themselves and stamp what
//! they do with the wall clock (same machine as the parent); the parent draws
//! their reports, the storage tap and the pause on one [`Timeline`].

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::Method;
use serde::{Deserialize, Serialize};

use super::process::{self, Worker};
use super::{
    direct_then_fenced, end_run, http, request_label, show_run, start_gateway, verdict, Lane,
    Result, Shown, Storage, Timeline,
};

/// The object both workers write.
pub const KEY: &str = "/demo/report";
/// What worker 1 writes.
pub const FROM_1: &str = "from worker 1";
/// What worker 2 writes.
pub const FROM_2: &str = "from worker 2";
/// How long worker 1 spends preparing its write after checking its lease.
/// The demo freezes it within a few milliseconds of the check, so this only
/// matters if the freeze came too late (then the run fails, honestly).
const PREPARE: Duration = Duration::from_millis(1500);
/// A run that takes longer than this has gone wrong.
const RUN_TIMEOUT: Duration = Duration::from_secs(45);

// ---------------------------------------------------------------------------
// What a worker tells the parent (one JSON line per report)
// ---------------------------------------------------------------------------

/// One line on a worker's stdout.
#[derive(Debug, Serialize, Deserialize)]
struct Report {
    /// When it happened: microseconds since the UNIX epoch, worker's clock.
    t: u64,
    #[serde(flatten)]
    what: What,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum What {
    /// Something seen on `lane` (the worker's own, or the lock service's).
    Note { lane: String, text: String },
    /// A message between two lanes.
    Msg {
        from: String,
        to: String,
        text: String,
        refused: bool,
    },
    /// The lock is held, with this token; `detail` is what the parent needs
    /// to watch the grant (a key, a node path, a row id).
    Granted { token: u64, detail: String },
    /// Worker 1 checked its lease and is preparing its write: freeze it now.
    Checked,
    /// A waiting worker just learned that the lock is free (its wait ended).
    SawFree,
    /// The write's answer.
    Wrote { status: u16, stale: bool },
    /// Finished (lock released or found lost); the worker exits.
    Done,
    /// Something went wrong; the worker exits non-zero.
    Failed { error: String },
}

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The [`Instant`] of a wall-clock time (microseconds since the UNIX epoch)
/// taken on this machine, for the timeline.
pub fn instant_of(unix_us: u64) -> Instant {
    let (now, now_sys) = (Instant::now(), SystemTime::now());
    let at = UNIX_EPOCH + Duration::from_micros(unix_us);
    match now_sys.duration_since(at) {
        Ok(ago) => now.checked_sub(ago).unwrap_or(now),
        Err(ahead) => now + ahead.duration(),
    }
}

/// A worker's voice: stamps and prints what it does, for the parent to draw.
#[derive(Debug, Clone)]
pub struct Reporter {
    me: String,
    service: String,
}

impl Reporter {
    fn emit(&self, what: What) {
        let report = Report {
            t: unix_micros(),
            what,
        };
        if let Ok(line) = serde_json::to_string(&report) {
            process::report(&line);
        }
    }

    /// This worker's lane name (`worker 1`).
    pub fn me(&self) -> &str {
        &self.me
    }

    /// Something the worker did or saw on its own.
    pub fn note(&self, text: impl Into<String>) {
        self.emit(What::Note {
            lane: self.me.clone(),
            text: text.into(),
        });
    }

    /// A request from this worker to the lock service.
    pub fn ask(&self, text: impl Into<String>) {
        self.emit(What::Msg {
            from: self.me.clone(),
            to: self.service.clone(),
            text: text.into(),
            refused: false,
        });
    }

    /// An answer from the lock service to this worker.
    pub fn answer(&self, text: impl Into<String>) {
        self.emit(What::Msg {
            from: self.service.clone(),
            to: self.me.clone(),
            text: text.into(),
            refused: false,
        });
    }

    /// A waiting worker learns, now, that the lock is free: the lock service
    /// had let the previous grant go by then at the latest.
    pub fn saw_free(&self) {
        self.emit(What::SawFree);
    }

    fn msg(&self, from: &str, to: &str, text: String, refused: bool) {
        self.emit(What::Msg {
            from: from.to_owned(),
            to: to.to_owned(),
            text,
            refused,
        });
    }
}

// ---------------------------------------------------------------------------
// The two sides a provider implements
// ---------------------------------------------------------------------------

/// Worker side: one client of the lock service, in a worker process.
#[allow(async_fn_in_trait)]
pub trait LockClient: Sized {
    /// What the holder keeps to check and release its grant.
    type Held;

    /// Connects; `args` are the `key=value` pairs of [`Service::worker_args`]
    /// (and the demo's own: `name`, `target`, ...).
    async fn connect(args: &Args, rep: &Reporter) -> Result<Self>;

    /// Takes the lock (waiting as the recipe says) and starts keeping the
    /// lease alive. Returns the fencing token, a detail for the parent's
    /// watch ([`Service::released`]) and the holder's state.
    async fn acquire(&mut self, rep: &Reporter) -> Result<(u64, String, Self::Held)>;

    /// What a careful holder does right before writing: asks whether its
    /// lease is still good (and says so on the timeline).
    async fn check(&mut self, rep: &Reporter, held: &Self::Held) -> Result<()>;

    /// Gives the lock back, or finds out it was lost.
    async fn release(&mut self, rep: &Reporter, held: Self::Held) -> Result<()>;
}

/// Parent side: the running lock service.
#[allow(async_fn_in_trait)]
pub trait Service: Sized {
    /// Exits with one line naming the install script if the server is not
    /// installed.
    fn require();

    /// Starts the server on loopback with a temporary data dir, and waits
    /// until it serves.
    async fn start() -> Result<Self>;

    /// `key=value` arguments every worker needs to reach the service.
    fn worker_args(&self) -> Vec<String>;

    /// Resolves once the service has let go of the grant `token` (`detail`
    /// from [`LockClient::acquire`]) while its holder is frozen: when that
    /// happened and what to write on the service's lane.
    async fn released(&self, token: u64, detail: String) -> Result<(Instant, String)>;
}

/// What each demo says about itself.
pub struct Demo {
    /// Example name (`etcd_lock`).
    pub name: &'static str,
    /// The lock service's lane (`etcd`).
    pub service: &'static str,
    /// The first line: what the demo shows.
    pub title: &'static str,
    /// Lines printed under the title: recipe, token, what is real.
    pub intro: &'static [&'static str],
    /// How the token is called in the verdict (`create revision`).
    pub token_name: &'static str,
}

// ---------------------------------------------------------------------------
// Worker process
// ---------------------------------------------------------------------------

/// A worker's `key=value` arguments.
#[derive(Debug, Clone)]
pub struct Args(Vec<(String, String)>);

impl Args {
    fn parse(args: &[String]) -> Result<Args> {
        let mut pairs = Vec::new();
        for arg in args {
            let (key, value) = arg
                .split_once('=')
                .ok_or_else(|| format!("worker argument {arg:?} is not key=value"))?;
            pairs.push((key.to_owned(), value.to_owned()));
        }
        Ok(Args(pairs))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Result<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| format!("worker argument {key}= missing").into())
    }

    /// The value of `key`, parsed.
    pub fn parse_as<T: std::str::FromStr>(&self, key: &str) -> Result<T>
    where
        T::Err: std::fmt::Display,
    {
        let value = self.get(key)?;
        value
            .parse()
            .map_err(|e| format!("worker argument {key}={value}: {e}").into())
    }
}

async fn worker<L: LockClient>(role: &str, args: &Args) -> Result<()> {
    let rep = Reporter {
        me: args.get("name")?.to_owned(),
        service: args.get("service")?.to_owned(),
    };
    let target: std::net::SocketAddr = args.parse_as("target")?;
    let (via, server) = (args.get("via")?, args.get("server")?);
    let first = role == "first";

    let mut lock = L::connect(args, &rep).await?;
    let (token, detail, held) = lock.acquire(&rep).await?;
    rep.emit(What::Granted { token, detail });
    if first {
        lock.check(&rep, &held).await?;
        rep.emit(What::Checked);
        // Preparing the write. The demo freezes the process in here.
        tokio::time::sleep(PREPARE).await;
    }

    let body = if first { FROM_1 } else { FROM_2 };
    let label = request_label(&Method::PUT, Some(&token.to_string()), Some(body));
    rep.msg(rep.me(), via, label, false);
    let reply = http(target, Method::PUT, KEY, Some(token), Some(body)).await?;
    rep.msg(server, rep.me(), reply.label(), reply.is_stale());
    rep.emit(What::Wrote {
        status: reply.status.as_u16(),
        stale: reply.is_stale(),
    });

    lock.release(&rep, held).await?;
    rep.emit(What::Done);
    Ok(())
}

// ---------------------------------------------------------------------------
// Parent
// ---------------------------------------------------------------------------

/// What each worker has told so far.
#[derive(Debug, Default)]
struct WorkerState {
    granted: Option<(u64, String)>,
    checked: bool,
    saw_free: Option<Instant>,
    wrote: Option<(u16, bool)>,
    done: bool,
    exited: bool,
}

fn lane_or(tl: &Timeline, name: &str, fallback: Lane) -> Lane {
    tl.find_lane(name).unwrap_or(fallback)
}

/// Draws every line the worker printed so far and updates its state.
fn pump(tl: &Timeline, worker: &Worker, state: &mut WorkerState) -> Result<()> {
    let me = tl.lane(worker.name());
    loop {
        let line = match worker.recv(Duration::ZERO) {
            Ok(line) => line,
            Err(e) => {
                if matches!(
                    e.downcast_ref::<std::sync::mpsc::RecvTimeoutError>(),
                    Some(std::sync::mpsc::RecvTimeoutError::Disconnected)
                ) {
                    state.exited = true;
                }
                return Ok(());
            }
        };
        let Ok(report) = serde_json::from_str::<Report>(&line) else {
            tl.note(me, line);
            continue;
        };
        let at = instant_of(report.t);
        match report.what {
            What::Note { lane, text } => tl.note_at(at, lane_or(tl, &lane, me), text),
            What::Msg {
                from,
                to,
                text,
                refused,
            } => {
                let (from, to) = (lane_or(tl, &from, me), lane_or(tl, &to, me));
                if refused {
                    tl.refused_at(at, from, to, text);
                } else {
                    tl.msg_at(at, from, to, text);
                }
            }
            What::Granted { token, detail } => state.granted = Some((token, detail)),
            What::Checked => state.checked = true,
            What::SawFree => state.saw_free = state.saw_free.or(Some(at)),
            What::Wrote { status, stale } => state.wrote = Some((status, stale)),
            What::Done => state.done = true,
            What::Failed { error } => {
                return Err(format!("{} failed: {error}", worker.name()).into())
            }
        }
    }
}

struct Outcome {
    diagram: String,
    token_1: u64,
    token_2: u64,
    /// (status, refused as stale) of each worker's write.
    wrote_1: (u16, bool),
    wrote_2: (u16, bool),
    stored: Option<String>,
    highest: Option<u64>,
    pause: Duration,
}

type Watch<'a> = Pin<Box<dyn Future<Output = Result<(Instant, String)>> + 'a>>;

async fn run<S: Service>(demo: &Demo, service: &S, fenced: bool) -> Result<Outcome> {
    let lanes: Vec<&str> = if fenced {
        vec!["worker 1", "worker 2", demo.service, "fencegate", "storage"]
    } else {
        vec!["worker 1", "worker 2", demo.service, "storage"]
    };
    let tl = Timeline::new(&lanes);
    let service_lane = tl.lane(demo.service);
    let storage = Storage::start(&tl, tl.find_lane("fencegate")).await?;
    let gateway = match fenced {
        true => Some(start_gateway(storage.addr).await?),
        false => None,
    };
    let (target, via) = match &gateway {
        Some(gateway) => (gateway.data_addr(), "fencegate"),
        None => (storage.addr, "storage"),
    };
    let args = |name: &str| {
        let mut args = vec![
            format!("name={name}"),
            format!("service={}", demo.service),
            format!("target={target}"),
            format!("via={via}"),
            format!("server={via}"),
        ];
        args.extend(service.worker_args());
        args
    };

    let w1 = Worker::spawn("worker 1", "first", &args("worker 1"))?;
    let lane_1 = tl.lane("worker 1");
    let mut s1 = WorkerState::default();
    let mut s2 = WorkerState::default();
    let mut w2: Option<Worker> = None;
    let mut frozen: Option<Instant> = None;
    let mut pause: Option<Duration> = None;
    let mut watch: Option<Watch<'_>> = None;
    let mut released: Option<(Instant, String)> = None;
    let deadline = Instant::now() + RUN_TIMEOUT;

    while !s1.done {
        pump(&tl, &w1, &mut s1)?;
        if let Some(w2) = &w2 {
            pump(&tl, w2, &mut s2)?;
        }
        if frozen.is_none() && s1.checked {
            if s1.wrote.is_some() {
                return Err("worker 1 wrote before it could be frozen (machine too slow?)".into());
            }
            w1.freeze()?;
            frozen = Some(Instant::now());
            tl.pause_begin(
                lane_1,
                format!(
                    "~~ SIGSTOP: pid {} frozen (its keep-alive too) ~~",
                    w1.pid()
                ),
            );
            let (token, detail) = s1
                .granted
                .clone()
                .ok_or("worker 1 checked before a grant")?;
            watch = Some(Box::pin(service.released(token, detail)));
            w2 = Some(Worker::spawn("worker 2", "second", &args("worker 2"))?);
        }
        if let (Some(at), None, true) = (frozen, pause, s2.done) {
            let paused = at.elapsed();
            pause = Some(paused);
            // Drawn first: once resumed, worker 1 acts at once.
            tl.pause_end(
                lane_1,
                format!(
                    "~~ SIGCONT after {} ms: resumes, unaware ~~",
                    paused.as_millis()
                ),
            );
            w1.resume()?;
        }
        if s1.exited && !s1.done {
            return Err("worker 1 exited before it finished".into());
        }
        if s2.exited && !s2.done {
            return Err("worker 2 exited before it finished".into());
        }
        if Instant::now() > deadline {
            return Err(format!("the run took longer than {RUN_TIMEOUT:?}").into());
        }
        let tick = tokio::time::sleep(Duration::from_millis(5));
        match watch.as_mut() {
            Some(pending) => tokio::select! {
                result = pending => {
                    watch = None;
                    match result {
                        Ok(seen) => released = Some(seen),
                        Err(e) => tl.note(service_lane, format!("watch failed: {e}")),
                    }
                }
                _ = tick => {}
            },
            None => tick.await,
        }
    }
    drop(watch);
    drop(w2);
    drop(w1);
    if let Some((seen, text)) = released {
        // The demo's watch and worker 2's wait may learn of the release in
        // either order; it happened before both.
        let at = match s2.saw_free {
            Some(free) if free <= seen => {
                free.checked_sub(Duration::from_micros(1)).unwrap_or(free)
            }
            _ => seen,
        };
        tl.note_at(at, service_lane, text);
    }

    let (stored, highest) = end_run(storage, gateway, KEY).await?;
    let missing = |what: &str| format!("{what} missing from the workers' reports");
    Ok(Outcome {
        diagram: tl.render(),
        token_1: s1.granted.ok_or_else(|| missing("worker 1's token"))?.0,
        token_2: s2.granted.ok_or_else(|| missing("worker 2's token"))?.0,
        wrote_1: s1.wrote.ok_or_else(|| missing("worker 1's write"))?,
        wrote_2: s2.wrote.ok_or_else(|| missing("worker 2's write"))?,
        stored,
        highest,
        pause: pause.unwrap_or_default(),
    })
}

impl Shown for Outcome {
    fn show(&self, title: &str) {
        show_run(title, &self.diagram, KEY, &self.stored, "", self.highest);
    }
}

fn ok(status: u16) -> bool {
    (200..300).contains(&status)
}

/// Prints what a run showed; whether it is what the demo claims.
fn judge(fenced: bool, outcome: &Outcome) -> bool {
    let (t1, t2) = (outcome.token_1, outcome.token_2);
    if !fenced {
        let corrupted = ok(outcome.wrote_1.0)
            && ok(outcome.wrote_2.0)
            && t2 > t1
            && outcome.stored.as_deref() == Some(FROM_1);
        if corrupted {
            println!(
                "=> CORRUPTED: worker 2's acknowledged write (token {t2}) was silently replaced by worker 1's"
            );
            println!(
                "   (token {t1}), sent {} ms after it was frozen, long after its lease had run out.",
                outcome.pause.as_millis()
            );
        } else {
            println!("=> expected worker 1's stale write to replace worker 2's, but it did not");
        }
        return corrupted;
    }
    let refused = outcome.wrote_1.1
        && ok(outcome.wrote_2.0)
        && t2 > t1
        && outcome.stored.as_deref() == Some(FROM_2);
    if refused {
        println!(
            "=> SAFE: fencegate refused token {t1} (409 stale_token, highest {t2}); the write never"
        );
        println!("   reached the storage and worker 2's write stands.");
    } else {
        println!(
            "=> expected 409 for worker 1 and worker 2's value stored; worker 1 got {}",
            outcome.wrote_1.0
        );
    }
    refused
}

fn parent<S: Service>(demo: &Demo, runtime: &tokio::runtime::Runtime) -> ExitCode {
    let started = Instant::now();
    // The service's clients and servers start, run and stop in the runtime.
    let _runtime = runtime.enter();
    process::install_ctrl_c_cleanup();
    println!("{}: {}", demo.name, demo.title);
    for line in demo.intro {
        println!("{line}");
    }
    println!();

    let service = match runtime.block_on(S::start()) {
        Ok(service) => service,
        Err(e) => {
            println!("could not start {}: {e}", demo.service);
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{} started on loopback ({:.1} s)",
        demo.service,
        started.elapsed().as_secs_f64()
    );
    println!();

    let runs = direct_then_fenced(
        |fenced| {
            runtime
                .block_on(run(demo, &service, fenced))
                .map_err(|e| e.to_string())
        },
        judge,
    );
    let Some(pass) = runs else {
        return ExitCode::FAILURE;
    };
    drop(service);
    let claim = format!(
        "{} tokens ({}) only grow; the direct run lost worker 2's write, fencegate refused the stale one",
        demo.service, demo.token_name
    );
    verdict(pass, started, &claim)
}

/// The whole demo: `main` of each lock-provider example. As a worker
/// (`--worker ROLE key=value...`) it plays one client; otherwise it starts the
/// service and runs the scenario twice.
pub fn main<S: Service, L: LockClient>(demo: &Demo) -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--worker") {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("worker runtime");
        let role = argv.get(1).cloned().unwrap_or_default();
        let result = runtime.block_on(async {
            let args = Args::parse(argv.get(2..).unwrap_or_default())?;
            worker::<L>(&role, &args).await
        });
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                let report = Report {
                    t: unix_micros(),
                    what: What::Failed {
                        error: e.to_string(),
                    },
                };
                if let Ok(line) = serde_json::to_string(&report) {
                    process::report(&line);
                }
                ExitCode::FAILURE
            }
        };
    }
    if argv.iter().any(|a| a == "-h" || a == "--help") {
        println!("{}: {}", demo.name, demo.title);
        println!("usage: cargo run --example {}", demo.name);
        return ExitCode::SUCCESS;
    }
    S::require();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    parent::<S>(demo, &runtime)
}
