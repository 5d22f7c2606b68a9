//! What both HTTP/1.1 differential targets need: a body read as the
//! gateway's engine reads it, fields compared alike, and a runtime for hyper.

use std::sync::OnceLock;

use bytes::{Buf, BytesMut};
use fencegate::http1::framing::{BodyLength, ChunkedDecoder, Step};
use fencegate::http1::head::parse_trailers;

/// The fields in order; a `Content-Length` as its number (`05` is 5): when a
/// length is repeated, the gateway forwards it once, hyper keeps the first
/// spelling.
pub fn fields(map: &http::HeaderMap) -> Vec<(String, Vec<u8>)> {
    map.iter()
        .map(|(name, value)| {
            let mut value = value.as_bytes().to_vec();
            if name == http::header::CONTENT_LENGTH {
                if let Some(n) = std::str::from_utf8(&value)
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    value = n.to_string().into_bytes();
                }
            }
            (name.as_str().to_owned(), value)
        })
        .collect()
}

/// The body `length` delimits at the start of `buf`, taken out of it, and
/// its trailer fields; `None` if the bytes end first or the framing is bad.
pub fn read_body(
    buf: &mut BytesMut,
    length: BodyLength,
) -> Option<(Vec<u8>, Vec<(String, Vec<u8>)>)> {
    let mut body = Vec::new();
    let mut trailers = Vec::new();
    match length {
        BodyLength::Empty => {}
        BodyLength::Length(n) => {
            if (buf.len() as u64) < n {
                return None;
            }
            body.extend_from_slice(&buf.split_to(n as usize));
        }
        BodyLength::Chunked => {
            let mut decoder = ChunkedDecoder::default();
            while !decoder.is_done() {
                match decoder.step(buf).ok()? {
                    Step::NeedMore => return None,
                    Step::Framing(n) => buf.advance(n),
                    Step::Data(n) => body.extend_from_slice(&buf.split_to(n)),
                    Step::Trailers { n, fields: at } => {
                        if !at.is_empty() {
                            trailers = fields(&parse_trailers(&buf[at])?);
                        }
                        buf.advance(n);
                    }
                }
            }
        }
        BodyLength::UntilClose => body.extend_from_slice(&buf.split()),
    }
    Some((body, trailers))
}

/// One current-thread runtime for every input.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}
