//! The residual window, and chained writes closing it: a write sent in
//! time that the network holds until after the next holder's write.
//!
//! Client 1 holds the lock (token 33) and writes. The network between the
//! writer and the storage holds the request (a TCP relay that delays the
//! bytes of that PUT); whoever waits for the answer gives up (client 1 at
//! its own timeout, or fencegate at `--upstream-timeout`: 504). The lock
//! moves on, client 2 (token 34) writes, and then client 1's held request
//! arrives.
//!
//! Three runs: straight to the storage, through fencegate, and through
//! fencegate with `--conditional-writes http` (the embedded store checks
//! `If-Match`/`If-None-Match`). The first two show the late write landing:
//! fencegate cannot recall a request it sent. The third shows the storage
//! refusing it (412), because fencegate chained it to the version the
//! object had before token 34 existed. Exit status 0 only if all three
//! show exactly that.
//!
//! ```sh
//! cargo run --example late_write
//! ```

mod support;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use fencegate::chain::Mode;
use fencegate::gateway::upstream::Upstream;
use fencegate::gateway::{Config, Gateway, StateKind};
use http::Method;
use support::{call, heading, show_run, shown, verdict, Lane, Result, Route, Storage, Timeline};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long the network holds client 1's write.
const HOLD: Duration = Duration::from_millis(1200);
/// How long whoever waits for its answer waits (client 1 directly, or
/// fencegate's `--upstream-timeout`).
const GIVE_UP: Duration = Duration::from_millis(300);
const KEY: &str = "/demo/report";
const VALUES: [&str; 2] = ["from client 1", "from client 2"];

/// A TCP relay to `target` that holds, for `HOLD`, the bytes of any request
/// carrying token 33 (client 1's), and relays everything else at once. A
/// held request reaches the storage even if the sender gave up meanwhile.
async fn relay(listener: TcpListener, target: SocketAddr, tl: Timeline, me: Lane) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            return;
        };
        let tl = tl.clone();
        tokio::spawn(async move {
            if let Err(e) = relay_one(inbound, target, &tl, me).await {
                tl.note(me, format!("relay failed: {e}"));
            }
        });
    }
}

async fn relay_one(inbound: TcpStream, target: SocketAddr, tl: &Timeline, me: Lane) -> Result<()> {
    let outbound = TcpStream::connect(target).await?;
    inbound.set_nodelay(true)?;
    outbound.set_nodelay(true)?;
    let (mut client_read, mut client_write) = inbound.into_split();
    let (mut server_read, mut server_write) = outbound.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = client_read.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
        if head.starts_with("put ") && head.contains("x-fencing-token: 33") {
            tl.pause_begin(
                me,
                format!("~~ write held in the network {} ms ~~", HOLD.as_millis()),
            );
            tokio::time::sleep(HOLD).await;
            tl.pause_end(me, "~~ delivered late ~~");
        }
        server_write.write_all(&buf[..n]).await?;
    }
    // The sender is gone; the held request still gets its answer from the
    // storage (which is when it is applied or refused).
    let _ = back.await;
    Ok(())
}

/// What one run shows.
struct Run {
    diagram: String,
    client_1: String,
    stored: Option<String>,
}

