//! What a client's `Authorization` header says: the credential, the
//! signed headers (and which of the request's fields they name), the
//! signature, and the checks on them.

use super::*;

// ---------------------------------------------------------------------------
// Credential, Authorization, presigned URLs

/// The credential scope: access key id, date `YYYYMMDD`, region, service.
///
/// Kept as the one string a request carries (`AKID/date/region/service/
/// aws4_request`) with where each part is: one allocation per signed
/// request where a `String` per part cost four, and the scope a slice of it.
///
/// ```
/// use fencegate::dialect::sigv4::Credential;
///
/// let credential = Credential::parse("AKID/20130524/us-east-1/s3/aws4_request").unwrap();
/// assert_eq!(credential.access_key_id(), "AKID");
/// assert_eq!(credential.scope(), "20130524/us-east-1/s3/aws4_request");
/// assert_eq!(credential, Credential::new("AKID", "20130524", "us-east-1", "s3"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// `AKID/date/region/service/aws4_request`.
    text: String,
    /// The byte offsets of the three `/` after the access key id, the date
    /// and the region.
    slashes: [usize; 3],
}

impl Credential {
    /// A credential of these parts (a signer's: parts are not checked).
    pub fn new(access_key_id: &str, date: &str, region: &str, service: &str) -> Credential {
        let mut text = String::with_capacity(
            access_key_id.len() + date.len() + region.len() + service.len() + 16,
        );
        let mut slashes = [0; 3];
        for (i, part) in [access_key_id, date, region].into_iter().enumerate() {
            text.push_str(part);
            slashes[i] = text.len();
            text.push('/');
        }
        text.push_str(service);
        text.push_str("/aws4_request");
        Credential { text, slashes }
    }

    /// The access key id (which key signed).
    pub fn access_key_id(&self) -> &str {
        &self.text[..self.slashes[0]]
    }

    /// The scope's day, `YYYYMMDD`.
    pub fn date(&self) -> &str {
        &self.text[self.slashes[0] + 1..self.slashes[1]]
    }

    /// The scope's region (`us-east-1`).
    pub fn region(&self) -> &str {
        &self.text[self.slashes[1] + 1..self.slashes[2]]
    }

    /// The scope's service (`s3`).
    pub fn service(&self) -> &str {
        let end = self.text.len() - "/aws4_request".len();
        &self.text[self.slashes[2] + 1..end]
    }

    /// The credential scope: `date/region/service/aws4_request`.
    pub fn scope(&self) -> &str {
        &self.text[self.slashes[0] + 1..]
    }

    /// Parses `AKID/20130524/us-east-1/s3/aws4_request`. The access key id
    /// is what precedes the last four parts, so one with a `/` in it (some
    /// S3-compatible stores allow that) still parses.
    pub fn parse(text: &str) -> Result<Credential, SigV4Error> {
        // The last four `/`, found as bytes: each part then lies between
        // ASCII slashes, so slicing the text there is whole UTF-8.
        let bytes = text.as_bytes();
        let mut slashes = [0usize; 4];
        let mut end = bytes.len();
        for slot in slashes.iter_mut().rev() {
            let Some(at) = memchr::memrchr(b'/', &bytes[..end]) else {
                return Err(SigV4Error::MalformedCredential(
                    "it does not have five parts",
                ));
            };
            *slot = at;
            end = at;
        }
        let part = |from: usize, to: usize| &text[from..to];
        let access_key_id = part(0, slashes[0]);
        let date = part(slashes[0] + 1, slashes[1]);
        let region = part(slashes[1] + 1, slashes[2]);
        let service = part(slashes[2] + 1, slashes[3]);
        if part(slashes[3] + 1, text.len()) != "aws4_request" {
            return Err(SigV4Error::MalformedCredential(
                "it does not end in aws4_request",
            ));
        }
        if !is_scope_part(access_key_id) {
            return Err(SigV4Error::MalformedCredential(
                "the access key id is empty or not text",
            ));
        }
        if parse_scope_date(date).is_none() {
            return Err(SigV4Error::MalformedCredential(
                "the date is not a real YYYYMMDD",
            ));
        }
        if !is_scope_part(region) {
            return Err(SigV4Error::MalformedCredential(
                "the region is empty or not text",
            ));
        }
        if !is_scope_part(service) {
            return Err(SigV4Error::MalformedCredential(
                "the service is empty or not text",
            ));
        }
        Ok(Credential {
            text: text.to_owned(),
            slashes: [slashes[0], slashes[1], slashes[2]],
        })
    }

