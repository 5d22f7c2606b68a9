//! WebDAV locks under custody, bound to identities (SPEC, "Deny by
//! default": "WebDAV locks under custody").
//!
//! Every identity reaches the store as one user, so the store cannot tell
//! whose lock token a request carries: without the gateway's help any
//! identity could remove another's lock (a depth-infinity lock protects
//! collections outside the remover's prefixes) or write under it with its
//! token, which a `PROPFIND` of `lockdiscovery` shows to every reader.
//!
//! # The binding lives in the token
//!
//! The gateway never hands out the store's lock token. In a `LOCK` answer
//! it relays (the `Lock-Token` field, and the token in the body's
//! `lockdiscovery`), the store's token becomes a token of the gateway's:
//!
//! ```text
//! opaquelocktoken:<the store's UUID>/<seal>
//! ```
//!
//! the seal being, in unpadded base64url, 8 bytes of the lock root's
//! SHA-256 and the first 16 bytes of an HMAC-SHA256 over the store's
//! token, the name of the identity that took the lock and that hash. A
//! store token that is no `opaquelocktoken:` UUID is carried whole after
//! the seal, under the nil UUID. The identity is not written in the token:
//! a token verifies only with the name of the identity it was handed to,
//! so another identity's token is one that does not verify. It is an
//! `opaquelocktoken:` URI as RFC 4918 (appendix C) writes it, a UUID with
//! a path after it, 85 characters long for Apache's tokens (clients keep
//! tokens in small buffers: litmus builds an `If` field in 200 bytes), so a
//! client takes it as any other lock token. The MAC's key is derived
//! (PBKDF2) from the store's credentials (`seal_keys.rs`, shared with S3's
//! upload ids), which every instance in front of the store holds: the
//! binding holds across instances and restarts with no shared state,
//! and an instance that never saw the `LOCK` checks the token as well as
//! the one that answered it. After a rotation of the store's credentials
//! tokens sealed with the previous key still verify (the one before is
//! kept), so a rolling reload breaks no lock.
//!
//! # What a request may submit
//!
//! A request that submits lock tokens (`If`, RFC 4918 §10.4; `Lock-Token`,
//! §10.5) is read before anything is forwarded or fenced:
//!
//! - `If` is read strictly by its grammar (untagged or tagged lists,
//!   `Not`, state tokens, entity tags); anything else is 400 `bad_request`,
//!   never forwarded with tokens unread. Each state token must be a token
//!   the gateway handed out to this identity (its MAC verifies with the
//!   request's identity), and is put back as the store's token;
//!   `DAV:no-lock` (which names no lock) goes on as it is. Anything else
//!   (another identity's token, the store's raw token, an invented one) is
//!   403 `forbidden`, `Not` or not: a token is refused wherever it stands.
//!   Entity tags go on untouched. A tagged list's resource is a resource
//!   the request reads (its state is compared): its path must be readable.
//! - `Lock-Token` is a token of the identity's, put back as the store's;
//!   on `UNLOCK` the lock's root (the request's path or the collection
//!   above it whose hash the token carries; the store takes an `UNLOCK`
//!   only within the lock) must also be under the identity's write
//!   prefixes now (grants may have narrowed since the lock was taken),
//!   else 403.
//!
//! Raw store tokens (as `lockdiscovery` shows them to any reader) never
//! verify. A `PROPFIND` answer is relayed as the store wrote it: its
//! `lockdiscovery` shows the store's tokens, which the gateway cannot
//! attribute to an identity and so never rebinds (docs/CUSTODY.md).

use base64::Engine as _;
use bytes::Bytes;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderName, HeaderValue, Response};
use ring::hmac;

use super::denied::{Denied, DeniedKind};
use super::files::{Access, Identity, UpstreamCredentials};
use super::identities::constant_time_eq;
use super::seal_keys::SealKeys;
use super::verified::LockAnswer;
use crate::gateway::body::response::FromProxy;
use crate::gateway::hop::end_to_end_map;
use crate::head::{visible_str, HeaderFields, RequestView};
use crate::key::normalize_path;