async fn run(fenced: bool, chained: bool) -> Result<Run> {
    let lanes: &[&str] = if fenced {
        &["client 1", "client 2", "fencegate", "network", "storage"]
    } else {
        &["client 1", "client 2", "network", "storage"]
    };
    let tl = Timeline::new(lanes);
    let (c1, c2, net) = (tl.lane("client 1"), tl.lane("client 2"), tl.lane("network"));
    let storage = Storage::start(&tl, Some(net)).await?;
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let relay_addr = listener.local_addr()?;
    let relay_task = tokio::spawn(relay(listener, storage.addr, tl.clone(), net));
    let gateway = if fenced {
        let config = Config {
            listen: "127.0.0.1:0".parse()?,
            admin_listen: "127.0.0.1:0".parse()?,
            state: StateKind::Memory,
            upstream: Some(Upstream::from_addr(relay_addr)?),
            upstream_timeout: GIVE_UP,
            conditional_writes: if chained { Mode::Http } else { Mode::Off },
            shutdown_timeout: Duration::from_secs(2),
            ..Config::default()
        };
        let gateway = Gateway::start(config).await?;
        if chained {
            tl.note(
                tl.lane("fencegate"),
                "start-up probe: the store refused a write whose condition no version meets",
            );
        }
        Some(gateway)
    } else {
        None
    };
    let route = match &gateway {
        Some(gateway) => Route {
            addr: gateway.data_addr(),
            via: tl.lane("fencegate"),
            server: tl.lane("fencegate"),
        },
        None => Route {
            addr: relay_addr,
            via: net,
            server: tl.lane("storage"),
        },
    };

    tl.note(c1, "holds the lock (token 33), writes");
    let first = tokio::time::timeout(
        GIVE_UP * 3,
        call(&tl, c1, &route, Method::PUT, KEY, Some(33), Some(VALUES[0])),
    )
    .await;
    let client_1 = match first {
        Ok(Ok(reply)) => reply.label(),
        Ok(Err(e)) => format!("failed: {e}"),
        Err(_) => {
            tl.note(
                c1,
                format!("no answer in {} ms: gives up", (GIVE_UP * 3).as_millis()),
            );
            "gave up".to_owned()
        }
    };
    tl.note(c2, "the lease ran out; takes the lock (token 34), writes");
    call(&tl, c2, &route, Method::PUT, KEY, Some(34), Some(VALUES[1])).await?;
    // Client 1's held write arrives now.
    tokio::time::sleep(HOLD + Duration::from_millis(400)).await;
    let stored = storage.peek(KEY).await?;
    relay_task.abort();
    if let Some(gateway) = gateway {
        gateway.shutdown().await;
    }
    Ok(Run {
        diagram: tl.render(),
        client_1,
        stored,
    })
}

fn main() -> ExitCode {
    let started = Instant::now();
    println!(
        "late_write: a write sent in time, held in the network until after the next holder's write"
    );
    println!("real: loopback HTTP and TCP, fencegate in-process, its embedded object store (which checks");
    println!(
        "If-Match). simulated: the slow network (a TCP relay that holds client 1's PUT {} ms) and",
        HOLD.as_millis()
    );
    println!("the lock service (tokens 33 and 34 handed out by the script).");
    println!();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            println!("no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runs = [
        ("run 1 of 3: straight to the storage", false, false),
        ("run 2 of 3: through fencegate", true, false),
        (
            "run 3 of 3: through fencegate with --conditional-writes http",
            true,
            true,
        ),
    ];
    let mut pass = true;
    for (title, fenced, chained) in runs {
        let outcome = match runtime.block_on(run(fenced, chained)) {
            Ok(outcome) => outcome,
            Err(e) => {
                println!("{title}: failed: {e}");
                return ExitCode::FAILURE;
            }
        };
        show_run(title, &outcome.diagram, KEY, &outcome.stored, "", None);
        println!("client 1's write: {}", outcome.client_1);
        let late_landed = outcome.stored.as_deref() == Some(VALUES[0]);
        let shown_ok = if chained {
            if !late_landed && outcome.stored.as_deref() == Some(VALUES[1]) {
                println!(
                    "=> SAFE: the late write carried the version the object had before token 34"
                );
                println!(
                    "   existed (fencegate added the condition); the storage refused it (412)."
                );
                true
            } else {
                println!(
                    "=> expected the storage to refuse the late write; it holds {}",
                    shown(&outcome.stored)
                );
                false
            }
        } else if late_landed {
            println!("=> CORRUPTED: client 1's write, given up on, landed after client 2's and replaced it.");
            if fenced {
                println!("   fencegate ordered what it forwarded, but cannot recall a request once sent:");
                println!("   the residual window its README names.");
            }
            true
        } else {
            println!(
                "=> expected the late write to land; the storage holds {}",
                shown(&outcome.stored)
            );
            false
        };
        pass &= shown_ok;
        println!();
    }
    println!("{}", heading("verdict"));
    let claim =
        "the late write landed directly and through fencegate, and chained writes refused it";
    verdict(pass, started, claim)
}
