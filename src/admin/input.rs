//! The admin plane's inputs, parsed and checked apart from HTTP: the key of
//! `/fences/{key}`, the query strings of `GET /fences`, `DELETE` and
//! `GET /audit`, and the JSON body of `PUT /fences/{key}`. The gateway's
//! admin routes answer 400 with an [`InvalidInput`]'s code and message;
//! `fuzz/fuzz_targets/admin.rs` feeds these functions arbitrary bytes.
//!
//! ```
//! use fencegate::admin::input::{write_key, PutFence};
//! use fencegate::Scope;
//!
//! assert_eq!(write_key("%2Freports%2Fq3.csv", Scope::Path).unwrap(), "/reports/q3.csv");
//! assert!(write_key("%2Freports%2F..%2Fq3.csv", Scope::Path).is_err());
//! let put = PutFence::parse(br#"{"highest": 41, "reason": "forged token"}"#).unwrap();
//! assert_eq!((put.highest, put.force), (41, false));
//! ```

use serde::Deserialize;

use crate::fences::SetFence;
use crate::key::{check_key, Scope};

/// The longest `reason` of an admin write, in characters.
pub const MAX_REASON: usize = 200;

/// The default page of `GET /fences`.
pub const DEFAULT_LIST_LIMIT: usize = 1000;

/// The default page of `GET /audit`.
pub const DEFAULT_AUDIT_LIMIT: usize = 100;

/// An admin input refused, with the `error` code of its 400 answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidInput {
    /// The key of a lookup is empty or not UTF-8: `invalid_key`.
    #[error("{0}")]
    Key(String),
    /// A query string of a read: `invalid_query`.
    #[error("{0}")]
    Query(String),
    /// The key, query or body of a write: `invalid_request`.
    #[error("{0}")]
    Request(String),
}

impl InvalidInput {
    /// The `error` field of the 400 answer.
    pub fn code(&self) -> &'static str {
        match self {
            InvalidInput::Key(_) => "invalid_key",
            InvalidInput::Query(_) => "invalid_query",
            InvalidInput::Request(_) => "invalid_request",
        }
    }
}

/// The fence key of a `/fences/{key}` path, given what follows `/fences/`:
/// percent-decoded, so that `%2Fa` and `/a` name the same fence.
pub fn fence_key(encoded: &str) -> Result<String, InvalidInput> {
    match percent_encoding::percent_decode_str(encoded).decode_utf8() {
        Ok(key) if key.is_empty() => Err(InvalidInput::Key("no key after /fences/".into())),
        Ok(key) => Ok(key.into_owned()),
        Err(_) => Err(InvalidInput::Key("the key is not UTF-8".into())),
    }
}

/// The key of an admin write: a [`fence_key`] that some request maps to in
/// `scope` ([`check_key`]); a fence no request reaches would fence nothing.
pub fn write_key(encoded: &str, scope: Scope) -> Result<String, InvalidInput> {
    let key = fence_key(encoded).map_err(|e| InvalidInput::Request(e.to_string()))?;
    check_key(&key, scope).map_err(InvalidInput::Request)?;
    Ok(key)
}

/// `GET /fences?prefix=P&limit=N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only keys that start with it (all when empty).
    pub prefix: String,
    /// At most this many, [`DEFAULT_LIST_LIMIT`] when not given.
    pub limit: usize,
}

impl ListQuery {
    /// Parses the query string (`None`: there was none).
    pub fn parse(query: Option<&str>) -> Result<Self, InvalidInput> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default)]
            prefix: String,
            limit: Option<String>,
        }
        let raw: Raw = serde_urlencoded::from_str(query.unwrap_or_default())
            .map_err(|_| InvalidInput::Query("expected ?prefix=P&limit=N".into()))?;
        let limit = parse_limit(raw.limit.as_deref(), DEFAULT_LIST_LIMIT)?;
        Ok(ListQuery {
            prefix: raw.prefix,
            limit,
        })
    }
}

/// The `limit` of `GET /audit?limit=N`, [`DEFAULT_AUDIT_LIMIT`] when not
/// given.
pub fn audit_limit(query: Option<&str>) -> Result<usize, InvalidInput> {
    #[derive(Deserialize)]
    struct Raw {
        limit: Option<String>,
    }
    let raw: Raw =
        serde_urlencoded::from_str(query.unwrap_or_default()).map_err(|_| invalid_limit())?;
    parse_limit(raw.limit.as_deref(), DEFAULT_AUDIT_LIMIT)
}

fn parse_limit(limit: Option<&str>, default: usize) -> Result<usize, InvalidInput> {
    limit.map_or(Ok(default), |limit| {
        limit.parse().map_err(|_| invalid_limit())
    })
}

fn invalid_limit() -> InvalidInput {
    InvalidInput::Query("limit must be a non-negative integer".into())
}

/// The body of `PUT /fences/{key}`: raise, or force a lowering.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutFence {
    /// The fence's new highest token.
    pub highest: u64,
    /// Why, for the audit log: 1 to [`MAX_REASON`] characters, no control
    /// characters.
    pub reason: String,
    /// Lower the fence if `highest` is below its highest.
    #[serde(default)]
    pub force: bool,
    /// A lowering happens only while the highest is still this.
    pub if_highest: Option<u64>,
}

