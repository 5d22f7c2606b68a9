//! Credential custody (`--upstream-credentials`, `--identities`): the
//! gateway holds the only credentials the store accepts, and its clients
//! authenticate with credentials of the gateway's own. Every request is
//! authenticated and authorised over every object it reaches before the
//! fencing layer sees it; every request sent to the store is signed by the
//! gateway. The fence becomes the store's only door.
//!
//! One file per job, each dialect its own: `files` (the TOML files and
//! their secrets), `identities` (lookups and `allow` prefixes), `s3` (SigV4
//! verified, S3's addressing and what a request reaches), `basic` (Basic
//! and Bearer for `webdav` and `http`), `azure` (Shared Key and service
//! SAS verified, the account mapped, what a request reaches), `sign` (the
//! store's signature), `dav_locks` (WebDAV lock tokens bound to the
//! identity that took the lock), `denied` (refusals in the store's
//! dialect) and `fingerprint` (what the files held, to see them change on
//! disk). `seal_keys` derives the keys of the handles custody seals
//! (WebDAV lock tokens; S3 upload ids, `upload_ids`).

use crate::gateway::config::{Anonymous, TableSource};
use std::sync::{Arc, RwLock};

use http::HeaderName;

use self::azure::AzureClients;
use self::dav_locks::LockKeys;
use self::denied::{Denied, DeniedKind};
use self::files::{Access, Identity, UpstreamCredentials};
use self::identities::Identities;
use self::s3::S3Clients;
use self::upload_ids::UploadKeys;
use self::verified::AnswerRewrite;
use crate::dialect::plain_operations::{self, PlainDialect};
use crate::dialect::StoreKind;
use crate::gateway::inbound::Inbound;
use crate::head::{HeaderFields, RequestView};
use crate::key::normalize_path;
use crate::reach::{self, ReachError};

mod azure;
mod basic;
pub(crate) mod dav_locks;
pub(crate) mod denied;
pub(crate) mod files;
pub(crate) mod fingerprint;
pub(crate) mod identities;
pub(crate) mod s3;
pub(crate) mod seal_keys;
pub(crate) mod sign;
pub(crate) mod stream;
pub(crate) mod upload_ids;
pub(crate) mod verified;

pub(crate) use self::verified::Forwarding;

/// What custody was configured with, for a start and each reload.
#[derive(Debug, Clone)]
pub(crate) struct CustodyFiles {
    pub(crate) identities: Option<TableSource>,
    pub(crate) anonymous: Anonymous,
    /// A route's `identities = [...]`: only these may use it; `None`:
    /// every identity.
    pub(crate) allowed: Option<Vec<String>>,
}

/// The client side of custody: identities and the store's dialect.
#[derive(Debug)]
pub(crate) struct Custody {
    files: CustodyFiles,
    /// Swapped whole on a reload; a request reads the one it started with.
    identities: RwLock<Arc<Identities>>,
    dialect: Dialect,
}

/// How clients sign, by store.
#[derive(Debug)]
enum Dialect {
    /// `--store s3`: SigV4, and the keys that bind upload ids to their
    /// object.
    S3(S3Clients, UploadKeys),
    /// `--store azure`: Shared Key and service SAS.
    Azure(AzureClients),
    /// `webdav` and `http`: Basic and Bearer, the dialect's table, and
    /// the keys that bind WebDAV lock tokens to identities.
    Plain(PlainDialect, LockKeys),
}

/// What a store's dialect needs beyond the identities.
#[derive(Debug, Clone)]
pub(crate) struct DialectOptions {
    /// `--s3-domain`.
    pub(crate) s3_domain: Option<String>,
    /// The token header (and, in `header` scope, the lock header), which a
    /// signed request must have signed when it sends them.
    pub(crate) must_sign: Vec<HeaderName>,
    /// The SigV4 regions whose signing keys are cached.
    pub(crate) regions: Vec<String>,
    /// The upstream URL (Azure copy sources are rewritten under it).
    pub(crate) upstream: String,
}

