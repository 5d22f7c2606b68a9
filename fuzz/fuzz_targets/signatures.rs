//! SigV4 and aws-chunked (`fencegate::dialect::sigv4`, `::chunked`): the
//! readers of what a client sends, and the signature chain both ways.
//!
//! The input is read three ways:
//! - whole, as an `Authorization` value (bytes, and as lossy text) and as a
//!   presigned query: nothing panics; an `Authorization` that parses prints
//!   back (`header_value`) to one that parses to the same; a presigned URL
//!   that parses names a real time of its credential's day; an error's
//!   message stays short (it quotes a bounded part of the request);
//! - as a request (five control bytes, then lines: method, path, query,
//!   `host`, `name:value` headers, an empty line, the body), signed with
//!   secret A in a header and in a presigned URL: the canonical request
//!   refuses exactly the malformed `%` escapes and the header values that
//!   are not text; the signature verifies under A, as the verifier reads the
//!   header or the URL back; it never verifies under secret B (another
//!   identity's); one flipped bit of it never verifies;
//! - as an aws-chunked body: the request's body cut into chunks (sizes from
//!   its bytes, sizes written as wide as a control byte says), with the
//!   request's headers as trailer fields, signed with key A by
//!   `ChunkResigner`: a `ChunkedVerifier` under A, fed in pieces cut where
//!   the input says, yields exactly the chunks and trailer signed, the
//!   body's length and the chain's last signature; under key B the first
//!   chunk fails; the framing with one bit flipped reads the same whole and
//!   in pieces, and if it is still accepted it yields the same data (only
//!   the case of a hex digit or a trailer name may change); and the raw
//!   input fed to a verifier never panics and reads the same whole and in
//!   pieces.

#![no_main]

use std::borrow::Cow;
use std::sync::OnceLock;

use bytes::Bytes;
use fencegate::dialect::chunked::{
    Chunk, ChunkResigner, ChunkedError, ChunkedVerifier, Event, Trailer, DEFAULT_MAX_CHUNK,
    MAX_LINE, MAX_TRAILERS,
};
use fencegate::dialect::shared_key::{self, AccountKey, Scheme};
use fencegate::dialect::sigv4::{
    check_amz_headers_signed, format_amz_date, hex, is_signature_param, parse_amz_date,
    parse_authorization, parse_presigned, sha256, sha256_hex, signature, signing_key,
    string_to_sign, verify_signature, Authorization, CanonicalParts, Credential, SigV4Error,
    SignedHeaders, SigningKey, ALGORITHM, MAX_PRESIGN_EXPIRES, STREAMING_PAYLOAD,
    STREAMING_PAYLOAD_TRAILER, UNSIGNED_PAYLOAD,
};
use libfuzzer_sys::fuzz_target;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

const ACCESS_KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";
const SECRET_A: &[u8] = b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
/// Another identity's secret.
const SECRET_B: &[u8] = b"je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY";
const DATE: &str = "20130524";
const AMZ_DATE: &str = "20130524T000000Z";
const REGION: &str = "us-east-1";
const SERVICE: &str = "s3";
const SCOPE: &str = "20130524/us-east-1/s3/aws4_request";
/// The chain's seed for the raw input read as a body (the seed corpus holds
/// bodies signed from it, so the fuzzer starts from bodies that verify).
const RAW_SEED: &[u8; 64] = b"4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
/// The largest chunk the raw input's verifier takes.
const RAW_MAX_CHUNK: usize = 1024;
/// An error message may quote 64 characters of the request (twice at most),
/// each escaped by `Debug` (`\u{10ffff}`: 10 characters), around a fixed
/// text of a couple of hundred.
const MAX_MESSAGE: usize = 2 * 64 * 10 + 400;

/// What a query value keeps unencoded: SigV4's unreserved characters.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

struct Keys {
    a: SigningKey,
    b: SigningKey,
    raw_seed: [u8; 32],
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| Keys {
        a: signing_key(SECRET_A, DATE, REGION, SERVICE),
        b: signing_key(SECRET_B, DATE, REGION, SERVICE),
        raw_seed: fencegate::dialect::sigv4::parse_hex32(RAW_SEED).expect("hex"),
    })
}

