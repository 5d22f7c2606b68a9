//! What the engine writes besides data: a request head from its parts (for
//! the backend), chunk framing and trailers.

use http::header::{HeaderMap, CONTENT_LENGTH};
use http::request;

/// How a request's body is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outgoing {
    /// No body.
    Empty,
    /// This many bytes, as its `Content-Length` says.
    Length(u64),
    /// Chunked: its size was not known in advance.
    Chunked,
    /// As it comes, ended by closing the connection (a response to an
    /// HTTP/1.0 client whose length is not known in advance).
    UntilClose,
}

/// Writes the head of `parts` (already prepared for the backend: hop-by-hop
/// fields gone, origin form) into `out`, with the framing field its body
/// needs: the client's `Content-Length`, else `length` when the body's size
/// is known, else chunked. `has_body` is false for a body that is already
/// over, which is sent with no framing field added.
pub(crate) fn write_request_head(
    out: &mut Vec<u8>,
    parts: &request::Parts,
    has_body: bool,
    length: Option<u64>,
) -> Outgoing {
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut declared = None;
    for (name, value) in &parts.headers {
        if name == CONTENT_LENGTH {
            declared = declared.or_else(|| parse_decimal(value.as_bytes()));
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let outgoing = match (has_body, declared, length) {
        (false, _, _) => Outgoing::Empty,
        (true, Some(n), _) => Outgoing::Length(n),
        (true, None, Some(n)) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa(n, &mut [0; 20]));
            out.extend_from_slice(b"\r\n");
            Outgoing::Length(n)
        }
        (true, None, None) => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
            Outgoing::Chunked
        }
    };
    out.extend_from_slice(b"\r\n");
    outgoing
}

fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0, |n: u64, &b| n * 10 + u64::from(b - b'0')),
    )
}

/// `n` in decimal, in `buf`.
pub(crate) fn itoa(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// Appends a chunk's size line for `len` bytes of data.
pub(crate) fn put_chunk_size(out: &mut Vec<u8>, len: usize) {
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut n = len;
    loop {
        at -= 1;
        digits[at] = b"0123456789abcdef"[n % 16];
        n /= 16;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
}

/// Appends trailer fields and the end of a chunked body.
pub(crate) fn put_trailers(out: &mut Vec<u8>, trailers: &HeaderMap) {
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn request_heads_carry_the_framing_their_body_needs() {
        let (parts, ()) = http::Request::put("/a?b=1")
            .header("host", "store")
            .header("x-fencing-token", "7")
            .body(())
            .unwrap()
            .into_parts();
        let mut out = Vec::new();
        assert_eq!(
            write_request_head(&mut out, &parts, true, Some(5)),
            Outgoing::Length(5)
        );
        assert_eq!(
            out,
            b"PUT /a?b=1 HTTP/1.1\r\nhost: store\r\nx-fencing-token: 7\r\ncontent-length: 5\r\n\r\n"
        );
        out.clear();
        assert_eq!(
            write_request_head(&mut out, &parts, true, None),
            Outgoing::Chunked
        );
        assert!(out.ends_with(b"transfer-encoding: chunked\r\n\r\n"));
        out.clear();
        assert_eq!(
            write_request_head(&mut out, &parts, false, None),
            Outgoing::Empty
        );
        assert!(out.ends_with(b"x-fencing-token: 7\r\n\r\n"));
    }

    #[test]
    fn chunk_framing_and_trailers_round_trip() {
        let mut out = Vec::new();
        put_chunk_size(&mut out, 0x1a2b);
        assert_eq!(out, b"1a2b\r\n");
        let mut trailers = HeaderMap::new();
        trailers.insert("x-amz-checksum-crc32", HeaderValue::from_static("AAAA"));
        out.clear();
        put_trailers(&mut out, &trailers);
        assert_eq!(out, b"0\r\nx-amz-checksum-crc32: AAAA\r\n\r\n");
        assert_eq!(itoa(1234567, &mut [0; 20]), b"1234567");
        assert_eq!(itoa(0, &mut [0; 20]), b"0");
    }
}