impl Custody {
    /// Loads the identities file, for a store of kind `store` whose
    /// credentials are `credentials`.
    pub(crate) fn load(
        store: StoreKind,
        files: CustodyFiles,
        options: DialectOptions,
        credentials: &UpstreamCredentials,
    ) -> Result<Self, files::FileError> {
        let dialect = match store {
            StoreKind::S3 => Dialect::S3(
                S3Clients::new(options.s3_domain, options.must_sign, options.regions),
                UploadKeys::new(credentials),
            ),
            StoreKind::Azure => {
                Dialect::Azure(AzureClients::new(options.must_sign, options.upstream))
            }
            StoreKind::Webdav => Dialect::Plain(PlainDialect::Webdav, LockKeys::new(credentials)),
            StoreKind::Http => Dialect::Plain(PlainDialect::Http, LockKeys::new(credentials)),
        };
        let identities = Self::read(&files, &dialect)?;
        Ok(Custody {
            dialect,
            files,
            identities: RwLock::new(Arc::new(identities)),
        })
    }

    fn read(files: &CustodyFiles, dialect: &Dialect) -> Result<Identities, files::FileError> {
        let mut list = match &files.identities {
            Some(source) => files::read_identities(source)?,
            None => Vec::new(),
        };
        if let (Some(allowed), Some(source)) = (&files.allowed, &files.identities) {
            if let Some(unknown) = allowed
                .iter()
                .find(|name| !list.iter().any(|identity| &identity.name == *name))
            {
                return Err(files::FileError::new(
                    source.path(),
                    format!("a route allows identity {unknown:?}, which no [[identity]] names"),
                ));
            }
            list.retain(|identity| allowed.contains(&identity.name));
        }
        let mut account_keys = std::collections::HashMap::new();
        if let (Dialect::Azure(_), Some(source)) = (dialect, &files.identities) {
            // An identity's access_key_id is its account name and its
            // secret the account key: checked and decoded now, not at each
            // request.
            for identity in &list {
                if let (Some(account), Some(secret)) = (&identity.access_key_id, &identity.secret) {
                    if !crate::dialect::shared_key::is_account_name(account) {
                        return Err(files::FileError::new(
                            source.path(),
                            format!("identity {:?}: under --store azure its access_key_id is an account name, 3 to 24 lowercase letters and digits", identity.name),
                        ));
                    }
                    let Ok(key) =
                        crate::dialect::shared_key::AccountKey::from_base64(secret.expose())
                    else {
                        return Err(files::FileError::new(
                            source.path(),
                            format!("identity {:?}: under --store azure its secret is an account key, in base64", identity.name),
                        ));
                    };
                    account_keys.insert(identity.name.clone(), key);
                }
            }
        }
        let mut identities = Identities::new(list, files.anonymous);
        identities.set_account_keys(account_keys);
        Ok(identities)
    }

    /// The identities as the files hold them now, not yet in force.
    pub(crate) fn read_again(&self) -> Result<Identities, files::FileError> {
        Self::read(&self.files, &self.dialect)
    }

    /// The fingerprint of the identities in force.
    pub(crate) fn fingerprint(&self) -> [u8; 32] {
        self.identities().fingerprint()
    }

    /// Puts `identities` (from [`Custody::read_again`]) in force.
    pub(crate) fn replace(&self, identities: Identities) {
        if let Ok(mut current) = self.identities.write() {
            *current = Arc::new(identities);
        }
        // A secret rotated under the same name must not verify with its
        // old key.
        if let Dialect::S3(s3, _) = &self.dialect {
            s3.forget_keys();
        }
    }

    /// Seals WebDAV lock tokens and S3 upload ids with a key of
    /// `credentials` from now on (the store's credentials were reloaded);
    /// those sealed before still verify.
    pub(crate) fn rekey(&self, credentials: &UpstreamCredentials) {
        match &self.dialect {
            Dialect::Plain(_, keys) => keys.rotate(credentials),
            Dialect::S3(_, keys) => keys.rotate(credentials),
            Dialect::Azure(_) => {}
        }
    }

