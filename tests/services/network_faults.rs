//! Faults of the network (docs/RELIABILITY.md, "Faults of the network"):
//! every part of a run in a network namespace of its own, wired through the
//! switch of `tests/support/netns.rs`, which cuts, delays and loses packets.
//!
//! First the harness itself: a partition leaves a connection open and
//! silent, one-way partitions are one-way, a delay stretches round trips,
//! and nothing is left behind. Then:
//!
//! - the torture: three instances on shared fences, three etcd members, a
//!   store that checks preconditions, and a nemesis that cuts, delays and
//!   loses packets between them; with chained writes nothing is applied out
//!   of order, without them (the control) late writes land;
//! - what an instance cut from etcd does, and how fast (both ways, and each
//!   way alone);
//! - what a client cut off mid-body costs the next holder;
//! - a soak under the nemesis, after which nothing has grown.
//!
//! Root is needed; without it every test prints one line and passes
//! without running, unless `FENCEGATE_NETNS_REQUIRED` is set (scripts/test.sh
//! sets it when run as root, as CI is).

#[path = "../support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use support::netns::Network;
use support::rng::Rng;
use support::torture::*;
use support::*;

/// The tests of this binary run one at a time: each wants both cores, and
/// timing figures taken while another run loads the machine would mean
/// little.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// An echo server in node `at`: answers every read with the same bytes.
fn echo_server(net: &Network, at: &str) -> std::net::SocketAddr {
    let node = net.node(at);
    let listener = node.run_inside(|| TcpListener::bind(node.addr(0)).unwrap());
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 || stream.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn ping(stream: &mut TcpStream, byte: u8) -> std::io::Result<()> {
    stream.write_all(&[byte])?;
    let mut got = [0u8; 1];
    stream.read_exact(&mut got)?;
    assert_eq!(got[0], byte);
    Ok(())
}

#[test]
fn a_partition_is_silent_one_way_cuts_are_one_way_and_heals_resume() {
    let _serial = serial();
    let Some(net) = Network::create(&["a", "b"]) else {
        return;
    };
    let server = echo_server(&net, "a");
    let mut stream = net
        .node("b")
        .run_inside(|| TcpStream::connect_timeout(&server, Duration::from_secs(5)).unwrap());
    stream
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    ping(&mut stream, 1).unwrap();

    // Both ways: no answer, and no reset either: the read just times out.
    let before = net.counts();
    net.partition(&["a"], &["b"]);
    let err = ping(&mut stream, 2).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "a partition must be silent, got {err:?}"
    );
    assert!(net.counts().cut > before.cut, "{:?}", net.counts());
    // A new connection cannot be made either (its SYN is dropped).
    let refused = net
        .node("b")
        .run_inside(|| TcpStream::connect_timeout(&server, Duration::from_secs(1)));
    assert!(refused.is_err());

    // Healed: the same connection carries on (TCP retransmits the byte).
    net.heal();
    stream.set_read_timeout(Some(support::HANG_GUARD)).unwrap();
    let mut got = [0u8; 1];
    stream.read_exact(&mut got).unwrap();
    assert_eq!(got[0], 2);
    ping(&mut stream, 3).unwrap();

    // One way, a -> b cut: b's bytes reach a (its echo server answers), b
    // hears nothing.
    let echoed_before = net.counts();
    net.partition_one_way(&["a"], &["b"]);
    stream
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    assert!(ping(&mut stream, 4).is_err());
    let during = net.counts();
    assert!(during.forwarded > echoed_before.forwarded, "b -> a flowed");
    assert!(during.cut > echoed_before.cut, "a -> b was cut");
    net.heal();
    stream.set_read_timeout(Some(support::HANG_GUARD)).unwrap();
    stream.read_exact(&mut got).unwrap();
    assert_eq!(got[0], 4);

    // A delay of 200 ms each way: a round trip takes at least 400 ms (a
    // lower bound, which no load on the machine can break).
    net.delay(&["a"], &["b"], Duration::from_millis(200), Duration::ZERO);
    let started = Instant::now();
    ping(&mut stream, 5).unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));
    net.heal();
}

