//! The Azure Blob operations the gateway forwards, as data (SPEC "Deny by
//! default"): each under Azure's name for it, recognised by its method,
//! where it is addressed (the account `/`, a container, a blob), its
//! `restype` and `comp` and the headers that select it (`x-ms-blob-type`,
//! `x-ms-copy-source`, `x-ms-requires-sync`, `x-ms-lease-action`,
//! `x-ms-page-write`, `x-ms-copy-action`), with the access it needs and the
//! query parameters and `x-ms-*` fields it honours. A request that matches
//! no row, or more than one, or carries a `comp`, `restype`, parameter or
//! `x-ms-*` field its row does not list, is refused before anything is
//! forwarded ([`recognise`]): the gateway signs with the store's key only
//! what it reads exactly as the store does, and without custody it fences
//! only writes it can tell.
//!
//! Not in the table, so refused: Blob Batch (`comp=batch`: its body holds
//! requests of its own, which the gateway would sign unread), Get User
//! Delegation Key (a credential of the account), Restore and Rename
//! Container (they reach a container the path does not name), Delete
//! Blob's `deletetype`, a copy source's own authorisation
//! (`x-ms-copy-source-authorization`) and Get Page Ranges' previous
//! snapshot URL (`x-ms-previous-snapshot-url`, a second blob by URL).
//!
//! **Names as the store compares them.** Query parameter names and the
//! values of `comp` and `restype` are compared after percent-decoding,
//! exactly, in the case the table spells them. Azurite reads the query
//! through Express's parsed object, case-sensitively (its dispatcher
//! compares `comp` and `restype` values exactly too); Azure lowercases
//! names in Shared Key's canonicalised resource, and whether its service
//! reads `Comp` as `comp` is not documented. Any other spelling
//! (`Comp=tier`, `comp=TIER`) is therefore no name the table lists, and
//! refused: one reading whichever store is behind. A parameter given twice is refused
//! too (Express makes an array of it). Field names are case-insensitive
//! (HTTP); the values of the selecting headers are compared
//! case-insensitively, as Azurite compares header constants.
//!
//! `docs/AZURE_OPERATIONS.md` is this table, rendered by [`markdown`] and
//! checked against it by a test.
//!
//! ```
//! use fencegate::dialect::azure_operations::{recognise, Level, Need};
//!
//! let put = recognise("PUT", Level::Blob, &[], &[("x-ms-blob-type", "BlockBlob")]).unwrap();
//! assert_eq!((put.name, put.need), ("Put Blob", Need::Write));
//! let tier = recognise("PUT", Level::Blob, &[("comp", "tier")], &[("x-ms-access-tier", "")]).unwrap();
//! assert_eq!(tier.need, Need::Admin);
//! // A comp no row lists, and a field Put Blob does not take.
//! assert!(recognise("PUT", Level::Blob, &[("comp", "bogus")], &[]).is_err());
//! assert!(recognise("PUT", Level::Blob, &[], &[("x-ms-blob-type", "BlockBlob"), ("x-ms-rename-source", "")]).is_err());
//! ```

/// Where a request is addressed (after the account, which Azurite reads
/// from the path and Azure from the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The account itself: `/`.
    Account,
    /// `/container`.
    Container,
    /// `/container/blob`.
    Blob,
}

/// The access an operation needs, of the identity that sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// `read` on the blob (on the account: on `/`).
    Read,
    /// A listing: `read` on the container and the `prefix` it names.
    List,
    /// `read` on the whole container (`/container/`): a configuration read
    /// (properties, metadata, stored access policies, a tag query).
    ReadContainer,
    /// `write` on the blob; `admin` when the request also carries a field
    /// [`admin_field`] names.
    Write,
    /// `admin` on the container (on the account: on `/`).
    Admin,
}

/// A header that selects an operation, and the values that select this
/// row (empty: any value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selector {
    /// Its name, lowercase.
    pub name: &'static str,
    /// The values, compared case-insensitively; empty: any.
    pub values: &'static [&'static str],
    /// Where `name` is in [`SELECTORS`], worked out when the table is
    /// compiled (a request's selectors are matched by place).
    at: usize,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    /// Azure's name for it.
    pub name: &'static str,
    /// The methods, as registered (`GET` and `HEAD` for a read of
    /// properties).
    pub methods: &'static [&'static str],
    /// Where it is addressed.
    pub level: Level,
    /// The `restype` it takes (`None`: none may be given).
    pub restype: Option<&'static str>,
    /// The `comp` it takes (`None`: none may be given).
    pub comp: Option<&'static str>,
    /// The selecting headers ([`SELECTORS`]) it is recognised by: exactly
    /// these are present, each with one of its values.
    pub selectors: &'static [Selector],
    /// The access it needs.
    pub need: Need,
    /// The service SAS permissions (`sp` letters) any one of which lets a
    /// SAS send it (empty: no SAS may). The store never sees the SAS (the
    /// gateway signs with the store's key), so a letter Azure narrows
    /// further (`c`: create a blob, never overwrite one) is not listed
    /// where the gateway could not hold it to that.
    pub sas: &'static str,
    /// The other query parameters it honours.
    pub params: &'static [&'static str],
    /// The `x-ms-*` fields it honours besides [`EVERY_OPERATION_FIELDS`]
    /// and its selectors, in groups; a name ending in `*` stands for every
    /// name it starts.
    pub fields: &'static [&'static [&'static str]],
}

/// The headers Azure tells operations of one method, address, `restype`
/// and `comp` apart by: a request carries exactly the selectors of its row.
pub const SELECTORS: [&str; 6] = [
    "x-ms-blob-type",
    "x-ms-copy-source",
    "x-ms-requires-sync",
    "x-ms-lease-action",
    "x-ms-page-write",
    "x-ms-copy-action",
];

/// Query parameters any operation may carry: the service's time limit.
/// (A SAS's parameters are credentials, read and removed before.)
pub const EVERY_OPERATION_PARAMS: [&str; 1] = ["timeout"];

