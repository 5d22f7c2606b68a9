//! The S3 operations the gateway forwards under credential custody, as
//! data (SPEC "Deny by default"): each recognised by its method, where it
//! is addressed (the service, a bucket, an object) and its sub-resource,
//! with the access it needs and the query parameters and `x-amz-*` fields
//! it honours. A request that matches no row, or carries a sub-resource,
//! parameter or `x-amz-*` field its row does not list, is refused before
//! anything is forwarded ([`recognise`]): the gateway signs with the
//! store's key only what it reads exactly as the store does.
//!
//! `docs/S3_OPERATIONS.md` is this table, rendered by [`markdown`] and
//! checked against it by a test.
//!
//! ```
//! use fencegate::dialect::s3_operations::{recognise, Level, Need};
//!
//! let put = recognise("PUT", Level::Object, &["x-id"], &["x-amz-meta-owner", "x-amz-date"]).unwrap();
//! assert_eq!((put.name, put.need), ("PutObject", Need::Write));
//! let acl = recognise("PUT", Level::Object, &["acl"], &[]).unwrap();
//! assert_eq!(acl.need, Need::Admin);
//! // A sub-resource no row lists, and a field PutObject does not take.
//! assert!(recognise("PUT", Level::Object, &["torrent"], &[]).is_err());
//! assert!(recognise("PUT", Level::Object, &[], &["x-amz-rename-source"]).is_err());
//! ```

/// Where a request is addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// `/`: the service (ListBuckets).
    Service,
    /// `/bucket`.
    Bucket,
    /// `/bucket/key`.
    Object,
}

/// The access an operation needs, of the identity that sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// `read` on the object (a listing: on its prefix).
    Read,
    /// `read` on the whole bucket (`/bucket/`): a configuration read.
    ReadBucket,
    /// `write` on the object (DeleteObjects: on each key it lists).
    Write,
    /// `admin` on the bucket.
    Admin,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    /// AWS's name for it.
    pub name: &'static str,
    /// The method, as registered.
    pub method: &'static str,
    /// Where it is addressed.
    pub level: Level,
    /// The sub-resources that tell it apart (all present; empty: none).
    pub subresources: &'static [&'static str],
    /// The access it needs.
    pub need: Need,
    /// The other query parameters it honours.
    pub params: &'static [&'static str],
    /// The `x-amz-*` fields it honours besides [`EVERY_OPERATION_FIELDS`];
    /// a name ending in `*` stands for every name it starts.
    pub fields: &'static [&'static str],
    /// A field whose presence tells it apart from a row of the same method,
    /// level and sub-resources (CopyObject's `x-amz-copy-source`).
    pub requires: Option<&'static str>,
}

/// The sub-resources S3 tells operations apart by: a query parameter with
/// one of these names selects an operation, so a request may carry only
/// those of its row.
pub const SUBRESOURCES: [&str; 36] = [
    "acl",
    "accelerate",
    "analytics",
    "attributes",
    "cors",
    "delete",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "legal-hold",
    "lifecycle",
    "location",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "partNumber",
    "policy",
    "policyStatus",
    "publicAccessBlock",
    "replication",
    "requestPayment",
    "restore",
    "retention",
    "select",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
    "versioning",
    "versions",
    "website",
    "renameObject",
    "session",
    "metadataConfiguration",
];

/// Query parameters any operation may carry: `x-id` (the operation's name,
/// which newer SDKs add) and the version an object operation names.
pub const EVERY_OPERATION_PARAMS: [&str; 1] = ["x-id"];

/// `x-amz-*` fields any operation may carry: the signature's own, the
/// SDKs' bookkeeping, checksums, and the expected owner and payer.
pub const EVERY_OPERATION_FIELDS: [&str; 11] = [
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
    "x-amz-user-agent",
    "x-amz-checksum-*",
    "x-amz-sdk-checksum-algorithm",
    "x-amz-trailer",
    "x-amz-decoded-content-length",
    "x-amz-expected-bucket-owner",
    "x-amz-request-payer",
    "x-amz-source-expected-bucket-owner",
];

