//! What a fence costs at rest: resident memory per fence with 1 M fences in
//! the table, and the time to reopen a durable store of 1 M fences. Run by
//! `scripts/bench.sh`; the numbers go to `docs/BENCHMARKS.md`.
//!
//! ```sh
//! cargo run --release --example fence_footprint            # 1,000,000 fences
//! cargo run --release --example fence_footprint -- 100000  # fewer
//! ```
//!
//! Each measurement runs in a fresh child process (this same binary with a
//! phase argument), so that one phase's freed memory, which the allocator
//! may keep, never shows up in the next one's RSS:
//!
//! 1. `memory N`: `Fences::in_memory()`, N admissions on N distinct keys
//!    (`/bucket/object-0000000`, 22 bytes), each guard dropped at once;
//!    VmRSS before and after, and VmHWM (the peak, which includes the
//!    table's last resize).
//! 2. `build DIR N`: writes N fences into a redb store through
//!    `RedbStore::persist`, queued 100,000 at a time so that group commit
//!    packs up to 4,096 raises per fsync (one raise per fsync would take
//!    N fsyncs).
//! 3. `reopen DIR N`: times `Fences::with_store(RedbStore::open(DIR))`
//!    (open the database, read every row, fill the table) and reports
//!    VmRSS after it: the whole table in memory, as `--state memory` or an
//!    unbounded table holds it (`--state disk` reads fences on demand:
//!    `examples/fence_growth.rs`).
//!
//! Output: one `key=value` line per phase, then a summary.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use fencegate::store::{FenceStore, RedbStore};
use fencegate::Fences;

const DEFAULT_FENCES: usize = 1_000_000;
/// Raises queued before waiting for them, while building the store.
const BUILD_CHUNK: usize = 100_000;

fn key(i: usize) -> String {
    format!("/bucket/object-{i:07}")
}

/// A `/proc/self/status` field in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime")
}

fn phase_memory(n: usize) -> Result<(), String> {
    // Build every key first, so that the measured growth is the table's.
    let keys: Vec<String> = (0..n).map(key).collect();
    let before = status_bytes("VmRSS");
    let fences = Fences::in_memory();
    runtime().block_on(async {
        for (i, key) in keys.iter().enumerate() {
            let guard = fences.admit(key, i as u64 + 1).await;
            drop(guard.map_err(|e| e.to_string())?);
        }
        Ok::<(), String>(())
    })?;
    let after = status_bytes("VmRSS");
    let peak = status_bytes("VmHWM");
    if fences.len() != n {
        return Err(format!("expected {n} fences, found {}", fences.len()));
    }
    println!(
        "phase=memory fences={n} key_bytes={} rss_before={before} rss_after={after} hwm={peak}",
        key(0).len()
    );
    Ok(())
}

fn phase_build(dir: &Path, n: usize) -> Result<(), String> {
    let started = Instant::now();
    let store = RedbStore::open(dir).map_err(|e| e.to_string())?;
    runtime().block_on(async {
        for chunk_start in (0..n).step_by(BUILD_CHUNK) {
            // `claim` queues the raise when called; awaiting only collects
            // the answers, so the writer sees the whole chunk at once.
            let pending: Vec<_> = (chunk_start..n.min(chunk_start + BUILD_CHUNK))
                .map(|i| store.claim(&key(i), i as u64 + 1))
                .collect();
            for raise in pending {
                raise.await.map_err(|e| e.to_string())?;
            }
        }
        Ok::<(), String>(())
    })?;
    let stats = store.stats();
    store.close();
    let file = dir.join(RedbStore::FILE_NAME);
    let size = std::fs::metadata(&file).map_err(|e| e.to_string())?.len();
    println!(
        "phase=build fences={n} seconds={:.3} commits={} file_bytes={size}",
        started.elapsed().as_secs_f64(),
        stats.commits
    );
    Ok(())
}

fn phase_reopen(dir: &Path, n: usize) -> Result<(), String> {
    let before = status_bytes("VmRSS");
    let started = Instant::now();
    // The whole table loaded, as `--state disk` did before the fence
    // cache (now `Fences::open` loads nothing: examples/fence_growth.rs).
    let fences = Fences::with_store(RedbStore::open(dir).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let seconds = started.elapsed().as_secs_f64();
    let after = status_bytes("VmRSS");
    if fences.len() != n || fences.highest(&key(n - 1)) != Some(n as u64) {
        return Err(format!(
            "reopened {} fences, expected {n} with the last at {n}",
            fences.len()
        ));
    }
    println!("phase=reopen fences={n} seconds={seconds:.3} rss_before={before} rss_after={after}");
    fences.close();
    Ok(())
}

/// Runs one phase in a child process and parses its `key=value` line.
fn child(args: &[&str]) -> Result<BTreeMap<String, String>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let output = Command::new(exe)
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    if !output.status.success() {
        return Err(format!(
            "phase {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(stdout
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

fn number(fields: &BTreeMap<String, String>, name: &str) -> f64 {
    fields.get(name).and_then(|v| v.parse().ok()).unwrap_or(0.0)
}

fn orchestrate(n: usize) -> Result<(), String> {
    let count = n.to_string();
    let memory = child(&["memory", &count])?;
    let per_fence = (number(&memory, "rss_after") - number(&memory, "rss_before")) / n as f64;
    let peak_per_fence = (number(&memory, "hwm") - number(&memory, "rss_before")) / n as f64;

    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().to_str().ok_or("temp dir is not UTF-8")?;
    let build = child(&["build", path, &count])?;
    let reopen = child(&["reopen", path, &count])?;
    let reopen_per_fence =
        (number(&reopen, "rss_after") - number(&reopen, "rss_before")) / n as f64;

    println!(
        "SUMMARY fences={n} bytes_per_fence={per_fence:.0} peak_bytes_per_fence={peak_per_fence:.0} \
         reopen_seconds={:.3} reopen_bytes_per_fence={reopen_per_fence:.0} \
         store_file_bytes_per_fence={:.0} build_seconds={:.1} build_commits={}",
        number(&reopen, "seconds"),
        number(&build, "file_bytes") / n as f64,
        number(&build, "seconds"),
        number(&build, "commits"),
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let count = |at: usize| {
        args.get(at)
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_FENCES)
    };
    let result = match args.first().map(String::as_str) {
        Some("memory") => phase_memory(count(1)),
        Some("build") if args.len() > 1 => phase_build(Path::new(&args[1]), count(2)),
        Some("reopen") if args.len() > 1 => phase_reopen(Path::new(&args[1]), count(2)),
        _ => orchestrate(count(0)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fence_footprint: {error}");
            ExitCode::FAILURE
        }
    }
}
