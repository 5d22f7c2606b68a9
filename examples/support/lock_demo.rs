//! The scenario of the lock-provider demos (`redis_lock`, `redlock`,
//! `etcd_lock`, `zookeeper_lock`, `postgres_lock`), played by real processes
//! against a real lock service:
//!
//! 1. worker 1 (a process: this example re-executed) takes the lock with the
//!    provider's own recipe, gets the provider's fencing token, keeps its
//!    lease alive in the background if the recipe does, checks that the
//!    lease is good and starts preparing its write;
//! 2. the demo freezes worker 1 with SIGSTOP: every thread of it stops, the
//!    lease keep-alive included, as in a long stop-the-world pause;
//! 3. worker 2 (another process) asks for the lock and waits; the lock service
//!    lets worker 1's lease run out and grants worker 2 a higher token;
//!    worker 2 writes and releases the lock;
//! 4. the demo resumes worker 1 with SIGCONT; it finishes its write with its
//!    old token, unaware of the pause.
//!
//! The scenario runs twice: straight to the storage, then through fencegate.
//! Workers do the lock calls and the HTTP writes themselves and report what
//! they do ([`super::worker`]); the parent draws their reports, the storage
//! tap, the pause and the service's end of the grant on one [`Timeline`].
//!
//! A provider is a [`LockClient`] (how a worker takes the lock and where its
//! token comes from) and a [`Service`] (its server, started by the parent).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};

use super::process::{self, Worker};
use super::worker::{as_worker, now_micros, Report, What};
pub use super::worker::{instant_of, Args, Reporter};
use super::{direct_then_fenced, end_run, start_backend, verdict, Reply, Result, Shown};
use super::{Timeline, TwoClients, TwoClientsText};

/// The object both workers write.
pub const KEY: &str = "/demo/report";
/// What worker 1 writes.
pub const FROM_1: &str = "from worker 1";
/// What worker 2 writes.
pub const FROM_2: &str = "from worker 2";
/// How long worker 1 spends preparing its write after checking its lease.
/// The demo freezes it within a few milliseconds of the check, and resumes
/// it no earlier than this after the check, so that it writes at once.
const PREPARE: Duration = Duration::from_millis(1500);
/// A run that takes longer than this has gone wrong.
const RUN_TIMEOUT: Duration = Duration::from_secs(45);

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
    /// Lines printed after both runs: what the token guarantees.
    pub outro: &'static [&'static str],
    /// What a pass showed, for the verdict line.
    pub claim: &'static str,
}

/// A worker's part: take the lock, check it (worker 1, then prepare its
/// write, which is where it is frozen), write, release.
async fn worker<L: LockClient>(role: String, args: Args) -> Result<()> {
    let rep = Reporter::new(&args)?;
    let target = args.parse_as("target")?;
    let first = role == "first";
    let mut lock = L::connect(&args, &rep).await?;
    let began = now_micros();
    let (token, detail, held) = lock.acquire(&rep).await?;
    rep.emit(What::Granted {
        token,
        detail,
        began,
    });
    if first {
        lock.check(&rep, &held).await?;
        rep.emit(What::Checked);
        tokio::time::sleep(PREPARE).await;
    }
    let value = Some(if first { FROM_1 } else { FROM_2 });
    let reply = rep.request(target, Method::PUT, KEY, Some(token), value);
    reply.await.ok_or("its write got no answer")?;
    lock.release(&rep, held).await?;
    rep.emit(What::Done);
    Ok(())
}

/// What the parent learned from one worker's reports.
#[derive(Debug, Default)]
struct Seen {
    granted: Option<(u64, String)>,
    checked: Option<Instant>,
    saw_free: Option<Instant>,
    wrote: Option<Reply>,
    done: bool,
}