#[test]
fn the_network_leaves_nothing_behind() {
    let _serial = serial();
    let Some(net) = Network::create(&["a"]) else {
        return;
    };
    let links = || {
        String::from_utf8(
            std::process::Command::new("ip")
                .args(["-o", "link"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
    };
    let during = links();
    assert!(
        during.contains("fgc"),
        "the control device exists: {during}"
    );
    // A program in the node sees its own device, not the test's.
    let inside = std::process::Command::new(&net.node("a").wrapper()[0])
        .args(&net.node("a").wrapper()[1..])
        .args(["ip", "-o", "addr"])
        .output()
        .unwrap();
    let inside = String::from_utf8_lossy(&inside.stdout).into_owned();
    assert!(inside.contains(&net.node("a").ip.to_string()), "{inside}");
    assert!(!inside.contains("eth0"), "{inside}");
    let ns_fds = || {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("net:"))
            .count()
    };
    assert!(ns_fds() >= 1);
    drop(net);
    let after = links();
    assert!(
        !after.contains(&format!("fgc{}n", std::process::id() % 1_000_000)),
        "{after}"
    );
    assert_eq!(ns_fds(), 0, "a namespace descriptor outlived the network");
}

/// The watchdog that kills a network's programs after the test process
/// dies must kill that network's programs only. It once picked them by
/// namespace inode number, which the kernel reuses: a watchdog waking after
/// its network was gone killed an etcd member of the next test's network.
/// Here a program of another run shares the namespace itself, the strictest
/// case of that reuse.
#[test]
fn the_reaper_kills_its_own_runs_programs_and_no_other() {
    let _serial = serial();
    let Some(net) = Network::create(&["a"]) else {
        return;
    };
    let sleeper = |wrapper: &[String]| {
        std::process::Command::new(&wrapper[0])
            .args(&wrapper[1..])
            .args(["sleep", "600"])
            .spawn()
            .unwrap()
    };
    let node = net.node("a");
    let mut ours = sleeper(&node.wrapper());
    let mut other_wrapper = node.wrapper();
    other_wrapper[1] = format!("{}=another-run", support::netns::RUN_VARIABLE);
    let mut theirs = sleeper(&other_wrapper);
    // A stand-in for the test process, so that this one can outlive it.
    let mut watched = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    support::netns::reap_when_gone(watched.id(), node.run_marker());
    thread::sleep(Duration::from_millis(300));
    watched.kill().unwrap();
    watched.wait().unwrap();
    let reaped = wait_until(HANG_GUARD, || matches!(ours.try_wait(), Ok(Some(_))));
    // Whatever the outcome, nothing of this test outlives it.
    let theirs_alive = matches!(theirs.try_wait(), Ok(None));
    let _ = theirs.kill();
    let _ = theirs.wait();
    let _ = ours.kill();
    let _ = ours.wait();
    assert!(reaped, "the reaper left its own run's program running");
    assert!(theirs_alive, "the reaper killed another run's program");
}

// ---------------------------------------------------------------------------
// The torture: three instances on shared fences, three etcd members, a store
// that checks preconditions, all on their own nodes, and a nemesis that
// moves the network.
// ---------------------------------------------------------------------------

const TTL: &str = "2";
/// `--upstream-timeout`: a write delayed past it arrives after its instance
/// gave up on it (504) and the next holder wrote.
const UPSTREAM_TIMEOUT: &str = "1";
const INSTANCES: usize = 3;
const MEMBERS: usize = 3;

/// The nodes of a run.
fn node_names() -> Vec<String> {
    let mut names = vec!["clients".to_string(), "backend".to_string()];
    names.extend((0..INSTANCES).map(|i| format!("gw{i}")));
    names.extend((0..MEMBERS).map(|m| format!("etcd{m}")));
    names
}

fn instance(i: usize) -> String {
    format!("gw{i}")
}

fn member(m: usize) -> String {
    format!("etcd{m}")
}

/// A run's parts, each on its node.
struct Cluster {
    etcd: EtcdCluster,
    backend: Backend,
    gateways: Vec<GatewayProcess>,
    /// Dropped last: the processes above live in its namespaces.
    net: Network,
}

impl Cluster {
    /// Starts etcd, the backend (a store that checks preconditions if
    /// `conditional`) and the instances (with `extra` options) on a fresh
    /// network; `None` if this process cannot make one.
    fn start(prefix: &str, conditional: bool, extra: &[&str]) -> Option<Cluster> {
        let names = node_names();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let net = Network::create(&names)?;
        let hosts: Vec<(Vec<String>, std::net::Ipv4Addr)> = (0..MEMBERS)
            .map(|m| {
                let node = net.node(&member(m));
                (node.wrapper(), node.ip)
            })
            .collect();
        let etcd = EtcdCluster::start_on(&hosts);
        let backend = Backend::start_on(net.node("backend"), conditional);
        let endpoints = etcd.endpoints();
        let gateways = (0..INSTANCES)
            .map(|i| {
                let node = net.node(&instance(i));
                let wrapper = node.wrapper();
                let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
                let listen = node.addr(0).to_string();
                let upstream = backend.url();
                let name = instance(i);
                let mut args = vec![
                    "--upstream",
                    &upstream,
                    "--listen",
                    &listen,
                    "--admin-listen",
                    &listen,
                    "--state",
                    "etcd",
                    "--etcd-endpoints",
                    &endpoints,
                    "--etcd-prefix",
                    prefix,
                    "--etcd-lease-ttl",
                    TTL,
                    "--instance-name",
                    &name,
                    "--upstream-timeout",
                    UPSTREAM_TIMEOUT,
                    // A handful of fences in memory: nearly every
                    // admission reads its fence with its claim (issue 51).
                    "--fence-cache",
                    "1K",
                ];
                args.extend_from_slice(extra);
                GatewayProcess::start_full(&wrapper, &args, &[])
            })
            .collect();
        Some(Cluster {
            etcd,
            backend,
            gateways,
            net,
        })
    }

    fn instances(&self) -> Vec<String> {
        (0..INSTANCES).map(instance).collect()
    }

    fn members(&self) -> Vec<String> {
        (0..MEMBERS).map(member).collect()
    }
}

/// The nemesis' moves, each on the real network between the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum NetMove {
    /// An instance cut from every etcd member, both ways, past its lease.
    InstanceFromEtcd,
    /// An instance hears nothing from etcd, but etcd hears it (its
    /// renewals arrive; the answers never come back).
    EtcdToInstanceOnly,
    /// etcd hears nothing from an instance, but the instance hears etcd.
    InstanceToEtcdOnly,
    /// The etcd leader cut from the other members (a minority of one);
    /// the instances still reach it.
    EtcdMinority,
    /// Two members cut from everything else (the third member and every
    /// instance): the instances reach only a member without quorum.
    EtcdMajority,
    /// An instance cut from the backend: its requests in flight stall and
    /// time out; TCP delivers their bytes once the cut heals.
    InstanceFromBackend,
    /// 200 ms +/- 100 ms delay and 5 % loss on every link.
    DegradeAll,
    /// An instance's link to the backend delayed past `--upstream-timeout`:
    /// its writes arrive after it gave up on them.
    LateToBackend,
}

const NET_MOVES: &[NetMove] = &[
    NetMove::InstanceFromEtcd,
    NetMove::EtcdToInstanceOnly,
    NetMove::InstanceToEtcdOnly,
    NetMove::EtcdMinority,
    NetMove::EtcdMajority,
    NetMove::InstanceFromBackend,
    NetMove::DegradeAll,
    NetMove::LateToBackend,
];

/// The moves that delay an instance's writes to the backend past its
/// timeout: the control plays only these, since they are what opens the
/// window without chaining, and a control that played every move met too
/// few of them, once, on a loaded machine (no late write in 90 s).
const BACKEND_MOVES: &[NetMove] = &[NetMove::LateToBackend, NetMove::InstanceFromBackend];

/// How many times each move was made (or met packets).
type Moves = HashMap<NetMove, usize>;

struct NetNemesis<'a> {
    rng: Rng,
    cluster: &'a Cluster,
    /// The moves played: each once in this order, then at random.
    moves: &'static [NetMove],
    /// Moves made, and of them those that met packets (cut, lost or
    /// delayed some).
    done: HashMap<NetMove, usize>,
    met: HashMap<NetMove, usize>,
}