fn credential() -> Credential {
    Credential::new(ACCESS_KEY_ID, DATE, REGION, SERVICE)
}

fuzz_target!(|raw: &[u8]| {
    parsers(raw);
    shared_key(raw);
    raw_body(raw);
    let [flags, sig_flip, frame_lo, frame_hi, shape, rest @ ..] = raw else {
        return;
    };
    let controls = Controls {
        flags: *flags,
        sig_flip: *sig_flip,
        frame_flip: usize::from(u16::from_le_bytes([*frame_lo, *frame_hi])),
        shape: *shape,
    };
    let request = Request::read(rest);
    // Another identity's secret: a fixed one, or A with one character
    // changed (printable, as secrets are: a secret shorter than HMAC's block
    // and the same with NULs appended are one HMAC key).
    let derived;
    let key_b = if controls.flags & 0x08 == 0 {
        &keys().b
    } else {
        let mut secret = SECRET_A.to_vec();
        let at = usize::from(controls.sig_flip) % secret.len();
        let mut other = b'!' + controls.shape % 94;
        if other == secret[at] {
            other = if other == b'~' { b'!' } else { other + 1 };
        }
        secret[at] = other;
        derived = signing_key(&secret, DATE, REGION, SERVICE);
        &derived
    };
    header_signed(&request, &controls, key_b);
    presigned(&request, &controls, key_b);
    chunked(&request, &controls, key_b);
});

struct Controls {
    /// bit 0: a `-TRAILER` body; bits 1-2: the payload hash; bit 3: B is
    /// A changed in one character; bits 4-7: how far apart the cuts are.
    flags: u8,
    /// The bit of the signature flipped.
    sig_flip: u8,
    /// The bit of the chunked framing flipped.
    frame_flip: usize,
    /// bits 0-3: the width sizes are written with, less one; bits 4-5: the
    /// chunk size's shift. The whole byte: `X-Amz-Expires` / 2371.
    shape: u8,
}

/// A header as the request has it: the name as written, lowercase, and the
/// value's bytes.
struct Header<'a> {
    written: Cow<'a, str>,
    name: String,
    value: &'a [u8],
}

struct Request<'a> {
    method: Cow<'a, str>,
    path: Cow<'a, str>,
    query: Cow<'a, str>,
    headers: Vec<Header<'a>>,
    body: &'a [u8],
}