const SSE_C: &str = "x-amz-server-side-encryption-customer-*";
const OBJECT_READ_PARAMS: &[&str] = &[
    "versionId",
    "partNumber",
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
];
const OBJECT_READ_FIELDS: &[&str] = &[SSE_C, "x-amz-checksum-mode"];
/// `&[NAMES..., then every field an object write that creates the object
/// honours]`: one list of those, for PutObject's rows and CopyObject's.
macro_rules! with_create_fields {
    ($($name:expr),* $(,)?) => {
        &[
            $($name,)*
            "x-amz-meta-*",
            "x-amz-server-side-encryption",
            "x-amz-server-side-encryption-*",
            "x-amz-storage-class",
            "x-amz-tagging",
            "x-amz-website-redirect-location",
            "x-amz-acl",
            "x-amz-grant-*",
            "x-amz-object-lock-*",
        ]
    };
}

/// What an object write that creates the object honours (PutObject,
/// CopyObject, CreateMultipartUpload); the lock, ACL and grant fields make
/// the request need `admin` ([`admin_field`]).
const OBJECT_CREATE_FIELDS: &[&str] = with_create_fields!();
const COPY_FIELDS: &[&str] = with_create_fields!(
    "x-amz-copy-source",
    "x-amz-copy-source-if-*",
    "x-amz-copy-source-server-side-encryption-customer-*",
    "x-amz-metadata-directive",
    "x-amz-tagging-directive",
);
const LISTING_PARAMS: &[&str] = &[
    "list-type",
    "prefix",
    "delimiter",
    "marker",
    "max-keys",
    "continuation-token",
    "fetch-owner",
    "start-after",
    "encoding-type",
];

/// A bucket configuration sub-resource: `GET` reads it (`read` on the
/// whole bucket), `PUT` and `DELETE` change it (`admin`).
macro_rules! bucket_configuration {
    ($get:literal, $put:literal, $delete:literal, $sub:literal, $params:expr) => {
        [
            Operation {
                name: $get,
                method: "GET",
                level: Level::Bucket,
                subresources: &[$sub],
                need: Need::ReadBucket,
                params: $params,
                fields: &[],
                requires: None,
            },
            Operation {
                name: $put,
                method: "PUT",
                level: Level::Bucket,
                subresources: &[$sub],
                need: Need::Admin,
                params: $params,
                fields: &[
                    "x-amz-acl",
                    "x-amz-grant-*",
                    "x-amz-mfa",
                    "x-amz-bucket-object-lock-token",
                    "x-amz-confirm-remove-self-bucket-access",
                    "x-amz-skip-destination-validation",
                ],
                requires: None,
            },
            Operation {
                name: $delete,
                method: "DELETE",
                level: Level::Bucket,
                subresources: &[$sub],
                need: Need::Admin,
                params: $params,
                fields: &[],
                requires: None,
            },
        ]
    };
}

const fn op(
    name: &'static str,
    method: &'static str,
    level: Level,
    subresources: &'static [&'static str],
    need: Need,
    params: &'static [&'static str],
    fields: &'static [&'static str],
) -> Operation {
    Operation {
        name,
        method,
        level,
        subresources,
        need,
        params,
        fields,
        requires: None,
    }
}