impl<'a> NetNemesis<'a> {
    fn new(cluster: &'a Cluster, seed: u64, moves: &'static [NetMove]) -> Self {
        NetNemesis {
            rng: Rng(seed),
            cluster,
            moves,
            done: HashMap::new(),
            met: HashMap::new(),
        }
    }

    fn play(&mut self, round: usize) {
        let moves = self.moves;
        let step = if round < moves.len() {
            moves[round]
        } else {
            moves[self.rng.below(moves.len() as u64) as usize]
        };
        let net = &self.cluster.net;
        let lease = Duration::from_secs(TTL.parse().unwrap());
        let instances = self.cluster.instances();
        let members = self.cluster.members();
        let members: Vec<&str> = members.iter().map(String::as_str).collect();
        let which = self.rng.below(INSTANCES as u64) as usize;
        let one = instances[which].as_str();
        let one_addr = self.cluster.gateways[which].data_addr();
        let before = net.counts();
        match step {
            NetMove::InstanceFromEtcd => {
                net.partition(&[one], &members);
                thread::sleep(lease + Duration::from_millis(1500));
            }
            NetMove::EtcdToInstanceOnly => {
                net.partition_one_way(&members, &[one]);
                thread::sleep(lease + Duration::from_millis(1500));
            }
            NetMove::InstanceToEtcdOnly => {
                net.partition_one_way(&[one], &members);
                thread::sleep(lease + Duration::from_millis(1500));
            }
            NetMove::EtcdMinority => {
                let leader = member(self.cluster.etcd.leader().unwrap_or(0));
                let others: Vec<&str> = members.iter().copied().filter(|m| *m != leader).collect();
                net.partition(&[leader.as_str()], &others);
                thread::sleep(Duration::from_secs(3));
            }
            NetMove::EtcdMajority => {
                let third = self.rng.below(MEMBERS as u64) as usize;
                let cut: Vec<&str> = (0..MEMBERS)
                    .filter(|&m| m != third)
                    .map(|m| members[m])
                    .collect();
                let mut rest: Vec<&str> = instances.iter().map(String::as_str).collect();
                rest.push(members[third]);
                net.partition(&cut, &rest);
                thread::sleep(lease + Duration::from_millis(1500));
            }
            NetMove::InstanceFromBackend => {
                net.partition(&[one], &["backend"]);
                thread::scope(|s| {
                    s.spawn(|| read_through(one_addr));
                    thread::sleep(Duration::from_millis(2500));
                });
            }
            NetMove::DegradeAll => {
                net.degrade_all(Duration::from_millis(200), Duration::from_millis(100), 0.05);
                thread::sleep(Duration::from_secs(4));
            }
            NetMove::LateToBackend => {
                net.delay(
                    &[one],
                    &["backend"],
                    Duration::from_millis(2500),
                    Duration::ZERO,
                );
                let held = Duration::from_millis(1500 + self.rng.below(1000));
                thread::scope(|s| {
                    s.spawn(|| read_through(one_addr));
                    thread::sleep(held);
                });
            }
        }
        net.heal();
        let after = net.counts();
        *self.done.entry(step).or_default() += 1;
        if after.cut > before.cut || after.lost > before.lost || after.delayed > before.delayed {
            *self.met.entry(step).or_default() += 1;
        }
        // Let the system settle a little between moves.
        thread::sleep(Duration::from_millis(500 + self.rng.below(1000)));
    }
}

