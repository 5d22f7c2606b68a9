//! The lock-holder clients and the checker of the torture runs
//! (`tests/services/shared_torture.rs`, `tests/services/network_faults.rs`,
//! and the `kill -9` run of `tests/binary/gateway_restart.rs`):
//! clients that take tokens from a shared counter per directory (the lock
//! service's grants) and write through random gateway instances, some slow,
//! some stragglers past a pause; a checker that reads the backend's own
//! log for writes applied out of token order; and the routes that put the
//! directories in two named namespaces, for the routed runs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use super::rng::Rng;
use super::*;

pub const KEYS: usize = 6;
/// Key `k` lives in directory `k % DIRS`; the lock (and its token counter)
/// is per directory, as a WebDAV client locks a collection.
pub const DIRS: usize = 3;
pub const CLIENTS: usize = 16;
pub const BODY: usize = 64;
/// A client gives up on an answer after this long (a paused instance).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(8);

pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the clients saw.
#[derive(Default)]
pub struct Tally {
    pub acked: AtomicUsize,
    pub stale: AtomicUsize,
    pub unavailable: AtomicUsize,
    pub failed: AtomicUsize,
    pub straggler_writes: AtomicUsize,
    /// The backend's sequence numbers of the acknowledged writes (from its
    /// echo).
    pub acked_seqs: Mutex<HashSet<usize>>,
}

/// The gateways' data plane addresses (changed by restarts), and which
/// instance forwarded the newest token (the nemesis pauses it).
pub struct Routing {
    pub addrs: RwLock<Vec<SocketAddr>>,
    pub newest: Mutex<(u64, usize)>,
}

/// Key `k`'s path, in its directory.
pub fn key_path(k: usize) -> String {
    format!("/torture/d{}/k{k}", k % DIRS)
}

/// One write, a `PUT` of `target` or, for a directory, a collection
/// `DELETE` of it: head and body, the body optionally sent in two halves
/// with a pause between (so that a pause of the instance can land
/// mid-body).
pub fn write(addr: SocketAddr, target: &str, token: u64, slow: bool) -> std::io::Result<Resp> {
    let token = token.to_string();
    let collection = !target.contains("/k");
    let (method, body) = if collection {
        ("DELETE", Vec::new())
    } else {
        ("PUT", vec![b'x'; BODY])
    };
    let raw = build_request(addr, method, target, &[("X-Fencing-Token", &token)], &body);
    let slow = slow && !collection;
    let mut stream = TcpStream::connect_timeout(&addr, CLIENT_TIMEOUT)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_nodelay(true)?;
    if slow {
        let split = raw.len() - BODY / 2;
        stream.write_all(&raw[..split])?;
        thread::sleep(Duration::from_millis(300));
        stream.write_all(&raw[split..])?;
    } else {
        stream.write_all(&raw)?;
    }
    read_response(&mut BufReader::new(stream), false)
}

