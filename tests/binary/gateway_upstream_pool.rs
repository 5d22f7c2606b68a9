//! The gateway's pool of connections to the backend, seen from a raw TCP
//! backend that logs every connection: connections are reused, closed after
//! `--upstream-idle-timeout`, and one the backend closed, or whose response
//! the client stopped reading, is not used again.

#[path = "../support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{wait_until, GatewayProcess, HANG_GUARD};

/// What the backend saw on one connection.
#[derive(Debug, Default, Clone)]
struct Conn {
    requests: usize,
    /// When the gateway closed it (EOF after the last response).
    closed_after_last_response: Option<Duration>,
    /// Whether it carried the response to `/big`.
    served_big: bool,
    /// Whether the connection has ended, however.
    ended: bool,
}

/// A keep-alive HTTP/1.1 backend answering `200 ok` to every request; with
/// `close_after_each`, it closes each connection after its first response
/// without saying so (as a backend whose keep-alive timer fires would).
struct RawBackend {
    addr: SocketAddr,
    conns: Arc<Mutex<Vec<Conn>>>,
}

impl RawBackend {
    fn start(close_after_each: bool) -> RawBackend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let conns = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&conns);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let index = {
                    let mut log = log.lock().unwrap();
                    log.push(Conn::default());
                    log.len() - 1
                };
                let log = Arc::clone(&log);
                std::thread::spawn(move || serve(stream, index, &log, close_after_each));
            }
        });
        RawBackend { addr, conns }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn conns(&self) -> Vec<Conn> {
        self.conns.lock().unwrap().clone()
    }
}

/// Size of the body of `/big`.
const BIG: usize = 64 << 20;

fn serve(stream: TcpStream, index: usize, log: &Mutex<Vec<Conn>>, close_after_each: bool) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        // Read one request head (the tests send no bodies).
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                break;
            }
        }
        log.lock().unwrap()[index].requests += 1;
        let answer = if line.contains("/big") {
            log.lock().unwrap()[index].served_big = true;
            // More than every socket buffer between here and the client
            // holds, so that a client that stops reading leaves it unsent.
            let mut big = format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n").into_bytes();
            big.resize(big.len() + BIG, b'x');
            big
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
        };
        if writer.write_all(&answer).is_err() {
            break;
        }
        let answered = Instant::now();
        if close_after_each {
            return;
        }
        // Wait for the next request or the gateway closing the connection.
        let mut byte = [0u8; 1];
        let peeked = reader.get_ref().peek(&mut byte);
        if matches!(peeked, Ok(0) | Err(_)) {
            log.lock().unwrap()[index].closed_after_last_response = Some(answered.elapsed());
            break;
        }
    }
    let _ = reader.read_to_end(&mut Vec::new());
    log.lock().unwrap()[index].ended = true;
}

fn get(gw: &GatewayProcess, path: &str) -> u16 {
    gw.req("GET", path, &[], b"").status
}

#[test]
fn sequential_requests_reuse_one_connection() {
    let backend = RawBackend::start(false);
    let gw = GatewayProcess::start(&["--upstream", &backend.url()]);
    for i in 0..20 {
        assert_eq!(get(&gw, &format!("/reuse/{i}")), 200);
    }
    let conns = backend.conns();
    let requests: usize = conns.iter().map(|c| c.requests).sum();
    assert_eq!(requests, 20);
    // Normally one; a connection whose previous exchange was still being
    // wrapped up when the next request came may add another.
    assert!(conns.len() <= 3, "{conns:?}");
}

#[test]
fn idle_connections_are_closed_after_the_idle_timeout() {
    let backend = RawBackend::start(false);
    let gw = GatewayProcess::start(&[
        "--upstream",
        &backend.url(),
        "--upstream-idle-timeout",
        "0.5",
    ]);
    assert_eq!(get(&gw, "/idle/a"), 200);
    assert!(
        wait_until(HANG_GUARD, || backend.conns()[0]
            .closed_after_last_response
            .is_some()),
        "the gateway never closed its idle upstream connection"
    );
    let idle = backend.conns()[0].closed_after_last_response.unwrap();
    assert!(
        idle >= Duration::from_millis(400),
        "closed too early: {idle:?}"
    );
    // The next request opens a new connection and goes through.
    assert_eq!(get(&gw, "/idle/b"), 200);
    assert_eq!(backend.conns().len(), 2);
}

#[test]
fn a_connection_the_backend_closed_is_not_reused() {
    let backend = RawBackend::start(true);
    let gw = GatewayProcess::start(&["--upstream", &backend.url()]);
    for i in 0..5 {
        assert_eq!(get(&gw, &format!("/closed/{i}")), 200, "request {i}");
        // Let the gateway see the close before the next request.
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(backend.conns().len(), 5);
}

#[test]
fn a_connection_whose_response_was_abandoned_is_not_reused() {
    let backend = RawBackend::start(false);
    let gw = GatewayProcess::start(&["--upstream", &backend.url()]);
    assert_eq!(get(&gw, "/warm"), 200);

    // A client that takes the start of a large download and hangs up.
    let mut client = TcpStream::connect(gw.data_addr()).unwrap();
    client.set_read_timeout(Some(HANG_GUARD)).unwrap();
    client
        .write_all(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut start = vec![0u8; 64 << 10];
    client.read_exact(&mut start).unwrap();
    assert!(start.starts_with(b"HTTP/1.1 200"), "{:?}", &start[..40]);
    drop(client);

    // The rest of that body must not reach the next request: it gets its
    // own answer, over a connection other than the abandoned one.
    for i in 0..5 {
        let resp = gw.req("GET", &format!("/after/{i}"), &[], b"");
        assert_eq!(
            (resp.status, resp.text()),
            (200, "ok".to_string()),
            "request {i}"
        );
    }
    let conns = backend.conns();
    assert!(conns.len() >= 2, "{conns:?}");
    let big = conns
        .iter()
        .position(|c| c.served_big)
        .expect("a connection served /big");
    assert_eq!(conns[big].requests, 1 + usize::from(big == 0), "{conns:?}");
    assert!(
        wait_until(HANG_GUARD, || backend.conns()[big].ended),
        "the abandoned upstream connection was never closed"
    );
}
