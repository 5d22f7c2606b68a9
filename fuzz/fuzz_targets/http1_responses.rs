//! Differential: the bytes a backend answers one request with, read by the
//! gateway's HTTP/1.1 code (`fencegate::http1`, as the engine reads
//! responses) and by hyper's client, the reference. The first input byte
//! chooses the request (`GET` or `HEAD`, whose response has no body).
//!
//! The oracle: a response the gateway reads, hyper reads the same (status,
//! version, fields in order, body bytes, trailers); the gateway may refuse
//! more (both framing fields, differing lengths, a bare LF, a 101), never
//! accept what hyper does not read alike.

#![no_main]

#[path = "http1_common.rs"]
mod common;

use bytes::{Bytes, BytesMut};
use common::{fields, read_body, runtime};
use fencegate::http1::head::{parse_response, Parsed};
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a reader made of the response.
#[derive(Debug, PartialEq, Eq)]
struct Message {
    status: u16,
    version: http::Version,
    fields: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    trailers: Vec<(String, Vec<u8>)>,
}

/// The gateway's reading; `None` if it refuses or the bytes end first.
fn gateway_reads(input: &[u8], to_head: bool) -> Option<Message> {
    let mut buf = BytesMut::from(input);
    let head = loop {
        match parse_response(&mut buf, to_head, 64 * 1024).ok()? {
            Parsed::Complete(head) => break head,
            Parsed::Interim => continue,
            Parsed::Partial => return None,
        }
    };
    let (body, trailers) = read_body(&mut buf, head.body)?;
    // The lines the engine relays, as a map: a line httparse took that a
    // map would refuse is a difference too (a crash here).
    let map = head
        .fields
        .to_map()
        .expect("every field line httparse accepts makes a header map");
    Some(Message {
        status: head.status.as_u16(),
        version: head.version,
        fields: fields(&map),
        body,
        trailers,
    })
}

/// hyper's reading: its HTTP/1.1 client sends the request over an
/// in-memory connection whose other end answers `input` and closes.
fn hyper_reads(input: &[u8], to_head: bool) -> Option<Message> {
    runtime().block_on(async {
        let (client, mut server) = tokio::io::duplex(1 << 20);
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(client))
                .await
                .ok()?;
        let driving = tokio::spawn(connection);
        let answer = input.to_vec();
        let backend = tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let _ = server.read(&mut request).await;
            let _ = server.write_all(&answer).await;
            let _ = server.shutdown().await;
            // Keep reading until the client is done with the connection.
            let _ = server.read_to_end(&mut Vec::new()).await;
        });
        let method = if to_head {
            http::Method::HEAD
        } else {
            http::Method::GET
        };
        let request = http::Request::builder()
            .method(method)
            .uri("/")
            .header("host", "backend")
            .body(http_body_util::Empty::<Bytes>::new())
            .ok()?;
        let read = async {
            let response = sender.send_request(request).await.ok()?;
            let (parts, body) = response.into_parts();
            let collected = body.collect().await.ok()?;
            let trailers = collected.trailers().map(fields).unwrap_or_default();
            Some(Message {
                status: parts.status.as_u16(),
                version: parts.version,
                fields: fields(&parts.headers),
                body: collected.to_bytes().to_vec(),
                trailers,
            })
        };
        let message = read.await;
        drop(sender);
        driving.abort();
        backend.abort();
        message
    })
}

/// hop-by-hop fields, which the gateway drops from what it read.
fn strip_hop_by_hop(message: &mut Message) {
    let listed: Vec<String> = message
        .fields
        .iter()
        .filter(|(name, _)| name == "connection")
        .flat_map(|(_, value)| {
            String::from_utf8_lossy(value)
                .split(',')
                .map(|token| token.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    message.fields.retain(|(name, _)| {
        !matches!(
            name.as_str(),
            "connection"
                | "te"
                | "transfer-encoding"
                | "upgrade"
                | "keep-alive"
                | "proxy-connection"
                | "proxy-authenticate"
                | "proxy-authorization"
        ) && !listed.contains(name)
    });
}

fuzz_target!(|input: &[u8]| {
    let [first, input @ ..] = input else {
        return;
    };
    let to_head = first & 1 == 1;
    let Some(mut gateway) = gateway_reads(input, to_head) else {
        return;
    };
    let Some(mut hyper) = hyper_reads(input, to_head) else {
        panic!(
            "the gateway reads a response hyper does not ({gateway:?}); input {:?}",
            String::from_utf8_lossy(input)
        );
    };
    strip_hop_by_hop(&mut gateway);
    strip_hop_by_hop(&mut hyper);
    // Equal repeated lengths are one length, which the gateway says once;
    // compared as numbers ("02" is 2).
    for message in [&mut gateway, &mut hyper] {
        let mut seen = false;
        message.fields.retain_mut(|(name, value)| {
            let repeated = name == "content-length" && seen;
            if name == "content-length" {
                seen = true;
                if let Some(n) = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    *value = n.to_string().into_bytes();
                }
            }
            !repeated
        });
    }
    assert_eq!(
        gateway,
        hyper,
        "read differently; input {:?}",
        String::from_utf8_lossy(input)
    );
});