/// A read through the instance at `addr`, which it forwards to the backend
/// (the checker counts only writes), answered or not. A move on an
/// instance's link to the backend sends one, so that the link carries
/// packets while it is cut or delayed: the clients' writes may all go
/// through other instances then, or this one may be refusing them (503)
/// after an earlier move, and a move that met no packet leaves the run
/// inconclusive (it did, once in seven runs).
fn read_through(addr: std::net::SocketAddr) {
    let raw = build_request(addr, "GET", "/probe/net", &[], &[]);
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, CLIENT_TIMEOUT) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT));
    if stream.write_all(&raw).is_ok() {
        let _ = read_response(&mut std::io::BufReader::new(stream), false);
    }
}

/// One torture run on the network: three instances on shared fences in
/// front of a store that checks preconditions, `--conditional-writes http`
/// if `chained`, clients writing objects, the nemesis playing `moves` on
/// the network until `enough` (or `limit`). `None` without root.
fn network_run(
    seed: u64,
    chained: bool,
    moves: &'static [NetMove],
    limit: Duration,
    enough: impl Fn(&Verdict, &HashMap<NetMove, usize>) -> bool,
) -> Option<(Verdict, Moves, Moves)> {
    let extra: &[&str] = if chained {
        &["--conditional-writes", "http"]
    } else {
        &[]
    };
    let cluster = Cluster::start("/net-torture/", true, extra)?;
    let (routing, tokens, tally) = clients_for(&cluster.gateways);
    let started = Instant::now();
    let mut nemesis = NetNemesis::new(&cluster, seed.rotate_left(31), moves);
    let clients = cluster.net.node("clients");
    run_clients(
        seed,
        &routing,
        &tokens,
        &tally,
        limit,
        false,
        &|| clients.enter(),
        |round| {
            nemesis.play(round);
            enough(&check(&cluster.backend, &tally.acked_seqs), &nemesis.done)
        },
    );
    let (done, met) = (nemesis.done, nemesis.met);
    let verdict = check(&cluster.backend, &tally.acked_seqs);
    let counts = cluster.net.counts();
    eprintln!(
        "network faults, {}: etcd {}, {:.0?}, nemesis {done:?}; packets forwarded {}, cut {}, lost {}, delayed {}; {}",
        if chained {
            "chained (--conditional-writes http)"
        } else {
            "unchained"
        },
        etcd_version(),
        started.elapsed(),
        counts.forwarded,
        counts.cut,
        counts.lost,
        counts.delayed,
        outcome_line(&cluster.backend, &verdict, &tally),
    );
    Some((verdict, done, met))
}

