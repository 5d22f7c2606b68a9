//! The Chubby paper's request R: a write sent in time that arrives late.
//!
//! Client 1 takes a lease lock (token 33), checks that its lease is good and
//! sends its write well before the lease ends. The network holds the request
//! (a delaying TCP relay in this example: it accepts the connection, keeps the
//! client's bytes for a while, then forwards them and relays the answer back).
//! Meanwhile the lease runs out, client 2 takes the lock (token 34) and
//! writes. Then client 1's old request arrives.
//!
//! The scenario runs twice: straight against the storage (the late request
//! replaces client 2's write), then through fencegate (the late request is
//! refused with 409 and never reaches the storage). Exit status 0 only if
//! both runs show exactly that.
//!
//! ```sh
//! cargo run --example delayed_write
//! ```

mod support;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use http::Method;
use support::{
    call, fence_highest, fence_path, heading, legend, request_label, shown, spawn_process,
    start_gateway, Lane, LeaseLock, Reply, Result, Route, Storage, Timeline,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The object both clients write.
const KEY: &str = "/demo/report";
/// Lease of every grant.
const LEASE: Duration = Duration::from_millis(500);
/// How long the network holds client 1's request: well past its lease.
const HOLD: Duration = Duration::from_millis(800);
/// Client 2 shows up a little after client 1.
const CLIENT_2_START: Duration = Duration::from_millis(50);

const FROM_1: &str = "from client 1";
const FROM_2: &str = "from client 2";

/// A TCP relay that holds each connection's first bytes for `hold`, then
/// connects to `target`, forwards them and relays both directions.
async fn delaying_relay(
    listener: TcpListener,
    target: SocketAddr,
    hold: Duration,
    tl: Timeline,
    target_lane: Lane,
) {
    let me = tl.lane("network");
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            return;
        };
        let tl = tl.clone();
        tokio::spawn(async move {
            if let Err(e) = relay_one(inbound, target, hold, &tl, me, target_lane).await {
                tl.note(me, format!("relay failed: {e}"));
            }
        });
    }
}

async fn relay_one(
    mut inbound: TcpStream,
    target: SocketAddr,
    hold: Duration,
    tl: &Timeline,
    me: Lane,
    target_lane: Lane,
) -> Result<()> {
    inbound.set_nodelay(true)?;
    let mut held = vec![0; 64 * 1024];
    let n = inbound.read(&mut held).await?;
    if n == 0 {
        return Ok(());
    }
    held.truncate(n);
    tl.pause_begin(
        me,
        format!("~~ request held in the network {} ms ~~", hold.as_millis()),
    );
    let since = Instant::now();
    tokio::time::sleep(hold).await;
    tl.pause_end(
        me,
        format!("~~ delivered {} ms late ~~", since.elapsed().as_millis()),
    );
    let mut outbound = TcpStream::connect(target).await?;
    outbound.set_nodelay(true)?;
    let (method, token) = describe(&held);
    tl.msg(
        me,
        target_lane,
        request_label(&method, token.as_deref(), None),
    );
    outbound.write_all(&held).await?;
    // Anything the client sends after its first bytes, and the whole answer,
    // go through undelayed.
    tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await?;
    Ok(())
}

/// Method and token of the HTTP request whose head starts `bytes`.
fn describe(bytes: &[u8]) -> (Method, Option<String>) {
    let head = String::from_utf8_lossy(bytes);
    let mut lines = head.split("\r\n");
    let method = lines
        .next()
        .and_then(|line| line.split(' ').next())
        .and_then(|m| Method::from_bytes(m.as_bytes()).ok())
        .unwrap_or(Method::GET);
    let token = lines
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case(support::TOKEN_HEADER))
        .map(|(_, value)| value.trim().to_owned());
    (method, token)
}

struct Outcome {
    diagram: String,
    client_1: Reply,
    client_2: Reply,
    stored: Option<String>,
    highest: Option<u64>,
}