#[rustfmt::skip]
const PLAIN: [Operation; 28] = [
    // A browser's CORS preflight: forwarded unsigned, and reads nothing.
    op("PreflightObject", "OPTIONS", Level::Object, &[], Need::Read, &[], &[]),
    op("PreflightBucket", "OPTIONS", Level::Bucket, &[], Need::Read, &[], &[]),
    Operation { requires: Some("x-amz-copy-source"), ..op("CopyObject", "PUT", Level::Object, &[], Need::Write, &[], COPY_FIELDS) },
    op("ListBuckets", "GET", Level::Service, &[], Need::Read, &["prefix", "max-buckets", "continuation-token", "bucket-region"], &[]),
    op("CreateBucket", "PUT", Level::Bucket, &[], Need::Admin, &[], &["x-amz-acl", "x-amz-grant-*", "x-amz-bucket-object-lock-enabled", "x-amz-object-ownership"]),
    op("DeleteBucket", "DELETE", Level::Bucket, &[], Need::Admin, &[], &[]),
    op("HeadBucket", "HEAD", Level::Bucket, &[], Need::Read, &[], &[]),
    op("ListObjects", "GET", Level::Bucket, &[], Need::Read, LISTING_PARAMS, &["x-amz-optional-object-attributes"]),
    op("ListObjectVersions", "GET", Level::Bucket, &["versions"], Need::Read, &["prefix", "delimiter", "key-marker", "version-id-marker", "max-keys", "encoding-type"], &["x-amz-optional-object-attributes"]),
    op("ListMultipartUploads", "GET", Level::Bucket, &["uploads"], Need::Read, &["prefix", "delimiter", "key-marker", "upload-id-marker", "max-uploads", "encoding-type"], &[]),
    op("DeleteObjects", "POST", Level::Bucket, &["delete"], Need::Write, &[], &["x-amz-mfa", "x-amz-bypass-governance-retention"]),
    op("GetBucketLocation", "GET", Level::Bucket, &["location"], Need::ReadBucket, &[], &[]),
    op("GetBucketPolicyStatus", "GET", Level::Bucket, &["policyStatus"], Need::ReadBucket, &[], &[]),
    op("GetObject", "GET", Level::Object, &[], Need::Read, OBJECT_READ_PARAMS, OBJECT_READ_FIELDS),
    op("HeadObject", "HEAD", Level::Object, &[], Need::Read, OBJECT_READ_PARAMS, OBJECT_READ_FIELDS),
    op("PutObject", "PUT", Level::Object, &[], Need::Write, &[], OBJECT_CREATE_FIELDS),
    op("DeleteObject", "DELETE", Level::Object, &[], Need::Write, &["versionId"], &["x-amz-mfa", "x-amz-bypass-governance-retention"]),
    op("CreateMultipartUpload", "POST", Level::Object, &["uploads"], Need::Write, &[], OBJECT_CREATE_FIELDS),
    op("UploadPart", "PUT", Level::Object, &["partNumber", "uploadId"], Need::Write, &[], &[SSE_C, "x-amz-copy-source", "x-amz-copy-source-range", "x-amz-copy-source-if-*", "x-amz-copy-source-server-side-encryption-customer-*"]),
    op("CompleteMultipartUpload", "POST", Level::Object, &["uploadId"], Need::Write, &[], &[SSE_C, "x-amz-mp-object-size"]),
    op("AbortMultipartUpload", "DELETE", Level::Object, &["uploadId"], Need::Write, &[], &[]),
    op("ListParts", "GET", Level::Object, &["uploadId"], Need::Read, &["max-parts", "part-number-marker"], &[SSE_C]),
    op("GetObjectTagging", "GET", Level::Object, &["tagging"], Need::Read, &["versionId"], &[]),
    op("PutObjectTagging", "PUT", Level::Object, &["tagging"], Need::Write, &["versionId"], &[]),
    op("DeleteObjectTagging", "DELETE", Level::Object, &["tagging"], Need::Write, &["versionId"], &[]),
    op("GetObjectAcl", "GET", Level::Object, &["acl"], Need::Read, &["versionId"], &[]),
    op("PutObjectAcl", "PUT", Level::Object, &["acl"], Need::Admin, &["versionId"], &["x-amz-acl", "x-amz-grant-*"]),
    op("GetObjectAttributes", "GET", Level::Object, &["attributes"], Need::Read, &["versionId"], &[SSE_C, "x-amz-object-attributes", "x-amz-max-parts", "x-amz-part-number-marker"]),
];

#[rustfmt::skip]
const LOCKS: [Operation; 5] = [
    op("GetObjectRetention", "GET", Level::Object, &["retention"], Need::Read, &["versionId"], &[]),
    op("PutObjectRetention", "PUT", Level::Object, &["retention"], Need::Admin, &["versionId"], &["x-amz-bypass-governance-retention"]),
    op("GetObjectLegalHold", "GET", Level::Object, &["legal-hold"], Need::Read, &["versionId"], &[]),
    op("PutObjectLegalHold", "PUT", Level::Object, &["legal-hold"], Need::Admin, &["versionId"], &[]),
    op("RestoreObject", "POST", Level::Object, &["restore"], Need::Write, &["versionId"], &[]),
];