    /// Checks that the scope's date is the day of the request's time
    /// (`X-Amz-Date`), as S3 does: a signature is only good on its own day.
    pub fn check_date(&self, amz_date: &str) -> Result<(), SigV4Error> {
        if amz_date.len() >= 8 && amz_date.as_bytes()[..8] == *self.date().as_bytes() {
            Ok(())
        } else {
            Err(SigV4Error::CredentialDateMismatch {
                credential: quote(self.date()),
                amz_date: quote(amz_date),
            })
        }
    }

    /// The signing key of this scope for `secret_access_key`.
    pub fn signing_key(&self, secret_access_key: &[u8]) -> SigningKey {
        signing_key(
            secret_access_key,
            self.date(),
            self.region(),
            self.service(),
        )
    }
}

/// As `Credential=` takes it: `AKID/date/region/service/aws4_request`.
impl fmt::Display for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A part of a credential scope: not empty, visible ASCII (a space, comma or
/// control character would change how the header around it reads).
pub(super) fn is_scope_part(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_graphic() && b != b',')
}

/// A parsed `Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=a;b;c,
/// Signature=hex` header value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// Who signed, and the scope.
    pub credential: Credential,
    /// The signed header names, lowercase, in the (sorted) order listed.
    pub signed_headers: SignedHeaders,
    /// The claimed signature.
    pub signature: [u8; 32],
}

impl Authorization {
    /// The header value, as SDKs write it: `AWS4-HMAC-SHA256
    /// Credential=..., SignedHeaders=..., Signature=...`.
    pub fn header_value(&self) -> String {
        let mut out = String::with_capacity(200);
        out.push_str(ALGORITHM);
        out.push_str(" Credential=");
        out.push_str(&self.credential.to_string());
        out.push_str(", SignedHeaders=");
        out.push_str(self.signed_headers.as_str());
        out.push_str(", Signature=");
        push_hex(&mut out, &self.signature);
        out
    }
}

/// Parses an `Authorization` header value. Tolerates spaces (and tabs)
/// around the components and any order of the three; refuses a duplicate,
/// missing or unknown component, a signature that is not 64 hex digits,
/// `SignedHeaders` that are empty, not lowercase, not sorted or without
/// `host`, and any algorithm but `AWS4-HMAC-SHA256`
/// ([`SigV4Error::UnsupportedAlgorithm`], so SigV2 `AWS AKID:sig` and SigV4a
/// can be told apart from garbage).
pub fn parse_authorization(value: &[u8]) -> Result<Authorization, SigV4Error> {
    // Byte by byte: every delimiter is ASCII, so each slice of the checked
    // UTF-8 text is whole characters, and no `char` is decoded on a path
    // every signed request takes.
    let text = std::str::from_utf8(value)
        .map_err(|_| SigV4Error::MalformedAuthorization("it is not valid UTF-8"))?;
    let text = trim_ows(text);
    if text.is_empty() {
        return Err(SigV4Error::MalformedAuthorization("it is empty"));
    }
    let (algorithm, rest) = match text.bytes().position(is_ows_byte) {
        Some(at) => (&text[..at], trim_ows(&text[at..])),
        None => (text, ""),
    };
    if !algorithm.bytes().all(is_tchar) {
        return Err(SigV4Error::MalformedAuthorization(
            "it does not start with an algorithm name",
        ));
    }
    if algorithm != ALGORITHM {
        return Err(SigV4Error::UnsupportedAlgorithm(quote(algorithm)));
    }

    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    let mut rest = rest;
    while !rest.is_empty() {
        // memchr's word-at-a-time search: the header is some 200 bytes.
        let (component, next) = match memchr::memchr(b',', rest.as_bytes()) {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        let component = trim_ows(component);
        let Some(equals) = memchr::memchr(b'=', component.as_bytes()) else {
            return Err(SigV4Error::MalformedAuthorization(
                "a component is not of the form key=value",
            ));
        };
        let (key, value) = (&component[..equals], &component[equals + 1..]);
        if memchr::memchr2(b' ', b'\t', value.as_bytes()).is_some() {
            return Err(SigV4Error::MalformedAuthorization(
                "a component's value has a space in it (are the components separated by commas?)",
            ));
        }
        let (slot, name) = match key {
            "Credential" => (&mut credential, "Credential"),
            "SignedHeaders" => (&mut signed_headers, "SignedHeaders"),
            "Signature" => (&mut signature, "Signature"),
            other => return Err(SigV4Error::UnknownComponent(quote(other))),
        };
        if slot.replace(value).is_some() {
            return Err(SigV4Error::DuplicateComponent(name));
        }
        match next {
            // A trailing comma leaves one empty component, refused as the
            // split did.
            Some("") => {
                return Err(SigV4Error::MalformedAuthorization(
                    "a component is not of the form key=value",
                ))
            }
            Some(next) => rest = next,
            None => break,
        }
    }
    let credential = credential.ok_or(SigV4Error::MissingComponent("Credential"))?;
    let signed_headers = signed_headers.ok_or(SigV4Error::MissingComponent("SignedHeaders"))?;
    let signature = signature.ok_or(SigV4Error::MissingComponent("Signature"))?;
    Ok(Authorization {
        credential: Credential::parse(credential)?,
        signed_headers: parse_signed_headers(signed_headers)?,
        signature: parse_hex32(signature.as_bytes()).ok_or(SigV4Error::MalformedSignature)?,
    })
}

/// `text` without spaces and tabs around it.
pub(super) fn trim_ows(text: &str) -> &str {
    let bytes = text.as_bytes();
    let start = bytes
        .iter()
        .position(|&b| !is_ows_byte(b))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|&b| !is_ows_byte(b))
        .map_or(start, |at| at + 1);
    &text[start..end.max(start)]
}

