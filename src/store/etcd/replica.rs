//! This instance's copy of every in-flight record under the prefix, and of
//! every subtree fence's highest, fed by a watch, and the revision it has
//! caught up to.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use crate::key::subtree_path;

/// The in-flight records of every key and the highest of every subtree
/// key, as of `revision`.
#[derive(Debug, Default)]
pub(super) struct Replica {
    /// The newest revision applied. A claim committed at revision `r` may
    /// only trust the replica's "no lower record" once `revision >= r`
    /// (KEP-2340's lesson: a cache answers only once it has caught up).
    pub(super) revision: i64,
    /// Ordered, so that the records under a subtree are one range.
    records: BTreeMap<String, BTreeSet<(u64, String)>>,
    /// The highest of every key shaped like a subtree key (`/dir/`): a
    /// claim compares the ones above its key with these values, read
    /// under the same lock as `revision`.
    subtrees: HashMap<String, u64>,
}

impl Replica {
    /// Empties the replica, for a reload at `revision`.
    pub(super) fn reset(&mut self, revision: i64) {
        self.records.clear();
        self.subtrees.clear();
        self.revision = revision;
    }

    pub(super) fn insert(&mut self, key: String, token: u64, holder: String) {
        self.records.entry(key).or_default().insert((token, holder));
    }

    pub(super) fn remove(&mut self, key: &str, token: u64, holder: &str) {
        if let Some(records) = self.records.get_mut(key) {
            records.remove(&(token, holder.to_owned()));
            if records.is_empty() {
                self.records.remove(key);
            }
        }
    }

    /// Notes the highest of `key` (or its deletion), if it is shaped like
    /// a subtree key.
    pub(super) fn highest(&mut self, key: &str, highest: Option<u64>) {
        if subtree_path(key).is_none() {
            return;
        }
        match highest {
            Some(highest) => {
                self.subtrees.insert(key.to_owned(), highest);
            }
            None => {
                self.subtrees.remove(key);
            }
        }
    }

    /// The highest of subtree key `key`, as of `revision`.
    pub(super) fn subtree_highest(&self, key: &str) -> Option<u64> {
        self.subtrees.get(key).copied()
    }

    /// Whether a claim of `token` on `key` by `holder`, committed at
    /// `revision`, must still wait: the replica has not caught up to it,
    /// or shows a record of another holder below `token`.
    pub(super) fn blocks(&self, key: &str, token: u64, holder: &str, revision: i64) -> bool {
        if self.revision < revision {
            return true;
        }
        self.records
            .get(key)
            .is_some_and(|records| lower_of_others(records, token, holder))
    }

    /// As [`Replica::blocks`], for every key under subtree key `subtree`
    /// (itself included; `//` is every key).
    pub(super) fn blocks_under(
        &self,
        subtree: &str,
        token: u64,
        holder: &str,
        revision: i64,
    ) -> bool {
        if self.revision < revision {
            return true;
        }
        let start = if subtree == "//" { "/" } else { subtree };
        self.records
            .range::<str, _>((Bound::Included(start), Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(start))
            .any(|(_, records)| lower_of_others(records, token, holder))
    }
}

fn lower_of_others(records: &BTreeSet<(u64, String)>, token: u64, holder: &str) -> bool {
    records
        .range(..(token, String::new()))
        .any(|(_, other)| other != holder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lower_records_of_others_block_once_caught_up() {
        let mut replica = Replica::default();
        replica.reset(10);
        replica.insert("/k".into(), 33, "a.1".into());
        replica.insert("/k".into(), 34, "b.2".into());
        assert!(replica.blocks("/k", 34, "b.2", 10), "a's 33 is below");
        assert!(!replica.blocks("/k", 33, "a.1", 10), "nothing below 33");
        assert!(!replica.blocks("/k", 34, "a.1", 10), "a's own record");
        assert!(replica.blocks("/k", 33, "a.1", 11), "not caught up");
        replica.remove("/k", 33, "a.1");
        assert!(!replica.blocks("/k", 34, "b.2", 10));
        assert!(!replica.blocks("/other", 1, "b.2", 10));
    }

    #[test]
    fn a_subtree_is_blocked_by_lower_records_under_it_only() {
        let mut replica = Replica::default();
        replica.reset(10);
        replica.insert("/d/x".into(), 33, "a.1".into());
        replica.insert("/d".into(), 20, "a.1".into());
        replica.insert("/dz".into(), 20, "a.1".into());
        assert!(replica.blocks_under("/d/", 34, "b.2", 10));
        assert!(!replica.blocks_under("/d/", 33, "b.2", 10));
        assert!(!replica.blocks_under("/d/", 34, "a.1", 10));
        assert!(replica.blocks_under("//", 21, "b.2", 10));
        replica.remove("/d/x", 33, "a.1");
        assert!(
            !replica.blocks_under("/d/", 34, "b.2", 10),
            "/d and /dz are not under /d/"
        );
        replica.highest("/d/", Some(40));
        replica.highest("/d", Some(50));
        assert_eq!(replica.subtree_highest("/d/"), Some(40));
        assert_eq!(replica.subtree_highest("/d"), None);
        replica.highest("/d/", None);
        assert_eq!(replica.subtree_highest("/d/"), None);
    }
}
