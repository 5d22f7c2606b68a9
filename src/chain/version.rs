//! [`Version`], a plain value: what the chain remembers per object and
//! what each store's dialect reads off a response. Below both, so that
//! `dialect.rs` names it without importing the chain.

/// An object's version, as the store names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Version {
    /// A strong entity tag, quotes included (`"9b2cf535f27731c9"`).
    Tag(Box<str>),
    /// There is no object.
    Absent,
    /// There is no object, and its current version is a delete marker (an
    /// S3 versioned bucket): a `DELETE` of it adds another marker and
    /// destroys nothing, and S3 has no condition a marker meets, so such a
    /// delete goes on without one (docs/CHAINED.md).
    DeleteMarker,
}
