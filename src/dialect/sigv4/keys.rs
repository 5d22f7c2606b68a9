//! Keys, hashes and signatures: the last steps of SigV4, and the hex
//! and SHA-256 helpers every step uses.

use super::*;

// ---------------------------------------------------------------------------
// Keys, hashes, signatures

/// A derived SigV4 signing key (HMAC chain over date, region, service,
/// `aws4_request`). Valid for one day, region and service; callers may cache
/// it under that scope. `Debug` prints nothing secret.
#[derive(Clone)]
pub struct SigningKey(hmac::Key);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

impl SigningKey {
    /// HMAC-SHA256 of `data` under this key.
    pub fn sign(&self, data: &[u8]) -> [u8; 32] {
        to_array(hmac::sign(&self.0, data).as_ref())
    }

    /// Whether `claimed` is the HMAC-SHA256 of `data` under this key,
    /// compared in constant time.
    pub fn verify(&self, data: &[u8], claimed: &[u8; 32]) -> bool {
        hmac::verify(&self.0, data, claimed).is_ok()
    }
}

/// Derives the signing key: `HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date),
/// region), service), "aws4_request")`. `date` is the scope's `YYYYMMDD`.
pub fn signing_key(
    secret_access_key: &[u8],
    date: &str,
    region: &str,
    service: &str,
) -> SigningKey {
    let mut seed = Vec::with_capacity(4 + secret_access_key.len());
    seed.extend_from_slice(b"AWS4");
    seed.extend_from_slice(secret_access_key);
    let k_date = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &seed), date.as_bytes());
    // The copy of the secret goes as soon as it is used (best effort: the
    // allocator may have moved it, and ring keeps its own padded copies).
    seed.fill(0);
    let k_region = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, k_date.as_ref()),
        region.as_bytes(),
    );
    let k_service = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, k_region.as_ref()),
        service.as_bytes(),
    );
    let k_signing = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, k_service.as_ref()),
        b"aws4_request",
    );
    SigningKey(hmac::Key::new(hmac::HMAC_SHA256, k_signing.as_ref()))
}

/// The string to sign: `AWS4-HMAC-SHA256\n<amz_date>\n<scope>\n<hex sha256
/// of the canonical request>`.
pub fn string_to_sign(amz_date: &str, credential_scope: &str, canonical_request: &str) -> String {
    let hash = digest::digest(&digest::SHA256, canonical_request.as_bytes());
    let mut out =
        String::with_capacity(ALGORITHM.len() + amz_date.len() + credential_scope.len() + 67);
    push_string_to_sign(&mut out, amz_date, credential_scope, hash.as_ref());
    out
}

/// [`string_to_sign`], written into the canonical request's own buffer once
/// it is hashed: a verifier and a signer need the one right after the other,
/// and this saves an allocation on every signed request.
pub fn into_string_to_sign(
    amz_date: &str,
    credential_scope: &str,
    canonical_request: String,
) -> String {
    let hash = digest::digest(&digest::SHA256, canonical_request.as_bytes());
    let mut out = canonical_request;
    out.clear();
    push_string_to_sign(&mut out, amz_date, credential_scope, hash.as_ref());
    out
}

pub(super) fn push_string_to_sign(
    out: &mut String,
    amz_date: &str,
    credential_scope: &str,
    hash: &[u8],
) {
    out.push_str(ALGORITHM);
    out.push('\n');
    out.push_str(amz_date);
    out.push('\n');
    out.push_str(credential_scope);
    out.push('\n');
    push_hex(out, hash);
}

/// The signature of `string_to_sign` under `key`.
pub fn signature(key: &SigningKey, string_to_sign: &str) -> [u8; 32] {
    key.sign(string_to_sign.as_bytes())
}

/// Whether `claimed` is the signature of `string_to_sign` under `key`,
/// compared in constant time (ring's HMAC verification), so the time taken
/// says nothing about how much of a forged signature was right.
pub fn verify_signature(key: &SigningKey, string_to_sign: &str, claimed: &[u8; 32]) -> bool {
    key.verify(string_to_sign.as_bytes(), claimed)
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_hex(&mut out, bytes);
    out
}

/// Lowercase hex of the SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, data).as_ref())
}

/// The SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    to_array(digest::digest(&digest::SHA256, data).as_ref())
}

/// Decodes 64 hex digits (either case) into 32 bytes.
pub fn parse_hex32(text: &[u8]) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    // Every digit through a table, a bad one remembered rather than
    // branched on: a signature's 64 digits on every signed request.
    let mut out = [0u8; 32];
    let mut bad = 0u8;
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let (high, low) = (
            HEX_DIGIT[usize::from(pair[0])],
            HEX_DIGIT[usize::from(pair[1])],
        );
        bad |= high | low;
        *byte = (high << 4) | (low & 0x0f);
    }
    (bad & NOT_HEX == 0).then_some(out)
}

/// [`HEX_DIGIT`]'s mark of a byte that is not a hex digit.
pub(super) const NOT_HEX: u8 = 0x80;

/// Each byte's value as a hex digit (either case), or [`NOT_HEX`].
pub(super) const HEX_DIGIT: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut b = 0;
    while b < 256 {
        if let Some(value) = hex_value(b as u8) {
            table[b] = value;
        }
        b += 1;
    }
    table
};

/// Copies a 32-byte digest or tag into an array. ring's SHA-256 and
/// HMAC-SHA256 outputs are 32 bytes; a shorter slice would leave zeros, which
/// no signature comparison could then match by accident of length.
pub(super) fn to_array(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let n = bytes.len().min(32);
    out[..n].copy_from_slice(&bytes[..n]);
    out
}

pub(super) const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";
pub(super) const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Appends lowercase hex of `bytes`.
/// Appends the lowercase hex of `bytes` to `out`.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    // Into a byte buffer, then one copy: `String::push` encodes each char.
    let mut digits = [0u8; 128];
    for chunk in bytes.chunks(digits.len() / 2) {
        for (pair, &b) in digits.chunks_exact_mut(2).zip(chunk) {
            pair[0] = HEX_LOWER[usize::from(b >> 4)];
            pair[1] = HEX_LOWER[usize::from(b & 0x0f)];
        }
        let written = &digits[..chunk.len() * 2];
        // Hex digits are ASCII.
        out.push_str(std::str::from_utf8(written).unwrap_or_default());
    }
}

/// The lowercase hex of a 32-byte hash or signature. Arithmetic rather
/// than a table lookup per digit: the compiler makes it a few vector
/// steps, where [`push_hex`]'s lookups cost several instructions a digit
/// (two of these on every signed request, and a third for the gateway's
/// `Authorization`).
///
/// ```
/// use fencegate::dialect::sigv4::{hex, hex32};
///
/// let bytes: [u8; 32] = std::array::from_fn(|i| (i * 37) as u8);
/// assert_eq!(&hex32(&bytes)[..], hex(&bytes).as_bytes());
/// ```
pub fn hex32(bytes: &[u8; 32]) -> [u8; 64] {
    /// `n` (below 16) as a lowercase hex digit: `a` is 39 past `'0' + 10`.
    const fn digit(n: u8) -> u8 {
        let above_nine = (9u8.wrapping_sub(n) >> 7) & 1;
        n + b'0' + above_nine * 39
    }
    let mut out = [0u8; 64];
    for i in 0..32 {
        out[2 * i] = digit(bytes[i] >> 4);
        out[2 * i + 1] = digit(bytes[i] & 0x0f);
    }
    out
}

pub(super) const fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}
