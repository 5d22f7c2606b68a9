//! Where an HTTP/1.1 message's body ends: RFC 9112 §6 (message body
//! length) and §7.1 (chunked transfer coding), the rules request smuggling
//! lives in, kept in this one file so that they can be read against the RFC.
//!
//! Stricter than the RFC asks of a recipient wherever two readings are
//! possible, as the SPEC's "What is never forwarded" says: a message whose
//! framing another parser could read differently is refused, never guessed.
//!
//! - `Content-Length` and `Transfer-Encoding` together: refused (§6.3 rule 3
//!   lets a recipient drop the length; nginx refuses, and so do we).
//! - `Content-Length`: one `1*DIGIT` per field line, no sign, no space
//!   inside, no overflow, no list (`42, 42`, which hyper and nginx refuse);
//!   several lines only if they all say the same (§6.3 rule 5).
//! - `Transfer-Encoding`: exactly `chunked`, once (§6.1). A request whose
//!   final coding is not `chunked` is refused (§6.3 rule 4), so is any
//!   other coding besides it (`gzip, chunked`), both ways: the gateway
//!   decodes only `chunked`, and relaying a coded body without its coding
//!   would hand the other side coded bytes as the content (a response
//!   "read until the close" under a final `gzip` included). Codings must be
//!   tokens, empty list elements are refused, and so is any
//!   `Transfer-Encoding` in an HTTP/1.0 message (§6.1).
//! - No framing field: a request has no body (§6.3 rule 6); a response is
//!   read until the connection closes (rule 8).
//! - A response to `HEAD`, and every 1xx, 204 and 304 response, has no body
//!   whatever its fields say (rule 1).
//! - Chunks: `1*HEXDIG` sizes of at most 15 digits, extensions of visible
//!   characters and at most [`MAX_CHUNK_EXTENSIONS`] bytes a message,
//!   `CRLF` and nothing else after every size line and every chunk's data,
//!   trailer fields as strict as header fields, and no bare LF anywhere.
//!
//! The head's own syntax (obsolete line folding, whitespace before a colon,
//! a bare CR, invalid names or values) is httparse's, used with none of its
//! lenient options.

use std::ops::Range;

use super::names::eq_lowercase;

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLength {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// The chunked transfer coding.
    Chunked,
    /// Everything until the connection closes (responses only).
    UntilClose,
}

/// Why a message's framing was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// Both framing fields (RFC 9112 §6.3 rule 3).
    #[error("both Content-Length and Transfer-Encoding")]
    LengthAndTransferEncoding,
    /// Several `Content-Length` values that differ.
    #[error("Content-Length values that differ")]
    DifferingLengths,
    /// A `Content-Length` that is not a decimal number.
    #[error("a Content-Length that is not a number")]
    BadLength,
    /// A request `Transfer-Encoding` whose final coding is not `chunked`,
    /// or a coding that is not a token.
    #[error("a Transfer-Encoding whose final coding is not chunked")]
    NotChunked,
    /// A transfer coding besides `chunked` (`gzip, chunked`): the gateway
    /// decodes only `chunked`, and a coding it dropped on the way would
    /// hand the other side coded bytes as the content (RFC 9112 §6.1: 501
    /// for a request).
    #[error("a transfer coding other than chunked, which the gateway does not decode")]
    UnsupportedCoding,
    /// `chunked` more than once (RFC 9112 §6.1).
    #[error("a Transfer-Encoding that applies chunked more than once")]
    ChunkedTwice,
    /// `Transfer-Encoding` in an HTTP/1.0 message.
    #[error("Transfer-Encoding in an HTTP/1.0 message")]
    TransferEncodingInHttp10,
    /// A chunk size that is not 1 to 15 hexadecimal digits.
    #[error("a malformed chunk size")]
    BadChunkSize,
    /// Chunk extensions with a control character, or more than
    /// [`MAX_CHUNK_EXTENSIONS`] bytes of them in one message.
    #[error("malformed or oversized chunk extensions")]
    BadChunkExtension,
    /// Something other than CRLF where a line must end.
    #[error("a chunk line that does not end in CRLF")]
    BadLineEnd,
    /// Trailer fields that do not parse, or are too large.
    #[error("malformed or oversized trailer fields")]
    BadTrailer,
}