/// Optional white space (RFC 9110 `OWS`): space or tab.
pub(super) fn is_ows_byte(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Parses a `SignedHeaders` list (`host;range;x-amz-date`): header names,
/// lowercase, sorted, no duplicates, `host` among them. Sorted is what every
/// signer sends and what lets a verifier rebuild the canonical request
/// without guessing an order; `host` is required so a signature cannot be
/// replayed at another bucket of a virtual-hosted store.
pub fn parse_signed_headers(text: &str) -> Result<SignedHeaders, SigV4Error> {
    SignedHeaders::parse(text)
}

/// A checked `SignedHeaders` list: header names, lowercase, sorted, no
/// duplicates, `host` among them, kept as the one `;`-joined string SigV4
/// writes. One allocation, where a `String` per name cost one each on every
/// signed request, verified and then re-signed.
///
/// ```
/// use fencegate::dialect::sigv4::SignedHeaders;
///
/// let signed = SignedHeaders::parse("host;x-amz-date").unwrap();
/// assert!(signed.contains("x-amz-date"));
/// assert_eq!(signed.iter().collect::<Vec<_>>(), ["host", "x-amz-date"]);
/// // Made from names in any order, as a signer lists what it signs.
/// let made = SignedHeaders::from_names(["x-amz-date", "host", "host"]).unwrap();
/// assert_eq!(made, signed);
/// assert!(SignedHeaders::parse("x-amz-date;host").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    /// `host;x-amz-date`, checked.
    text: String,
    /// Where the names start and end in `text`, found when it was checked:
    /// every field line of a signed request is looked up in the list, and
    /// a lookup that compares lengths first is a few instructions a name,
    /// where finding the `;`s again cost more than the comparisons.
    index: NameIndex,
}

/// Whether `name`, ASCII letters folded to lowercase, is `listed` (a
/// lowercase name of the same length). Eight bytes at a time: the list is
/// lowercase, so only `name` needs folding, and folding a word is a few
/// operations where a byte at a time took several per byte (every field
/// line of a signed request is looked up, verified and re-signed).
pub(super) fn eq_folded(listed: &[u8], name: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    /// Each byte in `A..=Z` gets 0x20 added; no other changes.
    fn fold(word: u64) -> u64 {
        let low7 = word & (0x7f * ONES);
        // The high bit of each byte: `low7 >= b'A'`, then `low7 > b'Z'`
        // (no carry leaves a byte: `low7` is at most 0x7f).
        let at_least_a = low7 + (0x80 - u64::from(b'A')) * ONES;
        let above_z = low7 + (0x80 - u64::from(b'Z') - 1) * ONES;
        let upper = at_least_a & !above_z & !word & (0x80 * ONES);
        word | (upper >> 2)
    }
    if listed.len() != name.len() {
        return false;
    }
    let mut listed_words = listed.chunks_exact(8);
    let mut name_words = name.chunks_exact(8);
    for (l, n) in (&mut listed_words).zip(&mut name_words) {
        let (Ok(l), Ok(n)) = (<[u8; 8]>::try_from(l), <[u8; 8]>::try_from(n)) else {
            return false;
        };
        if u64::from_le_bytes(l) != fold(u64::from_le_bytes(n)) {
            return false;
        }
    }
    listed_words
        .remainder()
        .iter()
        .zip(name_words.remainder())
        .all(|(l, n)| *l == n.to_ascii_lowercase())
}

