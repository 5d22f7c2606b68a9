//! Message heads read strictly (RFC 9112 §2 to §5) with httparse and none
//! of its lenient options: method, target or status as `http` types, and
//! the fields kept where they were read ([`FieldLines`], no copy), as a map
//! only on demand.
//!
//! Beyond httparse: a line that ends in a bare LF is refused (httparse
//! accepts it, RFC 9112 §2.2 lets a recipient, another parser may not see a
//! line end there), so is a request target with a fragment (RFC 9112 §3.2
//! has none), and the framing fields must pass [`super::framing`].

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{request, response, Method, StatusCode, Uri, Version};

use crate::head::HeaderFields;

use super::framing::{
    has_bare_lf_at_line_ends, request_body, response_body, BodyLength, FramingError,
};
use super::names::eq_lowercase;

/// The most header fields a head may have.
pub const MAX_HEADERS: usize = 100;

/// httparse with none of its lenient options (its default).
fn strict() -> httparse::ParserConfig {
    httparse::ParserConfig::default()
}

/// A request head, parsed and checked. Its fields stay where they were
/// read ([`FieldLines`]): the gateway forwards them from there, and builds
/// a `HeaderMap` only if something asks for one ([`RequestHead::into_parts`]).
#[derive(Debug)]
pub struct RequestHead {
    /// The method.
    pub method: Method,
    /// The request target, as sent.
    pub uri: Uri,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// The header fields, as sent.
    pub fields: FieldLines,
    /// How its body is delimited.
    pub body: BodyLength,
    /// Whether the connection may carry another request after this one
    /// (HTTP/1.1 without `Connection: close`, HTTP/1.0 with `keep-alive`,
    /// never after a `CONNECT`).
    pub keep_alive: bool,
    /// `Expect: 100-continue` in an HTTP/1.1 request.
    pub expects_continue: bool,
}

/// A response head, parsed and checked; its fields stay where they were
/// read, as a request's do.
#[derive(Debug)]
pub struct ResponseHead {
    /// The status.
    pub status: StatusCode,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// The header fields, as sent.
    pub fields: FieldLines,
    /// How its body is delimited.
    pub body: BodyLength,
    /// Whether the connection may carry another request after this
    /// response's body.
    pub keep_alive: bool,
}

impl ResponseHead {
    /// The head as `http` parts, its fields in a map.
    pub fn into_parts(self) -> Result<response::Parts, HeadError> {
        let mut parts = http::Response::new(()).into_parts().0;
        parts.headers = self.fields.to_map()?;
        parts.status = self.status;
        parts.version = self.version;
        Ok(parts)
    }
}

impl RequestHead {
    /// The head as `http` parts, its fields in a map (a `Content-Length`
    /// spelled oddly becomes the one value its body's length says).
    pub fn into_parts(self) -> Result<request::Parts, HeadError> {
        let mut parts = http::Request::new(()).into_parts().0;
        parts.headers = self.fields.to_map()?;
        parts.method = self.method;
        parts.uri = self.uri;
        parts.version = self.version;
        Ok(parts)
    }
}

/// A head's field lines, where they were read: each a name and a value
/// (without the whitespace around it) within the head's bytes.
#[derive(Debug, Clone)]
pub struct FieldLines {
    head: Bytes,
    lines: Vec<Span>,
    /// Bit `n % 64` set for each name of `n` bytes: a lookup of a name
    /// whose bit is clear (most lookups: a head has a few fields, and the
    /// gateway asks for names most never send) is answered without a scan.
    name_lengths: u64,
    /// `Content-Length` spelled as anything but one line of digits (equal
    /// repeated lines, a list): its one value, which is what a reader of
    /// these lines must see and forward (as hyper and nginx do).
    length: Option<u64>,
    /// A response's reason phrase, where it is in `head`: relayed as the
    /// backend sent it (`404 NOT FOUND` stays so).
    reason: Option<(u32, u32)>,
}

