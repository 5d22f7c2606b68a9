//! The charts of docs/BENCHMARKS.md are drawn by `scripts/bench/charts.py`
//! from what `scripts/bench.sh` writes: run here on a committed sample of
//! such results (`tests/data/bench-sample`), every chart must be produced
//! as an SVG whose text names every series it draws and the commit given.
//!
//! Needs the Python environment `scripts/install-deps.sh` makes
//! (matplotlib).

#[path = "../support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::process::Command;

#[test]
fn every_chart_is_drawn_and_names_its_series() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(support::moto::venv().join("bin/python"))
        .arg(root.join("scripts/bench/charts.py"))
        .arg(root.join("tests/data/bench-sample"))
        .arg(out.path())
        .arg("abc1234")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "charts.py failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let charts: [(&str, &[&str]); 5] = [
        (
            "throughput.svg",
            &[
                "backend alone",
                "nginx proxy_pass",
                "fencegate (memory)",
                "fencegate (disk)",
                "fencegate (etcd)",
                "W1 fenced PUTs",
                "W3 GETs",
            ],
        ),
        (
            "latency.svg",
            &["backend alone", "nginx proxy_pass", "fencegate (etcd)"],
        ),
        (
            "cpu.svg",
            &["nginx proxy_pass", "fencegate (memory)", "fencegate (disk)"],
        ),
        (
            "bulk.svg",
            &[
                "direct to the store",
                "nginx proxy_pass",
                "fencegate",
                "1 GiB PUT",
                "1 GiB GET",
            ],
        ),
        (
            "costs.svg",
            &[
                "TLS to clients",
                "TLS to the backend",
                "access log",
                "token trust (--token-issuer)",
                "chained writes",
                "custody, S3 (SigV4)",
                "custody, Azure (Shared Key)",
            ],
        ),
    ];
    for (name, series) in charts {
        let path = out.path().join(name);
        let svg = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{name} was not drawn ({e}): {}",
                String::from_utf8_lossy(&run.stdout)
            )
        });
        assert!(
            svg.starts_with("<?xml") && svg.contains("<svg"),
            "{name} is no SVG"
        );
        assert!(
            svg.contains("commit abc1234"),
            "{name} does not name the commit"
        );
        for s in series {
            assert!(svg.contains(s), "{name} does not name {s:?}");
        }
    }
}

/// Without the results of a part, its chart is skipped and said so; the
/// others are still drawn.
#[test]
fn a_part_not_run_leaves_its_chart_out() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = tempfile::tempdir().unwrap();
    std::fs::copy(
        root.join("tests/data/bench-sample/results.tsv"),
        src.path().join("results.tsv"),
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(support::moto::venv().join("bin/python"))
        .arg(root.join("scripts/bench/charts.py"))
        .arg(src.path())
        .arg(out.path())
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.path().join("throughput.svg").exists());
    assert!(!out.path().join("bulk.svg").exists());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("no bulk.tsv"), "{stderr}");
}
