//! ZooKeeper's lock recipe, a worker process frozen past its session, and
//! fencegate.
//!
//! Recipe (ZooKeeper's "Locks" recipe, as the seeds give it): each worker
//! opens a session (timeout 2 s; the client pings every ~600 ms) and creates
//! an EPHEMERAL|SEQUENTIAL node `/locks/report-lock/<session>-lock-`. It
//! lists the children without a watch; if its node has the lowest sequence
//! suffix it holds the lock, else it watches only its predecessor
//! (`exists(p, watch)`, no herd effect) and lists again when that node goes.
//! Release = delete the node; a session that expires deletes it too.
//!
//! Token: the **czxid** of the worker's own lock node (the `Stat` of the
//! create), not the 10-digit suffix. The suffix is the parent node's
//! `cversion`, a signed 32-bit counter: it wraps after 2^31 - 1 (to
//! `-2147483648`, ZooKeeper's docs warn), and restarts at 0 when the lock's
//! parent node is deleted and created again. The czxid is the 64-bit
//! transaction id of the create (epoch << 32 | counter): it grows with every
//! write of the whole ensemble, across leader elections, and the lock goes to
//! nodes in creation order, so each grant's czxid is higher than every
//! earlier holder's.
//!
//! Worker 1 (a real process) is frozen with SIGSTOP right after checking its
//! session; its pings stop, ZooKeeper expires the session and deletes its
//! node, worker 2's watch fires, it holds the lock and writes. SIGCONT: worker
//! 1 writes with its old czxid. Run twice, straight to the storage and through
//! fencegate; exit 0 only if the first run lost worker 2's write and the
//! second refused worker 1's.
//!
//! ```sh
//! cargo run --example zookeeper_lock
//! ```

mod support;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use support::lock_demo::{self, Args, Demo, LockClient, Reporter, Service};
use support::zookeeper::{connect, ZooKeeper};
use support::Result;
use zookeeper_client as zk;

/// The lock's node; its children are the contenders.
const LOCK_DIR: &str = "/locks/report-lock";
/// Session timeout of the workers: their lease.
const SESSION: Duration = Duration::from_secs(2);

const DEMO: Demo = Demo {
    name: "zookeeper_lock",
    service: "zookeeper",
    title: "ZooKeeper's lock recipe (ephemeral-sequential, session 2 s) and a worker process frozen past its session",
    intro: &[
        "recipe: create -e -s /locks/report-lock/<session>-lock-, list children (no watch), lowest",
        "        suffix holds the lock, else watch only the predecessor; the session is the lease.",
        "token:  the czxid of the worker's own node (64-bit zxid of the create), NOT its 10-digit",
        "        suffix: that is the parent's 32-bit cversion, which wraps after 2^31 - 1 and restarts",
        "        when the lock node is recreated. zxids grow with every write, across leader changes.",
        "real:   ZooKeeper 3.8 on loopback, two worker processes, SIGSTOP/SIGCONT, fencegate",
        "        in-process in front of its embedded object store.",
    ],
    outro: &[],
    claim: "zookeeper tokens (czxid of the lock node) only grow; the direct run lost worker 2's write, fencegate refused the stale one",
};

struct ZkService {
    server: ZooKeeper,
    /// The demo's own session, to create the lock node and watch the workers'.
    client: zk::Client,
}

impl Service for ZkService {
    fn require() {
        ZooKeeper::require();
    }

    async fn start() -> Result<Self> {
        let server = ZooKeeper::start().await?;
        let client = connect(server.addr, Duration::from_secs(10)).await?;
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        client.mkdir(LOCK_DIR, &persistent).await?;
        Ok(ZkService { server, client })
    }

    fn worker_args(&self) -> Vec<String> {
        vec![format!("zookeeper={}", self.server.addr)]
    }