/// WebDAV's `If` field (RFC 4918 §10.4).
const IF: HeaderName = HeaderName::from_static("if");
/// WebDAV's `Lock-Token` field (RFC 4918 §10.5).
const LOCK_TOKEN: HeaderName = HeaderName::from_static("lock-token");
/// The state token that names no lock (RFC 4918 §10.4.8).
const NO_LOCK: &str = "DAV:no-lock";
/// The scheme of the tokens the gateway hands out.
const SCHEME: &str = "opaquelocktoken:";
/// The most bytes of a store's token the gateway binds (carried in the
/// token it hands out when it is no `opaquelocktoken:` UUID).
const MAX_STORE_TOKEN: usize = 1024;
/// The most bytes of a `LOCK` answer's body the gateway reads to rewrite
/// (Apache's are under 1 KiB).
const MAX_LOCK_ANSWER: usize = 64 * 1024;
/// The salt of the key lock tokens are sealed with
/// ([`SealKeys`](super::seal_keys::SealKeys)).
const KEY_SALT: &[u8] = b"fencegate/webdav-lock-binding/v1";
/// What the MAC covers first: its version.
const MAC_VERSION: &[u8] = b"fencegate lock token v1";

/// The keys that seal lock tokens: the one derived from the store's
/// credentials in force, and the one before the last rotation.
#[derive(Debug)]
pub(crate) struct LockKeys(SealKeys);

/// Why a token or a field that submits one is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LockRefusal {
    /// A field the gateway cannot read by its grammar (400).
    #[error("{0}")]
    Malformed(String),
    /// A token that is not the identity's, or a lock it may not remove
    /// (403, naming `object`).
    #[error("{message}")]
    NotYours { object: String, message: String },
}

/// Why a `LOCK` answer cannot be relayed with the gateway's tokens in it
/// (the proxy answers 502: never with the store's token).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LockAnswerError {
    /// The store's `Lock-Token` is no Coded-URL of at most
    /// [`MAX_STORE_TOKEN`] bytes.
    #[error("the store's Lock-Token is no Coded-URL the gateway can bind")]
    StoreToken,
    /// The body failed, or is longer than [`MAX_LOCK_ANSWER`].
    #[error(
        "the store's LOCK answer could not be read whole (at most {MAX_LOCK_ANSWER} bytes): {0}"
    )]
    Body(String),
}

impl From<LockRefusal> for Denied {
    fn from(refusal: LockRefusal) -> Denied {
        match refusal {
            LockRefusal::Malformed(message) => Denied::new(DeniedKind::BadRequest, message),
            LockRefusal::NotYours { object, message } => {
                Denied::new(DeniedKind::Forbidden { object }, message)
            }
        }
    }
}

/// A lock the gateway handed out a token for, verified as the identity's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bound {
    /// The store's token.
    pub(crate) store: String,
    /// [`root_hash`] of the lock's root.
    pub(crate) root_hash: [u8; 8],
}

impl LockKeys {
    /// The keys of `credentials`.
    pub(crate) fn new(credentials: &UpstreamCredentials) -> LockKeys {
        LockKeys(SealKeys::new(credentials, KEY_SALT))
    }

    /// Seals with `credentials` from now on (a reload of their file); the
    /// key in force until now still verifies.
    pub(crate) fn rotate(&self, credentials: &UpstreamCredentials) {
        self.0.rotate(credentials);
    }

    /// The key tokens are sealed with now.
    pub(crate) fn sealing_key(&self) -> hmac::Key {
        self.0.sealing_key()
    }

    /// `token` (without angle brackets), if the gateway handed it out to
    /// `identity`: its MAC, over the identity's name, verifies.
    pub(crate) fn verify(&self, token: &str, identity: &str) -> Option<Bound> {
        let pair = self.0.pair();
        let (bound, mac) = unseal(token)?;
        for key in pair.iter() {
            let expected = mac_of(key, &bound.store, identity, &bound.root_hash);
            if constant_time_eq(&expected, &mac) {
                return Some(bound);
            }
        }
        None
    }
}