impl<'a> Request<'a> {
    fn read(rest: &'a [u8]) -> Request<'a> {
        // Four lines always (method, path, query, host: any may be empty),
        // then header lines up to an empty one; the body after it.
        let mut lines = Vec::new();
        let mut body: &[u8] = &[];
        let mut from = 0;
        while from <= rest.len() {
            let end = rest[from..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(rest.len(), |at| from + at);
            let line = &rest[from..end];
            from = end + 1;
            if line.is_empty() && lines.len() >= 4 && end < rest.len() {
                body = &rest[from..];
                break;
            }
            lines.push(line);
        }
        let line = |i: usize| lines.get(i).copied().unwrap_or_default();
        let mut headers = vec![Header {
            written: Cow::Borrowed("Host"),
            name: "host".to_owned(),
            value: line(3),
        }];
        for line in lines.iter().skip(4) {
            let Some(colon) = line.iter().position(|b| *b == b':') else {
                continue;
            };
            let written = String::from_utf8_lossy(&line[..colon]);
            if written.is_empty() || !written.bytes().all(is_tchar) {
                continue;
            }
            let name = written.to_ascii_lowercase();
            headers.push(Header {
                written,
                name,
                value: &line[colon + 1..],
            });
        }
        Request {
            method: String::from_utf8_lossy(line(0)),
            path: String::from_utf8_lossy(line(1)),
            query: String::from_utf8_lossy(line(2)),
            headers,
            body,
        }
    }

    /// Every value of a lowercase name, in order.
    fn values(&self, name: &str) -> Vec<&'a [u8]> {
        self.headers
            .iter()
            .filter(|h| h.name == name)
            .map(|h| h.value)
            .collect()
    }

    /// The request's header names, lowercase, sorted, once each, with the
    /// headers the signer adds.
    fn signed_headers(&self, extra: &[&str]) -> SignedHeaders {
        SignedHeaders::from_names(
            self.headers
                .iter()
                .map(|h| h.name.as_str())
                .chain(extra.iter().copied()),
        )
        .expect("the generated names are lowercase tokens, host among them")
    }
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_hexdigit()
}

/// A `%` without two hex digits after it.
fn bad_escape(text: &str) -> bool {
    let b = text.as_bytes();
    (0..b.len()).any(|i| {
        b[i] == b'%'
            && !(b.get(i + 1).copied().is_some_and(is_hex)
                && b.get(i + 2).copied().is_some_and(is_hex))
    })
}

fn short_message(error: &SigV4Error) {
    let message = error.to_string();
    assert!(
        message.chars().count() <= MAX_MESSAGE,
        "a message of {} characters: {error:?}",
        message.chars().count()
    );
}

fn parsers(raw: &[u8]) {
    let text = String::from_utf8_lossy(raw);
    for value in [raw, text.as_bytes()] {
        match parse_authorization(value) {
            Ok(auth) => {
                let again = auth.header_value();
                assert_eq!(
                    parse_authorization(again.as_bytes()).as_ref(),
                    Ok(&auth),
                    "{again:?}"
                );
            }
            Err(e) => short_message(&e),
        }
    }
    match parse_presigned(&text) {
        Ok(Some(presigned)) => {
            let credential = &presigned.credential;
            assert_eq!(
                Credential::parse(&credential.to_string()).as_ref(),
                Ok(credential)
            );
            assert_eq!(credential.check_date(&presigned.amz_date), Ok(()));
            let at = parse_amz_date(&presigned.amz_date).expect("a presigned URL's time");
            assert_eq!(format_amz_date(at), presigned.amz_date);
            assert!(presigned.expires <= MAX_PRESIGN_EXPIRES);
        }
        Ok(None) => {}
        Err(e) => short_message(&e),
    }
}

fn payload_hash(request: &Request, controls: &Controls) -> String {
    match (controls.flags >> 1) & 3 {
        0 => sha256_hex(request.body),
        1 => UNSIGNED_PAYLOAD.to_owned(),
        2 => STREAMING_PAYLOAD.to_owned(),
        _ => STREAMING_PAYLOAD_TRAILER.to_owned(),
    }
}

/// The canonical request of `request` with its `x-amz-*` additions, or why
/// not; the refusal is the one the inputs call for.
fn canonical<'h>(
    request: &Request,
    query: &str,
    skip: &dyn Fn(&str) -> bool,
    lookup: &dyn Fn(&str) -> Vec<&'h [u8]>,
    signed: &SignedHeaders,
    payload: &str,
) -> Option<String> {
    let built = canonical_request_of(request, query, skip, lookup, signed, payload);
    let malformed = bad_escape(&request.path) || bad_escape(query);
    match built {
        Ok(text) => {
            assert!(
                !malformed,
                "a malformed escape taken: {:?} {query:?}",
                request.path
            );
            Some(text)
        }
        Err(SigV4Error::MalformedPercentEncoding) => {
            assert!(malformed, "{:?} {query:?} refused", request.path);
            None
        }
        Err(SigV4Error::InvalidHeaderValue(name)) => {
            assert!(!malformed);
            let bad = |v: &&[u8]| match std::str::from_utf8(v) {
                Ok(text) => text.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f),
                Err(_) => true,
            };
            assert!(
                signed.iter().any(|n| lookup(n).iter().any(bad)),
                "{name:?} refused"
            );
            None
        }
        Err(other) => panic!("unexpected refusal: {other:?}"),
    }
}

fn canonical_request_of<'h>(
    request: &Request,
    query: &str,
    skip: &dyn Fn(&str) -> bool,
    lookup: &dyn Fn(&str) -> Vec<&'h [u8]>,
    signed: &SignedHeaders,
    payload: &str,
) -> Result<String, SigV4Error> {
    fencegate::dialect::sigv4::canonical_request(
        &request.method,
        &request.path,
        query,
        skip,
        &|name, out| out.extend(lookup(name)),
        signed,
        payload,
    )
}

