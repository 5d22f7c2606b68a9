//! Azure Blob under custody, the client's side: a request signed with an
//! identity's account name and key (`SharedKey`, `SharedKeyLite`) or
//! carrying a service SAS signed with that key, verified; the identity's
//! account in the client's URL mapped to the store's; every object the
//! request reaches with the access it needs. What the gateway signs for
//! the store is `sign.rs`'s.
//!
//! Clients address the gateway path style, as they address Azurite or a
//! custom endpoint: `http://gateway/ACCOUNT/container/blob`, `ACCOUNT`
//! being the identity's account name (its `access_key_id`). The gateway
//! drops that first segment: the rest (`/container/blob`) is what the
//! fence key, authorisation and the chain's cache see, whoever signed, and
//! the upstream URL says where the store's blobs are
//! (`https://ACCOUNT.blob.core.windows.net`, or
//! `http://azurite:10000/ACCOUNT` with the account as a base path).
//!
//! Signatures are checked over the request exactly as the client sent it;
//! the target is rewritten only once it verified.

use std::net::IpAddr;
use std::sync::Arc;

use http::{HeaderName, HeaderValue};

use super::denied::{Denied, DeniedKind};
use super::files::{Access, Identity};
use super::identities::Identities;
use super::verified::{Forwarding, Verified};
use crate::dialect::azure_operations::{Level, Need, Operation};
use crate::dialect::shared_key::{self, AccountKey, ServiceSas};
use crate::gateway::azure_reading::{level_of, operation_of, ReadOperation};
use crate::gateway::inbound::Inbound;
use crate::head::{visible_str, HeaderFields, RequestView, SetHeader};

/// The most a client's clock may be off (Azure's own bound).
const MAX_SKEW_SECS: u64 = 15 * 60;
const X_MS_DATE: HeaderName = HeaderName::from_static("x-ms-date");
const X_MS_COPY_SOURCE: HeaderName = HeaderName::from_static("x-ms-copy-source");

/// The Azure side of custody.
#[derive(Debug)]
pub(crate) struct AzureClients {
    /// The token header and, in `header` scope, the lock header: a
    /// Shared Key signature must cover each when present, which it does
    /// only for `x-ms-*` names.
    must_sign: Vec<HeaderName>,
    /// The upstream as a URL prefix, under which a copy source is
    /// rewritten (the store reads it with the gateway's signature).
    upstream: String,
}

impl AzureClients {
    pub(crate) fn new(must_sign: Vec<HeaderName>, upstream: String) -> Self {
        AzureClients {
            must_sign,
            upstream: upstream.trim_end_matches('/').to_owned(),
        }
    }

    /// The identity `request` is signed by (or whose SAS it carries);
    /// or why not. `tls`: the client's connection is TLS; `peer`: its
    /// address (a SAS's `sip`); `now`: seconds since the Unix epoch.
    pub(crate) fn authenticate<B>(
        &self,
        identities: &Identities,
        request: &Inbound<B>,
        tls: bool,
        peer: IpAddr,
        now: u64,
    ) -> Result<Verified, Denied> {
        let fields = request.fields();
        let authorization = {
            let mut values = fields.values_of(&http::header::AUTHORIZATION);
            let first = values.next();
            if values.next().is_some() {
                return Err(failed("Authorization appears more than once"));
            }
            first
        };
        let query = request.uri().query().unwrap_or("");
        let sas = shared_key::parse_service_sas(query).map_err(|e| failed(&e.to_string()))?;
        let verified = |identity: Arc<Identity>| Verified {
            identity,
            forward: Forwarding::Gateway,
            may_raise: false,
            answer: None,
        };
        match (authorization, sas) {
            (Some(_), Some(_)) => Err(failed(
                "a request carries a Shared Key signature or a SAS, not both",
            )),
            (Some(value), None) => self
                .shared_key(identities, request, value, now)
                .map(verified),
            (None, Some(sas)) => {
                let (account, rest) = account_of(request.uri().path())?;
                let identity = by_account(identities, account)?;
                let key = account_key(identities, &identity)?;
                check_sas(key, &sas, account, rest, query, now, peer, tls)?;
                let object = decoded_object(rest)?;
                let operation = self.operation(request, &object)?;
                check_permission(&sas.permissions, operation.row, &object)?;
                if let Some(source) = single(fields, &X_MS_COPY_SOURCE)? {
                    // The SAS authorises the destination; the source is
                    // read with the gateway's signature, so it must carry
                    // a SAS of its own that lets this identity read it.
                    let source = CopySource::parse(source, account)?;
                    let sas = shared_key::parse_service_sas(source.query)
                        .map_err(|e| failed(&e.to_string()))?
                        .ok_or_else(|| {
                            forbidden(
                                &source.object,
                                "a copy authorised by a SAS needs a SAS on its source (x-ms-copy-source) too",
                            )
                        })?;
                    check_sas(
                        key,
                        &sas,
                        account,
                        source.rest,
                        source.query,
                        now,
                        peer,
                        tls,
                    )?;
                    if !sas.permissions.contains('r') {
                        return Err(forbidden(
                            &source.object,
                            "the copy source's SAS does not permit reading it (sp has no r)",
                        ));
                    }
                }
                Ok(verified(identity))
            }
            (None, None) => super::identities::without_credentials(
                identities,
                request,
                "Server failed to authenticate the request: it carries no credentials, and anonymous access is off",
            ),
        }
    }

