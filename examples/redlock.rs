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
//! validity check. See `support::redis` and the text this demo
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

use support::lock_demo::{self, Demo};
use support::redis::{Redis, RedisLock};

const DEMO: Demo = Demo {
    name: "redlock",
    service: "redlock r1-r5",
    title: "Redlock over 5 independent Redis masters, a holder frozen past its validity",
    intro: &[
        "acquire (the seeds' steps): t0; on r1..r5 in turn, one script: SET lock <owner> NX PX 500",
        "and, if set, INCR that instance's counter (each call: 50 ms timeout); a majority (3/5)",
        "must say yes, and t0..now must stay below 500 ms - drift (7 ms = 1% + 2 ms);",
        "validity = 500 - elapsed - drift. On failure, and to release: compare-and-delete on all.",
        "token (Redlock has none; derived): the MAX of the counters of the granting majority,",
        "then RAISED on those instances (counter := max(counter, token), only while our key is",
        "still there) before the validity check; the grant needs the raise on a majority too.",
        "real: five redis-servers on loopback (no persistence), two worker processes,",
        "SIGSTOP/SIGCONT, loopback HTTP, fencegate in-process.",
    ],
    outro: &[
        "what the derived token guarantees, and what it does not:",
        "- the max alone would not do: counters drift apart (a grant or a failed attempt touches",
        "  only some instances), e.g. r1=10 r2=0 r3=0: A gets r1,r2 -> 11, then B gets r2,r3 -> 2.",
        "- with the raise: A's token sits on a majority before A uses it; any later majority",
        "  shares one of those instances, whose INCR then exceeds A's token. Each raise ran while",
        "  A's key was still on that instance, so B's SET NX there came after it. Hence: if A's",
        "  acquisition completed before B's began (a paused holder and its successor), B's token",
        "  is larger, with no assumption about clocks.",
        "- for acquisitions that overlap in time, the order rests on Redlock's own timing",
        "  assumptions (bounded clock drift, no clock jumps, pauses caught by the validity check).",
        "- it holds only while instances never forget a counter. These run without persistence:",
        "  a restarted (or flushed, or failed-over) instance starts at 0, and if it is the one a",
        "  later majority shares with an earlier one, the later grant can get a token at or below",
        "  one already handed out; a paused holder with the higher token would then be let through",
        "  over the new holder. Use appendonly yes + appendfsync always on every instance, or keep a",
        "  restarted instance out until its counter is raised above the others'.",
        "- fencegate does not need Redlock's mutual exclusion to be perfect: even two holders at",
        "  once (clock jump) cannot land writes out of token order. It does need the token order.",
    ],
    claim: "the direct run lost worker 2's write, fencegate refused the stale one",
};

fn main() -> ExitCode {
    lock_demo::main::<Redis<5>, RedisLock>(&DEMO)
}
