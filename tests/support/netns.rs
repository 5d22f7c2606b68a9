//! Real network faults between the processes of a test: each part of a run
//! (a gateway instance, an etcd member, the backend, the clients) lives in a
//! network namespace of its own, and every packet between two of them
//! crosses a switch in the test process that can drop, delay or lose it on
//! command ([`Network`]).
//!
//! Each namespace has one TUN device, `fg0`, holding its node's address
//! (`10.X.Y.N/24`) with the whole subnet routed through it. The switch reads
//! every IPv4 packet a node sends from that device's file descriptor and
//! writes it to the destination node's device, now, later, or never, as the
//! faults between the two say. The kernels' TCP stacks on both sides see a
//! real network: a partition leaves connections open and silent (no reset,
//! no FIN) until a keep-alive or a timeout notices; loss costs
//! retransmissions; delay stretches every round trip; a one-way partition
//! lets one side send and never hear back.
//!
//! Why a switch in user space, and not veth pairs on a bridge with
//! `tc qdisc netem`: the kernels these tests run on have no netem qdisc
//! (`tc qdisc add ... netem` answers "Specified qdisc kind is unknown"), and
//! without it a bridge can cut a link but neither delay nor lose packets.
//! A TUN switch does all of it in one place, per direction, with counters
//! that show every fault really met packets.
//!
//! Cleanup is the kernel's: the namespaces are unnamed (kept alive by a file
//! descriptor of this process, and by the processes started in them), and
//! the TUN devices are not persistent, so closing their descriptors removes
//! them. Dropping the [`Network`] (also while a test panics) closes both,
//! and so does the end of the test process however it ends; a watchdog
//! kills what the network's nodes still run once the test process is gone
//! ([`reap_when_gone`]).
//!
//! It needs root (`CAP_NET_ADMIN` and `CAP_SYS_ADMIN`): [`Network::create`]
//! says why in one line and returns `None` when it cannot have it, and the
//! test skips; unless `FENCEGATE_NETNS_REQUIRED` is set (scripts/test.sh
//! sets it when run as root, as CI is), when it fails instead.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::rng::Rng;

/// The faults on one direction of the link between two nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Link {
    /// Every packet is dropped (a partition in this direction).
    pub cut: bool,
    /// Every packet is held this long, plus or minus up to `jitter`
    /// (uniform), so packets can overtake each other as on a real path.
    pub delay: Duration,
    pub jitter: Duration,
    /// Each packet is dropped with this probability.
    pub loss: f64,
}

/// What the switch did with packets, counted from the network's creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub forwarded: u64,
    pub cut: u64,
    pub lost: u64,
    pub delayed: u64,
}

/// One part of the run: a name, an address, and the namespace it lives in
/// (`None` for the control node, which is the test process's own namespace:
/// the test's main thread, `etcdctl` and the like reach every node from it).
pub struct Node {
    pub name: String,
    pub ip: Ipv4Addr,
    ns: Option<OwnedFd>,
    /// The network's run marker, in the environment of every program
    /// [`Node::wrapper`] starts: how the reaper knows them.
    run: String,
}

impl Node {
    /// The command prefix that runs a program in this node's namespace:
    /// `env FENCEGATE_NETNS_RUN=MARKER nsenter --net=/proc/PID/fd/N`
    /// (through this process's descriptor of the namespace, which outlives
    /// any restart of the program; the marker names this network's run for
    /// the reaper).
    pub fn wrapper(&self) -> Vec<String> {
        match &self.ns {
            Some(ns) => vec![
                "env".into(),
                format!("{RUN_VARIABLE}={}", self.run),
                "nsenter".into(),
                format!("--net=/proc/{}/fd/{}", std::process::id(), ns.as_raw_fd()),
            ],
            None => Vec::new(),
        }
    }

    /// The marker of this node's network run (see [`reap_when_gone`]).
    pub fn run_marker(&self) -> &str {
        &self.run
    }

    /// Moves the calling thread into this node's namespace: every socket it
    /// opens from now on is this node's. For threads of the test's own
    /// (clients, an in-process backend) that end with their work.
    pub fn enter(&self) {
        if let Some(ns) = &self.ns {
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("setns into a node's namespace");
        }
    }

