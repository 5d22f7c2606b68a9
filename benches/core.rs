//! Micro-benchmarks of the fencing core: token parsing, key normalisation,
//! admission (uncontended, contended on one key, spread over many keys) and
//! durable commits with and without concurrency (group commit).
//!
//! `cargo bench --bench core`; `cargo bench --bench core -- admission` for one group.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fencegate::fences::Admission;
use fencegate::key::{normalize_path, Scope};
use fencegate::token::parse_token_value;
use fencegate::Fences;

fn token_and_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse");
    group.bench_function("token_short", |b| {
        b.iter(|| parse_token_value(black_box(b"34")))
    });
    group.bench_function("token_max", |b| {
        b.iter(|| parse_token_value(black_box(b" 18446744073709551615 ")))
    });
    group.bench_function("normalize_plain", |b| {
        b.iter(|| normalize_path(black_box("/bucket/2024/11/report.csv")))
    });
    group.bench_function("normalize_hostile", |b| {
        b.iter(|| normalize_path(black_box("//bucket/./x/../2024/%31%31/report%2ecsv/")))
    });
    let scope: Scope = "prefix:1".parse().unwrap_or_default();
    group.bench_function("prefix_key", |b| {
        b.iter(|| scope.key_for_path(black_box("/bucket/2024/11/report.csv")))
    });
    group.finish();
}

fn admission(c: &mut Criterion) {
    let current = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("admission");

    let fences = Fences::in_memory();
    group.bench_function("uncontended_steady_token", |b| {
        b.to_async(&current)
            .iter(|| async { drop(fences.admit("/bucket/obj", 7).await) })
    });

    let keys: Vec<String> = (0..1000).map(|i| format!("/bucket/obj-{i}")).collect();
    let next = AtomicU64::new(0);
    group.bench_function("many_keys_steady_token", |b| {
        b.to_async(&current).iter(|| async {
            let i = next.fetch_add(1, Ordering::Relaxed) as usize % keys.len();
            drop(fences.admit(&keys[i], 7).await)
        })
    });

    let raising = AtomicU64::new(0);
    group.bench_function("uncontended_new_highest_memory", |b| {
        b.to_async(&current).iter(|| async {
            let token = raising.fetch_add(1, Ordering::Relaxed);
            drop(fences.admit("/bucket/raised", token).await)
        })
    });

    // Writes that reach beyond their path (fences/many.rs): a plain key once
    // a subtree fence exists somewhere (every admission then looks at the
    // subtrees above its key), a two-key MOVE, and a collection DELETE over
    // 100 fences. Compare with `uncontended_steady_token` of the same run.
    let with_subtrees = Fences::in_memory();
    current.block_on(async {
        let subtree = ["/elsewhere".to_owned(), "/elsewhere/".to_owned()];
        drop(with_subtrees.admit_all(&subtree, Admission::new(1)).await);
        for i in 0..100 {
            drop(with_subtrees.admit(&format!("/dir/obj-{i}"), 7).await);
        }
    });
    group.bench_function("steady_token_with_subtrees", |b| {
        b.to_async(&current)
            .iter(|| async { drop(with_subtrees.admit("/bucket/obj", 7).await) })
    });
    let moving = ["/bucket/a".to_owned(), "/bucket/b".to_owned()];
    group.bench_function("two_keys_steady_token", |b| {
        b.to_async(&current)
            .iter(|| async { drop(with_subtrees.admit_all(&moving, Admission::new(7)).await) })
    });
    let collection = ["/dir".to_owned(), "/dir/".to_owned()];
    group.bench_function("subtree_of_100_fences", |b| {
        b.to_async(&current).iter(|| async {
            drop(
                with_subtrees
                    .admit_all(&collection, Admission::new(7))
                    .await,
            )
        })
    });

    // 64 tasks admitting the same token on one key at once, on 2 threads.
    let shared = Arc::new(Fences::in_memory());
    group.throughput(Throughput::Elements(64));
    group.bench_function("contended_one_key_x64", |b| {
        b.to_async(&multi).iter(|| {
            let shared = Arc::clone(&shared);
            async move {
                let tasks: Vec<_> = (0..64)
                    .map(|_| {
                        let shared = Arc::clone(&shared);
                        tokio::spawn(async move { drop(shared.admit("/hot", 9).await) })
                    })
                    .collect();
                for task in tasks {
                    let _ = task.await;
                }
            }
        })
    });
    group.finish();
}

fn durable(c: &mut Criterion) {
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let fences = Fences::open(dir.path()).expect("store");
    let mut group = c.benchmark_group("durable");
    group.sample_size(20);

    let token = AtomicU64::new(1);
    group.bench_function("one_raise_per_fsync", |b| {
        b.to_async(&multi).iter(|| async {
            let t = token.fetch_add(1, Ordering::Relaxed);
            drop(fences.admit("/serial", t).await)
        })
    });

    // 64 concurrent raises on distinct keys: group commit should make this
    // cost a few fsyncs, not 64.
    group.throughput(Throughput::Elements(64));
    let before = fences.store_stats();
    let round = AtomicU64::new(1);
    group.bench_function("concurrent_raises_x64", |b| {
        b.iter_batched(
            || round.fetch_add(1, Ordering::Relaxed),
            |t| {
                multi.block_on(async {
                    let tasks: Vec<_> = (0..64)
                        .map(|k| {
                            let fences = fences.clone();
                            tokio::spawn(
                                async move { drop(fences.admit(&format!("/k{k}"), t).await) },
                            )
                        })
                        .collect();
                    for task in tasks {
                        let _ = task.await;
                    }
                })
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
    let after = fences.store_stats();
    let (raises, commits) = (after.raises - before.raises, after.commits - before.commits);
    eprintln!(
        "durable/concurrent_raises_x64: {raises} raises in {commits} commits ({:.1} raises per fsync)",
        raises as f64 / commits.max(1) as f64
    );
}

criterion_group!(benches, token_and_key, admission, durable);
criterion_main!(benches);
