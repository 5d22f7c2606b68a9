//! What the engine writes besides data: a request head for the backend,
//! from the client's field lines with the gateway's edits, chunk framing and
//! trailers.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::Method;

use crate::dialect::sigv4::SignedHeaders;
use crate::gateway::hop::end_to_end;
use crate::head::visible_str;
use crate::http1::names::eq_lowercase;

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

/// What the gateway changes in a request head on its way to the backend
/// (README, "Forwarding"); everything else goes as the client sent it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Edits<'a> {
    /// Replaces every `Host` line: the target's authority (absolute form,
    /// HTTP/2's `:authority`).
    pub(crate) host: Option<&'a [u8]>,
    /// `Host` for a request that has none (an HTTP/1.0 client).
    pub(crate) default_host: &'a [u8],
    /// The client's address, appended to the `X-Forwarded-For` list (whose
    /// lines become one); `None` leaves the list as it came.
    pub(crate) forwarded_for: Option<&'a [u8]>,
    /// `X-Forwarded-Proto`, replacing the client's.
    pub(crate) forwarded_proto: &'a [u8],
    /// Fields set on the way (a chained write's condition), each replacing
    /// every line of its name.
    pub(crate) set: &'a [(HeaderName, HeaderValue)],
    /// A `Content-Length` read spelled oddly (repeated, a list): its one
    /// value, replacing every line of it.
    pub(crate) length: Option<u64>,
    /// Credential custody: the lowercase names of the client's fields that
    /// go on (those it signed); every other one is left out but the
    /// framing fields. `None`: all go on.
    pub(crate) keep: Option<&'a SignedHeaders>,
    /// Credential custody: the store's signature and what it covers
    /// (`Authorization`, `x-amz-date`...), written last, each replacing
    /// every line of its name.
    pub(crate) signed: &'a [(HeaderName, HeaderValue)],
}

/// A message's field lines, as a head writer takes them.
pub(crate) struct Fields<'f, F> {
    /// The head they were read from, from which runs of them are copied
    /// whole ([`Lines`]); empty for lines from a map.
    pub(crate) read_from: &'f [u8],
    /// Makes an iterator over the lines (name, value) each time it is
    /// called.
    pub(crate) lines: F,
}

