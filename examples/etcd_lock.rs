//! etcd's lock, a worker process frozen past its lease, and fencegate.
//!
//! Recipe (the seeds' etcd section, etcd's `concurrency.Mutex` as a service):
//! each worker grants itself a lease (TTL 2 s) and keeps it alive every
//! 600 ms in the background, then calls `/v3/lock/lock` with the lock's name
//! and the lease. etcd puts a key `NAME/LEASE` under the lease and answers
//! once that key has the lowest create revision under `NAME/` (every older
//! key was deleted: unlocked, or its lease ran out). Unlock deletes the key.
//!
//! Token: the **create revision** of the worker's own lock key, read with
//! `/v3/kv/range` right after the lock is granted. Revisions are etcd's
//! global, cluster-wide counter (one per write, never reused, kept across
//! restarts and leader changes), and the lock goes to the lowest create
//! revision, so each grant's token is higher than every earlier holder's.
//!
//! Worker 1 (a real process) is frozen with SIGSTOP right after checking its
//! lease; its keep-alive stops with it, etcd lets the lease expire and
//! deletes its key, worker 2 gets the lock with a higher revision and
//! writes. SIGCONT: worker 1 writes with its old revision. Run twice, straight
//! to the storage and through fencegate; exit 0 only if the first run lost
//! worker 2's write and the second refused worker 1's.
//!
//! ```sh
//! cargo run --example etcd_lock
//! ```

mod support;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;
use support::etcd::{b64, call, int, unb64, Etcd};
use support::lock_demo::{self, Args, Demo, LockClient, Reporter, Service};
use support::Result;

/// The lock both workers take.
const LOCK: &str = "report-lock";
/// Lease TTL in seconds (etcd's minimum with default timing is about 2 s).
const TTL: i64 = 2;

const DEMO: Demo = Demo {
    name: "etcd_lock",
    service: "etcd",
    title: "etcd's lock (/v3/lock, lease TTL 2 s) and a worker process frozen past its lease",
    intro: &[
        "recipe: lease grant (TTL 2 s, kept alive every 600 ms) + /v3/lock/lock NAME with the lease:",
        "        etcd creates NAME/LEASE and answers when it has the lowest create revision.",
        "token:  the create revision of the worker's own lock key (/v3/kv/range), etcd's global",
        "        revision counter: never reused, so every later holder's token is higher.",
        "real:   etcd 3.4 on loopback (JSON gateway), two worker processes, SIGSTOP/SIGCONT,",
        "        fencegate in-process in front of its embedded object store.",
    ],
    outro: &[],
    claim: "etcd tokens (create revision of the lock key) only grow; the direct run lost worker 2's write, fencegate refused the stale one",
};

struct EtcdService(Etcd);

impl Service for EtcdService {
    fn require() {
        Etcd::require();
    }

    async fn start() -> Result<Self> {
        Ok(EtcdService(Etcd::start().await?))
    }

    fn worker_args(&self) -> Vec<String> {
        vec![format!("etcd={}", self.0.addr), format!("lock={LOCK}")]
    }

