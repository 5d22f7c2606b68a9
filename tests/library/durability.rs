//! The durable fence table (`Fences::open`, feature `disk`, redb): reopen,
//! group commit, corrupt stores, and `kill -9` in the middle of admissions.

#![cfg(feature = "disk")]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencegate::store::{RedbStore, StoreError};
use fencegate::{Fences, StaleReason};

#[path = "../support/mod.rs"]
mod support;
use support::rng::Rng;

fn open_err(dir: &Path) -> StoreError {
    match Fences::open(dir) {
        Ok(fences) => panic!(
            "opening {} must fail, got a table with {} fences",
            dir.display(),
            fences.len()
        ),
        Err(error) => error,
    }
}

#[tokio::test]
async fn reopen_restores_every_fence() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::from_env_or_clock();
    let mut keys: Vec<String> = (0..200).map(|i| format!("/bucket/{i}/obj")).collect();
    keys.extend(
        [
            "/",
            "/a b",
            "/caf\u{e9}",
            "orders-table",
            "lock:with:colons",
            "/zero",
        ]
        .map(String::from),
    );
    keys.push(format!("/{}", "x".repeat(300)));
    let mut last = BTreeMap::new();
    {
        let fences = Fences::open(dir.path()).unwrap();
        assert!(fences.is_durable());
        assert!(fences.is_empty());
        for key in &keys {
            let mut token = if key == "/zero" { 0 } else { rng.below(1000) };
            for _ in 0..1 + rng.below(6) {
                drop(fences.admit(key, token).await.unwrap());
                // Equal tokens and stale ones must not change what is stored.
                drop(fences.admit(key, token).await.unwrap());
                if token > 0 {
                    let stale = fences.admit(key, token - 1).await.unwrap_err();
                    assert_eq!(stale.stale().unwrap().reason, StaleReason::BelowHighest);
                }
                last.insert(key.clone(), token);
                token += 1 + rng.below(1 << 40);
            }
        }
        // The largest token survives too.
        drop(fences.admit("/max", u64::MAX).await.unwrap());
        last.insert("/max".into(), u64::MAX);
        let stats = fences.store_stats();
        eprintln!("reopen: {stats:?}");
        assert!(stats.raises >= last.len() as u64);
    }
    let fences = Fences::open(dir.path()).unwrap();
    // Nothing is loaded at start (fences are read when named): the file
    // holds them all.
    assert_eq!(fences.len(), 0);
    assert_eq!(fences.stored_len(), Some(last.len() as u64));
    for (key, &token) in &last {
        assert_eq!(fences.highest(key), Some(token), "{key}");
    }
    let listed: BTreeMap<String, u64> = fences.list("", usize::MAX).into_iter().collect();
    assert_eq!(listed, last);
    // Restored fences behave as fences: below is refused, equal goes.
    let (key, token) = last.iter().find(|&(_, &t)| t > 0).unwrap();
    let stale = fences.admit(key, token - 1).await.unwrap_err();
    assert_eq!(stale.stale().unwrap().highest, *token);
    drop(fences.admit(key, *token).await.unwrap());
    // Nothing was re-persisted for an equal token already durable.
    assert_eq!(fences.store_stats().raises, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_raises_on_one_key_store_the_maximum() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::from_env_or_clock();
    let tokens: Vec<u64> = (0..500).map(|_| rng.below(1_000_000)).collect();
    let max = *tokens.iter().max().unwrap();
    {
        let fences = Fences::open(dir.path()).unwrap();
        let handles: Vec<_> = tokens
            .iter()
            .map(|&token| {
                let fences = fences.clone();
                tokio::spawn(async move { fences.admit("/one", token).await.map(drop) })
            })
            .collect();
        for handle in handles {
            // Admitted, below highest or overtaken; never a store error.
            if let Err(error) = handle.await.unwrap() {
                assert!(error.stale().is_some(), "{error}");
            }
        }
        assert_eq!(fences.highest("/one"), Some(max));
    }
    let fences = Fences::open(dir.path()).unwrap();
    assert_eq!(fences.highest("/one"), Some(max));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_commit_shares_commits() {
    const N: u64 = 2000;
    let dir = tempfile::tempdir().unwrap();
    let fences = Fences::open(dir.path()).unwrap();
    let handles: Vec<_> = (0..N)
        .map(|i| {
            let fences = fences.clone();
            tokio::spawn(async move {
                let guard = fences.admit(&format!("/g/{i}"), i + 1).await.unwrap();
                drop(guard);
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
    let stats = fences.store_stats();
    eprintln!(
        "group commit: {} raises in {} commits, {:.1} raises per commit",
        stats.raises,
        stats.commits,
        stats.raises as f64 / stats.commits.max(1) as f64
    );
    assert_eq!(stats.raises, N);
    assert!(stats.commits >= 1 && stats.commits <= stats.raises);
    drop(fences);
    let fences = Fences::open(dir.path()).unwrap();
    assert_eq!(fences.stored_len(), Some(N));
    for i in 0..N {
        assert_eq!(fences.highest(&format!("/g/{i}")), Some(i + 1));
    }
}

#[test]
fn garbage_store_is_an_error_not_an_empty_table() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(7);
    let garbage: Vec<u8> = (0..64 * 1024).map(|_| rng.next() as u8).collect();
    std::fs::write(dir.path().join(RedbStore::FILE_NAME), &garbage).unwrap();
    let error = open_err(dir.path());
    assert!(matches!(error, StoreError::Open { .. }), "{error:?}");
    eprintln!("garbage: {error}");
    // The file was not replaced by a fresh database either.
    assert_eq!(
        std::fs::read(dir.path().join(RedbStore::FILE_NAME)).unwrap(),
        garbage
    );

    // Text, as if someone wrote over it.
    std::fs::write(dir.path().join(RedbStore::FILE_NAME), b"hello, world\n").unwrap();
    let error = open_err(dir.path());
    assert!(matches!(error, StoreError::Open { .. }), "{error:?}");
}

#[tokio::test]
async fn store_with_a_corrupt_header_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let fences = Fences::open(dir.path()).unwrap();
        for i in 0..100 {
            drop(fences.admit(&format!("/k/{i}"), 10).await.unwrap());
        }
    }
    let path = dir.path().join(RedbStore::FILE_NAME);
    let mut bytes = std::fs::read(&path).unwrap();
    let mut rng = Rng(11);
    let header = 4096.min(bytes.len());
    for b in &mut bytes[..header] {
        *b = rng.next() as u8;
    }
    std::fs::write(&path, &bytes).unwrap();
    let error = open_err(dir.path());
    assert!(matches!(error, StoreError::Open { .. }), "{error:?}");
}

#[test]
fn store_path_that_is_not_a_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    // The data dir is a regular file.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let error = open_err(&file);
    assert!(matches!(error, StoreError::Open { .. }), "{error:?}");
    eprintln!("file as dir: {error}");
    // The data dir sits below a regular file.
    let error = open_err(&file.join("below"));
    assert!(matches!(error, StoreError::Open { .. }), "{error:?}");
    // The database file is a directory.
    let dir2 = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir2.path().join(RedbStore::FILE_NAME)).unwrap();
    let error = open_err(dir2.path());
    assert!(matches!(error, StoreError::Open { .. }), "{error:?}");
}

