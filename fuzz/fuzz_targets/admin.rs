//! The admin plane's inputs (`fencegate::admin::input`): the key of
//! `/fences/{key}`, the query strings and the JSON body of a write, from a
//! request target that `http` accepts and a body of any bytes; then the
//! write itself, on a fence table holding one fence.
//!
//! The oracles:
//! - an admin write's key is accepted exactly when some request maps to it
//!   (a fence nobody can reach would fence nothing);
//! - a `PUT` body is accepted exactly when it is a JSON object of the
//!   documented fields with their types and a reason of 1 to 200 characters
//!   without control characters;
//! - a query is accepted only with the values its pairs carry;
//! - a write that succeeds leaves the fence at what it asked for, a write
//!   that fails leaves it as it was, and a fence is lowered or forgotten only
//!   by a forced write naming its current highest.

#![no_main]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use fencegate::admin::input::{
    audit_limit, fence_key, write_key, DeleteFence, ListQuery, PutFence, DEFAULT_AUDIT_LIMIT,
    DEFAULT_LIST_LIMIT, MAX_REASON,
};
use fencegate::key::{lock_name_from_headers, normalize_host, normalize_path, subtree_path};
use fencegate::{Fences, Scope};
use libfuzzer_sys::fuzz_target;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::Value;

/// Everything but the path separator, so that an encoded key keeps its
/// segments.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'/');

fuzz_target!(|input: &[u8]| {
    let [route, scope, highest, rest @ ..] = input else {
        return;
    };
    let two = std::num::NonZeroUsize::MIN.saturating_add(1);
    let scope = match scope % 5 {
        0 => Scope::Path,
        1 => Scope::Prefix(two),
        2 => Scope::HostPath,
        3 => Scope::HostPrefix(two),
        _ => Scope::Header,
    };
    let (target, body) = match rest.iter().position(|b| *b == 0xff) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &[][..]),
    };
    let mut full = b"/fences/".to_vec();
    full.extend_from_slice(target);
    let Ok(uri) = http::Uri::try_from(full) else {
        return;
    };
    let encoded = uri.path().strip_prefix("/fences/").unwrap_or_default();
    let query = uri.query();
    match route % 5 {
        0 => lookup_key(encoded),
        1 => list_query(query),
        2 => put(encoded, scope, body, u64::from(*highest)),
        3 => delete(encoded, scope, query, u64::from(*highest)),
        _ => audit_query(query),
    }
});

fn lookup_key(encoded: &str) {
    if let Ok(key) = fence_key(encoded) {
        assert!(!key.is_empty());
        let again = utf8_percent_encode(&key, NON_ALPHANUMERIC).to_string();
        assert_eq!(fence_key(&again).as_deref(), Ok(key.as_str()));
    }
}

/// Whether a request maps to `key` in `scope`, asked of the data plane's
/// own functions.
fn reachable(key: &str, scope: Scope) -> bool {
    if scope.has_host() {
        // A host as the data plane normalises it, then a key of the path
        // scopes.
        return match key.find('/') {
            Some(at) if at > 0 => {
                let (host, path) = key.split_at(at);
                normalize_host(host).ok().as_deref() == Some(host)
                    && reachable(path, scope.path_scope())
            }
            _ => false,
        };
    }
    match scope {
        Scope::Header => {
            let mut headers = http::HeaderMap::new();
            let Ok(value) = http::HeaderValue::from_str(key) else {
                return false;
            };
            headers.insert("x-fencing-lock", value);
            lock_name_from_headers(&headers).as_deref() == Ok(key)
        }
        _ => match subtree_path(key) {
            // A collection write's fence: its path's, where the scope gives
            // the collection's members keys of their own.
            Some(path) => {
                let segments = if path == "/" {
                    0
                } else {
                    path.matches('/').count()
                };
                let spans = match scope {
                    Scope::Prefix(n) => segments < n.get(),
                    _ => true,
                };
                spans && subtree_path(path).is_none() && reachable_path(path, scope)
            }
            None => reachable_path(key, scope),
        },
    }
}

/// Whether an object's request maps to `key` in `scope`.
fn reachable_path(key: &str, scope: Scope) -> bool {
    let path = utf8_percent_encode(key, SEGMENT).to_string();
    let Ok(path) = normalize_path(&path) else {
        return false;
    };
    path == key && scope.key_for_path(&path) == key
}

fn checked_key(encoded: &str, scope: Scope) -> Option<String> {
    let accepted = write_key(encoded, scope);
    if let Ok(decoded) = fence_key(encoded) {
        assert_eq!(
            accepted.is_ok(),
            reachable(&decoded, scope),
            "{decoded:?} in {scope}: {accepted:?}"
        );
    } else {
        assert!(accepted.is_err());
    }
    accepted.ok()
}

/// The one value of `name` among the query's pairs, if it appears once.
fn single(query: Option<&str>, name: &str) -> Result<Option<String>, ()> {
    let mut values = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.into_owned());
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(value), None) => Ok(Some(value)),
        (Some(_), Some(_)) => Err(()),
    }
}