    fn shared_key<B>(
        &self,
        identities: &Identities,
        request: &Inbound<B>,
        value: &[u8],
        now: u64,
    ) -> Result<Arc<Identity>, Denied> {
        let fields = request.fields();
        let auth = shared_key::parse_authorization(value).map_err(|e| failed(&e.to_string()))?;
        let (account, _) = account_of(request.uri().path())?;
        if auth.account != account {
            return Err(failed(&format!(
                "the request is signed for account {:?} but addresses account {account:?}",
                auth.account
            )));
        }
        let date = single(fields, &X_MS_DATE)?
            .or(single(fields, &http::header::DATE)?)
            .ok_or_else(|| failed("x-ms-date (or Date) is missing"))?;
        let signed_at = httpdate::parse_http_date(date)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .ok_or_else(|| failed(&format!("the date {date:?} is not an HTTP date")))?
            .as_secs();
        if now.abs_diff(signed_at) > MAX_SKEW_SECS {
            return Err(Denied::new(
                DeniedKind::Skewed,
                format!("Server failed to authenticate the request: the request date {date} is more than 15 minutes from the gateway's time"),
            ));
        }
        let identity = by_account(identities, account)?;
        for name in &self.must_sign {
            if fields.contains(name) && !name.as_str().starts_with("x-ms-") {
                return Err(Denied::new(
                    DeniedKind::BadSignature,
                    format!("Server failed to authenticate the request: a Shared Key signature covers only x-ms-* headers, not {name}: send the token as x-ms-fencing-token (the gateway's --token-header), or authorise with a SAS"),
                ));
            }
        }
        // Every line as it came; the string to sign gathers each name's
        // values in their order.
        let lines: Vec<(&str, &[u8])> = request
            .head
            .lines()
            .into_iter()
            .filter_map(|(name, value)| Some((std::str::from_utf8(name).ok()?, value)))
            .collect();
        let to_sign = shared_key::string_to_sign(
            auth.scheme,
            request.method().as_str(),
            account,
            request.uri().path(),
            request.uri().query().unwrap_or(""),
            &lines,
        )
        .map_err(|e| failed(&e.to_string()))?;
        let key = account_key(identities, &identity)?;
        if !key.verify(&to_sign, &auth.signature) {
            return Err(Denied::new(
                DeniedKind::BadSignature,
                "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature.",
            ));
        }
        Ok(identity)
    }

