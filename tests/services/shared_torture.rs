//! Torture of shared fences (docs/SHARED.md, "Torture"): a 3-member etcd
//! cluster on loopback, 3 gateway instances with `--state etcd` (each
//! reaching etcd through relays a partition can cut), one recording
//! backend, lock-holder clients writing through random instances (with
//! slow bodies and stragglers that keep an old token past a pause; the
//! keys live in directories, one lock per directory, and one write in six
//! is a collection `DELETE` of a directory: a write on every key under it,
//! admitted on several fences at once), and a
//! nemesis that SIGSTOPs the instance that forwarded the newest token past
//! its lease, kill -9s and restarts instances, pauses and kills etcd
//! members (the leader first), and cuts an instance off from etcd while it
//! still reaches the backend. The checker reads the backend's own log.
//!
//! Then the same clients against 3 instances with `--state disk` (each its
//! own fences) and no nemesis: the violations shared fences prevent.
//!
//! A second test runs the same clients (writes of objects only) over shared
//! fences in front of a store that checks preconditions, each instance
//! reaching it through a relay that can hold a `PUT` past the instance's
//! `--upstream-timeout` and deliver it late: with `--conditional-writes
//! http` no write is applied out of order; without, some are.
//!
//! Size: `TORTURE_HANDOVERS` (default 300, the short form CI runs) and
//! `TORTURE_SECONDS` (a cap,
//! default 150); `FENCEGATE_SEED` replays a run's random choices (not its
//! timing). `scripts/torture-shared.sh` runs it long.

#[path = "../support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::rng::Rng;
use support::*;

const KEYS: usize = 6;
/// Key `k` lives in directory `k % DIRS`; the lock (and its token counter)
/// is per directory, as a WebDAV client locks a collection.
const DIRS: usize = 3;
const CLIENTS: usize = 16;
const TTL: &str = "2";
const BODY: usize = 64;
/// A client gives up on an answer after this long (a paused instance).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(8);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    acked: AtomicUsize,
    stale: AtomicUsize,
    unavailable: AtomicUsize,
    failed: AtomicUsize,
    straggler_writes: AtomicUsize,
    /// The backend's sequence numbers of the acknowledged writes (from its
    /// echo).
    acked_seqs: Mutex<HashSet<usize>>,
}

/// The gateways' data plane addresses (changed by restarts), and which
/// instance forwarded the newest token (the nemesis pauses it).
struct Routing {
    addrs: RwLock<Vec<SocketAddr>>,
    newest: Mutex<(u64, usize)>,
}

/// Key `k`'s path, in its directory.
fn key_path(k: usize) -> String {
    format!("/torture/d{}/k{k}", k % DIRS)
}