/// `x-ms-*` fields any operation may carry: the signature's date, the
/// service version, and the SDKs' request ids.
pub const EVERY_OPERATION_FIELDS: [&str; 4] = [
    "x-ms-date",
    "x-ms-version",
    "x-ms-client-request-id",
    "x-ms-return-client-request-id",
];

/// The blob's system properties.
const PROPS: &[&str] = &[
    "x-ms-blob-content-type",
    "x-ms-blob-content-encoding",
    "x-ms-blob-content-language",
    "x-ms-blob-content-md5",
    "x-ms-blob-cache-control",
    "x-ms-blob-content-disposition",
];
const META: &[&str] = &["x-ms-meta-*"];
/// A customer-provided key.
const CPK: &[&str] = &[
    "x-ms-encryption-key",
    "x-ms-encryption-key-sha256",
    "x-ms-encryption-algorithm",
];
const SCOPE: &[&str] = &["x-ms-encryption-scope"];
/// Immutability and legal hold set at write time: `admin`.
const IMM: &[&str] = &[
    "x-ms-immutability-policy-until-date",
    "x-ms-immutability-policy-mode",
    "x-ms-legal-hold",
];
const TAGS: &[&str] = &["x-ms-tags"];
/// The access tier set at write time: `admin`.
const TIER: &[&str] = &["x-ms-access-tier", "x-ms-rehydrate-priority"];
const LEASE: &[&str] = &["x-ms-lease-id"];
const IF_TAGS: &[&str] = &["x-ms-if-tags"];
/// Conditions on a copy's source.
const SOURCE_COND: &[&str] = &[
    "x-ms-source-if-match",
    "x-ms-source-if-none-match",
    "x-ms-source-if-modified-since",
    "x-ms-source-if-unmodified-since",
    "x-ms-source-if-tags",
];
/// A body's integrity.
const INTEGRITY: &[&str] = &[
    "x-ms-content-crc64",
    "x-ms-structured-body",
    "x-ms-structured-content-length",
];
/// A ranged read.
const RANGE: &[&str] = &[
    "x-ms-range",
    "x-ms-range-get-content-md5",
    "x-ms-range-get-content-crc64",
];
/// A range of a copy's source.
const SOURCE_RANGE: &[&str] = &[
    "x-ms-source-range",
    "x-ms-source-content-md5",
    "x-ms-source-content-crc64",
];
const LEASE_ACTION: &[&str] = &[
    "x-ms-lease-id",
    "x-ms-proposed-lease-id",
    "x-ms-lease-duration",
    "x-ms-lease-break-period",
];
const PAGE_COND: &[&str] = &[
    "x-ms-if-sequence-number-le",
    "x-ms-if-sequence-number-lt",
    "x-ms-if-sequence-number-eq",
];
const APPEND_COND: &[&str] = &[
    "x-ms-blob-condition-maxsize",
    "x-ms-blob-condition-appendpos",
];
const CONTAINER_CREATE: &[&str] = &[
    "x-ms-blob-public-access",
    "x-ms-default-encryption-scope",
    "x-ms-deny-encryption-scope-override",
];

const SNAPSHOT: &[&str] = &["snapshot", "versionid"];
const LIST_CONTAINERS: &[&str] = &["prefix", "marker", "maxresults", "include"];
const LIST_BLOBS: &[&str] = &[
    "prefix",
    "delimiter",
    "marker",
    "maxresults",
    "include",
    "showonly",
];
const FIND_BY_TAGS: &[&str] = &["where", "marker", "maxresults", "include"];

const BLOB_TYPES: &[&str] = &["BlockBlob", "PageBlob", "AppendBlob"];
const LEASE_ACTIONS: &[&str] = &["acquire", "renew", "change", "release", "break"];
const COPY_SOURCE: Selector = selector("x-ms-copy-source", &[]);
/// A selector: `name` must be one of [`SELECTORS`] (else the table does
/// not compile).
const fn selector(name: &'static str, values: &'static [&'static str]) -> Selector {
    let mut at = 0;
    while at < SELECTORS.len() {
        if const_eq(SELECTORS[at].as_bytes(), name.as_bytes()) {
            return Selector { name, values, at };
        }
        at += 1;
    }
    panic!("a selector the table uses is not in SELECTORS")
}

const fn const_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// A row without selectors.
#[allow(clippy::too_many_arguments)]
const fn op(
    name: &'static str,
    methods: &'static [&'static str],
    level: Level,
    restype: Option<&'static str>,
    comp: Option<&'static str>,
    need: Need,
    sas: &'static str,
    params: &'static [&'static str],
    fields: &'static [&'static [&'static str]],
) -> Operation {
    Operation {
        name,
        methods,
        level,
        restype,
        comp,
        selectors: &[],
        need,
        sas,
        params,
        fields,
    }
}

use crate::head::{eq_lowercase, visible_str};

use Level::{Account, Blob, Container};
use Need::{Admin, List, Read, ReadContainer, Write};

const GET: &[&str] = &["GET"];
const GET_HEAD: &[&str] = &["GET", "HEAD"];
const HEAD: &[&str] = &["HEAD"];
const PUT: &[&str] = &["PUT"];
const DELETE: &[&str] = &["DELETE"];
const OPTIONS: &[&str] = &["OPTIONS"];

#[rustfmt::skip]
const ACCOUNT: [Operation; 7] = [
    op("List Containers", GET, Account, None, Some("list"), Read, "l", LIST_CONTAINERS, &[]),
    op("Get Blob Service Properties", GET, Account, Some("service"), Some("properties"), Read, "r", &[], &[]),
    op("Set Blob Service Properties", PUT, Account, Some("service"), Some("properties"), Admin, "", &[], &[]),
    op("Get Blob Service Stats", GET, Account, Some("service"), Some("stats"), Read, "r", &[], &[]),
    op("Get Account Information", GET_HEAD, Account, Some("account"), Some("properties"), Read, "r", &[], &[]),
    op("Find Blobs by Tags", GET, Account, None, Some("blobs"), Read, "f", FIND_BY_TAGS, &[]),
    // A browser's CORS preflight: forwarded unsigned, and reads nothing.
    op("Preflight Blob Request", OPTIONS, Account, None, None, Read, "r", &[], &[]),
];

