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
    call, direct_then_fenced, end_run, request_label, spawn_client_2, spawn_process, start_backend,
    verdict, Lane, LeaseLock, Result, Route, Timeline, TwoClients, TwoClientsText,
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

/// What the runs say when they show what they should.
const TEXT: TwoClientsText = TwoClientsText {
    corrupted: &[
        "=> CORRUPTED: client 1's request (token 33), sent while its lease was valid, arrived",
        "   after client 2 (token 34) had written, and silently replaced client 2's write.",
    ],
    write: "late",
    safe: &[
        "=> SAFE: the late request carried token 33 < 34 and fencegate refused it (409",
        "   stale_token) without forwarding it; client 2's write stands. This is Chubby's",
        "   sequencer check, done at the storage edge.",
    ],
};

async fn run(fenced: bool) -> Result<TwoClients> {
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
    // Where requests are answered: the gateway, or the storage itself.
    let (storage, gateway, server_addr, server_lane) = start_backend(&tl, fenced).await?;
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
    let client_2 = spawn_client_2(&tl, &lock, fast, CLIENT_2_START, LEASE, KEY, FROM_2);
    let client_1 = client_1.await.map_err(|_| "client 1 panicked")??;
    let client_2 = client_2.await.map_err(|_| "client 2 panicked")??;

    relay.abort();
    let (stored, highest) = end_run(storage, gateway, KEY).await?;
    Ok(TwoClients {
        key: KEY,
        values: [FROM_1, FROM_2],
        diagram: tl.render(),
        client_1,
        client_2,
        stored,
        highest,
    })
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
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

    let runs = direct_then_fenced(
        |fenced| runtime.block_on(run(fenced)).map_err(|e| e.to_string()),
        |fenced, outcome| outcome.judge(fenced, &TEXT),
    );
    let Some(pass) = runs else {
        return ExitCode::FAILURE;
    };
    verdict(
        pass,
        started,
        "the direct run let the late write win, fencegate refused it",
    )
}
