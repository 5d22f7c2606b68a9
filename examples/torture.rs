//! Jepsen-style torture: N worker processes contend for one lock and do
//! read-modify-write increments of one counter object, while a nemesis
//! freezes random workers (SIGSTOP) past their lease and resumes them
//! (SIGCONT). Run once straight to the storage and once through fencegate.
//!
//! Real: redis-server(s) on loopback, N worker processes (this example
//! re-executed), SIGSTOP/SIGCONT, fencegate in-process in front of its
//! embedded object store, loopback HTTP.
//!
//! Each worker, in a loop: take the lock (Redis: `SET NX PX` + `INCR` in one
//! script; `--provider redlock`: Redlock over 3 instances with the derived
//! token of `support::redis`), read the counter (through fencegate: a fenced
//! read, carrying the token), work a few ms, write value + 1 with the token,
//! release. An increment is acknowledged when its PUT answers 2xx. Lost
//! updates = acknowledged increments - final counter.
//!
//! Exit 0 only if the direct run lost updates and the fenced run lost none
//! (and the nemesis did bite: fencegate refused stale requests). Exit 1
//! otherwise, 2 on a bad command line.
//!
//! ```sh
//! cargo run --example torture -- --duration 30 --workers 5 --provider redis
//! ```

mod support;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use fencegate::gateway::Gateway;
use http::Method;
use support::lock_demo::{LockClient, Service};
use support::process::{self, Worker};
use support::redis::{Redis, RedisLock};
use support::worker::{as_worker, instant_of, micros_of, now_micros, Args, Report, Reporter, What};
use support::{end_run, http as http_call, start_backend, verdict, Result, Timeline};
use tokio::runtime::Runtime;

/// The counter.
const KEY: &str = "/torture/counter";
/// Lease of every grant.
const LEASE: Duration = Duration::from_millis(250);
/// A worker's work between its read and its write, in ms (random in range).
const WORK_MS: (u64, u64) = (10, 25);
/// A pause lasts the lease plus this many ms (random in range).
const PAUSE_EXTRA_MS: (u64, u64) = (100, 400);
/// Quiet time between two pauses, in ms (random in range).
const GAP_MS: (u64, u64) = (100, 400);
/// How often the nemesis picks the lock holder (rather than anyone).
const HOLDER_BIAS: f64 = 0.85;
/// Redlock instances for `--provider redlock`.
const REDLOCK_INSTANCES: usize = 3;
/// Fewer handovers than this in one run: the run showed nothing.
const MIN_HANDOVERS: usize = 50;

// ---------------------------------------------------------------------------
// Randomness (no crate needed: xorshift, seeded per process)
// ---------------------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, (lo, hi): (u64, u64)) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn chance(&mut self, p: f64) -> bool {
        (self.next() % 1_000_000) as f64 / 1_000_000.0 < p
    }
}

// ---------------------------------------------------------------------------
// Worker
// ---------------------------------------------------------------------------

/// One worker, until the run's end (`until=`, a wall-clock stamp): take the
/// lock, read the counter, work, write it + 1 with the token, release.
async fn torture_worker(_role: String, args: Args) -> Result<()> {
    let rep = Reporter::new(&args)?;
    let target: SocketAddr = args.parse_as("target")?;
    let fenced_reads = args.get("fenced_reads")? == "1";
    let (seed, until): (u64, u64) = (args.parse_as("seed")?, args.parse_as("until")?);
    let mut lock = RedisLock::connect(&args, &rep).await?;
    rep.emit(What::Ready);
    let mut rng = Rng::new(seed ^ (u64::from(std::process::id()) << 20) ^ now_micros());
    while now_micros() < until {
        let (token, _, held) = lock.acquire(&rep).await?;
        let began = micros_of(held.began);
        let detail = String::new();
        rep.emit(What::Granted {
            token,
            detail,
            began,
        });
        let read_token = fenced_reads.then_some(token);
        let read = rep
            .request(target, Method::GET, KEY, read_token, None)
            .await;
        let value = match read.map(|r| (r.status.as_u16(), r.body)) {
            Some((200, body)) => body.trim().parse::<u64>().ok(),
            Some((404, _)) => Some(0),
            _ => None,
        };
        if let Some(value) = value {
            let work = rng.range(WORK_MS);
            tokio::time::sleep(Duration::from_millis(work)).await;
            let next = (value + 1).to_string();
            rep.request(target, Method::PUT, KEY, Some(token), Some(&next))
                .await;
        }
        lock.release(&rep, held).await?;
        let think = rng.range((0, 5));
        tokio::time::sleep(Duration::from_millis(think)).await;
    }
    rep.emit(What::Done);
    Ok(())
}