#[rustfmt::skip]
const CONTAINERS: [Operation; 12] = [
    op("Create Container", PUT, Container, Some("container"), None, Admin, "w", &[], &[META, CONTAINER_CREATE]),
    op("Get Container Properties", GET_HEAD, Container, Some("container"), None, ReadContainer, "r", &[], &[LEASE]),
    op("Get Container Metadata", GET_HEAD, Container, Some("container"), Some("metadata"), ReadContainer, "r", &[], &[LEASE]),
    op("Set Container Metadata", PUT, Container, Some("container"), Some("metadata"), Admin, "", &[], &[META, LEASE]),
    op("Get Container ACL", GET_HEAD, Container, Some("container"), Some("acl"), ReadContainer, "", &[], &[LEASE]),
    op("Set Container ACL", PUT, Container, Some("container"), Some("acl"), Admin, "", &[], &[&["x-ms-blob-public-access"], LEASE]),
    op("Delete Container", DELETE, Container, Some("container"), None, Admin, "", &[], &[LEASE]),
    Operation { selectors: &[selector("x-ms-lease-action", LEASE_ACTIONS)], ..op("Lease Container", PUT, Container, Some("container"), Some("lease"), Admin, "", &[], &[LEASE_ACTION]) },
    op("List Blobs", GET, Container, Some("container"), Some("list"), List, "l", LIST_BLOBS, &[]),
    op("Find Blobs by Tags in Container", GET, Container, Some("container"), Some("blobs"), ReadContainer, "f", FIND_BY_TAGS, &[]),
    op("Get Account Information", GET_HEAD, Container, Some("account"), Some("properties"), Read, "r", &[], &[]),
    op("Preflight Blob Request", OPTIONS, Container, None, None, Read, "r", &[], &[]),
];

#[rustfmt::skip]
const BLOBS: [Operation; 33] = [
    op("Get Blob", GET, Blob, None, None, Read, "r", SNAPSHOT, &[RANGE, CPK, LEASE, IF_TAGS]),
    op("Get Blob Properties", HEAD, Blob, None, None, Read, "r", SNAPSHOT, &[CPK, LEASE, IF_TAGS]),
    op("Get Blob Metadata", GET_HEAD, Blob, None, Some("metadata"), Read, "r", SNAPSHOT, &[CPK, LEASE, IF_TAGS]),
    op("Set Blob Properties", PUT, Blob, None, Some("properties"), Write, "w", &[], &[PROPS, LEASE, IF_TAGS, &["x-ms-blob-content-length", "x-ms-sequence-number-action", "x-ms-blob-sequence-number"]]),
    op("Set Blob Metadata", PUT, Blob, None, Some("metadata"), Write, "w", &[], &[META, LEASE, CPK, SCOPE, IF_TAGS]),
    op("Get Blob Tags", GET, Blob, None, Some("tags"), Read, "t", SNAPSHOT, &[LEASE, IF_TAGS]),
    op("Set Blob Tags", PUT, Blob, None, Some("tags"), Write, "t", &["versionid"], &[INTEGRITY, LEASE, IF_TAGS]),
    op("Delete Blob", DELETE, Blob, None, None, Write, "d", SNAPSHOT, &[&["x-ms-delete-snapshots"], LEASE, IF_TAGS]),
    op("Undelete Blob", PUT, Blob, None, Some("undelete"), Admin, "w", &[], &[]),
    op("Snapshot Blob", PUT, Blob, None, Some("snapshot"), Write, "cw", &[], &[META, CPK, SCOPE, LEASE, IF_TAGS]),
    Operation { selectors: &[COPY_SOURCE], ..op("Copy Blob", PUT, Blob, None, None, Write, "w", &[], &[META, TIER, SOURCE_COND, LEASE, IF_TAGS, TAGS, IMM, &["x-ms-source-lease-id", "x-ms-seal-blob"]]) },
    Operation { selectors: &[COPY_SOURCE, selector("x-ms-requires-sync", &["true"])], ..op("Copy Blob From URL", PUT, Blob, None, None, Write, "w", &[], &[META, TIER, SOURCE_COND, LEASE, IF_TAGS, TAGS, IMM, SCOPE, &["x-ms-source-content-md5", "x-ms-copy-source-tag-option"]]) },
    Operation { selectors: &[selector("x-ms-copy-action", &["abort"])], ..op("Abort Copy Blob", PUT, Blob, None, Some("copy"), Write, "w", &["copyid"], &[LEASE]) },
    op("Set Blob Tier", PUT, Blob, None, Some("tier"), Admin, "w", SNAPSHOT, &[TIER, LEASE, IF_TAGS]),
    Operation { selectors: &[selector("x-ms-lease-action", LEASE_ACTIONS)], ..op("Lease Blob", PUT, Blob, None, Some("lease"), Write, "w", &[], &[LEASE_ACTION, IF_TAGS]) },
    op("Set Blob Expiry", PUT, Blob, None, Some("expiry"), Admin, "w", &[], &[&["x-ms-expiry-option", "x-ms-expiry-time"]]),
    op("Set Blob Immutability Policy", PUT, Blob, None, Some("immutabilityPolicies"), Admin, "i", SNAPSHOT, &[&["x-ms-immutability-policy-until-date", "x-ms-immutability-policy-mode"]]),
    op("Delete Blob Immutability Policy", DELETE, Blob, None, Some("immutabilityPolicies"), Admin, "i", SNAPSHOT, &[]),
    op("Set Blob Legal Hold", PUT, Blob, None, Some("legalhold"), Admin, "i", SNAPSHOT, &[&["x-ms-legal-hold"]]),
    Operation { selectors: &[selector("x-ms-blob-type", BLOB_TYPES)], ..op("Put Blob", PUT, Blob, None, None, Write, "w", &[], &[PROPS, META, CPK, SCOPE, TIER, TAGS, IMM, LEASE, IF_TAGS, INTEGRITY, &["x-ms-blob-content-length", "x-ms-blob-sequence-number"]]) },
    Operation { selectors: &[selector("x-ms-blob-type", &["BlockBlob"]), COPY_SOURCE], ..op("Put Blob From URL", PUT, Blob, None, None, Write, "w", &[], &[PROPS, META, CPK, SCOPE, TIER, TAGS, LEASE, IF_TAGS, SOURCE_COND, &["x-ms-source-content-md5", "x-ms-copy-source-blob-properties", "x-ms-copy-source-tag-option"]]) },
    op("Put Block", PUT, Blob, None, Some("block"), Write, "w", &["blockid"], &[INTEGRITY, CPK, SCOPE, LEASE]),
    Operation { selectors: &[COPY_SOURCE], ..op("Put Block From URL", PUT, Blob, None, Some("block"), Write, "w", &["blockid"], &[SOURCE_RANGE, SOURCE_COND, CPK, SCOPE, LEASE]) },
    op("Put Block List", PUT, Blob, None, Some("blocklist"), Write, "w", &[], &[PROPS, META, CPK, SCOPE, TIER, TAGS, IMM, LEASE, IF_TAGS, INTEGRITY]),
    op("Get Block List", GET, Blob, None, Some("blocklist"), Read, "r", &["blocklisttype", "snapshot", "versionid"], &[LEASE, IF_TAGS]),
    Operation { selectors: &[selector("x-ms-page-write", &["update", "clear"])], ..op("Put Page", PUT, Blob, None, Some("page"), Write, "w", &[], &[RANGE, PAGE_COND, INTEGRITY, CPK, SCOPE, LEASE, IF_TAGS]) },
    Operation { selectors: &[selector("x-ms-page-write", &["update"]), COPY_SOURCE], ..op("Put Page From URL", PUT, Blob, None, Some("page"), Write, "w", &[], &[RANGE, PAGE_COND, SOURCE_RANGE, SOURCE_COND, CPK, SCOPE, LEASE, IF_TAGS]) },
    op("Get Page Ranges", GET, Blob, None, Some("pagelist"), Read, "r", &["snapshot", "prevsnapshot", "marker", "maxresults"], &[RANGE, LEASE, IF_TAGS]),
    Operation { selectors: &[COPY_SOURCE], ..op("Incremental Copy Blob", PUT, Blob, None, Some("incrementalcopy"), Write, "w", &[], &[IF_TAGS]) },
    op("Append Block", PUT, Blob, None, Some("appendblock"), Write, "aw", &[], &[APPEND_COND, INTEGRITY, CPK, SCOPE, LEASE, IF_TAGS]),
    Operation { selectors: &[COPY_SOURCE], ..op("Append Block From URL", PUT, Blob, None, Some("appendblock"), Write, "aw", &[], &[APPEND_COND, SOURCE_RANGE, SOURCE_COND, CPK, SCOPE, LEASE, IF_TAGS]) },
    op("Seal Append Blob", PUT, Blob, None, Some("seal"), Write, "w", &[], &[LEASE, IF_TAGS, &["x-ms-blob-condition-appendpos"]]),
    op("Get Account Information", GET_HEAD, Blob, Some("account"), Some("properties"), Read, "r", &[], &[]),
];