#[test]
fn open_creates_missing_directories() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b/c");
    let fences = Fences::open(&nested).unwrap();
    assert!(fences.is_empty());
    assert!(nested.join(RedbStore::FILE_NAME).is_file());
}

#[test]
fn second_open_of_an_open_store_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let first = Fences::open(dir.path()).unwrap();
    let error = open_err(dir.path());
    assert!(matches!(error, StoreError::Open { .. }), "{error:?}");
    drop(first);
    // Once closed, it opens again.
    drop(Fences::open(dir.path()).unwrap());
}

#[tokio::test]
async fn the_store_never_lowers_a_fence() {
    use fencegate::store::FenceStore;

    let dir = tempfile::tempdir().unwrap();
    {
        let store = RedbStore::open(dir.path()).unwrap();
        // One after the other, in separate commits.
        store.claim("/a", 10).await.unwrap();
        store.claim("/a", 5).await.unwrap();
        // Queued together (likely one commit), lower last.
        let (high, low) = (store.claim("/b", 10), store.claim("/b", 5));
        high.await.unwrap();
        low.await.unwrap();
        store.claim("/c", 0).await.unwrap();
        store.claim("/c", u64::MAX).await.unwrap();
        store.claim("/c", 1).await.unwrap();
    }
    let store = RedbStore::open(dir.path()).unwrap();
    let mut loaded = BTreeMap::new();
    store
        .load(&mut |key, highest| {
            loaded.insert(key.to_owned(), highest);
        })
        .unwrap();
    let want: BTreeMap<String, u64> = [("/a", 10), ("/b", 10), ("/c", u64::MAX)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    assert_eq!(loaded, want);
}

#[tokio::test]
async fn close_commits_pending_raises_then_refuses_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    {
        let fences = Fences::open(dir.path()).unwrap();
        drop(fences.admit("/c", 5).await.unwrap());
        fences.close();
        // A raise after close cannot be made durable: a store error (503),
        // never a silent admission.
        let error = fences.admit("/c", 6).await.unwrap_err();
        assert!(
            matches!(error, fencegate::AdmitError::Store(StoreError::Closed)),
            "{error:?}"
        );
        // 6 was never admitted: the fence is 5 or (conservatively) 6, never
        // lower than what is durable.
        let highest = fences.highest("/c");
        assert!(matches!(highest, Some(5 | 6)), "{highest:?}");
        // A token already durable needs no store: equal goes, lower is stale.
        if highest == Some(5) {
            drop(fences.admit("/c", 5).await.unwrap());
        }
        let stale = fences.admit("/c", 4).await.unwrap_err();
        assert_eq!(stale.stale().unwrap().reason, StaleReason::BelowHighest);
        fences.close(); // idempotent
    }
    let fences = Fences::open(dir.path()).unwrap();
    assert_eq!(fences.highest("/c"), Some(5));
}