    fn identities(&self) -> Arc<Identities> {
        match self.identities.read() {
            Ok(current) => Arc::clone(&current),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Authenticates `request` and authorises every object it reaches
    /// (but the keys of an S3 `DeleteObjects`, which come with its body:
    /// [`Custody::authorise_listed`]); a verified request carries its
    /// [`Verified`](verified::Verified) on. `tls`: the client's connection is TLS; `peer`: its
    /// address.
    pub(crate) fn admit<B>(
        &self,
        request: &mut Inbound<B>,
        tls: bool,
        peer: std::net::IpAddr,
    ) -> Result<(), Denied> {
        let identities = self.identities();
        // Authenticated first, and carried on at once: a request refused
        // below is logged and counted under its identity.
        let verified = match &self.dialect {
            Dialect::S3(s3, _) => s3.authenticate(&identities, request, tls, unix_now())?,
            Dialect::Azure(azure) => {
                azure.authenticate(&identities, request, tls, peer, unix_now())?
            }
            Dialect::Plain(..) => basic::authenticate(&identities, request)?,
        };
        let identity = Arc::clone(&verified.identity);
        request.custody = Some(Box::new(verified));
        let may_raise = match &self.dialect {
            Dialect::Azure(azure) => {
                let (reached, own) = azure.map(request)?;
                authorise_all(&identity, &reached)?;
                identity.may(&own, Access::Write)
            }
            Dialect::S3(s3, uploads) => {
                let addressed = s3.address(request)?;
                // Borrowed from `addressed`: no copy of the object's path.
                let (operation, reached) = s3::reached(request, &addressed, s3.must_sign())?;
                if let Some(target) = &addressed.path_style {
                    let uri = target.parse().map_err(|_| {
                        Denied::new(DeniedKind::InvalidPath, "the path-style target is no URI")
                    })?;
                    request.set_target(uri);
                }
                authorise_all(&identity, &reached)?;
                bind_upload(uploads, request, &addressed, operation)?;
                identity.may(&addressed.object, Access::Write)
            }
            Dialect::Plain(dialect, keys) => {
                let reached = plain_reached(*dialect, request)?;
                authorise_all(&identity, &reached)?;
                let path = &reached[0].0;
                let mut set = Vec::new();
                let answer = dav_locks::admit(keys, &identity, &*request, path, |n, v| {
                    set.push((n, v));
                })?;
                for (name, value) in set {
                    crate::head::SetHeader::set(request, name, value);
                }
                if let Some(verified) = request.custody.as_deref_mut() {
                    verified.answer = answer.map(|lock| Box::new(AnswerRewrite::Lock(lock)));
                }
                identity.may(path, Access::Write)
            }
        };
        if let Some(verified) = request.custody.as_deref_mut() {
            verified.may_raise = may_raise;
        }
        Ok(())
    }

    /// The objects an S3 `DeleteObjects` lists, each a write of the
    /// identity that sent it.
    pub(crate) fn authorise_listed<B>(
        &self,
        request: &Inbound<B>,
        keys: &[String],
    ) -> Result<(), Denied> {
        let Some(verified) = &request.custody else {
            return Ok(());
        };
        let path = request.uri().path();
        let bucket = path.trim_start_matches('/').split('/').next().unwrap_or("");
        for key in keys {
            // The keys as listed are literal S3 keys, like a path's.
            if key.split('/').any(|s| s == "." || s == "..") {
                return Err(Denied::new(
                    DeniedKind::InvalidPath,
                    format!("the listed key {key:?} has a '.' or '..' segment"),
                ));
            }
            authorise(
                &verified.identity,
                &format!("/{bucket}/{key}"),
                Access::Write,
            )?;
        }
        Ok(())
    }
}

/// S3 upload ids bound to their object (`upload_ids.rs`): a request of an
/// operation named by its `uploadId` (a part, a part copy, a completion,
/// an abort, a parts listing) must carry an id the gateway sealed for its
/// own bucket and key, else 404 `NoSuchUpload`; a `ListMultipartUploads`'
/// `upload-id-marker` one sealed for its `key-marker`. The store's id is
/// put back in the target (and a presigned URL's forwarded query), which
/// the gateway signs for the store after this; the client's signature was
/// verified over the target as sent. A `CreateMultipartUpload`'s or
/// `ListMultipartUploads`' answer will hand out sealed ids.
fn bind_upload<B>(
    keys: &UploadKeys,
    request: &mut Inbound<B>,
    addressed: &s3::Addressed,
    operation: &crate::dialect::s3_operations::Operation,
) -> Result<(), Denied> {
    let names_upload = operation.subresources.contains(&upload_ids::UPLOAD_ID);
    let creates = operation.name == "CreateMultipartUpload";
    let lists = operation.name == "ListMultipartUploads";
    if !(names_upload || creates || lists) {
        return Ok(());
    }
    let Some(bucket) = addressed.bucket() else {
        // The table's rows of these are bucket- or object-level: never here.
        return Ok(());
    };
    // A form body, from which a store could read another upload id, was
    // refused with the operation (`reached::operation_of`).
    let query = request.uri().query().unwrap_or("");
    let (answer, unsealed) = if lists {
        let (unsealed, url_encoded) = upload_ids::unseal_marker(keys, query, bucket)?;
        (Some(keys.listed(bucket, url_encoded)), unsealed)
    } else {
        let Some((_, key)) = addressed.bucket_and_key() else {
            return Ok(());
        };
        if creates {
            (Some(keys.created(bucket, &key)), None)
        } else {
            let unsealed = upload_ids::unseal_query(keys, query, bucket, &key, &addressed.object)?;
            (None, Some(unsealed))
        }
    };
    if let Some(unsealed) = unsealed {
        let uri = request.uri();
        let rewritten = unsealed.put_back(uri.query().unwrap_or(""))?;
        let unbuildable = |_: String| {
            Denied::new(
                DeniedKind::InvalidPath,
                "the target with the store's upload id is no URI",
            )
        };
        let mut parts = uri.clone().into_parts();
        parts.path_and_query = Some(
            http::uri::PathAndQuery::try_from(format!("{}?{rewritten}", uri.path()))
                .map_err(|e| unbuildable(e.to_string()))?,
        );
        request.set_target(http::Uri::from_parts(parts).map_err(|e| unbuildable(e.to_string()))?);
        if let Some(verified) = request.custody.as_deref_mut() {
            if let Forwarding::Presigned { query, .. } = &mut verified.forward {
                *query = unsealed.put_back(query)?;
            }
        }
    }
    if let (Some(answer), Some(verified)) = (answer, request.custody.as_deref_mut()) {
        verified.answer = Some(Box::new(AnswerRewrite::Upload(answer)));
    }
    Ok(())
}

/// [`authorise`] for every object a request reaches.
fn authorise_all<O: AsRef<str>>(
    identity: &Identity,
    reached: &[(O, Access)],
) -> Result<(), Denied> {
    reached
        .iter()
        .try_for_each(|(object, need)| authorise(identity, object.as_ref(), *need))
}

/// Whether `identity` may touch `object` with `need`; else 403.
fn authorise(identity: &Identity, object: &str, need: Access) -> Result<(), Denied> {
    if identity.may(object, need) {
        return Ok(());
    }
    Err(Denied::new(
        DeniedKind::Forbidden {
            object: object.to_owned(),
        },
        format!(
            "identity {:?} may not {} {object}",
            identity.name,
            need.verb()
        ),
    ))
}

/// What a `webdav` or `http` request reaches, as its row of
/// [`plain_operations`] says: its normalised path (with the row's need)
/// and a `COPY`'s or `MOVE`'s destination (a write; a collection's subtree
/// is under its path, so an `allow` prefix that covers the path covers
/// it). A request no row takes is refused 501, nothing forwarded.
fn plain_reached<R: RequestView>(
    dialect: PlainDialect,
    request: &R,
) -> Result<Vec<(String, Access)>, Denied> {
    let invalid = |detail: String| Denied::new(DeniedKind::InvalidPath, detail);
    let operation = recognise_plain(dialect, request)
        .map_err(|refused| Denied::new(DeniedKind::NotImplemented, refused.0))?;
    let path = normalize_path(request.uri().path()).map_err(|e| invalid(e.to_string()))?;
    let need = match operation.need {
        plain_operations::Need::Read => Access::Read,
        plain_operations::Need::Write => Access::Write,
    };
    let mut reached = vec![(path, need)];
    match reach::destination_path(request) {
        Ok(Some(destination)) => reached.push((destination, Access::Write)),
        Ok(None) => {}
        // The fencing layer refuses a bad Destination (unfenceable);
        // custody refuses it first, the same way, rather than let it by.
        Err(ReachError::Unfenceable(e)) => {
            return Err(Denied::new(DeniedKind::InvalidPath, e.0));
        }
        Err(e) => return Err(invalid(e.to_string())),
    }
    Ok(reached)
}

/// `request`'s row in `dialect`'s table, from its method and the WebDAV
/// fields it carries.
pub(crate) fn recognise_plain<R: RequestView + ?Sized>(
    dialect: PlainDialect,
    request: &R,
) -> Result<&'static plain_operations::Operation, plain_operations::NotRecognised> {
    let fields = request.fields();
    let present: Vec<&str> = plain_operations::DAV_FIELDS
        .iter()
        .copied()
        .filter(|name| fields.contains(&HeaderName::from_static(name)))
        .collect();
    plain_operations::recognise(dialect, request.method().as_str(), &present)
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
