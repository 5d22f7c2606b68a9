//! How the cost of fences grows with their number, in `--state disk`
//! with the fence cache (`Fences::open`): run by `scripts/bench/growth.sh`,
//! which adds the gateway's own figures (start-up, RSS under W1, req/s).
//!
//! ```sh
//! cargo run --release --example fence_growth -- fill DIR 10000000
//! cargo run --release --example fence_growth -- probe DIR 10000000
//! ```
//!
//! - `fill DIR N`: writes N fences (`/g/object-000000000` ..., 19-byte keys,
//!   fence of key `i` is `i + 1`) straight into the redb file, in
//!   transactions of a million rows without an fsync each (one at the
//!   end): a filler, not a measure of admission. Prints the file's bytes.
//! - `probe DIR N [SAMPLES]`: in a fresh process, times `Fences::open`
//!   (nothing is loaded but subtree fences), then admissions of a *hot*
//!   key (in memory) and of *cold* keys (random, in the file only, each
//!   admitted with its own highest so that no fsync is timed), with the
//!   kernel's page cache warm, and, where the process may drop it
//!   (`/proc/sys/vm/drop_caches`, root), cold. Prints one `key=value`
//!   line: seconds to open, RSS after opening and after the probes,
//!   latency percentiles in microseconds.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use fencegate::store::RedbStore;
use fencegate::Fences;
use redb::{Database, Durability, TableDefinition};

/// The fence table of `RedbStore`'s file (its layout is the store's own;
/// the filler writes the same table, after the store created the others).
const FENCES: TableDefinition<'static, &str, u64> = TableDefinition::new("fences");
const ROWS_PER_TRANSACTION: usize = 1_000_000;

fn key(i: usize) -> String {
    format!("/g/object-{i:09}")
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

fn fill(dir: &Path, n: usize) -> Result<(), String> {
    let started = Instant::now();
    // The store makes its tables (and marks the file indexed) first.
    RedbStore::open(dir).map_err(|e| e.to_string())?.close();
    let db = Database::create(dir.join(RedbStore::FILE_NAME)).map_err(|e| e.to_string())?;
    for start in (0..n).step_by(ROWS_PER_TRANSACTION) {
        let mut txn = db.begin_write().map_err(|e| e.to_string())?;
        let last = start + ROWS_PER_TRANSACTION >= n;
        txn.set_durability(if last {
            Durability::Immediate
        } else {
            Durability::None
        })
        .map_err(|e| e.to_string())?;
        {
            let mut table = txn.open_table(FENCES).map_err(|e| e.to_string())?;
            for i in start..n.min(start + ROWS_PER_TRANSACTION) {
                table
                    .insert(key(i).as_str(), i as u64 + 1)
                    .map_err(|e| e.to_string())?;
            }
        }
        txn.commit().map_err(|e| e.to_string())?;
    }
    drop(db);
    let bytes = std::fs::metadata(dir.join(RedbStore::FILE_NAME))
        .map_err(|e| e.to_string())?
        .len();
    println!(
        "phase=fill fences={n} seconds={:.1} file_bytes={bytes}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The `p`-th percentile of sorted `samples`, in microseconds.
fn percentile(samples: &[Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let at = ((samples.len() - 1) as f64 * p).round() as usize;
    samples[at].as_secs_f64() * 1e6
}

/// A small deterministic generator: the same cold keys each run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

async fn admit_each(fences: &Fences, keys: &[usize]) -> Result<Vec<Duration>, String> {
    let mut samples = Vec::with_capacity(keys.len());
    for &i in keys {
        let started = Instant::now();
        let admitted = fences.admit(&key(i), i as u64 + 1).await;
        samples.push(started.elapsed());
        drop(admitted.map_err(|e| format!("{}: {e}", key(i)))?);
    }
    samples.sort_unstable();
    Ok(samples)
}

fn drop_page_cache() -> bool {
    // A plain write to procfs, refused unless root.
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok()
}

fn probe(dir: &Path, n: usize, samples: usize) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    let before = status_bytes("VmRSS");
    let started = Instant::now();
    let fences = Fences::open(dir).map_err(|e| e.to_string())?;
    let open_seconds = started.elapsed().as_secs_f64();
    let opened = status_bytes("VmRSS");
    let mut line = format!(
        "phase=probe fences={n} open_seconds={open_seconds:.4} rss_before={before} rss_opened={opened}"
    );
    runtime.block_on(async {
        let hot = admit_each(&fences, &vec![0; samples]).await?;
        line += &format!(
            " hot_p50_us={:.2} hot_p99_us={:.2}",
            percentile(&hot, 0.5),
            percentile(&hot, 0.99)
        );
        let mut lcg = Lcg(0x5eed);
        let cold: Vec<usize> = (0..samples).map(|_| lcg.below(n.max(1))).collect();
        // Warm: read the pages once (each key's pages come into the
        // kernel's cache), then let them leave the table's memory again by
        // probing on a fresh table.
        drop(admit_each(&fences, &cold).await?);
        fences.close();
        drop(fences);
        let fences = Fences::open(dir).map_err(|e| e.to_string())?;
        let warm = admit_each(&fences, &cold).await?;
        line += &format!(
            " cold_warm_p50_us={:.2} cold_warm_p99_us={:.2}",
            percentile(&warm, 0.5),
            percentile(&warm, 0.99)
        );
        fences.close();
        drop(fences);
        if drop_page_cache() {
            let fences = Fences::open(dir).map_err(|e| e.to_string())?;
            let mut lcg = Lcg(0xc01d);
            let cold: Vec<usize> = (0..samples).map(|_| lcg.below(n.max(1))).collect();
            let unwarmed = admit_each(&fences, &cold).await?;
            line += &format!(
                " cold_disk_p50_us={:.2} cold_disk_p99_us={:.2}",
                percentile(&unwarmed, 0.5),
                percentile(&unwarmed, 0.99)
            );
            fences.close();
        }
        Ok::<(), String>(())
    })?;
    line += &format!(
        " rss_after={} hwm={}",
        status_bytes("VmRSS"),
        status_bytes("VmHWM")
    );
    println!("{line}");
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |at: usize, default: usize| {
        args.get(at)
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(default)
    };
    let result = match (args.first().map(String::as_str), args.get(1)) {
        (Some("fill"), Some(dir)) => fill(Path::new(dir), number(2, 1_000_000)),
        (Some("probe"), Some(dir)) => {
            probe(Path::new(dir), number(2, 1_000_000), number(3, 20_000))
        }
        _ => Err("usage: fence_growth fill|probe DIR N [SAMPLES]".to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fence_growth: {error}");
            ExitCode::FAILURE
        }
    }
}