#[rustfmt::skip]
const BLOB_PREFLIGHT: [Operation; 1] = [
    op("Preflight Blob Request", OPTIONS, Blob, None, None, Read, "r", &[], &[]),
];

/// Every row, in the order `docs/AZURE_OPERATIONS.md` shows them.
pub fn operations() -> impl Iterator<Item = &'static Operation> {
    ACCOUNT
        .iter()
        .chain(CONTAINERS.iter())
        .chain(BLOBS.iter())
        .chain(BLOB_PREFLIGHT.iter())
}

/// What a request was refused as, and Azure's error code for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsupported {
    /// No operation of this method at this address (405
    /// `UnsupportedHttpVerb`).
    Verb,
    /// A `comp` or `restype` value no row of this method and address takes
    /// (400 `InvalidQueryParameterValue`).
    QueryParameterValue,
    /// A query parameter its row does not take, or one given twice (400
    /// `UnsupportedQueryParameter`).
    QueryParameter,
    /// A selecting header no row takes with the others, a field its row
    /// does not take, a selector given twice (400 `UnsupportedHeader`).
    Header,
}

impl Unsupported {
    /// Azure's error code for it.
    pub fn code(self) -> &'static str {
        match self {
            Unsupported::Verb => "UnsupportedHttpVerb",
            Unsupported::QueryParameterValue => "InvalidQueryParameterValue",
            Unsupported::QueryParameter => "UnsupportedQueryParameter",
            Unsupported::Header => "UnsupportedHeader",
        }
    }

    /// Azure's status for it.
    pub fn status(self) -> u16 {
        match self {
            Unsupported::Verb => 405,
            _ => 400,
        }
    }
}

/// Why a request was not recognised: what kind of thing, and the sentence
/// of its refusal (naming what was not understood).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NotRecognised {
    /// What was not understood.
    pub what: Unsupported,
    /// The sentence, for a person.
    pub message: String,
}

fn refuse(what: Unsupported, message: String) -> NotRecognised {
    NotRecognised { what, message }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::Account => "the account",
        Level::Container => "a container",
        Level::Blob => "a blob",
    }
}

/// The operation a request is: its `method`, its `level`, its query
/// parameters (names and values percent-decoded, without a SAS's
/// parameters) and its `x-ms-*` fields (names lowercase, without the
/// fields the gateway reads itself; a selector's value as sent, every
/// other field's value may be empty). `Err` names what is not understood.
pub fn recognise(
    method: &str,
    level: Level,
    params: &[(&str, &str)],
    fields: &[(&str, &str)],
) -> Result<&'static Operation, NotRecognised> {
    let mut selectors = Selectors::default();
    let mut others: Vec<&[u8]> = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        if !selectors.offer(name.as_bytes(), value.as_bytes()) {
            others.push(name.as_bytes());
        }
    }
    recognise_read(method, level, params, &selectors, &others)
}

