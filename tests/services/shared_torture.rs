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
//! A third runs the shared-fences run, shorter, with the instances started
//! from a configuration file whose `[[route]]` tables put the directories
//! in two named namespaces (`support::torture::ROUTES`): the same checker,
//! every fence found in its route's namespace and none in the default one.
//!
//! Size: `TORTURE_HANDOVERS` (default 300, the short form CI runs) and
//! `TORTURE_SECONDS` (a cap,
//! default 150); for the routed run `TORTURE_ROUTED_HANDOVERS` (150) and
//! `TORTURE_ROUTED_SECONDS` (90); `FENCEGATE_SEED` replays a run's random
//! choices (not its timing). `scripts/torture-shared.sh` runs it long.

#[path = "../support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::rng::Rng;
use support::torture::*;
use support::*;

const TTL: &str = "2";

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

/// One run of shared fences under the nemesis: a 3-member etcd cluster,
/// one recording backend, 3 instances that `start` makes (given the
/// backend, the etcd endpoints of the instance's relays and its name), the
/// clients until every move was made, `want_handovers` handovers were
/// applied and the backend shows what `more` asks for (or `limit`). Asserts that no write was applied out of order and
/// that every applied token is at most the shared highest, read with
/// `fence` (the fence of a key, as an instance's admin plane shows it);
/// `what` names the run in its summary line. Returns the verdict and the
/// backend (its records).
fn shared_fences_under_the_nemesis(
    what: &str,
    seed: u64,
    want_handovers: usize,
    limit: Duration,
    start: &dyn Fn(&Backend, &str, &str) -> GatewayProcess,
    fence: &dyn Fn(&GatewayProcess, &str) -> Option<u64>,
    more: &dyn Fn(&Backend) -> bool,
) -> (Verdict, Backend) {
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
            start(&backend, &endpoints, &format!("gw{i}"))
        })
        .collect();
    let (routing, tokens, tally) = clients_for(&gateways);
    let started = Instant::now();
    let mut nemesis = Nemesis {
        rng: Rng(seed.rotate_left(17)),
        moves: &MOVES,
        etcd: &mut etcd,
        gateways: &mut gateways,
        relays: &relays,
        backend_relays: &[],
        routing: &routing,
        done: HashMap::new(),
    };
    run_clients(
        seed,
        &routing,
        &tokens,
        &tally,
        limit,
        true,
        &|| {},
        |round| {
            nemesis.play(round);
            MOVES.iter().all(|m| nemesis.done.contains_key(m))
                && check(&backend, &tally.acked_seqs).handovers >= want_handovers
                && more(&backend)
        },
    );
    let moves = nemesis.done;
    let verdict = check(&backend, &tally.acked_seqs);
    let elapsed = started.elapsed();

    // Every applied token is at most the shared highest (read through an
    // instance once its view has caught up).
    let highest = highest_applied(&backend);
    let mut below_final = Vec::new();
    for (key, top) in &highest {
        let caught_up = wait_until(HANG_GUARD, || {
            fence(&gateways[0], key).is_some_and(|h| h >= *top)
        });
        if !caught_up {
            below_final.push(format!(
                "{key}: applied {top}, highest {:?}",
                fence(&gateways[0], key)
            ));
        }
    }
    eprintln!(
        "{what} (etcd {}): {:.0?}, {} applied writes ({} collection deletes), {} handovers, acked {}, refused stale {}, \
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
        "{what}: shared fences let writes through out of order:\n{}",
        verdict.decreases.join("\n")
    );
    assert!(below_final.is_empty(), "{what}: {below_final:?}");
    assert!(
        MOVES.iter().all(|m| moves.contains_key(m)),
        "{what}: inconclusive: not every nemesis move was made: {moves:?}"
    );
    assert!(
        verdict.handovers >= want_handovers,
        "{what}: inconclusive: {} handovers, {want_handovers} wanted (raise the run's seconds)",
        verdict.handovers
    );
    assert!(
        verdict.collections > 0,
        "{what}: inconclusive: no collection DELETE was applied"
    );
    (verdict, backend)
}

/// The options of a torture instance on shared fences: etcd through
/// `endpoints` (its relays), a 2 s lease, named `name`, and a fence cache
/// of 1 KiB (a handful of fences), so that nearly every admission finds
/// its fence out of memory and reads it with its claim (issue 51).
fn etcd_options<'a>(endpoints: &'a str, prefix: &'a str, name: &'a str) -> [&'a str; 14] {
    [
        "--fence-cache",
        "1K",
        "--state",
        "etcd",
        "--etcd-endpoints",
        endpoints,
        "--etcd-prefix",
        prefix,
        "--etcd-lease-ttl",
        TTL,
        "--instance-name",
        name,
        "--upstream-timeout",
        "5",
    ]
}

