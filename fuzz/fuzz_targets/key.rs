//! The path normaliser: whatever it accepts becomes a key that is already
//! normal (a leading `/`, no empty, `.` or `..` segment, no trailing `/`),
//! that a second pass leaves alone when no `%` is left to decode, and
//! that every scope maps to a key of its own shape.

#![no_main]

use fencegate::key::{check_key, normalize_path};
use fencegate::Scope;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|raw: &str| {
    let Ok(key) = normalize_path(raw) else {
        return;
    };
    assert!(key.starts_with('/'), "{raw:?} -> {key:?}");
    assert_eq!(check_key(&key, Scope::Path), Ok(()), "{raw:?} -> {key:?}");
    if !key.contains('%') {
        assert_eq!(normalize_path(&key).as_deref(), Ok(key.as_str()), "{raw:?}");
    }
    for n in 1..4 {
        let scope: Scope = format!("prefix:{n}").parse().unwrap();
        let prefix = scope.key_for_path(&key);
        assert_eq!(check_key(&prefix, scope), Ok(()), "{raw:?} -> {prefix:?}");
        assert!(key.starts_with(&prefix));
    }
});
