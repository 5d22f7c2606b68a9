//! The store's side of custody: every request the gateway sends the store
//! (those it forwards, its own `HEAD`s and probes) signed with the store's
//! credentials, after the client's are removed. SigV4 for S3 (what the
//! forwarded head carries is the client's signed fields, the gateway's
//! additions and nothing else, all of it under the gateway's signature),
//! Shared Key for Azure Blob (over every field that goes on), `Basic` or
//! `Bearer` for the plain HTTP stores.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, RwLock};

use base64::Engine as _;
use http::{HeaderName, HeaderValue, Method};

use super::files::UpstreamCredentials;
use super::s3::{lookup, SignedFields, EMPTY_SHA256};
use super::stream;
use super::verified::{Filed, Forwarding};
use crate::dialect::shared_key::{self, AccountKey};
use crate::dialect::sigv4::{self, SignedHeaders, SigningKey};
use crate::gateway::hop::{connection_options, is_hop_by_hop};
use crate::gateway::inbound::Head;

const AUTHORIZATION: HeaderName = http::header::AUTHORIZATION;
const X_AMZ_DATE: HeaderName = HeaderName::from_static("x-amz-date");
const X_AMZ_CONTENT_SHA256: HeaderName = HeaderName::from_static("x-amz-content-sha256");
const X_AMZ_SECURITY_TOKEN: HeaderName = HeaderName::from_static("x-amz-security-token");
const X_MS_DATE: HeaderName = HeaderName::from_static("x-ms-date");
const X_MS_VERSION: HeaderName = HeaderName::from_static("x-ms-version");
/// The service version of a request that names none (the gateway's own
/// `HEAD`, a SAS client's request without `x-ms-version`): the version
/// from which a SAS's string to sign is the one the gateway reads.
const DEFAULT_MS_VERSION: &str = "2021-08-06";

/// Signs for the store with its credentials.
#[derive(Debug)]
pub(crate) struct UpstreamSigner {
    /// Replaced whole on a reload.
    credentials: RwLock<Arc<UpstreamCredentials>>,
    /// The upstream's authority: the `Host` a SigV4 request is signed and
    /// sent with.
    host: HeaderValue,
    /// The day's signing key (SigV4): derived once a day.
    key: Mutex<Option<(String, SigningKey)>>,
}

/// What signing changes in a head on its way to the store.
#[derive(Debug, Default)]
pub(crate) struct Signed<'f> {
    /// Fields to set, each replacing every line of its name.
    pub(crate) set: Vec<(HeaderName, HeaderValue)>,
    /// The lowercase names of the client's fields that go on (`None`: all
    /// but the client's credentials); framing fields always go on.
    /// Borrowed: the client's list, taken as it is (most requests).
    pub(crate) keep: Option<Cow<'f, SignedHeaders>>,
    /// A new target (a presigned URL's, without its authentication
    /// parameters).
    pub(crate) target: Option<String>,
    /// `Host` replaced by the upstream's.
    pub(crate) host: Option<HeaderValue>,
}

/// Why a request could not be signed (a malformed value the client
/// signed that the canonical form refuses): the gateway answers 400.
#[derive(Debug, thiserror::Error)]
#[error("the request cannot be signed for the store: {0}")]
pub(crate) struct SignError(String);

impl UpstreamSigner {
    pub(crate) fn new(credentials: UpstreamCredentials, host: HeaderValue) -> Self {
        UpstreamSigner {
            credentials: RwLock::new(Arc::new(credentials)),
            host,
            key: Mutex::new(None),
        }
    }

    /// Signs with `credentials` from now on (a reload of their file).
    pub(crate) fn replace(&self, credentials: UpstreamCredentials) {
        if let Ok(mut current) = self.credentials.write() {
            *current = Arc::new(credentials);
        }
        if let Ok(mut key) = self.key.lock() {
            *key = None;
        }
    }

    /// The fingerprint of the credentials in force.
    pub(crate) fn fingerprint(&self) -> [u8; 32] {
        self.credentials().fingerprint()
    }

