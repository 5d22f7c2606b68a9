//! What an S3 request is and reaches under custody: its row of the
//! operation table, every object it reads, writes or deletes (copy
//! sources, listed keys) with the access each needs.

use super::*;

/// Where an S3 request's bucket and key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Addressed {
    /// `/bucket/key`, decoded, as S3 stores it (`/` alone for the service,
    /// `/bucket` for a bucket).
    pub(crate) object: String,
    /// For a virtual-hosted request, its path-style target (`/bucket` in
    /// front of the path as sent, query kept).
    pub(crate) path_style: Option<String>,
    /// The `/`s trimmed off the end of the path to make `object` (S3 keeps
    /// them: `dir/` is a key of its own).
    pub(crate) trailing_slashes: usize,
}

impl Addressed {
    /// The bucket and the key as S3 reads them (decoded, its trailing
    /// `/`s kept), if the request names an object.
    pub(crate) fn bucket_and_key(&self) -> Option<(&str, String)> {
        let bucket = self.bucket()?;
        let key = self.object.get(bucket.len() + 2..)?;
        let mut key = key.to_owned();
        key.push_str(&"/".repeat(self.trailing_slashes));
        Some((bucket, key))
    }

    /// The bucket, if the request names one (not the service's `/`).
    pub(crate) fn bucket(&self) -> Option<&str> {
        self.object
            .get(1..)
            .and_then(|rest| rest.split('/').next())
            .filter(|bucket| !bucket.is_empty())
    }
}

/// Every object `request` reaches, addressed at `addressed`, with the
/// access each needs (SPEC, "What a client may reach with the store's
/// key"). An S3 `DeleteObjects`' listed keys are added once its body was
/// read.
///
/// Returns the operation too: the table's reading of the request, read
/// once.
pub(crate) fn reached<'a, B>(
    request: &Inbound<B>,
    addressed: &'a Addressed,
    read_fields: &[HeaderName],
) -> Result<(&'static s3_operations::Operation, ReachedObjects<'a>), Denied> {
    let method = request.method();
    let query = query_of(request);
    let write = !matches!(method.as_str(), "GET" | "HEAD" | "OPTIONS");
    // The table's reading decides the access: one reading of the
    // request, for what it is and what it needs.
    let operation = recognised(request, addressed, read_fields)?;
    let mut reached = ReachedObjects::new();
    let Some(bucket) = addressed.bucket() else {
        // The service: ListBuckets, or nothing a client may do.
        reached.push((
            Cow::Borrowed("/"),
            if write { Access::Admin } else { Access::Read },
        ));
        return Ok((operation, reached));
    };
    let on_bucket = addressed.object.strip_prefix('/') == Some(bucket);
    let admin_resource = operation.need == s3_operations::Need::Admin;
    // A presigned URL's other x-amz-* parameters become fields of the
    // request the store gets: authorised exactly as those fields.
    let moved: &[(HeaderName, http::HeaderValue)] = match request.custody.as_deref() {
        Some(Verified {
            forward: Forwarding::Presigned { moved, .. },
            ..
        }) => moved,
        _ => &[],
    };
    let mut names = request
        .fields()
        .names()
        .chain(moved.iter().map(|(name, _)| name.as_str().as_bytes()));
    let admin_header = names.any(is_admin_field);
    if on_bucket {
        let bucket_prefix = format!("/{bucket}/");
        if operation.name == "DeleteObjects" {
            // DeleteObjects: each key it lists is a write of its own,
            // authorised once the body is read (`Custody::authorise_listed`).
            // A governance bypass removes versions retention keeps: as on
            // DeleteObject, `admin` on the bucket (issue 48, class 5).
            if admin_header {
                reached.push((Cow::Owned(bucket_prefix), Access::Admin));
            }
        } else if write {
            // Create, delete or reconfigure a bucket; and a POST-policy
            // form upload, whose key is in its body (refused by the fencing
            // layer when fenced; without a token, as an admin's only).
            reached.push((Cow::Owned(bucket_prefix), Access::Admin));
        } else if operation.need == s3_operations::Need::ReadBucket {
            // A configuration read: of the whole bucket, whatever other
            // parameter (a `prefix` the store ignores here) it carries.
            reached.push((Cow::Owned(bucket_prefix), Access::Read));
        } else {
            // A listing reaches what its prefix names.
            let prefix = param(query, "prefix").unwrap_or_default();
            reached.push((Cow::Owned(format!("/{bucket}/{prefix}")), Access::Read));
        }
        return Ok((operation, reached));
    }
    let need = if !write {
        Access::Read
    } else if admin_resource || admin_header {
        Access::Admin
    } else {
        Access::Write
    };
    reached.push((Cow::Borrowed(addressed.object.as_str()), need));
    let moved_source = moved
        .iter()
        .filter(|(name, _)| name == "x-amz-copy-source")
        .map(|(_, value)| value.to_str().map_err(|_| invalid_copy_source()))
        .collect::<Result<Vec<_>, _>>()?;
    let source = match (
        single(request.fields(), "x-amz-copy-source")?,
        moved_source.as_slice(),
    ) {
        (None, []) => None,
        (Some(source), []) => Some(source),
        (None, [source]) => Some(*source),
        _ => return Err(Denied::new(
            DeniedKind::Malformed,
            "x-amz-copy-source is given more than once (as a field and as a presigned parameter)",
        )),
    };
    if let Some(source) = source {
        reached.push((Cow::Owned(copy_source(source)?), Access::Read));
    }
    Ok((operation, reached))
}

