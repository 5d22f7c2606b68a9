//! Slow, idle and numerous clients, black-box with raw sockets: a slowloris
//! head and a silent new connection cut at the header timeout, an idle
//! keep-alive connection cut at the idle timeout, the connection cap, the
//! 64 KiB head limit, a slow upload longer than the upstream timeout, a
//! stalled upload cut with its fence kept; plus absolute-form requests,
//! `/readyz` while draining, the access log and the log line of a raise.
//!
//! Every wait is bounded by a hang guard; no assertion depends on the
//! machine being fast.

#[path = "../support/mod.rs"]
mod support;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::{http, read_response, send_raw, Backend, GatewayProcess, HANG_GUARD};

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
    stream
}

/// Reads until the peer closes (returns how long that took) or the hang
/// guard passes (panics).
fn wait_closed(stream: &mut TcpStream, since: Instant) -> Duration {
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return since.elapsed(),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return since.elapsed(),
            Err(e) => panic!("connection still open after {:?}: {e}", since.elapsed()),
        }
    }
}

/// Whether the peer has closed `stream` (reads return EOF or reset) within
/// `timeout`, without consuming data that arrives meanwhile.
fn is_closed_within(stream: &mut TcpStream, timeout: Duration) -> bool {
    stream.set_read_timeout(Some(timeout)).unwrap();
    let mut buf = [0u8; 1];
    let closed = match stream.peek(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
    closed
}

#[test]
fn a_slowloris_head_is_cut_at_the_header_timeout() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--client-header-timeout", "1"]);
    let mut stream = connect(gw.data_addr());
    let start = Instant::now();
    stream
        .write_all(b"PUT /slow HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // One header byte every 200 ms: the head never completes. The gateway
    // must close the connection about 1 s after the first byte.
    let mut closed_after = None;
    for byte in
        b"X-Fencing-Token: 1\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            .iter()
    {
        std::thread::sleep(Duration::from_millis(200));
        if stream.write_all(&[*byte]).is_err()
            || is_closed_within(&mut stream, Duration::from_millis(1))
        {
            closed_after = Some(start.elapsed());
            break;
        }
    }
    let closed_after = closed_after.unwrap_or_else(|| wait_closed(&mut stream, start));
    assert!(
        closed_after >= Duration::from_secs(1),
        "closed after {closed_after:?}"
    );
    assert!(
        closed_after < Duration::from_secs(10),
        "closed after {closed_after:?}"
    );
    assert_eq!(backend.count(), 0);
}

#[test]
fn a_silent_new_connection_is_cut_at_the_header_timeout() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(
        &backend,
        &[
            "--client-header-timeout",
            "1",
            "--client-idle-timeout",
            "60",
        ],
    );
    let mut stream = connect(gw.data_addr());
    let closed_after = wait_closed(&mut stream, Instant::now());
    assert!(
        closed_after >= Duration::from_millis(900),
        "{closed_after:?}"
    );
    assert!(closed_after < Duration::from_secs(10), "{closed_after:?}");
}

#[test]
fn an_idle_keep_alive_connection_is_cut_at_the_idle_timeout() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(
        &backend,
        &[
            "--client-idle-timeout",
            "1.5",
            "--client-header-timeout",
            "30",
        ],
    );
    let mut stream = connect(gw.data_addr());
    let raw = support::build_request(gw.data_addr(), "GET", "/one", &[], b"");
    stream.write_all(&raw).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    let idle_since = Instant::now();
    // Still open a little later: a second request on it works.
    std::thread::sleep(Duration::from_millis(300));
    stream.write_all(&raw).unwrap();
    assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    let idle_since_second = Instant::now();
    let closed_after = wait_closed(&mut stream, idle_since_second);
    assert!(
        closed_after >= Duration::from_millis(1400),
        "{closed_after:?}"
    );
    assert!(closed_after < Duration::from_secs(10), "{closed_after:?}");
    assert!(idle_since.elapsed() > closed_after);
}