    /// Maps `request` (verified) to the store: its target loses the
    /// client's account segment and any SAS, a copy source is rewritten
    /// under the upstream; returns every object it reaches with the access
    /// each needs, and the object it names.
    pub(crate) fn map<B>(
        &self,
        request: &mut Inbound<B>,
    ) -> Result<(Vec<(String, Access)>, String), Denied> {
        let (account, rest) = account_of(request.uri().path())?;
        let object = decoded_object(rest)?;
        // What the request is, read once, before anything else of it.
        let operation = self.operation(request, &object)?;
        let query = request.uri().query().unwrap_or("");
        let kept = without_sas(query);
        let target = match (rest.is_empty(), kept.is_empty()) {
            (true, true) => "/".to_owned(),
            (true, false) => format!("/?{kept}"),
            (false, true) => rest.to_owned(),
            (false, false) => format!("{rest}?{kept}"),
        };
        let copy = match single(request.fields(), &X_MS_COPY_SOURCE)? {
            Some(source) => {
                let source = CopySource::parse(source, account)?;
                let kept = without_sas(source.query);
                let url = match kept.is_empty() {
                    true => format!("{}{}", self.upstream, source.rest),
                    false => format!("{}{}?{kept}", self.upstream, source.rest),
                };
                let value = HeaderValue::from_str(&url)
                    .map_err(|_| invalid("x-ms-copy-source is no header value"))?;
                Some((source.object, value))
            }
            None => None,
        };
        // Fields that change who may read, or what the store does by
        // itself (public access, immutability, legal hold, tier): admin.
        let reached = reached(
            operation.row,
            query,
            &object,
            copy.as_ref().map(|(o, _)| o.as_str()),
            operation.admin_fields,
        );
        let uri = target
            .parse()
            .map_err(|_| invalid("the mapped target is no URI"))?;
        request.set_target(uri);
        if let Some((_, value)) = copy {
            request.set(X_MS_COPY_SOURCE, value);
        }
        Ok((reached, object))
    }
}

impl AzureClients {
    /// The row of the Azure table `request` is, addressed at `object`
    /// (`/`, `/container` or `/container/blob`, decoded); refused in
    /// Azure's words, naming what is not understood, if it is none. The
    /// token and lock headers are the gateway's to read, not the store's.
    fn operation<B>(&self, request: &Inbound<B>, object: &str) -> Result<ReadOperation, Denied> {
        operation_of(request, level_of(object, 0), &self.must_sign)
            .map_err(|refused| Denied::new(DeniedKind::Unsupported(refused.what), refused.message))
    }
}

/// The account segment of a path-style `path` and the rest (`/container/blob`,
/// as sent; empty for the account itself).
fn account_of(path: &str) -> Result<(&str, &str), Denied> {
    let after = path.strip_prefix('/').unwrap_or(path);
    let (account, rest) = match after.find('/') {
        Some(at) => (&after[..at], &after[at..]),
        None => (after, ""),
    };
    if !shared_key::is_account_name(account) {
        return Err(invalid(
            "under credential custody an Azure request names its account first in the path (http://gateway/ACCOUNT/container/blob)",
        ));
    }
    let rest = if rest == "/" { "" } else { rest };
    Ok((account, rest))
}

/// `/container/blob` decoded; a blob name with an empty, `.` or `..`
/// segment is refused (names are literal: normalising one would let a
/// check of one prefix pass a write stored under another).
fn decoded_object(rest: &str) -> Result<String, Denied> {
    if rest.is_empty() {
        return Ok("/".to_owned());
    }
    // The request's path is checked before routing already; a copy
    // source's is read here only.
    if crate::misreading::misread_separator(rest, true) {
        return Err(invalid(
            "under credential custody a blob name may not hold a backslash or an encoded slash (the store reads them as other separators)",
        ));
    }
    let decoded = percent_encoding::percent_decode_str(rest)
        .decode_utf8()
        .map_err(|_| invalid("the percent-decoded path is not UTF-8"))?;
    if decoded
        .split('/')
        .skip(1)
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(invalid(
            "under credential custody a blob name may not have an empty, '.' or '..' segment (names are literal)",
        ));
    }
    Ok(decoded.into_owned())
}

/// The query without a SAS's parameters (the gateway's signature replaces
/// it; response-header overrides such as `rscc` go with it).
fn without_sas(query: &str) -> String {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .filter(|pair| {
            let name = pair.split('=').next().unwrap_or("");
            let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
            !crate::chain::is_sas_parameter(&name.to_ascii_lowercase())
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// An `x-ms-copy-source` URL naming a blob behind this gateway, in the
/// same account as the request.
struct CopySource<'a> {
    /// After the account, as sent.
    rest: &'a str,
    query: &'a str,
    /// `/container/blob`, decoded.
    object: String,
}

impl<'a> CopySource<'a> {
    fn parse(url: &'a str, account: &str) -> Result<Self, Denied> {
        // A URL has no space or tab; a WHATWG parser (Azurite's) drops tabs
        // before it resolves `..`, so `..<TAB>` would climb there while
        // the gateway read a name.
        if !url.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(
                "x-ms-copy-source has a space, a tab or a byte that is not visible ASCII: a URL has none, and stores read such a URL differently",
            ));
        }
        let after_scheme = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .ok_or_else(|| invalid("x-ms-copy-source is not an http(s) URL"))?;
        let path_and_query = after_scheme.find('/').map_or("", |at| &after_scheme[at..]);
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        let same_account = account_of(path)
            .ok()
            .filter(|(source_account, _)| *source_account == account);
        let Some((_, rest)) = same_account else {
            return Err(forbidden(
                path,
                "under credential custody a copy source is a blob of the same account, addressed through the gateway",
            ));
        };
        let object = decoded_object(rest)?;
        if object.matches('/').count() < 2 {
            return Err(invalid("x-ms-copy-source names no blob"));
        }
        Ok(CopySource {
            rest,
            query,
            object,
        })
    }
}

