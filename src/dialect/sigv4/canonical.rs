//! The canonical request, made from a request's parts without building
//! one `String` more than needed.

use super::*;

// ---------------------------------------------------------------------------
// The canonical request

/// Builds the canonical request:
///
/// ```text
/// METHOD
/// canonical path
/// canonical query
/// name:value      (one line per signed header)
///
/// signed;header;names
/// payload hash
/// ```
///
/// `path` is the request-target's path exactly as sent. S3 does not
/// normalise it (no dot-segment removal, no slash merging): each `%XX` is
/// decoded, then every byte but the unreserved `A-Za-z0-9-_.~` and `/` is
/// encoded as `%XX` (uppercase); an empty path is `/`. `query` is the raw
/// query string (without `?`), or `""`: every parameter is decoded (`+` as a
/// space, as S3 reads a query) and re-encoded (here `/` is encoded too), a
/// parameter without `=` has an empty value, and they are sorted by encoded
/// name, then encoded value. `skip_query` names (decoded) the parameters to
/// leave out: `X-Amz-Signature` ([`is_signature_param`]) when verifying a
/// presigned URL.
///
/// `header` appends the values of a lowercase header name to the buffer it
/// is given, all of them, in order; each is trimmed, inner runs of spaces and tabs become one space,
/// and several are joined with `,`. `signed_headers` are used in the order
/// given (sorted, for anything a verifier is to check). `payload_hash` goes
/// in as given (hex, `UNSIGNED-PAYLOAD`, `STREAMING-...`).
///
/// Refuses a malformed `%` escape, a signed header missing from the request
/// or whose value is not text, and a signed header name that is not a
/// lowercase header name.
pub fn canonical_request<'h>(
    method: &str,
    path: &str,
    query: &str,
    skip_query: &dyn Fn(&str) -> bool,
    header: &dyn Fn(&str, &mut Vec<&'h [u8]>),
    signed_headers: &SignedHeaders,
    payload_hash: &str,
) -> Result<String, SigV4Error> {
    // One buffer for every field's values.
    let mut values = Vec::with_capacity(2);
    let request = CanonicalParts {
        method,
        path,
        query,
        skip_query,
        signed_headers,
        payload_hash,
    };
    canonical_text(&request, |_, name, out| {
        values.clear();
        header(name, &mut values);
        push_values(out, name, values.iter().copied())
    })
}

/// [`canonical_request`] with the signed fields' values already found:
/// `fields` holds `(i, value)` for every line of the `i`th name of
/// `signed_headers`, each name's lines in the request's order (names in
/// any order). A reader that looked at each field line once (matching it
/// with [`SignedHeaders::position_ignore_case`]) gives them so, where a
/// lookup per signed name would scan the head once per name.
///
/// ```
/// use fencegate::dialect::sigv4::{canonical_request_of, SignedHeaders};
///
/// let signed = SignedHeaders::parse("host;x-amz-date").unwrap();
/// let fields = [(1, &b"20130524T000000Z"[..]), (0, &b"b.example"[..])];
/// let canonical = canonical_request_of("GET", "/k", "", &|_| false, &fields, &signed, "UNSIGNED-PAYLOAD").unwrap();
/// assert_eq!(
///     canonical,
///     "GET\n/k\n\nhost:b.example\nx-amz-date:20130524T000000Z\n\nhost;x-amz-date\nUNSIGNED-PAYLOAD"
/// );
/// ```
pub fn canonical_request_of(
    method: &str,
    path: &str,
    query: &str,
    skip_query: &dyn Fn(&str) -> bool,
    fields: &[(usize, &[u8])],
    signed_headers: &SignedHeaders,
    payload_hash: &str,
) -> Result<String, SigV4Error> {
    let request = CanonicalParts {
        method,
        path,
        query,
        skip_query,
        signed_headers,
        payload_hash,
    };
    canonical_text(&request, filed_values(fields))
}

/// The canonical request written into `out` (cleared first), with
/// `values(i, name, out)` writing the `i`th signed name's values (and saying
/// whether there was any). Every piece is ASCII but the header values, each
/// checked as UTF-8 when it is not ASCII, so `out` holds UTF-8.
pub(super) fn write_canonical(
    out: &mut Vec<u8>,
    request: &CanonicalParts<'_>,
    mut values: impl FnMut(usize, &str, &mut Vec<u8>) -> Result<bool, SigV4Error>,
) -> Result<(), SigV4Error> {
    let signed_headers = request.signed_headers;
    out.clear();
    out.reserve(
        request.method.len()
            + request.path.len()
            + request.query.len()
            + request.payload_hash.len()
            + 2 * signed_headers.as_str().len()
            + 256,
    );
    out.extend_from_slice(request.method.as_bytes());
    out.push(b'\n');
    push_canonical_path(out, request.path)?;
    out.push(b'\n');
    push_canonical_query(out, request.query, request.skip_query)?;
    out.push(b'\n');
    // Each name is a lowercase header name: `SignedHeaders` checked it.
    for (i, name) in signed_headers.iter().enumerate() {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        if !values(i, name, out)? {
            return Err(SigV4Error::MissingSignedHeader(quote(name)));
        }
        out.push(b'\n');
    }
    out.push(b'\n');
    out.extend_from_slice(signed_headers.as_str().as_bytes());
    out.push(b'\n');
    out.extend_from_slice(request.payload_hash.as_bytes());
    Ok(())
}