#[test]
fn the_connection_cap_holds_and_frees_up() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--max-connections", "2"]);
    let addr = gw.data_addr();
    let raw = support::build_request(addr, "GET", "/capped", &[], b"");
    // Two keep-alive connections, each served once and left open.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = connect(addr);
        stream.write_all(&raw).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
        held.push(stream);
    }
    // A third connects (the kernel's backlog takes it) but is not served
    // while the two are open.
    let mut third = connect(addr);
    third.write_all(&raw).unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let mut byte = [0u8; 1];
    let early = third.peek(&mut byte);
    assert!(
        matches!(&early, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut),
        "a third connection was served past --max-connections 2: {early:?}"
    );
    // One of the two goes away: the third is served.
    drop(held.pop());
    third.set_read_timeout(Some(HANG_GUARD)).unwrap();
    let resp = read_response(&mut BufReader::new(third), false).unwrap();
    assert_eq!(resp.status, 200);
}

#[test]
fn a_head_above_64_kib_is_431_and_one_below_is_served() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let big = "a".repeat(70 * 1024);
    // The contract allows closing the connection instead; the gateway
    // answers, with its JSON.
    let resp = support::try_http(gw.data_addr(), "GET", "/big", &[("X-Big", &big)], b"")
        .expect("an answer, not a closed connection");
    resp.assert_gateway_error(431, "request_header_too_large");
    let fits = "a".repeat(60 * 1024);
    let resp = http(gw.data_addr(), "GET", "/fits", &[("X-Fits", &fits)], b"");
    assert_eq!(resp.status, 200);
    assert_eq!(backend.records_for("/big").len(), 0);
    assert_eq!(backend.records_for("/fits").len(), 1);
}

/// Sends a PUT whose body (`total` bytes) is written in `chunks` pieces
/// with `pause` between them; returns the response.
fn trickle_upload(
    addr: SocketAddr,
    path: &str,
    token: u64,
    chunks: usize,
    chunk: usize,
    pause: Duration,
) -> std::io::Result<support::Resp> {
    let mut stream = connect(addr);
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: {token}\r\nContent-Length: {}\r\n\r\n",
        chunks * chunk
    );
    stream.write_all(head.as_bytes())?;
    for _ in 0..chunks {
        std::thread::sleep(pause);
        stream.write_all(&vec![b'u'; chunk])?;
    }
    read_response(&mut BufReader::new(stream), false)
}

#[test]
fn a_slow_upload_longer_than_the_upstream_timeout_is_answered_by_the_backend() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(
        &backend,
        &["--upstream-timeout", "1", "--client-body-timeout", "5"],
    );
    // 3 s of upload at 300 ms per chunk: three times the upstream timeout,
    // never a pause near the body timeout.
    let resp = trickle_upload(
        gw.data_addr(),
        "/slow-upload",
        3,
        10,
        1000,
        Duration::from_millis(300),
    )
    .unwrap();
    assert_eq!(resp.status, 200, "{}", resp.text());
    let records = backend.records_for("/slow-upload");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].body_len, Some(10_000));
}

/// A minimal request body trickled as in the slow upload, to a backend that
/// then never answers: 504, counted from the end of the body.
#[test]
fn the_upstream_timeout_starts_when_the_body_has_been_sent() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(
        &backend,
        &["--upstream-timeout", "1", "--client-body-timeout", "5"],
    );
    let mut stream = connect(gw.data_addr());
    let start = Instant::now();
    stream
        .write_all(b"PUT /hang HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 2\r\nX-Test-Hang: 1\r\nContent-Length: 8\r\n\r\n")
        .unwrap();
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(300));
        stream.write_all(b"h").unwrap();
    }
    let body_sent = start.elapsed();
    let resp = read_response(&mut BufReader::new(stream), false).unwrap();
    let json = resp.assert_gateway_error(504, "upstream_timeout");
    assert!(
        json["detail"]
            .as_str()
            .unwrap()
            .contains("may still be applied"),
        "{json}"
    );
    // Not before the body was sent plus the timeout.
    assert!(
        start.elapsed() >= body_sent + Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(backend.records_for("/hang")[0].body_len, Some(8));
}