#[rustfmt::skip]
const CONFIGURATION: [[Operation; 3]; 16] = [
    bucket_configuration!("GetBucketAcl", "PutBucketAcl", "DeleteBucketAcl", "acl", &[]),
    bucket_configuration!("GetBucketPolicy", "PutBucketPolicy", "DeleteBucketPolicy", "policy", &[]),
    bucket_configuration!("GetBucketLifecycleConfiguration", "PutBucketLifecycleConfiguration", "DeleteBucketLifecycle", "lifecycle", &[]),
    bucket_configuration!("GetBucketCors", "PutBucketCors", "DeleteBucketCors", "cors", &[]),
    bucket_configuration!("GetBucketWebsite", "PutBucketWebsite", "DeleteBucketWebsite", "website", &[]),
    bucket_configuration!("GetBucketReplication", "PutBucketReplication", "DeleteBucketReplication", "replication", &[]),
    bucket_configuration!("GetBucketNotificationConfiguration", "PutBucketNotificationConfiguration", "DeleteBucketNotification", "notification", &[]),
    bucket_configuration!("GetBucketVersioning", "PutBucketVersioning", "DeleteBucketVersioning", "versioning", &[]),
    bucket_configuration!("GetObjectLockConfiguration", "PutObjectLockConfiguration", "DeleteObjectLockConfiguration", "object-lock", &[]),
    bucket_configuration!("GetBucketEncryption", "PutBucketEncryption", "DeleteBucketEncryption", "encryption", &[]),
    bucket_configuration!("GetBucketOwnershipControls", "PutBucketOwnershipControls", "DeleteBucketOwnershipControls", "ownershipControls", &[]),
    bucket_configuration!("GetPublicAccessBlock", "PutPublicAccessBlock", "DeletePublicAccessBlock", "publicAccessBlock", &[]),
    bucket_configuration!("GetBucketTagging", "PutBucketTagging", "DeleteBucketTagging", "tagging", &[]),
    bucket_configuration!("GetBucketLogging", "PutBucketLogging", "DeleteBucketLogging", "logging", &[]),
    bucket_configuration!("GetBucketAccelerateConfiguration", "PutBucketAccelerateConfiguration", "DeleteBucketAccelerateConfiguration", "accelerate", &[]),
    bucket_configuration!("GetBucketRequestPayment", "PutBucketRequestPayment", "DeleteBucketRequestPayment", "requestPayment", &[]),
];

/// Every row, in the order `docs/S3_OPERATIONS.md` shows them.
pub fn operations() -> impl Iterator<Item = &'static Operation> {
    PLAIN
        .iter()
        .chain(LOCKS.iter())
        .chain(CONFIGURATION.iter().flatten())
        // DeleteBucketVersioning and the like are no S3 operations: the
        // configuration macro makes one row per method, and these three
        // sub-resources cannot be deleted.
        .filter(|op| !NOT_OPERATIONS.contains(&op.name))
}

/// The rows of `method` at `level`, in the table's order: grouped once,
/// so that a request looks at a handful of rows, not the whole table.
fn candidates(method: &str, level: Level) -> &'static [&'static Operation] {
    group(method, level).map_or(&[][..], |group| group.rows.as_slice())
}

/// The operation a request of `method` at `level` with no query parameter
/// and no `x-amz-*` field is, if any: [`recognise`] of it, known in
/// advance.
///
/// ```
/// use fencegate::dialect::s3_operations::{plain_row, Level};
/// assert_eq!(plain_row("PUT", Level::Object).map(|op| op.name), Some("PutObject"));
/// assert_eq!(plain_row("POST", Level::Bucket), None);
/// ```
pub fn plain_row(method: &str, level: Level) -> Option<&'static Operation> {
    group(method, level).and_then(|group| group.plain)
}

/// The rows of one method at one level.
struct Group {
    method: &'static str,
    level: Level,
    rows: Vec<&'static Operation>,
    /// What a request with no parameter and no `x-amz-*` field is.
    plain: Option<&'static Operation>,
}

fn group(method: &str, level: Level) -> Option<&'static Group> {
    static GROUPS: std::sync::OnceLock<Vec<Group>> = std::sync::OnceLock::new();
    let groups = GROUPS.get_or_init(|| {
        let mut groups: Vec<Group> = Vec::new();
        for op in operations() {
            match groups
                .iter_mut()
                .find(|g| g.method == op.method && g.level == op.level)
            {
                Some(group) => group.rows.push(op),
                None => groups.push(Group {
                    method: op.method,
                    level: op.level,
                    rows: vec![op],
                    plain: None,
                }),
            }
        }
        for group in &mut groups {
            // As `recognise` picks among rows that take no sub-resource
            // and need no field: the last of them.
            group.plain = group
                .rows
                .iter()
                .copied()
                .rfind(|op| op.subresources.is_empty() && op.requires.is_none());
        }
        groups
    });
    groups
        .iter()
        .find(|g| g.level == level && g.method == method)
}

/// Rows the configuration macro makes that S3 has no operation for.
const NOT_OPERATIONS: [&str; 7] = [
    "DeleteBucketNotification",
    "DeleteBucketRequestPayment",
    "DeleteBucketAcl",
    "DeleteBucketVersioning",
    "DeleteObjectLockConfiguration",
    "DeleteBucketLogging",
    "DeleteBucketAccelerateConfiguration",
];