/// The operation `request` is, by the table of
/// [`s3_operations`](crate::dialect::s3_operations); refused 501
/// `NotImplemented`, naming what is not understood, if it is none. The
/// fields the gateway reads itself (`read_fields`: the token and lock
/// headers) are not S3's to honour.
pub(super) fn recognised<B>(
    request: &Inbound<B>,
    addressed: &Addressed,
    read_fields: &[HeaderName],
) -> Result<&'static s3_operations::Operation, Denied> {
    let level = match addressed.bucket() {
        None => s3_operations::Level::Service,
        Some(bucket) if addressed.object.strip_prefix('/') == Some(bucket) => {
            s3_operations::Level::Bucket
        }
        Some(_) => s3_operations::Level::Object,
    };
    let presigned = matches!(
        request.custody.as_deref(),
        Some(Verified {
            forward: Forwarding::Presigned { .. },
            ..
        })
    );
    operation_of(request, level, presigned, read_fields)
        .map_err(|refused| Denied::new(DeniedKind::NotImplemented, refused.0))
}

/// The row of the table `request` is at `level`: its method, its query
/// parameters' names (percent-decoded; a presigned URL's authentication
/// parameters left out, and its other `x-amz-*` parameters read as the
/// fields they become) and its `x-amz-*` fields but `read_fields`. With
/// custody and without alike.
pub(crate) fn operation_of<B>(
    request: &Inbound<B>,
    level: s3_operations::Level,
    presigned: bool,
    read_fields: &[HeaderName],
) -> Result<&'static s3_operations::Operation, s3_operations::NotRecognised> {
    if request
        .fields()
        .first(&http::header::CONTENT_TYPE)
        .is_some_and(s3_operations::is_form_body)
    {
        return Err(s3_operations::form_body_refused("An S3 request"));
    }
    let mut params: Vec<std::borrow::Cow<'_, str>> = Vec::new();
    let mut fields: Vec<String> = Vec::new();
    for pair in query_of(request).split('&').filter(|pair| !pair.is_empty()) {
        let raw = pair.split('=').next().unwrap_or("");
        let name = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
        if presigned && is_presign_param_in_any_case(&name) {
            continue;
        }
        if presigned && name.to_ascii_lowercase().starts_with("x-amz-") {
            // It becomes a field of the request the store gets.
            fields.push(name.to_ascii_lowercase());
            continue;
        }
        params.push(name);
    }
    for name in request.fields().names() {
        // Most names are no x-amz-* field: looked at in place, no copy.
        if !name
            .get(..6)
            .is_some_and(|start| start.eq_ignore_ascii_case(b"x-amz-"))
        {
            continue;
        }
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        let own = read_fields.iter().any(|read| read.as_str() == name);
        if !own {
            fields.push(name);
        }
    }
    let params: Vec<&str> = params.iter().map(|param| &**param).collect();
    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
    s3_operations::recognise(request.method().as_str(), level, &params, &fields)
}

/// Whether a request's query holds a presigned URL's authentication
/// parameters (SigV4, in any case).
pub(crate) fn is_presigned<B>(request: &Inbound<B>) -> bool {
    query_of(request).split('&').any(|pair| {
        let raw = pair.split('=').next().unwrap_or("");
        is_presign_param_in_any_case(&percent_encoding::percent_decode_str(raw).decode_utf8_lossy())
    })
}

pub(super) fn invalid_copy_source() -> Denied {
    Denied::new(
        DeniedKind::InvalidPath,
        "x-amz-copy-source is not visible ASCII",
    )
}

/// Whether the field `name` changes who may read an object or what the
/// store does by itself (an ACL, a grant, object lock, a governance
/// bypass): a write carrying it needs `admin` (SPEC "Deny by default").
pub(super) fn is_admin_field(name: &[u8]) -> bool {
    std::str::from_utf8(name)
        .is_ok_and(|name| s3_operations::admin_field(&name.to_ascii_lowercase()))
}

/// Every object a request reaches, with the access each needs: its own
/// (borrowed from where it is addressed) and at most a copy's source, on
/// the stack.
pub(crate) type ReachedObjects<'a> = smallvec::SmallVec<[(Cow<'a, str>, Access); 2]>;

/// `x-amz-copy-source` as the object path it reads (`/bucket/key`), by
/// the one strict grammar of [`s3_copy_source`](crate::dialect::s3_copy_source).
pub(super) fn copy_source(value: &str) -> Result<String, Denied> {
    crate::dialect::s3_copy_source::copy_source(value)
        .map(|source| source.object())
        .map_err(|why| Denied::new(DeniedKind::InvalidPath, why.to_string()))
}

pub(super) fn param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| {
            percent_encoding::percent_decode_str(&value.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}