    fn credentials(&self) -> Arc<UpstreamCredentials> {
        match self.credentials.read() {
            Ok(current) => Arc::clone(&current),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// What to change in the head of `method` `target` (origin form, as
    /// sent upstream) with fields `head` (of which the gateway set
    /// `set_names`: a chained write's condition), which came as `forward`
    /// says, to send it signed at `now` (seconds since the Unix epoch).
    pub(crate) fn sign<'f>(
        &self,
        method: &Method,
        target: &str,
        head: &Head,
        set_names: &[HeaderName],
        forward: &'f Forwarding,
        now: u64,
    ) -> Result<Signed<'f>, SignError> {
        let credentials = self.credentials();
        match &*credentials {
            UpstreamCredentials::Basic { user, password } => {
                let pair = format!("{user}:{}", password.expose());
                let value = format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                );
                Ok(with_authorization(&value))
            }
            UpstreamCredentials::Bearer { token } => {
                Ok(with_authorization(&format!("Bearer {}", token.expose())))
            }
            UpstreamCredentials::AzureSharedKey { account, key } => {
                if matches!(forward, Forwarding::Unsigned) {
                    return Ok(Signed::default());
                }
                let mut signed = sign_shared_key(account, key, method, target, head, now)?;
                // Azure routes by Host (`ACCOUNT.blob.core.windows.net`),
                // which Shared Key does not sign.
                signed.host = Some(self.host.clone());
                Ok(signed)
            }
            UpstreamCredentials::AwsSigV4 {
                access_key_id,
                secret_access_key,
                region,
                service,
                session_token,
            } => {
                if matches!(forward, Forwarding::Unsigned) {
                    // A CORS preflight goes as it came, credentials and all
                    // (it has none).
                    return Ok(Signed::default());
                }
                let amz_date = sigv4::format_amz_date(now);
                let date = &amz_date[..8];
                let key = self.day_key(secret_access_key.expose(), date, region, service);
                let (path, query) = target.split_once('?').unwrap_or((target, ""));
                let SigningPlan {
                    names,
                    presigned_query,
                    payload,
                    moved,
                } = match forward {
                    Forwarding::Signed { names, payload, .. } => SigningPlan {
                        names: PlanNames::Signed(names),
                        presigned_query: None,
                        payload: Cow::Borrowed(payload.as_str()),
                        moved: &[],
                    },
                    Forwarding::Presigned {
                        names,
                        query,
                        moved,
                    } => SigningPlan {
                        names: PlanNames::Signed(names),
                        presigned_query: Some(query.as_str()),
                        payload: Cow::Borrowed("UNSIGNED-PAYLOAD"),
                        moved,
                    },
                    Forwarding::Gateway | Forwarding::Unsigned => {
                        let names = head
                            .names()
                            .map(|n| String::from_utf8_lossy(n).to_ascii_lowercase())
                            .collect();
                        let has = |name: &str| !lookup(head, name).is_empty();
                        let payload =
                            if let Some(value) = lookup(head, "x-amz-content-sha256").first() {
                                Cow::Owned(String::from_utf8_lossy(value).into_owned())
                            } else if has("content-length") || has("transfer-encoding") {
                                Cow::Borrowed("UNSIGNED-PAYLOAD")
                            } else {
                                Cow::Borrowed(EMPTY_SHA256)
                            };
                        SigningPlan {
                            names: PlanNames::Head(names),
                            presigned_query: None,
                            payload,
                            moved: &[],
                        }
                    }
                };
                // The forwarded query: a presigned URL's without its
                // authentication parameters.
                let query = presigned_query.unwrap_or(query);
                let (signed, as_is) = signed_list(&names, set_names, session_token.is_some())?;
                let host = self.host.as_bytes();
                let token = session_token.as_ref().map(|t| t.expose().as_bytes());
                // The fields the gateway writes itself: the client's lines of
                // these names are not what goes on.
                let own: [(&str, Option<&[u8]>); 4] = [
                    ("host", Some(host)),
                    ("x-amz-date", Some(amz_date.as_bytes())),
                    ("x-amz-content-sha256", Some(payload.as_bytes())),
                    ("x-amz-security-token", token),
                ];
                let mut fields: SignedFields<'_> = SignedFields::new();
                // The client's list as it is, over the head as the verifier
                // read it: its filing holds.
                let filed = match forward {
                    Forwarding::Signed {
                        filed: Some(filed), ..
                    } if as_is && session_token.is_none() => {
                        head.lines_as_read().map(|lines| (filed, lines))
                    }
                    _ => None,
                };
                if let Some((filed, lines)) = filed {
                    let own = [host, amz_date.as_bytes(), payload.as_bytes()];
                    for (&at, value) in filed.own.iter().zip(own) {
                        fields.push((usize::from(at), value));
                    }
                    for &(line, at) in &filed.lines {
                        if !filed.own.contains(&at) {
                            if let Some((_, value)) = lines.line(usize::from(line)) {
                                fields.push((usize::from(at), value));
                            }
                        }
                    }
                } else {
                    file_fields(&mut fields, head, &signed, own, moved);
                }
                // Not `format!`: its machinery costs more than the copies.
                let mut scope =
                    String::with_capacity(date.len() + region.len() + service.len() + 15);
                for part in [date, "/", region, "/", service, "/aws4_request"] {
                    scope.push_str(part);
                }
                let to_sign = sigv4::CanonicalParts {
                    method: method.as_str(),
                    path,
                    query,
                    skip_query: &|_| false,
                    signed_headers: &signed,
                    payload_hash: &payload,
                }
                .string_to_sign_of(&fields, &amz_date, &scope)
                .map_err(|e| SignError(e.to_string()))?;
                // It borrows the values moved into the head below.
                drop(fields);
                let raw = key.sign(to_sign.as_bytes());
                if let Forwarding::Signed {
                    chunked: Some(chunked),
                    ..
                } = forward
                {
                    let (_, cell) = &**chunked;
                    // The body's chunks chain from this signature: a
                    // second signing would give another seed.
                    cell.set(stream::GatewaySeed::new(
                        key.clone(),
                        &amz_date,
                        &scope,
                        raw,
                    ))
                    .map_err(|_| {
                        SignError("the aws-chunked body's head was signed twice".to_owned())
                    })?;
                }
                let authorization = authorization_value(access_key_id, &scope, &signed, &raw);
                let value = |text: &str| {
                    HeaderValue::from_str(text)
                        .map_err(|_| SignError(format!("{text:?} is no header value")))
                };
                let mut set = Vec::with_capacity(4 + moved.len());
                set.push((AUTHORIZATION, owned_value(authorization)?));
                set.push((X_AMZ_DATE, owned_value(amz_date)?));
                // A header-signed client's own line of it (one, checked, and
                // signed again above) goes on as it came, without a copy.
                if !matches!(forward, Forwarding::Signed { .. }) {
                    set.push((
                        X_AMZ_CONTENT_SHA256,
                        match payload {
                            Cow::Owned(payload) => owned_value(payload)?,
                            Cow::Borrowed(payload) => value(payload)?,
                        },
                    ));
                }
                if let Some(token) = session_token {
                    set.push((X_AMZ_SECURITY_TOKEN, value(token.expose())?));
                }
                set.extend(moved.iter().cloned());
                let target = match forward {
                    Forwarding::Presigned { .. } => Some(if query.is_empty() {
                        path.to_owned()
                    } else {
                        format!("{path}?{query}")
                    }),
                    _ => None,
                };
                Ok(Signed {
                    set,
                    keep: Some(signed),
                    target,
                    host: Some(self.host.clone()),
                })
            }
        }
    }

    /// The SigV4 key of `date`, derived once per day.
    fn day_key(&self, secret: &str, date: &str, region: &str, service: &str) -> SigningKey {
        if let Ok(mut cached) = self.key.lock() {
            if let Some((day, key)) = cached.as_ref() {
                if day == date {
                    return key.clone();
                }
            }
            let key = sigv4::signing_key(secret.as_bytes(), date, region, service);
            *cached = Some((date.to_owned(), key.clone()));
            return key;
        }
        sigv4::signing_key(secret.as_bytes(), date, region, service)
    }
}

