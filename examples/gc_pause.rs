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

use http::Method;
use support::{
    call, direct_then_fenced, end_run, freeze, spawn_client_2, spawn_process, start_backend,
    verdict, LeaseLock, Result, Route, Timeline, TwoClients, TwoClientsText,
};

/// The object both clients write.
const KEY: &str = "/demo/report";
/// Lease of every grant.
const LEASE: Duration = Duration::from_millis(500);
/// Client 1's pause: well past its lease.
const PAUSE: Duration = Duration::from_millis(800);
/// Client 2 shows up a little after client 1.
const CLIENT_2_START: Duration = Duration::from_millis(50);

const FROM_1: &str = "from client 1";
const FROM_2: &str = "from client 2";

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
    let lanes: &[&str] = if fenced {
        &["client 1", "client 2", "lock", "fencegate", "storage"]
    } else {
        &["client 1", "client 2", "lock", "storage"]
    };
    let tl = Timeline::new(lanes);
    let (storage, gateway, addr, lane) = start_backend(&tl, fenced).await?;
    let route = Route::direct(addr, lane);
    let lock = LeaseLock::new(&tl, 33);

    let client_1 = spawn_process("client 1", {
        let (tl, lock) = (tl.clone(), lock.clone());
        move || async move {
            let me = tl.lane("client 1");
            let lease = lock.acquire(me, LEASE).await;
            tl.note(
                me,
                format!(
                    "checks its lease: {} ms left, goes ahead",
                    lease.remaining().as_millis()
                ),
            );
            freeze(&tl, me, PAUSE, "GC");
            call(
                &tl,
                me,
                &route,
                Method::PUT,
                KEY,
                Some(lease.token),
                Some(FROM_1),
            )
            .await
        }
    });
    let client_2 = spawn_client_2(&tl, &lock, route, CLIENT_2_START, LEASE, KEY, FROM_2);
    let client_1 = client_1.await.map_err(|_| "client 1 panicked")??;
    let client_2 = client_2.await.map_err(|_| "client 2 panicked")??;

    let (stored, highest) = end_run(storage, gateway, KEY).await?;
    Ok(TwoClients {
        key: KEY,
        values: [FROM_1, FROM_2],
        diagram: tl.render(),
        client_1,
        client_2,
        stored,
        highest,
    })
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
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

    let runs = direct_then_fenced(
        |fenced| runtime.block_on(run(fenced)).map_err(|e| e.to_string()),
        |fenced, outcome| outcome.judge(fenced, &TEXT),
    );
    let Some(pass) = runs else {
        return ExitCode::FAILURE;
    };
    verdict(
        pass,
        started,
        "the direct run lost client 2's write, fencegate refused the stale one",
    )
}