impl FieldLines {
    /// A response's reason phrase as sent (maybe empty); `None` for a
    /// request's lines.
    pub fn reason(&self) -> Option<&[u8]> {
        self.reason
            .map(|(start, end)| &self.head[start as usize..end as usize])
    }

    /// Every line, in order: its name as sent (any case) and its value.
    pub fn iter(&self) -> FieldIter<'_> {
        FieldIter {
            head: &self.head,
            spans: self.lines.iter(),
        }
    }

    /// The `i`th line: its name as sent and its value.
    pub fn line(&self, i: usize) -> Option<(&[u8], &[u8])> {
        let span = self.lines.get(i)?;
        Some((
            self.head.get(span.name.0 as usize..span.name.1 as usize)?,
            self.head
                .get(span.value.0 as usize..span.value.1 as usize)?,
        ))
    }

    /// The head these lines were read from, whole: a writer that forwards
    /// them copies runs of kept lines from it in one piece.
    pub fn head_bytes(&self) -> &[u8] {
        &self.head
    }

    /// The one value of a `Content-Length` that was spelled oddly (see
    /// [`FieldLines::to_map`]); `None` when it was one line of digits, or
    /// absent.
    pub fn normalized_length(&self) -> Option<u64> {
        self.length
    }

    /// The fields as a map, values sharing the head's bytes; a
    /// `Content-Length` spelled oddly becomes its one value.
    pub fn to_map(&self) -> Result<HeaderMap, HeadError> {
        let mut map = to_map(&self.head, self.lines.iter(), self.lines.len())?;
        if let Some(n) = self.length {
            map.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        Ok(map)
    }
}

/// The lines of a [`FieldLines`], in order: name (as sent) and value.
#[derive(Debug, Clone)]
pub struct FieldIter<'a> {
    head: &'a Bytes,
    spans: std::slice::Iter<'a, Span>,
}

impl<'a> Iterator for FieldIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let span = self.spans.next()?;
        Some((
            &self.head[span.name.0 as usize..span.name.1 as usize],
            &self.head[span.value.0 as usize..span.value.1 as usize],
        ))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.spans.size_hint()
    }
}

/// Read by name with a scan of the lines (a head has a few): cheaper than
/// building and hashing a map, which is what this type is for.
impl HeaderFields for FieldLines {
    fn values_of<'a, 'n>(&'a self, name: &'n HeaderName) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        self.values_named(name.as_str().as_bytes())
    }

    fn each_field<'a>(&'a self, mut each: impl FnMut(&'a [u8], &'a [u8])) -> bool {
        for (name, value) in self.iter() {
            each(name, value);
        }
        true
    }
}

impl FieldLines {
    /// Every value of the field `name` (lowercase bytes), in order: as
    /// [`HeaderFields::values_of`], for a caller that has the name as text
    /// (making a `HeaderName` of one that is not HTTP's own allocates).
    pub(crate) fn values_named<'a, 'n>(
        &'a self,
        name: &'n [u8],
    ) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        let head: &'a [u8] = &self.head;
        let lines: &'a [Span] = if self.name_lengths & length_bit(name.len()) == 0 {
            &[]
        } else {
            &self.lines
        };
        // Names compared first, a value sliced only for a match.
        lines.iter().filter_map(move |span| {
            let line = head.get(span.name.0 as usize..span.name.1 as usize)?;
            if !eq_lowercase(line, name) {
                return None;
            }
            head.get(span.value.0 as usize..span.value.1 as usize)
        })
    }
}