// ---------------------------------------------------------------------------
// Parent: command line
// ---------------------------------------------------------------------------

/// Which lock the workers take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provider {
    /// One redis-server.
    Redis,
    /// Redlock over several independent redis-servers.
    Redlock,
}

struct Options {
    /// Total, both runs.
    duration: Duration,
    workers: usize,
    provider: Provider,
    seed: u64,
}

const USAGE: &str = "usage: torture [--duration SECS (both runs, default 30)] [--workers N (default 5)] [--provider redis|redlock] [--seed N]";

fn parse_args() -> Result<Options, String> {
    let mut args = Options {
        duration: Duration::from_secs(30),
        workers: 5,
        provider: Provider::Redis,
        seed: now_micros(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{arg} needs a value; {USAGE}"))
        };
        match arg.as_str() {
            "--duration" => {
                let secs: f64 = value()?
                    .parse()
                    .map_err(|_| format!("--duration: a number of seconds; {USAGE}"))?;
                if !(2.0..=3600.0).contains(&secs) {
                    return Err(format!("--duration: 2 to 3600 seconds; {USAGE}"));
                }
                args.duration = Duration::from_secs_f64(secs);
            }
            "--workers" => {
                args.workers = value()?
                    .parse()
                    .ok()
                    .filter(|n| (2..=32).contains(n))
                    .ok_or_else(|| format!("--workers: 2 to 32; {USAGE}"))?;
            }
            "--provider" => {
                let name = value()?;
                args.provider = match name.as_str() {
                    "redis" => Provider::Redis,
                    "redlock" => Provider::Redlock,
                    _ => {
                        return Err(format!(
                        "torture: unknown provider {name:?}; supported providers: redis, redlock"
                    ))
                    }
                };
            }
            "--seed" => {
                args.seed = value()?
                    .parse()
                    .map_err(|_| format!("--seed: a number; {USAGE}"))?;
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}; {USAGE}")),
        }
    }
    Ok(args)
}

// ---------------------------------------------------------------------------
// Parent: one run
// ---------------------------------------------------------------------------

/// One nemesis pause.
struct Pause {
    worker: usize,
    from: Instant,
    to: Instant,
    on_holder: bool,
}

/// Everything one run produced.
struct Run {
    fenced: bool,
    elapsed: Duration,
    /// (worker, report), in the order each worker made them.
    events: Vec<(usize, Report)>,
    pauses: Vec<Pause>,
    final_counter: Option<u64>,
    /// The gateway's own count of stale-token refusals (`/metrics`).
    gateway_stale: Option<u64>,
    started: Instant,
}

struct Stats {
    grants: usize,
    order_violations: usize,
    handovers: usize,
    acknowledged: u64,
    unknown_writes: u64,
    final_counter: u64,
    lost: i64,
    refused_reads: u64,
    refused_writes: u64,
    superseded_stored: u64,
    pauses: usize,
    pauses_on_holder: usize,
}

/// The worker that holds the lock now, as the lock servers say.
fn holder<const N: usize>(runtime: &Runtime, redis: &Redis<N>, workers: usize) -> Option<usize> {
    let name = runtime.block_on(redis.holder())?;
    let index: usize = name.strip_prefix('w')?.parse().ok()?;
    (1..=workers).contains(&index).then(|| index - 1)
}