#[test]
fn a_stalled_upload_is_cut_towards_the_backend_and_its_fence_stays_raised() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--client-body-timeout", "1"]);
    let mut stream = connect(gw.data_addr());
    stream
        .write_all(b"PUT /stalled HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 40\r\nContent-Length: 100000\r\n\r\n")
        .unwrap();
    stream.write_all(&[b's'; 1000]).unwrap();
    // ... and nothing more. The gateway answers 408 (or just closes).
    let start = Instant::now();
    match read_response(&mut BufReader::new(stream.try_clone().unwrap()), false) {
        Ok(resp) => {
            resp.assert_gateway_error(408, "client_body_timeout");
            assert_eq!(resp.header("connection"), Some("close"));
        }
        Err(e) => eprintln!("closed without an answer: {e}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    // The backend saw the request begin and its body cut off.
    assert!(backend.wait_for(HANG_GUARD, |records| records
        .iter()
        .any(|r| r.target == "/stalled" && r.body_len.is_some())));
    let record = &backend.records_for("/stalled")[0];
    assert!(record.body_len.unwrap() < 100_000, "{:?}", record.body_len);
    // The fence stays raised: a lower token is refused, and the request no
    // longer counts as in flight, so a higher one goes through.
    assert_eq!(gw.fence("/stalled"), Some(40));
    gw.put("/stalled", 39)
        .assert_gateway_error(409, "stale_token");
    assert_eq!(gw.put("/stalled", 41).status, 200);
    let metrics = gw.metrics();
    assert_eq!(support::outcome(&metrics, "client_error"), 1.0, "{metrics}");
}

#[test]
fn an_absolute_form_request_is_fenced_and_forwarded_with_its_authority_as_host() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let raw = b"PUT http://s3.eu-west-1.amazonaws.com/bucket/key?x-id=PutObject HTTP/1.1\r\n\
        Host: gateway.internal\r\nX-Fencing-Token: 12\r\nContent-Length: 4\r\n\r\ndata";
    let resp = send_raw(gw.data_addr(), raw, false);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let records = backend.records_for("/bucket/key?x-id=PutObject");
    assert_eq!(records.len(), 1, "{:?}", backend.records());
    assert_eq!(
        records[0].header("host"),
        Some("s3.eu-west-1.amazonaws.com")
    );
    assert_eq!(records[0].version, "HTTP/1.1");
    // The fence key is the path; the same object in origin form is fenced
    // by the same fence.
    assert_eq!(gw.fence("/bucket/key"), Some(12));
    let stale = b"PUT /bucket/key HTTP/1.1\r\nHost: s3.eu-west-1.amazonaws.com\r\n\
        X-Fencing-Token: 11\r\nContent-Length: 4\r\n\r\ndata";
    send_raw(gw.data_addr(), stale, false).assert_gateway_error(409, "stale_token");
    let stale = b"PUT http://other.example/bucket/./key HTTP/1.1\r\nHost: x\r\n\
        X-Fencing-Token: 11\r\nContent-Length: 4\r\n\r\ndata";
    send_raw(gw.data_addr(), stale, false).assert_gateway_error(409, "stale_token");
    // CONNECT stays refused.
    let connect = b"CONNECT s3.eu-west-1.amazonaws.com:443 HTTP/1.1\r\nHost: s3.eu-west-1.amazonaws.com:443\r\n\r\n";
    send_raw(gw.data_addr(), connect, false).assert_gateway_error(405, "method_not_allowed");
    assert_eq!(backend.count(), 1);
}

#[test]
fn readyz_is_ready_then_503_while_draining() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--shutdown-timeout", "20"]);
    let ready = gw.admin_get("/readyz");
    assert_eq!(ready.status, 200);
    // The configuration's generation: 1 until a reload takes.
    assert_eq!(
        ready.json(),
        serde_json::json!({"status": "ready", "generation": 1})
    );

    // A request in flight keeps the gateway draining after SIGTERM.
    let addr = gw.data_addr();
    let held = std::thread::spawn(move || {
        http(
            addr,
            "PUT",
            "/held",
            &[("X-Fencing-Token", "1"), ("X-Test-Hold", "h")],
            b"x",
        )
    });
    assert!(backend.wait_for(HANG_GUARD, |r| r.iter().any(|r| r.target == "/held")));
    gw.sigterm();
    assert!(support::wait_until(HANG_GUARD, || {
        gw.admin_get("/readyz").status == 503
    }));
    let draining = gw.admin_get("/readyz");
    let json = draining.json();
    assert_eq!(json["status"], "not_ready", "{json}");
    assert!(
        json["detail"].as_str().unwrap().contains("draining"),
        "{json}"
    );
    // Liveness still holds while draining.
    assert_eq!(gw.admin_get("/healthz").status, 200);
    backend.release("h");
    assert_eq!(held.join().unwrap().status, 200);
}