/// How many names a [`SignedHeaders`] indexes (a longer list, rare, is
/// scanned for each lookup).
pub(super) const INDEXED_NAMES: usize = 24;

/// The end of each of the first [`INDEXED_NAMES`] names; `count` is `None`
/// for a longer list (or one too long for `u16`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NameIndex {
    ends: [u16; INDEXED_NAMES],
    count: Option<u8>,
}

impl SignedHeaders {
    /// Parses a list as a request carries it (see [`parse_signed_headers`]).
    pub fn parse(text: &str) -> Result<SignedHeaders, SigV4Error> {
        let index = check_signed_list(text)?;
        Ok(SignedHeaders {
            text: text.to_owned(),
            index,
        })
    }

    /// The list of `names` (lowercase header names, any order, repeats
    /// dropped); `host` must be among them.
    pub fn from_names<'a>(
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<SignedHeaders, SigV4Error> {
        let mut names: Vec<&str> = names.into_iter().collect();
        names.sort_unstable();
        names.dedup();
        let mut text = String::with_capacity(names.iter().map(|name| name.len() + 1).sum());
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                text.push(';');
            }
            text.push_str(name);
        }
        let index = check_signed_list(&text)?;
        Ok(SignedHeaders { text, index })
    }

    /// The names, in order.
    pub fn iter(&self) -> SignedNames<'_> {
        let ends = match self.index.count {
            Some(count) => &self.index.ends[..usize::from(count)],
            None => &[],
        };
        SignedNames {
            text: &self.text,
            ends,
            start: 0,
            scan: self.index.count.is_none(),
        }
    }

    /// Whether `name` (lowercase) is signed.
    pub fn contains(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    /// Where `name` (lowercase) is in the list (its index in
    /// [`SignedHeaders::iter`]).
    pub fn position(&self, name: &str) -> Option<usize> {
        self.find(name.as_bytes(), |listed, name| listed == name)
    }

    /// Whether `name`, in any case, is signed.
    pub fn contains_ignore_case(&self, name: &[u8]) -> bool {
        self.position_ignore_case(name).is_some()
    }

    /// Where `name`, in any case, is in the list (its index in
    /// [`SignedHeaders::iter`]): how a reader of field lines files each
    /// line for [`canonical_request_of`].
    pub fn position_ignore_case(&self, name: &[u8]) -> Option<usize> {
        self.find(name, eq_folded)
    }

    /// The place of the first name `same` as `name` (given the listed name,
    /// of `name`'s length, and `name`).
    fn find(&self, name: &[u8], same: impl Fn(&[u8], &[u8]) -> bool) -> Option<usize> {
        let Some(count) = self.index.count else {
            return self
                .iter()
                .position(|signed| signed.len() == name.len() && same(signed.as_bytes(), name));
        };
        let text = self.text.as_bytes();
        let mut start = 0;
        for (i, &end) in self.index.ends[..usize::from(count)].iter().enumerate() {
            let end = usize::from(end);
            if end - start == name.len() && same(&text[start..end], name) {
                return Some(i);
            }
            start = end + 1;
        }
        None
    }

    /// The list as SigV4 writes it: `host;x-amz-date`.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for SignedHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The names of a [`SignedHeaders`], in order: cut where the list's index
/// says its names end, or (a list too long to index) at each `;`.
#[derive(Debug, Clone)]
pub struct SignedNames<'a> {
    text: &'a str,
    /// The ends of the names not given yet (indexed lists).
    ends: &'a [u16],
    start: usize,
    /// Cut at each `;` (a list too long to index).
    scan: bool,
}

impl<'a> Iterator for SignedNames<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = self.text.get(self.start..)?;
        let length = if self.scan {
            memchr::memchr(b';', rest.as_bytes()).unwrap_or(rest.len())
        } else {
            let (&end, ends) = self.ends.split_first()?;
            self.ends = ends;
            usize::from(end).checked_sub(self.start)?
        };
        let name = rest.get(..length)?;
        self.start += length + 1;
        Some(name)
    }
}

