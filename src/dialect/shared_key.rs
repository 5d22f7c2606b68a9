//! Azure Blob's Shared Key authorization (`SharedKey` and
//! `SharedKeyLite`), written once for both sides of the gateway: verifying
//! what a client signed with an identity's account key, and signing what
//! the gateway forwards with the store's. No I/O and no clock: the caller
//! passes the request's parts.
//!
//! The string to sign is the service's: the verb, eleven standard fields
//! (SharedKey) or three (SharedKeyLite), the `x-ms-*` fields in the
//! service's own order, then the canonicalized resource (`/account/path`
//! as sent, and for SharedKey every query parameter, decoded). The order
//! of the `x-ms-*` fields is not byte order: the service sorts with a
//! collation that weighs `-` only when all else is equal
//! (`x-ms-meta-ab` before `x-ms-meta-a-c`), which the SDKs reproduce with
//! two weight tables; so does [`header_order`]. Checked against
//! signatures the Azure SDK for Python made (the tests below).
//!
//! ```
//! use fencegate::dialect::shared_key::*;
//!
//! let fields: [(&str, &[u8]); 2] = [
//!     ("x-ms-date", b"Fri, 27 Nov 2026 06:00:00 GMT"),
//!     ("x-ms-version", b"2025-01-05"),
//! ];
//! let to_sign = string_to_sign(Scheme::SharedKey, "GET", "devstoreaccount1", "/devstoreaccount1/fg", "", &fields)?;
//! assert!(to_sign.ends_with("x-ms-version:2025-01-05\n/devstoreaccount1/devstoreaccount1/fg"));
//! let key = AccountKey::from_base64("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==")?;
//! let auth = parse_authorization(format!("SharedKey devstoreaccount1:{}", key.sign(&to_sign)).as_bytes())?;
//! assert!(key.verify(&to_sign, &auth.signature));
//! # Ok::<(), SharedKeyError>(())
//! ```

use std::borrow::Cow;
use std::cmp::Ordering;

use base64::Engine as _;
use ring::hmac;

/// Which Shared Key scheme a request is signed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `SharedKey`: eleven standard fields and every query parameter.
    SharedKey,
    /// `SharedKeyLite`: `Content-MD5`, `Content-Type`, `Date`, and only
    /// the `comp` parameter.
    SharedKeyLite,
}

/// Why a Shared Key authorization could not be read or computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SharedKeyError {
    /// The `Authorization` value is not `SharedKey ACCOUNT:SIGNATURE`.
    #[error("malformed Shared Key authorization: {0}")]
    Malformed(&'static str),
    /// An account key that is not base64.
    #[error("the account key is not base64")]
    BadKey,
    /// A field name the service's order has no place for (not ASCII).
    #[error("the field name {0:?} cannot be ordered as the service orders names")]
    UnorderableName(String),
    /// A query that is not `name=value` pairs of percent-encoded UTF-8.
    #[error("malformed query: {0}")]
    Query(&'static str),
}

/// A parsed `Authorization: SharedKey ACCOUNT:SIGNATURE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// The scheme named.
    pub scheme: Scheme,
    /// The account whose key signed it.
    pub account: String,
    /// The HMAC-SHA256, decoded.
    pub signature: [u8; 32],
}

