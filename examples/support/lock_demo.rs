//! The lock-provider demos' scenario, played by real processes against a
//! real lock service, straight to the storage and then through fencegate:
//!
//! 1. worker 1 (this example re-executed) takes the lock with the provider's
//!    recipe and token, checks its lease and starts preparing its write;
//! 2. the demo freezes it with SIGSTOP: every thread stops, any lease
//!    keep-alive too, as in a long stop-the-world pause;
//! 3. worker 2 asks for the lock; the service lets worker 1's lease run out
//!    and grants worker 2 a higher token; worker 2 writes and releases;
//! 4. SIGCONT: worker 1 finishes its write with its old token, unaware.
//!
//! A provider is a [`LockClient`] (how a worker takes the lock, and where its
//! token comes from) and a [`Service`] (its server, as the demo runs it).
//! Workers report what they do ([`super::worker`]); the demo draws their
//! reports, the storage tap, the pause and the end of the grant on one
//! [`Timeline`].

use std::process::ExitCode;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};

use super::process::{self, Worker};
use super::worker::{as_worker, now_micros, Report, What};
pub use super::worker::{instant_of, Args, Reporter};
use super::{direct_then_fenced, end_run, run_timeline, start_backend, verdict, Reply, Result};
use super::{Timeline, TwoClients, TwoClientsText};

/// The object both workers write.
pub const KEY: &str = "/demo/report";
/// What each worker writes.
const VALUES: [&str; 2] = ["from worker 1", "from worker 2"];
/// How long worker 1 prepares its write after checking its lease. It is
/// frozen within milliseconds of the check and resumed no earlier than this
/// after it, so that it writes as soon as it runs again.
const PREPARE: Duration = Duration::from_millis(1500);
/// A run that takes longer than this has gone wrong.
const RUN_TIMEOUT: Duration = Duration::from_secs(45);

/// Worker side: one client of the lock service, in a worker process.
#[allow(async_fn_in_trait)]
pub trait LockClient: Sized {
    /// What the holder keeps to check and release its grant.
    type Held;

    /// Connects, with the arguments of [`Service::worker_args`] and the demo's.
    async fn connect(args: &Args, rep: &Reporter) -> Result<Self>;

    /// Takes the lock (waiting as the recipe says), keeping the lease alive
    /// if the recipe does: the token, a detail for [`Service::released`],
    /// and what the holder keeps.
    async fn acquire(&mut self, rep: &Reporter) -> Result<(u64, String, Self::Held)>;

    /// A careful holder's last look at its lease before it writes.
    async fn check(&mut self, rep: &Reporter, held: &Self::Held) -> Result<()>;

    /// Gives the lock back, or finds out it was lost.
    async fn release(&mut self, rep: &Reporter, held: Self::Held) -> Result<()>;
}

/// Parent side: the running lock service.
#[allow(async_fn_in_trait)]
pub trait Service: Sized {
    /// Exits with one line naming the install script if the server is missing.
    fn require();

    /// Starts the server on loopback with a temporary data dir; once it serves.
    async fn start() -> Result<Self>;

    /// `key=value` arguments every worker needs to reach the service.
    fn worker_args(&self) -> Vec<String>;

    /// Once the service let go of grant `token` (`detail` from
    /// [`LockClient::acquire`]) of the frozen worker: when, and what to
    /// write on the service's lane.
    async fn released(&self, token: u64, detail: String) -> Result<(Instant, String)>;
}

/// What a demo says about itself.
pub struct Demo {
    /// Example name (`etcd_lock`).
    pub name: &'static str,
    /// The lock service's lane (`etcd`).
    pub service: &'static str,
    /// The first line: what the demo shows.
    pub title: &'static str,
    /// Printed under the title: recipe, token, what is real.
    pub intro: &'static [&'static str],
    /// Printed after both runs: what the token guarantees.
    pub outro: &'static [&'static str],
    /// What a pass showed, for the verdict line.
    pub claim: &'static str,
}

/// A worker's part: take the lock, check it (worker 1, which then prepares
/// its write and is frozen meanwhile), write, release.
async fn worker<L: LockClient>(role: String, args: Args) -> Result<()> {
    let (rep, target) = (Reporter::new(&args)?, args.parse_as("target")?);
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
    let value = VALUES[usize::from(!first)];
    let reply = rep.request(target, Method::PUT, KEY, Some(token), Some(value));
    reply.await.ok_or("its write got no answer")?;
    lock.release(&rep, held).await?;
    rep.emit(What::Done);
    Ok(())
}

/// What the demo learned from one worker's reports.
#[derive(Debug, Default)]
struct Seen {
    granted: Option<(u64, String)>,
    checked: Option<Instant>,
    saw_free: Option<Instant>,
    wrote: Option<Reply>,
    done: bool,
}

/// Draws what `worker` reported until `until(seen)`; fails at `deadline`.
async fn pump(
    tl: &Timeline,
    worker: &Worker,
    seen: &mut Seen,
    deadline: Instant,
    until: impl Fn(&Seen) -> bool,
) -> Result<()> {
    let me = tl.lane(worker.name());
    let lane = |name: &str| tl.find_lane(name).unwrap_or(me);
    while !until(seen) {
        if Instant::now() > deadline {
            return Err(format!("the run took longer than {RUN_TIMEOUT:?}").into());
        }
        let Some(line) = worker.recv(Duration::ZERO)? else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let Ok(Report { t, what }) = serde_json::from_str(&line) else {
            tl.note(me, line);
            continue;
        };
        let at = instant_of(t);
        match what {
            What::Draw {
                from,
                to: Some(to),
                text,
                refused,
            } => tl.msg_at(at, lane(&from), lane(&to), text, refused),
            What::Draw { from, text, .. } => tl.note_at(at, lane(&from), text),
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
                let status = StatusCode::from_u16(status).ok();
                let reply = |status| Reply {
                    status,
                    highest,
                    error,
                    body,
                };
                seen.wrote = status.map(reply);
            }
            What::Done => seen.done = true,
            What::Ready => {}
            What::Failed { error } => {
                return Err(format!("{} failed: {error}", worker.name()).into())
            }
        }
    }
    Ok(())
}