/// The first 64 bits of SHA-256 of a lock's root (a normalised path):
/// what a token carries of it, so that it stays short (clients keep lock
/// tokens in small buffers: litmus builds an `If` field in 200 bytes).
pub(crate) fn root_hash(root: &str) -> [u8; 8] {
    let digest = ring::digest::digest(&ring::digest::SHA256, root.as_bytes());
    let mut out = [0u8; 8];
    out.copy_from_slice(&digest.as_ref()[..8]);
    out
}

/// The first 128 bits of the MAC of a token under `key`: over the store's
/// token, the identity's name and the root's hash.
fn mac_of(key: &hmac::Key, store: &str, identity: &str, root_hash: &[u8; 8]) -> [u8; 16] {
    let mut context = hmac::Context::with_key(key);
    for field in [
        MAC_VERSION,
        store.as_bytes(),
        identity.as_bytes(),
        &root_hash[..],
    ] {
        context.update(&(field.len() as u64).to_be_bytes());
        context.update(field);
    }
    let tag = context.sign();
    let mut out = [0u8; 16];
    out.copy_from_slice(&tag.as_ref()[..16]);
    out
}

/// The UUID the gateway's token shows when the store's token is no
/// `opaquelocktoken:` UUID (then carried whole, after the seal).
const NIL_UUID: &str = "00000000-0000-0000-0000-000000000000";

/// Whether `text` is a UUID as RFC 4122 writes it (8-4-4-4-12 hex digits).
fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// The token the gateway hands out for the store's token `store`, taken
/// by `identity` on `root`, sealed with `key`:
/// `opaquelocktoken:UUID/SEAL`, where UUID is the store's own when its
/// token is `opaquelocktoken:UUID`, and SEAL the root's hash and the MAC
/// in base64url (85 characters in all); any other store token is carried
/// after the seal (`opaquelocktoken:<nil UUID>/SEAL/<store token in
/// base64url>`).
pub(crate) fn seal(key: &hmac::Key, store: &str, identity: &str, root: &str) -> String {
    let hash = root_hash(root);
    let mac = mac_of(key, store, identity, &hash);
    let mut sealed = [0u8; 24];
    sealed[..8].copy_from_slice(&hash);
    sealed[8..].copy_from_slice(&mac);
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    match store.strip_prefix(SCHEME).filter(|uuid| is_uuid(uuid)) {
        Some(uuid) => format!("{SCHEME}{uuid}/{}", b64.encode(sealed)),
        None => format!(
            "{SCHEME}{NIL_UUID}/{}/{}",
            b64.encode(sealed),
            b64.encode(store)
        ),
    }
}

/// `token` read as one of the gateway's: the lock it names and its MAC,
/// unverified.
fn unseal(token: &str) -> Option<(Bound, [u8; 16])> {
    let rest = token.strip_prefix(SCHEME)?;
    let (uuid, path) = rest.split_once('/')?;
    if !is_uuid(uuid) {
        return None;
    }
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let (sealed, carried) = match path.split_once('/') {
        Some((sealed, carried)) => (sealed, Some(carried)),
        None => (path, None),
    };
    let sealed: [u8; 24] = b64.decode(sealed).ok()?.try_into().ok()?;
    let store = match carried {
        None if uuid != NIL_UUID => format!("{SCHEME}{uuid}"),
        Some(carried) if uuid == NIL_UUID => {
            let store = String::from_utf8(b64.decode(carried).ok()?).ok()?;
            // Carried only when it is no `opaquelocktoken:` UUID: one
            // spelling per lock.
            if store.strip_prefix(SCHEME).is_some_and(is_uuid) {
                return None;
            }
            store
        }
        _ => return None,
    };
    let mut root_hash = [0u8; 8];
    root_hash.copy_from_slice(&sealed[..8]);
    let mut mac = [0u8; 16];
    mac.copy_from_slice(&sealed[8..]);
    Some((Bound { store, root_hash }, mac))
}

/// One `If` field read by RFC 4918 §10.4's grammar: where its state tokens
/// are, and its tagged lists' resources.
#[derive(Debug, Default, PartialEq, Eq)]
struct IfField<'a> {
    /// Each state token (inside its angle brackets), with its place.
    tokens: Vec<(usize, &'a str)>,
    /// Each resource tag (inside its angle brackets).
    tags: Vec<&'a str>,
}