/// Draws every report `worker` printed so far and notes it in `seen`.
fn pump(tl: &Timeline, worker: &Worker, seen: &mut Seen) -> Result<()> {
    let me = tl.lane(worker.name());
    let lane = |name: &str| tl.find_lane(name).unwrap_or(me);
    let (lines, exited) = worker.drain();
    for line in lines {
        let Ok(Report { t, what }) = serde_json::from_str(&line) else {
            tl.note(me, line);
            continue;
        };
        let at = instant_of(t);
        match what {
            What::Note { lane: on, text } => tl.note_at(at, lane(&on), text),
            What::Msg {
                from,
                to,
                text,
                refused,
            } => tl.msg_at(at, lane(&from), lane(&to), text, refused),
            What::Granted { token, detail, .. } => seen.granted = Some((token, detail)),
            What::Checked => seen.checked = Some(at),
            What::SawFree => seen.saw_free = seen.saw_free.or(Some(at)),
            What::Reply {
                status,
                error,
                highest,
                body,
                ..
            } => {
                // Status 0 (no answer) is followed by the worker's failure.
                if let Ok(status) = StatusCode::from_u16(status) {
                    let reply = Reply {
                        status,
                        highest,
                        error,
                        body,
                    };
                    seen.wrote = Some(reply);
                }
            }
            What::Done => seen.done = true,
            What::Ready => {}
            What::Failed { error } => {
                return Err(format!("{} failed: {error}", worker.name()).into())
            }
        }
    }
    if exited && !seen.done {
        return Err(format!("{} exited before it finished", worker.name()).into());
    }
    Ok(())
}

