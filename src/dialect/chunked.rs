//! aws-chunked bodies (`x-amz-content-sha256:
//! STREAMING-AWS4-HMAC-SHA256-PAYLOAD` and `...-PAYLOAD-TRAILER`): every
//! chunk signed, each signature chained to the one before, starting at the
//! seed (the `Authorization` header's signature).
//!
//! ```text
//! 10000;chunk-signature=<64 hex>\r\n<65536 bytes>\r\n
//! 400;chunk-signature=<64 hex>\r\n<1024 bytes>\r\n
//! 0;chunk-signature=<64 hex>\r\n
//! x-amz-checksum-crc32c:sOO8/Q==\r\n                  (-TRAILER only)
//! x-amz-trailer-signature:<64 hex>\r\n                (-TRAILER only)
//! \r\n
//! ```
//!
//! As in HTTP/1.1 chunked coding, the zero-size chunk's line is followed by
//! the trailer section and an empty line; without trailers that is just the
//! final `\r\n`. Each chunk signs `AWS4-HMAC-SHA256-PAYLOAD\n<date>\n<scope>\n
//! <previous signature>\n<sha256 of "">\n<sha256 of the data>`; the trailer
//! signs `AWS4-HMAC-SHA256-TRAILER\n<date>\n<scope>\n<previous signature>\n
//! <sha256 of the trailer lines, each "name:value\n">`.
//!
//! [`ChunkedVerifier`] reads such a body as it arrives, in pieces of any
//! size, without I/O, and hands on each chunk only once its signature has
//! been checked. [`ChunkResigner`] writes the same framing signed with
//! another key (the gateway's credentials for the store): a signature is 64
//! hex digits either way and the size is written as wide as it came, so the
//! body's length, and its `Content-Length`, do not change.

use bytes::{Buf, Bytes, BytesMut};
use ring::digest;

use super::sigv4::{self, SigningKey, EMPTY_SHA256};

/// The longest line (chunk header or trailer line, CRLF included) accepted:
/// a chunk header is at most 99 bytes (16 hex digits, the extension, 64 hex
/// digits, CRLF); anything longer is not an honest client.
pub const MAX_LINE: usize = 512;

/// The most trailer bytes (all trailer lines but the signature) accepted.
pub const MAX_TRAILERS: usize = 4096;

/// A sensible `max_chunk` for [`ChunkedVerifier::new`]: 1 MiB. SDKs send
/// 64 KiB chunks; each chunk is held whole until its signature is checked,
/// so this bounds the memory a request can take.
pub const DEFAULT_MAX_CHUNK: usize = 1 << 20;

const CHUNK_SIGNATURE: &[u8] = b"chunk-signature=";
const TRAILER_SIGNATURE: &[u8] = b"x-amz-trailer-signature";
const CRLF: &[u8] = b"\r\n";

/// Why an aws-chunked body was refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ChunkedError {
    /// A chunk header or trailer line longer than [`MAX_LINE`].
    #[error("an aws-chunked line is longer than {0} bytes")]
    LineTooLong(usize),
    /// A chunk larger than the verifier's `max_chunk`.
    #[error("an aws-chunked chunk of {size} bytes is larger than the {max} allowed")]
    ChunkTooLarge {
        /// The chunk's declared size.
        size: u64,
        /// The largest allowed.
        max: usize,
    },
    /// The framing is not aws-chunked's.
    #[error("the aws-chunked body is malformed: {0}")]
    Malformed(&'static str),
    /// A chunk's signature is not the one its data and the chain call for.
    #[error("the signature of an aws-chunked chunk does not match")]
    ChunkSignatureMismatch,
    /// The trailer's signature is not the one its lines and the chain call for.
    #[error("the signature of the aws-chunked trailer does not match")]
    TrailerSignatureMismatch,
    /// The trailer lines are longer than [`MAX_TRAILERS`] in all.
    #[error("the aws-chunked trailers are longer than {0} bytes")]
    TrailersTooLarge(usize),
    /// Bytes after the body's end.
    #[error("bytes follow the end of the aws-chunked body")]
    TrailingData,
    /// The body ended before its final chunk (and trailer) was complete.
    #[error("the aws-chunked body ends before its final chunk")]
    Truncated,
}

/// One chunk, its signature verified (or, for [`ChunkResigner`], to sign).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The chunk's data; empty for the final chunk (and only for it).
    pub data: Bytes,
    /// The SHA-256 of `data`, so the re-signer does not hash it again.
    pub sha256: [u8; 32],
    /// How many hex digits the size was written with; the re-signer writes
    /// as many (leading zeros included) so the body's length is unchanged.
    pub size_digits: usize,
}

impl Chunk {
    /// A chunk of `data` (empty: the final chunk), hashed, its size to be
    /// written in as few digits as it takes.
    pub fn new(data: Bytes) -> Chunk {
        let sha256 = sigv4::sha256(&data);
        let size_digits = hex_digits(data.len());
        Chunk {
            data,
            sha256,
            size_digits,
        }
    }

    /// Whether this is the zero-size chunk that ends the data.
    pub fn is_final(&self) -> bool {
        self.data.is_empty()
    }
}

/// The trailer section of a `-TRAILER` body, its signature verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trailer {
    /// The trailer lines as they came (each `name:value\r\n`), without the
    /// signature line.
    pub lines: Bytes,
    /// The SHA-256 of the lines in signed form (each `name:value\n`, the
    /// name lowercase, the value trimmed), so the re-signer does not
    /// hash them again.
    pub sha256: [u8; 32],
}

