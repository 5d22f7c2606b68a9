//! Load for token trust's worst case (scripts/bench.sh, part `issuer`):
//! every request carries a token just handed out by the lock service.
//!
//! Each of `--clients` connections loops: `INCR` the Redis counter (a grant),
//! then `PUT` 1 KiB to its own key with that token, through the gateway. A
//! gateway with `--token-issuer redis://.../COUNTER` then sees every raise
//! above the bound it confirmed last, so it must ask; concurrent questions
//! are merged. Prints one `RESULT` line.
//!
//! ```sh
//! cargo run --release --example issuer_load -- --gateway 127.0.0.1:8080 \
//!     --redis 127.0.0.1:6379 --counter grants --clients 64 --seconds 10
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    gateway: SocketAddr,
    redis: SocketAddr,
    counter: String,
    clients: usize,
    seconds: u64,
}

fn parse_args() -> Result<Args, Error> {
    let mut args = Args {
        gateway: "127.0.0.1:8080".parse()?,
        redis: "127.0.0.1:6379".parse()?,
        counter: "grants".into(),
        clients: 64,
        seconds: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--gateway" => args.gateway = value.parse()?,
            "--redis" => args.redis = value.parse()?,
            "--counter" => args.counter = value,
            "--clients" => args.clients = value.parse()?,
            "--seconds" => args.seconds = value.parse()?,
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    Ok(args)
}

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
}

async fn client(
    id: usize,
    args: Arc<Args>,
    redis: redis::aio::MultiplexedConnection,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
) -> Result<(), Error> {
    let tcp = tokio::net::TcpStream::connect(args.gateway).await?;
    tcp.set_nodelay(true)?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(tcp)).await?;
    tokio::spawn(connection);
    let body = Bytes::from(vec![b'x'; 1024]);
    let mut redis = redis;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let token: u64 = redis::cmd("INCR")
            .arg(&args.counter)
            .query_async(&mut redis)
            .await?;
        n += 1;
        let request = http::Request::put(format!("/issuer/c{id}/k{}", n % 16))
            .header(http::header::HOST, "bench")
            .header("x-fencing-token", token)
            .body(Full::new(body.clone()))?;
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        response.into_body().collect().await?;
        let counter = match status.as_u16() {
            200..=299 => &counts.ok,
            409 => &counts.refused,
            _ => &counts.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => Arc::new(args),
        Err(e) => {
            eprintln!("issuer_load: {e}");
            return ExitCode::from(2);
        }
    };
    let redis = match redis::Client::open(format!("redis://{}", args.redis)) {
        Ok(client) => match client.get_multiplexed_async_connection().await {
            Ok(connection) => connection,
            Err(e) => {
                eprintln!("issuer_load: redis: {e}");
                return ExitCode::FAILURE;
            }
        },
        Err(e) => {
            eprintln!("issuer_load: redis: {e}");
            return ExitCode::FAILURE;
        }
    };
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let clients: Vec<_> = (0..args.clients)
        .map(|id| {
            tokio::spawn(client(
                id,
                Arc::clone(&args),
                redis.clone(),
                Arc::clone(&counts),
                Arc::clone(&stop),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut errors = 0;
    for client in clients {
        if !matches!(client.await, Ok(Ok(()))) {
            errors += 1;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let ok = counts.ok.load(Ordering::Relaxed);
    let refused = counts.refused.load(Ordering::Relaxed);
    let failed = counts.failed.load(Ordering::Relaxed);
    let requests = ok + refused + failed;
    println!(
        "RESULT requests={requests} seconds={seconds:.3} rps={:.1} ok={ok} refused={refused} failed={failed} errors={errors}",
        requests as f64 / seconds
    );
    ExitCode::SUCCESS
}