/// Checks a signature of `to_sign` made with A: it verifies under A, not
/// under B, not with one bit flipped.
fn check_signature(to_sign: &str, sig: &[u8; 32], controls: &Controls, key_b: &SigningKey) {
    assert!(verify_signature(&keys().a, to_sign, sig), "{to_sign:?}");
    assert!(
        !verify_signature(key_b, to_sign, sig),
        "verified under another identity's secret: {to_sign:?}"
    );
    let mut flipped = *sig;
    let bit = usize::from(controls.sig_flip);
    flipped[bit / 8] ^= 1 << (bit % 8);
    assert!(
        !verify_signature(&keys().a, to_sign, &flipped),
        "a flipped bit verified: {to_sign:?}"
    );
}

/// Signed in the `Authorization` header, then read back as the gateway
/// reads a client's.
fn header_signed(request: &Request, controls: &Controls, key_b: &SigningKey) {
    let payload = payload_hash(request, controls);
    let amz: [(&str, &[u8]); 2] = [
        ("x-amz-content-sha256", payload.as_bytes()),
        ("x-amz-date", AMZ_DATE.as_bytes()),
    ];
    let lookup = |name: &str| -> Vec<&[u8]> {
        let mut values = request.values(name);
        values.extend(amz.iter().filter(|(n, _)| *n == name).map(|(_, v)| *v));
        values
    };
    let signed = request.signed_headers(&["x-amz-content-sha256", "x-amz-date"]);
    let no_skip = |_: &str| false;
    let Some(canonical_s) = canonical(
        request,
        &request.query,
        &no_skip,
        &lookup,
        &signed,
        &payload,
    ) else {
        return;
    };
    let credential = credential();
    let to_sign = string_to_sign(AMZ_DATE, &credential.scope(), &canonical_s);
    let sig = signature(&keys().a, &to_sign);
    check_signature(&to_sign, &sig, controls, key_b);

    // The verifier's side: the header as sent, read back.
    let auth = Authorization {
        credential,
        signed_headers: signed,
        signature: sig,
    };
    let header = auth.header_value();
    let read = parse_authorization(header.as_bytes()).expect("the signer's own header");
    assert_eq!(read, auth);
    let present = request
        .headers
        .iter()
        .map(|h| h.written.as_ref())
        .chain(amz.iter().map(|(n, _)| *n));
    assert_eq!(
        check_amz_headers_signed(present, &read.signed_headers),
        Ok(())
    );
    let canonical_v = canonical_request_of(
        request,
        &request.query,
        &no_skip,
        &lookup,
        &read.signed_headers,
        &payload,
    )
    .expect("the verifier's canonical request");
    assert_eq!(canonical_v, canonical_s);
    let to_sign_v = string_to_sign(AMZ_DATE, &read.credential.scope(), &canonical_v);
    let key = read.credential.signing_key(SECRET_A);
    assert!(verify_signature(&key, &to_sign_v, &read.signature));
    assert!(!verify_signature(key_b, &to_sign_v, &read.signature));

    // The gateway's own path: each line filed by its place in the list (its
    // name as written), and the string to sign made without the canonical
    // request's text. It is the same string, and verifies the same.
    let lines = request
        .headers
        .iter()
        .map(|h| (h.written.as_bytes(), h.value))
        .chain(amz.iter().map(|(n, v)| (n.as_bytes(), *v)));
    let filed: Vec<(usize, &[u8])> = lines
        .filter_map(|(name, value)| {
            read.signed_headers
                .position_ignore_case(name)
                .map(|at| (at, value))
        })
        .collect();
    let parts = CanonicalParts {
        method: &request.method,
        path: &request.path,
        query: &request.query,
        skip_query: &no_skip,
        signed_headers: &read.signed_headers,
        payload_hash: &payload,
    };
    let to_sign_g = parts
        .string_to_sign_of(&filed, AMZ_DATE, read.credential.scope())
        .expect("the gateway's string to sign");
    assert_eq!(to_sign_g.as_bytes(), to_sign_v.as_bytes());
    assert!(key.verify(to_sign_g.as_bytes(), &read.signature));
    assert!(!key_b.verify(to_sign_g.as_bytes(), &read.signature));
}