/// A request for Azure Blob signed with the store's account (`SharedKey`):
/// over every field that goes on (the client's, with the gateway's
/// condition), with the gateway's `x-ms-date`, and `x-ms-version` when the
/// client sent none (a SAS client, the gateway's own `HEAD`).
///
/// `Content-Length` is signed as the client sent it: a body without one
/// goes chunked, which Azure's Put Blob refuses anyway.
fn sign_shared_key(
    account: &str,
    key: &AccountKey,
    method: &Method,
    target: &str,
    head: &Head,
    now: u64,
) -> Result<Signed<'static>, SignError> {
    let date = httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(now));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let dropped: Vec<&[u8]> = lookup(head, "connection")
        .into_iter()
        .flat_map(connection_options)
        .collect();
    let length = match head.normalized_length() {
        Some(n) => Some(n.to_string()),
        None => lookup(head, "content-length")
            .first()
            .map(|v| String::from_utf8_lossy(v).into_owned()),
    };
    // The fields as they go on, names in any case (the string to sign
    // compares them so and gathers each name's values in their order).
    let lines = head.lines();
    let mut fields: Vec<(&str, &[u8])> = Vec::with_capacity(lines.len() + 3);
    for (name, value) in lines {
        let skip = is_hop_by_hop(name)
            || dropped.iter().any(|d| d.eq_ignore_ascii_case(name))
            || [
                &b"authorization"[..],
                b"x-ms-date",
                b"host",
                b"content-length",
            ]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name));
        if skip {
            continue;
        }
        let Ok(text) = std::str::from_utf8(name) else {
            continue;
        };
        fields.push((text, value));
    }
    if let Some(length) = &length {
        fields.push(("content-length", length.as_bytes()));
    }
    fields.push(("x-ms-date", date.as_bytes()));
    let mut set = Vec::with_capacity(3);
    if !fields
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("x-ms-version"))
    {
        fields.push(("x-ms-version", DEFAULT_MS_VERSION.as_bytes()));
        set.push((X_MS_VERSION, HeaderValue::from_static(DEFAULT_MS_VERSION)));
    }
    let to_sign = shared_key::string_to_sign(
        shared_key::Scheme::SharedKey,
        method.as_str(),
        account,
        path,
        query,
        &fields,
    )
    .map_err(|e| SignError(e.to_string()))?;
    let authorization = format!("SharedKey {account}:{}", key.sign(&to_sign));
    let value = |text: &str| {
        HeaderValue::from_str(text).map_err(|_| SignError(format!("{text:?} is no header value")))
    };
    set.push((AUTHORIZATION, value(&authorization)?));
    set.push((X_MS_DATE, value(&date)?));
    Ok(Signed {
        set,
        keep: None,
        target: None,
        host: None,
    })
}