#[test]
fn shared_fences_hold_under_the_nemesis_and_independent_fences_do_not() {
    let want_handovers = env_or("TORTURE_HANDOVERS", 300) as usize;
    let limit = Duration::from_secs(env_or("TORTURE_SECONDS", 150));
    let mut rng = Rng::from_env_or_clock();
    let seed = rng.next();

    // --- Shared fences, with the nemesis.
    shared_fences_under_the_nemesis(
        "shared",
        seed,
        want_handovers,
        limit,
        &|backend, endpoints, name| {
            GatewayProcess::in_front_of(backend, &etcd_options(endpoints, "/torture/", name))
        },
        &|gateway, key| gateway.fence(key),
        &|_| true,
    );

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
        &|| {},
        |_| {
            thread::sleep(Duration::from_millis(250));
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
                "--fence-cache",
                "1K",
            ];
            if chained {
                args.extend(["--conditional-writes", "http"]);
            }
            GatewayProcess::start(&args)
        })
        .collect();
    let (routing, tokens, tally) = clients_for(&gateways);
    let started = Instant::now();
    let mut nemesis = Nemesis {
        rng: Rng(seed.rotate_left(29)),
        moves: &LATE_MOVES,
        etcd: &mut etcd,
        gateways: &mut gateways,
        relays: &relays,
        backend_relays: &backend_relays,
        routing: &routing,
        done: HashMap::new(),
    };
    run_clients(
        seed,
        &routing,
        &tokens,
        &tally,
        limit,
        false,
        &|| {},
        |round| {
            nemesis.play(round);
            enough(&check(&backend, &tally.acked_seqs), &nemesis.done)
        },
    );
    let moves = nemesis.done;
    let verdict = check(&backend, &tally.acked_seqs);
    eprintln!(
        "late delivery, {}: {:.0?}, nemesis {moves:?}, {}",
        if chained {
            "chained (--conditional-writes http)"
        } else {
            "unchained"
        },
        started.elapsed(),
        outcome_line(&backend, &verdict, &tally),
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

/// The same run of shared fences under the nemesis, with each instance
/// started from a configuration file whose `[[route]]` tables put the lock
/// directories in two named namespaces (routes issue, "Done when"): the
/// admission runs on keys qualified with a namespace, collection `DELETE`s
/// raise subtree fences in both, restarted instances check the coverage
/// etcd records; it runs until collection `DELETE`s were applied in both
/// namespaces too. Shorter than the run above (`TORTURE_ROUTED_HANDOVERS`,
/// default 150; `TORTURE_ROUTED_SECONDS`, a cap, default 90).
#[test]
fn shared_fences_hold_with_routes_in_named_namespaces() {
    let want_handovers = env_or("TORTURE_ROUTED_HANDOVERS", 150) as usize;
    let limit = Duration::from_secs(env_or("TORTURE_ROUTED_SECONDS", 90));
    let seed = Rng::from_env_or_clock().next();
    let dir = tempfile::tempdir().expect("a temporary folder");
    let config = dir.path().join("fencegate.toml");
    let config = config.to_str().expect("a UTF-8 path").to_owned();

    let (_, backend) = shared_fences_under_the_nemesis(
        "shared, routes in named namespaces",
        seed,
        want_handovers,
        limit,
        &|backend, endpoints, name| {
            // Written by each instance's start, the same text each time.
            std::fs::write(
                &config,
                format!("upstream = \"{}\"\n{ROUTES}", backend.url()),
            )
            .expect("the configuration file");
            let mut args = vec!["--config", config.as_str()];
            args.extend(etcd_options(endpoints, "/torture-routes/", name));
            GatewayProcess::start(&args)
        },
        &|gateway, key| {
            // Nothing in the default namespace: the route's alone.
            assert_eq!(
                gateway.fence(key),
                None,
                "{key}: a fence in the default namespace"
            );
            fence_in_namespace(gateway, key)
        },
        &|backend| collection_namespaces(backend).len() == 2,
    );
    let namespaces = collection_namespaces(&backend);
    assert_eq!(
        namespaces,
        ["inner", "outer"],
        "inconclusive: collection DELETEs applied in {namespaces:?} only (raise TORTURE_ROUTED_SECONDS)"
    );
}

/// The namespaces in which the backend applied a collection `DELETE`.
fn collection_namespaces(backend: &Backend) -> Vec<&'static str> {
    let mut namespaces: Vec<&str> = backend
        .records()
        .iter()
        .filter(|r| r.method == "DELETE" && r.body_len.is_some())
        .map(|r| namespace_of(&r.target))
        .collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    namespaces
}