fn run<const N: usize>(
    runtime: &Runtime,
    redis: &Redis<N>,
    args: &Options,
    fenced: bool,
    length: Duration,
) -> Result<Run> {
    // The timeline is not drawn: it is where the storage's tap writes.
    let tl = Timeline::new(&["fencegate", "storage"]);
    let (storage, gateway, target, via) = runtime.block_on(start_backend(&tl, fenced))?;
    runtime.block_on(storage.seed(KEY, "0"))?;
    let via = tl.name(via).to_owned();
    let until = now_micros() + length.as_micros() as u64;
    let mut workers = Vec::new();
    for i in 1..=args.workers {
        let seed = args.seed.wrapping_mul(31).wrapping_add(i as u64);
        let worker_args = [
            format!("name=w{i}"),
            "service=redis".to_owned(),
            format!("via={via}"),
            "quiet=1".to_owned(),
            format!("redis={}", redis.addrs()),
            format!("target={target}"),
            format!("ttl_ms={}", LEASE.as_millis()),
            format!("fenced_reads={}", u8::from(fenced)),
            format!("seed={seed}"),
            format!("until={until}"),
        ];
        workers.push(Worker::spawn(&format!("w{i}"), "torture", &worker_args)?);
    }
    for worker in &workers {
        let line = worker.recv(Duration::from_secs(10))?.unwrap_or_default();
        if !matches!(
            serde_json::from_str(&line),
            Ok(Report {
                what: What::Ready,
                ..
            })
        ) {
            return Err(format!("{} did not start: {line}", worker.name()).into());
        }
    }

    // The nemesis, until the run's time is up.
    let started = Instant::now();
    let mut rng = Rng::new(args.seed ^ if fenced { 0x5eed } else { 0xd1ec7 });
    let mut pauses = Vec::new();
    while started.elapsed() < length {
        std::thread::sleep(Duration::from_millis(rng.range(GAP_MS)));
        let pause = LEASE + Duration::from_millis(rng.range(PAUSE_EXTRA_MS));
        if started.elapsed() + pause > length {
            break;
        }
        let holder = holder(runtime, redis, workers.len());
        let (victim, on_holder) = match holder {
            Some(h) if rng.chance(HOLDER_BIAS) => (h, true),
            _ => (rng.range((0, workers.len() as u64 - 1)) as usize, false),
        };
        workers[victim].freeze()?;
        let from = Instant::now();
        std::thread::sleep(pause);
        let to = Instant::now();
        workers[victim].resume()?;
        pauses.push(Pause {
            worker: victim,
            from,
            to,
            on_holder: on_holder || holder == Some(victim),
        });
    }
    let sleep_left = length.saturating_sub(started.elapsed());
    std::thread::sleep(sleep_left);
    for worker in &workers {
        worker.resume()?;
    }
    let elapsed = started.elapsed();

    // Every report, until each worker says it is done.
    let mut events = Vec::new();
    for (i, worker) in workers.iter().enumerate() {
        loop {
            let line = worker.recv(Duration::from_secs(15))?;
            let line = line.ok_or_else(|| format!("{} said nothing for 15 s", worker.name()))?;
            let report: Report = serde_json::from_str(&line)
                .map_err(|e| format!("{} said {line:?}: {e}", worker.name()))?;
            match report.what {
                What::Done => break,
                What::Failed { error } => {
                    return Err(format!("{} failed: {error}", worker.name()).into())
                }
                _ => events.push((i, report)),
            }
        }
    }
    drop(workers);

    let metrics = |g: &Gateway| http_call(g.admin_addr(), Method::GET, "/metrics", None, None);
    let metrics = gateway.as_ref().map(|g| runtime.block_on(metrics(g)));
    let gateway_stale = metrics.and_then(|m| stale_from_metrics(&m.ok()?.body));
    let (stored, _) = runtime.block_on(end_run(storage, gateway, KEY))?;
    let final_counter = stored.and_then(|value| value.trim().parse().ok());
    Ok(Run {
        fenced,
        elapsed,
        events,
        pauses,
        final_counter,
        gateway_stale,
        started,
    })
}

/// `fencegate_requests_total{outcome="stale_token"} N` from `/metrics`.
fn stale_from_metrics(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with("fencegate_requests_total") && l.contains("\"stale_token\""))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse::<f64>().ok())
        .map(|n| n as u64)
}

// ---------------------------------------------------------------------------
// Parent: what a run showed
// ---------------------------------------------------------------------------

fn is_2xx(status: u16) -> bool {
    (200..300).contains(&status)
}

impl Run {
    /// (token, worker, granted at, attempt started at) of every grant, in
    /// token order.
    fn grants(&self) -> Vec<(u64, usize, u64, u64)> {
        let mut grants: Vec<_> = self
            .events
            .iter()
            .filter_map(|(w, report)| match report.what {
                What::Granted { token, began, .. } => Some((token, *w, report.t, began)),
                _ => None,
            })
            .collect();
        grants.sort();
        grants
    }

