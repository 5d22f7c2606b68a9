//! Redlock over five independent redis-servers, with a derived fencing
//! token, and a lock holder frozen with SIGSTOP past its validity time.
//!
//! Real: five `redis-server` processes on loopback (free ports, temporary
//! dirs), two worker processes (this example re-executed), fencegate
//! in-process in front of its embedded object store, SIGSTOP/SIGCONT.
//!
//! Redlock, as in the seeds: note t0; on each instance in turn `SET lock
//! owner NX PX ttl`, each call bounded by a timeout far below the TTL; the
//! lock is held if a majority (3 of 5) said yes and the time spent is below
//! the TTL minus a clock-drift allowance; the validity left is the lease;
//! on failure, and to release, delete (compare-and-delete) everywhere.
//!
//! Redlock has no token. This demo derives one: the same script that does
//! the `SET NX PX` also `INCR`s that instance's counter; the token is the
//! maximum over the granting majority, which is then written back (raised)
//! on those instances while the lock is still held there, before the
//! validity check. See `support::redis::LockClient` and the text this demo
//! prints for what that guarantees and what it does not.
//!
//! Exit 0 only if the direct run shows worker 1's late write replacing
//! worker 2's and the fenced run shows it refused.
//!
//! ```sh
//! cargo run --example redlock
//! ```

mod support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use support::redis::{
    as_worker, client_worker, start_parent, LockClient, PauseDemo, Provider, RedisServer,
};
use support::verdict;

/// Independent Redis masters.
const INSTANCES: usize = 5;
/// The lease (PX) asked of every instance.
const TTL: Duration = Duration::from_millis(500);
/// Worker 1's pause: well past its validity (and until worker 2 is done).
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
    let start = || RedisServer::start_many(INSTANCES);
    let (runtime, servers) = match start_parent("redlock", start) {
        Ok(started) => started,
        Err(exit) => return exit,
    };

    let ttl = TTL.as_millis();
    let drift = LockClient::drift(TTL).as_millis();
    println!("redlock: Redlock over {INSTANCES} independent Redis masters, a holder frozen past its validity");
    let list: Vec<String> = servers
        .iter()
        .map(|s| format!("{} pid {} :{}", s.name, s.pid(), s.addr.port()))
        .collect();
    println!("real: redis-servers ({}),", list.join(", "));
    println!("two worker processes, SIGSTOP/SIGCONT, loopback HTTP, fencegate in-process.");
    println!("acquire (the seeds' steps): t0; on r1..r{INSTANCES} in turn, one script: SET lock <owner> NX PX {ttl}");
    println!(
        "and, if set, INCR that instance's counter (each call: {} ms timeout); a majority (3/5)",
        LockClient::instance_timeout().as_millis()
    );
    println!(
        "must say yes, and t0..now must stay below {ttl} ms - drift ({drift} ms = 1% + 2 ms);"
    );
    println!("validity = {ttl} - elapsed - drift. On failure, and to release: compare-and-delete on all.");
    println!(
        "token (Redlock has none; derived): the MAX of the counters of the granting majority,"
    );
    println!(
        "then RAISED on those instances (counter := max(counter, token), only while our key is"
    );
    println!(
        "still there) before the validity check; the grant needs the raise on a majority too."
    );
    println!(
        "(the lease-over mark on the lock's lane is drawn at attempt start + PX: Redis expires"
    );
    println!("the key by its own clock, and the next grant shows it did.)");
    println!(
        "worker 1 is frozen {}+ ms (validity about {} ms) while it prepares its write.",
        PAUSE.as_millis(),
        ttl - drift
    );
    println!();

    let demo = PauseDemo {
        provider: Provider::Redlock,
        servers: &servers,
        lock_lane: "redlock r1-r5",
        ttl: TTL,
        pause: PAUSE,
        work: WORK,
        stop_after: STOP_AFTER,
    };
    let runs = demo.run_both(&runtime, |t1| {
        format!(
            "   worker 1's (token {t1}), sent after its keys had expired on every instance and a\n   majority had granted the lock to worker 2. Redlock did its job; nothing checked."
        )
    });
    let Some(pass) = runs else {
        return ExitCode::FAILURE;
    };

    println!("what the derived token guarantees, and what it does not:");
    println!(
        "- the max alone would not do: counters drift apart (a grant or a failed attempt touches"
    );
    println!(
        "  only some instances), e.g. r1=10 r2=0 r3=0: A gets r1,r2 -> 11, then B gets r2,r3 -> 2."
    );
    println!("- with the raise: A's token sits on a majority before A uses it; any later majority");
    println!(
        "  shares one of those instances, whose INCR then exceeds A's token. Each raise ran while"
    );
    println!(
        "  A's key was still on that instance, so B's SET NX there came after it. Hence: if A's"
    );
    println!(
        "  acquisition completed before B's began (a paused holder and its successor), B's token"
    );
    println!("  is larger, with no assumption about clocks.");
    println!("- for acquisitions that overlap in time, the order rests on Redlock's own timing");
    println!(
        "  assumptions (bounded clock drift, no clock jumps, pauses caught by the validity check)."
    );
    println!(
        "- it holds only while instances never forget a counter. These run without persistence:"
    );
    println!(
        "  a restarted (or flushed, or failed-over) instance starts at 0, and if it is the one a"
    );
    println!(
        "  later majority shares with an earlier one, the later grant can get a token at or below"
    );
    println!(
        "  one already handed out; a paused holder with the higher token would then be let through"
    );
    println!("  over the new holder. Use appendonly yes + appendfsync always on every instance, or keep a");
    println!("  restarted instance out until its counter is raised above the others'.");
    println!(
        "- fencegate does not need Redlock's mutual exclusion to be perfect: even two holders at"
    );
    println!(
        "  once (clock jump) cannot land writes out of token order. It does need the token order."
    );
    println!();

    drop(servers);
    verdict(
        pass,
        started,
        "the direct run lost worker 2's write, fencegate refused the stale one",
    )
}
