//! Faults of the network (docs/RELIABILITY.md, "Faults of the network"):
//! every part of a run in a network namespace of its own, wired through the
//! switch of `tests/support/netns.rs`, which cuts, delays and loses packets.
//!
//! First the harness itself: a partition leaves a connection open and
//! silent, one-way partitions are one-way, a delay stretches round trips,
//! and nothing is left behind. Then the torture, the partition figures and
//! the soak.
//!
//! Root is needed; without it every test prints one line and passes
//! without running (CI runs as root).

#[path = "../support/mod.rs"]
mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use support::netns::Network;

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