/// Signed as a presigned URL, then read back as the gateway reads one.
fn presigned(request: &Request, controls: &Controls, key_b: &SigningKey) {
    let lookup = |name: &str| request.values(name);
    let signed = request.signed_headers(&[]);
    let credential = credential();
    let expires = u64::from(controls.shape) * 2371;
    let encode = |text: &str| utf8_percent_encode(text, QUERY_VALUE).to_string();
    let mut query = request.query.to_string();
    query.push_str(&format!(
        "&X-Amz-Algorithm={ALGORITHM}&X-Amz-Credential={}&X-Amz-Date={AMZ_DATE}\
         &X-Amz-Expires={expires}&X-Amz-SignedHeaders={}",
        encode(&credential.to_string()),
        encode(signed.as_str()),
    ));
    let no_skip = |_: &str| false;
    let Some(canonical_s) = canonical(
        request,
        &query,
        &no_skip,
        &lookup,
        &signed,
        UNSIGNED_PAYLOAD,
    ) else {
        return;
    };
    let to_sign = string_to_sign(AMZ_DATE, &credential.scope(), &canonical_s);
    let sig = signature(&keys().a, &to_sign);
    check_signature(&to_sign, &sig, controls, key_b);

    query.push_str("&X-Amz-Signature=");
    query.push_str(&hex(&sig));
    let read = match parse_presigned(&query) {
        Ok(Some(read)) => read,
        // The request's own query names a parameter the signer added, or
        // gives a security token that is not text.
        Err(SigV4Error::DuplicateQueryParameter(_) | SigV4Error::QueryParameterNotText(_)) => {
            return
        }
        other => panic!("the signer's own URL {query:?}: {other:?}"),
    };
    assert_eq!(read.credential, credential);
    assert_eq!(read.amz_date, AMZ_DATE);
    assert_eq!(read.expires, expires);
    assert_eq!(read.signed_headers, signed);
    assert_eq!(read.signature, sig);
    let canonical_v = canonical_request_of(
        request,
        &query,
        &is_signature_param,
        &lookup,
        &read.signed_headers,
        UNSIGNED_PAYLOAD,
    )
    .expect("the verifier's canonical request");
    assert_eq!(canonical_v, canonical_s);
    let to_sign_v = string_to_sign(&read.amz_date, &read.credential.scope(), &canonical_v);
    assert!(verify_signature(&keys().a, &to_sign_v, &read.signature));
    assert!(!verify_signature(key_b, &to_sign_v, &read.signature));
}

/// What a verifier makes of `body` fed in pieces ending at `cuts` (then the
/// rest): the events, and the first error or `finish`'s answer.
fn read_body(
    mut verifier: ChunkedVerifier,
    body: &[u8],
    cuts: &[usize],
) -> (Vec<Event>, Result<(), ChunkedError>) {
    let mut events = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
        let cut = cut.clamp(from, body.len());
        if let Err(e) = verifier.feed(&body[from..cut], &mut events) {
            assert_eq!(verifier.finish(), Err(e.clone()), "an error is for good");
            return (events, Err(e));
        }
        from = cut;
    }
    let end = verifier.finish();
    assert_eq!(end.is_ok(), verifier.is_done());
    (events, end)
}

/// Cut points for a body of `len` bytes: steps from `from`'s bytes (zero
/// too: an empty piece), `scale` times each, 64 pieces at most.
fn cuts(len: usize, from: &[u8], scale: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    for b in from.iter().rev().cycle().take(64) {
        at += usize::from(*b) * scale / 4;
        if at >= len {
            break;
        }
        out.push(at);
    }
    out
}

