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

use support::redis::{
    as_worker, client_worker, start_parent, PauseDemo, Provider, RedisServer, LOCK_KEY, TOKEN_KEY,
};
use support::verdict;

/// The lease (PX) of every grant.
const TTL: Duration = Duration::from_millis(500);
/// Worker 1's pause: well past its lease (and until worker 2 is done).
const PAUSE: Duration = Duration::from_millis(1000);
/// Each worker's work between its lease check and its write.
const WORK: Duration = Duration::from_millis(200);
/// When, into worker 1's work, the SIGSTOP comes.
const STOP_AFTER: Duration = Duration::from_millis(40);

fn main() -> ExitCode {
    if let Some(exit) = as_worker("client", client_worker) {
        return exit;
    }
    let started = Instant::now();
    let start = || RedisServer::start("redis").map(|redis| vec![redis]);
    let (runtime, servers) = match start_parent("redis_lock", start) {
        Ok(started) => started,
        Err(exit) => return exit,
    };
    let redis = &servers[0];

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
        servers: &servers,
        lock_lane: "redis",
        ttl: TTL,
        pause: PAUSE,
        work: WORK,
        stop_after: STOP_AFTER,
    };
    let runs = demo.run_both(&runtime, |t1| {
        format!(
            "   worker 1's write (token {t1}), sent after Redis had expired its lease and granted\n   the lock to worker 2. The lock did its job; nothing checked the token."
        )
    });
    let Some(pass) = runs else {
        return ExitCode::FAILURE;
    };
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

    drop(servers);
    verdict(
        pass,
        started,
        "the direct run lost worker 2's write, fencegate refused the stale one",
    )
}