/// Why a request was not recognised: the sentence of its refusal (S3
/// `NotImplemented`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotRecognised(pub String);

/// Whether a request's `Content-Type` value makes its body a form:
/// `multipart/form-data` or `application/x-www-form-urlencoded` (in any
/// case, after any spaces; anything that starts with either name). No S3
/// operation the gateway forwards sends one, and a store may read the
/// request's parameters out of it: moto (werkzeug) takes a form's fields
/// in place of the query, so an `uploadId` or `prefix` in the body would be
/// the one it acts on while the gateway read the query's. Refused.
///
/// ```
/// use fencegate::dialect::s3_operations::is_form_body;
/// assert!(is_form_body(b"multipart/form-data; boundary=x"));
/// assert!(is_form_body(b" Application/X-WWW-Form-Urlencoded"));
/// assert!(!is_form_body(b"application/octet-stream"));
/// ```
pub fn is_form_body(content_type: &[u8]) -> bool {
    let value = content_type.trim_ascii_start();
    let starts = |name: &[u8]| {
        value
            .get(..name.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(name))
    };
    starts(b"multipart/form-data") || starts(b"application/x-www-form-urlencoded")
}

/// The refusal of a request whose body is a form ([`is_form_body`]).
pub fn form_body_refused(operation: &str) -> NotRecognised {
    NotRecognised(format!(
        "{operation} does not take a form body (Content-Type multipart/form-data or \
         application/x-www-form-urlencoded): a store could read the request's parameters \
         from it; send the body with another Content-Type"
    ))
}

/// The operation a request is: its `method`, its `level`, the names of
/// its query parameters (percent-decoded, without the presigned URL's
/// authentication parameters) and of its `x-amz-*` fields (lowercase;
/// a presigned URL's other `x-amz-*` parameters among them). `Err` names
/// what is not understood.
pub fn recognise(
    method: &str,
    level: Level,
    params: &[&str],
    fields: &[&str],
) -> Result<&'static Operation, NotRecognised> {
    let subresources: Vec<&str> = params
        .iter()
        .copied()
        .filter(|param| SUBRESOURCES.contains(param))
        .collect();
    let operation = candidates(method, level)
        .iter()
        .copied()
        .filter(|op| op.subresources.iter().all(|sub| subresources.contains(sub)))
        .filter(|op| {
            subresources
                .iter()
                .all(|sub| op.subresources.contains(sub) || op.params.contains(sub))
        })
        .filter(|op| op.requires.is_none_or(|field| fields.contains(&field)))
        .max_by_key(|op| (op.subresources.len(), op.requires.is_some()))
        .ok_or_else(|| {
            let what = match subresources.as_slice() {
                [] => String::new(),
                subs => format!(" with ?{}", subs.join("&")),
            };
            let level = match level {
                Level::Service => "the service",
                Level::Bucket => "a bucket",
                Level::Object => "an object",
            };
            NotRecognised(format!(
                "{method} of {level}{what} is no S3 operation the gateway forwards"
            ))
        })?;
    if let Some(param) = params.iter().find(|param| {
        !operation.subresources.contains(param)
            && !operation.params.contains(param)
            && !EVERY_OPERATION_PARAMS.contains(param)
    }) {
        return Err(NotRecognised(format!(
            "{} does not take the query parameter {param:?}",
            operation.name
        )));
    }
    if let Some(field) = fields.iter().find(|field| {
        !matches_any(field, &EVERY_OPERATION_FIELDS) && !matches_any(field, operation.fields)
    }) {
        return Err(NotRecognised(format!(
            "{} does not take the field {field}",
            operation.name
        )));
    }
    Ok(operation)
}

/// Whether a write carrying the field `name` needs `admin`: it changes who
/// may read an object or what the store does by itself (an ACL, a grant,
/// object lock, a governance bypass).
pub fn admin_field(name: &str) -> bool {
    name == "x-amz-acl"
        || name.starts_with("x-amz-grant-")
        || name.starts_with("x-amz-object-lock-")
        || name == "x-amz-bypass-governance-retention"
}

fn matches_any(name: &str, patterns: &[&str]) -> bool {
    patterns
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(start) => name.starts_with(start),
            None => name == *pattern,
        })
}

