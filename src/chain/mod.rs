//! Chained writes (`--conditional-writes`): every write that replaces or
//! removes an object carries a precondition on the version the object had
//! before any higher token existed, so that the store itself refuses a
//! write that arrives after a newer one. This closes the window fencing at
//! the gateway leaves open: a request the gateway gave up on (a 504, a
//! client gone) that the store applies late.
//!
//! # The rule, and why it needs no timing assumption
//!
//! A chained write with token `s` carries version `V` only if
//!
//! - (a) `V` is what the object's own last successful chained write through
//!   this gateway returned (absent after a removal), with no admin lowering
//!   or deletion of a fence since; or
//! - (b) `V` was *observed* (a fenced read's answer passing through, or the
//!   client's own `If-Match`/`If-None-Match: *`) before the write was
//!   admitted with `s` on this instance's table; with shared fences, before
//!   a linearizable read of the shared highest found it at most `s`
//!   ([`Fences::shared_highest`](crate::Fences::shared_highest)): another
//!   instance may have admitted more than this one's view shows.
//!
//! Highests only grow, so when the write is admitted no token above `s`
//! has been admitted, and none can be forwarded on the object's fence until
//! the write is done or given up on. Every write with a higher token is
//! therefore applied after `V` was current, and moves the object to another
//! version; if the late write arrives after it, its condition fails. No
//! clock, timeout or lease enters the argument. (a) inherits (b): the
//! version a chained write returns was current when the write was applied.
//! It rests on the store checking the condition atomically with the commit
//! and never giving a version back (an S3 `ETag` is a content hash: the same
//! bytes bring the same tag back), which the README states per mode.
//!
//! A version is forgotten whenever the gateway cannot see what became of
//! the object: while a chained write of it is in flight, after any answer
//! but a success or a refused condition, and at every admin lowering or
//! deletion. An unknown version is answered 428 `version_unknown`: a fenced
//! `HEAD` (or `GET`) of the object teaches it, and the retry goes through.
//!
//! ```
//! use std::num::NonZeroUsize;
//! use fencegate::chain::{Chain, KnownVersion, Mode, Version};
//!
//! let chain = Chain::new(Mode::S3, NonZeroUsize::new(1000).unwrap());
//! chain.learn("/bkt/report", Version::Tag("\"e1\"".into()), 0);
//! let known = KnownVersion { version: Version::Tag("\"e1\"".into()), observed: false };
//! assert_eq!(chain.version("/bkt/report", 0), Some(known));
//! // An admin lowering since (the table's count moved on): unknown.
//! assert_eq!(chain.version("/bkt/report", 1), None);
//! ```

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use lru::LruCache;

mod dialect;
mod version;

// Azure custody's reading of a SAS query, and `reach`'s of a
// DeleteContainer's (which any build has).
pub(crate) use self::dialect::is_sas_parameter;
pub use self::dialect::{ClientCondition, Effect, Mode, Observer, Outcome, MODES};
pub use self::version::Version;

/// The default of `--chain-cache-entries`.
pub const DEFAULT_CACHE_ENTRIES: usize = 100_000;

/// Where an observed version came from (the `source` label of
/// `fencegate_chain_observations_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A fenced `GET` or `HEAD` of the client, passing through.
    ClientRead,
    /// The client's own `If-Match` or `If-None-Match: *` on a write.
    ClientCondition,
    /// A `HEAD` of the gateway's own ([`Observer::GatewayHead`]).
    GatewayHead,
}

impl Source {
    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::ClientRead => "client_read",
            Source::ClientCondition => "client_condition",
            Source::GatewayHead => "gateway_head",
        }
    }
}

/// What a `HEAD` of the store answered: status and headers.
pub type HeadAnswer = Result<(http::StatusCode, http::HeaderMap), String>;

/// Sends a `HEAD` of an object to the store, for
/// [`Observer::GatewayHead`]: the chain learns an unknown version itself
/// before a write instead of asking the client for a `HEAD`. The gateway's
/// implementation sends it through its own proxy.
pub trait VersionReader: Send + Sync + 'static {
    /// `HEAD` of `uri`, with `credentials`: the write's `Host`,
    /// `Authorization` and `Cookie` fields, and nothing else of its head.
    fn head(
        &self,
        uri: &http::Uri,
        credentials: &http::HeaderMap,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = HeadAnswer> + Send>>;
}

/// One object's known version.
#[derive(Debug, Clone)]
struct Known {
    version: Version,
    /// The table's count of admin lowerings and deletions when the version
    /// was learned: any since makes it unusable (rule (a)).
    lowerings: u64,
    /// Observed (rule (b)), not returned by a chained write of the object:
    /// with shared fences, usable only once a read of the shared highest
    /// made since found it at most the write's token.
    observed: bool,
}

/// A version a chained write may carry, and how it was learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownVersion {
    /// The version.
    pub version: Version,
    /// Observed (rule (b)) rather than returned by the object's last
    /// chained write (rule (a)).
    pub observed: bool,
}

/// The versions known per object, and what the chain counted. Shared by
/// every request of a layer.
#[derive(Debug)]
pub struct Chain {
    mode: Mode,
    /// With [`Observer::GatewayHead`]: how the gateway reads a version.
    reader: Option<std::sync::Arc<dyn VersionReader>>,
    /// Bounded: an evicted version is observed again, never assumed. A
    /// std mutex held for one map operation, never across an `.await`.
    versions: Mutex<LruCache<Box<str>, Known>>,
    stats: ChainCounters,
}

