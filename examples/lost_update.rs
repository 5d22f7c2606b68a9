//! A read-modify-write counter: fencing only the writes still loses an
//! update; sending the token on the read too (a fenced read) does not.
//!
//! Two clients each add 1 to a counter (stored as text, seeded with "0")
//! under a lease lock: take the lock, read, compute, write. Client 1 (token
//! 33) reads, computes, then stops (a simulated GC pause) past its lease.
//! Client 2 (token 34) takes the lock and reads the same old value; while it
//! computes, client 1 wakes up and writes; then client 2 writes back a value
//! computed from its read, which no longer is the current one.
//!
//! Three runs:
//! 1. straight to the storage: both writes succeed, the counter ends at 1;
//! 2. through fencegate, token on the writes only: client 1's write (33)
//!    comes before any write with 34, so nothing is stale, the counter still
//!    ends at 1;
//! 3. through fencegate, token on the reads too: client 2's read raised the
//!    fence to 34, client 1's write is refused, client 1 starts over with a
//!    new lease, and the counter ends at 2.
//!
//! Exit status 0 only if runs 1 and 2 lose an update and run 3 does not.
//!
//! ```sh
//! cargo run --example lost_update
//! ```

mod support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use http::Method;
use support::{
    call, end_run, run_timeline, show_run, shown, spawn_client, start_backend, verdict, Lane,
    LeaseLock, Result, Route, Timeline, CLIENT_2_START, LEASE,
};

/// The counter.
const KEY: &str = "/demo/counter";
/// Client 1's pause between its read and its write: past its lease, and
/// into client 2's read-compute-write.
const PAUSE: Duration = Duration::from_millis(650);
/// Client 2's (honest, unpaused) work between its read and its write.
const WORK: Duration = Duration::from_millis(300);
/// A client that was refused starts over at most this many times.
const ATTEMPTS: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Clients talk to the storage.
    Direct,
    /// Through fencegate, token on writes only.
    FencedWrites,
    /// Through fencegate, token on reads and writes.
    FencedReadsAndWrites,
}

impl Mode {
    fn fenced(self) -> bool {
        self != Mode::Direct
    }

    fn token_on_reads(self) -> bool {
        self == Mode::FencedReadsAndWrites
    }
}

/// What one client saw.
#[derive(Debug, Default)]
struct Client {
    /// Increments the storage acknowledged (2xx on the write).
    acknowledged: u64,
    /// Writes fencegate refused as stale.
    refused: u64,
}

/// One increment under the lock, started over (with a new lease) when
/// fencegate says the lease has moved on. `between(attempt)` runs between
/// the read and the write (attempt 0 is the first).
async fn increment(
    tl: &Timeline,
    lock: &LeaseLock,
    me: Lane,
    route: &Route,
    mode: Mode,
    between: impl Fn(usize),
) -> Result<Client> {
    let mut seen = Client::default();
    for attempt in 0..ATTEMPTS {
        let lease = lock.acquire(me, LEASE).await;
        let read_token = mode.token_on_reads().then_some(lease.token);
        let read = call(tl, me, route, Method::GET, KEY, read_token, None).await?;
        if read.is_stale() {
            seen.refused += 1;
            tl.note(me, "its read was refused: starts over");
            continue;
        }
        let value: u64 = match read.status.as_u16() {
            200 => read.body.trim().parse()?,
            404 => 0,
            other => return Err(format!("read failed: {other}").into()),
        };
        tl.note(me, format!("computes {value} + 1 = {}", value + 1));
        between(attempt);
        let next = (value + 1).to_string();
        let write = call(
            tl,
            me,
            route,
            Method::PUT,
            KEY,
            Some(lease.token),
            Some(&next),
        )
        .await?;
        if write.ok() {
            seen.acknowledged += 1;
            lock.release(me, &lease);
            return Ok(seen);
        }
        if write.is_stale() {
            seen.refused += 1;
            tl.note(me, "learns it lost the lock: starts over");
            continue;
        }
        return Err(format!("write failed: {}", write.status).into());
    }
    Err(format!("gave up after {ATTEMPTS} attempts").into())
}

struct Outcome {
    diagram: String,
    client_1: Client,
    client_2: Client,
    stored: Option<String>,
    highest: Option<u64>,
}

impl Outcome {
    fn acknowledged(&self) -> u64 {
        self.client_1.acknowledged + self.client_2.acknowledged
    }

    fn counter(&self) -> Option<u64> {
        self.stored.as_deref().and_then(|s| s.trim().parse().ok())
    }

    fn lost_update(&self) -> bool {
        self.counter().is_some_and(|c| c < self.acknowledged())
    }

    fn refused(&self) -> u64 {
        self.client_1.refused + self.client_2.refused
    }
}

