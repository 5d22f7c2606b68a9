//! Message framing, the ground request smuggling lives on (SPEC, "What is
//! never forwarded"; RFC 9112 §6), seen from both ends of the real binary:
//! a scripted raw backend answers with every ambiguous or unusual response
//! shape, and the gateway must refuse the ambiguous ones (502, nothing of
//! them relayed) and relay the rest exactly, reusing a backend connection
//! only when the response ended where its framing said.

#[path = "../support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use support::GatewayProcess;
use support::{http, read_response, try_http};

/// The response the scripted backend writes for a request target, and
/// whether it closes the connection afterwards.
fn script(target: &str) -> (&'static [u8], bool) {
    match target {
        "/cl-te" => (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            false,
        ),
        "/two-lengths" => (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
            false,
        ),
        "/signed-length" => (b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", false),
        "/obs-fold" => (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: a\r\n b\r\n\r\nhello",
            false,
        ),
        "/space-before-colon" => (
            b"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\nhello",
            false,
        ),
        "/bare-lf" => (b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello", false),
        "/bare-cr" => (
            b"HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 5\r\n\r\nhello",
            false,
        ),
        "/http10-chunked" => (
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            false,
        ),
        "/switch" => (
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            false,
        ),
        "/continue-then-ok" => (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            false,
        ),
        "/odd-reason" => (b"HTTP/1.1 404 NOT FOUND\r\nContent-Length: 0\r\n\r\n", false),
        "/chunked" => (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;ext=1\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n",
            false,
        ),
        "/until-close" => (b"HTTP/1.1 200 OK\r\n\r\nhello", true),
        "/gzip-until-close" => (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhello",
            true,
        ),
        "/gzip-chunked" => (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            false,
        ),
        "/no-content" => (b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", false),
        "/head" => (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false),
        "/trailing-bytes" => (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil",
            false,
        ),
        "/bad-chunk" => (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
            false,
        ),
        _ => (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false),
    }
}

/// A backend that answers from [`script`], counting its connections.
struct ScriptedBackend {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl ScriptedBackend {
    fn start() -> ScriptedBackend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || serve(stream));
            }
        });
        ScriptedBackend { addr, connections }
    }
}

fn serve(stream: TcpStream) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if !matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
            return;
        }
        let target = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
        loop {
            let mut header = String::new();
            if !matches!(reader.read_line(&mut header), Ok(n) if n > 0) {
                return;
            }
            if header == "\r\n" {
                break;
            }
        }
        let (response, close) = script(&target);
        if writer.write_all(response).is_err() || close {
            return;
        }
    }
}

/// A gateway in front of a scripted backend of its own. Every test starts
/// its own: a gateway kept in a `static` would outlive the test binary.
fn start() -> (GatewayProcess, ScriptedBackend) {
    let backend = ScriptedBackend::start();
    let url = format!("http://{}", backend.addr);
    let gateway = GatewayProcess::start(&["--upstream", &url, "--allow-unfenced-writes"]);
    (gateway, backend)
}