/// Reads an `Authorization` value of either scheme.
pub fn parse_authorization(value: &[u8]) -> Result<Authorization, SharedKeyError> {
    let text = std::str::from_utf8(value).map_err(|_| SharedKeyError::Malformed("not UTF-8"))?;
    let (scheme, rest) = text
        .trim()
        .split_once(' ')
        .ok_or(SharedKeyError::Malformed("no scheme"))?;
    let scheme = match scheme {
        "SharedKey" => Scheme::SharedKey,
        "SharedKeyLite" => Scheme::SharedKeyLite,
        _ => return Err(SharedKeyError::Malformed("not SharedKey or SharedKeyLite")),
    };
    let (account, signature) = rest
        .trim()
        .rsplit_once(':')
        .ok_or(SharedKeyError::Malformed("no ACCOUNT:SIGNATURE"))?;
    if !is_account_name(account) {
        return Err(SharedKeyError::Malformed(
            "an account name is 3 to 24 lowercase letters and digits",
        ));
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(signature)
        .map_err(|_| SharedKeyError::Malformed("the signature is not base64"))?;
    let signature: [u8; 32] = decoded
        .try_into()
        .map_err(|_| SharedKeyError::Malformed("the signature is not 32 bytes"))?;
    Ok(Authorization {
        scheme,
        account: account.to_owned(),
        signature,
    })
}

/// Whether `name` is a storage account's name: 3 to 24 lowercase letters
/// and digits.
pub fn is_account_name(name: &str) -> bool {
    (3..=24).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// The standard fields SharedKey signs, in its order (`Content-Length`
/// empty when it is 0).
const SHARED_KEY_FIELDS: [&str; 11] = [
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
];

/// The standard fields SharedKeyLite signs.
const SHARED_KEY_LITE_FIELDS: [&str; 3] = ["content-md5", "content-type", "date"];

/// The string `scheme` signs for a request: `method`, `account`, the
/// request path exactly as sent (percent-encoded, path style with the
/// account in it for Azurite and custom endpoints), its raw `query`
/// (without `?`), and every field line as `(name, value)`, names in any
/// case.
pub fn string_to_sign(
    scheme: Scheme,
    method: &str,
    account: &str,
    path: &str,
    query: &str,
    fields: &[(&str, &[u8])],
) -> Result<String, SharedKeyError> {
    // Every value of `name`, canonical, comma-separated, onto `out`.
    let push_values = |out: &mut String, name: &str| {
        let mut first = true;
        for (_, value) in fields.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)) {
            if !first {
                out.push(',');
            }
            first = false;
            push_canonical(out, value);
        }
    };
    let mut out = String::with_capacity(512);
    out.push_str(method);
    out.push('\n');
    let standard: &[&str] = match scheme {
        Scheme::SharedKey => &SHARED_KEY_FIELDS,
        Scheme::SharedKeyLite => &SHARED_KEY_LITE_FIELDS,
    };
    for name in standard {
        let start = out.len();
        push_values(&mut out, name);
        if *name == "content-length" && &out[start..] == "0" {
            out.truncate(start);
        }
        out.push('\n');
    }
    let mut names: Vec<Cow<'_, str>> = fields
        .iter()
        .filter(|(n, _)| n.len() >= 5 && n.as_bytes()[..5].eq_ignore_ascii_case(b"x-ms-"))
        .map(|(n, _)| match n.bytes().any(|b| b.is_ascii_uppercase()) {
            true => Cow::Owned(n.to_ascii_lowercase()),
            false => Cow::Borrowed(*n),
        })
        .collect();
    for name in &names {
        if !name.bytes().all(|b| usize::from(b) < LEVEL0.len()) {
            return Err(SharedKeyError::UnorderableName(name.to_string()));
        }
    }
    names.sort_by(|a, b| header_order(a, b));
    names.dedup();
    for name in &names {
        out.push_str(name);
        out.push(':');
        push_values(&mut out, name);
        out.push('\n');
    }
    out.push('/');
    out.push_str(account);
    out.push_str(path);
    let params = parse_query(query)?;
    match scheme {
        Scheme::SharedKey => {
            let mut names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            for name in names {
                let mut values: Vec<&str> = params
                    .iter()
                    .filter(|(n, _)| n == name)
                    .map(|(_, v)| v.as_str())
                    .collect();
                values.sort_unstable();
                out.push('\n');
                out.push_str(name);
                out.push(':');
                out.push_str(&values.join(","));
            }
        }
        Scheme::SharedKeyLite => {
            if let Some((_, comp)) = params.iter().find(|(n, _)| n == "comp") {
                out.push_str("?comp=");
                out.push_str(comp);
            }
        }
    }
    Ok(out)
}

/// A field value as signed onto `out`: surrounding white space removed,
/// runs of white space inside made one space. Most values are visible
/// ASCII with single spaces, and go on as they are.
fn push_canonical(out: &mut String, value: &[u8]) {
    let plain = value.first().is_none_or(|b| *b != b' ')
        && value.last().is_none_or(|b| *b != b' ')
        && value.iter().all(|b| (0x21..0x7f).contains(b) || *b == b' ')
        && !value.windows(2).any(|pair| pair == b"  ");
    match std::str::from_utf8(value) {
        Ok(text) if plain => out.push_str(text),
        _ => {
            let text = String::from_utf8_lossy(value);
            let mut words = text.split_whitespace();
            if let Some(word) = words.next() {
                out.push_str(word);
            }
            for word in words {
                out.push(' ');
                out.push_str(word);
            }
        }
    }
}

