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
//! and Bearer for `webdav` and `http`), `sign` (the store's signature) and
//! `denied` (refusals in the store's dialect). An Azure dialect is a file
//! beside `s3`.

use crate::gateway::config::TableSource;
use std::sync::{Arc, RwLock};

use http::{HeaderName, HeaderValue};

use self::denied::{Denied, DeniedKind};
use self::files::{Access, Identity};
use self::identities::Identities;
use self::s3::S3Clients;
use crate::custody::StoreKind;
use crate::gateway::inbound::Inbound;
use crate::head::RequestView;
use crate::key::normalize_path;
use crate::reach::{self, ReachError};

mod basic;
pub(crate) mod denied;
pub(crate) mod files;
pub(crate) mod identities;
mod s3;
pub(crate) mod sign;
pub(crate) mod stream;

pub use self::identities::Anonymous;

/// Who sent a request, verified, and how it goes on to the store.
#[derive(Debug)]
pub(crate) struct Verified {
    pub(crate) identity: Arc<Identity>,
    pub(crate) forward: Forwarding,
    /// The identity may write the object the request names, and so raise
    /// its fence (a token above the highest from one that may only read
    /// it is refused).
    pub(crate) may_raise: bool,
}

/// How a verified request's fields go on, signed by the gateway.
#[derive(Debug, Clone)]
pub(crate) enum Forwarding {
    /// S3, signed in its `Authorization` header: only the fields the
    /// client signed go on (with the gateway's additions), and its payload
    /// hash.
    Signed {
        names: Vec<String>,
        payload: String,
        /// A signed aws-chunked body: the client's chain, and where the
        /// gateway's seed goes once its head is signed.
        /// Boxed: most requests have none.
        chunked: Option<Box<(stream::ClientSide, stream::SeedCell)>>,
    },
    /// S3, a presigned URL: the fields it signed, its query without the
    /// authentication parameters, and its other signed `x-amz-*`
    /// parameters as fields.
    Presigned {
        names: Vec<String>,
        query: String,
        moved: Vec<(HeaderName, HeaderValue)>,
    },
    /// Every field but the client's credentials (Basic or Bearer clients,
    /// anonymous ones, the gateway's own requests).
    Gateway,
    /// As it came, unsigned (a CORS preflight).
    Unsigned,
}

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
    /// `Some` under `--store s3`.
    s3: Option<S3Clients>,
}

impl Custody {
    /// Loads the identities file, for a store of kind `store`.
    /// `must_sign`: the token header (and, in `header` scope, the lock
    /// header), which a signed request must have signed when it sends
    /// them. `regions`: the SigV4 regions whose signing keys are cached.
    pub(crate) fn load(
        store: StoreKind,
        files: CustodyFiles,
        s3_domain: Option<String>,
        must_sign: Vec<HeaderName>,
        regions: Vec<String>,
    ) -> Result<Self, files::FileError> {
        let identities = Self::read(&files)?;
        Ok(Custody {
            s3: (store == StoreKind::S3).then(|| S3Clients::new(s3_domain, must_sign, regions)),
            files,
            identities: RwLock::new(Arc::new(identities)),
        })
    }

    fn read(files: &CustodyFiles) -> Result<Identities, files::FileError> {
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
        Ok(Identities::new(list, files.anonymous))
    }

    /// The identities as the files hold them now, not yet in force.
    pub(crate) fn read_again(&self) -> Result<Identities, files::FileError> {
        Self::read(&self.files)
    }

    /// Puts `identities` (from [`Custody::read_again`]) in force.
    pub(crate) fn replace(&self, identities: Identities) {
        if let Ok(mut current) = self.identities.write() {
            *current = Arc::new(identities);
        }
        // A secret rotated under the same name must not verify with its
        // old key.
        if let Some(s3) = &self.s3 {
            s3.forget_keys();
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
    /// [`Verified`] on. `tls`: the client's connection is TLS.
    pub(crate) fn admit<B>(&self, request: &mut Inbound<B>, tls: bool) -> Result<(), Denied> {
        let identities = self.identities();
        // Authenticated first, and carried on at once: a request refused
        // below is logged and counted under its identity.
        let verified = match &self.s3 {
            Some(s3) => s3.authenticate(&identities, request, tls, unix_now())?,
            None => basic::authenticate(&identities, request)?,
        };
        let identity = Arc::clone(&verified.identity);
        request.custody = Some(Box::new(verified));
        let (reached, own) = match &self.s3 {
            Some(s3) => {
                let addressed = s3.address(request)?;
                let reached = s3::reached(request, &addressed)?;
                if let Some(target) = &addressed.path_style {
                    let uri = target.parse().map_err(|_| {
                        Denied::new(DeniedKind::InvalidPath, "the path-style target is no URI")
                    })?;
                    request.set_target(uri);
                }
                (reached, addressed.object)
            }
            None => {
                let reached = plain_reached(request)?;
                let own = reached[0].0.clone();
                (reached, own)
            }
        };
        for (object, need) in &reached {
            authorise(&identity, object, *need)?;
        }
        if let Some(verified) = request.custody.as_deref_mut() {
            verified.may_raise = identity.may(&own, Access::Write);
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

impl Verified {
    /// The refusal of a token that would raise `key`'s fence (whose
    /// highest is `highest`) from an identity that may only read the
    /// object: only writers raise fences.
    pub(crate) fn check_raise(
        &self,
        key: &str,
        token: u64,
        highest: Option<u64>,
    ) -> Result<(), Denied> {
        if self.may_raise || highest.is_some_and(|highest| token <= highest) {
            return Ok(());
        }
        Err(Denied::new(
            DeniedKind::Forbidden {
                object: key.to_owned(),
            },
            format!(
                "identity {:?} may only read {key}, and token {token} would raise its fence",
                self.identity.name
            ),
        ))
    }
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

/// What a `webdav` or `http` request reaches: its normalised path (a read
/// for the safe methods, else a write) and a `COPY`'s or `MOVE`'s
/// destination (a write; a collection's subtree is under its path, so an
/// `allow` prefix that covers the path covers it).
fn plain_reached<R: RequestView>(request: &R) -> Result<Vec<(String, Access)>, Denied> {
    let invalid = |detail: String| Denied::new(DeniedKind::InvalidPath, detail);
    let path = normalize_path(request.uri().path()).map_err(|e| invalid(e.to_string()))?;
    let write = !matches!(
        request.method().as_str(),
        "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PROPFIND"
    );
    let mut reached = vec![(path, if write { Access::Write } else { Access::Read })];
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

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