/// The canonical request of `request` as text.
pub(super) fn canonical_text(
    request: &CanonicalParts<'_>,
    values: impl FnMut(usize, &str, &mut Vec<u8>) -> Result<bool, SigV4Error>,
) -> Result<String, SigV4Error> {
    let mut out = Vec::new();
    write_canonical(&mut out, request, values)?;
    String::from_utf8(out).map_err(|_| SigV4Error::InvalidHeaderValue("a signed header".into()))
}

/// The values of the `i`th signed name among `fields` (`(i, value)` pairs).
pub(super) fn filed_values<'f>(
    fields: &'f [(usize, &'f [u8])],
) -> impl FnMut(usize, &str, &mut Vec<u8>) -> Result<bool, SigV4Error> + 'f {
    move |i, name, out| {
        let values = fields
            .iter()
            .filter(|(at, _)| *at == i)
            .map(|(_, value)| *value);
        push_values(out, name, values)
    }
}

/// A request's parts as a canonical request takes them, but for the signed
/// fields' values: what a verifier and a signer each compute a string to
/// sign over ([`CanonicalParts::string_to_sign_of`]).
///
/// ```
/// use fencegate::dialect::sigv4::{canonical_request_of, string_to_sign, CanonicalParts, SignedHeaders};
///
/// let signed = SignedHeaders::parse("host;x-amz-date").unwrap();
/// let fields = [(1, &b"20130524T000000Z"[..]), (0, &b"b.example"[..])];
/// let parts = CanonicalParts {
///     method: "GET",
///     path: "/k",
///     query: "",
///     skip_query: &|_| false,
///     signed_headers: &signed,
///     payload_hash: "UNSIGNED-PAYLOAD",
/// };
/// let scope = "20130524/us-east-1/s3/aws4_request";
/// let to_sign = parts.string_to_sign_of(&fields, "20130524T000000Z", scope).unwrap();
/// let canonical = canonical_request_of("GET", "/k", "", &|_| false, &fields, &signed, "UNSIGNED-PAYLOAD").unwrap();
/// assert_eq!(to_sign.as_bytes(), string_to_sign("20130524T000000Z", scope, &canonical).as_bytes());
/// ```
#[derive(Clone, Copy)]
pub struct CanonicalParts<'a> {
    /// The method, as sent.
    pub method: &'a str,
    /// The path, as sent (percent-encoded).
    pub path: &'a str,
    /// The query, as sent, without `?`.
    pub query: &'a str,
    /// Which query parameters (decoded names) to leave out.
    pub skip_query: &'a dyn Fn(&str) -> bool,
    /// The signed header names, in the order they are written.
    pub signed_headers: &'a SignedHeaders,
    /// The payload hash, as given.
    pub payload_hash: &'a str,
}

impl fmt::Debug for CanonicalParts<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CanonicalParts")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &self.query)
            .field("signed_headers", &self.signed_headers)
            .field("payload_hash", &self.payload_hash)
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// The buffer a thread writes canonical requests into before hashing
    /// them: they are only hashed, so a signed request need allocate none.
    static CANONICAL: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A canonical request bigger than this gives its buffer back when hashed
/// (a thread keeps at most this much).
pub(super) const KEPT_CANONICAL_CAPACITY: usize = 16 * 1024;

impl CanonicalParts<'_> {
    /// The string to sign at `amz_date` in `credential_scope` of this
    /// request with the signed fields `fields` (as for
    /// [`canonical_request_of`]): [`string_to_sign`] of
    /// [`canonical_request_of`], without the canonical request's text
    /// (written into a buffer the thread keeps, and hashed).
    pub fn string_to_sign_of(
        &self,
        fields: &[(usize, &[u8])],
        amz_date: &str,
        credential_scope: &str,
    ) -> Result<StringToSign, SigV4Error> {
        let hash = CANONICAL.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buffer) => {
                let hashed = write_canonical(&mut buffer, self, filed_values(fields))
                    .map(|()| digest::digest(&digest::SHA256, &buffer));
                if buffer.capacity() > KEPT_CANONICAL_CAPACITY {
                    *buffer = Vec::new();
                }
                hashed
            }
            // Never borrowed across a call out, so never busy; a fresh
            // buffer keeps this total all the same.
            Err(_) => {
                let mut buffer = Vec::new();
                write_canonical(&mut buffer, self, filed_values(fields))
                    .map(|()| digest::digest(&digest::SHA256, &buffer))
            }
        })?;
        let hex = hex32(&to_array(hash.as_ref()));
        let parts = [
            ALGORITHM.as_bytes(),
            b"\n",
            amz_date.as_bytes(),
            b"\n",
            credential_scope.as_bytes(),
            b"\n",
            &hex,
        ];
        Ok(StringToSign::of(&parts))
    }
}

