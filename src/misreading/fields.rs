//! The one pass over a request's fields that [`misreading`](super::misreading)
//! makes: override fields, deciding fields given twice or named in
//! `Connection`, the host and the token headers, each compared with the
//! one or two names of its length.

use http::header::HeaderName;

use super::found::{Misreading, DECIDING_FIELDS, END_TO_END, OVERRIDE_FIELDS};
use crate::head::{HeaderFields, RequestView};

/// The deciding fields' names, in [`DECIDING_FIELDS`]' order, as bytes:
/// matched in [`FieldScan`]'s one pass.
const DECIDING_NAMES: [&[u8]; 11] = [
    b"content-type",
    b"depth",
    b"destination",
    b"overwrite",
    b"if",
    b"lock-token",
    b"x-amz-copy-source",
    b"x-amz-copy-source-range",
    b"x-ms-copy-source",
    b"x-ms-rename-source",
    b"x-goog-copy-source",
];

/// [`END_TO_END`]'s names, as bytes.
const END_TO_END_NAMES: [&[u8]; 4] = [
    b"host",
    b"x-fencing-token",
    b"x-ms-fencing-token",
    b"x-fencing-lock",
];

/// [`OVERRIDE_FIELDS`]' names, as bytes.
const OVERRIDE_NAMES: [&[u8]; 3] = [
    b"x-http-method",
    b"x-http-method-override",
    b"x-method-override",
];

/// What one pass over a request's fields found: this runs on every
/// request, so the fields are walked once (a lookup per name was 18
/// lookups and a sixth of a request's instructions), and a name is
/// compared only when its length is one of the names looked for.
pub(super) struct FieldScan<'a> {
    /// The first override field.
    overridden: Option<&'a [u8]>,
    /// The index of the first deciding field given twice.
    twice: Option<usize>,
    /// A field named in `Connection` that must reach the store.
    hop: Option<HeaderName>,
    /// Deciding fields seen so far (bit `i`: [`DECIDING_NAMES`]`[i]`).
    pub(super) seen: u16,
    /// An `x-amz-*` field (any case) came: an S3 write without one is
    /// decided by its method and path alone.
    pub(super) amz: bool,
    /// An `Upgrade` field came (the proxy refuses a real upgrade).
    pub(super) upgrade: bool,
    /// An `Expect` field came (the data plane reads it).
    pub(super) expect: bool,
    pub(super) hosts: u8,
    pub(super) host: Option<&'a [u8]>,
    /// A token or lock header under one of its default names.
    pub(super) token: bool,
    /// A rename field (`x-amz-rename-source`, `x-ms-rename-source`).
    renames: bool,
}