    /// Watches worker 1's lock key until etcd deletes it (its lease ran out).
    async fn released(&self, _token: u64, key: String) -> Result<(Instant, String)> {
        loop {
            let range = call(
                self.0.addr,
                "/v3/kv/range",
                json!({ "key": b64(key.as_bytes()) }),
            )
            .await?;
            if int(&range["count"]) == 0 {
                let revision = int(&range["header"]["revision"]);
                let lease = key.rsplit('/').next().unwrap_or_default();
                return Ok((
                    Instant::now(),
                    format!("lease {lease} expired: key deleted (now rev {revision})"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One worker's etcd client.
struct EtcdLock {
    addr: SocketAddr,
    name: String,
}

/// A granted lock: the lease, its keep-alive task and the lock key.
struct Held {
    lease: i64,
    key: String,
    keepalive: tokio::task::JoinHandle<()>,
}

/// Keeps `lease` alive every TTL/3, as etcd's `concurrency.Session` does,
/// and says when etcd no longer knows the lease.
async fn keep_alive(addr: SocketAddr, lease: i64, rep: Reporter) {
    let every = Duration::from_millis(TTL as u64 * 1000 / 3);
    loop {
        tokio::time::sleep(every).await;
        match call(
            addr,
            "/v3/lease/keepalive",
            json!({ "ID": lease.to_string() }),
        )
        .await
        {
            Ok(answer) if int(&answer["result"]["TTL"]) > 0 => {}
            Ok(_) => {
                rep.note(format!("keep-alive: lease {lease:x} is gone"));
                return;
            }
            Err(e) => {
                rep.note(format!("keep-alive failed: {e}"));
                return;
            }
        }
    }
}

impl LockClient for EtcdLock {
    type Held = Held;

    async fn connect(args: &Args, _rep: &Reporter) -> Result<Self> {
        Ok(EtcdLock {
            addr: args.parse_as("etcd")?,
            name: args.get("lock")?.to_owned(),
        })
    }

    async fn acquire(&mut self, rep: &Reporter) -> Result<(u64, String, Held)> {
        rep.ask(format!("lease grant TTL {TTL} s"));
        let grant = call(self.addr, "/v3/lease/grant", json!({ "TTL": TTL })).await?;
        let lease = int(&grant["ID"]);
        if lease == 0 {
            return Err(format!("lease grant: {grant}").into());
        }
        rep.answer(format!("lease {lease:x} (TTL {} s)", int(&grant["TTL"])));
        let keepalive = tokio::spawn(keep_alive(self.addr, lease, rep.clone()));

        rep.ask(format!("lock {:?} with the lease", self.name));
        let locked = call(
            self.addr,
            "/v3/lock/lock",
            json!({ "name": b64(self.name.as_bytes()), "lease": lease.to_string() }),
        )
        .await?;
        rep.saw_free();
        let key_b64 = locked["key"].as_str().unwrap_or_default().to_owned();
        let key = String::from_utf8_lossy(&unb64(&key_b64).ok_or("lock: bad key")?).into_owned();
        let range = call(self.addr, "/v3/kv/range", json!({ "key": key_b64 })).await?;
        let revision = match range["kvs"].as_array().and_then(|kvs| kvs.first()) {
            Some(kv) => int(&kv["create_revision"]),
            None => return Err(format!("lock key {key} vanished before it was read").into()),
        };
        rep.answer(format!("locked: key created at rev {revision}"));
        rep.note(format!("token = create revision = {revision}"));
        Ok((
            revision as u64,
            key.clone(),
            Held {
                lease,
                key,
                keepalive,
            },
        ))
    }

    async fn check(&mut self, rep: &Reporter, held: &Held) -> Result<()> {
        let answer = call(
            self.addr,
            "/v3/lease/timetolive",
            json!({ "ID": held.lease.to_string() }),
        )
        .await?;
        let ttl = int(&answer["TTL"]);
        if ttl <= 0 {
            return Err(format!("lease {:x} already gone at the check", held.lease).into());
        }
        rep.note(format!(
            "lease TTL {ttl} s left (asked etcd; whole seconds): goes ahead, prepares its write"
        ));
        Ok(())
    }

    async fn release(&mut self, rep: &Reporter, held: Held) -> Result<()> {
        held.keepalive.abort();
        let key_b64 = b64(held.key.as_bytes());
        let range = call(self.addr, "/v3/kv/range", json!({ "key": key_b64 })).await?;
        if int(&range["count"]) == 0 {
            rep.note("its lock key is already gone: the lock was lost while it slept");
            return Ok(());
        }
        rep.ask("unlock");
        call(self.addr, "/v3/lock/unlock", json!({ "key": key_b64 })).await?;
        call(
            self.addr,
            "/v3/lease/revoke",
            json!({ "ID": held.lease.to_string() }),
        )
        .await?;
        rep.answer("key deleted, lease revoked");
        Ok(())
    }
}

fn main() -> ExitCode {
    lock_demo::main::<EtcdService, EtcdLock>(&DEMO)
}