    /// Pairs of grants where B's attempt began after A's grant completed,
    /// yet B's token is not larger than A's. The token's promise is that
    /// there are none.
    fn order_violations(grants: &[(u64, usize, u64, u64)]) -> usize {
        let mut by_time = grants.to_vec();
        by_time.sort_by_key(|g| g.2);
        let mut violations = 0;
        for b in grants {
            // The largest token among grants completed before B began.
            let before = by_time.partition_point(|a| a.2 < b.3);
            if by_time[..before].iter().any(|a| a.0 >= b.0) {
                violations += 1;
            }
        }
        violations
    }

    fn stats(&self) -> Stats {
        let grants = self.grants();
        let handovers = grants.windows(2).filter(|w| w[0].1 != w[1].1).count();
        let order_violations = Self::order_violations(&grants);
        let mut acknowledged = 0;
        let mut unknown_writes = 0;
        let mut refused_reads = 0;
        let mut refused_writes = 0;
        let mut superseded_stored = 0;
        for (_, report) in &self.events {
            let What::Reply {
                method,
                status,
                error,
                token,
                sent,
                ..
            } = &report.what
            else {
                continue;
            };
            let stale = *status == 409 && error.as_deref() == Some("stale_token");
            match method.as_str() {
                "GET" if stale => refused_reads += 1,
                "PUT" if stale => refused_writes += 1,
                "PUT" if is_2xx(*status) => {
                    acknowledged += 1;
                    let token = token.unwrap_or(0);
                    if grants.iter().any(|g| g.0 > token && g.2 < *sent) {
                        superseded_stored += 1;
                    }
                }
                "PUT" if *status == 0 || *status >= 500 => unknown_writes += 1,
                _ => {}
            }
        }
        let final_counter = self.final_counter.unwrap_or(0);
        Stats {
            grants: grants.len(),
            order_violations,
            handovers,
            acknowledged,
            unknown_writes,
            final_counter,
            lost: acknowledged as i64 - final_counter as i64,
            refused_reads,
            refused_writes,
            superseded_stored,
            pauses: self.pauses.len(),
            pauses_on_holder: self.pauses.iter().filter(|p| p.on_holder).count(),
        }
    }

    fn secs(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.started).as_secs_f64()
    }

    /// One episode told in words. Without fencegate: the stored write from
    /// a superseded holder that wiped out the most increments. Through
    /// fencegate: the first write from a superseded holder that was refused.
    fn episode(&self) -> Option<String> {
        let grants = self.grants();
        let mut best: Option<(u64, String)> = None;
        for (i, (w, report)) in self.events.iter().enumerate() {
            let What::Reply {
                method,
                status,
                token: Some(token),
                sent,
                highest,
                value,
                ..
            } = &report.what
            else {
                continue;
            };
            let stored = is_2xx(*status) && !self.fenced;
            let refused = *status == 409 && self.fenced;
            if method != "PUT" || !(stored || refused) {
                continue;
            }
            let newer: Vec<_> = grants
                .iter()
                .filter(|g| g.0 > *token && g.2 < *sent)
                .collect();
            let (Some(first), Some(last)) = (newer.first(), newer.last()) else {
                continue;
            };
            // What this worker read just before (its events are in order).
            let read = self.events[..i]
                .iter()
                .rev()
                .find_map(|(w2, r)| match &r.what {
                    What::Reply {
                        method,
                        status: 200,
                        body,
                        ..
                    } if w2 == w && method == "GET" => body
                        .trim()
                        .parse::<u64>()
                        .ok()
                        .map(|v| (v, instant_of(r.t))),
                    _ => None,
                });
            let Some((read, read_at)) = read else {
                continue;
            };
            let sent_at = instant_of(*sent);
            let Some(pause) = self
                .pauses
                .iter()
                .find(|p| p.worker == *w && p.from >= read_at && p.to <= sent_at)
            else {
                continue;
            };
            let mut text = format!(
                "w{} got token {token} and read {read}; frozen (SIGSTOP) {:.3}-{:.3} s ({} ms; lease {} ms). Meanwhile tokens {}..{} were granted. ",
                w + 1,
                self.secs(pause.from),
                self.secs(pause.to),
                (pause.to - pause.from).as_millis(),
                LEASE.as_millis(),
                first.0,
                last.0,
            );
            if stored {
                // The counter just before: the value of the last write
                // answered 2xx before this one was sent.
                let before = self
                    .events
                    .iter()
                    .filter_map(|(_, r)| match &r.what {
                        What::Reply {
                            method,
                            status,
                            value: Some(v),
                            ..
                        } if method == "PUT" && is_2xx(*status) && r.t < *sent => {
                            Some((r.t, v.parse::<u64>().ok()?))
                        }
                        _ => None,
                    })
                    .max()
                    .map_or(0, |(_, v)| v);
                let wiped = before.saturating_sub(read);
                text.push_str(&format!(
                    "After SIGCONT it wrote {} (its read + 1) over {before}: 204, {wiped} acknowledged increments gone.",
                    value.as_deref().unwrap_or("?"),
                ));
                if best.as_ref().is_none_or(|(w, _)| wiped > *w) {
                    best = Some((wiped, text));
                }
            } else {
                text.push_str(&format!(
                    "After SIGCONT its write with token {token} was refused: 409 stale_token (highest {}); nothing reached the storage.",
                    highest.map_or("?".to_owned(), |h| h.to_string())
                ));
                return Some(text);
            }
        }
        best.map(|(_, text)| text)
    }
}