#[test]
fn ambiguous_responses_are_502_and_nothing_of_them_is_relayed() {
    let (gateway, _) = start();
    for target in [
        "/cl-te",
        "/gzip-until-close",
        "/gzip-chunked",
        "/two-lengths",
        "/signed-length",
        "/obs-fold",
        "/space-before-colon",
        "/bare-lf",
        "/bare-cr",
        "/http10-chunked",
        "/switch",
    ] {
        let response = http(gateway.data_addr(), "GET", target, &[], b"");
        assert_eq!(response.status, 502, "{target}: {}", response.text());
        let error = response.assert_gateway_error(502, "upstream_unavailable");
        assert!(!response.text().contains("hello"), "{target}");
        assert!(
            error["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("response"),
            "{target}: {error}"
        );
    }
}

#[test]
fn unusual_but_unambiguous_responses_are_relayed_exactly() {
    let (gateway, _) = start();
    for target in [
        "/continue-then-ok",
        "/chunked",
        "/until-close",
        "/trailing-bytes",
    ] {
        let response = http(gateway.data_addr(), "GET", target, &[], b"");
        assert_eq!(response.status, 200, "{target}");
        assert_eq!(response.body, b"hello", "{target}");
    }
    let response = http(gateway.data_addr(), "GET", "/no-content", &[], b"");
    assert_eq!(response.status, 204);
    assert!(response.body.is_empty());
}

/// The status line as the client reads it: the backend's reason phrase as
/// it sent it (moto writes `404 NOT FOUND`), and HTTP/1.1, the highest
/// version the gateway speaks, also to an HTTP/1.0 client (RFC 9110 §2.5).
#[test]
fn status_lines_carry_the_backends_reason_and_http11() {
    let (gateway, _) = start();
    let status_line = |request: &[u8]| {
        let mut stream = TcpStream::connect(gateway.data_addr()).unwrap();
        stream.set_read_timeout(Some(support::HANG_GUARD)).unwrap();
        stream.write_all(request).unwrap();
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).unwrap();
        line
    };
    assert_eq!(
        status_line(b"GET /odd-reason HTTP/1.1\r\nHost: x\r\n\r\n"),
        "HTTP/1.1 404 NOT FOUND\r\n"
    );
    assert_eq!(
        status_line(b"GET /odd-reason HTTP/1.0\r\n\r\n"),
        "HTTP/1.1 404 NOT FOUND\r\n"
    );
    // The gateway's own answers carry the standard phrase.
    assert_eq!(
        status_line(
            b"PUT /odd-reason HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: x\r\nContent-Length: 0\r\n\r\n"
        ),
        "HTTP/1.1 400 Bad Request\r\n"
    );
}

#[test]
fn a_backend_connection_is_reused_only_after_a_response_that_ended_on_its_frame() {
    let (gateway, backend) = start();
    // One client connection, requests in turn: each shape's effect on the
    // count of backend connections.
    let stream = TcpStream::connect(gateway.data_addr()).unwrap();
    stream.set_read_timeout(Some(support::HANG_GUARD)).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut exchange = |method: &str, target: &str| {
        write!(writer, "{method} {target} HTTP/1.1\r\nHost: store\r\n\r\n").unwrap();
        read_response(&mut reader, method == "HEAD").unwrap()
    };
    // Warm: one idle backend connection.
    assert_eq!(exchange("GET", "/").status, 200);
    let before = backend.connections.load(Ordering::SeqCst);
    // HEAD, 204 and chunked responses end on their frame: the connection
    // is reused (a response to HEAD has no body whatever its length says).
    let head = exchange("HEAD", "/head");
    assert_eq!(
        (head.status, head.header("content-length")),
        (200, Some("5"))
    );
    assert_eq!(exchange("GET", "/no-content").status, 204);
    assert_eq!(exchange("GET", "/chunked").body, b"hello");
    assert_eq!(exchange("GET", "/").status, 200);
    assert_eq!(backend.connections.load(Ordering::SeqCst), before);
    // Bytes after a response's end are never a response: that connection
    // is dropped, and the next request goes on a new one and gets its own
    // answer, not the smuggled one.
    assert_eq!(exchange("GET", "/trailing-bytes").body, b"hello");
    let next = exchange("GET", "/");
    assert_eq!(next.body, b"ok");
    assert_eq!(backend.connections.load(Ordering::SeqCst), before + 1);
}

#[test]
fn a_response_body_with_bad_chunks_is_cut_never_completed() {
    let (gateway, _) = start();
    // The head is out before the bad chunk arrives: the client sees the
    // body cut off (no last chunk), never a complete response.
    let response = try_http(gateway.data_addr(), "GET", "/bad-chunk", &[], b"");
    match response {
        Err(_) => {}
        Ok(response) => panic!(
            "a complete response: {} {:?}",
            response.status,
            response.text()
        ),
    }
}

// ---------------------------------------------------------------------------
// Requests: the smuggling shapes a client can send
// ---------------------------------------------------------------------------