/// One write, a `PUT` of `target` or, for a directory, a collection
/// `DELETE` of it: head and body, the body optionally sent in two halves
/// with a pause between (so that a pause of the instance can land
/// mid-body).
fn write(addr: SocketAddr, target: &str, token: u64, slow: bool) -> std::io::Result<Resp> {
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
fn client(
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
struct Verdict {
    applied: usize,
    /// Of them, collection `DELETE`s (each a write of several keys).
    collections: usize,
    handovers: usize,
    /// An applied write whose token is below one applied before it.
    decreases: Vec<String>,
    /// Of those, below a token whose write had been acknowledged.
    below_acked: usize,
}

/// Reads the backend's log: the writes applied (body read in full), in the
/// order their bodies completed, per key; a collection `DELETE` is a write
/// of every key of its directory.
fn check(backend: &Backend, acked: &Mutex<HashSet<usize>>) -> Verdict {
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
fn highest_applied(backend: &Backend) -> HashMap<String, u64> {
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

/// The nemesis' moves, done in turn (each at least once), then at random.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Move {
    PauseNewestInstance,
    KillInstance,
    PauseEtcdLeader,
    KillEtcdLeader,
    CutInstanceOff,
    /// The network between an instance and the backend holds its next
    /// `PUT`s past the instance's `--upstream-timeout` and delivers them
    /// late: after the instance gave up (504) and the next holder wrote.
    LateDelivery,
}

const MOVES: [Move; 5] = [
    Move::PauseNewestInstance,
    Move::KillInstance,
    Move::PauseEtcdLeader,
    Move::KillEtcdLeader,
    Move::CutInstanceOff,
];

/// The moves of the chained-writes runs: late delivery, and the pauses and
/// cuts that leave a write in flight past its instance's lease.
const LATE_MOVES: [Move; 4] = [
    Move::LateDelivery,
    Move::PauseNewestInstance,
    Move::CutInstanceOff,
    Move::KillInstance,
];

/// `--upstream-timeout` of the chained-writes runs, and how late a held
/// `PUT` is delivered: past it.
const LATE_TIMEOUT: &str = "1";
const LATE_BY: Duration = Duration::from_millis(2500);

fn signal(pid: u32, signal: Signal) {
    let _ = kill(Pid::from_raw(pid as i32), signal);
}

struct Nemesis<'a> {
    rng: Rng,
    moves: &'static [Move],
    etcd: &'a mut EtcdCluster,
    gateways: &'a mut [GatewayProcess],
    relays: &'a [Vec<Relay>],
    /// Between each instance and the backend (late delivery).
    backend_relays: &'a [Relay],
    routing: &'a Routing,
    done: HashMap<Move, usize>,
}

impl Nemesis<'_> {
    fn play(&mut self, round: usize) {
        let moves = self.moves;
        let step = if round < moves.len() {
            moves[round]
        } else {
            moves[self.rng.below(moves.len() as u64) as usize]
        };
        let lease = Duration::from_secs(TTL.parse().unwrap());
        match step {
            Move::PauseNewestInstance => {
                let i = self.routing.newest.lock().unwrap().1;
                let pid = self.gateways[i].pid();
                signal(pid, Signal::SIGSTOP);
                thread::sleep(lease + Duration::from_millis(1000));
                signal(pid, Signal::SIGCONT);
            }
            Move::KillInstance => {
                let i = self.rng.below(self.gateways.len() as u64) as usize;
                self.gateways[i].restart();
                self.routing.addrs.write().unwrap()[i] = self.gateways[i].data_addr();
            }
            Move::PauseEtcdLeader => {
                let member = self.etcd.leader().unwrap_or(0);
                self.etcd.pause(member, true);
                thread::sleep(Duration::from_secs(3));
                self.etcd.pause(member, false);
            }
            Move::KillEtcdLeader => {
                let member = self.etcd.leader().unwrap_or(0);
                self.etcd.kill(member);
                thread::sleep(Duration::from_secs(2));
                self.etcd.restart(member);
            }
            Move::CutInstanceOff => {
                let i = self.rng.below(self.gateways.len() as u64) as usize;
                for relay in &self.relays[i] {
                    relay.set(Fault::Blackhole);
                }
                thread::sleep(lease + Duration::from_millis(1500));
                for relay in &self.relays[i] {
                    relay.set(Fault::None);
                }
            }
            Move::LateDelivery => {
                let i = self.rng.below(self.backend_relays.len() as u64) as usize;
                self.backend_relays[i].set(Fault::DelayMethod("PUT", LATE_BY));
                thread::sleep(Duration::from_millis(1500 + self.rng.below(1000)));
                self.backend_relays[i].set(Fault::None);
            }
        }
        *self.done.entry(step).or_default() += 1;
        // Let the system settle a little between moves.
        thread::sleep(Duration::from_millis(500 + self.rng.below(1000)));
    }
}

/// Runs the clients against `routing` until `enough` says so or `limit`
/// passes, with `nemesis` (if any) moving meanwhile.
#[allow(clippy::too_many_arguments)]
fn run_clients(
    seed: u64,
    routing: &Routing,
    tokens: &[AtomicU64],
    tally: &Tally,
    limit: Duration,
    collections: bool,
    mut nemesis: Option<Nemesis<'_>>,
    enough: impl Fn(&HashMap<Move, usize>) -> bool,
) -> HashMap<Move, usize> {
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    thread::scope(|s| {
        for c in 0..CLIENTS {
            let stop = &stop;
            s.spawn(move || {
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
        let mut round = 0;
        let mut done = HashMap::new();
        while started.elapsed() < limit {
            match &mut nemesis {
                Some(nemesis) => {
                    nemesis.play(round);
                    done = nemesis.done.clone();
                }
                None => thread::sleep(Duration::from_millis(250)),
            }
            round += 1;
            if enough(&done) {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        done
    })
}

/// What the clients of a run share: the gateways' addresses, the lock
/// service's counters (one per directory), the tally.
fn clients_for(gateways: &[GatewayProcess]) -> (Routing, Vec<AtomicU64>, Tally) {
    let routing = Routing {
        addrs: RwLock::new(gateways.iter().map(GatewayProcess::data_addr).collect()),
        newest: Mutex::new((0, 0)),
    };
    let tokens = (0..DIRS).map(|_| AtomicU64::new(0)).collect();
    (routing, tokens, Tally::default())
}

#[test]
fn shared_fences_hold_under_the_nemesis_and_independent_fences_do_not() {
    let want_handovers = env_or("TORTURE_HANDOVERS", 300) as usize;
    let limit = Duration::from_secs(env_or("TORTURE_SECONDS", 150));
    let mut rng = Rng::from_env_or_clock();
    let seed = rng.next();

    // --- Shared fences, with the nemesis.
    let mut etcd = EtcdCluster::start(3);
    let backend = Backend::start();
    let relays: Vec<Vec<Relay>> = (0..3)
        .map(|_| {
            (0..3)
                .map(|m| Relay::start(etcd.client(m), Fault::None))
                .collect()
        })
        .collect();
    let mut gateways: Vec<GatewayProcess> = relays
        .iter()
        .enumerate()
        .map(|(i, relays)| {
            let endpoints = relays.iter().map(Relay::url).collect::<Vec<_>>().join(",");
            let name = format!("gw{i}");
            GatewayProcess::in_front_of(
                &backend,
                &[
                    "--state",
                    "etcd",
                    "--etcd-endpoints",
                    &endpoints,
                    "--etcd-prefix",
                    "/torture/",
                    "--etcd-lease-ttl",
                    TTL,
                    "--instance-name",
                    &name,
                    "--upstream-timeout",
                    "5",
                ],
            )
        })
        .collect();
    let (routing, tokens, tally) = clients_for(&gateways);
    let started = Instant::now();
    let nemesis = Nemesis {
        rng: Rng(seed.rotate_left(17)),
        moves: &MOVES,
        etcd: &mut etcd,
        gateways: &mut gateways,
        relays: &relays,
        backend_relays: &[],
        routing: &routing,
        done: HashMap::new(),
    };
    let moves = run_clients(
        seed,
        &routing,
        &tokens,
        &tally,
        limit,
        true,
        Some(nemesis),
        |done| {
            MOVES.iter().all(|m| done.contains_key(m))
                && check(&backend, &tally.acked_seqs).handovers >= want_handovers
        },
    );
    let verdict = check(&backend, &tally.acked_seqs);
    let elapsed = started.elapsed();

    // Every applied token is at most the shared highest (read through an
    // instance once its view has caught up).
    let highest = highest_applied(&backend);
    let mut below_final = Vec::new();
    for (key, top) in &highest {
        let caught_up = wait_until(HANG_GUARD, || {
            gateways[0].fence(key).is_some_and(|h| h >= *top)
        });
        if !caught_up {
            below_final.push(format!(
                "{key}: applied {top}, highest {:?}",
                gateways[0].fence(key)
            ));
        }
    }
    eprintln!(
        "shared (etcd {}): {:.0?}, {} applied writes ({} collection deletes), {} handovers, acked {}, refused stale {}, \
         503 {}, failed or cut {}, straggler writes {}, nemesis {:?}; violations: {} decreases \
         ({} below an acknowledged token), {} above the final highest",
        etcd_version(),
        elapsed,
        verdict.applied,
        verdict.collections,
        verdict.handovers,
        tally.acked.load(Ordering::Relaxed),
        tally.stale.load(Ordering::Relaxed),
        tally.unavailable.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
        tally.straggler_writes.load(Ordering::Relaxed),
        moves,
        verdict.decreases.len(),
        verdict.below_acked,
        below_final.len(),
    );
    assert!(
        verdict.decreases.is_empty(),
        "shared fences let writes through out of order:\n{}",
        verdict.decreases.join("\n")
    );
    assert!(below_final.is_empty(), "{below_final:?}");
    assert!(
        MOVES.iter().all(|m| moves.contains_key(m)),
        "inconclusive: not every nemesis move was made: {moves:?}"
    );
    assert!(
        verdict.handovers >= want_handovers,
        "inconclusive: {} handovers, {want_handovers} wanted (raise TORTURE_SECONDS)",
        verdict.handovers
    );
    assert!(
        verdict.collections > 0,
        "inconclusive: no collection DELETE was applied"
    );
    drop(gateways);
    drop(relays);
    drop(etcd);

    // --- Independent fences (`--state disk` on each instance).
    let backend = Backend::start();
    let gateways: Vec<GatewayProcess> = (0..3)
        .map(|_| GatewayProcess::in_front_of(&backend, &["--state", "disk"]))
        .collect();
    let (routing, tokens, tally) = clients_for(&gateways);
    run_clients(
        seed,
        &routing,
        &tokens,
        &tally,
        Duration::from_secs(20),
        true,
        None,
        |_| {
            let verdict = check(&backend, &tally.acked_seqs);
            !verdict.decreases.is_empty() && verdict.handovers >= 200
        },
    );
    let verdict = check(&backend, &tally.acked_seqs);
    eprintln!(
        "independent (--state disk x3): {} applied writes, {} handovers; violations: {} decreases \
         ({} below an acknowledged token), e.g. {:?}",
        verdict.applied,
        verdict.handovers,
        verdict.decreases.len(),
        verdict.below_acked,
        verdict.decreases.first(),
    );
    assert!(
        !verdict.decreases.is_empty(),
        "independent fences showed no violation: the clients do not exercise what sharing prevents"
    );
}

/// The writes the store refused (412), and how many of them carried a token
/// below one it had already applied to the key: late writes that, without
/// the precondition, would have been violations.
fn store_refusals(backend: &Backend) -> (usize, usize) {
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

/// One run of the late-delivery torture: three instances on shared fences,
/// each reaching the backend (a store that checks preconditions) through a
/// relay the nemesis can make late, with `--conditional-writes http` if
/// `chained`. Runs until `enough` (or `limit`); the verdict and the moves
/// made.
fn late_delivery_run(
    seed: u64,
    chained: bool,
    limit: Duration,
    enough: impl Fn(&Verdict, &HashMap<Move, usize>) -> bool,
) -> (Verdict, HashMap<Move, usize>) {
    let mut etcd = EtcdCluster::start(3);
    let backend = Backend::start_conditional();
    let relays: Vec<Vec<Relay>> = (0..3)
        .map(|_| {
            (0..3)
                .map(|m| Relay::start(etcd.client(m), Fault::None))
                .collect()
        })
        .collect();
    let backend_relays: Vec<Relay> = (0..3)
        .map(|_| Relay::start(backend.addr(), Fault::None))
        .collect();
    let mut gateways: Vec<GatewayProcess> = (0..3)
        .map(|i| {
            let endpoints = relays[i]
                .iter()
                .map(Relay::url)
                .collect::<Vec<_>>()
                .join(",");
            let upstream = backend_relays[i].url();
            let name = format!("gw{i}");
            let mut args = vec![
                "--upstream",
                &upstream,
                "--state",
                "etcd",
                "--etcd-endpoints",
                &endpoints,
                "--etcd-prefix",
                "/torture-late/",
                "--etcd-lease-ttl",
                TTL,
                "--instance-name",
                &name,
                "--upstream-timeout",
                LATE_TIMEOUT,
            ];
            if chained {
                args.extend(["--conditional-writes", "http"]);
            }
            GatewayProcess::start(&args)
        })
        .collect();
    let (routing, tokens, tally) = clients_for(&gateways);
    let started = Instant::now();
    let nemesis = Nemesis {
        rng: Rng(seed.rotate_left(29)),
        moves: &LATE_MOVES,
        etcd: &mut etcd,
        gateways: &mut gateways,
        relays: &relays,
        backend_relays: &backend_relays,
        routing: &routing,
        done: HashMap::new(),
    };
    let moves = run_clients(
        seed,
        &routing,
        &tokens,
        &tally,
        limit,
        false,
        Some(nemesis),
        |done| enough(&check(&backend, &tally.acked_seqs), done),
    );
    let verdict = check(&backend, &tally.acked_seqs);
    let (refused, refused_late) = store_refusals(&backend);
    eprintln!(
        "late delivery, {}: {:.0?}, {} applied writes, {} handovers, acked {}, refused by the fence {}, \
         refused by the store (412) {refused}, of them below a token already applied {refused_late}, 503 {}, failed or cut {}, nemesis {:?}; violations: {} \
         decreases ({} below an acknowledged token), e.g. {:?}",
        if chained {
            "chained (--conditional-writes http)"
        } else {
            "unchained"
        },
        started.elapsed(),
        verdict.applied,
        verdict.handovers,
        tally.acked.load(Ordering::Relaxed),
        tally.stale.load(Ordering::Relaxed),
        tally.unavailable.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
        moves,
        verdict.decreases.len(),
        verdict.below_acked,
        verdict.decreases.first(),
    );
    (verdict, moves)
}

/// Chained writes close the residual window (docs/CHAINED.md): with late
/// deliveries and instances paused or cut off past their lease, a store
/// that checks the forwarded precondition applies writes in token order;
/// the same run without chaining does not.
#[test]
fn late_deliveries_land_out_of_order_unless_writes_are_chained() {
    let want_handovers = env_or("TORTURE_HANDOVERS", 300) as usize;
    let limit = Duration::from_secs(env_or("TORTURE_SECONDS", 150));
    let seed = Rng::from_env_or_clock().next();

    let (verdict, moves) = late_delivery_run(seed, true, limit, |verdict, done| {
        LATE_MOVES.iter().all(|m| done.contains_key(m)) && verdict.handovers >= want_handovers
    });
    assert!(
        verdict.decreases.is_empty(),
        "chained writes were applied out of order:\n{}",
        verdict.decreases.join("\n")
    );
    assert!(
        LATE_MOVES.iter().all(|m| moves.contains_key(m)),
        "inconclusive: not every nemesis move was made: {moves:?}"
    );
    assert!(
        verdict.handovers >= want_handovers,
        "inconclusive: {} handovers, {want_handovers} wanted (raise TORTURE_SECONDS)",
        verdict.handovers
    );

    let (verdict, _) = late_delivery_run(seed, false, Duration::from_secs(60), |verdict, done| {
        done.contains_key(&Move::LateDelivery)
            && !verdict.decreases.is_empty()
            && verdict.handovers >= 100
    });
    assert!(
        !verdict.decreases.is_empty(),
        "no late write landed out of order without chaining: the nemesis does not open the window"
    );
}

fn etcd_version() -> String {
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