/// The query's parameters, names lowercased and values decoded.
fn parse_query(query: &str) -> Result<Vec<(String, String)>, SharedKeyError> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            // Decoded as the SDKs' `unquote` does: `+` stays `+`.
            let decode = |text: &str| {
                percent_encoding::percent_decode_str(text)
                    .decode_utf8()
                    .map(|decoded| decoded.into_owned())
                    .map_err(|_| SharedKeyError::Query("not UTF-8 once decoded"))
            };
            Ok((decode(name)?.to_ascii_lowercase(), decode(value)?))
        })
        .collect()
}

/// The order the service sorts `x-ms-*` names in: by the first level of
/// its collation (letters and digits; `-` and `'` weigh nothing there),
/// then by the last (`-` and `'` themselves), as the SDKs' tables say.
pub fn header_order(a: &str, b: &str) -> Ordering {
    let levels: [&[u16; 128]; 2] = [&LEVEL0, &LEVEL4];
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let weight = |table: &[u16; 128], text: &[u8], i: usize| -> u16 {
        match text.get(i) {
            Some(&byte) => table.get(usize::from(byte)).copied().unwrap_or(0),
            None => 1,
        }
    };
    for (level, table) in levels.iter().enumerate() {
        let (mut i, mut j) = (0, 0);
        loop {
            if level == levels.len() - 1 && i != j {
                return j.cmp(&i);
            }
            let (w1, w2) = (weight(table, a, i), weight(table, b, j));
            if w1 == 1 && w2 == 1 {
                break;
            }
            if w1 == w2 {
                i += 1;
                j += 1;
            } else if w1 == 0 {
                i += 1;
            } else if w2 == 0 {
                j += 1;
            } else {
                return w1.cmp(&w2);
            }
        }
    }
    Ordering::Equal
}

/// The oldest service SAS version read (`sv`): from it on, the string to
/// sign has the encryption scope's line. An older SAS is refused.
pub const MIN_SAS_VERSION: &str = "2020-12-06";

/// A service SAS, as its query parameters give it (values decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSas {
    /// `sv`.
    pub version: String,
    /// `sr`: `b` (a blob), `c` (a container), `bs` (a blob snapshot),
    /// `bv` (a blob version), `d` (a directory).
    pub resource: String,
    /// `sp`, as signed (`r`, `a`, `c`, `w`, `d`, `l`, ...).
    pub permissions: String,
    /// `st`, if given.
    pub start: Option<String>,
    /// `se`.
    pub expiry: String,
    /// `sip`: an address or a range `a-b`.
    pub ip: Option<String>,
    /// `spr`: `https` or `https,http`.
    pub protocol: Option<String>,
    /// `ses`.
    pub encryption_scope: Option<String>,
    /// `rscc`, `rscd`, `rsce`, `rscl`, `rsct`: response headers the store
    /// is asked to set.
    pub response_headers: [Option<String>; 5],
    /// `sig`, decoded.
    pub signature: [u8; 32],
}

