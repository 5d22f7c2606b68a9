//! This instance's copy of every in-flight record under the prefix, fed by
//! a watch, and the revision it has caught up to.

use std::collections::{BTreeSet, HashMap};

/// The in-flight records of every key, as of `revision`.
#[derive(Debug, Default)]
pub(super) struct Replica {
    /// The newest revision applied. A claim committed at revision `r` may
    /// only trust the replica's "no lower record" once `revision >= r`
    /// (KEP-2340's lesson: a cache answers only once it has caught up).
    pub(super) revision: i64,
    records: HashMap<String, BTreeSet<(u64, String)>>,
}

impl Replica {
    /// Empties the replica, for a reload at `revision`.
    pub(super) fn reset(&mut self, revision: i64) {
        self.records.clear();
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

    /// Whether a claim of `token` on `key` by `holder`, committed at
    /// `revision`, must still wait: the replica has not caught up to it,
    /// or shows a record of another holder below `token`.
    pub(super) fn blocks(&self, key: &str, token: u64, holder: &str, revision: i64) -> bool {
        if self.revision < revision {
            return true;
        }
        self.records.get(key).is_some_and(|records| {
            records
                .range(..(token, String::new()))
                .any(|(_, other)| other != holder)
        })
    }
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
}