/// The raw input, as an aws-chunked body under A from `RAW_SEED`, with and
/// without trailers: never a panic, and the same read whole or in pieces.
fn raw_body(raw: &[u8]) {
    let scale = 1 + usize::from(raw.first().copied().unwrap_or_default() >> 4);
    let pieces = cuts(raw.len(), raw, scale);
    for trailer in [false, true] {
        let verifier = || {
            ChunkedVerifier::new(
                keys().a.clone(),
                AMZ_DATE,
                SCOPE,
                keys().raw_seed,
                trailer,
                RAW_MAX_CHUNK,
            )
        };
        let whole = read_body(verifier(), raw, &[]);
        let split = read_body(verifier(), raw, &pieces);
        assert_eq!(whole, split, "whole and in pieces at {pieces:?}");
    }
}

/// A trailer field as the verifier takes it (and not the signature's name).
fn trailer_field<'h>(header: &'h Header) -> Option<(&'h str, &'h str)> {
    let value = std::str::from_utf8(header.value).ok()?;
    let text = |b: u8| b == b'\t' || (b' '..=b'~').contains(&b);
    let fits = header.written.len() + 1 + value.len() + 2 <= MAX_LINE;
    (value.bytes().all(text)
        && fits
        && !header.name.eq_ignore_ascii_case("x-amz-trailer-signature"))
    .then_some((header.written.as_ref(), value))
}

/// A trailer's fields, names lowercase: what its signature covers.
fn signed_fields(trailer: &Trailer) -> Vec<(String, String)> {
    trailer
        .fields()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned()))
        .collect()
}

/// Events the same but for what no signature covers: the case of a
/// trailer's names.
fn same_signed(read: &[Event], sent: &[Event]) -> bool {
    read.len() == sent.len()
        && read.iter().zip(sent).all(|pair| match pair {
            (Event::Trailer(r), Event::Trailer(s)) => {
                r.sha256 == s.sha256 && signed_fields(r) == signed_fields(s)
            }
            (r, s) => r == s,
        })
}

fn chunked(request: &Request, controls: &Controls, key_b: &SigningKey) {
    let data = request.body;
    let trailer = controls.flags & 1 == 1;
    let width = usize::from(controls.shape & 0x0f) + 1;
    let shift = (controls.shape >> 4) & 3;
    let seed = sha256(data);

    let mut sent = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let size = ((1 + usize::from(data[at])) << shift)
            .max(data.len() / 32)
            .min(data.len() - at);
        let mut chunk = Chunk::new(Bytes::copy_from_slice(&data[at..at + size]));
        chunk.size_digits = chunk.size_digits.max(width);
        sent.push(Event::Chunk(chunk));
        at += size;
    }
    let mut last = Chunk::new(Bytes::new());
    last.size_digits = width;
    sent.push(Event::Chunk(last));
    if trailer {
        let mut fields = Vec::new();
        let mut total = 0;
        for (name, value) in request.headers.iter().filter_map(trailer_field) {
            let line = name.len() + value.len() + 3;
            if total + line > MAX_TRAILERS {
                break;
            }
            total += line;
            fields.push((name, value));
        }
        sent.push(Event::Trailer(Trailer::new(&fields)));
    }
    sent.push(Event::End);

    let mut resigner = ChunkResigner::new(keys().a.clone(), AMZ_DATE, SCOPE, seed);
    let mut out = Vec::new();
    for event in &sent {
        resigner.resign(event, &mut out);
    }
    let framing: Vec<u8> = out.concat();
    let verifier = |key: &SigningKey| {
        ChunkedVerifier::new(
            key.clone(),
            AMZ_DATE,
            SCOPE,
            seed,
            trailer,
            DEFAULT_MAX_CHUNK,
        )
    };

    // Under A, in pieces: exactly what was sent.
    let scale = 1 + usize::from(controls.flags >> 4);
    let pieces = cuts(framing.len(), data, scale);
    let mut a = verifier(&keys().a);
    let mut read = Vec::new();
    let mut from = 0;
    for &cut in pieces.iter().chain(std::iter::once(&framing.len())) {
        a.feed(&framing[from..cut], &mut read).unwrap_or_else(|e| {
            panic!("refused under A at {from}..{cut} of {}: {e}", framing.len())
        });
        from = cut;
    }
    assert_eq!(a.finish(), Ok(()));
    assert!(a.is_done());
    assert_eq!(read, sent);
    assert_eq!(a.decoded_len(), data.len() as u64);
    assert_eq!(a.last_signature(), resigner.last_signature());

    // Under B: the first chunk fails, nothing is handed on.
    let (events, end) = read_body(verifier(key_b), &framing, &[]);
    assert!(events.is_empty(), "handed on under B: {events:?}");
    assert_eq!(end, Err(ChunkedError::ChunkSignatureMismatch));

    // One bit flipped: the same whole and in pieces; accepted only as the
    // same data.
    let mut flipped = framing.clone();
    let bit = controls.frame_flip % (flipped.len() * 8);
    flipped[bit / 8] ^= 1 << (bit % 8);
    let whole = read_body(verifier(&keys().a), &flipped, &[]);
    let split = read_body(verifier(&keys().a), &flipped, &pieces);
    assert_eq!(whole, split, "whole and in pieces at {pieces:?}");
    if whole.1.is_ok() {
        assert!(
            same_signed(&whole.0, &sent),
            "bit {bit} flipped, accepted as other data: {:?}",
            String::from_utf8_lossy(&flipped)
        );
    }
}

