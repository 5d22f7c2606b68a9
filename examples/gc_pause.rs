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
    call, fence_highest, fence_path, freeze, heading, legend, shown, spawn_process, start_gateway,
    LeaseLock, Reply, Result, Route, Storage, Timeline,
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

struct Outcome {
    diagram: String,
    client_1: Reply,
    client_2: Reply,
    stored: Option<String>,
    highest: Option<u64>,
}

async fn run(fenced: bool) -> Result<Outcome> {
    let lanes: &[&str] = if fenced {
        &["client 1", "client 2", "lock", "fencegate", "storage"]
    } else {
        &["client 1", "client 2", "lock", "storage"]
    };
    let tl = Timeline::new(lanes);
    let gateway_lane = tl.find_lane("fencegate");
    let storage = Storage::start(&tl, gateway_lane).await?;
    let gateway = match fenced {
        true => Some(start_gateway(storage.addr).await?),
        false => None,
    };
    let route = match (&gateway, gateway_lane) {
        (Some(gateway), Some(lane)) => Route::direct(gateway.data_addr(), lane),
        _ => Route::direct(storage.addr, tl.lane("storage")),
    };
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
    let client_2 = spawn_process("client 2", {
        let (tl, lock) = (tl.clone(), lock.clone());
        move || async move {
            let me = tl.lane("client 2");
            tokio::time::sleep(CLIENT_2_START).await;
            let lease = lock.acquire(me, LEASE).await;
            let reply = call(
                &tl,
                me,
                &route,
                Method::PUT,
                KEY,
                Some(lease.token),
                Some(FROM_2),
            )
            .await;
            lock.release(me, &lease);
            reply
        }
    });
    let client_1 = client_1.await.map_err(|_| "client 1 panicked")??;
    let client_2 = client_2.await.map_err(|_| "client 2 panicked")??;

    let stored = storage.peek(KEY).await?;
    let highest = match &gateway {
        Some(gateway) => fence_highest(gateway, KEY).await?,
        None => None,
    };
    if let Some(gateway) = gateway {
        gateway.shutdown().await;
    }
    storage.stop();
    Ok(Outcome {
        diagram: tl.render(),
        client_1,
        client_2,
        stored,
        highest,
    })
}

fn show(title: &str, outcome: &Outcome) {
    println!("{}", heading(title));
    print!("{}", outcome.diagram);
    println!("{}", legend());
    println!();
    println!("final stored value of {KEY}: {}", shown(&outcome.stored));
    if let Some(highest) = outcome.highest {
        println!(
            "fencegate admin plane: GET {} -> highest {highest}",
            fence_path(KEY)
        );
    }
}

#[tokio::main]
async fn main() -> ExitCode {
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

    let mut pass = true;

    let direct = match run(false).await {
        Ok(outcome) => outcome,
        Err(e) => {
            println!("direct run failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    show(
        "run 1 of 2: straight to the storage, nothing checks tokens",
        &direct,
    );
    let corrupted =
        direct.client_1.ok() && direct.client_2.ok() && direct.stored.as_deref() == Some(FROM_1);
    if corrupted {
        println!("=> CORRUPTED: client 2's acknowledged write (token 34) was silently replaced by");
        println!("   client 1's write (token 33), sent after its lease had expired.");
    } else {
        println!("=> expected the stale write to overwrite client 2's, but it did not");
        pass = false;
    }
    println!();

    let fenced = match run(true).await {
        Ok(outcome) => outcome,
        Err(e) => {
            println!("fenced run failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    show("run 2 of 2: through fencegate", &fenced);
    let refused = fenced.client_1.is_stale()
        && fenced.client_2.ok()
        && fenced.stored.as_deref() == Some(FROM_2);
    if refused {
        println!(
            "=> SAFE: fencegate refused token 33 (409 stale_token, highest 34); the write never"
        );
        println!(
            "   reached the storage and client 2's write stands. Client 1 learns it lost the lock."
        );
    } else {
        println!(
            "=> expected 409 for client 1 and client 2's value stored; client 1 got {}",
            fenced.client_1.status
        );
        pass = false;
    }
    println!();

    let elapsed = started.elapsed().as_secs_f64();
    if pass {
        println!("VERDICT: PASS: the direct run lost client 2's write, fencegate refused the stale one ({elapsed:.1} s)");
        ExitCode::SUCCESS
    } else {
        println!("VERDICT: FAIL: the runs did not show what this demo claims ({elapsed:.1} s)");
        ExitCode::FAILURE
    }
}