/// A gateway in front of a recording backend of its own.
fn recording() -> (GatewayProcess, support::Backend) {
    let backend = support::Backend::start();
    let gateway = GatewayProcess::in_front_of(&backend, &[]);
    (gateway, backend)
}

/// Writes `raw` on a new connection; the first response, and whether the
/// gateway then closed the connection (read to EOF, bounded).
fn send_then_eof(addr: SocketAddr, raw: &[u8]) -> (support::Resp, bool) {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    writer.write_all(raw).unwrap();
    let mut reader = BufReader::new(stream);
    let response = read_response(&mut reader, false).unwrap();
    let mut rest = Vec::new();
    let closed = std::io::Read::read_to_end(&mut reader, &mut rest).is_ok() && rest.is_empty();
    (response, closed)
}

/// The framing a request must never be forwarded with: (name, head lines
/// after the request line and Host, body).
const AMBIGUOUS_REQUESTS: &[(&str, &str, &str)] = &[
    (
        "cl-te",
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        "0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
    ),
    (
        "te-cl",
        "Transfer-Encoding: chunked\r\nContent-Length: 30\r\n",
        "0\r\n\r\n",
    ),
    (
        "te-te-final-not-chunked",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
        "0\r\n\r\n",
    ),
    (
        "te-xchunked",
        "Transfer-Encoding: xchunked\r\n",
        "0\r\n\r\n",
    ),
    (
        "te-chunked-twice",
        "Transfer-Encoding: chunked, chunked\r\n",
        "0\r\n\r\n",
    ),
    (
        "te-vertical-tab",
        "Transfer-Encoding: \x0bchunked\r\n",
        "0\r\n\r\n",
    ),
    // Two Host lines (RFC 9112 §3.2): a backend that keeps the other one
    // would write to another host's object than the one fenced.
    ("two-hosts", "Host: other\r\nContent-Length: 0\r\n", ""),
    (
        "te-space-before-colon",
        "Transfer-Encoding : chunked\r\n",
        "0\r\n\r\n",
    ),
    (
        "te-obs-fold",
        "X-Padding: a\r\n Transfer-Encoding: chunked\r\n",
        "0\r\n\r\n",
    ),
    (
        "differing-lengths",
        "Content-Length: 5\r\nContent-Length: 6\r\n",
        "hello!",
    ),
    ("length-list", "Content-Length: 5, 6\r\n", "hello!"),
    ("equal-length-list", "Content-Length: 5, 5\r\n", "hello"),
    ("signed-length", "Content-Length: +5\r\n", "hello"),
    ("hex-length", "Content-Length: 0x5\r\n", "hello"),
    ("bare-cr", "X-A: a\rb\r\nContent-Length: 5\r\n", "hello"),
    ("bare-lf", "X-A: a\nContent-Length: 5\r\n", "hello"),
];

#[test]
fn a_transfer_coding_besides_chunked_is_501_never_forwarded_decoded_halfway() {
    let (gateway, backend) = recording();
    let raw = "PUT /coded/gzip HTTP/1.1\r\nHost: store\r\nX-Fencing-Token: 5\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n";
    let (response, closed) = send_then_eof(gateway.data_addr(), raw.as_bytes());
    response.assert_gateway_error(501, "unsupported_transfer_coding");
    assert!(closed);
    assert!(backend.records_for("/coded/gzip").is_empty());
}