/// Chunk extension bytes allowed in one message: hyper allows 16 KiB.
pub const MAX_CHUNK_EXTENSIONS: usize = 16 * 1024;
/// The largest trailer section.
pub const MAX_TRAILER: usize = 16 * 1024;
/// Chunk-size digits: 15 hexadecimal digits stay below 2^60.
const MAX_SIZE_DIGITS: u8 = 15;

/// The body length of a request with these header fields (RFC 9112 §6.3).
pub fn request_body(
    http10: bool,
    headers: &[httparse::Header<'_>],
) -> Result<BodyLength, FramingError> {
    match framing_fields(http10, headers)? {
        FramingFields::None => Ok(BodyLength::Empty),
        FramingFields::Length(n) => Ok(BodyLength::Length(n)),
        FramingFields::Chunked => Ok(BodyLength::Chunked),
        FramingFields::CodedChunked => Err(FramingError::UnsupportedCoding),
        FramingFields::OtherCoding => Err(FramingError::NotChunked),
    }
}

/// The body length of a response with `status` and these header fields,
/// answering a `HEAD` request if `to_head` (RFC 9112 §6.3).
pub fn response_body(
    to_head: bool,
    status: u16,
    http10: bool,
    headers: &[httparse::Header<'_>],
) -> Result<BodyLength, FramingError> {
    if to_head || (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(BodyLength::Empty);
    }
    match framing_fields(http10, headers)? {
        FramingFields::None => Ok(BodyLength::UntilClose),
        FramingFields::Length(n) => Ok(BodyLength::Length(n)),
        FramingFields::Chunked => Ok(BodyLength::Chunked),
        FramingFields::CodedChunked | FramingFields::OtherCoding => {
            Err(FramingError::UnsupportedCoding)
        }
    }
}

/// What the framing fields of a head say, before the request/response
/// difference.
enum FramingFields {
    None,
    Length(u64),
    /// `chunked` alone.
    Chunked,
    /// Other codings, then `chunked`.
    CodedChunked,
    /// A final coding other than `chunked`.
    OtherCoding,
}

fn framing_fields(
    http10: bool,
    headers: &[httparse::Header<'_>],
) -> Result<FramingFields, FramingError> {
    let mut length: Option<u64> = None;
    // Transfer-Encoding: present; chunked seen; chunked the last coding;
    // a coding other than chunked seen.
    let (mut coded, mut chunked, mut chunked_last) = (false, false, false);
    let mut other = false;
    for header in headers {
        if eq_lowercase(header.name.as_bytes(), b"content-length") {
            // One number per line: a list (`42, 42`), which RFC 9110 §8.6
            // lets a recipient fold, is refused by hyper's server and by
            // nginx, so it is refused here too (lines that repeat one value
            // are accepted, as they are by both).
            let n = parse_length(header.value)?;
            if length.is_some_and(|seen| seen != n) {
                return Err(FramingError::DifferingLengths);
            }
            length = Some(n);
        } else if eq_lowercase(header.name.as_bytes(), b"transfer-encoding") {
            // A field present, even empty, is a Transfer-Encoding.
            coded = true;
            // Field lines form one list (RFC 9110 §5.3), read in order.
            for value in header.value.split(|&b| b == b',') {
                let value = trim_ows(value);
                // A coding is a token (RFC 9112 §7); parameters, which no
                // coding in use takes, are refused with everything else. So
                // are empty elements, which RFC 9110 §5.6.1 says to ignore
                // but hyper does not: `chunked,` is chunked to one reader
                // and not to the other.
                if value.is_empty() || !value.iter().all(|&b| is_tchar(b)) {
                    return Err(FramingError::NotChunked);
                }
                chunked_last = eq_lowercase(value, b"chunked");
                other |= !chunked_last;
                if chunked_last && chunked {
                    // "MUST NOT apply chunked more than once" (§6.1).
                    return Err(FramingError::ChunkedTwice);
                }
                chunked |= chunked_last;
            }
        }
    }
    match (length, coded) {
        (Some(_), true) => Err(FramingError::LengthAndTransferEncoding),
        (_, true) if http10 => Err(FramingError::TransferEncodingInHttp10),
        (Some(n), false) => Ok(FramingFields::Length(n)),
        (None, true) if chunked_last && !other => Ok(FramingFields::Chunked),
        (None, true) if chunked_last => Ok(FramingFields::CodedChunked),
        (None, true) => Ok(FramingFields::OtherCoding),
        (None, false) => Ok(FramingFields::None),
    }
}

/// `1*DIGIT`, without overflow.
fn parse_length(digits: &[u8]) -> Result<u64, FramingError> {
    if digits.is_empty() || digits.len() > 19 {
        return Err(FramingError::BadLength);
    }
    digits.iter().try_fold(0u64, |n, &b| {
        if b.is_ascii_digit() {
            Ok(n * 10 + u64::from(b - b'0'))
        } else {
            Err(FramingError::BadLength)
        }
    })
}

/// A token character (RFC 9110 §5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

/// What a [`ChunkedDecoder`] found at the start of the bytes it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The bytes given end inside framing: give more.
    NeedMore,
    /// The first `n` bytes were framing (a size line, a CRLF): drop them.
    Framing(usize),
    /// The first `n` bytes are body data.
    Data(usize),
    /// The trailer section, which ends the body.
    Trailers {
        /// Its length from the start of the bytes given.
        n: usize,
        /// Where its field lines are (empty when there are none).
        fields: Range<usize>,
    },
}

/// A strict, incremental decoder of the chunked transfer coding (RFC 9112
/// §7.1) that never copies: it says which bytes are data and which are
/// framing, and the caller keeps or drops them.
#[derive(Debug, Clone, Default)]
pub struct ChunkedDecoder {
    state: ChunkState,
    /// The chunk's size, while its line is read; then the data left.
    size: u64,
    digits: u8,
    extensions: usize,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    Trailers,
    Done,
}

impl ChunkedDecoder {
    /// Whether the last chunk and the trailer section have been read.
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decodes from the start of `buf`, the bytes that follow those already
    /// accounted for. Never returns `Framing(0)` or `Data(0)`; on an empty
    /// `buf` it returns `NeedMore` (or `Trailers` once done).
    pub fn step(&mut self, buf: &[u8]) -> Result<Step, FramingError> {
        match self.state {
            ChunkState::Data => {
                if buf.is_empty() {
                    return Ok(Step::NeedMore);
                }
                let n = usize::try_from(self.size)
                    .unwrap_or(usize::MAX)
                    .min(buf.len());
                self.size -= n as u64;
                if self.size == 0 {
                    self.state = ChunkState::DataCr;
                }
                Ok(Step::Data(n))
            }
            ChunkState::Trailers => self.trailers(buf),
            ChunkState::Done => Ok(Step::NeedMore),
            _ => self.framing(buf),
        }
    }

    /// Size lines and the CRLF after data, a byte at a time.
    fn framing(&mut self, buf: &[u8]) -> Result<Step, FramingError> {
        for (i, &b) in buf.iter().enumerate() {
            match self.state {
                ChunkState::Size => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        if self.digits == MAX_SIZE_DIGITS {
                            return Err(FramingError::BadChunkSize);
                        }
                        self.digits += 1;
                        // Cannot overflow: at most 15 digits.
                        self.size = self.size * 16 + u64::from(hex_value(b));
                    }
                    b';' if self.digits > 0 => self.state = ChunkState::Extension,
                    b'\r' if self.digits > 0 => self.state = ChunkState::SizeLf,
                    _ => return Err(FramingError::BadChunkSize),
                },
                ChunkState::Extension => match b {
                    b'\r' => self.state = ChunkState::SizeLf,
                    b'\t' | b' '..=b'~' | 0x80..=0xff => {
                        self.extensions += 1;
                        if self.extensions > MAX_CHUNK_EXTENSIONS {
                            return Err(FramingError::BadChunkExtension);
                        }
                    }
                    _ => return Err(FramingError::BadChunkExtension),
                },
                ChunkState::SizeLf => {
                    if b != b'\n' {
                        return Err(FramingError::BadLineEnd);
                    }
                    self.digits = 0;
                    self.state = if self.size == 0 {
                        ChunkState::Trailers
                    } else {
                        ChunkState::Data
                    };
                    return Ok(Step::Framing(i + 1));
                }
                ChunkState::DataCr => {
                    if b != b'\r' {
                        return Err(FramingError::BadLineEnd);
                    }
                    self.state = ChunkState::DataLf;
                }
                ChunkState::DataLf => {
                    if b != b'\n' {
                        return Err(FramingError::BadLineEnd);
                    }
                    self.state = ChunkState::Size;
                    return Ok(Step::Framing(i + 1));
                }
                // Not reached: `step` hands these states elsewhere.
                ChunkState::Data | ChunkState::Trailers | ChunkState::Done => {
                    return Err(FramingError::BadLineEnd)
                }
            }
        }
        // Everything given was framing, but a line is not over yet.
        Ok(if buf.is_empty() {
            Step::NeedMore
        } else {
            Step::Framing(buf.len())
        })
    }

    /// The trailer section: field lines, then an empty line (RFC 9112 §7.1.2).
    fn trailers(&mut self, buf: &[u8]) -> Result<Step, FramingError> {
        if buf.starts_with(b"\r\n") {
            self.state = ChunkState::Done;
            return Ok(Step::Trailers { n: 2, fields: 0..0 });
        }
        if buf.first().is_some_and(|&b| b != b'\r') || buf.len() >= 2 {
            let mut fields = [httparse::EMPTY_HEADER; 32];
            return match httparse::parse_headers(buf, &mut fields) {
                Ok(httparse::Status::Complete((n, _))) => {
                    if has_bare_lf(&buf[..n]) {
                        return Err(FramingError::BadTrailer);
                    }
                    self.state = ChunkState::Done;
                    Ok(Step::Trailers {
                        n,
                        fields: 0..n - 2,
                    })
                }
                Ok(httparse::Status::Partial) if buf.len() < MAX_TRAILER => Ok(Step::NeedMore),
                _ => Err(FramingError::BadTrailer),
            };
        }
        Ok(Step::NeedMore)
    }
}