    /// Runs `f` on a thread inside this node's namespace and returns what it
    /// returns: to bind a listener there, or start a server whose sockets
    /// must be this node's.
    pub fn run_inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.enter();
                f()
            })
            .join()
            .expect("a thread inside a node's namespace panicked")
        })
    }

    /// `ip:port` of this node.
    pub fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::from((self.ip, port))
    }
}

/// The switch's shared state: the faults, per directed pair of nodes, and
/// the counters.
struct Fabric {
    /// `links[from * n + to]`.
    links: Mutex<Vec<Link>>,
    n: usize,
    forwarded: AtomicU64,
    cut: AtomicU64,
    lost: AtomicU64,
    delayed: AtomicU64,
    stop: AtomicBool,
}

/// Nodes in namespaces and the switch between them. See the module docs.
pub struct Network {
    nodes: Vec<Node>,
    fabric: Arc<Fabric>,
    switch: Option<JoinHandle<()>>,
}

/// Networks made by this process so far: each gets a subnet and device
/// name of its own, so two in one process (or one per test binary running
/// at once) never share a route.
static NETWORKS: AtomicUsize = AtomicUsize::new(0);

/// Why this process cannot make namespaces and TUN devices, if it cannot.
pub fn unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root (network namespaces and TUN devices)".into());
    }
    if let Err(e) = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
    {
        return Some(format!("/dev/net/tun cannot be opened: {e}"));
    }
    if Command::new("nsenter").arg("--version").output().is_err() {
        return Some("nsenter (util-linux) is not installed".into());
    }
    None
}