/// With chained writes no write is applied out of token order, whatever the
/// network does between the parts; without them, the same faults on the
/// backend's links let late writes land (the control).
#[test]
fn network_faults_leave_chained_writes_in_order_and_unchained_ones_not() {
    let _serial = serial();
    // 300 in CI, as the shared torture: every move is made by then (about
    // 35 s here); longer runs are TORTURE_HANDOVERS=1000 and up.
    let want_handovers = env_or("TORTURE_HANDOVERS", 300) as usize;
    let limit = Duration::from_secs(env_or("TORTURE_SECONDS", 240));
    let seed = Rng::from_env_or_clock().next();

    let Some((verdict, done, met)) = network_run(seed, true, NET_MOVES, limit, |verdict, done| {
        NET_MOVES.iter().all(|m| done.contains_key(m)) && verdict.handovers >= want_handovers
    }) else {
        return;
    };
    assert!(
        verdict.decreases.is_empty(),
        "chained writes were applied out of order under network faults:\n{}",
        verdict.decreases.join("\n")
    );
    assert!(
        NET_MOVES.iter().all(|m| done.contains_key(m)),
        "inconclusive: not every network move was made: {done:?}"
    );
    assert!(
        NET_MOVES.iter().all(|m| met.contains_key(m)),
        "inconclusive: a move met no packet: made {done:?}, met packets {met:?}"
    );
    assert!(
        verdict.handovers >= want_handovers,
        "inconclusive: {} handovers, {want_handovers} wanted (raise TORTURE_SECONDS)",
        verdict.handovers
    );

    // The control stops at its first late write; its limit matters only on
    // a machine too loaded to make one soon.
    let control_limit = Duration::from_secs(150);
    let (verdict, _, _) = network_run(
        seed,
        false,
        BACKEND_MOVES,
        control_limit,
        |verdict, done| {
            done.contains_key(&NetMove::LateToBackend)
                && !verdict.decreases.is_empty()
                && verdict.handovers >= 100
        },
    )
    .expect("the network was made once already");
    assert!(
        !verdict.decreases.is_empty(),
        "no write landed out of order without chaining: the network faults do not open the window"
    );
}

// ---------------------------------------------------------------------------
// What a partitioned instance does, and how fast.
// ---------------------------------------------------------------------------