/// Checks a `;`-joined list: each name a lowercase header name, each above
/// the one before, `host` among them; and where its names end. One pass
/// over its bytes.
pub(super) fn check_signed_list(text: &str) -> Result<NameIndex, SigV4Error> {
    const NOT_A_NAME: SigV4Error =
        SigV4Error::MalformedSignedHeaders("a name is empty, not lowercase or not a header name");
    if text.is_empty() {
        return Err(SigV4Error::MalformedSignedHeaders("it is empty"));
    }
    let bytes = text.as_bytes();
    let mut last: Option<&[u8]> = None;
    let mut host = false;
    let mut index = NameIndex {
        ends: [0; INDEXED_NAMES],
        count: u16::try_from(text.len()).ok().map(|_| 0),
    };
    let mut start = 0;
    for end in 0..=bytes.len() {
        match bytes.get(end) {
            Some(b';') | None => {}
            Some(&b) if BYTE_CLASS[usize::from(b)] & LOWER_TCHAR != 0 => continue,
            Some(_) => return Err(NOT_A_NAME),
        }
        let name = &bytes[start..end];
        if name.is_empty() {
            return Err(NOT_A_NAME);
        }
        if last.is_some_and(|last| last >= name) {
            return Err(SigV4Error::MalformedSignedHeaders(
                "the names are not sorted or are repeated",
            ));
        }
        host |= name == b"host";
        last = Some(name);
        index.count = match (index.count, u16::try_from(end)) {
            (Some(count), Ok(end)) if usize::from(count) < INDEXED_NAMES => {
                index.ends[usize::from(count)] = end;
                Some(count + 1)
            }
            _ => None,
        };
        start = end + 1;
    }
    if !host {
        return Err(SigV4Error::MalformedSignedHeaders("host is not signed"));
    }
    Ok(index)
}

/// RFC 9110 `tchar`.
pub(super) fn is_tchar(b: u8) -> bool {
    BYTE_CLASS[usize::from(b)] & TCHAR != 0
}

/// [`BYTE_CLASS`] bit: an RFC 9110 `tchar`.
pub(super) const TCHAR: u8 = 1;
/// [`BYTE_CLASS`] bit: SigV4's unreserved `A-Za-z0-9-_.~`, written as is.
pub(super) const UNRESERVED: u8 = 2;
/// [`BYTE_CLASS`] bit: a `tchar` that is not an uppercase letter (a byte of
/// a `SignedHeaders` name).
pub(super) const LOWER_TCHAR: u8 = 4;

/// What each byte is, as bits: a canonical request looks at every byte of
/// every signed name, path and query, twice per request (verified, then
/// re-signed), and a table is one load where the tests were a dozen
/// comparisons.
pub(super) const BYTE_CLASS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        let alphanumeric = c.is_ascii_alphanumeric();
        let mut class = 0;
        if alphanumeric || matches!(c, b'-' | b'_' | b'.' | b'~') {
            class |= UNRESERVED;
        }
        if alphanumeric
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            )
        {
            class |= TCHAR;
            if !c.is_ascii_uppercase() {
                class |= LOWER_TCHAR;
            }
        }
        table[b] = class;
        b += 1;
    }
    table
};

/// Checks that every `x-amz-*` header present in the request is signed, as
/// S3 does for header-signed requests: otherwise anyone on the path could
/// add `x-amz-copy-source`, `x-amz-acl` or `x-amz-server-side-encryption` to
/// a signed request, and the gateway would sign the addition upstream.
/// `present` yields the request's header names (any case).
pub fn check_amz_headers_signed<'a>(
    present: impl IntoIterator<Item = &'a str>,
    signed_headers: &SignedHeaders,
) -> Result<(), SigV4Error> {
    for name in present {
        let is_amz = name.len() >= 6 && name.as_bytes()[..6].eq_ignore_ascii_case(b"x-amz-");
        if is_amz && !signed_headers.contains_ignore_case(name.as_bytes()) {
            return Err(SigV4Error::UnsignedHeader(quote(name)));
        }
    }
    Ok(())
}

/// Checks a header-signed request's time (`X-Amz-Date`) against the clock:
/// at most [`MAX_CLOCK_SKEW`] either way, as S3 allows.
pub fn check_skew(amz_date: &str, now_unix_secs: u64) -> Result<(), SigV4Error> {
    let at = parse_amz_date(amz_date)?;
    if at.abs_diff(now_unix_secs) > MAX_CLOCK_SKEW {
        return Err(SigV4Error::RequestTimeTooSkewed);
    }
    Ok(())
}