/// The selecting headers a request carries ([`SELECTORS`]), filled by
/// the caller's one pass over the request's fields.
#[derive(Debug, Clone, Copy, Default)]
pub struct Selectors<'a> {
    /// Each selector's value, trimmed of spaces and tabs, as bytes: the
    /// rows' values are visible ASCII, so a value with any other byte
    /// matches none of them, as it would once made text (and a row that
    /// takes any value takes it: the store reads its presence).
    values: [Option<&'a [u8]>; SELECTORS.len()],
    /// A selector given more than once: refused (the store would read one
    /// of them, the gateway cannot tell which).
    twice: Option<usize>,
}

impl<'a> Selectors<'a> {
    /// Files `value` if `name` (in any case) is a selector (`true`);
    /// `false` for any other field.
    pub fn offer(&mut self, name: &[u8], value: &'a [u8]) -> bool {
        let Some(at) = selector_index(name) else {
            return false;
        };
        if self.values[at].replace(value.trim_ascii()).is_some() {
            self.twice.get_or_insert(at);
        }
        true
    }
}

/// Where `name` (in any case) is in [`SELECTORS`]: they are told apart
/// by length (and the two of 16 bytes by their eleventh), so a field that
/// is no selector costs a length test and at most one comparison.
fn selector_index(name: &[u8]) -> Option<usize> {
    let at = match name.len() {
        14 => 0,
        15 => 4,
        16 if name[10] | 0x20 == b's' => 1,
        16 => 5,
        17 => 3,
        18 => 2,
        _ => return None,
    };
    eq_lowercase(name, SELECTORS[at].as_bytes()).then_some(at)
}

/// The methods the table's rows take, in the order of [`rows_of`]'s
/// groups.
const METHODS: [&str; 6] = ["GET", "HEAD", "PUT", "DELETE", "POST", "OPTIONS"];

/// The rows addressed at `level` that take `method`, grouped once: every
/// request is read against them, and a walk over the whole level (34 rows
/// for a blob) was a third of the reading's cost.
fn rows_of(level: Level, method: &str) -> &'static [&'static Operation] {
    static GROUPS: std::sync::OnceLock<Vec<Vec<&'static Operation>>> = std::sync::OnceLock::new();
    let Some(at) = METHODS.iter().position(|known| *known == method) else {
        return &[];
    };
    let level_at = |level: Level| match level {
        Level::Account => 0,
        Level::Container => 1,
        Level::Blob => 2,
    };
    let groups = GROUPS.get_or_init(|| {
        let mut groups = vec![Vec::new(); 3 * METHODS.len()];
        for op in operations() {
            for method in op.methods {
                if let Some(m) = METHODS.iter().position(|known| known == method) {
                    groups[level_at(op.level) * METHODS.len() + m].push(op);
                }
            }
        }
        groups
    });
    &groups[level_at(level) * METHODS.len() + at]
}

/// [`recognise`] of a request whose selectors and other `x-ms-*` field
/// names (in any case; a name may come more than once) the caller read in
/// one pass.
pub fn recognise_read(
    method: &str,
    level: Level,
    params: &[(&str, &str)],
    selectors: &Selectors<'_>,
    fields: &[&[u8]],
) -> Result<&'static Operation, NotRecognised> {
    for (at, (name, _)) in params.iter().enumerate() {
        if params[..at].iter().any(|(other, _)| other == name) {
            return Err(refuse(
                Unsupported::QueryParameter,
                format!("the query parameter {name:?} is given more than once"),
            ));
        }
    }
    let (mut restype, mut comp) = (None, None);
    for (name, value) in params {
        match *name {
            "restype" => restype = Some(*value),
            "comp" => comp = Some(*value),
            _ => {}
        }
    }
    if let Some(at) = selectors.twice {
        return Err(refuse(
            Unsupported::Header,
            format!("{} is given more than once", SELECTORS[at]),
        ));
    }
    let present = &selectors.values;
    let sent = present
        .iter()
        .enumerate()
        .filter(|(_, value)| value.is_some())
        .fold(0u8, |mask, (at, _)| mask | 1 << at);
    // The row's selectors are exactly those sent, each with a value it
    // takes.
    let by_selectors = |op: &Operation| {
        let mut wanted = 0u8;
        op.selectors.iter().all(|selector| {
            let at = selector.at;
            wanted |= 1 << at;
            present[at].is_some_and(|value| {
                selector.values.is_empty()
                    || selector
                        .values
                        .iter()
                        .any(|v| v.as_bytes().eq_ignore_ascii_case(value))
            })
        }) && wanted == sent
    };
    // One walk over the level's rows: whether the method is one of them,
    // whether restype and comp select one, and the rows the selectors pick.
    let (mut at_address, mut selected) = (false, false);
    let (mut operation, mut other): (Option<&'static Operation>, Option<&'static Operation>) =
        (None, None);
    for &op in rows_of(level, method) {
        at_address = true;
        if op.restype != restype || op.comp != comp {
            continue;
        }
        selected = true;
        if by_selectors(op) {
            match operation {
                None => operation = Some(op),
                Some(_) if other.is_none() => other = Some(op),
                Some(_) => {}
            }
        }
    }
    if !at_address {
        return Err(refuse(
            Unsupported::Verb,
            format!(
                "{method} of {} is no Azure Blob operation the gateway forwards",
                level_name(level)
            ),
        ));
    }
    if !selected {
        let what = match (restype, comp) {
            (None, None) => String::from("without restype or comp"),
            (Some(r), None) => format!("with restype={r}"),
            (None, Some(c)) => format!("with comp={c}"),
            (Some(r), Some(c)) => format!("with restype={r}&comp={c}"),
        };
        let kind = if restype.is_some() || comp.is_some() {
            Unsupported::QueryParameterValue
        } else {
            Unsupported::Verb
        };
        return Err(refuse(
            kind,
            format!(
                "{method} of {} {what} is no Azure Blob operation the gateway forwards",
                level_name(level)
            ),
        ));
    }
    let Some(operation) = operation else {
        let sent: Vec<String> = SELECTORS
            .iter()
            .zip(present)
            .filter_map(|(name, value)| {
                value.map(|value| match *name {
                    // A URL says nothing of what the request is.
                    "x-ms-copy-source" => (*name).to_owned(),
                    _ => format!("{name}: {}", visible_str(value).unwrap_or("")),
                })
            })
            .collect();
        let sent = match sent.as_slice() {
            [] => "no selecting header (x-ms-blob-type, x-ms-copy-source, ...)".to_owned(),
            sent => sent.join(", "),
        };
        return Err(refuse(
            Unsupported::Header,
            format!(
                "{method} of {} with {sent} is no Azure Blob operation the gateway forwards",
                level_name(level)
            ),
        ));
    };
    if let Some(other) = other {
        return Err(refuse(
            Unsupported::Header,
            format!(
                "the request reads as both {} and {}",
                operation.name, other.name
            ),
        ));
    }
    if let Some((param, _)) = params.iter().find(|(name, _)| {
        // `restype` and `comp` were matched with the row's already.
        !matches!(*name, "restype" | "comp")
            && !operation.params.contains(name)
            && !EVERY_OPERATION_PARAMS.contains(name)
    }) {
        return Err(refuse(
            Unsupported::QueryParameter,
            format!(
                "{} does not take the query parameter {param:?}",
                operation.name
            ),
        ));
    }
    if let Some(field) = fields.iter().find(|name| {
        !every_operation_field(name)
            && !operation
                .fields
                .iter()
                .any(|group| matches_any(name, group))
    }) {
        return Err(refuse(
            Unsupported::Header,
            format!(
                "{} does not take the field {}",
                operation.name,
                String::from_utf8_lossy(field).to_ascii_lowercase()
            ),
        ));
    }
    Ok(operation)
}

