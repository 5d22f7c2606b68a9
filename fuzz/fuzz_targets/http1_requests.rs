//! Differential: a stream of bytes from a client, read by the gateway's
//! HTTP/1.1 code (`fencegate::http1`: the head parser and the framing
//! rules the engine reads requests with) and by hyper's server, the
//! reference. Request smuggling is two readers disagreeing on where a
//! message ends; so the oracle is:
//!
//! - every request the gateway reads, hyper reads the same: method, target,
//!   version, fields in order, body bytes and trailers;
//! - the gateway may stop earlier than hyper (it refuses more: both
//!   framing fields, a bare LF, a fragment), never later: a request hyper
//!   does not read as the gateway does is never one the gateway accepts.

#![no_main]

#[path = "http1_common.rs"]
mod common;

use bytes::{Bytes, BytesMut};
use common::{fields, read_body, runtime};
use fencegate::http1::head::{parse_request, Parsed};
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a reader made of one request.
#[derive(Debug, PartialEq, Eq)]
struct Message {
    method: String,
    target: String,
    version: http::Version,
    fields: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    trailers: Vec<(String, Vec<u8>)>,
}

/// The gateway's reading: heads and bodies, as the engine takes them, until
/// the bytes end, a head is refused or a request closes the connection.
fn gateway_reads(input: &[u8]) -> Vec<Message> {
    let mut buf = BytesMut::from(input);
    let mut messages = Vec::new();
    loop {
        let head = match parse_request(&mut buf, 64 * 1024) {
            Ok(Parsed::Complete(head)) => head,
            _ => return messages,
        };
        let Some((body, trailers)) = read_body(&mut buf, head.body) else {
            return messages;
        };
        // The lines the engine forwards, as a map: a line httparse took
        // that a map would refuse is a difference too (a crash here).
        let map = head
            .fields
            .to_map()
            .expect("every field line httparse accepts makes a header map");
        messages.push(Message {
            method: head.method.to_string(),
            target: head.uri.to_string(),
            version: head.version,
            fields: fields(&map),
            body,
            trailers,
        });
        if !head.keep_alive {
            return messages;
        }
    }
}

/// hyper's reading: its HTTP/1.1 server over an in-memory connection that
/// carries `input` and then ends, each request's body read in full.
fn hyper_reads(input: &[u8]) -> Vec<Message> {
    runtime().block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = std::sync::Arc::clone(&seen);
        let service =
            hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let record = std::sync::Arc::clone(&record);
                async move {
                    let (parts, body) = request.into_parts();
                    let collected = body.collect().await?;
                    let trailers = collected.trailers().map(fields).unwrap_or_default();
                    let body: Bytes = collected.to_bytes();
                    record.lock().expect("not poisoned").push(Message {
                        method: parts.method.to_string(),
                        target: parts.uri.to_string(),
                        version: parts.version,
                        fields: fields(&parts.headers),
                        body: body.to_vec(),
                        trailers,
                    });
                    Ok::<_, hyper::Error>(
                        http::Response::new(http_body_util::Empty::<Bytes>::new()),
                    )
                }
            });
        let connection = hyper::server::conn::http1::Builder::new()
            .half_close(true)
            .serve_connection(hyper_util::rt::TokioIo::new(server), service);
        let serving = tokio::spawn(connection);
        let _ = client.write_all(input).await;
        let _ = client.shutdown().await;
        let mut answers = Vec::new();
        let _ = client.read_to_end(&mut answers).await;
        let _ = serving.await;
        let seen = std::mem::take(&mut *seen.lock().expect("not poisoned"));
        seen
    })
}

fuzz_target!(|input: &[u8]| {
    let gateway = gateway_reads(input);
    let hyper = hyper_reads(input);
    for (i, message) in gateway.iter().enumerate() {
        match hyper.get(i) {
            Some(reference) => assert_eq!(
                message,
                reference,
                "request {i} read differently; input {:?}",
                String::from_utf8_lossy(input)
            ),
            None => panic!(
                "the gateway reads request {i} ({message:?}), hyper does not; input {:?}",
                String::from_utf8_lossy(input)
            ),
        }
    }
});