#[test]
fn ambiguous_request_framing_is_400_closed_and_never_forwarded() {
    let (gateway, backend) = recording();
    for (name, lines, body) in AMBIGUOUS_REQUESTS {
        let raw = format!(
            "PUT /ambiguous/{name} HTTP/1.1\r\nHost: store\r\nX-Fencing-Token: 5\r\n{lines}\r\n{body}"
        );
        let (response, closed) = send_then_eof(gateway.data_addr(), raw.as_bytes());
        assert_eq!(response.status, 400, "{name}: {}", response.text());
        assert!(closed, "{name}: the connection stays open");
    }
    // An HTTP/1.0 request has no chunked coding.
    let raw = "PUT /ambiguous/http10 HTTP/1.0\r\nHost: store\r\nX-Fencing-Token: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    let (response, closed) = send_then_eof(gateway.data_addr(), raw.as_bytes());
    assert_eq!((response.status, closed), (400, true));
    // Nothing of them reached the backend, and no fence was raised.
    let reached: Vec<_> = backend
        .records()
        .into_iter()
        .filter(|r| r.target.starts_with("/ambiguous") || r.target.starts_with("/smuggled"))
        .collect();
    assert!(reached.is_empty(), "forwarded: {reached:?}");
    let fences = http(gateway.admin_addr(), "GET", "/fences", &[], b"");
    assert!(!fences.text().contains("/ambiguous"), "{}", fences.text());
}

/// An HTTP/1.1 request without Host: 400 (RFC 9112 §3.2), never forwarded
/// with one the gateway made up; HTTP/1.0 needs none.
#[test]
fn an_http11_request_without_host_is_400_never_forwarded() {
    let (gateway, backend) = recording();
    let raw = "PUT /no-host/x HTTP/1.1\r\nX-Fencing-Token: 5\r\nContent-Length: 1\r\n\r\nx";
    let (response, closed) = send_then_eof(gateway.data_addr(), raw.as_bytes());
    assert_eq!(
        (response.status, closed),
        (400, true),
        "{}",
        response.text()
    );
    let raw = "GET /no-host/y HTTP/1.1\r\n\r\n";
    let (response, _) = send_then_eof(gateway.data_addr(), raw.as_bytes());
    assert_eq!(response.status, 400, "{}", response.text());
    assert!(backend.records_for("/no-host/x").is_empty());
    assert!(backend.records_for("/no-host/y").is_empty());
    let raw = "GET /no-host/http10 HTTP/1.0\r\n\r\n";
    let (response, _) = send_then_eof(gateway.data_addr(), raw.as_bytes());
    assert_eq!(response.status, 200, "{}", response.text());
}

#[test]
fn a_fragment_is_400_invalid_path_never_a_delete_of_its_directory() {
    let (gateway, backend) = recording();
    let raw = "DELETE /fragment/dir/#frag HTTP/1.1\r\nHost: store\r\nX-Fencing-Token: 5\r\n\r\n";
    let (response, _) = send_then_eof(gateway.data_addr(), raw.as_bytes());
    response.assert_gateway_error(400, "invalid_path");
    assert!(backend.records_for("/fragment/dir/").is_empty());
}