impl PutFence {
    /// Parses and checks a JSON body.
    pub fn parse(body: &[u8]) -> Result<Self, InvalidInput> {
        let put: PutFence = serde_json::from_slice(body).map_err(|e| {
            InvalidInput::Request(format!(
                "expected {{\"highest\": n, \"reason\": \"...\"}} (plus \"force\" and \"if_highest\" to lower): {e}"
            ))
        })?;
        check_reason(&put.reason)?;
        Ok(put)
    }

    /// The write, made by `actor`.
    pub fn into_set_fence(self, actor: String) -> SetFence {
        SetFence {
            highest: self.highest,
            force: self.force,
            if_highest: self.if_highest,
            actor,
            reason: self.reason,
        }
    }
}

/// The query of `DELETE /fences/{key}?if_highest=N[&reason=...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteFence {
    /// The fence is forgotten only while its highest is still this.
    pub if_highest: u64,
    /// Why, for the audit log (checked as [`PutFence::reason`]).
    pub reason: Option<String>,
}

impl DeleteFence {
    /// Parses and checks the query string (`None`: there was none).
    pub fn parse(query: Option<&str>) -> Result<Self, InvalidInput> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            if_highest: Option<String>,
            reason: Option<String>,
        }
        let raw: Raw = serde_urlencoded::from_str(query.unwrap_or_default()).map_err(|_| {
            InvalidInput::Request("expected ?if_highest=N, optionally &reason=...".into())
        })?;
        let Some(if_highest) = raw.if_highest else {
            return Err(InvalidInput::Request(
                "if_highest=N is required: the highest you saw, which must still be current".into(),
            ));
        };
        let Ok(if_highest) = if_highest.parse::<u64>() else {
            return Err(InvalidInput::Request(
                "if_highest must be a token (0 to 18446744073709551615)".into(),
            ));
        };
        if let Some(reason) = &raw.reason {
            check_reason(reason)?;
        }
        Ok(DeleteFence {
            if_highest,
            reason: raw.reason,
        })
    }
}

/// Whether `reason` is fit for the audit log.
pub fn check_reason(reason: &str) -> Result<(), InvalidInput> {
    let chars = reason.chars().count();
    if !(1..=MAX_REASON).contains(&chars) {
        return Err(InvalidInput::Request(format!(
            "reason must be 1 to {MAX_REASON} characters, not {chars}"
        )));
    }
    if reason.chars().any(char::is_control) {
        return Err(InvalidInput::Request(
            "reason must not hold control characters".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_percent_decoded_and_checked_against_the_scope() {
        assert_eq!(fence_key("%2Fa%20b").unwrap(), "/a b");
        assert_eq!(fence_key("").unwrap_err().code(), "invalid_key");
        assert_eq!(fence_key("%FF").unwrap_err().code(), "invalid_key");
        assert_eq!(
            write_key("%FF", Scope::Path).unwrap_err().code(),
            "invalid_request"
        );
        assert!(write_key("%2Fa%2F%2F", Scope::Path).is_err());
        assert!(write_key("%2Fa%2F.", Scope::Path).is_err());
        // A subtree's fence, left by a collection write.
        assert_eq!(write_key("%2Fa%2F", Scope::Path).unwrap(), "/a/");
        assert_eq!(write_key("jobs-1", Scope::Header).unwrap(), "jobs-1");
    }

    #[test]
    fn queries_take_defaults_and_refuse_what_is_not_a_number() {
        let all = ListQuery::parse(None).unwrap();
        assert_eq!((all.prefix.as_str(), all.limit), ("", DEFAULT_LIST_LIMIT));
        let some = ListQuery::parse(Some("prefix=%2Fa&limit=3")).unwrap();
        assert_eq!((some.prefix.as_str(), some.limit), ("/a", 3));
        assert_eq!(
            ListQuery::parse(Some("limit=-1")).unwrap_err().code(),
            "invalid_query"
        );
        assert_eq!(
            audit_limit(Some("limit=x")).unwrap_err().code(),
            "invalid_query"
        );
        assert_eq!(audit_limit(None).unwrap(), DEFAULT_AUDIT_LIMIT);
        let delete = DeleteFence::parse(Some("if_highest=7&reason=x")).unwrap();
        assert_eq!(
            (delete.if_highest, delete.reason.as_deref()),
            (7, Some("x"))
        );
        assert!(DeleteFence::parse(None).is_err());
        assert!(DeleteFence::parse(Some("if_highest=7&other=1")).is_err());
        assert!(DeleteFence::parse(Some("if_highest=18446744073709551616")).is_err());
    }

    #[test]
    fn put_bodies_are_exactly_the_documented_fields() {
        let put = PutFence::parse(br#"{"highest":7,"reason":"r","force":true,"if_highest":9}"#);
        assert_eq!(put.unwrap().if_highest, Some(9));
        for bad in [
            &br#"{"highest":7}"#[..],
            br#"{"highest":7,"reason":""}"#,
            br#"{"highest":7,"reason":"a\nb"}"#,
            br#"{"highest":-1,"reason":"r"}"#,
            br#"{"highest":7,"reason":"r","extra":1}"#,
            b"not json",
        ] {
            assert_eq!(PutFence::parse(bad).unwrap_err().code(), "invalid_request");
        }
    }
}