#[test]
fn the_access_log_has_a_line_with_every_field_per_request_and_raises_are_logged() {
    let backend = Backend::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("access.log");
    let gw = GatewayProcess::in_front_of(&backend, &["--access-log", &log.display().to_string()]);
    let addr = gw.data_addr();
    assert_eq!(
        http(
            addr,
            "PUT",
            "/logged/a",
            &[("X-Fencing-Token", "8")],
            b"four"
        )
        .status,
        200
    );
    http(
        addr,
        "PUT",
        "/logged/./a",
        &[("X-Fencing-Token", "7")],
        b"x",
    )
    .assert_gateway_error(409, "stale_token");
    assert_eq!(http(addr, "GET", "/logged/b?q=1", &[], b"").status, 200);
    http(addr, "PUT", "/logged/c", &[], b"x").assert_gateway_error(428, "missing_token");

    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        support::wait_until(HANG_GUARD, || read().lines().count() >= 4),
        "{}",
        read()
    );
    let lines: Vec<serde_json::Value> = read()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    let fields = [
        "time",
        "client",
        "method",
        "path",
        // The [[route]] that took it: "default" without routes.
        "route",
        "key",
        "token",
        // Credential custody's identity; null without custody.
        "identity",
        "outcome",
        // --enforce report's reason; null otherwise.
        "would_refuse",
        "status",
        "upstream_status",
        "bytes_in",
        "bytes_out",
        "duration_ms",
    ];
    for line in &lines {
        let object = line.as_object().unwrap();
        for field in fields {
            assert!(object.contains_key(field), "{field} missing in {line}");
        }
        assert_eq!(object.len(), fields.len(), "{line}");
        let time = line["time"].as_str().unwrap();
        assert!(time.ends_with('Z') && time.contains('T'), "{time}");
        assert!(
            line["client"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{line}"
        );
        assert!(line["duration_ms"].as_f64().unwrap() >= 0.0, "{line}");
    }
    let forwarded = &lines[0];
    assert_eq!(forwarded["method"], "PUT");
    assert_eq!(forwarded["path"], "/logged/a");
    assert_eq!(forwarded["key"], "/logged/a");
    assert_eq!(forwarded["route"], "default");
    assert_eq!(forwarded["token"], 8);
    assert_eq!(forwarded["outcome"], "forwarded");
    assert_eq!(forwarded["status"], 200);
    assert_eq!(forwarded["upstream_status"], 200);
    assert_eq!(forwarded["bytes_in"], 4);
    assert!(forwarded["bytes_out"].as_u64().unwrap() > 0, "{forwarded}");
    let stale = &lines[1];
    assert_eq!(stale["path"], "/logged/./a");
    assert_eq!(stale["key"], "/logged/a");
    assert_eq!(stale["token"], 7);
    assert_eq!(stale["outcome"], "stale_token");
    assert_eq!(stale["status"], 409);
    assert_eq!(stale["upstream_status"], serde_json::Value::Null);
    let read_line = &lines[2];
    assert_eq!(
        read_line["path"], "/logged/b",
        "the query string is not logged"
    );
    assert_eq!(read_line["key"], serde_json::Value::Null);
    assert_eq!(read_line["token"], serde_json::Value::Null);
    assert_eq!(read_line["bytes_in"], 0);
    let missing = &lines[3];
    assert_eq!(missing["outcome"], "missing_token");
    assert_eq!(missing["key"], "/logged/c");
    assert_eq!(missing["status"], 428);

    // The raise of /logged/a: one info line with key, previous, new, client.
    let stderr = gw.stderr();
    let raise = stderr
        .lines()
        .find(|l| l.contains("fence raised") && l.contains("/logged/a"))
        .unwrap_or_else(|| panic!("no raise line in:\n{stderr}"));
    assert!(raise.contains("INFO"), "{raise}");
    assert!(raise.contains("highest=8"), "{raise}");
    assert!(raise.contains("previous=none"), "{raise}");
    assert!(raise.contains("client=127.0.0.1:"), "{raise}");
}