/// What a SigV4 signature covers, by how the request came.
struct SigningPlan<'f> {
    /// The lowercase names of the client's fields it signed.
    names: PlanNames<'f>,
    /// A presigned URL's query without its authentication parameters.
    presigned_query: Option<&'f str>,
    /// `x-amz-content-sha256`.
    payload: Cow<'f, str>,
    /// A presigned URL's `x-amz-*` parameters, as fields.
    moved: &'f [(HeaderName, HeaderValue)],
}

/// Where the names a request is signed over come from.
enum PlanNames<'f> {
    /// The client's own list (it signed them).
    Signed(&'f SignedHeaders),
    /// Every field of the head, lowercase (the gateway's own requests).
    Head(Vec<String>),
}

/// The names the gateway signs: the client's (less those it never signs),
/// the fields it set (a chained write's condition) and its own. A
/// client's list that has them all already (every header-signed request
/// without a condition) is taken as it is, with no list built and sorted
/// again (then `true`).
fn signed_list<'f>(
    names: &PlanNames<'f>,
    set_names: &[HeaderName],
    session_token: bool,
) -> Result<(Cow<'f, SignedHeaders>, bool), SignError> {
    const OWN: [&str; 3] = Filed::OWN;
    if let PlanNames::Signed(list) = names {
        let complete = !list.iter().any(is_unsignable)
            && OWN.iter().all(|name| list.contains(name))
            && set_names.iter().all(|name| list.contains(name.as_str()))
            && (!session_token || list.contains("x-amz-security-token"));
        if complete {
            return Ok((Cow::Borrowed(*list), true));
        }
    }
    // Borrowed names, one list made of them: a `String` per name cost an
    // allocation each on every request.
    let mut signed: Vec<&str> = Vec::with_capacity(16);
    match names {
        PlanNames::Signed(list) => signed.extend(list.iter()),
        PlanNames::Head(list) => signed.extend(list.iter().map(String::as_str)),
    }
    signed.retain(|name| !is_unsignable(name));
    signed.extend(set_names.iter().map(HeaderName::as_str));
    signed.extend(OWN);
    if session_token {
        signed.push("x-amz-security-token");
    }
    SignedHeaders::from_names(signed)
        .map(|list| (Cow::Owned(list), false))
        .map_err(|e| SignError(e.to_string()))
}