impl std::fmt::Debug for dyn VersionReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VersionReader")
    }
}

#[derive(Debug, Default)]
struct ChainCounters {
    client_read: AtomicU64,
    client_condition: AtomicU64,
    gateway_head: AtomicU64,
    conflicts_retry: AtomicU64,
    conflicts_overtaken: AtomicU64,
    unknown: AtomicU64,
}

/// What a [`Chain`] counted since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChainStats {
    /// Versions observed from fenced reads passing through.
    pub observed_client_read: u64,
    /// Versions taken from clients' own conditions.
    pub observed_client_condition: u64,
    /// Versions read with the gateway's own `HEAD`.
    pub observed_gateway_head: u64,
    /// Refused conditions answered `version_conflict` with `retry: true`.
    pub conflicts_retry: u64,
    /// ... and with `retry: false` (a higher token was admitted).
    pub conflicts_overtaken: u64,
    /// Chained writes answered 428 `version_unknown`.
    pub unknown: u64,
}

impl Chain {
    /// A chain in `mode` that keeps at most `entries` versions.
    pub fn new(mode: Mode, entries: NonZeroUsize) -> Self {
        Chain {
            mode,
            reader: None,
            versions: Mutex::new(LruCache::new(entries)),
            stats: ChainCounters::default(),
        }
    }

    /// Learns unknown versions with `reader` ([`Observer::GatewayHead`])
    /// instead of answering 428 `version_unknown`.
    pub fn with_reader(mut self, reader: std::sync::Arc<dyn VersionReader>) -> Self {
        self.reader = Some(reader);
        self
    }

    /// The store's dialect.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The reader of [`Chain::with_reader`], if any.
    pub fn reader(&self) -> Option<&dyn VersionReader> {
        self.reader.as_deref()
    }

    /// The version of `object` a chained write may carry, if one is known
    /// and no admin lowering happened since (`lowerings` is the table's
    /// count now).
    pub fn version(&self, object: &str, lowerings: u64) -> Option<KnownVersion> {
        let mut versions = self.lock();
        let known = versions.get(object)?;
        (known.lowerings == lowerings).then(|| KnownVersion {
            version: known.version.clone(),
            observed: known.observed,
        })
    }

    /// Records `version` as what `object`'s own chained write returned
    /// (rule (a)), learned when the table's count of lowerings was
    /// `lowerings` (read before the request was forwarded).
    pub fn learn(&self, object: &str, version: Version, lowerings: u64) {
        self.put(object, version, lowerings, false);
    }

    fn put(&self, object: &str, version: Version, lowerings: u64, observed: bool) {
        let known = Known {
            version,
            lowerings,
            observed,
        };
        self.lock().put(object.into(), known);
    }

    /// Records a version observed from `source`.
    pub fn observe(&self, object: &str, version: Version, lowerings: u64, source: Source) {
        self.count_observation(source);
        self.put(object, version, lowerings, true);
    }

    /// Counts an observation from `source` without keeping it (a client's
    /// own condition, which is that write's chain only).
    pub fn count_observation(&self, source: Source) {
        let counter = match source {
            Source::ClientRead => &self.stats.client_read,
            Source::ClientCondition => &self.stats.client_condition,
            Source::GatewayHead => &self.stats.gateway_head,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Makes `object`'s version unknown.
    pub fn forget(&self, object: &str) {
        self.lock().pop(object);
    }

    /// Counts a `version_conflict` answer.
    pub fn count_conflict(&self, retry: bool) {
        let counter = if retry {
            &self.stats.conflicts_retry
        } else {
            &self.stats.conflicts_overtaken
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a `version_unknown` answer.
    pub fn count_unknown(&self) {
        self.stats.unknown.fetch_add(1, Ordering::Relaxed);
    }

    /// What was counted so far.
    pub fn stats(&self) -> ChainStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ChainStats {
            observed_client_read: load(&self.stats.client_read),
            observed_client_condition: load(&self.stats.client_condition),
            observed_gateway_head: load(&self.stats.gateway_head),
            conflicts_retry: load(&self.stats.conflicts_retry),
            conflicts_overtaken: load(&self.stats.conflicts_overtaken),
            unknown: load(&self.stats.unknown),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<Box<str>, Known>> {
        self.versions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_bounded_and_forgotten() {
        let chain = Chain::new(Mode::S3, NonZeroUsize::new(2).unwrap());
        chain.learn("/b/1", Version::Absent, 0);
        chain.learn("/b/2", Version::Tag("\"2\"".into()), 0);
        chain.learn("/b/3", Version::Tag("\"3\"".into()), 0);
        assert_eq!(chain.version("/b/1", 0), None, "evicted, never assumed");
        assert_eq!(
            chain.version("/b/3", 0).map(|known| known.version),
            Some(Version::Tag("\"3\"".into()))
        );
        chain.forget("/b/3");
        assert_eq!(chain.version("/b/3", 0), None);
        chain.observe("/b/4", Version::Absent, 7, Source::ClientRead);
        let known = chain.version("/b/4", 7);
        assert_eq!(
            known,
            Some(KnownVersion {
                version: Version::Absent,
                observed: true
            })
        );
        assert_eq!(chain.version("/b/4", 8), None, "an admin lowering since");
        assert_eq!(chain.stats().observed_client_read, 1);
    }
}