/// The table as Markdown, for `docs/S3_OPERATIONS.md`.
pub fn markdown() -> String {
    let mut out = String::from(
        "| operation | method | addressed | sub-resources | needs | other parameters | `x-amz-*` fields |\n|---|---|---|---|---|---|---|\n",
    );
    let list = |items: &[&str]| {
        if items.is_empty() {
            String::new()
        } else {
            items
                .iter()
                .map(|item| format!("`{item}`"))
                .collect::<Vec<_>>()
                .join(" ")
        }
    };
    for op in operations() {
        out.push_str(&format!(
            "| {} | `{}` | {} | {} | {} | {} | {} |\n",
            op.name,
            op.method,
            match op.level {
                Level::Service => "`/`",
                Level::Bucket => "`/bucket`",
                Level::Object => "`/bucket/key`",
            },
            list(op.subresources),
            match op.need {
                Need::Read => "read",
                Need::ReadBucket => "read on `/bucket/`",
                Need::Write => "write",
                Need::Admin => "admin on `/bucket/`",
            },
            list(op.params),
            list(op.fields),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plain_row_is_what_recognise_finds_with_nothing_to_weigh() {
        for op in operations() {
            assert_eq!(
                plain_row(op.method, op.level).map(|row| row.name),
                recognise(op.method, op.level, &[], &[])
                    .ok()
                    .map(|row| row.name),
                "{} {:?}",
                op.method,
                op.level
            );
        }
    }

    use super::*;

    #[test]
    fn every_row_is_recognised_as_itself() {
        for op in operations() {
            let fields: Vec<&str> = op.requires.into_iter().collect();
            let found = recognise(op.method, op.level, op.subresources, &fields);
            assert_eq!(found.map(|found| found.name), Ok(op.name), "{op:?}");
        }
    }

    #[test]
    fn what_sdks_send_is_recognised() {
        type Case<'a> = (&'a str, Level, &'a [&'a str], &'a [&'a str], &'a str);
        let cases: [Case<'_>; 8] = [
            (
                "GET",
                Level::Bucket,
                &["list-type", "prefix", "encoding-type"],
                &[],
                "ListObjects",
            ),
            (
                "PUT",
                Level::Object,
                &["partNumber", "uploadId"],
                &["x-amz-copy-source", "x-amz-copy-source-range"],
                "UploadPart",
            ),
            (
                "PUT",
                Level::Object,
                &[],
                &["x-amz-copy-source", "x-amz-metadata-directive"],
                "CopyObject",
            ),
            (
                "GET",
                Level::Object,
                &["versionId", "response-content-type"],
                &["x-amz-checksum-mode"],
                "GetObject",
            ),
            (
                "POST",
                Level::Bucket,
                &["delete"],
                &["x-amz-checksum-crc32"],
                "DeleteObjects",
            ),
            (
                "GET",
                Level::Bucket,
                &["versions", "prefix"],
                &[],
                "ListObjectVersions",
            ),
            (
                "PUT",
                Level::Object,
                &["tagging", "versionId"],
                &[],
                "PutObjectTagging",
            ),
            ("GET", Level::Bucket, &["policy"], &[], "GetBucketPolicy"),
        ];
        for (method, level, params, fields, name) in cases {
            let found = recognise(method, level, params, fields);
            assert_eq!(
                found.map(|op| op.name),
                Ok(name),
                "{method} {params:?} {fields:?}"
            );
        }
    }

    #[test]
    fn anything_else_is_refused_and_named() {
        let refused = [
            recognise("POST", Level::Object, &["select", "select-type"], &[]),
            recognise("GET", Level::Object, &["torrent"], &[]),
            recognise(
                "PUT",
                Level::Object,
                &["renameObject"],
                &["x-amz-rename-source"],
            ),
            recognise("GET", Level::Bucket, &["policy", "prefix"], &[]),
            recognise("PUT", Level::Object, &["uploadId"], &[]),
            recognise("PATCH", Level::Object, &[], &[]),
            recognise("GET", Level::Object, &[], &["x-amz-copy-source"]),
            recognise("DELETE", Level::Bucket, &["versioning"], &[]),
        ];
        for found in refused {
            let error = found.expect_err("refused");
            assert!(!error.0.is_empty());
        }
    }

    #[test]
    fn the_documented_table_is_this_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/S3_OPERATIONS.md");
        let doc = std::fs::read_to_string(path).expect("docs/S3_OPERATIONS.md");
        let table = markdown();
        assert!(
            doc.contains(&table),
            "docs/S3_OPERATIONS.md does not hold the table of src/dialect/s3_operations.rs; it is:\n{table}"
        );
    }
}