/// The service SAS in a request's raw `query`, if it has one (`sig`).
/// Refused: a stored access policy (`si`), an account SAS (`ss`, `srt`),
/// a user-delegation SAS (`skoid`), a version before
/// [`MIN_SAS_VERSION`], a missing `sv`, `sr`, `sp` or `se`.
pub fn parse_service_sas(query: &str) -> Result<Option<ServiceSas>, SharedKeyError> {
    let params = parse_query(query)?;
    let one = |name: &str| -> Result<Option<String>, SharedKeyError> {
        let mut values = params.iter().filter(|(n, _)| n == name);
        let first = values.next().map(|(_, v)| v.clone());
        match values.next() {
            Some(_) => Err(SharedKeyError::Malformed("a SAS parameter given twice")),
            None => Ok(first),
        }
    };
    let Some(signature) = one("sig")? else {
        return Ok(None);
    };
    for (name, why) in [
        (
            "si",
            "a SAS with a stored access policy (si) is not accepted",
        ),
        ("ss", "an account SAS is not accepted, only a service SAS"),
        ("srt", "an account SAS is not accepted, only a service SAS"),
        (
            "skoid",
            "a user-delegation SAS is not accepted, only a service SAS",
        ),
    ] {
        if one(name)?.is_some() {
            return Err(SharedKeyError::Malformed(why));
        }
    }
    let need = |name: &'static str| -> Result<String, SharedKeyError> {
        one(name)?.ok_or(SharedKeyError::Malformed("a SAS needs sv, sr, sp and se"))
    };
    let version = need("sv")?;
    let dated = version.len() == 10
        && version.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    if !dated || version.as_str() < MIN_SAS_VERSION {
        return Err(SharedKeyError::Malformed(
            "a SAS version (sv) from 2020-12-06 on is needed",
        ));
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(signature.as_bytes())
        .map_err(|_| SharedKeyError::Malformed("the SAS signature is not base64"))?;
    let signature: [u8; 32] = decoded
        .try_into()
        .map_err(|_| SharedKeyError::Malformed("the SAS signature is not 32 bytes"))?;
    Ok(Some(ServiceSas {
        resource: need("sr")?,
        permissions: need("sp")?,
        expiry: need("se")?,
        version,
        start: one("st")?,
        ip: one("sip")?,
        protocol: one("spr")?,
        encryption_scope: one("ses")?,
        response_headers: [
            one("rscc")?,
            one("rscd")?,
            one("rsce")?,
            one("rscl")?,
            one("rsct")?,
        ],
        signature,
    }))
}

/// The string a service SAS signs, for the resource `path` (decoded:
/// `/container` or `/container/blob`) of `account`, and the request's
/// `snapshot` parameter if any.
pub fn sas_string_to_sign(
    sas: &ServiceSas,
    account: &str,
    path: &str,
    snapshot: Option<&str>,
) -> String {
    let field = |value: &Option<String>| value.clone().unwrap_or_default();
    let mut lines = vec![
        sas.permissions.clone(),
        field(&sas.start),
        sas.expiry.clone(),
        format!("/blob/{account}{path}"),
        String::new(),
        field(&sas.ip),
        field(&sas.protocol),
        sas.version.clone(),
        sas.resource.clone(),
        snapshot.unwrap_or_default().to_owned(),
        field(&sas.encryption_scope),
    ];
    lines.extend(sas.response_headers.iter().map(field));
    lines.join("\n")
}

/// Why a service SAS may not be used for this request, though it is
/// well signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SasLimit {
    /// `st` is later than now.
    #[error("the SAS is not valid yet (st)")]
    NotYet,
    /// `se` has passed.
    #[error("the SAS has expired (se)")]
    Expired,
    /// The client's address is not `sip`'s.
    #[error("the SAS is for other client addresses (sip)")]
    Address,
    /// `spr=https` on a plain-HTTP connection.
    #[error("the SAS is for HTTPS only (spr)")]
    Protocol,
    /// A time, an address or a protocol the service would not read.
    #[error("malformed SAS {0}")]
    Malformed(&'static str),
}

/// Whether `sas` may be used at `now` (Unix seconds) by a client at
/// `client`, over TLS or not: `st <= now < se`, the address within `sip`
/// (one IPv4 address or a range `a-b`), `spr` allowing the protocol. The
/// gateway checks these itself: the store sees only the gateway's own
/// signature.
pub fn check_sas_limits(
    sas: &ServiceSas,
    now: u64,
    client: std::net::IpAddr,
    tls: bool,
) -> Result<(), SasLimit> {
    if let Some(start) = &sas.start {
        if parse_sas_time(start).ok_or(SasLimit::Malformed("start (st)"))? > now {
            return Err(SasLimit::NotYet);
        }
    }
    if parse_sas_time(&sas.expiry).ok_or(SasLimit::Malformed("expiry (se)"))? <= now {
        return Err(SasLimit::Expired);
    }
    if let Some(range) = &sas.ip {
        let parse = |text: &str| {
            text.trim()
                .parse::<std::net::Ipv4Addr>()
                .map_err(|_| SasLimit::Malformed("address (sip)"))
        };
        let (low, high) = match range.split_once('-') {
            Some((low, high)) => (parse(low)?, parse(high)?),
            None => (parse(range)?, parse(range)?),
        };
        let within = match client {
            std::net::IpAddr::V4(v4) => low <= v4 && v4 <= high,
            std::net::IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .is_some_and(|v4| low <= v4 && v4 <= high),
        };
        if !within {
            return Err(SasLimit::Address);
        }
    }
    match sas.protocol.as_deref() {
        None | Some("https,http") => Ok(()),
        Some("https") if tls => Ok(()),
        Some("https") => Err(SasLimit::Protocol),
        Some(_) => Err(SasLimit::Malformed("protocol (spr)")),
    }
}