/// Writes a request head for the backend into `out`: the request line
/// (`target` in origin form, HTTP/1.1), the client's `fields` with the
/// `edits` and without hop-by-hop fields (`fields` makes an iterator over
/// them each time it is called: they are read twice) (the fixed list and what
/// `Connection` names), and the framing field its body needs: the client's
/// `Content-Length`, else `length` when the body's size is known, else
/// chunked. `has_body` is false for a body that is already over, which is
/// sent with no framing field added. Field names go as they came (any case:
/// the engine's lines are forwarded from the bytes read).
pub(crate) fn write_request_head<'f, I>(
    out: &mut Vec<u8>,
    method: &Method,
    target: &str,
    fields: Fields<'f, impl Fn() -> I>,
    edits: &Edits<'_>,
    has_body: bool,
    length: Option<u64>,
) -> Outgoing
where
    I: Iterator<Item = (&'f [u8], &'f [u8])>,
{
    let Fields {
        read_from,
        lines: fields,
    } = fields;
    let mut lines = Lines::new(read_from);
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut declared = edits.length;
    let mut host_sent = false;
    let mut forwarded_for: Vec<&[u8]> = Vec::new();
    for (name, value) in end_to_end(fields) {
        if eq_lowercase(name, b"host") {
            if edits.host.is_some() {
                continue;
            }
            host_sent = true;
        } else if eq_lowercase(name, b"x-forwarded-for") {
            if edits.forwarded_for.is_some() {
                // Several lines form one list (RFC 9110 §5.3): kept, joined.
                forwarded_for.extend(visible_str(value).map(str::as_bytes));
                continue;
            }
        } else if eq_lowercase(name, b"x-forwarded-proto") {
            continue;
        } else if eq_lowercase(name, b"content-length") {
            if edits.length.is_some() {
                continue;
            }
            declared = declared.or_else(|| parse_decimal(value));
        }
        if edits
            .set
            .iter()
            .chain(edits.signed)
            .any(|(set, _)| eq_lowercase(name, set.as_str().as_bytes()))
        {
            continue;
        }
        if let Some(keep) = edits.keep {
            let framing = eq_lowercase(name, b"content-length") || eq_lowercase(name, b"expect");
            // The list's index compares lengths first: most lines are
            // answered without comparing a byte.
            if !framing && !keep.contains_ignore_case(name) {
                continue;
            }
        }
        lines.put(out, name, value);
    }
    lines.flush(out);
    match edits.host {
        Some(host) => put_field(out, b"host", host),
        None if !host_sent => put_field(out, b"host", edits.default_host),
        None => {}
    }
    if let Some(peer) = edits.forwarded_for {
        out.extend_from_slice(b"x-forwarded-for: ");
        for value in forwarded_for {
            out.extend_from_slice(value);
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(peer);
        out.extend_from_slice(b"\r\n");
    }
    put_field(out, b"x-forwarded-proto", edits.forwarded_proto);
    for (name, value) in edits.set.iter().chain(edits.signed) {
        put_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(n) = edits.length {
        put_field(out, b"content-length", itoa(n, &mut [0; 20]));
    }
    let outgoing = match (has_body, declared, length) {
        (false, _, _) => Outgoing::Empty,
        (true, Some(n), _) => Outgoing::Length(n),
        (true, None, Some(n)) => {
            put_field(out, b"content-length", itoa(n, &mut [0; 20]));
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

/// Writes field lines that are kept as they were read: a run of such lines
/// that were next to each other in the head they came in (nearly all of a
/// head, usually) goes out in one copy of its bytes, whitespace as sent,
/// instead of a name, a separator, a value and an end per line. A line is
/// copied only if it ends in CRLF where it was read (a bare LF never goes
/// on); any other is written by [`put_field`].
pub(crate) struct Lines<'h> {
    /// The head the lines were read from; empty for lines from a map.
    source: &'h [u8],
    /// The run not written yet: its start and end in `source`.
    run: Option<(usize, usize)>,
}

impl<'h> Lines<'h> {
    /// A writer of lines read from `source` (or from a map: empty).
    pub(crate) fn new(source: &'h [u8]) -> Self {
        Lines { source, run: None }
    }

    /// Writes the line of `name` and `value` (or adds it to the run).
    /// Whatever else goes into `out` must wait for [`Lines::flush`].
    pub(crate) fn put(&mut self, out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        match self.whole_line(name, value) {
            Some((start, end)) => match &mut self.run {
                Some((_, run_end)) if *run_end == start => *run_end = end,
                _ => {
                    self.flush(out);
                    self.run = Some((start, end));
                }
            },
            None => {
                self.flush(out);
                put_field(out, name, value);
            }
        }
    }

    /// Writes the run not written yet.
    pub(crate) fn flush(&mut self, out: &mut Vec<u8>) {
        if let Some((start, end)) = self.run.take() {
            out.extend_from_slice(&self.source[start..end]);
        }
    }

    /// Where the line of `name` and `value` is in `source`, from its name
    /// to its CRLF, if they are `source`'s own bytes (found by address:
    /// equal bytes elsewhere do not count) and the line ends in CRLF.
    fn whole_line(&self, name: &[u8], value: &[u8]) -> Option<(usize, usize)> {
        let base = self.source.as_ptr() as usize;
        // Offsets within `source`: a slice below it has none, and one
        // above or across its end fails the bounds checks below.
        let start = (name.as_ptr() as usize).checked_sub(base)?;
        let value_start = (value.as_ptr() as usize).checked_sub(base)?;
        let name_end = start + name.len();
        let value_end = value_start + value.len();
        if name_end >= value_start || value_end > self.source.len() {
            return None;
        }
        // One line: the name, its colon, whitespace, the value, whitespace,
        // CRLF (nearly always `: ` and a CRLF right after the value).
        let is_space = |b: &u8| *b == b' ' || *b == b'\t';
        if self.source[name_end] != b':'
            || !self.source[name_end + 1..value_start].iter().all(is_space)
        {
            return None;
        }
        let after = &self.source[value_end..];
        let space = if after.starts_with(b"\r\n") {
            0
        } else {
            after.iter().take_while(|b| is_space(b)).count()
        };
        after[space..]
            .starts_with(b"\r\n")
            .then_some((start, value_end + space + 2))
    }
}

/// Appends one field line.
pub(crate) fn put_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
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
        put_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const PLAIN: Edits<'static> = Edits {
        host: None,
        default_host: b"backend",
        forwarded_for: None,
        forwarded_proto: b"http",
        set: &[],
        length: None,
        keep: None,
        signed: &[],
    };

    fn head(
        fields: &[(&str, &str)],
        edits: &Edits<'_>,
        has_body: bool,
        size: Option<u64>,
    ) -> (String, Outgoing) {
        let mut out = Vec::new();
        let lines = || fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()));
        let outgoing = write_request_head(
            &mut out,
            &Method::PUT,
            "/a?b=1",
            Fields {
                read_from: &[],
                lines,
            },
            edits,
            has_body,
            size,
        );
        (String::from_utf8(out).unwrap(), outgoing)
    }

    #[test]
    fn lines_read_in_a_head_go_on_as_sent_in_runs() {
        let sent = "PUT /k HTTP/1.1\r\nHost: store\r\nX-A:  spaced \t\r\nConnection: x-gone\r\n\
                    X-Gone: 1\r\nx-b:b\r\nContent-Length: 0\r\n\r\n";
        let mut buf = bytes::BytesMut::from(sent);
        let Ok(crate::http1::head::Parsed::Complete(head)) =
            crate::http1::head::parse_request(&mut buf, 1024)
        else {
            panic!("a valid head");
        };
        let fields = &head.fields;
        let mut out = Vec::new();
        let fields = Fields {
            read_from: fields.head_bytes(),
            lines: || fields.iter(),
        };
        write_request_head(&mut out, &Method::PUT, "/k", fields, &PLAIN, false, None);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "PUT /k HTTP/1.1\r\nHost: store\r\nX-A:  spaced \t\r\nx-b:b\r\nContent-Length: 0\r\n\
             x-forwarded-proto: http\r\n\r\n"
        );
    }

    #[test]
    fn only_lines_of_the_source_ending_in_crlf_are_copied() {
        let source = b"X:1\nY:2\r\nZ:3\r\n";
        let mut lines = Lines::new(source);
        let mut out = Vec::new();
        // A bare LF: written as a line of its own.
        lines.put(&mut out, &source[0..1], &source[2..3]);
        lines.put(&mut out, &source[4..5], &source[6..7]);
        // Equal bytes from elsewhere are not the source's.
        lines.put(&mut out, b"Z", b"3");
        lines.flush(&mut out);
        assert_eq!(out, b"X: 1\r\nY:2\r\nZ: 3\r\n");
    }

    #[test]
    fn request_heads_carry_the_framing_their_body_needs() {
        let fields = [("Host", "store"), ("X-Fencing-Token", "7")];
        assert_eq!(
            head(&fields, &PLAIN, true, Some(5)),
            (
                "PUT /a?b=1 HTTP/1.1\r\nHost: store\r\nX-Fencing-Token: 7\r\nx-forwarded-proto: http\r\ncontent-length: 5\r\n\r\n".into(),
                Outgoing::Length(5)
            )
        );
        let (text, outgoing) = head(&fields, &PLAIN, true, None);
        assert_eq!(outgoing, Outgoing::Chunked);
        assert!(
            text.ends_with("transfer-encoding: chunked\r\n\r\n"),
            "{text}"
        );
        let (text, outgoing) = head(&fields, &PLAIN, false, None);
        assert_eq!(outgoing, Outgoing::Empty);
        assert!(text.ends_with("x-forwarded-proto: http\r\n\r\n"), "{text}");
        // The client's own length is the framing.
        let (_, outgoing) = head(&[("content-length", "3")], &PLAIN, true, Some(3));
        assert_eq!(outgoing, Outgoing::Length(3));
    }

    #[test]
    fn the_gateway_edits_hop_by_hop_fields_host_and_forwarding() {
        let fields = [
            ("Host", "client-said"),
            ("Connection", "keep-alive, X-Secret"),
            ("X-Secret", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Authorization", "Basic x"),
            ("TE", "trailers"),
            ("Upgrade", "h2c"),
            ("X-Forwarded-For", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2"),
            ("X-Forwarded-Proto", "gopher"),
            ("If-Match", "\"client\""),
            ("Content-Length", "5"),
            ("Content-Length", "5"),
            ("X-Kept", "yes"),
        ];
        let set = [(
            http::header::IF_MATCH,
            HeaderValue::from_static("\"chain\""),
        )];
        let edits = Edits {
            host: Some(b"absolute.example"),
            default_host: b"backend",
            forwarded_for: Some(b"192.0.2.7"),
            forwarded_proto: b"https",
            set: &set,
            length: Some(5),
            keep: None,
            signed: &[],
        };
        let (text, outgoing) = head(&fields, &edits, true, Some(5));
        assert_eq!(outgoing, Outgoing::Length(5));
        assert_eq!(
            text,
            "PUT /a?b=1 HTTP/1.1\r\n\
             X-Kept: yes\r\n\
             host: absolute.example\r\n\
             x-forwarded-for: 10.0.0.1, 10.0.0.2, 192.0.2.7\r\n\
             x-forwarded-proto: https\r\n\
             if-match: \"chain\"\r\n\
             content-length: 5\r\n\r\n"
        );
        // No Host sent: the backend's; no peer known: the list as it came.
        let (text, _) = head(&[("X-Forwarded-For", "10.0.0.1")], &PLAIN, false, None);
        assert!(
            text.contains("X-Forwarded-For: 10.0.0.1\r\nhost: backend\r\n"),
            "{text}"
        );
    }

    #[test]
    fn under_custody_only_signed_fields_and_framing_go_on_with_the_signature() {
        let fields = [
            ("Host", "gateway:8080"),
            ("Authorization", "AWS4-HMAC-SHA256 client"),
            ("X-Amz-Date", "20261127T000000Z"),
            ("User-Agent", "unsigned"),
            ("X-Fencing-Token", "7"),
            ("Content-Length", "3"),
        ];
        let keep = SignedHeaders::parse("host;x-amz-date;x-fencing-token").unwrap();
        let signed = [
            (
                http::header::AUTHORIZATION,
                HeaderValue::from_static("AWS4-HMAC-SHA256 gateway"),
            ),
            (
                HeaderName::from_static("x-amz-date"),
                HeaderValue::from_static("20261127T000001Z"),
            ),
        ];
        let edits = Edits {
            host: Some(b"store:9000"),
            keep: Some(&keep),
            signed: &signed,
            ..PLAIN
        };
        let (text, _) = head(&fields, &edits, true, Some(3));
        assert_eq!(
            text,
            "PUT /a?b=1 HTTP/1.1\r\n\
             X-Fencing-Token: 7\r\n\
             Content-Length: 3\r\n\
             host: store:9000\r\n\
             x-forwarded-proto: http\r\n\
             authorization: AWS4-HMAC-SHA256 gateway\r\n\
             x-amz-date: 20261127T000001Z\r\n\r\n"
        );
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
