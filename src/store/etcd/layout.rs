//! Where things live under the prefix `P` (default `/fencegate/`):
//!
//! - `P hw/<key>`: the fence's highest token, 20 zero-padded digits (so that
//!   etcd's byte-wise `LESS`/`EQUAL` compares numbers). No lease; only an
//!   admin write lowers or removes it.
//! - `P fl/<key>/<token, 20 digits>/<holder>`: one in-flight record per
//!   (key, token, holder), on the holder's lease. Byte order is token
//!   order, so "every record of the key below t" is one range.
//! - `P members/<instance>`: on the lease, for operators.
//! - `P config`: the settings every instance must share.
//! - `P ns/<name>`: what shapes a fence namespace's keys (JSON), the same
//!   for every instance; `P nsm/<name>`: which requests its routes take.
//! - `P audit/<unix ms, 20 digits>-<instance>-<n>`: admin writes' audit
//!   entries (JSON), in time order.
//! - `P up/<upload>`: the key an S3 multipart upload writes, by the
//!   gateway's name of the upload (namespace, bucket, the store's id). No
//!   lease: it outlives the instance that bound it, and goes once the
//!   upload is completed or aborted.
//!
//! `<key>` and `<instance>` are escaped (`%` and `/` percent-encoded) so
//! that a `/` inside a fence key cannot be taken for a separator. A holder
//! is `<instance>.<lease id in hex>`: a restarted instance with the same
//! name never mistakes its predecessor's records for its own.

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};

const ESCAPED: &AsciiSet = &CONTROLS.add(b'/').add(b'%');

/// The key layout under one prefix.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    prefix: String,
}

/// An in-flight record's key, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RecordKey {
    pub(super) key: String,
    pub(super) token: u64,
    pub(super) holder: String,
}

/// What a key under the prefix is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entry {
    Highest(String),
    Record(RecordKey),
    Audit,
    Other,
}

impl Layout {
    pub(super) fn new(prefix: &str) -> Self {
        Layout {
            prefix: prefix.to_owned(),
        }
    }

    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(super) fn highest(&self, key: &str) -> String {
        format!("{}hw/{}", self.prefix, escape(key))
    }

    pub(super) fn record(&self, key: &str, token: u64, holder: &str) -> String {
        format!(
            "{}fl/{}/{}/{}",
            self.prefix,
            escape(key),
            pad(token),
            holder
        )
    }

    /// Every record of `key`: `[start, end)`.
    pub(super) fn records_of(&self, key: &str) -> (String, String) {
        let base = format!("{}fl/{}/", self.prefix, escape(key));
        let end = prefix_end(&base);
        (base, end)
    }

    pub(super) fn audit(&self, millis: u128, instance: &str, n: u64) -> String {
        format!("{}audit/{millis:020}-{}-{n}", self.prefix, escape(instance))
    }

    /// Every audit entry: `[start, end)`.
    pub(super) fn audit_range(&self) -> (String, String) {
        (
            format!("{}audit/", self.prefix),
            format!("{}audit0", self.prefix),
        )
    }

    /// The highest of `subtree` (a [`subtree_key`](crate::key::subtree_key))
    /// and of every key under it: `[start, end)`. Escaping keeps `/` as
    /// `%2F`, so `/dir/` escaped is a prefix of every `/dir/...` escaped;
    /// the root's subtree (`//`) is every key of a path scope.
    pub(super) fn highests_under(&self, subtree: &str) -> (String, String) {
        let base = if subtree == "//" {
            format!("{}hw/%2F", self.prefix)
        } else {
            format!("{}hw/{}", self.prefix, escape(subtree))
        };
        let end = prefix_end(&base);
        (base, end)
    }

    /// The highests of every key that starts with `prefix` (as text, not
    /// as a subtree): `[start, end)`.
    pub(super) fn highests_with_prefix(&self, prefix: &str) -> (String, String) {
        let base = format!("{}hw/{}", self.prefix, escape(prefix));
        let end = prefix_end(&base);
        (base, end)
    }

    /// The records of `key` with a token below `token`: `[start, end)`.
    pub(super) fn records_below(&self, key: &str, token: u64) -> (String, String) {
        let base = format!("{}fl/{}/", self.prefix, escape(key));
        let end = format!("{base}{}", pad(token));
        (base, end)
    }

    /// What is read at start, each `[start, end)`: every highest, every
    /// in-flight record.
    pub(super) fn loaded_ranges(&self) -> [(String, String); 2] {
        [
            (format!("{}hw/", self.prefix), format!("{}hw0", self.prefix)),
            (format!("{}fl/", self.prefix), format!("{}fl0", self.prefix)),
        ]
    }

    /// Every key of the prefix: `[start, end)`.
    pub(super) fn everything(&self) -> (String, String) {
        (self.prefix.clone(), prefix_end(&self.prefix))
    }

    pub(super) fn member(&self, instance: &str) -> String {
        format!("{}members/{}", self.prefix, escape(instance))
    }

    pub(super) fn config(&self) -> String {
        format!("{}config", self.prefix)
    }

    /// Which requests the routes of fence namespace `name` take
    /// (`P nsm/<name>`).
    pub(super) fn namespace_matches(&self, name: &str) -> String {
        format!("{}nsm/{}", self.prefix, escape(name))
    }

