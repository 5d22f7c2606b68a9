//! A Redis lock (the seeds' recipe) with its natural fencing token, and a
//! lock holder frozen with SIGSTOP past its lease.
//!
//! Real: a `redis-server` started on loopback (free port, temporary dir),
//! two worker processes (this example re-executed), fencegate in-process in
//! front of its embedded object store, loopback HTTP, SIGSTOP/SIGCONT.
//!
//! The lock: one Lua script does `SET lock owner NX PX 500` and, only if the
//! key was set, `INCR` of a token counter, so the token comes with the grant
//! atomically. Release is the compare-and-delete script.
//!
//! Worker 1 takes the lock, checks its lease, and while it prepares its
//! write the demo freezes its process (SIGSTOP) for longer than the lease.
//! Redis expires the key; worker 2 takes the lock with the next token and
//! writes. Worker 1 gets SIGCONT and writes. Straight to the storage its
//! write replaces worker 2's; through fencegate it is refused (409). Exit 0
//! only if both runs show exactly that.
//!
//! ```sh
//! cargo run --example redis_lock
//! ```

mod support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use support::process::install_ctrl_c_cleanup;
use support::redis::{
    client_worker, parent_runtime, worker_args, PauseDemo, PauseOutcome, Provider, RedisServer,
    KEY, LOCK_KEY, TOKEN_KEY, VALUES,
};
use support::{fence_path, heading, legend, shown};

/// The lease (PX) of every grant.
const TTL: Duration = Duration::from_millis(500);
/// Worker 1's pause: well past its lease (and until worker 2 is done).
const PAUSE: Duration = Duration::from_millis(1000);
/// Each worker's work between its lease check and its write.
const WORK: Duration = Duration::from_millis(200);
/// When, into worker 1's work, the SIGSTOP comes.
const STOP_AFTER: Duration = Duration::from_millis(40);

fn show(title: &str, outcome: &PauseOutcome) {
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

fn main() -> ExitCode {
    if let Some((role, opts)) = worker_args() {
        return match role.as_str() {
            "client" => client_worker(&opts),
            _ => ExitCode::from(2),
        };
    }
    let started = Instant::now();
    let runtime = match parent_runtime() {
        Ok(runtime) => runtime,
        Err(e) => {
            println!("redis_lock: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async { install_ctrl_c_cleanup() });
    let redis = match RedisServer::start("redis") {
        Ok(redis) => redis,
        Err(e) => {
            println!("redis_lock: could not start redis-server: {e:#}");
            return ExitCode::FAILURE;
        }
    };

    println!("redis_lock: a Redis lock holder frozen past its lease (the seeds' SET NX PX recipe)");
    println!(
        "real: redis-server (pid {}, {}, no persistence), two worker processes, SIGSTOP/SIGCONT,",
        redis.pid(),
        redis.addr
    );
    println!("loopback HTTP, fencegate in-process, its embedded object store.");
    println!("lock: one Lua script, atomically:");
    println!(
        "  if SET {LOCK_KEY} <owner> NX PX {} then return INCR {TOKEN_KEY}",
        TTL.as_millis()
    );
    println!("so the token comes with the grant; release: DEL only if the value is still <owner>.");
    println!(
        "(the lease-over mark on the lock's lane is drawn at attempt start + PX: Redis expires"
    );
    println!("the key by its own clock, and the next grant shows it did.)");
    println!(
        "worker 1 is frozen {}+ ms (its lease is {} ms) while it prepares its write.",
        PAUSE.as_millis(),
        TTL.as_millis()
    );
    println!();

    let demo = PauseDemo {
        provider: Provider::Redis,
        servers: std::slice::from_ref(&redis),
        lock_lane: "redis",
        ttl: TTL,
        pause: PAUSE,
        work: WORK,
        stop_after: STOP_AFTER,
    };
    let mut pass = true;

    let direct = match demo.run(&runtime, false) {
        Ok(outcome) => outcome,
        Err(e) => {
            println!("direct run failed: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    show(
        "run 1 of 2: straight to the storage, nothing checks tokens",
        &direct,
    );
    if direct.corrupted() {
        let [t1, t2] = direct.tokens.map(|t| t.unwrap_or(0));
        println!(
            "=> CORRUPTED: worker 2's acknowledged write (token {t2}) was silently replaced by"
        );
        println!(
            "   worker 1's write (token {t1}), sent after Redis had expired its lease and granted"
        );
        println!("   the lock to worker 2. The lock did its job; nothing checked the token.");
    } else {
        println!(
            "=> expected worker 1's late write to replace worker 2's: {}",
            direct.summary()
        );
        pass = false;
    }
    println!();

    let fenced = match demo.run(&runtime, true) {
        Ok(outcome) => outcome,
        Err(e) => {
            println!("fenced run failed: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    show("run 2 of 2: through fencegate", &fenced);
    if fenced.refused() {
        let [t1, t2] = fenced.tokens.map(|t| t.unwrap_or(0));
        println!(
            "=> SAFE: fencegate refused token {t1} (409 stale_token, highest {t2}); the late write"
        );
        println!(
            "   never reached the storage, which still holds {:?}.",
            VALUES[1]
        );
    } else {
        println!(
            "=> expected 409 for worker 1 and worker 2's value stored: {}",
            fenced.summary()
        );
        pass = false;
    }
    println!();
    println!("what the token guarantees: INCR runs in the same script as the SET, so every grant");
    println!("gets the next number, strictly increasing, for as long as Redis keeps the counter.");
    println!("This demo runs Redis without persistence. A restart, FLUSHALL, or a failover to a");
    println!(
        "replica that missed the INCR resets the counter: new grants then get tokens below ones"
    );
    println!("already handed out, so new holders are refused wherever the fence is higher, and a");
    println!("holder from before, paused with its higher token, would be let through over them.");
    println!(
        "Persist the counter (appendonly yes, appendfsync always), or seed it above every token"
    );
    println!("ever issued before the lock is used again.");
    println!();

    drop(redis);
    let elapsed = started.elapsed().as_secs_f64();
    if pass {
        println!("VERDICT: PASS: the direct run lost worker 2's write, fencegate refused the stale one ({elapsed:.1} s)");
        ExitCode::SUCCESS
    } else {
        println!("VERDICT: FAIL: the runs did not show what this demo claims ({elapsed:.1} s)");
        ExitCode::FAILURE
    }
}