#[test]
fn close_releases_the_database_file() {
    // `FenceStore::close` is documented to release "file locks, threads".
    let dir = tempfile::tempdir().unwrap();
    let first = Fences::open(dir.path()).unwrap();
    first.close();
    let second = Fences::open(dir.path());
    assert!(
        second.is_ok(),
        "reopen after close while the closed table is alive: {:?}",
        second.err()
    );
    drop(first);
}

// ---------------------------------------------------------------------------
// kill -9
// ---------------------------------------------------------------------------

const CHILD_ENV: &str = "FENCEGATE_KILL9_CHILD";
/// The test the child process runs: the parent itself, which takes the
/// child's part when `FENCEGATE_KILL9_CHILD` is set.
const CHILD_TEST: &str = "kill9_never_forgets_an_admitted_token";
const CHILD_KEYS: usize = 4;
const CHILD_TASKS_PER_KEY: usize = 2;

/// The child process of [`kill9_never_forgets_an_admitted_token`]: admits
/// tokens on a durable table in `dir` and reports each admission, until it
/// is killed.
fn kill9_child(dir: std::ffi::OsString) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let fences = Fences::open(&dir).unwrap();
        let mut tasks = Vec::new();
        for k in 0..CHILD_KEYS {
            let key = format!("/kill9/{k}");
            // Continue above whatever the previous rounds left.
            let next = Arc::new(AtomicU64::new(fences.highest(&key).unwrap_or(0)));
            for _ in 0..CHILD_TASKS_PER_KEY {
                let (fences, key, next) = (fences.clone(), key.clone(), Arc::clone(&next));
                tasks.push(tokio::spawn(async move {
                    // Bounded, so that an orphaned child cannot run forever.
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while Instant::now() < deadline {
                        let token = next.fetch_add(1, Ordering::Relaxed) + 1;
                        if let Ok(guard) = fences.admit(&key, token).await {
                            // Reported only once admit returned, i.e. once the
                            // raise is durable; the guard is dropped after.
                            let mut out = std::io::stdout().lock();
                            writeln!(out, "admitted {key} {token}").unwrap();
                            out.flush().unwrap();
                            drop(out);
                            drop(guard);
                        }
                    }
                }));
            }
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
}

/// Records a child's `admitted KEY TOKEN` line as (lowest, highest) per key.
/// Only whole lines count: a line cut by the kill proves nothing.
fn record(line: &str, this_round: &mut BTreeMap<String, (u64, u64)>) -> bool {
    let Some(line) = line.strip_suffix('\n') else {
        return false;
    };
    let Some(rest) = line.strip_prefix("admitted ") else {
        return false;
    };
    let (key, token) = rest.rsplit_once(' ').expect("admitted KEY TOKEN");
    let token: u64 = token.parse().unwrap();
    let entry = this_round.entry(key.to_owned()).or_insert((token, token));
    entry.0 = entry.0.min(token);
    entry.1 = entry.1.max(token);
    true
}

#[test]
fn kill9_never_forgets_an_admitted_token() {
    use std::os::unix::process::ExitStatusExt;

    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        kill9_child(dir);
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::from_env_or_clock();
    let exe = std::env::current_exe().unwrap();
    // Highest reported per key over all rounds.
    let mut reported: BTreeMap<String, u64> = BTreeMap::new();
    let started = Instant::now();
    for round in 0..5 {
        let mut child = Command::new(&exe)
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let kill_after = 1 + rng.below(120) as usize;
        let mut this_round: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        let mut lines = 0;
        let mut line = String::new();
        while lines < kill_after {
            line.clear();
            if stdout.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if record(&line, &mut this_round) {
                lines += 1;
            }
        }
        assert_eq!(
            lines, kill_after,
            "round {round}: the child ended before it was killed"
        );
        if rng.below(2) == 0 {
            std::thread::sleep(Duration::from_millis(rng.below(20)));
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(9), "round {round}: {status:?}");
        // What the child printed before it died counts too.
        let mut late = 0;
        loop {
            line.clear();
            if stdout.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if record(&line, &mut this_round) {
                late += 1;
            }
        }

        let fences = Fences::open(dir.path()).unwrap();
        for (key, &(first, last)) in &this_round {
            let stored = fences.highest(key);
            assert!(
                stored >= Some(last),
                "round {round}: {key} admitted {last} but stored {stored:?} after kill -9"
            );
            if let Some(&before) = reported.get(key) {
                assert!(
                    first > before,
                    "round {round}: {key} admitted {first} again after {before}"
                );
            }
            reported.insert(key.clone(), last);
        }
        for (key, &token) in &reported {
            assert!(fences.highest(key) >= Some(token), "{key}");
        }
        eprintln!(
            "round {round}: killed after {lines} + {late} lines; stored {:?}",
            fences.list("/kill9/", 10)
        );
        drop(fences);
    }
    assert!(!reported.is_empty());
    eprintln!("kill -9: 5 rounds in {:?}", started.elapsed());
}