/// A string to sign as bytes, on the stack when it is of the usual length
/// ([`CanonicalParts::string_to_sign_of`]).
#[derive(Debug, Clone)]
pub struct StringToSign(ToSignBytes);

/// The length of a string to sign kept on the stack: the algorithm, a date,
/// a scope of up to 64 bytes and a hash, with the line breaks between.
pub(super) const INLINE_TO_SIGN: usize = 17 + 17 + 65 + 64;

#[derive(Debug, Clone)]
pub(super) enum ToSignBytes {
    Inline {
        bytes: [u8; INLINE_TO_SIGN],
        len: usize,
    },
    Heap(Vec<u8>),
}

impl StringToSign {
    /// `parts` one after the other.
    fn of(parts: &[&[u8]]) -> StringToSign {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total > INLINE_TO_SIGN {
            return StringToSign(ToSignBytes::Heap(parts.concat()));
        }
        let mut bytes = [0u8; INLINE_TO_SIGN];
        let mut len = 0;
        for part in parts {
            bytes[len..len + part.len()].copy_from_slice(part);
            len += part.len();
        }
        StringToSign(ToSignBytes::Inline { bytes, len })
    }

    /// The string to sign, the bytes an HMAC is taken over.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            ToSignBytes::Inline { bytes, len } => &bytes[..*len],
            ToSignBytes::Heap(bytes) => bytes,
        }
    }
}

/// A signed field's values, joined with `,`; whether there was any.
pub(super) fn push_values<'v>(
    out: &mut Vec<u8>,
    name: &str,
    values: impl Iterator<Item = &'v [u8]>,
) -> Result<bool, SigV4Error> {
    let mut any = false;
    for value in values {
        if any {
            out.push(b',');
        }
        push_canonical_value(out, name, value)?;
        any = true;
    }
    Ok(any)
}

/// The canonical form of a request path: `%XX` decoded, then re-encoded per
/// SigV4 with `/` kept. A `%2F` thus becomes `/`, as S3 (which has no other
/// reading of a key's slash) computes it.
pub fn canonical_path(path: &str) -> Result<String, SigV4Error> {
    let mut out = Vec::with_capacity(path.len() + 8);
    push_canonical_path(&mut out, path)?;
    // Encoded, so ASCII.
    String::from_utf8(out).map_err(|_| SigV4Error::MalformedPercentEncoding)
}

/// The canonical form of a raw query string, as in [`canonical_request`].
/// A gateway that forwards what it verified can send this instead of the
/// raw query: it is unambiguous (`+`, `%20` and `%2B` no longer differ only
/// by the reader's convention) and the signature covers it exactly.
pub fn canonical_query(
    query: &str,
    skip_query: &dyn Fn(&str) -> bool,
) -> Result<String, SigV4Error> {
    let mut out = Vec::with_capacity(query.len() + 8);
    push_canonical_query(&mut out, query, skip_query)?;
    // Encoded, so ASCII.
    String::from_utf8(out).map_err(|_| SigV4Error::MalformedPercentEncoding)
}

pub(super) fn push_canonical_path(out: &mut Vec<u8>, path: &str) -> Result<(), SigV4Error> {
    if path.is_empty() {
        out.push(b'/');
        return Ok(());
    }
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        // A run that stays as it is goes in whole (a key's path is mostly
        // one).
        let run = bytes[i..]
            .iter()
            .take_while(|&&b| BYTE_CLASS[usize::from(b)] & UNRESERVED != 0 || b == b'/')
            .count();
        out.extend_from_slice(&bytes[i..i + run]);
        i += run;
        let Some(&b) = bytes.get(i) else {
            break;
        };
        if b == b'%' {
            let decoded = decode_escape(bytes, i)?;
            push_encoded_byte(out, decoded, true);
            i += 3;
        } else {
            push_encoded_byte(out, b, true);
            i += 1;
        }
    }
    Ok(())
}