/// Verifies `sas` with `key` for the resource `rest` of `account` names
/// (the blob, or its container for `sr=c`) and checks its limits.
#[allow(clippy::too_many_arguments)]
fn check_sas(
    key: &AccountKey,
    sas: &ServiceSas,
    account: &str,
    rest: &str,
    query: &str,
    now: u64,
    peer: IpAddr,
    tls: bool,
) -> Result<(), Denied> {
    let object = decoded_object(rest)?;
    let mut segments = object.splitn(3, '/').skip(1);
    let container = segments.next().unwrap_or("");
    let blob = segments.next().unwrap_or("");
    let resource = match sas.resource.as_str() {
        "c" if !container.is_empty() => format!("/{container}"),
        "b" | "bs" | "bv" if !blob.is_empty() => format!("/{container}/{blob}"),
        "c" | "b" | "bs" | "bv" => {
            return Err(failed(&format!(
                "a SAS for sr={} does not authorise a request for {object}",
                sas.resource
            )))
        }
        other => {
            return Err(failed(&format!(
                "a SAS for sr={other} is not accepted; sr=b, bs, bv or c"
            )))
        }
    };
    let snapshot = param(query, "snapshot").or_else(|| param(query, "versionid"));
    let to_sign = shared_key::sas_string_to_sign(sas, account, &resource, snapshot.as_deref());
    if !key.verify(&to_sign, &sas.signature) {
        return Err(Denied::new(
            DeniedKind::BadSignature,
            "Server failed to authenticate the request. Make sure the value of the SAS signature (sig) is formed correctly.",
        ));
    }
    shared_key::check_sas_limits(sas, now, peer, tls).map_err(|limit| {
        Denied::new(
            DeniedKind::Unauthenticated,
            format!("Server failed to authenticate the request: {limit}"),
        )
    })
}

/// Whether a SAS's permissions `sp` allow `operation`: one of its row's
/// letters.
fn check_permission(permissions: &str, operation: &Operation, object: &str) -> Result<(), Denied> {
    if operation
        .sas
        .chars()
        .any(|letter| permissions.contains(letter))
    {
        return Ok(());
    }
    Err(forbidden(
        object,
        &format!(
            "This request is not authorized to perform this operation using this permission: {} needs {} in the SAS, which permits {permissions:?}",
            operation.name,
            match operation.sas {
                "" => "a Shared Key signature, not a SAS".to_owned(),
                letters => format!("one of {letters:?}"),
            }
        ),
    ))
}

/// Every object a request for `object`, read as `operation`, reaches,
/// with the access each needs (SPEC, "What a client may reach with the
/// store's key"): the row's need, and `admin` for a blob write that
/// carries a field [`azure_operations::admin_field`] names.
fn reached(
    operation: &Operation,
    query: &str,
    object: &str,
    copy_source: Option<&str>,
    admin_fields: bool,
) -> Vec<(String, Access)> {
    let need = operation.need;
    match operation.level {
        // The account: list containers, its properties; a write of it is
        // an admin's of everything.
        Level::Account => vec![(
            "/".to_owned(),
            match need {
                Need::Write | Need::Admin => Access::Admin,
                Need::Read | Need::List | Need::ReadContainer => Access::Read,
            },
        )],
        Level::Container => {
            let prefix = format!("{object}/");
            match need {
                // Create, delete or reconfigure a container (its ACL, its
                // metadata, its lease).
                Need::Write | Need::Admin => vec![(prefix, Access::Admin)],
                // A listing reaches what its prefix names.
                Need::List => {
                    let listing = param(query, "prefix").unwrap_or_default();
                    vec![(format!("{prefix}{listing}"), Access::Read)]
                }
                // Anything else read of a container (its properties,
                // metadata, stored access policies, a tag query) is of
                // the whole container, whatever prefix rides along.
                Need::Read | Need::ReadContainer => vec![(prefix, Access::Read)],
            }
        }
        Level::Blob => {
            let access = match need {
                Need::Read | Need::List | Need::ReadContainer => Access::Read,
                Need::Write if admin_fields => Access::Admin,
                Need::Write => Access::Write,
                Need::Admin => Access::Admin,
            };
            let mut reached = vec![(object.to_owned(), access)];
            if let Some(source) = copy_source {
                reached.push((source.to_owned(), Access::Read));
            }
            reached
        }
    }
}