/// Whether a write carrying the field `name` (lowercase) needs `admin`: it
/// changes who may read the blob (public access, a customer-provided key),
/// or what the store does by itself (immutability, legal hold, the access
/// tier).
pub fn admin_field(name: &str) -> bool {
    admin_field_bytes(name.as_bytes())
}

/// Whether `name` (in any case) is one of [`EVERY_OPERATION_FIELDS`]: every
/// `x-ms-*` field of every Azure request is asked, so they are told apart
/// by length (each has its own) and compared once.
pub(crate) fn every_operation_field(name: &[u8]) -> bool {
    let at = match name.len() {
        9 => 0,
        12 => 1,
        22 => 2,
        29 => 3,
        _ => return false,
    };
    eq_lowercase(name, EVERY_OPERATION_FIELDS[at].as_bytes())
}

/// [`admin_field`] of `name` in any case.
pub(crate) fn admin_field_bytes(name: &[u8]) -> bool {
    matches_any(name, &["x-ms-blob-public-access"])
        || matches_any(name, IMM)
        || matches_any(name, TIER)
        || matches_any(name, CPK)
}

/// Whether `name` (in any case) is one of `patterns` (lowercase; `x-*`:
/// any name that starts `x-`).
fn matches_any(name: &[u8], patterns: &[&str]) -> bool {
    // Every request's fields go through this: lengths first, so a name is
    // compared only with the patterns it could be.
    patterns.iter().any(|pattern| match pattern.as_bytes() {
        [start @ .., b'*'] => name
            .get(..start.len())
            .is_some_and(|head| eq_lowercase(head, start)),
        whole => eq_lowercase(name, whole),
    })
}