/// A SAS time as Unix seconds: `YYYY-MM-DD`, `YYYY-MM-DDThh:mmZ` or
/// `YYYY-MM-DDThh:mm:ss[.fraction]Z`, in UTC (the forms the service reads).
pub fn parse_sas_time(text: &str) -> Option<u64> {
    let number = |part: &str, len: usize| -> Option<u64> {
        (part.len() == len && part.bytes().all(|b| b.is_ascii_digit()))
            .then(|| part.parse().ok())
            .flatten()
    };
    let (date, time) = match text.split_once('T') {
        Some((date, time)) => (date, Some(time.strip_suffix('Z')?)),
        None => (text, None),
    };
    let mut parts = date.split('-');
    let (year, month, day) = (
        number(parts.next()?, 4)?,
        number(parts.next()?, 2)?,
        number(parts.next()?, 2)?,
    );
    if parts.next().is_some()
        || year < 1970
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
    {
        return None;
    }
    let seconds_of_day = match time {
        None => 0,
        Some(time) => {
            let mut parts = time.split(':');
            let hours = number(parts.next()?, 2)?;
            let minutes = number(parts.next()?, 2)?;
            let seconds = match parts.next() {
                None => 0,
                Some(seconds) => {
                    let whole = seconds
                        .split_once('.')
                        .map_or(seconds, |(whole, fraction)| {
                            if fraction.is_empty() || !fraction.bytes().all(|b| b.is_ascii_digit())
                            {
                                ""
                            } else {
                                whole
                            }
                        });
                    number(whole, 2)?
                }
            };
            if parts.next().is_some() || hours > 23 || minutes > 59 || seconds > 59 {
                return None;
            }
            hours * 3600 + minutes * 60 + seconds
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm), from 1970.
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let year_of_era = y - era * 400;
    let day_of_year = (153 * m + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = (era * 146_097 + day_of_era).checked_sub(719_468)?;
    Some(days * 86_400 + seconds_of_day)
}

/// An account key (the base64 the portal shows, decoded).
#[derive(Clone)]
pub struct AccountKey(hmac::Key);

impl std::fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccountKey(***)")
    }
}

impl AccountKey {
    /// The key from its base64 form.
    pub fn from_base64(text: &str) -> Result<AccountKey, SharedKeyError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| SharedKeyError::BadKey)?;
        Ok(AccountKey(hmac::Key::new(hmac::HMAC_SHA256, &bytes)))
    }

    /// The signature of `string_to_sign`, in base64 (what follows
    /// `ACCOUNT:` in the header).
    pub fn sign(&self, string_to_sign: &str) -> String {
        let tag = hmac::sign(&self.0, string_to_sign.as_bytes());
        base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
    }

    /// Whether `claimed` is the signature of `string_to_sign`, compared
    /// in constant time.
    pub fn verify(&self, string_to_sign: &str, claimed: &[u8; 32]) -> bool {
        hmac::verify(&self.0, string_to_sign.as_bytes(), claimed).is_ok()
    }
}

/// The first level of the service's collation, for ASCII (the SDKs'
/// `table_lv0`): 0 for what weighs nothing there.
#[rustfmt::skip]
const LEVEL0: [u16; 128] = [
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x71c, 0x0, 0x71f, 0x721, 0x723, 0x725,
    0x0, 0x0, 0x0, 0x72d, 0x803, 0x0, 0x0, 0x733, 0x0, 0xd03, 0xd1a, 0xd1c, 0xd1e,
    0xd20, 0xd22, 0xd24, 0xd26, 0xd28, 0xd2a, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0xe02, 0xe09, 0xe0a, 0xe1a, 0xe21, 0xe23, 0xe25, 0xe2c, 0xe32, 0xe35, 0xe36, 0xe48, 0xe51,
    0xe70, 0xe7c, 0xe7e, 0xe89, 0xe8a, 0xe91, 0xe99, 0xe9f, 0xea2, 0xea4, 0xea6, 0xea7, 0xea9,
    0x0, 0x0, 0x0, 0x743, 0x744, 0x748, 0xe02, 0xe09, 0xe0a, 0xe1a, 0xe21, 0xe23, 0xe25,
    0xe2c, 0xe32, 0xe35, 0xe36, 0xe48, 0xe51, 0xe70, 0xe7c, 0xe7e, 0xe89, 0xe8a, 0xe91, 0xe99,
    0xe9f, 0xea2, 0xea4, 0xea6, 0xea7, 0xea9, 0x0, 0x74c, 0x0, 0x750, 0x0,
];