/// The identity whose account name is `account`.
fn by_account(identities: &Identities, account: &str) -> Result<Arc<Identity>, Denied> {
    identities.by_key(account).cloned().ok_or_else(|| {
        Denied::new(
            DeniedKind::UnknownKey,
            format!("Server failed to authenticate the request: no identity of the gateway has account {account:?}"),
        )
    })
}

/// The identity's account key, decoded when the identities were loaded.
fn account_key<'a>(
    identities: &'a Identities,
    identity: &Identity,
) -> Result<&'a AccountKey, Denied> {
    identities
        .account_key(&identity.name)
        .ok_or_else(|| failed("the identity has no account key"))
}

fn param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        key.eq_ignore_ascii_case(name).then(|| {
            percent_encoding::percent_decode_str(value)
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

/// The one value of `name`, as text; two lines of it are refused.
fn single<'a, H: HeaderFields + ?Sized>(
    fields: &'a H,
    name: &HeaderName,
) -> Result<Option<&'a str>, Denied> {
    let mut values = fields.values_of(name);
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(failed(&format!("{name} appears more than once")));
    }
    visible_str(first)
        .map(Some)
        .ok_or_else(|| failed(&format!("{name} is not visible ASCII")))
}

/// Credentials that do not authenticate (Azure's `AuthenticationFailed`).
fn failed(message: &str) -> Denied {
    Denied::new(DeniedKind::Malformed, message)
}

fn forbidden(object: &str, message: &str) -> Denied {
    Denied::new(
        DeniedKind::Forbidden {
            object: object.to_owned(),
        },
        message,
    )
}