fn table(direct: &Stats, fenced: &Stats, runs: [&Run; 2]) {
    let rows: Vec<(&str, String, String)> = vec![
        (
            "run time",
            format!("{:.1} s", runs[0].elapsed.as_secs_f64()),
            format!("{:.1} s", runs[1].elapsed.as_secs_f64()),
        ),
        (
            "lock grants",
            direct.grants.to_string(),
            fenced.grants.to_string(),
        ),
        (
            "lock handovers (to another worker)",
            direct.handovers.to_string(),
            fenced.handovers.to_string(),
        ),
        (
            "token order violations (must be 0)",
            direct.order_violations.to_string(),
            fenced.order_violations.to_string(),
        ),
        (
            "nemesis pauses (SIGSTOP past the lease)",
            direct.pauses.to_string(),
            fenced.pauses.to_string(),
        ),
        (
            "  of which on the lock holder",
            direct.pauses_on_holder.to_string(),
            fenced.pauses_on_holder.to_string(),
        ),
        (
            "acknowledged increments (2xx PUT)",
            direct.acknowledged.to_string(),
            fenced.acknowledged.to_string(),
        ),
        (
            "final counter",
            direct.final_counter.to_string(),
            fenced.final_counter.to_string(),
        ),
        (
            "LOST UPDATES (acknowledged - final)",
            direct.lost.to_string(),
            fenced.lost.to_string(),
        ),
        (
            "stale requests refused (409)",
            (direct.refused_reads + direct.refused_writes).to_string(),
            (fenced.refused_reads + fenced.refused_writes).to_string(),
        ),
        (
            "  reads / writes",
            format!("{} / {}", direct.refused_reads, direct.refused_writes),
            format!("{} / {}", fenced.refused_reads, fenced.refused_writes),
        ),
        (
            "  fencegate's own count (/metrics)",
            "-".to_owned(),
            runs[1]
                .gateway_stale
                .map_or("?".to_owned(), |n| n.to_string()),
        ),
        (
            "writes from a superseded holder stored (*)",
            direct.superseded_stored.to_string(),
            fenced.superseded_stored.to_string(),
        ),
        (
            "writes with unknown outcome (no answer)",
            direct.unknown_writes.to_string(),
            fenced.unknown_writes.to_string(),
        ),
    ];
    println!(
        "{:<44}{:>20}{:>20}",
        "", "without fencegate", "through fencegate"
    );
    println!("{}", "-".repeat(84));
    for (name, a, b) in rows {
        println!("{name:<44}{a:>20}{b:>20}");
    }
    println!("{}", "-".repeat(84));
    println!(
        "(*) a PUT sent after a newer token had been granted, answered 2xx. Through fencegate"
    );
    println!(
        "    this happens only while the newer holder has not used the lock yet (its fenced read"
    );
    println!("    comes after, and sees the write): harmless. Straight to the storage, it is the");
    println!("    lost update.");
    println!(
        "token order violations: pairs of grants where the second attempt began after the first"
    );
    println!("    grant had completed, yet got a token not above the first one's.");
}