/// Azure Shared Key (`fencegate::dialect::shared_key`): the input as an
/// `Authorization` value (nothing panics; one that parses signs back to
/// itself) and as a SAS query (nothing panics), and as a request (lines: method, path, query, then
/// `name:value` fields): for both schemes the string to sign is made or
/// refused without panicking, and a signature made with key A verifies
/// under A, never under B, never with one bit flipped.
fn shared_key(raw: &[u8]) {
    if let Ok(auth) = shared_key::parse_authorization(raw) {
        let again = format!(
            "{} {}:{}",
            match auth.scheme {
                Scheme::SharedKey => "SharedKey",
                Scheme::SharedKeyLite => "SharedKeyLite",
            },
            auth.account,
            base64_encode(&auth.signature)
        );
        assert_eq!(shared_key::parse_authorization(again.as_bytes()), Ok(auth));
    }
    let text = String::from_utf8_lossy(raw);
    if let Ok(Some(sas)) = shared_key::parse_service_sas(&text) {
        let to_sign = shared_key::sas_string_to_sign(&sas, "acct", "/c/b", None);
        let _ = to_sign.len();
        let client = std::net::IpAddr::from([127, 0, 0, 1]);
        let _ = shared_key::check_sas_limits(&sas, 1_795_759_200, client, raw.len() % 2 == 0);
    }
    for piece in text.split('&') {
        let _ = shared_key::parse_sas_time(piece);
    }
    let mut lines = text.split('\n');
    let (Some(method), Some(path), Some(query)) = (lines.next(), lines.next(), lines.next()) else {
        return;
    };
    let fields: Vec<(&str, &[u8])> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name, value.as_bytes()))
        .collect();
    static KEYS: OnceLock<(AccountKey, AccountKey)> = OnceLock::new();
    let (a, b) = KEYS.get_or_init(|| {
        (
            AccountKey::from_base64(
                "Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4",
            )
            .unwrap(),
            AccountKey::from_base64(
                "cXV4YmF6YmFyZm9vcXV4YmF6YmFyZm9vcXV4YmF6YmFyZm9vcXV4YmF6YmFyZm9v",
            )
            .unwrap(),
        )
    });
    for scheme in [Scheme::SharedKey, Scheme::SharedKeyLite] {
        let Ok(to_sign) = shared_key::string_to_sign(scheme, method, "acct", path, query, &fields)
        else {
            continue;
        };
        let signed = format!("SharedKey acct:{}", a.sign(&to_sign));
        let auth =
            shared_key::parse_authorization(signed.as_bytes()).expect("our own header parses");
        assert!(a.verify(&to_sign, &auth.signature));
        assert!(!b.verify(&to_sign, &auth.signature));
        let mut flipped = auth.signature;
        flipped[usize::from(raw.first().copied().unwrap_or(0)) % 32] ^= 1;
        assert!(!a.verify(&to_sign, &flipped));
    }
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