#[test]
fn refused_heads_are_counted_and_logged_like_any_request() {
    let backend = support::Backend::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("access.log");
    let gateway =
        GatewayProcess::in_front_of(&backend, &["--access-log", &log.display().to_string()]);
    let cl_te = "PUT /counted HTTP/1.1\r\nHost: store\r\nX-Fencing-Token: 5\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    send_then_eof(gateway.data_addr(), cl_te.as_bytes())
        .0
        .assert_gateway_error(400, "bad_request");
    let fragment = "DELETE /counted/#frag HTTP/1.1\r\nHost: store\r\nX-Fencing-Token: 5\r\n\r\n";
    send_then_eof(gateway.data_addr(), fragment.as_bytes())
        .0
        .assert_gateway_error(400, "invalid_path");

    let metrics = gateway.metrics();
    assert_eq!(
        support::outcome(&metrics, "other_refusal"),
        1.0,
        "{metrics}"
    );
    assert_eq!(support::outcome(&metrics, "invalid_path"), 1.0, "{metrics}");
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        support::wait_until(std::time::Duration::from_secs(10), || read()
            .lines()
            .count()
            >= 2),
        "{}",
        read()
    );
    let lines: Vec<serde_json::Value> = read()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let outcomes: Vec<(&str, u64)> = lines
        .iter()
        .map(|line| {
            (
                line["outcome"].as_str().unwrap(),
                line["status"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(outcomes, [("other_refusal", 400), ("invalid_path", 400)]);
    for line in &lines {
        // Refused before it was a request: no method, path or fence to name.
        for field in ["method", "path", "key", "token", "upstream_status"] {
            assert!(line[field].is_null(), "{field} in {line}");
        }
    }
    assert!(backend.records_for("/counted").is_empty());
}

#[test]
fn a_malformed_chunk_reaches_the_backend_only_cut_off() {
    let (gateway, backend) = recording();
    // The head is good and admitted; the body goes wrong after a chunk.
    let raw = "PUT /chunks/bad HTTP/1.1\r\nHost: store\r\nX-Fencing-Token: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nmore\r\n0\r\n\r\n";
    let (response, closed) = send_then_eof(gateway.data_addr(), raw.as_bytes());
    response.assert_gateway_error(400, "client_body_error");
    assert!(closed);
    // Whatever the backend saw of it, never a whole body.
    std::thread::sleep(std::time::Duration::from_millis(200));
    for record in backend.records_for("/chunks/bad") {
        assert!(
            record.body_len.is_none() || record.body_failed,
            "a complete request: {record:?}"
        );
    }
}

#[test]
fn pipelined_requests_after_bodies_are_answered_in_order_with_their_own_bodies() {
    let (gateway, backend) = recording();
    let mut raw = Vec::new();
    raw.extend_from_slice(b"PUT /pipelined/a HTTP/1.1\r\nHost: store\r\nX-Fencing-Token: 5\r\nX-Test-Keep-Body: 1\r\nContent-Length: 5\r\n\r\nhello");
    raw.extend_from_slice(b"PUT /pipelined/b HTTP/1.1\r\nHost: store\r\nX-Fencing-Token: 5\r\nX-Test-Keep-Body: 1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nGET\r\n2\r\n /\r\n0\r\nx-sum: 1\r\n\r\n");
    raw.extend_from_slice(b"GET /pipelined/c HTTP/1.1\r\nHost: store\r\n\r\n");
    let stream = TcpStream::connect(gateway.data_addr()).unwrap();
    stream.set_read_timeout(Some(support::HANG_GUARD)).unwrap();
    (&stream).write_all(&raw).unwrap();
    let mut reader = BufReader::new(stream);
    for _ in 0..3 {
        assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    }
    let bodies: Vec<_> = ["/pipelined/a", "/pipelined/b"]
        .iter()
        .map(|target| backend.records_for(target)[0].body.clone().unwrap())
        .collect();
    assert_eq!(bodies, [b"hello".to_vec(), b"GET /".to_vec()]);
    // The chunked body's trailer field went on with it.
    let trailers = &backend.records_for("/pipelined/b")[0].trailers;
    assert_eq!(trailers, &[("x-sum".to_owned(), "1".to_owned())]);
    assert_eq!(backend.records_for("/pipelined/c").len(), 1);
}

#[test]
fn http10_clients_get_answers_they_read_kept_alive_only_when_they_ask() {
    let (gateway, _) = start();
    // Without keep-alive: one answer, then the close.
    let (response, closed) = send_then_eof(gateway.data_addr(), b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(
        (response.status, response.body.as_slice()),
        (200, &b"ok"[..])
    );
    assert!(
        closed,
        "an HTTP/1.0 connection without keep-alive stays open"
    );
    // With it: the answer says so, and the connection takes another request.
    let stream = TcpStream::connect(gateway.data_addr()).unwrap();
    stream.set_read_timeout(Some(support::HANG_GUARD)).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    writer
        .write_all(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap();
    let first = read_response(&mut reader, false).unwrap();
    assert_eq!(first.header("connection"), Some("keep-alive"));
    assert_eq!(first.body, b"ok");
    // A body of unknown length reaches an HTTP/1.0 client delimited by the
    // close (no chunks, which it would not read).
    writer
        .write_all(b"GET /until-close HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap();
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut reader, &mut rest).unwrap();
    let text = String::from_utf8_lossy(&rest);
    // HTTP/1.1 in the status line (RFC 9110 §2.5), HTTP/1.0 framing.
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("transfer-encoding"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\nhello"), "{text}");
}
