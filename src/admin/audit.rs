//! The audit log of admin writes: who changed which fence, from what to
//! what, and why. An entry is made durable together with the change it
//! records (one store transaction), before the change is answered.
//!
//! ```
//! use std::time::SystemTime;
//! use fencegate::admin::audit::{AuditAction, AuditEntry};
//!
//! let entry = AuditEntry {
//!     time: SystemTime::now(),
//!     actor: "10.0.0.7:51234".into(),
//!     action: AuditAction::Lower,
//!     resource: "/bucket/report".into(),
//!     previous: Some(18446744073709551615),
//!     highest: Some(41),
//!     reason: Some("forged token from 10.0.0.9".into()),
//! };
//! assert_eq!(entry.action.as_str(), "lower");
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// What an admin write did to a fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditAction {
    /// Raised (or created, or confirmed at its current value) like an
    /// admission would.
    Raise,
    /// Forced below its highest.
    Lower,
    /// Forgotten.
    Delete,
}

impl AuditAction {
    /// The `action` field of `GET /audit`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::Raise => "raise",
            AuditAction::Lower => "lower",
            AuditAction::Delete => "delete",
        }
    }
}

/// One admin write, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When the write was made (stored to the millisecond).
    #[serde(with = "unix_millis")]
    pub time: SystemTime,
    /// Who made it: the admin client's address.
    pub actor: String,
    /// What it did.
    pub action: AuditAction,
    /// The fence key.
    pub resource: String,
    /// The highest before (`None`: the fence did not exist).
    pub previous: Option<u64>,
    /// The highest after (`None` for a delete).
    pub highest: Option<u64>,
    /// Why, as the operator wrote it (`None` if a delete gave none).
    pub reason: Option<String>,
}

impl AuditEntry {
    /// Logs the entry on stderr at warn level: an admin write overrides what
    /// the lock service said, which an operator must be able to find later.
    pub fn log(&self) {
        tracing::warn!(
            actor = self.actor.as_str(),
            action = self.action.as_str(),
            resource = self.resource.as_str(),
            previous = ?self.previous,
            highest = ?self.highest,
            reason = ?self.reason,
            "admin write"
        );
    }
}

/// Milliseconds since the Unix epoch: a store format that any later version
/// can read back, independent of how `time` is shown.
mod unix_millis {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(time: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let millis = time
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        s.serialize_u64(u64::try_from(millis).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let millis = u64::deserialize(d)?;
        Ok(UNIX_EPOCH + Duration::from_millis(millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_as_written_to_the_millisecond() {
        let entry = AuditEntry {
            time: UNIX_EPOCH + Duration::from_millis(1_790_000_000_123),
            actor: "127.0.0.1:1".into(),
            action: AuditAction::Delete,
            resource: "/a".into(),
            previous: Some(7),
            highest: None,
            reason: None,
        };
        let text = serde_json::to_string(&entry).unwrap();
        assert_eq!(serde_json::from_str::<AuditEntry>(&text).unwrap(), entry);
    }
}