fn list_query(query: Option<&str>) {
    if let Ok(list) = ListQuery::parse(query) {
        let prefix = single(query, "prefix").expect("one prefix at most");
        assert_eq!(list.prefix, prefix.unwrap_or_default());
        let limit = single(query, "limit").expect("one limit at most");
        let limit = limit.map_or(Ok(DEFAULT_LIST_LIMIT), |l| l.parse::<usize>());
        assert_eq!(Ok(list.limit), limit);
    }
}

fn audit_query(query: Option<&str>) {
    if let Ok(limit) = audit_limit(query) {
        let given = single(query, "limit").expect("one limit at most");
        let given = given.map_or(Ok(DEFAULT_AUDIT_LIMIT), |l| l.parse::<usize>());
        assert_eq!(Ok(limit), given);
    }
}

fn good_reason(reason: &str) -> bool {
    (1..=MAX_REASON).contains(&reason.chars().count()) && !reason.chars().any(char::is_control)
}

/// The documented body, checked on a generic JSON value.
fn documented_body(body: &[u8]) -> Option<(u64, String, bool, Option<u64>)> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    let known = ["highest", "reason", "force", "if_highest"];
    if fields.keys().any(|k| !known.contains(&k.as_str())) {
        return None;
    }
    let highest = fields.get("highest")?.as_u64()?;
    let reason = fields.get("reason")?.as_str()?.to_owned();
    let force = match fields.get("force") {
        None => false,
        Some(force) => force.as_bool()?,
    };
    let if_highest = match fields.get("if_highest") {
        None | Some(Value::Null) => None,
        Some(given) => Some(given.as_u64()?),
    };
    good_reason(&reason).then_some((highest, reason, force, if_highest))
}

/// Whether the top-level JSON object in `body` names a key twice.
fn repeats_a_key(body: &[u8]) -> bool {
    struct Keys(Vec<String>);
    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Keys, A::Error> {
                    let mut keys = Vec::new();
                    while let Some((key, serde::de::IgnoredAny)) = map.next_entry::<String, _>()? {
                        keys.push(key);
                    }
                    Ok(Keys(keys))
                }
            }
            d.deserialize_map(Visit)
        }
    }
    let Ok(Keys(mut keys)) = serde_json::from_slice::<Keys>(body) else {
        return false;
    };
    let all = keys.len();
    keys.sort_unstable();
    keys.dedup();
    keys.len() < all
}

fn put(encoded: &str, scope: Scope, body: &[u8], current: u64) {
    let parsed = PutFence::parse(body);
    match (&parsed, documented_body(body)) {
        (Ok(put), Some(documented)) => assert_eq!(
            (put.highest, put.reason.clone(), put.force, put.if_highest),
            documented
        ),
        (Ok(put), None) => panic!("accepted an undocumented body: {put:?}"),
        // A repeated field is refused by the parser (as a duplicate, or for
        // the type of an earlier copy), while a generic JSON value keeps the
        // last copy.
        (Err(e), Some(_)) => assert!(repeats_a_key(body), "refused a documented body: {e}"),
        (Err(_), None) => {}
    }
    let (Some(key), Ok(put)) = (checked_key(encoded, scope), parsed) else {
        return;
    };
    let fences = Fences::in_memory();
    drop(now(fences.admit(&key, current)).expect("a first admission"));
    let (highest, force, if_highest) = (put.highest, put.force, put.if_highest);
    let written = now(fences.set_fence(&key, put.into_set_fence("fuzz".into())));
    match written {
        Ok(_) => {
            assert_eq!(fences.highest(&key), Some(highest));
            if highest < current {
                assert!(force && if_highest == Some(current));
            }
        }
        Err(_) => assert_eq!(fences.highest(&key), Some(current)),
    }
}

fn delete(encoded: &str, scope: Scope, query: Option<&str>, current: u64) {
    let parsed = DeleteFence::parse(query);
    if let Ok(delete) = &parsed {
        let given = single(query, "if_highest").expect("one if_highest at most");
        assert_eq!(given.map(|g| g.parse::<u64>()), Some(Ok(delete.if_highest)));
        assert!(delete.reason.as_deref().is_none_or(good_reason));
        let names = form_urlencoded::parse(query.unwrap_or_default().as_bytes());
        assert!(names
            .into_iter()
            .all(|(n, _)| n == "if_highest" || n == "reason"));
    }
    let (Some(key), Ok(delete)) = (checked_key(encoded, scope), parsed) else {
        return;
    };
    let fences = Fences::in_memory();
    drop(now(fences.admit(&key, current)).expect("a first admission"));
    match now(fences.forget_fence(&key, delete.if_highest, "fuzz".into(), delete.reason)) {
        Ok(_) => {
            assert_eq!(delete.if_highest, current);
            assert_eq!(fences.highest(&key), None);
        }
        Err(_) => assert_eq!(fences.highest(&key), Some(current)),
    }
}

/// Runs a future that the in-memory store never makes wait.
fn now<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the in-memory fence table waited"),
    }
}