/// One probe: a `PUT` sent and answered (or not) at these times after the
/// partition began.
struct Probe {
    sent: Duration,
    answered: Duration,
    status: Option<u16>,
    /// The gateway's error code (or the I/O error), and its detail.
    error: String,
    detail: String,
}
/// Whether `key` exists in etcd, read through `member` from the control
/// node; `None` if the member did not answer.
fn etcd_has(member: std::net::SocketAddr, key: &str) -> Option<bool> {
    use base64::Engine as _;
    let body = serde_json::json!({
        "key": base64::engine::general_purpose::STANDARD.encode(key),
        "count_only": true,
    });
    let resp = try_http(
        member,
        "POST",
        "/v3/kv/range",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
    .ok()?;
    (resp.status == 200).then(|| resp.json()["count"].as_str().is_some_and(|c| c != "0"))
}

/// A partition between one instance and etcd, as the figures name it.
#[derive(Debug, Clone, Copy)]
enum Cut {
    BothWays,
    /// The instance sends, and never hears back.
    EtcdToInstance,
    /// etcd hears nothing of the instance; the instance hears etcd.
    InstanceToEtcd,
}

const PARTITION_TTL: u64 = 6;

#[test]
fn a_partitioned_instance_stops_before_its_lease_can_expire_and_serves_after_healing() {
    let _serial = serial();
    let ttl = PARTITION_TTL.to_string();
    let Some(cluster) = Cluster::start("/net-partition/", false, &["--etcd-lease-ttl", &ttl])
    else {
        return;
    };
    let gateway = &cluster.gateways[0];
    let addr = gateway.data_addr();
    let members: Vec<String> = cluster.members();
    let members: Vec<&str> = members.iter().map(String::as_str).collect();
    let lease_key = "/net-partition/members/gw0";
    let mut figures = Vec::new();
    for (round, cut) in [Cut::BothWays, Cut::EtcdToInstance, Cut::InstanceToEtcd]
        .into_iter()
        .enumerate()
    {
        // A lock holder writes again and again with one token: once its
        // first write committed a claim, gw0 admits the next ones on its
        // own record (docs/SHARED.md, "local reuse"), without etcd, for as
        // long as its lease may live, and no longer.
        let t = round as u64 + 1;
        assert!(
            wait_until(HANG_GUARD, || {
                cluster
                    .net
                    .node("clients")
                    .run_inside(|| write(addr, "/probe/k", t, false))
                    .is_ok_and(|r| r.status == 200)
                    && etcd_has(cluster.etcd.client(1), lease_key) == Some(true)
            }),
            "gw0 does not serve before the {cut:?} partition"
        );
        // A lease granted just now counts from when its grant was sent,
        // which after a heal may be a second or more back (sent into the
        // partition, answered after it): two renewals first, so that each
        // cut meets an instance in its steady state.
        thread::sleep(Duration::from_secs(PARTITION_TTL) / 3);
        let records_before = cluster.backend.count();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let healed: Mutex<Option<Instant>> = Mutex::new(None);
        let started = Instant::now();
        let (probes, lease_gone) = thread::scope(|s| {
            let prober = s.spawn(|| {
                cluster.net.node("clients").enter();
                let mut probes = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let sent = started.elapsed();
                    let (status, error, detail) = match write(addr, "/probe/k", t, false) {
                        Ok(resp) => {
                            let json = resp.json();
                            let text =
                                |field: &str| json[field].as_str().unwrap_or_default().to_owned();
                            (Some(resp.status), text("error"), text("detail"))
                        }
                        Err(e) => (None, e.to_string(), String::new()),
                    };
                    probes.push(Probe {
                        sent,
                        answered: started.elapsed(),
                        status,
                        error,
                        detail,
                    });
                    // Serving again after the heal: enough.
                    let healed = *healed.lock().unwrap();
                    if healed.is_some_and(|h| started + sent > h) && status == Some(200) {
                        break;
                    }
                    thread::sleep(Duration::from_millis(20));
                }
                probes
            });
            let watcher = s.spawn(|| {
                while !stop.load(Ordering::SeqCst) && healed.lock().unwrap().is_none() {
                    if etcd_has(cluster.etcd.client(1), lease_key) == Some(false) {
                        return Some(started.elapsed());
                    }
                    thread::sleep(Duration::from_millis(10));
                }
                None
            });
            match cut {
                Cut::BothWays => cluster.net.partition(&["gw0"], &members),
                Cut::EtcdToInstance => cluster.net.partition_one_way(&members, &["gw0"]),
                Cut::InstanceToEtcd => cluster.net.partition_one_way(&["gw0"], &members),
            }
            thread::sleep(Duration::from_secs(PARTITION_TTL + 3));
            cluster.net.heal();
            *healed.lock().unwrap() = Some(Instant::now());
            let lease_gone = watcher.join().unwrap();
            let done = wait_until(HANG_GUARD, || prober.is_finished());
            stop.store(true, Ordering::SeqCst);
            assert!(
                done,
                "gw0 did not serve again within {HANG_GUARD:?} of the heal"
            );
            (prober.join().unwrap(), lease_gone)
        });
        let healed_at = healed.lock().unwrap().unwrap() - started;
        let records = cluster.backend.records();
        let last_forwarded = records[records_before..]
            .iter()
            .filter(|r| r.target == "/probe/k" && r.arrived < started + healed_at)
            .map(|r| r.arrived - started)
            .max();
        let first_503 = probes
            .iter()
            .find(|p| p.status == Some(503))
            .map(|p| p.answered);
        let during = |p: &&Probe| p.sent < healed_at;
        let last_200 = probes
            .iter()
            .filter(during)
            .filter(|p| p.status == Some(200))
            .map(|p| p.sent)
            .max();
        let back = probes
            .iter()
            .find(|p| p.sent > healed_at && p.status == Some(200))
            .map(|p| p.sent - healed_at);
        let ms = |d: Option<Duration>| {
            d.map_or("never".to_string(), |d| format!("{} ms", d.as_millis()))
        };
        let refusal = probes.iter().find(|p| p.status == Some(503));
        let figure = format!(
            "partition {cut:?} (TTL {PARTITION_TTL} s, healed at {}): first 503 answered {} ({:?}), \
             last 200 sent {}, last write forwarded reached the backend {}, lease gone in etcd {}; \
             serving again {} after the heal",
            ms(Some(healed_at)),
            ms(first_503),
            refusal.map(|p| &p.detail),
            ms(last_200),
            ms(last_forwarded),
            ms(lease_gone),
            ms(back),
        );
        eprintln!("{figure}");

        // It stops: a 503 `fence_store_unavailable` during the cut, and
        // nothing admitted after it until the heal.
        let first_503 = first_503.unwrap_or_else(|| panic!("no 503 during the {cut:?} cut"));
        assert_eq!(refusal.unwrap().error, "fence_store_unavailable");
        assert!(
            probes
                .iter()
                .filter(during)
                .all(|p| p.sent < first_503 || p.status != Some(200)),
            "gw0 admitted a write after its first 503 and before the heal ({cut:?})"
        );
        // Nothing it forwarded reached the backend once its lease may have
        // expired: the last renewal etcd got came at most one renewal
        // interval (TTL / 6) before the cut, so etcd may expire the lease
        // from TTL * 5 / 6 after the cut on, and no sooner than it did.
        if let Some(arrival) = last_forwarded {
            let earliest_expiry = Duration::from_secs(PARTITION_TTL) * 5 / 6;
            assert!(
                arrival < earliest_expiry,
                "{cut:?}: a write gw0 forwarded arrived {arrival:?} after the cut, past the lease's earliest expiry"
            );
            if let Some(gone) = lease_gone {
                assert!(
                    arrival < gone,
                    "{cut:?}: a write arrived after the lease was gone"
                );
            }
        }
        figures.push(figure);
    }
    assert_eq!(figures.len(), 3);
}