/// The gateway as a value: a configuration built in code, listeners bound by
/// the caller, a shutdown that drains. No command line, no child process.
#[tokio::test]
async fn an_in_process_gateway_serves_caller_bound_listeners_and_drains() {
    use fencegate::gateway::{self, Config, Listeners, StateKind};

    let data = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let data_addr = data.local_addr().unwrap();
    let admin_addr = admin.local_addr().unwrap();
    let config = Config {
        state: StateKind::Memory,
        ..Config::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(gateway::run(config, Listeners { data, admin }, async {
        let _ = stopped.await;
    }));
    let exchange = tokio::task::spawn_blocking(move || {
        let put = http(
            data_addr,
            "PUT",
            "/in-process",
            &[("X-Fencing-Token", "5")],
            b"v",
        );
        let stale = http(
            data_addr,
            "PUT",
            "/in-process",
            &[("X-Fencing-Token", "4")],
            b"v",
        );
        let ready = http(admin_addr, "GET", "/readyz", &[], b"");
        (put.status, stale.status, ready.status)
    })
    .await
    .unwrap();
    assert_eq!(exchange, (204, 409, 200));
    stop.send(()).unwrap();
    let drained = tokio::time::timeout(HANG_GUARD, running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(drained, "requests were still in flight at shutdown");
    assert!(
        TcpStream::connect(data_addr).is_err(),
        "still accepting after shutdown"
    );
}

/// A refused upload keeps its connection: the small body the client is
/// still sending is read and dropped rather than abandoned, so a keep-alive
/// client (and an HTTP/2 stream) sees the 409 and goes on.
#[test]
fn a_refused_upload_keeps_its_keep_alive_connection() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    assert_eq!(gw.put("/kept", 9).status, 200);
    let mut stream = connect(gw.data_addr());
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let stale = support::build_request(
        gw.data_addr(),
        "PUT",
        "/kept",
        &[("X-Fencing-Token", "8")],
        &[b'b'; 30_000],
    );
    stream.write_all(&stale).unwrap();
    read_response(&mut reader, false)
        .unwrap()
        .assert_gateway_error(409, "stale_token");
    let next = support::build_request(gw.data_addr(), "GET", "/kept", &[], b"");
    stream.write_all(&next).unwrap();
    assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    assert_eq!(
        backend.records_for("/kept").len(),
        2,
        "the stale write reached the backend"
    );
}

/// With `Expect: 100-continue` a refused client may never send its body:
/// the gateway must not read its next request as that body. It closes the
/// connection after the refusal instead.
#[test]
fn a_refused_expect_continue_upload_never_desyncs_the_connection() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    assert_eq!(gw.put("/expect", 9).status, 200);
    let mut stream = connect(gw.data_addr());
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    stream
        .write_all(b"PUT /expect HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 8\r\nExpect: 100-continue\r\nContent-Length: 40\r\n\r\n")
        .unwrap();
    let refused = read_response(&mut reader, false).unwrap();
    refused.assert_gateway_error(409, "stale_token");
    assert_eq!(refused.header("connection"), Some("close"));
    // The client skips its body and sends its next request (40 bytes long).
    let next = b"GET /expect HTTP/1.1\r\nHost: x\r\nX: 12\r\n\r\n";
    assert_eq!(next.len(), 40);
    let _ = stream.write_all(next);
    // Closed is the safe answer; an answer must be the GET's; silence means
    // the GET was swallowed as the PUT's body.
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    match read_response(&mut reader, false) {
        Ok(resp) => assert_eq!(
            resp.status,
            200,
            "the next request was misread: {}",
            resp.text()
        ),
        Err(e) => assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "no answer to the next request: it was read as the refused request's body"
        ),
    }
    assert_eq!(backend.records_for("/expect").len(), 1);
}

/// Content-Length beside Transfer-Encoding (a request smuggling attempt):
/// the body is read by its chunked framing (hyper drops the length, RFC 9112
/// §6.3) and forwarded with one framing only, so the backend cannot be made
/// to read a different body.
#[test]
fn content_length_beside_chunked_never_reaches_the_backend() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let raw = b"PUT /smuggle HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 1\r\nContent-Length: 100\r\n\
        Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    let resp = send_raw(gw.data_addr(), raw, false);
    assert!(resp.status == 200 || resp.status == 400, "{}", resp.status);
    for record in backend.records_for("/smuggle") {
        assert_eq!(record.header("content-length"), None, "{record:?}");
        assert_eq!(record.body_len, Some(3), "{record:?}");
    }
}