/// Reads `text`, an `If` field's value, or says why it does not parse.
fn read_if(text: &str) -> Result<IfField<'_>, String> {
    let bytes = text.as_bytes();
    let mut at = 0;
    let mut field = IfField::default();
    let skip = |at: &mut usize| {
        while *at < bytes.len() && matches!(bytes[*at], b' ' | b'\t') {
            *at += 1;
        }
    };
    // Up to the next `>`: a Coded-URL's or resource tag's inside.
    let angled = |at: &mut usize| -> Result<(usize, &str), String> {
        let start = *at + 1;
        let end = text[start..]
            .find('>')
            .map(|i| start + i)
            .ok_or("an If field's '<' is not closed")?;
        let inside = &text[start..end];
        if inside.is_empty()
            || inside
                .bytes()
                .any(|b| matches!(b, b'<' | b' ' | b'\t' | b'"') || !b.is_ascii_graphic())
        {
            return Err(format!("{inside:?} is no URI in an If field"));
        }
        *at = end + 1;
        Ok((start, inside))
    };
    skip(&mut at);
    if at == bytes.len() {
        return Err("the If field is empty".into());
    }
    let tagged = bytes[at] == b'<';
    while at < bytes.len() {
        if tagged {
            if bytes[at] != b'<' {
                return Err("an If field's tagged list must start with a resource tag".into());
            }
            let (_, tag) = angled(&mut at)?;
            field.tags.push(tag);
            skip(&mut at);
        }
        let mut lists = 0;
        while at < bytes.len() && bytes[at] == b'(' {
            at += 1;
            let mut conditions = 0;
            loop {
                skip(&mut at);
                match bytes.get(at) {
                    None => return Err("an If field's list is not closed".into()),
                    Some(b')') => {
                        at += 1;
                        break;
                    }
                    _ => {}
                }
                if bytes
                    .get(at..at + 3)
                    .is_some_and(|not| not.eq_ignore_ascii_case(b"not"))
                {
                    at += 3;
                    skip(&mut at);
                }
                match bytes.get(at) {
                    Some(b'<') => field.tokens.push(angled(&mut at)?),
                    Some(b'[') => {
                        at += 1;
                        if bytes.get(at..at + 2) == Some(b"W/") {
                            at += 2;
                        }
                        if bytes.get(at) != Some(&b'"') {
                            return Err("an If field's entity tag is not quoted".into());
                        }
                        let close = text[at + 1..]
                            .find('"')
                            .map(|i| at + 1 + i)
                            .ok_or("an If field's entity tag is not closed")?;
                        // RFC 7232 lets an entity tag hold `(`, `)`, `<`,
                        // `>`, `[` and `]`, but Apache ends a list at the
                        // first `)` whatever it stands in: a token hidden
                        // in what the gateway reads as a tag would be read
                        // by the store as a state token. Refused.
                        if text[at + 1..close].bytes().any(|b| {
                            !(b == 0x21 || (0x23..=0x7e).contains(&b))
                                || matches!(b, b'(' | b')' | b'<' | b'>' | b'[' | b']')
                        }) {
                            return Err(
                                "an If field's entity tag holds a character no entity tag has"
                                    .into(),
                            );
                        }
                        at = close + 1;
                        if bytes.get(at) != Some(&b']') {
                            return Err("an If field's entity tag is not closed by ']'".into());
                        }
                        at += 1;
                    }
                    _ => {
                        return Err(
                            "an If field's condition is neither a state token nor an entity tag"
                                .into(),
                        )
                    }
                }
                conditions += 1;
            }
            if conditions == 0 {
                return Err("an If field's list is empty".into());
            }
            lists += 1;
            skip(&mut at);
        }
        if lists == 0 {
            return Err("an If field holds something other than lists".into());
        }
        if !tagged && at < bytes.len() {
            return Err("an If field mixes untagged lists with something else".into());
        }
    }
    Ok(field)
}