/// A line end that is a lone LF: httparse accepts it (RFC 9112 §2.2 lets a
/// recipient), but another parser may not see a line end there.
pub fn has_bare_lf(bytes: &[u8]) -> bool {
    // memchr finds the few line ends of a head without a byte-at-a-time
    // loop (which cost a few hundred instructions per head).
    memchr::memchr_iter(b'\n', bytes).any(|i| i == 0 || bytes[i - 1] != b'\r')
}

/// [`has_bare_lf`] for a head httparse read in full, given where each of
/// its field names starts (offsets in `head`, in order). httparse lets an
/// LF appear in such a head only as a line's end, so the line ends are
/// known without a search: just before each name (the end of the line
/// before it) and the last two (the last line's and the empty line's).
/// Empty lines before the first line, which httparse skips, are looked at
/// with [`has_bare_lf`]. The unit tests hold the two to the same answer.
pub fn has_bare_lf_at_line_ends(head: &[u8], name_starts: impl Iterator<Item = usize>) -> bool {
    if matches!(head.first(), Some(b'\r' | b'\n')) {
        return has_bare_lf(head);
    }
    !head.ends_with(b"\r\n\r\n")
        || name_starts
            .into_iter()
            .any(|start| start < 2 || head.get(start - 2) != Some(&b'\r'))
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(lines: &[(&'static str, &'static str)]) -> Vec<httparse::Header<'static>> {
        lines
            .iter()
            .map(|(name, value)| httparse::Header {
                name,
                value: value.as_bytes(),
            })
            .collect()
    }

    #[test]
    fn requests_frame_strictly() {
        let request = |lines: &[(&'static str, &'static str)]| request_body(false, &headers(lines));
        assert_eq!(request(&[]), Ok(BodyLength::Empty));
        assert_eq!(
            request(&[("Content-Length", "42")]),
            Ok(BodyLength::Length(42))
        );
        assert_eq!(
            request(&[("content-length", "42"), ("Content-Length", "42")]),
            Ok(BodyLength::Length(42))
        );
        assert_eq!(
            request(&[("Content-Length", "42, 42")]),
            Err(FramingError::BadLength)
        );
        assert_eq!(
            request(&[("Transfer-Encoding", "Chunked")]),
            Ok(BodyLength::Chunked)
        );
        assert_eq!(
            request(&[("Transfer-Encoding", "gzip, chunked")]),
            Err(FramingError::UnsupportedCoding)
        );
        assert_eq!(
            request(&[
                ("Transfer-Encoding", "gzip"),
                ("transfer-encoding", "CHUNKED")
            ]),
            Err(FramingError::UnsupportedCoding)
        );
        for (lines, error) in [
            (
                &[("Content-Length", "3"), ("Transfer-Encoding", "chunked")][..],
                FramingError::LengthAndTransferEncoding,
            ),
            (
                &[("Content-Length", "3"), ("Content-Length", "4")],
                FramingError::DifferingLengths,
            ),
            (&[("Content-Length", "3, 4")], FramingError::BadLength),
            (&[("Content-Length", "+3")], FramingError::BadLength),
            (&[("Content-Length", "3 3")], FramingError::BadLength),
            (&[("Content-Length", "")], FramingError::BadLength),
            (
                &[("Content-Length", "99999999999999999999")],
                FramingError::BadLength,
            ),
            (
                &[("Transfer-Encoding", "chunked, gzip")],
                FramingError::NotChunked,
            ),
            (
                &[("Transfer-Encoding", "chunked, chunked")],
                FramingError::ChunkedTwice,
            ),
            (
                &[("Transfer-Encoding", "xchunked")],
                FramingError::NotChunked,
            ),
            (
                &[("Transfer-Encoding", "chunked\x0b")],
                FramingError::NotChunked,
            ),
            (&[("Transfer-Encoding", "")], FramingError::NotChunked),
            (
                &[("Transfer-Encoding", "\u{92} gzip, chunked")],
                FramingError::NotChunked,
            ),
            (
                &[("Transfer-Encoding", "gzip;q=1, chunked")],
                FramingError::NotChunked,
            ),
            (
                &[("Transfer-Encoding", "chunked,")],
                FramingError::NotChunked,
            ),
            (
                &[("Transfer-Encoding", ", chunked")],
                FramingError::NotChunked,
            ),
        ] {
            assert_eq!(request(lines), Err(error), "{lines:?}");
        }
        assert_eq!(
            request_body(true, &headers(&[("Transfer-Encoding", "chunked")])),
            Err(FramingError::TransferEncodingInHttp10)
        );
    }

    #[test]
    fn responses_without_a_body_ignore_their_fields() {
        let fields = headers(&[("Content-Length", "10")]);
        for (to_head, status) in [(true, 200), (false, 204), (false, 304), (false, 100)] {
            assert_eq!(
                response_body(to_head, status, false, &fields),
                Ok(BodyLength::Empty)
            );
        }
        assert_eq!(
            response_body(false, 200, false, &[]),
            Ok(BodyLength::UntilClose)
        );
        assert_eq!(
            response_body(
                false,
                200,
                false,
                &headers(&[("Transfer-Encoding", "gzip")])
            ),
            Err(FramingError::UnsupportedCoding)
        );
        assert_eq!(
            response_body(
                false,
                200,
                false,
                &headers(&[("Transfer-Encoding", "chunked"), ("Content-Length", "3")])
            ),
            Err(FramingError::LengthAndTransferEncoding)
        );
    }

    /// Decodes `input` fed in pieces of `piece` bytes; the data, and the
    /// trailer fields.
    fn decode(input: &[u8], piece: usize) -> Result<(Vec<u8>, Vec<u8>), FramingError> {
        let mut decoder = ChunkedDecoder::default();
        let mut data = Vec::new();
        let mut trailers = Vec::new();
        let mut buffered: Vec<u8> = Vec::new();
        let mut fed = 0;
        while !decoder.is_done() {
            match decoder.step(&buffered)? {
                Step::NeedMore => {
                    if fed == input.len() {
                        return Err(FramingError::BadLineEnd);
                    }
                    let end = (fed + piece).min(input.len());
                    buffered.extend_from_slice(&input[fed..end]);
                    fed = end;
                }
                Step::Framing(n) => {
                    buffered.drain(..n);
                }
                Step::Data(n) => data.extend(buffered.drain(..n)),
                Step::Trailers { n, fields } => {
                    trailers.extend_from_slice(&buffered[fields]);
                    buffered.drain(..n);
                }
            }
        }
        assert!(
            buffered.is_empty() && fed == input.len(),
            "bytes after the end"
        );
        Ok((data, trailers))
    }

    #[test]
    fn chunked_bodies_decode_in_any_pieces() {
        let input = b"5;name=\"v\"\r\nhello\r\nA\r\n0123456789\r\n0\r\nx-sum: 1\r\n\r\n";
        for piece in 1..input.len() {
            let (data, trailers) = decode(input, piece).unwrap();
            assert_eq!(data, b"hello0123456789");
            assert_eq!(trailers, b"x-sum: 1\r\n");
        }
        assert_eq!(decode(b"0\r\n\r\n", 1).unwrap().0, b"");
        assert_eq!(decode(b"000\r\n\r\n", 3).unwrap().0, b"");
    }

    #[test]
    fn chunk_smuggling_shapes_are_refused() {
        for (input, error) in [
            (&b"\r\n"[..], FramingError::BadChunkSize),
            (b"-5\r\nhello\r\n0\r\n\r\n", FramingError::BadChunkSize),
            (b"0x5\r\nhello\r\n0\r\n\r\n", FramingError::BadChunkSize),
            (b"5 \r\nhello\r\n0\r\n\r\n", FramingError::BadChunkSize),
            (b"1000000000000000\r\n", FramingError::BadChunkSize),
            (b"5\nhello\r\n0\r\n\r\n", FramingError::BadChunkSize),
            (b"5\r\rhello\r\n0\r\n\r\n", FramingError::BadLineEnd),
            (b"5\r\nhelloX\r\n0\r\n\r\n", FramingError::BadLineEnd),
            (b"5\r\nhello\n0\r\n\r\n", FramingError::BadLineEnd),
            (
                b"5;a\nb\r\nhello\r\n0\r\n\r\n",
                FramingError::BadChunkExtension,
            ),
            (
                b"5;\x00\r\nhello\r\n0\r\n\r\n",
                FramingError::BadChunkExtension,
            ),
            (b"0\r\nx: 1\n\r\n", FramingError::BadTrailer),
            (b"0\r\nbad header\r\n\r\n", FramingError::BadTrailer),
        ] {
            assert_eq!(
                decode(input, input.len()),
                Err(error),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
        let mut long = b"1;".to_vec();
        long.resize(MAX_CHUNK_EXTENSIONS + 3, b'a');
        long.extend_from_slice(b"\r\nx\r\n0\r\n\r\n");
        assert_eq!(decode(&long, 4096), Err(FramingError::BadChunkExtension));
    }

    #[test]
    fn the_decoder_stops_at_the_end_of_its_body() {
        // What follows the body is the next message's, never body data.
        let mut decoder = ChunkedDecoder::default();
        let input = b"1\r\nx\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
        let mut at = 0;
        while !decoder.is_done() {
            match decoder.step(&input[at..]).unwrap() {
                Step::Framing(n) | Step::Data(n) | Step::Trailers { n, .. } => at += n,
                Step::NeedMore => panic!("all there"),
            }
        }
        assert_eq!(&input[at..], b"GET / HTTP/1.1\r\n");
    }
}