/// The table as Markdown, for `docs/AZURE_OPERATIONS.md`.
pub fn markdown() -> String {
    let mut out = String::from(
        "| operation | method | addressed | `restype` | `comp` | selecting headers | needs | SAS `sp` | other parameters | `x-ms-*` fields |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let list = |items: &mut dyn Iterator<Item = &str>| {
        items
            .map(|item| format!("`{item}`"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let selectors = |op: &Operation| {
        op.selectors
            .iter()
            .map(|s| match s.values {
                [] => format!("`{}`", s.name),
                values => format!("`{}: {}`", s.name, values.join("\\|")),
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    for op in operations() {
        let sas = match op.sas {
            "" => "none".to_owned(),
            letters => letters
                .chars()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(" or "),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            op.name,
            list(&mut op.methods.iter().copied()),
            match op.level {
                Level::Account => "`/`",
                Level::Container => "`/container`",
                Level::Blob => "`/container/blob`",
            },
            op.restype.map(|r| format!("`{r}`")).unwrap_or_default(),
            op.comp.map(|c| format!("`{c}`")).unwrap_or_default(),
            selectors(op),
            match op.need {
                Need::Read if op.level == Level::Account => "read on `/`",
                Need::Read => "read",
                Need::List => "read on the listed prefix",
                Need::ReadContainer => "read on `/container/`",
                Need::Write => "write",
                Need::Admin if op.level == Level::Account => "admin on `/`",
                Need::Admin if op.level == Level::Blob => "admin",
                Need::Admin => "admin on `/container/`",
            },
            sas,
            list(&mut op.params.iter().copied()),
            list(&mut op.fields.iter().flat_map(|group| group.iter().copied())),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    type Pairs = Vec<(&'static str, &'static str)>;

    #[test]
    fn selectors_are_found_by_name_and_nothing_else_is() {
        for (at, name) in SELECTORS.iter().enumerate() {
            assert_eq!(selector_index(name.as_bytes()), Some(at), "{name}");
        }
        let others = operations()
            .flat_map(|op| op.fields.iter().flat_map(|group| group.iter()))
            .chain(EVERY_OPERATION_FIELDS.iter())
            .chain(["x-ms-copy-sourcf", "x-ms-blob-typf", "x-ms-", ""].iter());
        for name in others {
            assert!(
                SELECTORS.contains(name) || selector_index(name.as_bytes()).is_none(),
                "{name}"
            );
        }
    }

    #[test]
    fn the_fields_every_operation_takes_are_found_by_name_and_nothing_else_is() {
        for name in EVERY_OPERATION_FIELDS {
            assert!(every_operation_field(name.as_bytes()), "{name}");
            assert!(
                every_operation_field(name.to_ascii_uppercase().as_bytes()),
                "{name}"
            );
        }
        let others = operations()
            .flat_map(|op| op.fields.iter().flat_map(|group| group.iter()))
            .chain(SELECTORS.iter())
            .chain(["x-ms-datf", "x-ms-versioN2", "x-ms-", ""].iter());
        for name in others {
            assert!(
                EVERY_OPERATION_FIELDS.contains(name) || !every_operation_field(name.as_bytes()),
                "{name}"
            );
        }
    }

    #[test]
    fn the_groups_hold_every_row_under_each_of_its_methods() {
        let mut count = 0;
        for level in [Level::Account, Level::Container, Level::Blob] {
            for method in METHODS {
                for op in rows_of(level, method) {
                    assert_eq!(op.level, level, "{}", op.name);
                    assert!(op.methods.contains(&method), "{}", op.name);
                    count += 1;
                }
            }
        }
        let expected: usize = operations().map(|op| op.methods.len()).sum();
        assert_eq!(count, expected);
        for op in operations() {
            for method in op.methods {
                assert!(METHODS.contains(method), "{} takes {method}", op.name);
            }
        }
        assert!(rows_of(Level::Blob, "PATCH").is_empty());
    }

    /// The least request of a row: its `restype`, `comp` and selectors
    /// (each with its first value).
    fn least(op: &Operation) -> (Pairs, Pairs) {
        let mut params = Vec::new();
        if let Some(restype) = op.restype {
            params.push(("restype", restype));
        }
        if let Some(comp) = op.comp {
            params.push(("comp", comp));
        }
        let fields = op
            .selectors
            .iter()
            .map(|s| {
                (
                    s.name,
                    s.values.first().copied().unwrap_or("http://gw/a/c/b"),
                )
            })
            .collect();
        (params, fields)
    }

    #[test]
    fn every_row_is_recognised_as_itself_by_every_method() {
        for op in operations() {
            let (params, fields) = least(op);
            for method in op.methods {
                let found = recognise(method, op.level, &params, &fields);
                assert_eq!(found, Ok(op), "{method} {op:?}");
            }
        }
    }

    #[test]
    fn every_row_takes_what_it_lists() {
        for op in operations() {
            let (mut params, mut fields) = least(op);
            params.extend(op.params.iter().map(|p| (*p, "1")));
            params.push(("timeout", "30"));
            fields.extend(
                op.fields
                    .iter()
                    .flat_map(|group| group.iter())
                    .map(|f| (*f, "")),
            );
            fields.extend(EVERY_OPERATION_FIELDS.iter().map(|f| (*f, "")));
            let method = op.methods[0];
            let found = recognise(method, op.level, &params, &fields);
            assert_eq!(found.map(|f| f.name), Ok(op.name), "{op:?}");
        }
    }

    #[test]
    fn no_two_rows_read_alike() {
        let rows: Vec<&Operation> = operations().collect();
        for (at, a) in rows.iter().enumerate() {
            for b in &rows[at + 1..] {
                let same_method = a.methods.iter().any(|m| b.methods.contains(m));
                let alike = same_method
                    && a.level == b.level
                    && a.restype == b.restype
                    && a.comp == b.comp
                    && a.selectors.len() == b.selectors.len()
                    && a.selectors
                        .iter()
                        .all(|s| b.selectors.iter().any(|t| t.name == s.name));
                // Put Blob and Put Blob From URL share x-ms-blob-type but
                // not x-ms-copy-source: checked above by names.
                assert!(!alike, "{} and {} read alike", a.name, b.name);
            }
        }
    }

    #[test]
    fn what_the_sdks_send_is_recognised() {
        type Case<'a> = (
            &'a str,
            Level,
            &'a [(&'a str, &'a str)],
            &'a [(&'a str, &'a str)],
            &'a str,
        );
        let cases: [Case<'_>; 9] = [
            (
                "PUT",
                Level::Blob,
                &[],
                &[
                    ("x-ms-blob-type", "BlockBlob"),
                    ("x-ms-blob-content-type", "text/plain"),
                    ("x-ms-meta-a", ""),
                ],
                "Put Blob",
            ),
            (
                "PUT",
                Level::Blob,
                &[("comp", "block"), ("blockid", "QQ==")],
                &[],
                "Put Block",
            ),
            (
                "PUT",
                Level::Blob,
                &[("comp", "blocklist")],
                &[("x-ms-blob-content-md5", "")],
                "Put Block List",
            ),
            (
                "GET",
                Level::Blob,
                &[],
                &[
                    ("x-ms-range", "bytes=0-3"),
                    ("x-ms-range-get-content-md5", "true"),
                ],
                "Get Blob",
            ),
            (
                "GET",
                Level::Container,
                &[
                    ("restype", "container"),
                    ("comp", "list"),
                    ("prefix", "r/"),
                    ("include", "metadata"),
                ],
                &[],
                "List Blobs",
            ),
            (
                "PUT",
                Level::Blob,
                &[],
                &[("x-ms-copy-source", "http://gw/a/c/b")],
                "Copy Blob",
            ),
            (
                "PUT",
                Level::Blob,
                &[],
                &[
                    ("x-ms-copy-source", "http://gw/a/c/b"),
                    ("x-ms-requires-sync", "true"),
                ],
                "Copy Blob From URL",
            ),
            (
                "PUT",
                Level::Blob,
                &[],
                &[
                    ("x-ms-copy-source", "http://gw/a/c/b"),
                    ("x-ms-blob-type", "blockblob"),
                ],
                "Put Blob From URL",
            ),
            (
                "PUT",
                Level::Container,
                &[("restype", "container"), ("comp", "lease")],
                &[
                    ("x-ms-lease-action", "acquire"),
                    ("x-ms-lease-duration", "-1"),
                ],
                "Lease Container",
            ),
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
        use Unsupported::*;
        type Case<'a> = (
            &'a str,
            Level,
            &'a [(&'a str, &'a str)],
            &'a [(&'a str, &'a str)],
            Unsupported,
            &'a str,
        );
        let cases: [Case<'_>; 16] = [
            // Azurite reads an unknown comp as Get Blob or Put Blob.
            (
                "PUT",
                Level::Blob,
                &[("comp", "bogus")],
                &[("x-ms-blob-type", "BlockBlob")],
                QueryParameterValue,
                "comp=bogus",
            ),
            (
                "GET",
                Level::Blob,
                &[("comp", "bogus")],
                &[],
                QueryParameterValue,
                "comp=bogus",
            ),
            (
                "PUT",
                Level::Blob,
                &[("Comp", "tier")],
                &[("x-ms-blob-type", "BlockBlob")],
                QueryParameter,
                "\"Comp\"",
            ),
            (
                "PUT",
                Level::Blob,
                &[("comp", "TIER")],
                &[],
                QueryParameterValue,
                "comp=TIER",
            ),
            (
                "POST",
                Level::Container,
                &[("restype", "container"), ("comp", "batch")],
                &[],
                Verb,
                "POST",
            ),
            (
                "POST",
                Level::Account,
                &[("comp", "batch")],
                &[],
                Verb,
                "POST",
            ),
            (
                "POST",
                Level::Account,
                &[("restype", "service"), ("comp", "userdelegationkey")],
                &[],
                Verb,
                "POST",
            ),
            (
                "PUT",
                Level::Container,
                &[("restype", "container"), ("comp", "rename")],
                &[("x-ms-source-container-name", "x")],
                QueryParameterValue,
                "comp=rename",
            ),
            ("PUT", Level::Blob, &[], &[], Header, "no selecting header"),
            (
                "PUT",
                Level::Blob,
                &[],
                &[("x-ms-copy-source", "u"), ("x-ms-blob-type", "PageBlob")],
                Header,
                "PageBlob",
            ),
            (
                "PUT",
                Level::Blob,
                &[],
                &[("x-ms-requires-sync", "true")],
                Header,
                "x-ms-requires-sync",
            ),
            (
                "PUT",
                Level::Blob,
                &[],
                &[
                    ("x-ms-blob-type", "BlockBlob"),
                    ("x-ms-blob-type", "PageBlob"),
                ],
                Header,
                "more than once",
            ),
            (
                "PUT",
                Level::Blob,
                &[],
                &[("x-ms-blob-type", "BlockBlob"), ("x-ms-rename-source", "")],
                Header,
                "x-ms-rename-source",
            ),
            (
                "GET",
                Level::Blob,
                &[("comp", "pagelist")],
                &[("x-ms-previous-snapshot-url", "u")],
                Header,
                "x-ms-previous-snapshot-url",
            ),
            (
                "DELETE",
                Level::Blob,
                &[("deletetype", "permanent")],
                &[],
                QueryParameter,
                "deletetype",
            ),
            (
                "GET",
                Level::Container,
                &[("restype", "container"), ("comp", "list"), ("comp", "acl")],
                &[],
                QueryParameter,
                "more than once",
            ),
        ];
        for (method, level, params, fields, what, named) in cases {
            let refused = recognise(method, level, params, fields).expect_err("refused");
            assert_eq!(
                refused.what, what,
                "{method} {params:?} {fields:?}: {}",
                refused.message
            );
            assert!(refused.message.contains(named), "{}", refused.message);
        }
        // A `$root` blob (one segment, no restype) is no container's.
        assert!(recognise("GET", Level::Container, &[], &[]).is_err());
        assert!(recognise(
            "PUT",
            Level::Container,
            &[],
            &[("x-ms-blob-type", "BlockBlob")]
        )
        .is_err());
    }

    #[test]
    fn admin_is_what_the_spec_names() {
        for (method, level, comp) in [
            ("PUT", Level::Blob, "immutabilityPolicies"),
            ("DELETE", Level::Blob, "immutabilityPolicies"),
            ("PUT", Level::Blob, "legalhold"),
            ("PUT", Level::Blob, "expiry"),
            ("PUT", Level::Blob, "undelete"),
            ("PUT", Level::Blob, "tier"),
            ("PUT", Level::Container, "acl"),
            ("PUT", Level::Container, "metadata"),
        ] {
            let restype = match level {
                Level::Container => vec![("restype", "container"), ("comp", comp)],
                _ => vec![("comp", comp)],
            };
            let found = recognise(method, level, &restype, &[]).expect(comp);
            assert_eq!(found.need, Need::Admin, "{comp}");
        }
        let lease = recognise(
            "PUT",
            Level::Container,
            &[("restype", "container"), ("comp", "lease")],
            &[("x-ms-lease-action", "break")],
        );
        assert_eq!(lease.map(|op| op.need), Ok(Need::Admin));
        for read in ["metadata", "acl", "blobs"] {
            let found = recognise(
                "GET",
                Level::Container,
                &[("restype", "container"), ("comp", read)],
                &[],
            );
            assert_eq!(found.map(|op| op.need), Ok(Need::ReadContainer), "{read}");
        }
        assert!(admin_field("x-ms-legal-hold") && admin_field("x-ms-blob-public-access"));
        assert!(!admin_field("x-ms-meta-a"));
    }

    #[test]
    fn the_documented_table_is_this_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/AZURE_OPERATIONS.md");
        let doc = std::fs::read_to_string(path).expect("docs/AZURE_OPERATIONS.md");
        let table = markdown();
        assert!(
            doc.contains(&table),
            "docs/AZURE_OPERATIONS.md does not hold the table of src/dialect/azure_operations.rs; it is:\n{table}"
        );
    }
}