    /// Every namespace's matches: `[start, end)`.
    pub(super) fn namespace_matches_range(&self) -> (String, String) {
        let start = format!("{}nsm/", self.prefix);
        let end = prefix_end(&start);
        (start, end)
    }

    /// The namespace whose matches `key` (read back) holds.
    pub(super) fn namespace_of_matches(&self, key: &str) -> Option<String> {
        key.strip_prefix(&self.prefix)?
            .strip_prefix("nsm/")
            .and_then(unescape)
    }

    /// What shapes fence namespace `name`'s keys (`P ns/<name>`; the
    /// default namespace's is `P ns/`).
    pub(super) fn namespace(&self, name: &str) -> String {
        format!("{}ns/{}", self.prefix, escape(name))
    }

    /// The key S3 multipart upload `upload` writes (`P up/<upload>`).
    pub(super) fn upload(&self, upload: &str) -> String {
        format!("{}up/{}", self.prefix, escape(upload))
    }

    /// The holder name of `instance` on lease `lease`.
    pub(super) fn holder(instance: &str, lease: i64) -> String {
        format!("{}.{lease:x}", escape(instance))
    }

    /// What `raw` (a key read back from etcd) is.
    pub(super) fn parse(&self, raw: &str) -> Entry {
        let Some(rest) = raw.strip_prefix(&self.prefix) else {
            return Entry::Other;
        };
        if let Some(key) = rest.strip_prefix("hw/") {
            return unescape(key).map_or(Entry::Other, Entry::Highest);
        }
        if rest.starts_with("audit/") {
            return Entry::Audit;
        }
        let Some(record) = rest.strip_prefix("fl/") else {
            return Entry::Other;
        };
        let mut parts = record.splitn(3, '/');
        let (Some(key), Some(token), Some(holder)) = (parts.next(), parts.next(), parts.next())
        else {
            return Entry::Other;
        };
        match (unescape(key), token.parse()) {
            (Some(key), Ok(token)) => Entry::Record(RecordKey {
                key,
                token,
                holder: holder.to_owned(),
            }),
            _ => Entry::Other,
        }
    }
}

/// A token as 20 digits: every `u64` fits, and byte order is numeric order.
pub(super) fn pad(token: u64) -> String {
    format!("{token:020}")
}

/// The end of the range of every key starting with `prefix` (etcd's
/// `clientv3.GetPrefixRangeEnd`): the prefix with its last byte below 0xff
/// incremented.
fn prefix_end(prefix: &str) -> String {
    let mut bytes = prefix.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0xff {
            bytes.push(last + 1);
            // A prefix is UTF-8 text; incrementing its last ASCII byte keeps
            // it so (a non-ASCII last byte would not be a sane prefix end,
            // and is rejected by the option's check).
            return String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    "\0".to_owned()
}

fn escape(text: &str) -> String {
    utf8_percent_encode(text, ESCAPED).to_string()
}

fn unescape(text: &str) -> Option<String> {
    percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upload_binding_is_neither_a_fence_nor_a_record() {
        let layout = Layout::new("/fg/");
        let key = layout.upload("reports§bkt/id/with/slashes=");
        let rest = key.strip_prefix("/fg/up/").unwrap();
        assert!(!rest.contains('/'), "{key}");
        assert_eq!(layout.parse(&key), Entry::Other);
        assert_ne!(key, layout.upload("reports§bkt/id/with/slashes"));
    }

    #[test]
    fn keys_round_trip_and_order_by_token() {
        let layout = Layout::new("/fg/");
        let holder = Layout::holder("gw/1", 0xabc);
        assert_eq!(holder, "gw%2F1.abc");
        let record = layout.record("/a/b%c", 33, &holder);
        assert_eq!(
            record,
            "/fg/fl/%2Fa%2Fb%25c/00000000000000000033/gw%2F1.abc"
        );
        assert_eq!(
            layout.parse(&record),
            Entry::Record(RecordKey {
                key: "/a/b%c".into(),
                token: 33,
                holder
            })
        );
        assert_eq!(
            layout.parse(&layout.highest("/a/b")),
            Entry::Highest("/a/b".into())
        );
        let (start, end) = layout.records_below("/a/b%c", 34);
        assert!(start.as_str() <= record.as_str() && record.as_str() < end.as_str());
        let (_, end) = layout.records_below("/a/b%c", 33);
        assert!(record.as_str() >= end.as_str());
        let (start, end) = layout.highests_under("/a/");
        for inside in ["/a/", "/a/b", "/a/b/", "/a/b%c"] {
            let key = layout.highest(inside);
            assert!(start <= key && key < end, "{inside}");
        }
        for outside in ["/a", "/ab", "/a%2F", "/b"] {
            let key = layout.highest(outside);
            assert!(!(start <= key && key < end), "{outside}");
        }
        let (start, end) = layout.highests_under("//");
        assert!(start <= layout.highest("/x/y") && layout.highest("/x/y") < end);
        assert!(start <= layout.highest("//") && layout.highest("//") < end);
        assert_eq!(prefix_end("/fg/"), "/fg0");
        assert_eq!(pad(u64::MAX).len(), 20);
    }
}
