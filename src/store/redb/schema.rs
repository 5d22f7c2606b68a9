//! The redb file's tables, and how the store opens it.

use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition};

pub(super) const FENCES: TableDefinition<'static, &str, u64> = TableDefinition::new("fences");

/// Admin writes, by a sequence number that grows with each, as JSON
/// ([`AuditEntry`]'s serde form): written in the transaction of the change
/// each records.
pub(super) const AUDIT: TableDefinition<'static, u64, &str> = TableDefinition::new("audit");

/// What shapes each fence namespace's keys (JSON), by name (`""`: the
/// default namespace): [`FenceStore::check_namespace`].
pub(super) const NAMESPACES: TableDefinition<'static, &str, &str> =
    TableDefinition::new("namespaces");

/// Which requests each namespace's routes take (JSON), by name:
/// [`FenceStore::record_matches`].
pub(super) const NAMESPACE_MATCHES: TableDefinition<'static, &str, &str> =
    TableDefinition::new("namespace_matches");

/// S3 multipart uploads and the object each writes
/// ([`FenceStore::bind_upload`](crate::store::FenceStore::bind_upload)):
/// the gateway's name of an upload (namespace, bucket, the store's id) ->
/// the key. Written in the group commits of raises, removed once the
/// upload is completed or aborted.
pub(super) const UPLOADS: TableDefinition<'static, &str, &str> = TableDefinition::new("uploads");

/// Every subtree-shaped key of [`FENCES`] ([`crate::key::subtree_path`]),
/// kept with it in each transaction: a table that reads fences on demand
/// keeps these in memory, and finds them here without reading every fence.
pub(super) const SUBTREES: TableDefinition<'static, &str, ()> = TableDefinition::new("subtrees");

/// What the file holds besides fences: `subtrees_indexed` once
/// [`SUBTREES`] lists every subtree key (files written before it existed
/// are indexed once, when first opened).
pub(super) const META: TableDefinition<'static, &str, u64> = TableDefinition::new("meta");

/// redb's own cache of file pages: the fences read on demand come from
/// it, or from the kernel's page cache below it. Small, so that a gateway
/// at rest stays small whatever the file's size (redb's default is 1 GiB).
pub(super) const PAGE_CACHE_BYTES: usize = 16 << 20;

/// One row, rewritten by the health probe: a write with an fsync, like a raise.
pub(super) const PROBE: TableDefinition<'static, &str, u64> = TableDefinition::new("probe");

/// Opens (or creates) the database with the store's settings.
pub(super) fn create(path: &Path) -> Result<Database, redb::DatabaseError> {
    Database::builder()
        .set_cache_size(PAGE_CACHE_BYTES)
        .create(path)
}

/// Makes sure [`SUBTREES`] lists every subtree key of [`FENCES`]: once per
/// file, reading every fence (a file written before the table existed).
pub(super) fn index_subtrees(txn: &redb::WriteTransaction) -> Result<(), redb::Error> {
    let mut meta = txn.open_table(META)?;
    let mut subtrees = txn.open_table(SUBTREES)?;
    if meta.get("subtrees_indexed")?.is_some() {
        return Ok(());
    }
    let fences = txn.open_table(FENCES)?;
    for row in fences.iter()? {
        let (key, _) = row?;
        if crate::key::subtree_path(key.value()).is_some() {
            subtrees.insert(key.value(), ())?;
        }
    }
    meta.insert("subtrees_indexed", 1)?;
    Ok(())
}