async fn run(fenced: bool) -> Result<Outcome> {
    let lanes: &[&str] = if fenced {
        &[
            "client 1",
            "client 2",
            "lock",
            "network",
            "fencegate",
            "storage",
        ]
    } else {
        &["client 1", "client 2", "lock", "network", "storage"]
    };
    let tl = Timeline::new(lanes);
    let gateway_lane = tl.find_lane("fencegate");
    let storage = Storage::start(&tl, gateway_lane).await?;
    let gateway = match fenced {
        true => Some(start_gateway(storage.addr).await?),
        false => None,
    };
    // Where requests are answered: the gateway, or the storage itself.
    let (server_addr, server_lane) = match (&gateway, gateway_lane) {
        (Some(gateway), Some(lane)) => (gateway.data_addr(), lane),
        _ => (storage.addr, tl.lane("storage")),
    };
    let relay_listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let relay_addr = relay_listener.local_addr()?;
    let relay = tokio::spawn(delaying_relay(
        relay_listener,
        server_addr,
        HOLD,
        tl.clone(),
        server_lane,
    ));
    // Client 1's path goes through the slow network, client 2's does not.
    let slow = Route {
        addr: relay_addr,
        via: tl.lane("network"),
        server: server_lane,
    };
    let fast = Route::direct(server_addr, server_lane);
    let lock = LeaseLock::new(&tl, 33);

    let client_1 = spawn_process("client 1", {
        let (tl, lock) = (tl.clone(), lock.clone());
        move || async move {
            let me = tl.lane("client 1");
            let lease = lock.acquire(me, LEASE).await;
            tl.note(
                me,
                format!(
                    "checks its lease: {} ms left, sends its write",
                    lease.remaining().as_millis()
                ),
            );
            call(
                &tl,
                me,
                &slow,
                Method::PUT,
                KEY,
                Some(lease.token),
                Some(FROM_1),
            )
            .await
        }
    });
    let client_2 = spawn_process("client 2", {
        let (tl, lock) = (tl.clone(), lock.clone());
        move || async move {
            let me = tl.lane("client 2");
            tokio::time::sleep(CLIENT_2_START).await;
            let lease = lock.acquire(me, LEASE).await;
            let reply = call(
                &tl,
                me,
                &fast,
                Method::PUT,
                KEY,
                Some(lease.token),
                Some(FROM_2),
            )
            .await;
            lock.release(me, &lease);
            reply
        }
    });
    let client_1 = client_1.await.map_err(|_| "client 1 panicked")??;
    let client_2 = client_2.await.map_err(|_| "client 2 panicked")??;

    relay.abort();
    let stored = storage.peek(KEY).await?;
    let highest = match &gateway {
        Some(gateway) => fence_highest(gateway, KEY).await?,
        None => None,
    };
    if let Some(gateway) = gateway {
        gateway.shutdown().await;
    }
    storage.stop();
    Ok(Outcome {
        diagram: tl.render(),
        client_1,
        client_2,
        stored,
        highest,
    })
}

fn show(title: &str, outcome: &Outcome) {
    println!("{}", heading(title));
    print!("{}", outcome.diagram);
    println!("{}", legend());
    println!();
    println!("final stored value of {KEY}: {}", shown(&outcome.stored));
    if let Some(highest) = outcome.highest {
        println!(
            "fencegate admin plane: GET {} -> highest {highest}",
            fence_path(KEY)
        );
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let started = Instant::now();
    println!("delayed_write: a write sent in time, delivered after the lease moved on (Chubby's request R)");
    println!(
        "real: loopback HTTP and TCP, fencegate in-process, its embedded object store, lease expiry by"
    );
    println!("wall time. simulated: the lock service (in-process lease lock) and the slow network (a TCP");
    println!(
        "relay that holds client 1's bytes {} ms before forwarding; the lease is {} ms).",
        HOLD.as_millis(),
        LEASE.as_millis()
    );
    println!();

    let mut pass = true;

    let direct = match run(false).await {
        Ok(outcome) => outcome,
        Err(e) => {
            println!("direct run failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    show(
        "run 1 of 2: straight to the storage, nothing checks tokens",
        &direct,
    );
    let corrupted =
        direct.client_1.ok() && direct.client_2.ok() && direct.stored.as_deref() == Some(FROM_1);
    if corrupted {
        println!(
            "=> CORRUPTED: client 1's request (token 33), sent while its lease was valid, arrived"
        );
        println!(
            "   after client 2 (token 34) had written, and silently replaced client 2's write."
        );
    } else {
        println!("=> expected the late write to overwrite client 2's, but it did not");
        pass = false;
    }
    println!();

    let fenced = match run(true).await {
        Ok(outcome) => outcome,
        Err(e) => {
            println!("fenced run failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    show("run 2 of 2: through fencegate", &fenced);
    let refused = fenced.client_1.is_stale()
        && fenced.client_2.ok()
        && fenced.stored.as_deref() == Some(FROM_2);
    if refused {
        println!("=> SAFE: the late request carried token 33 < 34 and fencegate refused it (409");
        println!(
            "   stale_token) without forwarding it; client 2's write stands. This is Chubby's"
        );
        println!("   sequencer check, done at the storage edge.");
    } else {
        println!(
            "=> expected 409 for client 1 and client 2's value stored; client 1 got {}",
            fenced.client_1.status
        );
        pass = false;
    }
    println!();

    let elapsed = started.elapsed().as_secs_f64();
    if pass {
        println!("VERDICT: PASS: the direct run let the late write win, fencegate refused it ({elapsed:.1} s)");
        ExitCode::SUCCESS
    } else {
        println!("VERDICT: FAIL: the runs did not show what this demo claims ({elapsed:.1} s)");
        ExitCode::FAILURE
    }
}
