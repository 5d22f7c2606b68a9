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
use std::sync::{Arc, OnceLock};

use support::{http, read_response, try_http};
use support::GatewayProcess;

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
        "/chunked" => (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;ext=1\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n",
            false,
        ),
        "/until-close" => (b"HTTP/1.1 200 OK\r\n\r\nhello", true),
        "/gzip-until-close" => (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhello",
            true,
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

/// A gateway in front of a scripted backend of its own.
fn start() -> (GatewayProcess, ScriptedBackend) {
    let backend = ScriptedBackend::start();
    let url = format!("http://{}", backend.addr);
    let gateway = GatewayProcess::start(&["--upstream", &url, "--allow-unfenced-writes"]);
    (gateway, backend)
}

/// One gateway and backend shared by the tests that count nothing.
fn gateway() -> &'static (GatewayProcess, ScriptedBackend) {
    static GATEWAY: OnceLock<(GatewayProcess, ScriptedBackend)> = OnceLock::new();
    GATEWAY.get_or_init(start)
}

#[test]
fn ambiguous_responses_are_502_and_nothing_of_them_is_relayed() {
    let (gateway, _) = gateway();
    for target in [
        "/cl-te",
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
            error["detail"].as_str().unwrap_or_default().contains("response"),
            "{target}: {error}"
        );
    }
}

#[test]
fn unusual_but_unambiguous_responses_are_relayed_exactly() {
    let (gateway, _) = gateway();
    for target in [
        "/continue-then-ok",
        "/chunked",
        "/until-close",
        "/gzip-until-close",
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
    assert_eq!((head.status, head.header("content-length")), (200, Some("5")));
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
    let (gateway, _) = gateway();
    // The head is out before the bad chunk arrives: the client sees the
    // body cut off (no last chunk), never a complete response.
    let response = try_http(gateway.data_addr(), "GET", "/bad-chunk", &[], b"");
    match response {
        Err(_) => {}
        Ok(response) => panic!("a complete response: {} {:?}", response.status, response.text()),
    }
}