// ---------------------------------------------------------------------------
// The soak: mixed load with the nemesis for a long while; nothing may grow.
// ---------------------------------------------------------------------------

/// What the run holds at a quiet moment (load stopped, faults healed, one
/// lease TTL and more gone by).
#[derive(Debug, Clone)]
struct Holdings {
    /// Per instance.
    rss_kib: Vec<u64>,
    open_fds: Vec<usize>,
    leases: usize,
    records: usize,
}

fn holdings(cluster: &Cluster, prefix: &str) -> Holdings {
    thread::sleep(Duration::from_secs(TTL.parse::<u64>().unwrap() + 3));
    let open_fds =
        |pid: u32| std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count());
    Holdings {
        rss_kib: cluster
            .gateways
            .iter()
            .map(|g| g.rss_bytes().unwrap_or(0) / 1024)
            .collect(),
        open_fds: cluster.gateways.iter().map(|g| open_fds(g.pid())).collect(),
        leases: cluster
            .etcd
            .lease_count()
            .expect("etcd answers the lease list"),
        records: cluster.etcd.keys(&format!("{prefix}fl/")).len(),
    }
}

/// Readers beside the writers: `GET`s of the keys, through every instance.
fn reader(
    routing: &Routing,
    node: &support::netns::Node,
    stop: &std::sync::atomic::AtomicBool,
) -> usize {
    node.enter();
    let mut rng = Rng(7);
    let mut reads = 0;
    while !stop.load(Ordering::Relaxed) {
        let addrs = routing.addrs.read().unwrap().clone();
        let addr = addrs[rng.below(addrs.len() as u64) as usize];
        let target = key_path(rng.below(KEYS as u64) as usize);
        if try_http(addr, "GET", &target, &[], b"").is_ok() {
            reads += 1;
        }
        thread::sleep(Duration::from_millis(5));
    }
    reads
}

/// `SOAK_SECONDS` (default 40; `scripts/soak-network.sh` runs the hour) of
/// writes, collection `DELETE`s and reads through three instances on
/// shared fences, the nemesis moving the network all along; before and
/// after, at rest: each instance's RSS and open descriptors, etcd's leases
/// and the in-flight records. None may grow without bound: the leases and
/// records come back to what three idle instances hold, descriptors to
/// within a few of the start, memory within a bound.
#[test]
fn a_soak_under_network_faults_grows_nothing() {
    let _serial = serial();
    let seconds = env_or("SOAK_SECONDS", 40);
    let prefix = "/net-soak/";
    let Some(cluster) = Cluster::start(prefix, false, &[]) else {
        return;
    };
    let seed = Rng::from_env_or_clock().next();
    let (routing, tokens, tally) = clients_for(&cluster.gateways);
    let clients = cluster.net.node("clients");
    let load = |limit: Duration, nemesis: Option<&mut NetNemesis<'_>>| {
        let stop = std::sync::atomic::AtomicBool::new(false);
        thread::scope(|s| {
            let readers: Vec<_> = (0..2)
                .map(|_| s.spawn(|| reader(&routing, clients, &stop)))
                .collect();
            let mut nemesis = nemesis;
            run_clients(
                seed,
                &routing,
                &tokens,
                &tally,
                limit,
                true,
                &|| clients.enter(),
                |round| {
                    match nemesis.as_deref_mut() {
                        Some(nemesis) => nemesis.play(round),
                        None => thread::sleep(Duration::from_millis(250)),
                    }
                    false
                },
            );
            stop.store(true, Ordering::Relaxed);
            readers
                .into_iter()
                .map(|r| r.join().unwrap())
                .sum::<usize>()
        })
    };
    // Warm up (pools, buffers, the allocator's arenas), then the start.
    load(Duration::from_secs(10), None);
    let start = holdings(&cluster, prefix);
    let started = Instant::now();
    let mut nemesis = NetNemesis::new(&cluster, seed.rotate_left(7), NET_MOVES);
    let reads = load(Duration::from_secs(seconds), Some(&mut nemesis));
    let elapsed = started.elapsed();
    let end = holdings(&cluster, prefix);
    let verdict = check(&cluster.backend, &tally.acked_seqs);
    eprintln!(
        "soak: {elapsed:.0?} under the nemesis {:?}; {} applied writes ({} collection deletes), {reads} reads, \
         acked {}, 503 {}, failed or cut {}; at rest before: {start:?}; after: {end:?}",
        nemesis.done,
        verdict.applied,
        verdict.collections,
        tally.acked.load(Ordering::Relaxed),
        tally.unavailable.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
    );
    assert!(verdict.applied > 0 && reads > 0, "the soak carried no load");
    // One lease per instance; the old ones revoked or expired.
    assert_eq!(end.leases, INSTANCES, "leases at rest: {end:?}");
    // Idle records linger, at most one per instance and fence key (the
    // keys and their directories).
    assert!(
        end.records <= INSTANCES * (KEYS + DIRS),
        "in-flight records at rest: {end:?}"
    );
    for i in 0..INSTANCES {
        assert!(
            end.open_fds[i] <= start.open_fds[i] + 8,
            "instance {i} holds more descriptors at rest: {start:?} -> {end:?}"
        );
        assert!(
            end.rss_kib[i] <= start.rss_kib[i] * 2 + 16 * 1024,
            "instance {i}'s memory grew: {start:?} -> {end:?}"
        );
    }
}