async fn run(mode: Mode) -> Result<Outcome> {
    let tl = run_timeline(&["client 1", "client 2", "lock"], mode.fenced());
    let (storage, gateway, addr, lane) = start_backend(&tl, mode.fenced()).await?;
    storage.seed(KEY, "0").await?;
    tl.note(tl.lane("storage"), "counter seeded: \"0\"");
    let route = Route::direct(addr, lane);
    let lock = LeaseLock::new(&tl, 33);

    let client_1 = spawn_client("client 1", &tl, &lock, move |tl, lock, me| async move {
        let pause = |attempt: usize| {
            if attempt == 0 {
                support::freeze(&tl, me, PAUSE, "GC");
            }
        };
        increment(&tl, &lock, me, &route, mode, pause).await
    });
    let client_2 = spawn_client("client 2", &tl, &lock, move |tl, lock, me| async move {
        tokio::time::sleep(CLIENT_2_START).await;
        // Client 2 is not paused: it works for WORK between read and
        // write, well within its lease. Blocking here is fine: client 2
        // has a thread and a runtime of its own, and nothing else to do.
        let work = |_: usize| std::thread::sleep(WORK);
        increment(&tl, &lock, me, &route, mode, work).await
    });
    let client_1 = client_1.await.map_err(|_| "client 1 panicked")??;
    let client_2 = client_2.await.map_err(|_| "client 2 panicked")??;

    let (stored, highest) = end_run(storage, gateway, KEY).await?;
    Ok(Outcome {
        diagram: tl.render(),
        client_1,
        client_2,
        stored,
        highest,
    })
}

fn show(title: &str, outcome: &Outcome) {
    let more = format!(
        "; increments acknowledged to the clients: {}; refused: {}",
        outcome.acknowledged(),
        outcome.refused()
    );
    show_run(
        title,
        &outcome.diagram,
        KEY,
        &outcome.stored,
        &more,
        outcome.highest,
    );
}

#[tokio::main]
async fn main() -> ExitCode {
    let started = Instant::now();
    println!("lost_update: a read-modify-write counter under a lease lock, two increments");
    println!(
        "real: loopback HTTP, fencegate in-process, its embedded object store, lease expiry by"
    );
    println!("wall time. simulated: the lock service (in-process lease lock), client 1's GC pause");
    println!(
        "between read and write (thread frozen {} ms; the lease is {} ms) and client 2's work",
        PAUSE.as_millis(),
        LEASE.as_millis()
    );
    println!(
        "between read and write ({} ms, within its lease).",
        WORK.as_millis()
    );
    println!();

    let runs = [
        (
            Mode::Direct,
            "run 1 of 3: straight to the storage, nothing checks tokens",
        ),
        (
            Mode::FencedWrites,
            "run 2 of 3: through fencegate, token on writes only",
        ),
        (
            Mode::FencedReadsAndWrites,
            "run 3 of 3: through fencegate, token on reads and writes",
        ),
    ];
    let mut pass = true;
    for (mode, title) in runs {
        let outcome = match run(mode).await {
            Ok(outcome) => outcome,
            Err(e) => {
                println!("{title}: failed: {e}");
                return ExitCode::FAILURE;
            }
        };
        show(title, &outcome);
        let lost = outcome.lost_update();
        match mode {
            Mode::Direct if lost && outcome.refused() == 0 => {
                println!("=> LOST UPDATE: both increments were acknowledged, the counter says 1.");
                println!("   Client 2 wrote back a value computed from a read taken before client 1's write.");
            }
            Mode::FencedWrites if lost && outcome.refused() == 0 => {
                println!("=> LOST UPDATE, fencing or not: token 33's write came before any write with 34,");
                println!(
                    "   so nothing was stale; client 2's read (no token) did not raise the fence."
                );
            }
            Mode::FencedReadsAndWrites
                if !lost
                    && outcome.counter() == Some(2)
                    && outcome.client_1.refused >= 1
                    && outcome.highest.is_some_and(|h| h >= 35) =>
            {
                println!("=> NO LOSS: client 2's read carried token 34 and raised the fence, so client 1's");
                println!(
                    "   write with 33 was refused; client 1 took the lock again (35), re-read, and"
                );
                println!("   wrote 2. Every acknowledged increment is in the counter.");
            }
            _ => {
                println!(
                    "=> unexpected: counter {}, {} acknowledged, {} refused",
                    shown(&outcome.stored),
                    outcome.acknowledged(),
                    outcome.refused()
                );
                pass = false;
            }
        }
        println!();
    }

    verdict(
        pass,
        started,
        "direct and write-only fencing lost an update, fenced reads did not",
    )
}