/// Checks every lock token `request` submits against `identity`, and puts
/// the store's tokens in their place (`set`); for a `LOCK`, what its
/// answer needs to hand out the gateway's tokens. `path` is the request's
/// normalised path.
pub(crate) fn admit<R: RequestView>(
    keys: &LockKeys,
    identity: &Identity,
    request: &R,
    path: &str,
    mut set: impl FnMut(HeaderName, HeaderValue),
) -> Result<Option<LockAnswer>, LockRefusal> {
    let fields = request.fields();
    let is_lock = request.method().as_str() == "LOCK";
    let mut known = Vec::new();
    // Repeated fields were refused before custody (`misreading`): the
    // first is the only one.
    if let Some(value) = fields.first(&IF) {
        let text = visible_str(value)
            .ok_or_else(|| LockRefusal::Malformed("the If field is not visible ASCII".into()))?;
        let read = read_if(text).map_err(LockRefusal::Malformed)?;
        for tag in &read.tags {
            let tagged = tag_path(tag)?;
            if !identity.may(&tagged, Access::Read) {
                return Err(LockRefusal::NotYours {
                    message: format!(
                        "identity {:?} may not read {tagged}, which its If field names",
                        identity.name
                    ),
                    object: tagged,
                });
            }
        }
        let mut rewritten = String::with_capacity(text.len());
        let mut copied = 0;
        for &(start, token) in &read.tokens {
            if token == NO_LOCK {
                continue;
            }
            let bound = own(keys, identity, token, path)?;
            rewritten.push_str(&text[copied..start]);
            rewritten.push_str(&bound.store);
            copied = start + token.len();
            if is_lock {
                known.push((bound.store, token.to_owned()));
            }
        }
        if copied > 0 {
            rewritten.push_str(&text[copied..]);
            let value = HeaderValue::from_str(&rewritten)
                .map_err(|_| LockRefusal::Malformed("the If field cannot be rewritten".into()))?;
            set(IF, value);
        }
    }
    if let Some(value) = fields.first(&LOCK_TOKEN) {
        let token = visible_str(value)
            .map(str::trim)
            .and_then(|t| t.strip_prefix('<'))
            .and_then(|t| t.strip_suffix('>'))
            .filter(|t| !t.is_empty() && !t.contains(['<', '>']))
            .ok_or_else(|| {
                LockRefusal::Malformed("Lock-Token must be one Coded-URL, <token>".into())
            })?;
        let bound = own(keys, identity, token, path)?;
        if request.method().as_str() == "UNLOCK" {
            unlockable(identity, &bound, path)?;
        }
        let value = HeaderValue::from_str(&format!("<{}>", bound.store))
            .map_err(|_| LockRefusal::Malformed("Lock-Token cannot be rewritten".into()))?;
        set(LOCK_TOKEN, value);
    }
    Ok(is_lock.then(|| LockAnswer {
        key: keys.sealing_key(),
        identity: identity.name.clone(),
        root: path.to_owned(),
        known,
    }))
}

/// `token`, verified as a token the gateway handed out to `identity`.
fn own(
    keys: &LockKeys,
    identity: &Identity,
    token: &str,
    path: &str,
) -> Result<Bound, LockRefusal> {
    keys.verify(token, &identity.name)
        .ok_or_else(|| LockRefusal::NotYours {
            object: path.to_owned(),
            message: format!(
                "a lock token the gateway did not hand out to identity {:?} (another identity's, the store's own, or none): only the tokens of its own LOCK answers are taken",
                identity.name
            ),
        })
}

/// Whether `identity` may remove `bound`'s lock through `path` (an
/// `UNLOCK`'s normalised path): the lock's root is `path` or above it (the
/// store takes an `UNLOCK` only within the lock), and under the identity's
/// write prefixes now (grants may have narrowed since the lock was taken).
fn unlockable(identity: &Identity, bound: &Bound, path: &str) -> Result<(), LockRefusal> {
    let mut candidate = Some(path);
    while let Some(at) = candidate {
        if root_hash(at) == bound.root_hash {
            if identity.may(at, Access::Write) {
                return Ok(());
            }
            return Err(LockRefusal::NotYours {
                object: at.to_owned(),
                message: format!(
                    "identity {:?} may not remove the lock on {at}: it may not write there",
                    identity.name
                ),
            });
        }
        candidate = match at.rfind('/') {
            Some(0) if at.len() > 1 => Some("/"),
            Some(0) | None => None,
            Some(slash) => Some(&at[..slash]),
        };
    }
    Err(LockRefusal::NotYours {
        object: path.to_owned(),
        message: format!(
            "the lock this token names is not on {path} nor above it: {path} is outside it"
        ),
    })
}

