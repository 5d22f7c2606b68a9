//! Heads on the backend side: a request head written from its parts, a
//! response head read with httparse (no lenient option) into the parts the
//! rest of the gateway works with.

use bytes::{BufMut, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH};
use http::{request, response, StatusCode, Version};

use super::framing::{has_bare_lf, response_body, BodyLength, FramingError};
use crate::gateway::hop::strip_hop_by_hop;

/// The most header fields a response head may have.
const MAX_HEADERS: usize = 100;
/// The largest response head.
pub(crate) const MAX_HEAD: usize = 64 * 1024;

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

/// A response head from the backend.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    /// Status, version and fields, hop-by-hop fields removed.
    pub(crate) parts: response::Parts,
    /// How its body is delimited.
    pub(crate) body: BodyLength,
    /// Whether the connection may carry another request after this
    /// response's body.
    pub(crate) keep_alive: bool,
}

/// What [`parse_response`] found at the start of the buffer.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Not a whole head yet.
    Partial,
    /// An interim (1xx) response, removed from the buffer: the final one
    /// follows.
    Interim,
    /// A final response head, removed from the buffer.
    Final(ResponseHead),
}

/// Why a response head was refused (502).
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeadError {
    /// Not HTTP/1.x as httparse reads it.
    #[error("malformed response head: {0}")]
    Syntax(httparse::Error),
    /// A line that ends in a bare LF.
    #[error("malformed response head: a line ends in a bare LF")]
    BareLf,
    /// More than [`MAX_HEAD`] bytes.
    #[error("response head larger than {MAX_HEAD} bytes")]
    TooLarge,
    /// A `101 Switching Protocols` that nothing asked for.
    #[error("a response switching protocols (101) that nothing asked for")]
    Switch,
    /// Ambiguous framing.
    #[error("response framing: {0}")]
    Framing(#[from] FramingError),
    /// A field httparse accepts that the `http` crate does not.
    #[error("a response header field that cannot be relayed")]
    Field,
}

/// Reads the response head at the start of `buf`, answering a `HEAD`
/// request if `to_head`. The head's bytes are taken out of `buf`; the header
/// values share them, uncopied.
pub(crate) fn parse_response(buf: &mut BytesMut, to_head: bool) -> Result<Parsed, HeadError> {
    // Where each field is in the head, so that the head can be frozen once
    // httparse no longer borrows it.
    let mut at = [(0u32, 0u32, 0u32, 0u32); MAX_HEADERS];
    let (len, status, http10, count, body, close) = {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        let len = match response.parse(buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Ok(Parsed::Partial),
            Ok(httparse::Status::Partial) => return Err(HeadError::TooLarge),
            Err(error) => return Err(HeadError::Syntax(error)),
        };
        if has_bare_lf(&buf[..len]) {
            return Err(HeadError::BareLf);
        }
        let status = response.code.unwrap_or(0);
        let http10 = response.version == Some(0);
        let base = buf.as_ptr() as usize;
        let mut close = http10;
        for (slot, header) in at.iter_mut().zip(response.headers.iter()) {
            let name = header.name.as_ptr() as usize - base;
            let value = header.value.as_ptr() as usize - base;
            // Offsets within a head of at most MAX_HEAD bytes.
            *slot = (
                name as u32,
                (name + header.name.len()) as u32,
                value as u32,
                (value + header.value.len()) as u32,
            );
            if header.name.eq_ignore_ascii_case("connection") {
                close |= header
                    .value
                    .split(|&b| b == b',')
                    .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"));
            }
        }
        let body = response_body(to_head, status, http10, response.headers)?;
        (len, status, http10, response.headers.len(), body, close)
    };
    let head = buf.split_to(len).freeze();
    if status == 101 {
        return Err(HeadError::Switch);
    }
    if (100..200).contains(&status) {
        return Ok(Parsed::Interim);
    }
    let mut headers = HeaderMap::with_capacity(count);
    for &(n0, n1, v0, v1) in &at[..count] {
        let name = HeaderName::from_bytes(&head[n0 as usize..n1 as usize])
            .map_err(|_| HeadError::Field)?;
        let value = HeaderValue::from_maybe_shared(head.slice(v0 as usize..v1 as usize))
            .map_err(|_| HeadError::Field)?;
        headers.append(name, value);
    }
    strip_hop_by_hop(&mut headers);
    let mut parts = http::Response::new(()).into_parts().0;
    parts.status = StatusCode::from_u16(status).map_err(|_| HeadError::Field)?;
    parts.version = if http10 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    parts.headers = headers;
    Ok(Parsed::Final(ResponseHead {
        parts,
        keep_alive: !close && body != BodyLength::UntilClose,
        body,
    }))
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

/// Parses trailer field lines (without the empty line that ends them).
pub(crate) fn parse_trailers(fields: &[u8]) -> Option<HeaderMap> {
    let mut lines = [httparse::EMPTY_HEADER; 32];
    let mut section = BytesMut::with_capacity(fields.len() + 2);
    section.put_slice(fields);
    section.put_slice(b"\r\n");
    let httparse::Status::Complete((_, parsed)) =
        httparse::parse_headers(&section, &mut lines).ok()?
    else {
        return None;
    };
    let mut trailers = HeaderMap::with_capacity(parsed.len());
    for field in parsed {
        trailers.append(
            HeaderName::from_bytes(field.name.as_bytes()).ok()?,
            HeaderValue::from_bytes(field.value).ok()?,
        );
    }
    Some(trailers)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn parse(bytes: &[u8], to_head: bool) -> Result<Parsed, HeadError> {
        parse_response(&mut BytesMut::from(bytes), to_head)
    }

    #[test]
    fn response_heads_are_read_strictly() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\nETag: \"v1\"\r\n\r\nok"[..],
        );
        let Parsed::Final(head) = parse_response(&mut buf, false).unwrap() else {
            panic!("a whole head");
        };
        assert_eq!(&buf[..], b"ok");
        assert_eq!(head.body, BodyLength::Length(2));
        assert!(head.keep_alive);
        assert_eq!(head.parts.headers["etag"], "\"v1\"");
        assert!(!head.parts.headers.contains_key("connection"));

        assert!(matches!(
            parse(b"HTTP/1.1 100 Continue\r\n\r\n", false),
            Ok(Parsed::Interim)
        ));
        assert!(matches!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Le", false),
            Ok(Parsed::Partial)
        ));
        for bad in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX : a\r\n\r\n",
            b"HTTP/1.1 200 OK\nX: a\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        ] {
            assert!(
                parse(bad, false).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let Ok(Parsed::Final(head)) = parse(b"HTTP/1.1 200 OK\r\n\r\n", false) else {
            panic!("a whole head");
        };
        assert_eq!(head.body, BodyLength::UntilClose);
        assert!(!head.keep_alive);
        let Ok(Parsed::Final(head)) = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
        else {
            panic!("a whole head");
        };
        assert_eq!(head.body, BodyLength::Empty);
        assert_eq!(head.parts.headers["content-length"], "9");
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
        let parsed = parse_trailers(b"x-amz-checksum-crc32: AAAA\r\n").unwrap();
        assert_eq!(parsed, trailers);
        assert_eq!(itoa(1234567, &mut [0; 20]), b"1234567");
        assert_eq!(itoa(0, &mut [0; 20]), b"0");
    }
}