/// A client cut off from its instance in the middle of a body, silently (no
/// FIN, no reset), holds its key at the other instances for
/// `--client-body-timeout` and no longer: the next holder's write, through
/// another instance, waits for the cut-off write to be aborted towards the
/// backend, then goes through. Nothing of the two is applied out of order.
#[test]
fn a_client_cut_off_mid_body_holds_its_key_for_the_body_timeout_and_no_longer() {
    let _serial = serial();
    let body_timeout = 3;
    let timeout = body_timeout.to_string();
    let Some(cluster) = Cluster::start("/net-client/", false, &["--client-body-timeout", &timeout])
    else {
        return;
    };
    let clients = cluster.net.node("clients");
    let (gw0, gw1) = (
        cluster.gateways[0].data_addr(),
        cluster.gateways[1].data_addr(),
    );
    let target = "/held/k";

    // The first holder (token 1) sends its head and half its body to gw0.
    let raw = build_request(gw0, "PUT", target, &[("X-Fencing-Token", "1")], &[b'a'; 64]);
    let mut first = clients.run_inside(|| TcpStream::connect(gw0).unwrap());
    first.write_all(&raw[..raw.len() - 32]).unwrap();
    assert!(
        cluster.backend.wait_for(HANG_GUARD, |records| records
            .iter()
            .any(|r| r.target == target)),
        "the first write's head never reached the backend"
    );

    // Then the network between the clients and gw0 goes silent.
    cluster.net.partition(&["clients"], &["gw0"]);
    let cut = Instant::now();

    // The next holder (token 2) writes through gw1: it waits for the first
    // write's record, which lives until gw0 gives up on the body.
    let second = clients.run_inside(|| write(gw1, target, 2, false));
    let waited = cut.elapsed();
    let second = second.expect("the second holder's write was answered");
    assert_eq!(second.status, 200, "{}", second.text());

    let records = cluster.backend.records_for(target);
    let (a, b) = (&records[0], &records[1]);
    assert_eq!(
        (a.token_u64(), b.token_u64()),
        (Some(1), Some(2)),
        "{records:?}"
    );
    assert!(
        a.body_failed || a.body_len != Some(64),
        "the cut-off body must not be applied: {a:?}"
    );
    // The order the backend saw: the first write aborted, then the second
    // arrived.
    let events = cluster.backend.events();
    let aborted = events.iter().position(|e| *e == Event::BodyRead(a.seq));
    let arrived = events.iter().position(|e| *e == Event::Arrived(b.seq));
    assert!(
        aborted.is_some() && aborted < arrived,
        "the second write reached the backend before the first was aborted: {events:?}"
    );
    eprintln!(
        "client cut off mid-body from gw0 (--client-body-timeout {body_timeout}): the next holder's write \
         through gw1 answered {} ms after the cut; the first write's body aborted at the backend first",
        waited.as_millis()
    );
    drop(first);
}
