//! Sealing a fence at grant time: the window fencing alone leaves open.
//!
//! A fence only learns of a new holder's token when the new holder writes.
//! Until then, the previous holder's token is still the highest, and its
//! late writes land. Here client 1 (token 33) appends to a log, then pauses
//! past its lease; client 2 takes the lock (token 34) and prepares its
//! write for a while; client 1 wakes and appends again, before client 2 has
//! written anything.
//!
//! Both runs go through fencegate. In the first, nothing seals the fence:
//! client 1's late append lands while client 2 holds the lock. In the
//! second, the lock service seals the fence when it grants token 34 (`PUT
//! /fences/{key}` on the admin plane, with the admin bearer token and a
//! reason, recorded in the audit log): client 1's late append bounces with
//! 409 although client 2 has not written yet. Exit status 0 only if both
//! runs show exactly that.
//!
//! ```sh
//! cargo run --example seal
//! ```

mod support;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use http::Method;
use support::{
    call, fence_path, freeze, heading, show_run, spawn_client, start_gateway, verdict, LeaseLock,
    Reply, Result, Route, Storage, Timeline, CLIENT_2_START, LEASE,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The log both clients append to (the embedded store appends on POST).
const KEY: &str = "/demo/journal";
/// Client 1's pause: past its lease, but shorter than client 2's preparation.
const PAUSE: Duration = Duration::from_millis(900);
/// How long client 2 works between taking the lock and writing.
const PREPARE: Duration = Duration::from_millis(800);
/// The admin plane's bearer token in this demo.
const ADMIN_TOKEN: &str = "demo-admin-token";

const DRAFT_1: &str = "[c1 draft]";
const LATE_1: &str = "[c1 late]";
const FROM_2: &str = "[c2]";

/// The lock service's seal: `PUT /fences/{key}` with the new token, on the
/// admin plane. Returns the status line's code.
async fn seal(admin: SocketAddr, key: &str, token: u64) -> Result<u16> {
    let body = serde_json::json!({ "highest": token, "reason": "lock granted" }).to_string();
    let request = format!(
        "PUT {} HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        fence_path(key),
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(admin).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or("no status line from the admin plane")?;
    Ok(status)
}

/// What one run showed.
struct Run {
    diagram: String,
    late: Reply,
    /// When client 1's late append was answered, and when client 2's append
    /// was sent.
    late_answered: Instant,
    client_2_wrote: Instant,
    client_2: Reply,
    stored: Option<String>,
    highest: Option<u64>,
}

async fn run(sealed: bool) -> Result<Run> {
    let tl = Timeline::new(&["client 1", "client 2", "lock", "fencegate", "storage"]);
    let gateway_lane = tl.lane("fencegate");
    let lock_lane = tl.lane("lock");
    let storage = Storage::start(&tl, Some(gateway_lane)).await?;
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, ADMIN_TOKEN)?;
    let gateway = start_gateway(storage.addr, Some(token_file)).await?;
    let route = Route::direct(gateway.data_addr(), gateway_lane);
    let admin = gateway.admin_addr();
    let lock = LeaseLock::new(&tl, 33);

    let client_1 = spawn_client("client 1", &tl, &lock, move |tl, lock, me| async move {
        let lease = lock.acquire(me, LEASE).await;
        let token = Some(lease.token);
        call(&tl, me, &route, Method::POST, KEY, token, Some(DRAFT_1)).await?;
        freeze(&tl, me, PAUSE, "GC");
        let late = call(&tl, me, &route, Method::POST, KEY, token, Some(LATE_1)).await?;
        Ok::<_, support::Error>((late, Instant::now()))
    });
    let client_2 = spawn_client("client 2", &tl, &lock, move |tl, lock, me| async move {
        tokio::time::sleep(CLIENT_2_START).await;
        let lease = lock.acquire(me, LEASE * 4).await;
        if sealed {
            tl.msg(
                lock_lane,
                gateway_lane,
                format!("seal: PUT /fences/.. highest {}", lease.token),
            );
            let status = seal(admin, KEY, lease.token).await?;
            tl.msg(
                gateway_lane,
                lock_lane,
                format!("{status} (fence at {})", lease.token),
            );
            if status != 200 {
                return Err(format!("the seal was answered {status}").into());
            }
        }
        tl.note(
            me,
            format!("prepares its write ({} ms)", PREPARE.as_millis()),
        );
        tokio::time::sleep(PREPARE).await;
        let wrote = Instant::now();
        let reply = call(
            &tl,
            me,
            &route,
            Method::POST,
            KEY,
            Some(lease.token),
            Some(FROM_2),
        )
        .await?;
        lock.release(me, &lease);
        Ok::<_, support::Error>((reply, wrote))
    });
    let (late, late_answered) = client_1.await.map_err(|_| "client 1 panicked")??;
    let (client_2, client_2_wrote) = client_2.await.map_err(|_| "client 2 panicked")??;
    let (stored, highest) = support::end_run(storage, Some(gateway), KEY).await?;
    Ok(Run {
        diagram: tl.render(),
        late,
        late_answered,
        client_2_wrote,
        client_2,
        stored,
        highest,
    })
}

/// Prints a run and says whether it showed what it should.
fn judge(sealed: bool, run: &Run) -> bool {
    let title = if sealed {
        "run 2: the lock service seals the fence at grant time"
    } else {
        "run 1: fencegate without a seal"
    };
    show_run(title, &run.diagram, KEY, &run.stored, "", run.highest);
    let before_client_2 = run.late_answered < run.client_2_wrote;
    let unsealed = format!("{DRAFT_1}{LATE_1}{FROM_2}");
    let sealed_log = format!("{DRAFT_1}{FROM_2}");
    if !sealed {
        let landed = run.late.ok()
            && run.client_2.ok()
            && before_client_2
            && run.stored.as_deref() == Some(unsealed.as_str());
        if landed {
            println!("=> UNSAFE WINDOW: client 1's append (token 33), made after its lease ended, landed");
            println!(
                "   while client 2 held the lock: client 2 had not written yet, so 33 was still"
            );
            println!("   the highest token fencegate had seen.");
        } else {
            println!(
                "=> expected client 1's late append to land before client 2 wrote; it got {}",
                run.late.status
            );
        }
        return landed;
    }
    let bounced = run.late.is_stale()
        && run.late.highest == Some(34)
        && run.client_2.ok()
        && before_client_2
        && run.stored.as_deref() == Some(sealed_log.as_str());
    if bounced {
        println!(
            "=> SAFE: the grant raised the fence to 34 through the admin plane, so client 1's late"
        );
        println!("   append bounced (409 stale_token, highest 34) before client 2 wrote anything.");
    } else {
        println!(
            "=> expected 409 (highest 34) for client 1 before client 2 wrote; it got {}",
            run.late.label()
        );
    }
    println!();
    bounced
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let started = Instant::now();
    println!("seal: a fence raised at grant time closes the window before the new holder writes");
    println!(
        "real: loopback HTTP, fencegate in-process (admin plane with a bearer token), its embedded"
    );
    println!("object store (POST appends), lease expiry by wall time.");
    println!(
        "simulated: the lock service (in-process lease lock) and the GC pause ({} ms; lease {} ms).",
        PAUSE.as_millis(),
        LEASE.as_millis()
    );
    println!();
    let mut pass = true;
    for sealed in [false, true] {
        match runtime.block_on(run(sealed)) {
            Ok(run) => pass &= judge(sealed, &run),
            Err(e) => {
                println!("{}", heading("run failed"));
                println!("{e}");
                return ExitCode::FAILURE;
            }
        }
        println!();
    }
    verdict(
        pass,
        started,
        "without a seal the late append landed, with one it bounced before the new holder wrote",
    )
}