    /// Watches worker 1's node until ZooKeeper deletes it.
    async fn released(&self, _token: u64, node: String) -> Result<(Instant, String)> {
        let (stat, watcher) = self.client.check_and_watch_stat(&node).await?;
        let owner = stat.map(|s| s.ephemeral_owner).unwrap_or_default();
        if stat.is_some() {
            let event = watcher.changed().await;
            if event.event_type != zk::EventType::NodeDeleted {
                return Err(format!("unexpected watch event {event:?}").into());
            }
        }
        Ok((
            Instant::now(),
            format!(
                "session {owner:#x} expired: node ...-lock-{} deleted",
                suffix(&node)
            ),
        ))
    }
}

/// The sequence suffix of a lock node's name.
fn suffix(name: &str) -> &str {
    name.rsplit("-lock-").next().unwrap_or(name)
}

/// The order of the recipe: by sequence suffix.
fn sequence(name: &str) -> i64 {
    suffix(name).parse().unwrap_or(i64::MAX)
}

/// One worker's session.
struct ZkLock {
    client: zk::Client,
}

impl LockClient for ZkLock {
    /// The full path of the worker's lock node.
    type Held = String;

    async fn connect(args: &Args, rep: &Reporter) -> Result<Self> {
        let addr: SocketAddr = args.parse_as("zookeeper")?;
        rep.ask(format!(
            "connect (session timeout {} ms)",
            SESSION.as_millis()
        ));
        let client = connect(addr, SESSION).await?;
        rep.answer(format!(
            "session {} ({} ms)",
            client.session_id(),
            client.session_timeout().as_millis()
        ));
        Ok(ZkLock { client })
    }

    async fn acquire(&mut self, rep: &Reporter) -> Result<(u64, String, String)> {
        let prefix = format!("{LOCK_DIR}/{:x}-lock-", self.client.session_id().0);
        rep.ask("create -e -s .../<session>-lock-");
        let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let (stat, sequence_number) = self.client.create(&prefix, b"", &mode).await?;
        let node = format!("{prefix}{sequence_number}");
        let name = node.rsplit('/').next().unwrap_or_default().to_owned();
        rep.answer(format!(
            "...-lock-{sequence_number}, czxid {:#x}",
            stat.czxid
        ));
        loop {
            let mut children = self.client.list_children(LOCK_DIR).await?;
            children.sort_by_key(|c| sequence(c));
            let mine = children
                .iter()
                .position(|c| *c == name)
                .ok_or("its lock node is gone (session expired?)")?;
            if mine == 0 {
                rep.note(format!(
                    "lowest of {}: holds the lock; token = czxid = {}",
                    children.len(),
                    stat.czxid
                ));
                break;
            }
            let predecessor = &children[mine - 1];
            let (exists, watcher) = self
                .client
                .check_and_watch_stat(&format!("{LOCK_DIR}/{predecessor}"))
                .await?;
            if exists.is_none() {
                continue;
            }
            rep.ask(format!(
                "exists(...-lock-{}, watch): waits",
                suffix(predecessor)
            ));
            let event = watcher.changed().await;
            rep.saw_free();
            rep.answer(format!(
                "watch: {:?} ...-lock-{}",
                event.event_type,
                suffix(predecessor)
            ));
        }
        Ok((stat.czxid as u64, node.clone(), node))
    }

    async fn check(&mut self, rep: &Reporter, node: &String) -> Result<()> {
        let state = self.client.state();
        let stat = self.client.check_stat(node).await?;
        match stat {
            Some(stat) if stat.ephemeral_owner == self.client.session_id().0 => {
                rep.note(format!(
                    "session {state:?}, its node exists: goes ahead, prepares its write"
                ));
                Ok(())
            }
            _ => Err("lock node gone at the check".into()),
        }
    }

    async fn release(&mut self, rep: &Reporter, node: String) -> Result<()> {
        rep.ask("delete its node");
        match self.client.delete(&node, None).await {
            Ok(()) => rep.answer("deleted"),
            Err(e) => rep.answer(format!("{e}: the lock was lost while it slept")),
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    lock_demo::main::<ZkService, ZkLock>(&DEMO)
}