/// Files `head`'s signed lines by their place in `signed` into `fields`:
/// the gateway's own values (`own`: a name, and its value or `None` when it
/// sends none), a presigned URL's `moved` parameters, then the client's
/// other lines, in one pass over the head.
fn file_fields<'a>(
    fields: &mut SignedFields<'a>,
    head: &'a Head,
    signed: &SignedHeaders,
    own: [(&str, Option<&'a [u8]>); 4],
    moved: &'a [(HeaderName, HeaderValue)],
) {
    // Where the gateway's own values go in the list: a client's line filed
    // at one of these is not what goes on.
    let mut replaced = [usize::MAX; 4];
    for (slot, (name, value)) in replaced.iter_mut().zip(own) {
        if let Some(at) = signed.position_ignore_case(name.as_bytes()) {
            *slot = at;
            fields.extend(value.map(|value| (at, value)));
        }
    }
    let mut moved_at = Vec::new();
    for (name, value) in moved {
        if let Some(at) = signed.position_ignore_case(name.as_str().as_bytes()) {
            moved_at.push(at);
            fields.push((at, value.as_bytes()));
        }
    }
    for (name, value) in head.each_line() {
        if let Some(at) = signed.position_ignore_case(name) {
            if !replaced.contains(&at) && !moved_at.contains(&at) {
                fields.push((at, value));
            }
        }
    }
}

/// The client's `Authorization` replaced by the store's; every other field
/// goes on.
/// `AWS4-HMAC-SHA256 Credential=KEY/SCOPE, SignedHeaders=a;b, Signature=HEX`,
/// built in one buffer of the right size.
fn authorization_value(
    access_key_id: &str,
    scope: &str,
    signed: &SignedHeaders,
    signature: &[u8; 32],
) -> String {
    const PARTS: [&str; 4] = [
        "AWS4-HMAC-SHA256 Credential=",
        "/",
        ", SignedHeaders=",
        ", Signature=",
    ];
    // Exactly as long as it will be: a header value made of a `String` whose
    // capacity is its length takes its buffer without another allocation.
    let length = PARTS.iter().map(|part| part.len()).sum::<usize>()
        + access_key_id.len()
        + scope.len()
        + signed.as_str().len()
        + 2 * signature.len();
    let mut out = String::with_capacity(length);
    out.push_str(PARTS[0]);
    out.push_str(access_key_id);
    out.push_str(PARTS[1]);
    out.push_str(scope);
    out.push_str(PARTS[2]);
    out.push_str(signed.as_str());
    out.push_str(PARTS[3]);
    // Hex digits are ASCII.
    out.push_str(std::str::from_utf8(&sigv4::hex32(signature)).unwrap_or_default());
    out
}

/// `text` as a header value, its buffer moved rather than copied.
fn owned_value(text: String) -> Result<HeaderValue, SignError> {
    HeaderValue::from_maybe_shared(bytes::Bytes::from(text.into_bytes())).map_err(|e| {
        SignError(format!(
            "a value the gateway signed is no header value: {e}"
        ))
    })
}

fn with_authorization(value: &str) -> Signed<'static> {
    Signed {
        set: HeaderValue::from_str(value)
            .map(|value| vec![(AUTHORIZATION, value)])
            .unwrap_or_default(),
        keep: None,
        target: None,
        host: None,
    }
}

/// Names the gateway never signs: hop-by-hop ones (they do not reach the
/// store) and the client's credentials.
fn is_unsignable(name: &str) -> bool {
    matches!(
        name,
        "authorization"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "proxy-authorization"
            | "content-length"
            | "expect"
            | "x-forwarded-for"
            | "x-forwarded-proto"
            // A client's session token is its credential, removed like its
            // `Authorization`; the gateway sends its own when it has one.
            | "x-amz-security-token"
    )
}