impl Trailer {
    /// A trailer of `fields` (name, value), written `name:value\r\n` each.
    /// Names and values must be header text (no CR or LF); what they are is
    /// the caller's, as in an `x-amz-trailer` header it signed.
    pub fn new(fields: &[(&str, &str)]) -> Trailer {
        let mut lines = BytesMut::new();
        let mut canonical = digest::Context::new(&digest::SHA256);
        for (name, value) in fields {
            lines.extend_from_slice(name.as_bytes());
            lines.extend_from_slice(b":");
            lines.extend_from_slice(value.as_bytes());
            lines.extend_from_slice(CRLF);
            add_canonical_trailer(&mut canonical, name.as_bytes(), value.as_bytes());
        }
        Trailer {
            lines: lines.freeze(),
            sha256: digest_array(canonical.finish()),
        }
    }

    /// The trailer's fields, `(name, value)`, the value trimmed.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &str)> {
        std::str::from_utf8(&self.lines)
            .unwrap_or_default()
            .split("\r\n")
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name, value.trim_matches([' ', '\t'])))
    }
}

/// What [`ChunkedVerifier::feed`] yields, in body order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A chunk whose signature matched; the last one is empty.
    Chunk(Chunk),
    /// The trailer section, its signature matched (`-TRAILER` only).
    Trailer(Trailer),
    /// The body's final `\r\n`: the body is complete and verified.
    End,
}

/// The signature chain both sides keep: key, time, scope, the previous
/// signature, and a buffer for strings to sign (reused: no allocation per
/// chunk).
struct SignatureChain {
    key: SigningKey,
    amz_date: String,
    scope: String,
    previous: [u8; 32],
    to_sign: Vec<u8>,
}

impl SignatureChain {
    fn new(key: SigningKey, amz_date: &str, scope: &str, seed: [u8; 32]) -> SignatureChain {
        SignatureChain {
            key,
            amz_date: amz_date.to_owned(),
            scope: scope.to_owned(),
            previous: seed,
            to_sign: Vec::with_capacity(256),
        }
    }

    /// Fills `to_sign` with the string to sign of a chunk or the trailer.
    fn prepare(&mut self, algorithm: &[u8], empty_hash: bool, hash: &[u8; 32]) {
        let out = &mut self.to_sign;
        out.clear();
        out.extend_from_slice(algorithm);
        out.push(b'\n');
        out.extend_from_slice(self.amz_date.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(self.scope.as_bytes());
        out.push(b'\n');
        push_hex(out, &self.previous);
        out.push(b'\n');
        if empty_hash {
            out.extend_from_slice(EMPTY_SHA256.as_bytes());
            out.push(b'\n');
        }
        push_hex(out, hash);
    }

    fn prepare_chunk(&mut self, data_sha256: &[u8; 32]) {
        self.prepare(b"AWS4-HMAC-SHA256-PAYLOAD", true, data_sha256);
    }

    fn prepare_trailer(&mut self, trailer_sha256: &[u8; 32]) {
        self.prepare(b"AWS4-HMAC-SHA256-TRAILER", false, trailer_sha256);
    }

    /// Checks `claimed` in constant time; on a match it is the new previous.
    fn verify(&mut self, claimed: &[u8; 32]) -> bool {
        let ok = self.key.verify(&self.to_sign, claimed);
        if ok {
            self.previous = *claimed;
        }
        ok
    }

    fn sign(&mut self) -> [u8; 32] {
        self.previous = self.key.sign(&self.to_sign);
        self.previous
    }
}

enum AwsChunkState {
    /// Awaiting a chunk header line.
    Header,
    /// Awaiting a chunk's data and its CRLF.
    Data {
        size: usize,
        size_digits: usize,
        claimed: [u8; 32],
    },
    /// Awaiting trailer lines: `kept` bytes of checked lines are at the
    /// front of the buffer, their signed form hashed into `canonical`.
    Trailers {
        kept: usize,
        canonical: digest::Context,
    },
    /// Awaiting the final CRLF.
    End,
    /// Complete.
    Done,
}

impl AwsChunkState {
    /// What `Debug` shows of the state (a digest context has no `Debug`).
    fn name(&self) -> &'static str {
        match self {
            AwsChunkState::Header => "header",
            AwsChunkState::Data { .. } => "data",
            AwsChunkState::Trailers { .. } => "trailers",
            AwsChunkState::End => "end",
            AwsChunkState::Done => "done",
        }
    }
}

/// Verifies an aws-chunked body as it arrives: feed it the body in pieces
/// of any size, get back the chunks whose signatures matched. Holds one
/// chunk at most (its data is only handed on once verified), so memory is
/// bounded by `max_chunk` and the size of the pieces fed.
pub struct ChunkedVerifier {
    chain: SignatureChain,
    trailer: bool,
    max_chunk: usize,
    buffer: BytesMut,
    state: AwsChunkState,
    decoded: u64,
    failed: Option<ChunkedError>,
}