pub(super) fn push_canonical_query(
    out: &mut Vec<u8>,
    query: &str,
    skip_query: &dyn Fn(&str) -> bool,
) -> Result<(), SigV4Error> {
    if query.is_empty() {
        return Ok(());
    }
    // Each pair as one string (encoded name, then encoded value) and the
    // name's length: one allocation per parameter, sorted without copying.
    let mut pairs: Vec<(Vec<u8>, usize)> = Vec::with_capacity(query.len() / 8 + 1);
    let mut name_buf = Vec::new();
    for (raw_name, raw_value) in query_params(query) {
        name_buf.clear();
        decode_into(&mut name_buf, raw_name)?;
        if let Ok(name) = std::str::from_utf8(&name_buf) {
            if skip_query(name) {
                continue;
            }
        }
        let mut pair = Vec::with_capacity(raw_name.len() + raw_value.len() + 8);
        for &b in &name_buf {
            push_encoded_byte(&mut pair, b, false);
        }
        let name_len = pair.len();
        push_recoded(&mut pair, raw_value)?;
        pairs.push((pair, name_len));
    }
    pairs.sort_unstable_by(|(a, an), (b, bn)| (&a[..*an], &a[*an..]).cmp(&(&b[..*bn], &b[*bn..])));
    for (i, (pair, name_len)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(b'&');
        }
        out.extend_from_slice(&pair[..*name_len]);
        out.push(b'=');
        out.extend_from_slice(&pair[*name_len..]);
    }
    Ok(())
}

/// The raw `(name, value)` pairs of a query string: split at `&`, then at
/// the first `=` (none: empty value). Empty pieces (`a&&b`, a trailing `&`)
/// are no parameters.
pub(super) fn query_params(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query
        .split('&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| piece.split_once('=').unwrap_or((piece, "")))
}

/// Decodes a query component (`%XX`, and `+` as a space) onto `out`.
pub(super) fn decode_into(out: &mut Vec<u8>, raw: &str) -> Result<(), SigV4Error> {
    let bytes = raw.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                out.push(decode_escape(bytes, i)?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(())
}

/// Decodes a query component and encodes it again in one pass.
pub(super) fn push_recoded(out: &mut Vec<u8>, raw: &str) -> Result<(), SigV4Error> {
    let bytes = raw.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                push_encoded_byte(out, decode_escape(bytes, i)?, false);
                i += 3;
            }
            b'+' => {
                push_encoded_byte(out, b' ', false);
                i += 1;
            }
            b => {
                push_encoded_byte(out, b, false);
                i += 1;
            }
        }
    }
    Ok(())
}

/// The byte a `%XX` at `bytes[at]` stands for.
pub(super) fn decode_escape(bytes: &[u8], at: usize) -> Result<u8, SigV4Error> {
    let high = bytes.get(at + 1).copied().and_then(hex_value);
    let low = bytes.get(at + 2).copied().and_then(hex_value);
    match (high, low) {
        (Some(high), Some(low)) => Ok((high << 4) | low),
        _ => Err(SigV4Error::MalformedPercentEncoding),
    }
}

/// SigV4's URI encoding of one byte: the unreserved `A-Za-z0-9-_.~` as they
/// are (and `/` where `keep_slash`), everything else `%XX` uppercase.
pub(super) fn push_encoded_byte(out: &mut Vec<u8>, b: u8, keep_slash: bool) {
    if BYTE_CLASS[usize::from(b)] & UNRESERVED != 0 || (keep_slash && b == b'/') {
        out.push(b);
    } else {
        out.extend_from_slice(&[
            b'%',
            HEX_UPPER[usize::from(b >> 4)],
            HEX_UPPER[usize::from(b & 0x0f)],
        ]);
    }
}

/// A header value in canonical form: trimmed, inner runs of spaces and tabs
/// as one space. Refuses bytes that are not UTF-8 and control characters (a
/// line break in a value could otherwise forge lines of the canonical
/// request).
pub(super) fn push_canonical_value(
    out: &mut Vec<u8>,
    name: &str,
    value: &[u8],
) -> Result<(), SigV4Error> {
    // Most values are visible ASCII: one pass over every byte (no early
    // exit, which the compiler makes a few wide comparisons), one copy.
    if value
        .iter()
        .fold(true, |ok, &b| ok & (b > b' ' && b < 0x7f))
    {
        out.extend_from_slice(value);
        return Ok(());
    }
    if std::str::from_utf8(value).is_err()
        || value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
    {
        return Err(SigV4Error::InvalidHeaderValue(quote(name)));
    }
    // Words are runs between ASCII spaces and tabs, so each is whole UTF-8.
    let mut i = 0;
    let mut first = true;
    while i < value.len() {
        let gap = value[i..]
            .iter()
            .take_while(|&&b| b == b' ' || b == b'\t')
            .count();
        i += gap;
        let word = value[i..]
            .iter()
            .take_while(|&&b| b != b' ' && b != b'\t')
            .count();
        if word == 0 {
            break;
        }
        if !first {
            out.push(b' ');
        }
        out.extend_from_slice(&value[i..i + word]);
        first = false;
        i += word;
    }
    Ok(())
}