/// A lock holder: takes the next token of a key (the lock service's grant),
/// writes with it through random instances until done or fenced; one time
/// in eight it is a straggler that pauses and writes once more later.
pub fn client(
    seed: u64,
    tokens: &[AtomicU64],
    routing: &Routing,
    tally: &Tally,
    stop: &AtomicBool,
    collections: bool,
) {
    let mut rng = Rng(seed);
    while !stop.load(Ordering::Relaxed) {
        let k = rng.below(KEYS as u64) as usize;
        let dir = k % DIRS;
        let key = if rng.below(6) == 0 && collections {
            format!("/torture/d{dir}")
        } else {
            key_path(k)
        };
        let token = tokens[dir].fetch_add(1, Ordering::SeqCst) + 1;
        for _ in 0..=rng.below(3) {
            let addrs = routing.addrs.read().unwrap().clone();
            let i = rng.below(addrs.len() as u64) as usize;
            let slow = rng.below(8) == 0;
            match write(addrs[i], &key, token, slow) {
                Ok(resp) if resp.status == 200 => {
                    tally.acked.fetch_add(1, Ordering::Relaxed);
                    if let Some(seq) = resp.json()["seq"].as_u64() {
                        tally.acked_seqs.lock().unwrap().insert(seq as usize);
                    }
                    let mut newest = routing.newest.lock().unwrap();
                    if token > newest.0 {
                        *newest = (token, i);
                    }
                }
                Ok(resp) if resp.status == 409 => {
                    tally.stale.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(resp) if resp.status == 503 => {
                    tally.unavailable.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) | Err(_) => {
                    tally.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if rng.below(8) == 0 {
            // A GC pause: by the time it ends, the lock has moved on.
            thread::sleep(Duration::from_millis(200 + rng.below(1500)));
            let addrs = routing.addrs.read().unwrap().clone();
            let i = rng.below(addrs.len() as u64) as usize;
            tally.straggler_writes.fetch_add(1, Ordering::Relaxed);
            let _ = write(addrs[i], &key, token, false);
        }
    }
}

/// What the backend's log shows.
#[derive(Debug, Default)]
pub struct Verdict {
    pub applied: usize,
    /// Of them, collection `DELETE`s (each a write of several keys).
    pub collections: usize,
    pub handovers: usize,
    /// An applied write whose token is below one applied before it.
    pub decreases: Vec<String>,
    /// Of those, below a token whose write had been acknowledged.
    pub below_acked: usize,
}

/// Reads the backend's log: the writes applied (body read in full), in the
/// order their bodies completed, per key; a collection `DELETE` is a write
/// of every key of its directory.
pub fn check(backend: &Backend, acked: &Mutex<HashSet<usize>>) -> Verdict {
    // Events first: every event names a record that exists by then.
    let events = backend.events();
    let records = backend.records();
    let mut per_key: BTreeMap<String, Vec<(usize, u64)>> = BTreeMap::new();
    let mut collections = 0;
    for event in events {
        let Event::BodyRead(seq) = event else {
            continue;
        };
        let record = &records[seq];
        let keys: Vec<String> = match record.method.as_str() {
            "PUT" if record.body_len == Some(BODY as u64) => vec![record.target.clone()],
            "DELETE" if record.body_len.is_some() => (0..KEYS)
                .map(key_path)
                .filter(|key| key.starts_with(&format!("{}/", record.target)))
                .collect(),
            _ => continue,
        };
        let Some(token) = record.token_u64() else {
            continue;
        };
        if record.method == "DELETE" {
            collections += 1;
        }
        for key in keys {
            per_key.entry(key).or_default().push((seq, token));
        }
    }
    let acked_seqs = acked.lock().unwrap().clone();
    let mut verdict = Verdict {
        collections,
        ..Verdict::default()
    };
    for (key, writes) in &per_key {
        verdict.applied += writes.len();
        let mut highest: Option<(usize, u64)> = None;
        for &(seq, token) in writes {
            match highest {
                Some((at, top)) if token < top => {
                    verdict.decreases.push(format!(
                        "{key}: token {token} (#{seq}) applied after {top} (#{at})"
                    ));
                    if acked_seqs.contains(&at) {
                        verdict.below_acked += 1;
                    }
                }
                Some((_, top)) if token > top => {
                    verdict.handovers += 1;
                    highest = Some((seq, token));
                }
                None => highest = Some((seq, token)),
                _ => {}
            }
        }
    }
    verdict
}

/// The last token applied per key.
pub fn highest_applied(backend: &Backend) -> HashMap<String, u64> {
    let mut highest = HashMap::new();
    for record in backend.records() {
        if record.body_len == Some(BODY as u64) {
            if let Some(token) = record.token_u64() {
                let entry = highest.entry(record.target.clone()).or_insert(0);
                *entry = token.max(*entry);
            }
        }
    }
    highest
}

/// Runs the clients against `routing`, each thread first calling `enter`
/// (to move into the clients' network namespace, say), and calls `round`
/// with 0, 1, 2... (a nemesis move, or a short sleep) until it answers that
/// the run has enough or `limit` passes; then stops the clients.
#[allow(clippy::too_many_arguments)]
pub fn run_clients(
    seed: u64,
    routing: &Routing,
    tokens: &[AtomicU64],
    tally: &Tally,
    limit: Duration,
    collections: bool,
    enter: &(dyn Fn() + Sync),
    mut round: impl FnMut(usize) -> bool,
) {
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    thread::scope(|s| {
        for c in 0..CLIENTS {
            let stop = &stop;
            s.spawn(move || {
                enter();
                client(
                    seed ^ (c as u64 + 1),
                    tokens,
                    routing,
                    tally,
                    stop,
                    collections,
                )
            });
        }
        let mut n = 0;
        while started.elapsed() < limit {
            let enough = round(n);
            n += 1;
            if enough {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
    })
}

/// What the clients of a run share: the gateways' addresses, the lock
/// service's counters (one per directory), the tally.
pub fn clients_for(gateways: &[GatewayProcess]) -> (Routing, Vec<AtomicU64>, Tally) {
    let routing = Routing {
        addrs: RwLock::new(gateways.iter().map(GatewayProcess::data_addr).collect()),
        newest: Mutex::new((0, 0)),
    };
    let tokens = (0..DIRS).map(|_| AtomicU64::new(0)).collect();
    (routing, tokens, Tally::default())
}

/// The writes the store refused (412), and how many of them carried a token
/// below one it had already applied to the key: late writes that, without
/// the precondition, would have been violations.
pub fn store_refusals(backend: &Backend) -> (usize, usize) {
    let records = backend.records();
    let mut highest: HashMap<&str, u64> = HashMap::new();
    let (mut refused, mut late) = (0, 0);
    for event in backend.events() {
        let (seq, applied) = match event {
            Event::BodyRead(seq) => (seq, true),
            Event::PreconditionFailed(seq) => (seq, false),
            _ => continue,
        };
        let record = &records[seq];
        let Some(token) = record.token_u64() else {
            continue;
        };
        let top = highest.entry(record.target.as_str()).or_default();
        if applied {
            *top = token.max(*top);
        } else {
            refused += 1;
            if token < *top {
                late += 1;
            }
        }
    }
    (refused, late)
}

pub fn etcd_version() -> String {
    std::process::Command::new("etcd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.lines()
                .next()
                .map(|l| l.trim_start_matches("etcd Version: ").to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// What a run of writes to a store that checks preconditions came to, in
/// one line: writes applied and handovers, the clients' answers, the store's
/// refusals, and the violations.
pub fn outcome_line(backend: &Backend, verdict: &Verdict, tally: &Tally) -> String {
    let (refused, refused_late) = store_refusals(backend);
    format!(
        "{} applied writes, {} handovers, acked {}, refused by the fence {}, \
         refused by the store (412) {refused}, of them below a token already applied {refused_late}, \
         503 {}, failed or cut {}; violations: {} decreases ({} below an acknowledged token), e.g. {:?}",
        verdict.applied,
        verdict.handovers,
        tally.acked.load(Ordering::Relaxed),
        tally.stale.load(Ordering::Relaxed),
        tally.unavailable.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
        verdict.decreases.len(),
        verdict.below_acked,
        verdict.decreases.first(),
    )
}

/// The routes of the routed runs (`[[route]]` tables, for a configuration
/// file whose top level names the upstream), in front of one backend,
/// each in a namespace of its own (a route's default namespace is its
/// name): `outer` takes `/torture/` (directories d0 and d2), `inner` the
/// carve-out `/torture/d1/` (directory d1, and the collection `DELETE` of
/// `/torture/d1`, which a prefix ending in `/` takes).
pub const ROUTES: &str = r#"
[[route]]
name = "outer"
match = { path_prefix = "/torture/" }

[[route]]
name = "inner"
match = { path_prefix = "/torture/d1/" }
"#;

/// The namespace of a key of the routed run: its route's name.
pub fn namespace_of(key: &str) -> &'static str {
    if key == "/torture/d1" || key.starts_with("/torture/d1/") {
        "inner"
    } else {
        "outer"
    }
}

/// The highest token of `key`'s fence in its route's namespace, from the
/// admin plane (`None` on 404).
pub fn fence_in_namespace(gateway: &GatewayProcess, key: &str) -> Option<u64> {
    let namespace = namespace_of(key);
    let resp = gateway.admin_get(&format!("/fences/{}?namespace={namespace}", pct(key)));
    match resp.status {
        200 => resp.json()["highest"].as_u64(),
        404 => None,
        other => panic!(
            "GET /fences/{key}?namespace={namespace}: unexpected {other}: {}",
            resp.text()
        ),
    }
}