/// What a run showed: the writes, each worker's token, worker 1's pause.
struct Outcome {
    writes: TwoClients,
    tokens: [u64; 2],
    pause: Duration,
}

async fn run<S: Service>(demo: &Demo, service: &S, fenced: bool) -> Result<Outcome> {
    let tl = run_timeline(&["worker 1", "worker 2", demo.service], fenced);
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
    pump(&tl, &worker_1, &mut seen_1, deadline, |s| {
        s.checked.is_some()
    })
    .await?;
    worker_1.freeze()?;
    let (frozen, pid) = (Instant::now(), worker_1.pid());
    tl.pause_begin(
        lane_1,
        format!("~~ SIGSTOP: pid {pid} frozen (all its threads) ~~"),
    );
    let (token, detail) = seen_1
        .granted
        .clone()
        .ok_or("worker 1 checked before a grant")?;

    let worker_2 = Worker::spawn("worker 2", "second", &args("worker 2"))?;
    let watch = async {
        let released = tokio::time::timeout_at(deadline.into(), service.released(token, detail));
        Ok(released
            .await
            .unwrap_or_else(|_| Err("it saw no release".into())))
    };
    let worker_2_done = pump(&tl, &worker_2, &mut seen_2, deadline, |s| s.done);
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
    pump(&tl, &worker_1, &mut seen_1, deadline, |s| s.done).await?;

    match released {
        Ok((seen, text)) => {
            // The demo's watch and worker 2's wait may learn of the release
            // in either order; it happened before both.
            let free = seen_2.saw_free.filter(|&free| free <= seen);
            let before = |free: Instant| free.checked_sub(Duration::from_micros(1));
            tl.note_at(free.and_then(before).unwrap_or(seen), service_lane, text);
        }
        Err(e) => tl.note(service_lane, format!("watch failed: {e}")),
    }
    let (stored, highest) = end_run(storage, gateway, KEY).await?;
    let outcome = |seen: Seen| Some((seen.granted?.0, seen.wrote?));
    let missing = "a token or a write missing from the workers' reports";
    let (token_1, client_1) = outcome(seen_1).ok_or(missing)?;
    let (token_2, client_2) = outcome(seen_2).ok_or(missing)?;
    let (key, values, diagram) = (KEY, VALUES, tl.render());
    let writes = TwoClients {
        key,
        values,
        diagram,
        client_1,
        client_2,
        stored,
        highest,
    };
    let tokens = [token_1, token_2];
    Ok(Outcome {
        writes,
        tokens,
        pause,
    })
}

/// Prints a run and what it showed; whether it is what the demo claims.
fn judge(fenced: bool, title: &str, outcome: &Outcome) -> bool {
    outcome.writes.show(title);
    let ([t1, t2], ms) = (outcome.tokens, outcome.pause.as_millis());
    if t2 <= t1 {
        println!("=> worker 2's token {t2} is not above worker 1's {t1}");
        return false;
    }
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
    let (corrupted, safe, write) = (&corrupted[..], &safe[..], "stale");
    let text = TwoClientsText {
        corrupted,
        write,
        safe,
    };
    outcome.writes.judge(fenced, &text)
}

/// The demo's own part: starts the service, runs the scenario twice, judges.
fn parent<S: Service>(demo: &Demo, runtime: &tokio::runtime::Runtime) -> ExitCode {
    let started = Instant::now();
    // The service's clients and servers start, run and stop in the runtime.
    let _runtime = runtime.enter();
    process::install_ctrl_c_cleanup();
    println!("{}: {}", demo.name, demo.title);
    demo.intro.iter().for_each(|line| println!("{line}"));
    let service = match runtime.block_on(S::start()) {
        Ok(service) => service,
        Err(e) => {
            println!("\ncould not start {}: {e}", demo.service);
            return ExitCode::FAILURE;
        }
    };
    let secs = started.elapsed().as_secs_f64();
    println!("\n{} started on loopback ({secs:.1} s)\n", demo.service);
    let run = |fenced| runtime.block_on(run(demo, &service, fenced));
    let Some(pass) = direct_then_fenced(|fenced| run(fenced).map_err(|e| e.to_string()), judge)
    else {
        return ExitCode::FAILURE;
    };
    drop(service);
    if !demo.outro.is_empty() {
        println!("{}\n", demo.outro.join("\n"));
    }
    verdict(pass, started, demo.claim)
}

/// The whole demo, `main` of each lock-provider example: as a worker
/// (`--worker ROLE key=value...`) it plays one client; otherwise it starts
/// the service and runs the scenario twice.
pub fn main<S: Service, L: LockClient>(demo: &Demo) -> ExitCode {
    if let Some(exit) = as_worker(worker::<L>) {
        return exit;
    }
    if std::env::args().any(|a| a == "-h" || a == "--help") {
        println!(
            "{}: {}\nusage: cargo run --example {}",
            demo.name, demo.title, demo.name
        );
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