fn invalid(message: &str) -> Denied {
    Denied::new(DeniedKind::InvalidPath, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_come_first_in_the_path() {
        assert_eq!(account_of("/fgbilling/c/b").unwrap(), ("fgbilling", "/c/b"));
        assert_eq!(account_of("/fgbilling").unwrap(), ("fgbilling", ""));
        assert_eq!(account_of("/fgbilling/").unwrap(), ("fgbilling", ""));
        assert!(account_of("/FG/c").is_err());
        assert!(account_of("/").is_err());
        assert_eq!(decoded_object("/c/a%20b").unwrap(), "/c/a b");
        assert!(decoded_object("/c/x/../y").is_err());
        assert!(decoded_object("/c//y").is_err());
        assert_eq!(decoded_object("").unwrap(), "/");
    }

    #[test]
    fn a_sas_leaves_the_query() {
        assert_eq!(
            without_sas("comp=block&blockid=QQ%3D%3D&sv=2021-08-06&sig=abc&se=2030-01-01"),
            "comp=block&blockid=QQ%3D%3D"
        );
        assert_eq!(without_sas("sv=1&sig=2"), "");
    }

    /// The row `method` with `query` and the selecting `fields` is.
    fn row(method: &str, level: Level, query: &str, fields: &[(&str, &str)]) -> &'static Operation {
        let params: Vec<(&str, &str)> = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
            .collect();
        crate::dialect::azure_operations::recognise(method, level, &params, fields).unwrap()
    }

    #[test]
    fn what_a_request_reaches() {
        let list = "restype=container&comp=list&prefix=r%2F";
        assert_eq!(
            reached(
                row("GET", Level::Container, list, &[]),
                list,
                "/c",
                None,
                false
            ),
            vec![("/c/r/".to_owned(), Access::Read)]
        );
        assert_eq!(
            reached(
                row("PUT", Level::Container, "restype=container", &[]),
                "restype=container",
                "/c",
                None,
                false
            ),
            vec![("/c/".to_owned(), Access::Admin)]
        );
        let copy = row("PUT", Level::Blob, "", &[("x-ms-copy-source", "u")]);
        assert_eq!(
            reached(copy, "", "/c/b", Some("/c/src"), false),
            vec![
                ("/c/b".to_owned(), Access::Write),
                ("/c/src".to_owned(), Access::Read)
            ]
        );
        assert_eq!(
            reached(
                row("GET", Level::Account, "comp=list", &[]),
                "comp=list",
                "/",
                None,
                false
            ),
            vec![("/".to_owned(), Access::Read)]
        );
        // A container's configuration is read whole, whatever prefix rides
        // along (Azure issue, class 5).
        for (query, sent) in [
            ("restype=container", "restype=container&prefix=r%2F"),
            (
                "restype=container&comp=metadata",
                "restype=container&comp=metadata&prefix=r%2F",
            ),
            (
                "restype=container&comp=acl",
                "restype=container&comp=acl&prefix=r%2F",
            ),
            (
                "restype=container&comp=blobs&where=x",
                "restype=container&comp=blobs&where=x&prefix=r%2F",
            ),
        ] {
            let operation = row("GET", Level::Container, query, &[]);
            assert_eq!(
                reached(operation, sent, "/c", None, false),
                vec![("/c/".to_owned(), Access::Read)],
                "{sent}"
            );
        }
        // Immutability, legal hold, expiry, undelete and tier need admin.
        for (method, comp) in [
            ("PUT", "immutabilityPolicies"),
            ("DELETE", "immutabilityPolicies"),
            ("PUT", "legalhold"),
            ("PUT", "expiry"),
            ("PUT", "undelete"),
            ("PUT", "tier"),
        ] {
            let query = format!("comp={comp}");
            assert_eq!(
                reached(
                    row(method, Level::Blob, &query, &[]),
                    &query,
                    "/c/b",
                    None,
                    false
                ),
                vec![("/c/b".to_owned(), Access::Admin)],
                "{comp}"
            );
        }
        // A write carrying an admin field needs admin.
        let put = row("PUT", Level::Blob, "", &[("x-ms-blob-type", "BlockBlob")]);
        assert_eq!(
            reached(put, "", "/c/b", None, true),
            vec![("/c/b".to_owned(), Access::Admin)]
        );
    }

    #[test]
    fn sas_permissions_are_per_operation() {
        let get = row("GET", Level::Blob, "", &[]);
        let put = row("PUT", Level::Blob, "", &[("x-ms-blob-type", "BlockBlob")]);
        let block = row("PUT", Level::Blob, "comp=block", &[]);
        let delete = row("DELETE", Level::Blob, "", &[]);
        let list = row("GET", Level::Container, "restype=container&comp=list", &[]);
        let acl = row("PUT", Level::Container, "restype=container&comp=acl", &[]);
        assert!(check_permission("r", get, "/c/b").is_ok());
        assert!(check_permission("r", put, "/c/b").is_err());
        // Create only would let a SAS overwrite: the store never sees it.
        assert!(check_permission("c", put, "/c/b").is_err());
        assert!(check_permission("rw", block, "/c/b").is_ok());
        assert!(check_permission("rw", delete, "/c/b").is_err());
        assert!(check_permission("l", list, "/c").is_ok());
        assert!(check_permission("r", list, "/c").is_err());
        assert!(check_permission("racwdl", acl, "/c").is_err());
    }

    #[test]
    fn copy_sources_stay_in_the_account() {
        let source = CopySource::parse("http://127.0.0.1:9/fgb/c/s%20x?snapshot=1", "fgb").unwrap();
        assert_eq!((source.rest, source.query), ("/c/s%20x", "snapshot=1"));
        assert_eq!(source.object, "/c/s x");
        for foreign in [
            "https://other.blob.core.windows.net/c/b",
            "http://h/fgo/c/b",
        ] {
            let refused = CopySource::parse(foreign, "fgb").err().unwrap();
            assert!(
                matches!(refused.kind, DeniedKind::Forbidden { .. }),
                "{foreign}"
            );
        }
        assert!(CopySource::parse("http://h/fgb/c", "fgb").is_err());
        assert!(CopySource::parse("ftp://h/fgb/c/b", "fgb").is_err());
    }
}