/// The last level (the SDKs' `table_lv4`): `'` and `-`.
const LEVEL4: [u16; 128] = {
    let mut table = [0u16; 128];
    table[0x27] = 0x8012;
    table[0x2d] = 0x8212;
    table
};

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// The fast path of a field value is the slow one's result.
        #[test]
        fn canonical_values_are_the_words_joined(value in proptest::collection::vec(
            prop_oneof![Just(b' '), Just(b'\t'), Just(b'a'), Just(0xc2u8), Just(0xa0u8), any::<u8>()],
            0..24,
        )) {
            let mut fast = String::new();
            push_canonical(&mut fast, &value);
            let slow = String::from_utf8_lossy(&value)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            prop_assert_eq!(fast, slow);
        }
    }

    use super::*;

    /// Azurite's well-known development account key.
    const KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    /// Requests signed by the Azure SDK for Python (azure-storage-blob
    /// 12.31.1, its `SharedKeyCredentialPolicy`), with the string it
    /// signed and its `Authorization`.
    /// Method, path, query, fields, the string signed, `Authorization`.
    type Vector = (
        &'static str,
        &'static str,
        &'static str,
        Vec<(&'static str, &'static str)>,
        &'static str,
        &'static str,
    );

    fn sdk_vectors() -> Vec<Vector> {
        let date = ("x-ms-date", "Fri, 27 Nov 2026 06:00:00 GMT");
        let version = ("x-ms-version", "2025-01-05");
        vec![
            (
                "PUT",
                "/devstoreaccount1/fg/report%20q3.csv",
                "",
                vec![("Content-Length", "5"), ("Content-Type", "text/csv"), ("x-fencing-token", "7"), ("x-ms-blob-type", "BlockBlob"), date, ("x-ms-meta-a-c", "1"), ("x-ms-meta-ab", "2"), version],
                "PUT\n\n\n5\n\ntext/csv\n\n\n\n\n\n\nx-ms-blob-type:BlockBlob\nx-ms-date:Fri, 27 Nov 2026 06:00:00 GMT\nx-ms-meta-ab:2\nx-ms-meta-a-c:1\nx-ms-version:2025-01-05\n/devstoreaccount1/devstoreaccount1/fg/report%20q3.csv",
                "SharedKey devstoreaccount1:84L/5wBbjd/zz0Mv6F54CTx3jyqNqhot37kFkTwS3iU=",
            ),
            (
                "GET",
                "/devstoreaccount1/fg",
                "restype=container&comp=list&prefix=a%2Fb",
                vec![("Content-Length", "0"), date, version],
                "GET\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:Fri, 27 Nov 2026 06:00:00 GMT\nx-ms-version:2025-01-05\n/devstoreaccount1/devstoreaccount1/fg\ncomp:list\nprefix:a/b\nrestype:container",
                "SharedKey devstoreaccount1:UEVDJtW/evJnPRKqFzki7D6SAbZJXSc4CxR684PJiOc=",
            ),
            (
                "PUT",
                "/devstoreaccount1/fg/big",
                "comp=block&blockid=QUFBQQ%3D%3D",
                vec![("Content-Length", "3"), ("If-Match", "\"0x8D\""), date, version],
                "PUT\n\n\n3\n\n\n\n\n\"0x8D\"\n\n\n\nx-ms-date:Fri, 27 Nov 2026 06:00:00 GMT\nx-ms-version:2025-01-05\n/devstoreaccount1/devstoreaccount1/fg/big\nblockid:QUFBQQ==\ncomp:block",
                "SharedKey devstoreaccount1:xAT9SFOtMe++p/FLou/Mzj89jbBN5Dq8g2I7RNOAX/Q=",
            ),
        ]
    }

    #[test]
    fn the_sdks_signatures_verify_and_are_reproduced() {
        let key = AccountKey::from_base64(KEY).unwrap();
        for (method, path, query, fields, expected, header) in sdk_vectors() {
            let fields: Vec<(&str, &[u8])> =
                fields.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
            let to_sign = string_to_sign(
                Scheme::SharedKey,
                method,
                "devstoreaccount1",
                path,
                query,
                &fields,
            )
            .unwrap();
            assert_eq!(to_sign, expected, "{method} {path}");
            let auth = parse_authorization(header.as_bytes()).unwrap();
            assert_eq!(auth.account, "devstoreaccount1");
            assert!(key.verify(&to_sign, &auth.signature), "{method} {path}");
            assert_eq!(
                format!("SharedKey devstoreaccount1:{}", key.sign(&to_sign)),
                header
            );
            // One byte more anywhere and it no longer verifies.
            assert!(!key.verify(&format!("{to_sign}x"), &auth.signature));
        }
    }

    /// SAS tokens made by the Azure SDK for Python (`generate_blob_sas`,
    /// `generate_container_sas`, azure-storage-blob 12.31.1) with Azurite's
    /// key: they verify for their resource, and for no other.
    #[test]
    fn the_sdks_sas_tokens_verify_for_their_resource_only() {
        let key = AccountKey::from_base64(KEY).unwrap();
        let blob = "st=2026-11-27T06%3A00%3A00Z&se=2026-11-27T07%3A00%3A00Z&sp=rw&sip=127.0.0.1&spr=https%2Chttp&sv=2026-10-06&sr=b&rsct=text/csv&sig=6AhsbLX4U43ibnrgkWOBRJRMmCS%2BTd%2B0YKbVZpCGUl4%3D";
        let sas = parse_service_sas(blob).unwrap().unwrap();
        assert_eq!(sas.permissions, "rw");
        assert_eq!(sas.protocol.as_deref(), Some("https,http"));
        let to_sign = sas_string_to_sign(&sas, "devstoreaccount1", "/fg/report q3.csv", None);
        assert!(key.verify(&to_sign, &sas.signature), "{to_sign:?}");
        let other = sas_string_to_sign(&sas, "devstoreaccount1", "/fg/other.csv", None);
        assert!(!key.verify(&other, &sas.signature));
        let container = "se=2026-11-28T00%3A00%3A00Z&sp=rl&sv=2026-10-06&sr=c&sig=NBnrcyEIFBR3mtqtOgx6/BUweodifYg1Npm9sqEPa0I%3D";
        let sas = parse_service_sas(container).unwrap().unwrap();
        let to_sign = sas_string_to_sign(&sas, "devstoreaccount1", "/fg", None);
        assert!(key.verify(&to_sign, &sas.signature), "{to_sign:?}");
        // Widened permissions no longer verify.
        let mut widened = sas.clone();
        widened.permissions = "rlw".into();
        let to_sign = sas_string_to_sign(&widened, "devstoreaccount1", "/fg", None);
        assert!(!key.verify(&to_sign, &widened.signature));
    }

    #[test]
    fn sas_limits_are_enforced() {
        let blob = "st=2026-11-27T06%3A00%3A00Z&se=2026-11-27T07%3A00%3A00Z&sp=rw&sip=127.0.0.1&spr=https%2Chttp&sv=2026-10-06&sr=b&rsct=text/csv&sig=6AhsbLX4U43ibnrgkWOBRJRMmCS%2BTd%2B0YKbVZpCGUl4%3D";
        let sas = parse_service_sas(blob).unwrap().unwrap();
        let six = parse_sas_time("2026-11-27T06:00:00Z").unwrap();
        assert_eq!(six, 1_795_759_200);
        let local: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(check_sas_limits(&sas, six, local, false), Ok(()));
        assert_eq!(
            check_sas_limits(&sas, six - 1, local, false),
            Err(SasLimit::NotYet)
        );
        assert_eq!(
            check_sas_limits(&sas, six + 3600, local, false),
            Err(SasLimit::Expired)
        );
        let other: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(
            check_sas_limits(&sas, six, other, true),
            Err(SasLimit::Address)
        );
        let mut https_only = sas.clone();
        https_only.protocol = Some("https".into());
        https_only.ip = Some("127.0.0.0-127.0.0.9".into());
        assert_eq!(
            check_sas_limits(&https_only, six, local, false),
            Err(SasLimit::Protocol)
        );
        assert_eq!(check_sas_limits(&https_only, six, local, true), Ok(()));
        for (text, unix) in [
            ("1970-01-01", Some(0)),
            ("0000-01-01", None),
            ("1969-12-31T23:59:59Z", None),
            ("2026-11-27", Some(1_795_737_600)),
            ("2026-11-27T06:00Z", Some(1_795_759_200)),
            ("2026-11-27T06:00:00.1234567Z", Some(1_795_759_200)),
            ("2024-02-29T23:59:59Z", Some(1_709_251_199)),
            ("2026-11-27T06:00:00", None),
            ("2026-13-01", None),
            ("2026-11-27T24:00:00Z", None),
            ("26-11-27", None),
            ("2026-11-27T06:00:00.Z", None),
        ] {
            assert_eq!(parse_sas_time(text), unix, "{text}");
        }
    }

    #[test]
    fn sas_forms_not_accepted_are_refused() {
        let sig = "sig=NBnrcyEIFBR3mtqtOgx6/BUweodifYg1Npm9sqEPa0I%3D";
        assert_eq!(parse_service_sas("comp=list"), Ok(None));
        for bad in [
            format!("se=x&sp=r&sv=2026-10-06&sr=c&si=policy&{sig}"),
            format!("se=x&sp=r&sv=2026-10-06&ss=b&srt=sco&{sig}"),
            format!("se=x&sp=r&sv=2026-10-06&sr=c&skoid=abc&{sig}"),
            format!("se=x&sp=r&sv=2019-02-02&sr=c&{sig}"),
            format!("se=x&sp=r&sr=c&{sig}"),
            format!("sp=r&sv=2026-10-06&sr=c&{sig}"),
            "se=x&sp=r&sv=2026-10-06&sr=c&sig=short".to_owned(),
            format!("se=x&se=y&sp=r&sv=2026-10-06&sr=c&{sig}"),
        ] {
            assert!(parse_service_sas(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_are_ordered_as_the_service_orders_them() {
        let mut names = vec![
            "x-ms-meta-a-c",
            "x-ms-version",
            "x-ms-meta-ab",
            "x-ms-date",
            "x-ms-blob-type",
            "x-ms-meta-a",
        ];
        names.sort_by(|a, b| header_order(a, b));
        assert_eq!(
            names,
            [
                "x-ms-blob-type",
                "x-ms-date",
                "x-ms-meta-a",
                "x-ms-meta-ab",
                "x-ms-meta-a-c",
                "x-ms-version"
            ]
        );
        assert_eq!(header_order("x-ms-a", "x-ms-a"), Ordering::Equal);
    }

    #[test]
    fn lite_signs_fewer_fields_and_only_comp() {
        let fields: [(&str, &[u8]); 3] = [
            ("Content-Type", b"text/plain"),
            ("Content-Length", b"9"),
            ("x-ms-date", b"Fri, 27 Nov 2026 06:00:00 GMT"),
        ];
        let to_sign = string_to_sign(
            Scheme::SharedKeyLite,
            "PUT",
            "acct",
            "/acct/c/b",
            "comp=block&blockid=QQ%3D%3D",
            &fields,
        )
        .unwrap();
        assert_eq!(to_sign, "PUT\n\ntext/plain\n\nx-ms-date:Fri, 27 Nov 2026 06:00:00 GMT\n/acct/acct/c/b?comp=block");
    }

    #[test]
    fn malformed_authorizations_are_refused() {
        for bad in [
            &b"SharedKey"[..],
            b"Basic dXNlcjpwYXNz",
            b"SharedKey devstoreaccount1",
            b"SharedKey Dev:AAAA",
            b"SharedKey devstoreaccount1:not base64!",
            b"SharedKey devstoreaccount1:AAAA",
            b"SharedKey \xff:AAAA",
        ] {
            assert!(
                parse_authorization(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let fields: [(&str, &[u8]); 1] = [("x-ms-é", b"1")];
        assert!(string_to_sign(Scheme::SharedKey, "GET", "a", "/a", "", &fields).is_err());
        assert!(AccountKey::from_base64("not base64!").is_err());
    }
}