impl std::fmt::Debug for ChunkedVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkedVerifier")
            .field("trailer", &self.trailer)
            .field("max_chunk", &self.max_chunk)
            .field("buffered", &self.buffer.len())
            .field("state", &self.state.name())
            .field("decoded", &self.decoded)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl ChunkedVerifier {
    /// A verifier for a body whose request was signed with `key` at
    /// `amz_date` (`X-Amz-Date`) in `scope` (`date/region/service/aws4_request`),
    /// with the request's signature as `seed`. `trailer`: the body is
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`. `max_chunk`: the largest
    /// chunk accepted ([`DEFAULT_MAX_CHUNK`]).
    pub fn new(
        key: SigningKey,
        amz_date: &str,
        scope: &str,
        seed: [u8; 32],
        trailer: bool,
        max_chunk: usize,
    ) -> ChunkedVerifier {
        ChunkedVerifier {
            chain: SignatureChain::new(key, amz_date, scope, seed),
            trailer,
            max_chunk,
            buffer: BytesMut::new(),
            state: AwsChunkState::Header,
            decoded: 0,
            failed: None,
        }
    }

    /// Takes the next piece of the body and appends to `events` what it
    /// completes. After an error the body is refused for good: every later
    /// call returns the same error (chunks already appended were verified).
    pub fn feed(&mut self, input: &[u8], events: &mut Vec<Event>) -> Result<(), ChunkedError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        self.buffer.extend_from_slice(input);
        let result = self.advance(events);
        if let Err(error) = &result {
            self.failed = Some(error.clone());
            // Nothing more is read; what is held is released.
            self.buffer = BytesMut::new();
        }
        result
    }

    /// Says whether the body was complete when it ended: call it at the end
    /// of the request body.
    pub fn finish(&self) -> Result<(), ChunkedError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        match self.state {
            AwsChunkState::Done => Ok(()),
            _ => Err(ChunkedError::Truncated),
        }
    }

    /// Whether the body is complete (its final `\r\n` read).
    pub fn is_done(&self) -> bool {
        matches!(self.state, AwsChunkState::Done)
    }

    /// The data bytes verified so far: at the end, what
    /// `x-amz-decoded-content-length` must say.
    pub fn decoded_len(&self) -> u64 {
        self.decoded
    }

    /// The last signature verified (the seed before any): what a chunk
    /// signature chain continues from.
    pub fn last_signature(&self) -> [u8; 32] {
        self.chain.previous
    }

    fn advance(&mut self, events: &mut Vec<Event>) -> Result<(), ChunkedError> {
        loop {
            match &mut self.state {
                AwsChunkState::Header => {
                    let Some(line_len) = line_length(&self.buffer, 0)? else {
                        return Ok(());
                    };
                    let (size, size_digits, claimed) =
                        parse_chunk_header(&self.buffer[..line_len], self.max_chunk)?;
                    self.buffer.advance(line_len + 2);
                    if size == 0 {
                        let empty = sigv4::sha256(b"");
                        self.chain.prepare_chunk(&empty);
                        if !self.chain.verify(&claimed) {
                            return Err(ChunkedError::ChunkSignatureMismatch);
                        }
                        events.push(Event::Chunk(Chunk {
                            data: Bytes::new(),
                            sha256: empty,
                            size_digits,
                        }));
                        self.state = if self.trailer {
                            AwsChunkState::Trailers {
                                kept: 0,
                                canonical: digest::Context::new(&digest::SHA256),
                            }
                        } else {
                            AwsChunkState::End
                        };
                    } else {
                        self.state = AwsChunkState::Data {
                            size,
                            size_digits,
                            claimed,
                        };
                    }
                }
                AwsChunkState::Data {
                    size,
                    size_digits,
                    claimed,
                } => {
                    let (size, size_digits, claimed) = (*size, *size_digits, *claimed);
                    if self.buffer.len() < size + 2 {
                        // Room for the rest of the chunk, once, rather than
                        // growing piece by piece.
                        self.buffer.reserve(size + 2 - self.buffer.len());
                        return Ok(());
                    }
                    if &self.buffer[size..size + 2] != CRLF {
                        return Err(ChunkedError::Malformed(
                            "a chunk's data is not followed by CRLF",
                        ));
                    }
                    let sha256 = sigv4::sha256(&self.buffer[..size]);
                    self.chain.prepare_chunk(&sha256);
                    if !self.chain.verify(&claimed) {
                        return Err(ChunkedError::ChunkSignatureMismatch);
                    }
                    let data = self.buffer.split_to(size).freeze();
                    self.buffer.advance(2);
                    self.decoded += size as u64;
                    events.push(Event::Chunk(Chunk {
                        data,
                        sha256,
                        size_digits,
                    }));
                    self.state = AwsChunkState::Header;
                }
                AwsChunkState::Trailers { kept, canonical } => {
                    let Some(line_len) = line_length(&self.buffer, *kept)? else {
                        return Ok(());
                    };
                    let line = &self.buffer[*kept..*kept + line_len];
                    let Some((name, value)) = split_trailer_line(line) else {
                        return Err(ChunkedError::Malformed(if line.is_empty() {
                            "the trailer has no x-amz-trailer-signature"
                        } else {
                            "a trailer line is not name:value"
                        }));
                    };
                    if name.eq_ignore_ascii_case(TRAILER_SIGNATURE) {
                        let claimed = sigv4::parse_hex32(trim_ows(value)).ok_or(
                            ChunkedError::Malformed("the trailer signature is not 64 hex digits"),
                        )?;
                        let sha256 = digest_array(canonical.clone().finish());
                        self.chain.prepare_trailer(&sha256);
                        if !self.chain.verify(&claimed) {
                            return Err(ChunkedError::TrailerSignatureMismatch);
                        }
                        let lines = self.buffer.split_to(*kept).freeze();
                        self.buffer.advance(line_len + 2);
                        events.push(Event::Trailer(Trailer { lines, sha256 }));
                        self.state = AwsChunkState::End;
                    } else {
                        if *kept + line_len + 2 > MAX_TRAILERS {
                            return Err(ChunkedError::TrailersTooLarge(MAX_TRAILERS));
                        }
                        add_canonical_trailer(canonical, name, value);
                        *kept += line_len + 2;
                    }
                }
                AwsChunkState::End => {
                    if self.buffer.len() < 2 {
                        if self.buffer.first().is_some_and(|&b| b != b'\r') {
                            return Err(self.end_error());
                        }
                        return Ok(());
                    }
                    if &self.buffer[..2] != CRLF {
                        return Err(self.end_error());
                    }
                    self.buffer.advance(2);
                    events.push(Event::End);
                    self.state = AwsChunkState::Done;
                }
                AwsChunkState::Done => {
                    if self.buffer.is_empty() {
                        return Ok(());
                    }
                    return Err(ChunkedError::TrailingData);
                }
            }
        }
    }

    fn end_error(&self) -> ChunkedError {
        ChunkedError::Malformed(if self.trailer {
            "the trailer signature is not followed by an empty line"
        } else {
            "the final chunk is followed by more than CRLF (trailers in a body without them?)"
        })
    }
}

/// Writes aws-chunked framing signed with its own key, scope, time and seed:
/// feed it the [`Event`]s a [`ChunkedVerifier`] yields (or [`Chunk::new`]s
/// and [`Trailer::new`] for a body of the gateway's own) and send what it
/// appends.
pub struct ChunkResigner {
    chain: SignatureChain,
}

impl std::fmt::Debug for ChunkResigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkResigner")
            .field("amz_date", &self.chain.amz_date)
            .field("scope", &self.chain.scope)
            .finish_non_exhaustive()
    }
}

impl ChunkResigner {
    /// A signer with `key`, at `amz_date` in `scope`, whose chain starts at
    /// `seed`: the signature of the request it forwards the body with.
    pub fn new(key: SigningKey, amz_date: &str, scope: &str, seed: [u8; 32]) -> ChunkResigner {
        ChunkResigner {
            chain: SignatureChain::new(key, amz_date, scope, seed),
        }
    }

    /// Appends the framing of `event`, signed, to `out` as pieces to send in
    /// order: a chunk's data is shared, not copied.
    pub fn resign(&mut self, event: &Event, out: &mut Vec<Bytes>) {
        match event {
            Event::Chunk(chunk) => {
                self.chain.prepare_chunk(&chunk.sha256);
                let signature = self.chain.sign();
                let mut header = Vec::with_capacity(chunk.size_digits + CHUNK_SIGNATURE.len() + 67);
                push_size(&mut header, chunk.data.len(), chunk.size_digits);
                header.push(b';');
                header.extend_from_slice(CHUNK_SIGNATURE);
                push_hex(&mut header, &signature);
                header.extend_from_slice(CRLF);
                out.push(Bytes::from(header));
                if !chunk.data.is_empty() {
                    out.push(chunk.data.clone());
                    out.push(Bytes::from_static(CRLF));
                }
            }
            Event::Trailer(trailer) => {
                self.chain.prepare_trailer(&trailer.sha256);
                let signature = self.chain.sign();
                if !trailer.lines.is_empty() {
                    out.push(trailer.lines.clone());
                }
                let mut line = Vec::with_capacity(TRAILER_SIGNATURE.len() + 67);
                line.extend_from_slice(TRAILER_SIGNATURE);
                line.push(b':');
                push_hex(&mut line, &signature);
                line.extend_from_slice(CRLF);
                out.push(Bytes::from(line));
            }
            Event::End => out.push(Bytes::from_static(CRLF)),
        }
    }

    /// The last signature written (the seed before any).
    pub fn last_signature(&self) -> [u8; 32] {
        self.chain.previous
    }
}

/// The length of the line starting at `from` (without its CRLF), if the
/// buffer holds all of it.
fn line_length(buffer: &[u8], from: usize) -> Result<Option<usize>, ChunkedError> {
    let rest = &buffer[from..];
    let window = &rest[..rest.len().min(MAX_LINE)];
    match window.iter().position(|&b| b == b'\n') {
        Some(lf) => {
            if lf == 0 || rest[lf - 1] != b'\r' {
                return Err(ChunkedError::Malformed("a line does not end in CRLF"));
            }
            Ok(Some(lf - 1))
        }
        None if rest.len() >= MAX_LINE => Err(ChunkedError::LineTooLong(MAX_LINE)),
        None => Ok(None),
    }
}

/// Parses `hex-size;chunk-signature=<64 hex>` into the size, the number of
/// digits it was written with, and the claimed signature.
fn parse_chunk_header(
    line: &[u8],
    max_chunk: usize,
) -> Result<(usize, usize, [u8; 32]), ChunkedError> {
    let Some(semicolon) = line.iter().position(|&b| b == b';') else {
        return Err(ChunkedError::Malformed(
            "a chunk header has no chunk-signature",
        ));
    };
    let (digits, extension) = (&line[..semicolon], &line[semicolon + 1..]);
    if digits.is_empty() || digits.len() > 16 {
        return Err(ChunkedError::Malformed(
            "a chunk size is not 1 to 16 hex digits",
        ));
    }
    let mut size: u64 = 0;
    for &b in digits {
        let Some(value) = hex_value(b) else {
            return Err(ChunkedError::Malformed("a chunk size is not hexadecimal"));
        };
        size = (size << 4) | u64::from(value);
    }
    let Some(signature) = extension.strip_prefix(CHUNK_SIGNATURE) else {
        return Err(ChunkedError::Malformed(
            "a chunk header's extension is not chunk-signature=",
        ));
    };
    let claimed = sigv4::parse_hex32(signature).ok_or(ChunkedError::Malformed(
        "a chunk signature is not 64 hex digits",
    ))?;
    match usize::try_from(size) {
        Ok(size) if size <= max_chunk => Ok((size, digits.len(), claimed)),
        _ => Err(ChunkedError::ChunkTooLarge {
            size,
            max: max_chunk,
        }),
    }
}

/// Splits `name:value`: the name a header token, the value visible ASCII,
/// spaces and tabs.
fn split_trailer_line(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = line.iter().position(|&b| b == b':')?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    // ASCII only: trailers are checksums, and `Trailer::fields` reads text.
    let text = |b: &u8| *b == b'\t' || (b' '..=b'~').contains(b);
    (!name.is_empty() && name.iter().all(token) && value.iter().all(text)).then_some((name, value))
}

/// Hashes a trailer line in its signed form: `name:value\n`, the name
/// lowercase, the value trimmed (as SDKs canonicalise headers).
fn add_canonical_trailer(canonical: &mut digest::Context, name: &[u8], value: &[u8]) {
    let mut lower = [0u8; 64];
    for piece in name.chunks(lower.len()) {
        let lower = &mut lower[..piece.len()];
        lower.copy_from_slice(piece);
        lower.make_ascii_lowercase();
        canonical.update(lower);
    }
    canonical.update(b":");
    canonical.update(trim_ows(value));
    canonical.update(b"\n");
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

fn digest_array(digest: digest::Digest) -> [u8; 32] {
    let mut out = [0u8; 32];
    let bytes = digest.as_ref();
    let n = bytes.len().min(32);
    out[..n].copy_from_slice(&bytes[..n]);
    out
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 0x0f)]);
    }
}

/// How many hex digits `size` takes (one for zero).
fn hex_digits(size: usize) -> usize {
    let bits = usize::BITS - size.leading_zeros();
    (bits as usize).div_ceil(4).max(1)
}

/// Writes `size` in lowercase hex, zero-padded to `width` digits.
fn push_size(out: &mut Vec<u8>, size: usize, width: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = hex_digits(size);
    out.extend(std::iter::repeat_n(b'0', width.saturating_sub(digits)));
    for i in (0..digits).rev() {
        out.push(HEX[(size >> (i * 4)) & 0x0f]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::sigv4::{parse_hex32, signing_key};
    use proptest::prelude::*;

    const AMZ_DATE: &str = "20130524T000000Z";
    const SCOPE: &str = "20130524/us-east-1/s3/aws4_request";

    fn aws_key() -> SigningKey {
        signing_key(
            b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "20130524",
            "us-east-1",
            "s3",
        )
    }

    fn other_key() -> SigningKey {
        signing_key(b"gateway's own secret", "20130524", "eu-west-1", "s3")
    }

    fn sig(text: &str) -> [u8; 32] {
        parse_hex32(text.as_bytes()).unwrap()
    }

    /// AWS's example body: 65536 and 1024 bytes of 'a' and the final chunk,
    /// with the example's chunk signatures (and trailer, if given).
    fn aws_body(signatures: [&str; 3], trailer: Option<(&str, &str)>) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(format!("10000;chunk-signature={}\r\n", signatures[0]).as_bytes());
        body.extend(std::iter::repeat_n(b'a', 65_536));
        body.extend_from_slice(format!("\r\n400;chunk-signature={}\r\n", signatures[1]).as_bytes());
        body.extend(std::iter::repeat_n(b'a', 1_024));
        body.extend_from_slice(format!("\r\n0;chunk-signature={}\r\n", signatures[2]).as_bytes());
        if let Some((line, signature)) = trailer {
            body.extend_from_slice(
                format!("{line}\r\nx-amz-trailer-signature:{signature}\r\n").as_bytes(),
            );
        }
        body.extend_from_slice(b"\r\n");
        body
    }

    /// Feeds `body` in pieces cut at `cuts` and returns the events.
    fn verify_in_pieces(
        verifier: &mut ChunkedVerifier,
        body: &[u8],
        cuts: &[usize],
    ) -> Result<Vec<Event>, ChunkedError> {
        let mut events = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
            let cut = cut.clamp(from, body.len());
            verifier.feed(&body[from..cut], &mut events)?;
            from = cut;
        }
        verifier.finish()?;
        Ok(events)
    }

    fn data_of(events: &[Event]) -> Vec<u8> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Chunk(chunk) => Some(chunk.data.to_vec()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    fn resign_all(resigner: &mut ChunkResigner, events: &[Event]) -> Vec<u8> {
        let mut pieces = Vec::new();
        for event in events {
            resigner.resign(event, &mut pieces);
        }
        pieces.concat()
    }

    /// AWS's example "Signature Calculations for the Authorization Header:
    /// Transferring Payload in Multiple Chunks".
    #[test]
    fn aws_example_streaming() {
        let signatures = [
            "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
            "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
            "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
        ];
        let body = aws_body(signatures, None);
        assert_eq!(body.len(), 66_824, "the example's Content-Length");
        let seed = sig("4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9");
        let mut verifier =
            ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, false, DEFAULT_MAX_CHUNK);
        let events = verify_in_pieces(&mut verifier, &body, &[]).unwrap();
        assert_eq!(events.len(), 4);
        assert_eq!(data_of(&events), vec![b'a'; 66_560]);
        assert_eq!(verifier.decoded_len(), 66_560);
        assert_eq!(verifier.last_signature(), sig(signatures[2]));
        assert!(
            matches!(&events[2], Event::Chunk(c) if c.is_final() && c.sha256 == sigv4::sha256(b""))
        );
        assert_eq!(events[3], Event::End);
        assert!(verifier.is_done());

        // Re-signed with the same key and seed, it is the same body.
        let mut resigner = ChunkResigner::new(aws_key(), AMZ_DATE, SCOPE, seed);
        assert_eq!(resign_all(&mut resigner, &events), body);
        assert_eq!(resigner.last_signature(), sig(signatures[2]));

        // Byte by byte, the same.
        let mut verifier =
            ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, false, DEFAULT_MAX_CHUNK);
        let cuts: Vec<usize> = (1..body.len()).collect();
        assert_eq!(
            verify_in_pieces(&mut verifier, &body, &cuts).unwrap(),
            events
        );

        // Another seed: the first chunk no longer matches.
        let mut verifier = ChunkedVerifier::new(
            aws_key(),
            AMZ_DATE,
            SCOPE,
            [0; 32],
            false,
            DEFAULT_MAX_CHUNK,
        );
        assert_eq!(
            verify_in_pieces(&mut verifier, &body, &[]),
            Err(ChunkedError::ChunkSignatureMismatch)
        );
    }

    /// AWS's example "Signature calculations for trailing headers (chunked
    /// uploads)": the same data with a CRC32C trailer.
    #[test]
    fn aws_example_streaming_trailer() {
        let body = aws_body(
            [
                "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
                "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
                "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
            ],
            Some((
                "x-amz-checksum-crc32c:sOO8/Q==",
                "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435",
            )),
        );
        let seed = sig("106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e");
        let mut verifier =
            ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, true, DEFAULT_MAX_CHUNK);
        let events = verify_in_pieces(&mut verifier, &body, &[]).unwrap();
        assert_eq!(events.len(), 5);
        let Event::Trailer(trailer) = &events[3] else {
            panic!("expected the trailer, got {:?}", events[3]);
        };
        assert_eq!(&trailer.lines[..], b"x-amz-checksum-crc32c:sOO8/Q==\r\n");
        assert_eq!(
            trailer.fields().collect::<Vec<_>>(),
            [("x-amz-checksum-crc32c", "sOO8/Q==")]
        );
        assert_eq!(
            *trailer,
            Trailer::new(&[("x-amz-checksum-crc32c", "sOO8/Q==")])
        );
        assert_eq!(
            sigv4::hex(&trailer.sha256),
            "1e376db7e1a34a8ef1c4bcee131a2d60a1cb62503747488624e10995f448d774"
        );
        let mut resigner = ChunkResigner::new(aws_key(), AMZ_DATE, SCOPE, seed);
        assert_eq!(resign_all(&mut resigner, &events), body);

        // The same body read as one without trailers is refused.
        let mut verifier =
            ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, false, DEFAULT_MAX_CHUNK);
        assert!(matches!(
            verify_in_pieces(&mut verifier, &body, &[]),
            Err(ChunkedError::Malformed(_))
        ));
    }

    /// A body of the given chunk sizes (and trailer), signed with `key`.
    fn signed_body(
        key: SigningKey,
        seed: [u8; 32],
        sizes: &[usize],
        trailer: Option<&Trailer>,
    ) -> Vec<u8> {
        let mut resigner = ChunkResigner::new(key, AMZ_DATE, SCOPE, seed);
        let mut events: Vec<Event> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let data: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
                Event::Chunk(Chunk::new(Bytes::from(data)))
            })
            .collect();
        events.push(Event::Chunk(Chunk::new(Bytes::new())));
        if let Some(trailer) = trailer {
            events.push(Event::Trailer(trailer.clone()));
        }
        events.push(Event::End);
        resign_all(&mut resigner, &events)
    }

    #[test]
    fn round_trip_through_another_key() {
        let seed_a = [7u8; 32];
        let seed_b = [9u8; 32];
        let trailer = Trailer::new(&[
            ("x-amz-checksum-crc32", "AAAAAA=="),
            ("x-amz-meta-x", " padded "),
        ]);
        for with_trailer in [false, true] {
            let trailer = with_trailer.then_some(&trailer);
            let body_a = signed_body(aws_key(), seed_a, &[8192, 1, 300], trailer);
            let mut verifier_a = ChunkedVerifier::new(
                aws_key(),
                AMZ_DATE,
                SCOPE,
                seed_a,
                with_trailer,
                DEFAULT_MAX_CHUNK,
            );
            let events = verify_in_pieces(&mut verifier_a, &body_a, &[100, 5000, 8300]).unwrap();

            let mut resigner = ChunkResigner::new(other_key(), AMZ_DATE, SCOPE, seed_b);
            let body_b = resign_all(&mut resigner, &events);
            assert_eq!(body_b.len(), body_a.len(), "re-signing keeps the length");
            assert_ne!(body_b, body_a);

            let mut verifier_b = ChunkedVerifier::new(
                other_key(),
                AMZ_DATE,
                SCOPE,
                seed_b,
                with_trailer,
                DEFAULT_MAX_CHUNK,
            );
            let events_b = verify_in_pieces(&mut verifier_b, &body_b, &[]).unwrap();
            assert_eq!(events_b, events);
            assert_eq!(verifier_b.decoded_len(), 8192 + 1 + 300);

            // Key A's body does not verify under key B, nor B's under A.
            let mut wrong = ChunkedVerifier::new(
                other_key(),
                AMZ_DATE,
                SCOPE,
                seed_b,
                with_trailer,
                DEFAULT_MAX_CHUNK,
            );
            assert_eq!(
                verify_in_pieces(&mut wrong, &body_a, &[]),
                Err(ChunkedError::ChunkSignatureMismatch)
            );
            let mut wrong = ChunkedVerifier::new(
                aws_key(),
                AMZ_DATE,
                SCOPE,
                seed_a,
                with_trailer,
                DEFAULT_MAX_CHUNK,
            );
            assert_eq!(
                verify_in_pieces(&mut wrong, &body_b, &[]),
                Err(ChunkedError::ChunkSignatureMismatch)
            );
        }
    }

    #[test]
    fn every_split_gives_the_same_events() {
        let seed = [3u8; 32];
        let trailer = Trailer::new(&[("x-amz-checksum-sha256", "abc=")]);
        for with_trailer in [false, true] {
            let body = signed_body(
                aws_key(),
                seed,
                &[100, 37],
                with_trailer.then_some(&trailer),
            );
            let whole = {
                let mut v =
                    ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, with_trailer, 1024);
                verify_in_pieces(&mut v, &body, &[]).unwrap()
            };
            for a in 0..=body.len() {
                let mut v =
                    ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, with_trailer, 1024);
                assert_eq!(
                    verify_in_pieces(&mut v, &body, &[a]).unwrap(),
                    whole,
                    "cut at {a}"
                );
            }
            for a in (0..=body.len()).step_by(7) {
                for b in (a..=body.len()).step_by(5) {
                    let mut v =
                        ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, with_trailer, 1024);
                    assert_eq!(
                        verify_in_pieces(&mut v, &body, &[a, b]).unwrap(),
                        whole,
                        "cut at {a}, {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn flipped_bytes_are_refused() {
        let seed = [5u8; 32];
        let trailer = Trailer::new(&[("x-amz-checksum-crc32", "AAAAAA==")]);
        let body = signed_body(aws_key(), seed, &[64, 10], Some(&trailer));
        let header_len = body.iter().position(|&b| b == b'\n').unwrap() + 1;
        let verify = |body: &[u8]| {
            let mut v = ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, true, 1024);
            verify_in_pieces(&mut v, body, &[])
        };
        assert!(verify(&body).is_ok());

        // Every byte of the first chunk's data.
        for i in header_len..header_len + 64 {
            let mut bad = body.clone();
            bad[i] ^= 0x01;
            assert_eq!(
                verify(&bad),
                Err(ChunkedError::ChunkSignatureMismatch),
                "data byte {i}"
            );
        }
        // A signature digit.
        let mut bad = body.clone();
        bad[header_len - 3] = if bad[header_len - 3] == b'0' {
            b'1'
        } else {
            b'0'
        };
        assert_eq!(verify(&bad), Err(ChunkedError::ChunkSignatureMismatch));
        // The trailer's value.
        let at = body.windows(8).position(|w| w == b"AAAAAA==").unwrap();
        let mut bad = body.clone();
        bad[at] = b'B';
        assert_eq!(verify(&bad), Err(ChunkedError::TrailerSignatureMismatch));
        // Chunks in another order, or one dropped: the chain breaks.
        let second = body[header_len..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap()
            + header_len
            + 2;
        let mut dropped = body[..0].to_vec();
        dropped.extend_from_slice(&body[second..]);
        assert_eq!(verify(&dropped), Err(ChunkedError::ChunkSignatureMismatch));
    }

    #[test]
    fn framing_is_checked() {
        let seed = [1u8; 32];
        let body = signed_body(aws_key(), seed, &[16], None);
        let verify = |body: &[u8], max: usize| {
            let mut v = ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, false, max);
            verify_in_pieces(&mut v, body, &[])
        };
        assert!(verify(&body, 16).is_ok());
        assert_eq!(
            verify(&body, 15),
            Err(ChunkedError::ChunkTooLarge { size: 16, max: 15 })
        );
        // Truncated anywhere: not complete.
        for cut in 0..body.len() {
            let mut v = ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, false, 1024);
            let mut events = Vec::new();
            v.feed(&body[..cut], &mut events).unwrap();
            assert_eq!(v.finish(), Err(ChunkedError::Truncated), "cut at {cut}");
        }
        // Anything after the end.
        let mut extra = body.clone();
        extra.push(b'x');
        assert_eq!(verify(&extra, 1024), Err(ChunkedError::TrailingData));

        let sig = "0".repeat(64);
        let malformed = |text: String| {
            let result = verify(text.as_bytes(), 1 << 20);
            assert!(
                matches!(result, Err(ChunkedError::Malformed(_))),
                "{text:?}: {result:?}"
            );
        };
        malformed(format!("10\r\n{}\r\n", "x".repeat(16)));
        malformed(format!("g;chunk-signature={sig}\r\n"));
        malformed(format!(";chunk-signature={sig}\r\n"));
        malformed(format!("10;chunk-signature={sig}\n"));
        malformed(format!("10;signature={sig}\r\n"));
        malformed(format!("10;chunk-signature={}\r\n", &sig[1..]));
        malformed(format!("10;chunk-signature={sig} \r\n"));
        malformed(format!("11111111111111111;chunk-signature={sig}\r\n"));
        malformed("\r\n".to_owned());
        assert_eq!(
            verify(
                format!("ffffffffffffffff;chunk-signature={sig}\r\n").as_bytes(),
                1 << 20
            ),
            Err(ChunkedError::ChunkTooLarge {
                size: u64::MAX,
                max: 1 << 20
            })
        );
        // The data not followed by CRLF (checked before the signature).
        let mut bad = body.clone();
        let header_len = body.iter().position(|&b| b == b'\n').unwrap() + 1;
        bad[header_len + 16] = b'x';
        assert!(matches!(
            verify(&bad, 1024),
            Err(ChunkedError::Malformed(_))
        ));

        // A header line without end.
        let long = vec![b'1'; MAX_LINE + 10];
        assert_eq!(
            verify(&long, 1024),
            Err(ChunkedError::LineTooLong(MAX_LINE))
        );
        let mut v = ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, false, 1024);
        let mut events = Vec::new();
        assert!(v.feed(&long[..MAX_LINE - 1], &mut events).is_ok());
        assert_eq!(
            v.feed(b"1", &mut events),
            Err(ChunkedError::LineTooLong(MAX_LINE))
        );
        // Refused once, refused for good.
        assert_eq!(
            v.feed(b"", &mut events),
            Err(ChunkedError::LineTooLong(MAX_LINE))
        );
        assert_eq!(v.finish(), Err(ChunkedError::LineTooLong(MAX_LINE)));
    }

    #[test]
    fn trailer_framing_is_checked() {
        let seed = [2u8; 32];
        let verify = |body: &[u8]| {
            let mut v = ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, true, 1024);
            verify_in_pieces(&mut v, body, &[])
        };
        let trailer = Trailer::new(&[("x-amz-checksum-crc32", "AAAAAA==")]);
        let body = signed_body(aws_key(), seed, &[4], Some(&trailer));
        assert!(verify(&body).is_ok());
        let text = String::from_utf8(body.clone()).unwrap();

        // No trailer signature: the empty line comes first.
        let no_signature = signed_body(aws_key(), seed, &[4], None);
        assert_eq!(
            verify(&no_signature),
            Err(ChunkedError::Malformed(
                "the trailer has no x-amz-trailer-signature"
            ))
        );
        // No empty line after the signature.
        assert_eq!(
            verify(&body[..body.len() - 2]),
            Err(ChunkedError::Truncated)
        );
        assert!(matches!(
            verify(format!("{}x\r\n", &text[..text.len() - 2]).as_bytes()),
            Err(ChunkedError::Malformed(_))
        ));
        // A line that is not name:value.
        let bad = text.replace(
            "x-amz-checksum-crc32:AAAAAA==",
            "x-amz-checksum-crc32 AAAAAA==",
        );
        assert!(matches!(
            verify(bad.as_bytes()),
            Err(ChunkedError::Malformed(_))
        ));
        let bad = text.replace("x-amz-checksum-crc32:", "bad name:");
        assert!(matches!(
            verify(bad.as_bytes()),
            Err(ChunkedError::Malformed(_))
        ));
        // A signature that is not hex.
        let bad = text.replace("x-amz-trailer-signature:", "x-amz-trailer-signature:zz");
        assert!(matches!(
            verify(bad.as_bytes()),
            Err(ChunkedError::Malformed(_))
        ));
        // Too many trailer bytes.
        let many: Vec<(String, String)> = (0..200)
            .map(|i| (format!("x-amz-meta-{i}"), "v".repeat(20)))
            .collect();
        let fields: Vec<(&str, &str)> =
            many.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let big = signed_body(aws_key(), seed, &[4], Some(&Trailer::new(&fields)));
        assert_eq!(
            verify(&big),
            Err(ChunkedError::TrailersTooLarge(MAX_TRAILERS))
        );
        // Spaces around a value and a name's case do not change what is signed.
        let spaced = Trailer::new(&[("X-Amz-Checksum-CRC32", "  AAAAAA==\t")]);
        assert_eq!(spaced.sha256, trailer.sha256);
    }

    #[test]
    fn sizes_keep_their_width() {
        assert_eq!(hex_digits(0), 1);
        assert_eq!(hex_digits(15), 1);
        assert_eq!(hex_digits(16), 2);
        assert_eq!(hex_digits(0x10000), 5);
        let mut out = Vec::new();
        push_size(&mut out, 0x400, 6);
        assert_eq!(out, b"000400");
        // A sender's leading zeros and uppercase digits survive re-signing
        // as width (the digits' case is not kept; the length is).
        let seed = [4u8; 32];
        let data = b"0123456789ABCDEFG";
        let mut chain = SignatureChain::new(aws_key(), AMZ_DATE, SCOPE, seed);
        chain.prepare_chunk(&sigv4::sha256(data));
        let first = sigv4::hex(&chain.sign());
        chain.prepare_chunk(&sigv4::sha256(b""));
        let last = sigv4::hex(&chain.sign());
        let body = format!(
            "0011;chunk-signature={first}\r\n{}\r\n000;chunk-signature={last}\r\n\r\n",
            std::str::from_utf8(data).unwrap()
        );
        let mut v = ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, false, 1024);
        let events = verify_in_pieces(&mut v, body.as_bytes(), &[]).unwrap();
        let mut resigner = ChunkResigner::new(other_key(), AMZ_DATE, SCOPE, seed);
        let resigned = resign_all(&mut resigner, &events);
        assert_eq!(resigned.len(), body.len());
        assert!(resigned.starts_with(b"0011;chunk-signature="));
    }

    proptest! {
        #[test]
        fn random_bodies_and_pieces(
            sizes in prop::collection::vec(1usize..300, 0..5),
            cuts in prop::collection::vec(0usize..2000, 0..8),
            with_trailer in any::<bool>(),
            seed in any::<[u8; 32]>(),
        ) {
            let trailer = Trailer::new(&[("x-amz-checksum-crc64nvme", "AAAAAAAAAAA=")]);
            let body = signed_body(aws_key(), seed, &sizes, with_trailer.then_some(&trailer));
            let mut cuts = cuts;
            cuts.sort_unstable();
            let mut v = ChunkedVerifier::new(aws_key(), AMZ_DATE, SCOPE, seed, with_trailer, 512);
            let events = verify_in_pieces(&mut v, &body, &cuts).unwrap();
            prop_assert_eq!(v.decoded_len(), sizes.iter().sum::<usize>() as u64);
            let mut resigner = ChunkResigner::new(other_key(), AMZ_DATE, SCOPE, seed);
            let resigned = resign_all(&mut resigner, &events);
            prop_assert_eq!(resigned.len(), body.len());
            let mut v = ChunkedVerifier::new(other_key(), AMZ_DATE, SCOPE, seed, with_trailer, 512);
            prop_assert_eq!(verify_in_pieces(&mut v, &resigned, &cuts).unwrap(), events);
        }
    }
}