impl<'a> FieldScan<'a> {
    /// The scan of `fields`; `None` if they cannot be walked.
    pub(super) fn of<H: HeaderFields + ?Sized>(fields: &'a H) -> Option<FieldScan<'a>> {
        let mut scan = FieldScan {
            overridden: None,
            twice: None,
            hop: None,
            seen: 0,
            amz: false,
            upgrade: false,
            expect: false,
            hosts: 0,
            host: None,
            token: false,
            renames: false,
        };
        let walked = fields.each_field(|name, value| {
            let is = |known: &[u8]| name.eq_ignore_ascii_case(known);
            // One arm per length a looked-for name has: a field is compared
            // with the one or two names of its length, or with none.
            let deciding = match name.len() {
                7 if is(b"upgrade") => {
                    scan.upgrade = true;
                    return;
                }
                6 if is(b"expect") => {
                    scan.expect = true;
                    return;
                }
                4 if is(b"host") => {
                    scan.hosts = scan.hosts.saturating_add(1);
                    scan.host = Some(value);
                    return;
                }
                14 | 15 if is(b"x-fencing-lock") || is(b"x-fencing-token") => {
                    scan.token = true;
                    return;
                }
                18 if is(b"x-ms-fencing-token") => {
                    scan.token = true;
                    return;
                }
                10 if is(b"connection") => {
                    if scan.hop.is_none() {
                        scan.hop = named_in_connection(value);
                    }
                    return;
                }
                13 | 17 | 22 if OVERRIDE_NAMES.iter().any(|known| is(known)) => {
                    if scan.overridden.is_none() {
                        scan.overridden = Some(match name.len() {
                            13 => OVERRIDE_NAMES[0],
                            22 => OVERRIDE_NAMES[1],
                            _ => OVERRIDE_NAMES[2],
                        });
                    }
                    return;
                }
                19 if is(b"x-amz-rename-source") => {
                    scan.renames = true;
                    return;
                }
                2 | 5 | 9 | 10 | 11 | 12 | 16 | 17 | 18 | 23 => {
                    DECIDING_NAMES.iter().position(|known| is(known))
                }
                _ => None,
            };
            // The names that returned above are no `x-amz-*` field (but
            // the rename field, refused anyway); most others fail at their
            // first byte.
            scan.amz |= name.len() > 6
                && name[0] | 0x20 == b'x'
                && name[..6].eq_ignore_ascii_case(b"x-amz-");
            if let Some(i) = deciding {
                let bit = 1u16 << i;
                if scan.seen & bit != 0 && scan.twice.is_none() {
                    scan.twice = Some(i);
                }
                scan.seen |= bit;
                // DECIDING_NAMES[9]: x-ms-rename-source.
                scan.renames |= i == 9;
            }
        });
        if !walked {
            return None;
        }
        Some(scan)
    }

    /// An override field, else a deciding field twice or named in
    /// `Connection`, in [`misreading`]'s order.
    pub(super) fn overridden_or_ambiguous(&self) -> Option<Misreading> {
        if let Some(name) = self.overridden {
            return Some(Misreading::MethodOverride {
                named: format!("the {} header", String::from_utf8_lossy(name)),
            });
        }
        if let Some(i) = self.twice {
            return Some(Misreading::AmbiguousField {
                name: DECIDING_FIELDS[i].clone(),
                hop_by_hop: false,
            });
        }
        if let Some(name) = self.hop.clone() {
            return Some(Misreading::AmbiguousField {
                name,
                hop_by_hop: true,
            });
        }
        self.renames.then_some(Misreading::Rename)
    }
}

/// The first deciding or end-to-end field a `Connection` value names.
fn named_in_connection(value: &[u8]) -> Option<HeaderName> {
    value.split(|&b| b == b',').find_map(|option| {
        let option = option.trim_ascii();
        DECIDING_NAMES
            .iter()
            .position(|known| known.eq_ignore_ascii_case(option))
            .map(|i| DECIDING_FIELDS[i].clone())
            .or_else(|| {
                END_TO_END_NAMES
                    .iter()
                    .position(|known| known.eq_ignore_ascii_case(option))
                    .map(|i| END_TO_END[i].clone())
            })
    })
}

/// The override, duplicate and `Connection` checks by a lookup per name,
/// for fields that cannot be walked.
pub(super) fn looked_up<H: HeaderFields + ?Sized>(fields: &H) -> Option<Misreading> {
    if let Some(name) = OVERRIDE_FIELDS.iter().find(|name| fields.contains(name)) {
        return Some(Misreading::MethodOverride {
            named: format!("the {name} header"),
        });
    }
    ambiguous_field(fields)
}

/// Whether `host` is certainly a valid `Host` value, by one look at its
/// bytes: letters, digits, `-` and `.`, then an optional `:` and 1 to 5
/// digits of a port up to 65535. Anything else goes to [`bad_host`]'s
/// whole check, which decides.
pub(super) fn plain_host(host: &[u8]) -> bool {
    // Two short passes measured cheaper here than one fold that classifies
    // each byte (callgrind, W1: 191 against 309 and 406 instructions).
    let (name, port) = match host.iter().position(|&b| b == b':') {
        Some(at) => (&host[..at], Some(&host[at + 1..])),
        None => (host, None),
    };
    let name_ok = !name.is_empty() && name.iter().all(|&b| HOST_BYTES[usize::from(b)] == 1);
    let port_ok = match port {
        None => true,
        Some(port) => {
            (1..=5).contains(&port.len())
                && port.iter().all(u8::is_ascii_digit)
                && port.iter().fold(0u32, |n, &b| n * 10 + u32::from(b - b'0'))
                    <= u32::from(u16::MAX)
        }
    };
    name_ok && port_ok
}

/// What [`plain_host`] takes of each byte: 1 in a host name (letters,
/// digits, `-`, `.`), 2 for `:`, 0 for anything else.
static HOST_BYTES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = if c.is_ascii_alphanumeric() || c == b'-' || c == b'.' {
            1
        } else if c == b':' {
            2
        } else {
            0
        };
        b += 1;
    }
    table
};

/// The route's token header (`token_header`) named in `Connection`: it
/// would be read for the fence, then dropped before the store, which may
/// check it too (400 `bad_request`). The default names are refused before
/// routing already ([`END_TO_END`]).
pub fn names_in_connection<R: RequestView + ?Sized>(
    request: &R,
    token_header: &HeaderName,
) -> Option<Misreading> {
    let named = request
        .fields()
        .values_of(&http::header::CONNECTION)
        .flat_map(|value| value.split(|&b| b == b','))
        .any(|option| {
            option
                .trim_ascii()
                .eq_ignore_ascii_case(token_header.as_str().as_bytes())
        });
    named.then(|| Misreading::AmbiguousField {
        name: token_header.clone(),
        hop_by_hop: true,
    })
}

/// A deciding field given twice or named in `Connection`.
fn ambiguous_field<H: HeaderFields + ?Sized>(fields: &H) -> Option<Misreading> {
    for name in &DECIDING_FIELDS {
        if fields.values_of(name).nth(1).is_some() {
            return Some(Misreading::AmbiguousField {
                name: name.clone(),
                hop_by_hop: false,
            });
        }
    }
    for value in fields.values_of(&http::header::CONNECTION) {
        for option in value.split(|&b| b == b',') {
            let option = option.trim_ascii();
            if let Some(name) = DECIDING_FIELDS
                .iter()
                .chain(&END_TO_END)
                .find(|name| option.eq_ignore_ascii_case(name.as_str().as_bytes()))
            {
                return Some(Misreading::AmbiguousField {
                    name: name.clone(),
                    hop_by_hop: true,
                });
            }
        }
    }
    None
}