/// The normalised path of a tagged list's resource (a path, or an
/// absolute http(s) URI).
fn tag_path(tag: &str) -> Result<String, LockRefusal> {
    let bad = || LockRefusal::Malformed(format!("the If field's resource tag {tag:?} is no URI"));
    let path = if tag.starts_with('/') {
        tag.split(['?', '#']).next().unwrap_or(tag).to_owned()
    } else {
        let uri: http::Uri = tag.parse().map_err(|_| bad())?;
        match uri.scheme_str() {
            Some(scheme)
                if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") => {}
            _ => return Err(bad()),
        }
        uri.path().to_owned()
    };
    normalize_path(&path).map_err(|e| LockRefusal::Malformed(format!("{tag:?}: {e}")))
}

/// A `LOCK` answer with the gateway's tokens for the store's: the new
/// lock's (`Lock-Token`, bound to the requester and the request's path)
/// and those the request named in `If` (a refresh), in the field and the
/// body. Any other answer is returned as it came.
pub(crate) async fn bind_answer(
    response: Response<FromProxy>,
    answer: &LockAnswer,
) -> Result<Response<FromProxy>, LockAnswerError> {
    if !response.status().is_success() {
        return Ok(response);
    }
    let (mut parts, mut body) = response.into_parts();
    // The backend's lines go into the map: the body is replaced by the
    // bytes rewritten, which the lines' framing must not contradict.
    if let Some(fields) = body.take_fields() {
        parts.headers.extend(end_to_end_map(|| fields.iter()));
    }
    let mut swaps: Vec<(String, String)> = answer.known.clone();
    if let Some(value) = parts.headers.get(&LOCK_TOKEN) {
        let store = value
            .to_str()
            .ok()
            .map(str::trim)
            .and_then(|t| t.strip_prefix('<'))
            .and_then(|t| t.strip_suffix('>'))
            .filter(|t| !t.is_empty() && t.len() <= MAX_STORE_TOKEN)
            .ok_or(LockAnswerError::StoreToken)?
            .to_owned();
        let client = seal(&answer.key, &store, &answer.identity, &answer.root);
        let value = HeaderValue::from_str(&format!("<{client}>"))
            .map_err(|_| LockAnswerError::StoreToken)?;
        parts.headers.insert(LOCK_TOKEN, value);
        swaps.push((store, client));
    }
    let limited = http_body_util::Limited::new(body, MAX_LOCK_ANSWER);
    let bytes = http_body_util::BodyExt::collect(limited)
        .await
        .map_err(|e| LockAnswerError::Body(e.to_string()))?
        .to_bytes();
    let rewritten = swap_tokens(&bytes, &swaps);
    parts.headers.remove(TRANSFER_ENCODING);
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(rewritten.len()));
    Ok(Response::from_parts(
        parts,
        FromProxy::from(axum::body::Body::from(rewritten)),
    ))
}

/// `body` with each `(store, client)` token's store form replaced by its
/// client form where it stands whole (not followed by more of a URI).
fn swap_tokens(body: &[u8], swaps: &[(String, String)]) -> Bytes {
    let mut out = body.to_vec();
    for (store, client) in swaps {
        let needle = store.as_bytes();
        let mut result = Vec::with_capacity(out.len());
        let mut at = 0;
        while let Some(found) = find(&out[at..], needle) {
            let start = at + found;
            let end = start + needle.len();
            let whole = out.get(end).is_none_or(|b| !is_uri_byte(*b));
            result.extend_from_slice(&out[at..start]);
            if whole {
                result.extend_from_slice(client.as_bytes());
            } else {
                result.extend_from_slice(needle);
            }
            at = end;
        }
        result.extend_from_slice(&out[at..]);
        out = result;
    }
    Bytes::from(out)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A byte that may continue a URI (RFC 3986's unreserved, reserved and
/// `%`).
fn is_uri_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~:/?#[]@!$&'()*+,;=%".contains(&b)
}

#[cfg(test)]
mod tests;