/// `count` fields at `spans` of `head` as a map, values sharing `head`.
fn to_map<'s>(
    head: &Bytes,
    spans: impl Iterator<Item = &'s Span>,
    count: usize,
) -> Result<HeaderMap, HeadError> {
    // Room for the fields and the gateway's own (X-Forwarded-*, a
    // chain's precondition) without growing.
    let mut map = HeaderMap::with_capacity(count + 4);
    for span in spans {
        let name = HeaderName::from_bytes(&head[span.name.0 as usize..span.name.1 as usize])
            .map_err(|_| HeadError::Syntax("invalid header field name"))?;
        let value = HeaderValue::from_maybe_shared(
            head.slice(span.value.0 as usize..span.value.1 as usize),
        )
        .map_err(|_| HeadError::Syntax("invalid header field value"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// What a parser found at the start of the buffer.
#[derive(Debug)]
pub enum Parsed<H> {
    /// Not a whole head yet.
    Partial,
    /// An interim (1xx) response, taken out of the buffer: the final one
    /// follows (responses only).
    Interim,
    /// A whole head, taken out of the buffer.
    Complete(H),
}

/// Why a head was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// Larger than the limit given.
    #[error("the head is larger than {0} bytes")]
    TooLarge(usize),
    /// More than [`MAX_HEADERS`] fields.
    #[error("more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    /// Not HTTP/1.0 or HTTP/1.1.
    #[error("not HTTP/1.0 or HTTP/1.1")]
    Version,
    /// Not a head as RFC 9112 writes it (httparse's reason).
    #[error("malformed head: {0}")]
    Syntax(&'static str),
    /// A line that ends in a bare LF.
    #[error("malformed head: a line ends in a bare LF")]
    BareLf,
    /// A request target with a fragment (`#`).
    #[error("the request target holds a fragment ('#'), which a request line may not carry")]
    Fragment,
    /// An HTTP/1.1 request without `Host`, or any request with two `Host`
    /// lines (RFC 9112 §3.2: a server must answer both 400). Two lines are
    /// a host confusion: the gateway would fence on one while a backend
    /// that keeps the other writes elsewhere.
    #[error("malformed head: {0}")]
    Host(&'static str),
    /// Ambiguous framing (its reason in the message, not as a source, so
    /// that a chain of causes does not say it twice).
    #[error("ambiguous message framing: {0}")]
    Framing(FramingError),
    /// A `101 Switching Protocols`, which nothing here asks for.
    #[error("a response switching protocols (101) that nothing asked for")]
    Switch,
}

impl From<FramingError> for HeadError {
    fn from(error: FramingError) -> Self {
        HeadError::Framing(error)
    }
}

/// Where a field is within its head, so that the head can be frozen once
/// httparse no longer borrows it. Offsets fit: a head is at most a few
/// hundred KiB.
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    name: (u32, u32),
    value: (u32, u32),
}

/// A name of `length` bytes in [`FieldLines::name_lengths`].
fn length_bit(length: usize) -> u64 {
    1 << (length % 64)
}

/// What both kinds of head need of their fields while httparse holds them.
struct HeadFields {
    /// Where each line is, in order: the vector the [`FieldLines`] keeps,
    /// allocated once at its size.
    spans: Vec<Span>,
    name_lengths: u64,
    close: bool,
    keep_alive: bool,
    expects_continue: bool,
    /// `Content-Length` is not one line of digits alone (several equal
    /// values, a list): it is forwarded as one, as hyper and nginx do, so
    /// that no later reader meets the repetition.
    length_spelled_oddly: bool,
    /// How many `Host` lines (saturating): a request needs exactly one.
    hosts: u8,
}

impl HeadFields {
    fn new() -> HeadFields {
        HeadFields {
            spans: Vec::new(),
            name_lengths: 0,
            close: false,
            keep_alive: false,
            expects_continue: false,
            length_spelled_oddly: false,
            hosts: 0,
        }
    }

    /// Notes where `headers` are (their bytes start at `base`) and what the
    /// connection needs of them.
    fn collect(&mut self, base: usize, headers: &[httparse::Header<'_>]) {
        let fields = self;
        fields.spans.reserve_exact(headers.len());
        let mut lengths = 0;
        for header in headers {
            let span = Span {
                name: offsets(base, header.name.as_bytes()),
                value: offsets(base, header.value),
            };
            fields.spans.push(span);
            fields.name_lengths |= length_bit(header.name.len());
            if eq_lowercase(header.name.as_bytes(), b"connection") {
                // The two values nearly every message carries, alone.
                if eq_lowercase(header.value, b"keep-alive") {
                    fields.keep_alive = true;
                    continue;
                }
                if eq_lowercase(header.value, b"close") {
                    fields.close = true;
                    continue;
                }
                // A `keep-alive` counts only in a value that is all visible
                // ASCII (connection options are tokens): a reader that skips
                // such a value (hyper does) would close an HTTP/1.0
                // connection where this one read on, and read the bytes
                // after the request differently. `close` counts anywhere:
                // closing is the side that cannot be misread.
                let visible = header
                    .value
                    .iter()
                    .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
                for token in header.value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    fields.close |= token.eq_ignore_ascii_case(b"close");
                    fields.keep_alive |= visible && token.eq_ignore_ascii_case(b"keep-alive");
                }
            } else if eq_lowercase(header.name.as_bytes(), b"content-length") {
                lengths += 1;
                fields.length_spelled_oddly |=
                    lengths > 1 || !header.value.iter().all(u8::is_ascii_digit);
            } else if eq_lowercase(header.name.as_bytes(), b"host") {
                fields.hosts = fields.hosts.saturating_add(1);
            } else if eq_lowercase(header.name.as_bytes(), b"expect") {
                fields.expects_continue |= header
                    .value
                    .trim_ascii()
                    .eq_ignore_ascii_case(b"100-continue");
            }
        }
    }

    /// Whether `head` (whose fields these are) ends a line with a lone LF:
    /// the line ends are known from where the names start
    /// ([`has_bare_lf_at_line_ends`]).
    fn has_bare_lf(&self, head: &[u8]) -> bool {
        has_bare_lf_at_line_ends(head, self.spans.iter().map(|span| span.name.0 as usize))
    }

    /// The fields as lines kept where they are in `head`.
    fn lines(&mut self, head: Bytes, body: BodyLength) -> FieldLines {
        FieldLines {
            head,
            lines: std::mem::take(&mut self.spans),
            name_lengths: self.name_lengths,
            length: match (self.length_spelled_oddly, body) {
                (true, BodyLength::Length(n)) => Some(n),
                _ => None,
            },
            reason: None,
        }
    }
}

fn offsets(base: usize, part: &[u8]) -> (u32, u32) {
    let start = part.as_ptr() as usize - base;
    (start as u32, (start + part.len()) as u32)
}

fn syntax(error: httparse::Error) -> HeadError {
    match error {
        httparse::Error::TooManyHeaders => HeadError::TooManyHeaders,
        httparse::Error::Version => HeadError::Version,
        httparse::Error::HeaderName => HeadError::Syntax("invalid header field name"),
        httparse::Error::HeaderValue => HeadError::Syntax("invalid header field value"),
        httparse::Error::NewLine => HeadError::Syntax("invalid line end"),
        httparse::Error::Status => HeadError::Syntax("invalid status"),
        httparse::Error::Token => HeadError::Syntax("invalid token"),
    }
}

/// Reads the request head at the start of `buf`, at most `max_head` bytes,
/// and takes it out of `buf`; what follows (a body, the next request) stays.
pub fn parse_request(
    buf: &mut BytesMut,
    max_head: usize,
) -> Result<Parsed<RequestHead>, HeadError> {
    let mut fields = HeadFields::new();
    let (len, method, target, http10, body) = {
        // Left uninitialised, as hyper does: filling 100 empty fields cost
        // more than parsing a small head.
        let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut []);
        let len = match strict().parse_request_with_uninit_headers(&mut request, buf, &mut headers)
        {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() < max_head => return Ok(Parsed::Partial),
            Ok(httparse::Status::Partial) => return Err(HeadError::TooLarge(max_head)),
            Err(error) => return Err(syntax(error)),
        };
        let base = buf.as_ptr() as usize;
        fields.collect(base, request.headers);
        if fields.has_bare_lf(&buf[..len]) {
            return Err(HeadError::BareLf);
        }
        let http10 = request.version == Some(0);
        match fields.hosts {
            0 if !http10 => return Err(HeadError::Host("an HTTP/1.1 request without Host")),
            0 | 1 => {}
            _ => return Err(HeadError::Host("more than one Host line")),
        }
        let body = request_body(http10, request.headers)?;
        let method = offsets(base, request.method.unwrap_or("GET").as_bytes());
        let target = offsets(base, request.path.unwrap_or("/").as_bytes());
        (len, method, target, http10, body)
    };
    let head = buf.split_to(len).freeze();
    let target = head.slice(target.0 as usize..target.1 as usize);
    if target.contains(&b'#') {
        return Err(HeadError::Fragment);
    }
    let method = Method::from_bytes(&head[method.0 as usize..method.1 as usize])
        .map_err(|_| HeadError::Syntax("invalid method"))?;
    let uri =
        Uri::from_maybe_shared(target).map_err(|_| HeadError::Syntax("invalid request target"))?;
    let version = if http10 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let keep_alive = if http10 {
        // Both named: the side that cannot be misread.
        fields.keep_alive && !fields.close
    } else {
        !fields.close
    };
    // After a CONNECT the bytes that follow are not HTTP.
    let keep_alive = keep_alive && method != Method::CONNECT;
    Ok(Parsed::Complete(RequestHead {
        method,
        uri,
        version,
        fields: fields.lines(head, body),
        body,
        keep_alive,
        expects_continue: fields.expects_continue && !http10,
    }))
}

/// Reads the response head at the start of `buf`, at most `max_head`
/// bytes, answering a `HEAD` request if `to_head`, and takes it out of
/// `buf`.
pub fn parse_response(
    buf: &mut BytesMut,
    to_head: bool,
    max_head: usize,
) -> Result<Parsed<ResponseHead>, HeadError> {
    let mut fields = HeadFields::new();
    let (len, status, http10, body, reason) = {
        let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut []);
        let len =
            match strict().parse_response_with_uninit_headers(&mut response, buf, &mut headers) {
                Ok(httparse::Status::Complete(len)) => len,
                Ok(httparse::Status::Partial) if buf.len() < max_head => {
                    return Ok(Parsed::Partial)
                }
                Ok(httparse::Status::Partial) => return Err(HeadError::TooLarge(max_head)),
                Err(error) => return Err(syntax(error)),
            };
        fields.collect(buf.as_ptr() as usize, response.headers);
        if fields.has_bare_lf(&buf[..len]) {
            return Err(HeadError::BareLf);
        }
        let status = response.code.unwrap_or(0);
        let http10 = response.version == Some(0);
        let body = response_body(to_head, status, http10, response.headers)?;
        let reason = response
            .reason
            .map(|reason| offsets(buf.as_ptr() as usize, reason.as_bytes()));
        (len, status, http10, body, reason)
    };
    let head = buf.split_to(len).freeze();
    if status == 101 {
        return Err(HeadError::Switch);
    }
    if (100..200).contains(&status) {
        return Ok(Parsed::Interim);
    }
    Ok(Parsed::Complete(ResponseHead {
        status: StatusCode::from_u16(status).map_err(|_| HeadError::Syntax("invalid status"))?,
        version: if http10 {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        },
        fields: {
            let mut lines = fields.lines(head, body);
            lines.reason = reason;
            lines
        },
        // HTTP/1.0 connections are not kept: a keep-alive there is an
        // extension this side does not offer.
        keep_alive: !http10 && !fields.close && body != BodyLength::UntilClose,
        body,
    }))
}

/// Parses trailer field lines (without the empty line that ends them), as
/// a chunked body's [`Step::Trailers`](super::framing::Step::Trailers)
/// points at them.
pub fn parse_trailers(fields: &[u8]) -> Option<HeaderMap> {
    let mut lines = [httparse::EMPTY_HEADER; 32];
    let mut section = Vec::with_capacity(fields.len() + 2);
    section.extend_from_slice(fields);
    section.extend_from_slice(b"\r\n");
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

    fn response(bytes: &[u8], to_head: bool) -> Result<Parsed<ResponseHead>, HeadError> {
        parse_response(&mut BytesMut::from(bytes), to_head, 64 * 1024)
    }

    fn request(bytes: &[u8]) -> Result<Parsed<RequestHead>, HeadError> {
        parse_request(&mut BytesMut::from(bytes), 64 * 1024)
    }

    #[test]
    fn keep_alive_counts_only_in_a_visible_ascii_value() {
        let keep_alive = |value: &[u8]| {
            let mut head = b"GET / HTTP/1.0\r\nConnection: ".to_vec();
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n\r\n");
            match request(&head) {
                Ok(Parsed::Complete(head)) => head.keep_alive,
                _ => panic!("a whole head"),
            }
        };
        assert!(keep_alive(b"keep-alive"));
        assert!(keep_alive(b"Keep-Alive, ,,x"));
        assert!(!keep_alive(b"keep-alive, \xd5"));
        assert!(!keep_alive(b"keep-alive, close"));
    }

    #[test]
    fn response_heads_are_read_strictly() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\nETag: \"v1\"\r\n\r\nok"[..],
        );
        let Parsed::Complete(head) = parse_response(&mut buf, false, 1024).unwrap() else {
            panic!("a whole head");
        };
        assert_eq!(&buf[..], b"ok");
        assert_eq!(head.body, BodyLength::Length(2));
        assert!(head.keep_alive);
        assert_eq!(head.fields.first(&http::header::ETAG), Some(&b"\"v1\""[..]));

        assert!(matches!(
            response(b"HTTP/1.1 100 Continue\r\n\r\n", false),
            Ok(Parsed::Interim)
        ));
        assert!(matches!(
            response(b"HTTP/1.1 200 OK\r\nContent-Le", false),
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
                response(bad, false).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let Ok(Parsed::Complete(head)) = response(b"HTTP/1.1 200 OK\r\n\r\n", false) else {
            panic!("a whole head");
        };
        assert_eq!(head.body, BodyLength::UntilClose);
        assert!(!head.keep_alive);
        let Ok(Parsed::Complete(head)) =
            response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
        else {
            panic!("a whole head");
        };
        assert_eq!(head.body, BodyLength::Empty);
        assert_eq!(head.into_parts().unwrap().headers["content-length"], "9");
    }

    #[test]
    fn request_heads_are_read_strictly() {
        let mut buf = BytesMut::from(
            &b"PUT /a?b HTTP/1.1\r\nHost: s\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\nokGET"[..],
        );
        let Parsed::Complete(head) = parse_request(&mut buf, 1024).unwrap() else {
            panic!("a whole head");
        };
        assert_eq!(&buf[..], b"okGET");
        assert_eq!(head.method, Method::PUT);
        assert_eq!(head.uri, "/a?b");
        let name = HeaderName::from_static("host");
        assert_eq!(head.fields.first(&name), Some(&b"s"[..]));
        assert_eq!(head.body, BodyLength::Length(2));
        assert!(head.keep_alive && head.expects_continue);

        let Ok(Parsed::Complete(head)) =
            request(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        else {
            panic!("a whole head");
        };
        assert!(head.keep_alive);
        let Ok(Parsed::Complete(head)) =
            request(b"GET / HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n")
        else {
            panic!("a whole head");
        };
        assert!(!head.keep_alive);

        for (bad, error) in [
            (
                &b"DELETE /dir/#frag HTTP/1.1\r\nHost: s\r\n\r\n"[..],
                HeadError::Fragment,
            ),
            (
                b"PUT / HTTP/1.1\r\nHost: s\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                HeadError::Framing(FramingError::LengthAndTransferEncoding),
            ),
            (
                b"GET / HTTP/1.1\r\n\r\n",
                HeadError::Host("an HTTP/1.1 request without Host"),
            ),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nhost: y\r\n\r\n",
                HeadError::Host("more than one Host line"),
            ),
            (
                b"GET / HTTP/1.0\r\nHost: x\r\nHost: x\r\n\r\n",
                HeadError::Host("more than one Host line"),
            ),
            (b"GET / HTTP/1.1\nHost: s\r\n\r\n", HeadError::BareLf),
            (b"GET / HTTP/2.0\r\n\r\n", HeadError::Version),
        ] {
            assert_eq!(request(bad).unwrap_err(), error);
        }
        assert!(request(b"GET / HTTP/1.1\r\nX : a\r\n\r\n").is_err());
        assert!(request(b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n").is_err());
        assert_eq!(
            parse_request(&mut BytesMut::from(&b"GET / HTTP/1.1\r\nX: aaaa"[..]), 16).unwrap_err(),
            HeadError::TooLarge(16)
        );
    }

    #[test]
    fn heads_with_many_fields_keep_them_all_in_order() {
        let mut raw = b"GET / HTTP/1.1\r\nHost: s\r\n".to_vec();
        for i in 0..MAX_HEADERS - 1 {
            raw.extend_from_slice(format!("x-f{i}: {i}\r\n").as_bytes());
        }
        raw.extend_from_slice(b"\r\n");
        let Ok(Parsed::Complete(head)) = request(&raw) else {
            panic!("a whole head");
        };
        let map = head.fields.to_map().unwrap();
        let values: Vec<_> = map.values().skip(1).collect();
        assert_eq!(values.len(), MAX_HEADERS - 1);
        for (i, value) in values.iter().enumerate() {
            assert_eq!(value.to_str().unwrap(), i.to_string());
        }
        raw.splice(16..16, b"x-one-more: 1\r\n".iter().copied());
        assert_eq!(request(&raw).unwrap_err(), HeadError::TooManyHeaders);
    }

    #[test]
    fn trailers_parse() {
        let parsed = parse_trailers(b"x-amz-checksum-crc32: AAAA\r\n").unwrap();
        assert_eq!(parsed["x-amz-checksum-crc32"], "AAAA");
        assert!(parse_trailers(b"bad header\r\n").is_none());
    }

    /// The name starts of a head httparse reads in full (as a request, or
    /// as a response), and its length.
    fn name_starts(head: &[u8], as_response: bool) -> Option<(Vec<usize>, usize)> {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let base = head.as_ptr() as usize;
        let (len, fields) = if as_response {
            let mut response = httparse::Response::new(&mut headers);
            let httparse::Status::Complete(len) = response.parse(head).ok()? else {
                return None;
            };
            (len, response.headers.to_vec())
        } else {
            let mut request = httparse::Request::new(&mut headers);
            let httparse::Status::Complete(len) = request.parse(head).ok()? else {
                return None;
            };
            (len, request.headers.to_vec())
        };
        let starts = fields
            .iter()
            .map(|field| field.name.as_ptr() as usize - base)
            .collect();
        Some((starts, len))
    }

    proptest::proptest! {
        /// Looking only where httparse can have put a line end finds a lone
        /// LF exactly when a search of the whole head does.
        #[test]
        fn a_lone_lf_is_found_at_the_line_ends_as_by_a_search(
            leading in proptest::collection::vec(proptest::bool::ANY, 0..3),
            ends in proptest::collection::vec(proptest::bool::ANY, 2..7),
            values in proptest::collection::vec("[ -~\t]{0,5}", 5),
            as_response in proptest::bool::ANY,
        ) {
            let end = |crlf: bool| if crlf { "\r\n" } else { "\n" };
            let mut text: String = leading.iter().map(|&crlf| end(crlf)).collect();
            text += if as_response { "HTTP/1.1 200 OK" } else { "GET /a HTTP/1.1" };
            text += end(ends[0]);
            for (i, &crlf) in ends[1..ends.len() - 1].iter().enumerate() {
                text += &format!("X-{i}:{}", values[i % values.len()]);
                text += end(crlf);
            }
            text += end(ends[ends.len() - 1]);
            text += "after";
            let head = text.as_bytes();
            proptest::prop_assume!(name_starts(head, as_response).is_some());
            let (starts, len) = name_starts(head, as_response).unwrap();
            proptest::prop_assert_eq!(
                has_bare_lf_at_line_ends(&head[..len], starts.into_iter()),
                crate::http1::framing::has_bare_lf(&head[..len])
            );
        }
    }
}
