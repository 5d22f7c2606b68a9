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

use support::lock_demo::{self, Demo};
use support::redis::{Redis, RedisLock};

const DEMO: Demo = Demo {
    name: "redis_lock",
    service: "redis",
    title: "a Redis lock holder frozen past its lease (the seeds' SET NX PX recipe)",
    intro: &[
        "lock:  one Lua script, atomically: if SET fencegate-demo:lock <owner> NX PX 500",
        "       then return INCR fencegate-demo:lock:token; release: DEL only if the value is",
        "       still <owner>.",
        "token: the INCR that comes with the grant.",
        "real:  redis-server on loopback (no persistence), two worker processes, SIGSTOP/SIGCONT,",
        "       fencegate in-process in front of its embedded object store.",
    ],
    outro: &[
        "what the token guarantees: INCR runs in the same script as the SET, so every grant",
        "gets the next number, strictly increasing, for as long as Redis keeps the counter.",
        "This demo runs Redis without persistence. A restart, FLUSHALL, or a failover to a",
        "replica that missed the INCR resets the counter: new grants then get tokens below ones",
        "already handed out, so new holders are refused wherever the fence is higher, and a",
        "holder from before, paused with its higher token, would be let through over them.",
        "Persist the counter (appendonly yes, appendfsync always), or seed it above every token",
        "ever issued before the lock is used again.",
    ],
    claim: "the direct run lost worker 2's write, fencegate refused the stale one",
};

fn main() -> ExitCode {
    lock_demo::main::<Redis<1>, RedisLock>(&DEMO)
}
