//! Kleppmann's "unsafe lock" figure, run for real.
//!
//! Client 1 takes a lease lock (token 33) and checks that its lease is still
//! good, then stops (a simulated stop-the-world GC pause) for longer than its
//! lease. The lease runs out, client 2 takes the lock (token 34) and writes.
//! Client 1 wakes up, still sure it holds the lock, and writes.
//!
//! The scenario runs twice: straight against the storage (client 1's write
//! silently replaces client 2's), then through fencegate (client 1's write is
//! refused with 409 and never reaches the storage). Exit status 0 only if
//! both runs show exactly that.
//!
//! ```sh
//! cargo run --example gc_pause
//! ```

mod support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use support::{
    judge_two_clients, run_timeline, start_backend, two_clients, Result, Route, TwoClients,
    TwoClientsText, LEASE,
};

/// Client 1's pause: well past its lease.
const PAUSE: Duration = Duration::from_millis(800);

/// What the runs say when they show what they should.
const TEXT: TwoClientsText = TwoClientsText {
    corrupted: &[
        "=> CORRUPTED: client 2's acknowledged write (token 34) was silently replaced by",
        "   client 1's write (token 33), sent after its lease had expired.",
    ],
    write: "stale",
    safe: &[
        "=> SAFE: fencegate refused token 33 (409 stale_token, highest 34); the write never",
        "   reached the storage and client 2's write stands. Client 1 learns it lost the lock.",
    ],
};

async fn run(fenced: bool) -> Result<TwoClients> {
    let tl = run_timeline(&["client 1", "client 2", "lock"], fenced);
    let (storage, gateway, addr, lane) = start_backend(&tl, fenced).await?;
    let route = Route::direct(addr, lane);
    let (then, pause) = ("goes ahead", Some(PAUSE));
    two_clients(&tl, storage, gateway, [route, route], then, pause).await
}

fn main() -> ExitCode {
    let started = Instant::now();
    println!("gc_pause: a lock holder paused past its lease (Kleppmann, \"How to do distributed locking\")");
    println!(
        "real: loopback HTTP, fencegate in-process, its embedded object store, lease expiry by wall time."
    );
    println!(
        "simulated: the lock service (in-process lease lock) and the GC pause (client 1's thread is"
    );
    println!(
        "frozen with std::thread::sleep for {} ms; its lease is {} ms).",
        PAUSE.as_millis(),
        LEASE.as_millis()
    );
    println!();

    let claim = "the direct run lost client 2's write, fencegate refused the stale one";
    judge_two_clients(started, run, &TEXT, claim)
}