/// Pumps `worker` until `until(seen)`, or fails at `deadline`.
async fn pump_until(
    tl: &Timeline,
    worker: &Worker,
    seen: &mut Seen,
    deadline: Instant,
    until: impl Fn(&Seen) -> bool,
) -> Result<()> {
    loop {
        pump(tl, worker, seen)?;
        if until(seen) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the run took longer than {RUN_TIMEOUT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What a run showed: the writes, each worker's token, worker 1's pause.
struct Outcome {
    writes: TwoClients,
    tokens: [u64; 2],
    pause: Duration,
}

async fn run<S: Service>(demo: &Demo, service: &S, fenced: bool) -> Result<Outcome> {
    let lanes: &[&str] = match fenced {
        true => &["worker 1", "worker 2", demo.service, "fencegate", "storage"],
        false => &["worker 1", "worker 2", demo.service, "storage"],
    };
    let tl = Timeline::new(lanes);
    let (service_lane, lane_1) = (tl.lane(demo.service), tl.lane("worker 1"));
    let (storage, gateway, target, via) = start_backend(&tl, fenced).await?;
    let args = |name: &str| {
        let mut args = vec![format!("name={name}"), format!("service={}", demo.service)];
        args.extend([format!("target={target}"), format!("via={}", tl.name(via))]);
        args.extend(service.worker_args());
        args
    };
    let deadline = Instant::now() + RUN_TIMEOUT;
    let (mut seen_1, mut seen_2) = (Seen::default(), Seen::default());

    let worker_1 = Worker::spawn("worker 1", "first", &args("worker 1"))?;
    pump_until(&tl, &worker_1, &mut seen_1, deadline, |s| {
        s.checked.is_some()
    })
    .await?;
    if seen_1.wrote.is_some() {
        return Err("worker 1 wrote before it could be frozen (machine too slow?)".into());
    }
    worker_1.freeze()?;
    let frozen = Instant::now();
    let pid = worker_1.pid();
    tl.pause_begin(
        lane_1,
        format!("~~ SIGSTOP: pid {pid} frozen (all its threads) ~~"),
    );
    let (token, detail) = seen_1
        .granted
        .clone()
        .ok_or("worker 1 checked before a grant")?;

    let worker_2 = Worker::spawn("worker 2", "second", &args("worker 2"))?;
    let watch =
        async { Ok(tokio::time::timeout(RUN_TIMEOUT, service.released(token, detail)).await) };
    let worker_2_done = pump_until(&tl, &worker_2, &mut seen_2, deadline, |s| s.done);
    let (released, ()) = tokio::try_join!(watch, worker_2_done)?;
    let checked = seen_1.checked.unwrap_or(frozen);
    tokio::time::sleep(PREPARE.saturating_sub(checked.elapsed())).await;
    let pause = frozen.elapsed();
    // Drawn first: once resumed, worker 1 acts at once.
    let ms = pause.as_millis();
    tl.pause_end(
        lane_1,
        format!("~~ SIGCONT after {ms} ms: resumes, unaware ~~"),
    );
    worker_1.resume()?;
    pump_until(&tl, &worker_1, &mut seen_1, deadline, |s| s.done).await?;

    match released {
        Ok(Ok((seen, text))) => {
            // The demo's watch and worker 2's wait may learn of the release
            // in either order; it happened before both.
            let free = seen_2.saw_free.filter(|&free| free <= seen);
            let before = |free: Instant| free.checked_sub(Duration::from_micros(1));
            let at = free.and_then(before).unwrap_or(seen);
            tl.note_at(at, service_lane, text);
        }
        Ok(Err(e)) => tl.note(service_lane, format!("watch failed: {e}")),
        Err(_) => tl.note(service_lane, "watch: saw no release"),
    }
    let (stored, highest) = end_run(storage, gateway, KEY).await?;
    let missing = |what: &str| format!("{what} missing from the workers' reports");
    let token = |seen: &Seen, who| {
        seen.granted
            .as_ref()
            .map(|g| g.0)
            .ok_or_else(|| missing(who))
    };
    let tokens = [
        token(&seen_1, "worker 1's token")?,
        token(&seen_2, "worker 2's token")?,
    ];
    let writes = TwoClients {
        key: KEY,
        values: [FROM_1, FROM_2],
        diagram: tl.render(),
        client_1: seen_1.wrote.ok_or_else(|| missing("worker 1's write"))?,
        client_2: seen_2.wrote.ok_or_else(|| missing("worker 2's write"))?,
        stored,
        highest,
    };
    Ok(Outcome {
        writes,
        tokens,
        pause,
    })
}

impl Shown for Outcome {
    fn show(&self, title: &str) {
        self.writes.show(title);
    }
}

/// Prints what a run showed; whether it is what the demo claims.
fn judge(fenced: bool, outcome: &Outcome) -> bool {
    let [t1, t2] = outcome.tokens;
    if t2 <= t1 {
        println!("=> worker 2's token {t2} is not above worker 1's {t1}");
        return false;
    }
    let ms = outcome.pause.as_millis();
    let corrupted = [
        format!("=> CORRUPTED: worker 2's acknowledged write (token {t2}) was silently replaced by worker 1's"),
        format!("   (token {t1}), sent {ms} ms after it was frozen, long after its lease had run out."),
    ];
    let safe = [
        format!("=> SAFE: fencegate refused token {t1} (409 stale_token, highest {t2}); the write never"),
        "   reached the storage and worker 2's write stands.".to_owned(),
    ];
    let corrupted: Vec<&str> = corrupted.iter().map(String::as_str).collect();
    let safe: Vec<&str> = safe.iter().map(String::as_str).collect();
    let text = TwoClientsText {
        corrupted: &corrupted,
        write: "stale",
        safe: &safe,
    };
    outcome.writes.judge(fenced, &text)
}

/// The parent: starts the service, runs the scenario twice, judges.
fn parent<S: Service>(demo: &Demo, runtime: &tokio::runtime::Runtime) -> ExitCode {
    let started = Instant::now();
    // The service's clients and servers start, run and stop in the runtime.
    let _runtime = runtime.enter();
    process::install_ctrl_c_cleanup();
    println!("{}: {}", demo.name, demo.title);
    demo.intro.iter().for_each(|line| println!("{line}"));
    println!();
    let service = match runtime.block_on(S::start()) {
        Ok(service) => service,
        Err(e) => {
            println!("could not start {}: {e}", demo.service);
            return ExitCode::FAILURE;
        }
    };
    let secs = started.elapsed().as_secs_f64();
    println!("{} started on loopback ({secs:.1} s)\n", demo.service);
    let runs = direct_then_fenced(
        |fenced| {
            let outcome = runtime.block_on(run(demo, &service, fenced));
            outcome.map_err(|e| e.to_string())
        },
        judge,
    );
    let Some(pass) = runs else {
        return ExitCode::FAILURE;
    };
    drop(service);
    if !demo.outro.is_empty() {
        demo.outro.iter().for_each(|line| println!("{line}"));
        println!();
    }
    verdict(pass, started, demo.claim)
}

/// The whole demo: `main` of each lock-provider example. As a worker
/// (`--worker ROLE key=value...`) it plays one client; otherwise it starts the
/// service and runs the scenario twice.
pub fn main<S: Service, L: LockClient>(demo: &Demo) -> ExitCode {
    if let Some(exit) = as_worker(worker::<L>) {
        return exit;
    }
    if std::env::args().any(|a| a == "-h" || a == "--help") {
        println!("{}: {}", demo.name, demo.title);
        println!("usage: cargo run --example {}", demo.name);
        return ExitCode::SUCCESS;
    }
    S::require();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => parent::<S>(demo, &runtime),
        Err(e) => {
            println!("{}: no tokio runtime: {e}", demo.name);
            ExitCode::FAILURE
        }
    }
}
