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
    judge_two_clients, request_label, run_timeline, start_backend, two_clients, Lane, Result,
    Route, Timeline, TwoClients, TwoClientsText, LEASE,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long the network holds client 1's request: well past its lease.
const HOLD: Duration = Duration::from_millis(800);

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
    let tl = run_timeline(&["client 1", "client 2", "lock", "network"], fenced);
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
    let then = "sends its write";
    let run = two_clients(&tl, storage, gateway, [slow, fast], then, None).await;
    relay.abort();
    run
}

fn main() -> ExitCode {
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

    let claim = "the direct run let the late write win, fencegate refused it";
    judge_two_clients(started, run, &TEXT, claim)
}