impl Network {
    /// Makes the control node (`names` must not contain "control") and one
    /// node per name, each in a namespace of its own, and starts the switch
    /// with no faults. `None`, after one line on stderr saying why, when
    /// this process cannot (not root): the caller skips its test.
    pub fn create(names: &[&str]) -> Option<Network> {
        if let Some(why) = unavailable() {
            // scripts/test.sh sets this when it runs as root (CI does): there
            // a skip would hide that the network tests never ran.
            assert!(
                std::env::var_os("FENCEGATE_NETNS_REQUIRED").is_none(),
                "network faults {why}, and FENCEGATE_NETNS_REQUIRED is set"
            );
            eprintln!("skipped: network faults {why}");
            return None;
        }
        let k = NETWORKS.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let prefix = [10, 100 + (pid % 100) as u8, (k % 256) as u8];
        let control_device = format!("fgc{}n{k}", pid % 1_000_000);
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let run = format!("{pid}-{}-{k}", since_epoch.as_nanos());
        let ip = |host: u8| Ipv4Addr::new(prefix[0], prefix[1], prefix[2], host);

        let mut nodes = Vec::new();
        let mut tuns = Vec::new();
        let control = open_tun(&control_device).expect("create the control TUN device");
        configure(&control_device, ip(1));
        nodes.push(Node {
            name: "control".into(),
            ip: ip(1),
            ns: None,
            run: run.clone(),
        });
        tuns.push(control);
        for (i, name) in names.iter().enumerate() {
            assert!(i < 250, "at most 250 nodes");
            let host = ip(i as u8 + 2);
            let (ns, tun) = std::thread::spawn(move || -> (OwnedFd, File) {
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
                    .expect("unshare a network namespace");
                let ns: OwnedFd = File::open("/proc/thread-self/ns/net")
                    .expect("open the new namespace")
                    .into();
                let tun = open_tun("fg0").expect("create a node's TUN device");
                // Programs run from this thread start in its namespace.
                run_ip(&["link", "set", "lo", "up"]);
                configure("fg0", host);
                (ns, tun)
            })
            .join()
            .expect("make a node's namespace");
            nodes.push(Node {
                name: name.to_string(),
                ip: host,
                ns: Some(ns),
                run: run.clone(),
            });
            tuns.push(tun);
        }

        reap_when_gone(std::process::id(), &run);
        let n = nodes.len();
        let fabric = Arc::new(Fabric {
            links: Mutex::new(vec![Link::default(); n * n]),
            n,
            forwarded: AtomicU64::new(0),
            cut: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let switch = {
            let fabric = Arc::clone(&fabric);
            let hosts: Vec<u8> = nodes.iter().map(|node| node.ip.octets()[3]).collect();
            std::thread::Builder::new()
                .name("netns-switch".into())
                .spawn(move || switch(tuns, hosts, &fabric))
                .expect("start the switch")
        };
        Some(Network {
            nodes,
            fabric,
            switch: Some(switch),
        })
    }

    /// The node named `name` ("control" for the test's own namespace).
    pub fn node(&self, name: &str) -> &Node {
        self.nodes
            .iter()
            .find(|node| node.name == name)
            .unwrap_or_else(|| panic!("no node named {name}"))
    }

    fn index(&self, name: &str) -> usize {
        self.nodes
            .iter()
            .position(|node| node.name == name)
            .unwrap_or_else(|| panic!("no node named {name}"))
    }

    /// Changes the link from each of `from` to each of `to` (one direction).
    pub fn set(&self, from: &[&str], to: &[&str], change: impl Fn(&mut Link)) {
        let from: Vec<usize> = from.iter().map(|name| self.index(name)).collect();
        let to: Vec<usize> = to.iter().map(|name| self.index(name)).collect();
        let mut links = self.fabric.links.lock().unwrap();
        for &a in &from {
            for &b in &to {
                if a != b {
                    change(&mut links[a * self.fabric.n + b]);
                }
            }
        }
    }

    /// Cuts both directions between the groups `a` and `b`.
    pub fn partition(&self, a: &[&str], b: &[&str]) {
        self.set(a, b, |link| link.cut = true);
        self.set(b, a, |link| link.cut = true);
    }

    /// Cuts the direction from `from` to `to` only: `to` hears nothing of
    /// `from`, while `from` still hears `to`.
    pub fn partition_one_way(&self, from: &[&str], to: &[&str]) {
        self.set(from, to, |link| link.cut = true);
    }

    /// Delay (with jitter) and loss on every link between every two nodes
    /// but the control node (the test's own view of the run stays clear).
    pub fn degrade_all(&self, delay: Duration, jitter: Duration, loss: f64) {
        let names = self.names_but_control();
        self.set(&names, &names, |link| {
            link.delay = delay;
            link.jitter = jitter;
            link.loss = loss;
        });
    }

    /// Delay (with jitter) on both directions between `a` and `b`.
    pub fn delay(&self, a: &[&str], b: &[&str], delay: Duration, jitter: Duration) {
        for (from, to) in [(a, b), (b, a)] {
            self.set(from, to, |link| {
                link.delay = delay;
                link.jitter = jitter;
            });
        }
    }

    /// Removes every fault. Packets already held by a delay still arrive
    /// late, as they would on a real path.
    pub fn heal(&self) {
        let mut links = self.fabric.links.lock().unwrap();
        links.fill(Link::default());
    }

    /// What the switch did so far.
    pub fn counts(&self) -> Counts {
        Counts {
            forwarded: self.fabric.forwarded.load(Ordering::Relaxed),
            cut: self.fabric.cut.load(Ordering::Relaxed),
            lost: self.fabric.lost.load(Ordering::Relaxed),
            delayed: self.fabric.delayed.load(Ordering::Relaxed),
        }
    }

    fn names_but_control(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .filter(|node| node.ns.is_some())
            .map(|node| node.name.as_str())
            .collect()
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.fabric.stop.store(true, Ordering::SeqCst);
        if let Some(switch) = self.switch.take() {
            let _ = switch.join();
        }
        // The switch closed the TUN devices as it ended; the namespaces go
        // with their descriptors here (and with their last process).
    }
}

/// The environment variable that marks the programs a network's nodes run.
pub const RUN_VARIABLE: &str = "FENCEGATE_NETNS_RUN";

/// Kills every program started through a [`Node::wrapper`] of the run
/// `marker` once process `watched` (the test process) is gone, however it
/// ended (a `SIGKILL` runs no destructor): a watchdog shell polls `watched`
/// once a second, then kills each process whose environment holds the
/// marker. Their last process gone, the namespaces go too.
///
/// The marker, unique to one network, and not the namespaces' inode
/// numbers, picks the victims: the kernel reuses a freed namespace's inode
/// number, so a watchdog that woke after its network was dropped killed
/// the etcd member of the next test whose namespace had been given it.
pub fn reap_when_gone(watched: u32, marker: &str) {
    let _ = Command::new("sh")
        .args([
            "-c",
            r#"pid=$0; mark=$1
while kill -0 "$pid" 2>/dev/null; do sleep 1; done
for p in /proc/[0-9]*; do
  tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qxF "$mark" && kill -9 "${p#/proc/}" 2>/dev/null
done"#,
        ])
        .arg(watched.to_string())
        .arg(format!("{RUN_VARIABLE}={marker}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

/// Opens a non-persistent TUN device named `name` (IP packets, no packet
/// information header) in the calling thread's namespace, non-blocking.
fn open_tun(name: &str) -> std::io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/net/tun")?;
    // `struct ifreq`: the name, then the flags in the union.
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    let mut request = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    assert!(name.len() < libc::IFNAMSIZ, "device name too long: {name}");
    request.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `IfReq`
    // lays out (name, then the flags at the start of the union), on a
    // descriptor this function owns.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut request) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

fn run_ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        output.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Gives `device` its address with the /24 routed through it, and brings
/// it up, in the calling thread's namespace.
fn configure(device: &str, ip: Ipv4Addr) {
    run_ip(&["addr", "add", &format!("{ip}/24"), "dev", device]);
    run_ip(&["link", "set", device, "mtu", "1500", "up"]);
}

/// A packet held by a delay.
struct Held {
    due: Instant,
    seq: u64,
    to: usize,
    packet: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// The switch: forwards IPv4 packets between the nodes' TUN devices by
/// destination address, under the faults of each direction, until stopped.
/// Anything else (IPv6 router solicitations and the like) is dropped.
fn switch(mut tuns: Vec<File>, hosts: Vec<u8>, fabric: &Fabric) {
    let mut by_host = [usize::MAX; 256];
    for (i, &host) in hosts.iter().enumerate() {
        by_host[host as usize] = i;
    }
    let mut rng = Rng(0x5eed ^ u64::from(std::process::id()));
    let mut held: BinaryHeap<Reverse<Held>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut buf = vec![0u8; 65_536];
    while !fabric.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        while held.peek().is_some_and(|Reverse(h)| h.due <= now) {
            let Reverse(h) = held.pop().unwrap();
            let _ = tuns[h.to].write(&h.packet);
            fabric.forwarded.fetch_add(1, Ordering::Relaxed);
        }
        let wait = held
            .peek()
            .map_or(Duration::from_millis(20), |Reverse(h)| {
                h.due.saturating_duration_since(now)
            })
            .min(Duration::from_millis(20));
        let mut polls: Vec<libc::pollfd> = tuns
            .iter()
            .map(|tun| libc::pollfd {
                fd: tun.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let timeout = wait.as_millis().max(1) as libc::c_int;
        // SAFETY: `polls` is a valid array of `pollfd` of the length given,
        // alive for the call.
        let ready = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, timeout) };
        if ready <= 0 {
            continue;
        }
        for (from, poll) in polls.iter().enumerate() {
            if poll.revents & libc::POLLIN == 0 {
                continue;
            }
            // Drain the device: each read is one packet.
            while let Ok(len) = tuns[from].read(&mut buf) {
                let packet = &buf[..len];
                if len < 20 || packet[0] >> 4 != 4 {
                    continue;
                }
                let to = by_host[packet[19] as usize];
                if to == usize::MAX || to == from {
                    continue;
                }
                let link = fabric.links.lock().unwrap()[from * fabric.n + to];
                if link.cut {
                    fabric.cut.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if link.loss > 0.0 && (rng.next() as f64 / u64::MAX as f64) < link.loss {
                    fabric.lost.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if link.delay.is_zero() && link.jitter.is_zero() {
                    let _ = tuns[to].write(packet);
                    fabric.forwarded.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let jitter = link.jitter.as_micros() as u64;
                let spread = if jitter == 0 {
                    0
                } else {
                    rng.below(2 * jitter + 1)
                };
                let micros = (link.delay.as_micros() as u64 + spread).saturating_sub(jitter);
                seq += 1;
                held.push(Reverse(Held {
                    due: Instant::now() + Duration::from_micros(micros),
                    seq,
                    to,
                    packet: packet.to_vec(),
                }));
                fabric.delayed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    tuns.clear();
}