/// Both runs, straight to the storage then through fencegate, against `N`
/// redis-servers; on failure, says why.
fn runs<const N: usize>(args: &Options, length: Duration) -> Option<Vec<Run>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let runtime = runtime
        .map_err(|e| println!("torture: no tokio runtime: {e}"))
        .ok()?;
    let _runtime = runtime.enter();
    process::install_ctrl_c_cleanup();
    let redis = runtime.block_on(Redis::<N>::start());
    let redis = redis
        .map_err(|e| println!("torture: could not start redis-server: {e}"))
        .ok()?;
    let mut runs = Vec::new();
    for fenced in [false, true] {
        let title = if fenced {
            "through fencegate"
        } else {
            "straight to the storage"
        };
        println!("running {title} ...");
        match run(&runtime, &redis, args, fenced, length) {
            Ok(run) => runs.push(run),
            Err(e) => {
                process::wait_if_interrupted();
                println!("torture: the run {title} failed: {e}");
                return None;
            }
        }
    }
    Some(runs)
}

fn main() -> ExitCode {
    if let Some(exit) = as_worker(torture_worker) {
        return exit;
    }
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    Redis::<1>::require();
    let length = args.duration / 2;
    let lock = match args.provider {
        Provider::Redis => "Redis SET NX PX + INCR token (one instance)".to_owned(),
        Provider::Redlock => format!(
            "Redlock over {REDLOCK_INSTANCES} instances, token = max of the majority's counters, raised"
        ),
    };
    println!(
        "torture: {} worker processes, one lock ({lock}), one counter ({KEY}).",
        args.workers
    );
    println!(
        "each worker: lock (lease {} ms) -> GET counter -> work {}-{} ms -> PUT counter+1 with the token",
        LEASE.as_millis(),
        WORK_MS.0,
        WORK_MS.1
    );
    println!("-> release. Through fencegate the GET carries the token too (a fenced read).");
    println!(
        "nemesis: every {}-{} ms, SIGSTOP a worker (the lock holder, as Redis says, {:.0}% of the",
        GAP_MS.0,
        GAP_MS.1,
        HOLDER_BIAS * 100.0
    );
    println!(
        "time; else anyone) for {}-{} ms (past its lease), then SIGCONT.",
        (LEASE.as_millis() as u64) + PAUSE_EXTRA_MS.0,
        (LEASE.as_millis() as u64) + PAUSE_EXTRA_MS.1
    );
    println!(
        "two runs of {:.1} s each: straight to the storage, then through fencegate. seed {}.",
        length.as_secs_f64(),
        args.seed
    );
    println!();

    let runs = match args.provider {
        Provider::Redis => runs::<1>(&args, length),
        Provider::Redlock => runs::<REDLOCK_INSTANCES>(&args, length),
    };
    let Some(runs) = runs else {
        return ExitCode::FAILURE;
    };
    let direct = runs[0].stats();
    let fenced = runs[1].stats();
    println!();
    table(&direct, &fenced, [&runs[0], &runs[1]]);
    println!();
    if let Some(story) = runs[0].episode() {
        println!("an episode without fencegate: {story}");
    }
    if let Some(story) = runs[1].episode() {
        println!("an episode through fencegate: {story}");
    }
    println!();

    let mut pass = true;
    let handovers = direct.handovers + fenced.handovers;
    if direct.lost > 0 {
        println!(
            "=> without fencegate: {} acknowledged increments lost.",
            direct.lost
        );
    } else {
        println!(
            "=> without fencegate: no update lost; the nemesis did not show the problem. FAIL"
        );
        pass = false;
    }
    if fenced.lost == 0 && fenced.unknown_writes == 0 {
        println!(
            "=> through fencegate: 0 lost updates; {} stale requests refused.",
            fenced.refused_reads + fenced.refused_writes
        );
    } else if fenced.lost != 0 {
        println!("=> through fencegate: {} updates LOST. FAIL", fenced.lost);
        pass = false;
    } else {
        println!(
            "=> through fencegate: {} writes with unknown outcome. FAIL",
            fenced.unknown_writes
        );
        pass = false;
    }
    if fenced.refused_reads + fenced.refused_writes == 0 {
        println!("=> through fencegate nothing was refused: the nemesis never bit. FAIL");
        pass = false;
    }
    if direct.order_violations + fenced.order_violations > 0 {
        println!(
            "=> a grant that began after another had completed got a token not above it. FAIL"
        );
        pass = false;
    }
    if direct.handovers < MIN_HANDOVERS || fenced.handovers < MIN_HANDOVERS {
        println!("=> fewer than {MIN_HANDOVERS} handovers in a run: too little contention. FAIL");
        pass = false;
    }
    let claim = format!(
        "{} lost without fencegate, 0 through it, over {handovers} lock handovers",
        direct.lost
    );
    verdict(pass, started, &claim)
}
