//! Disk faults under the real binary (README "What is guaranteed", point 3;
//! docs/RELIABILITY.md): a disk that fills up during group commit, a data
//! dir that is read-only at start, a store file truncated or corrupted
//! between runs.
//!
//! The faults are real file systems: each gateway runs in a mount namespace
//! of its own (`unshare -m`) where its data dir is a small tmpfs or a
//! read-only bind mount, so that nothing on the machine is touched. The
//! test reaches into that namespace through `/proc/PID/root`.

#[path = "../support/mod.rs"]
mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::*;

/// The gateway, run as `unshare -m sh -c SCRIPT sh BIN ARGS...`: `SCRIPT`
/// prepares the mounts, then execs the binary (same pid).
fn in_own_mounts(script: &str) -> Vec<String> {
    vec![
        "unshare".into(),
        "-m".into(),
        "sh".into(),
        "-c".into(),
        format!("{script} && exec \"$@\""),
        "sh".into(),
    ]
}

/// A fence key with a long path, so that each new fence grows the store.
fn long_key(i: usize) -> String {
    format!("/full/{}/{i}", "x".repeat(1000))
}

/// Writes `path` until the file system is full; returns the bytes written.
fn fill(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    let mut written = 0;
    while let Ok(n) = file.write(&chunk) {
        if n == 0 {
            break;
        }
        written += n as u64;
    }
    let _ = file.sync_all();
    written
}

#[test]
fn a_full_disk_refuses_new_raises_with_503_and_recovers_when_space_returns() {
    let backend = Backend::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let dir_text = dir.display().to_string();
    let wrapper = in_own_mounts(&format!("mount -t tmpfs -o size=4m tmpfs '{dir_text}'"));
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let url = backend.url();
    let gw = GatewayProcess::start_full(
        &wrapper,
        &["--upstream", &url, "--data-dir", &dir_text],
        &[],
    );
    assert_eq!(gw.put(&long_key(0), 7).status, 200);

    // Fill what is left of the gateway's tmpfs, from outside.
    let inside = PathBuf::from(format!("/proc/{}/root{dir_text}", gw.pid()));
    let filler = inside.join("filler");
    let written = fill(&filler);
    assert!(
        written > 0,
        "nothing could be written to {}",
        filler.display()
    );

    let mut refused = None;
    for i in 1..3000 {
        let resp = gw.put(&long_key(i), 7);
        match resp.status {
            200 => continue,
            503 => {
                assert_eq!(
                    resp.json()["error"],
                    "fence_store_unavailable",
                    "{}",
                    resp.text()
                );
                refused = Some(i);
                break;
            }
            other => panic!("raise {i}: {other} {}", resp.text()),
        }
    }
    let refused = refused.expect("no raise was refused with the disk full");
    assert!(
        backend.records_for(&long_key(refused)).is_empty(),
        "a raise that could not be made durable reached the backend"
    );
    assert_eq!(gw.admin_get("/readyz").status, 503);
    assert_eq!(
        gw.fence(&long_key(refused)),
        None,
        "a failed raise was remembered"
    );
    // A token already durable needs no write: still forwarded.
    assert_eq!(gw.put(&long_key(0), 7).status, 200);
    // Stale tokens are refused as ever.
    assert_eq!(gw.put(&long_key(0), 6).status, 409);

    std::fs::remove_file(&filler).unwrap();
    assert!(
        wait_until(HANG_GUARD, || gw.admin_get("/readyz").status == 200),
        "the store did not recover once the disk had room: {}",
        gw.stderr()
    );
    assert_eq!(gw.put(&long_key(refused), 7).status, 200);
    assert_eq!(gw.fence(&long_key(refused)), Some(7));
}

/// Runs the binary in its own mounts with `script`, to exit (bounded).
fn run_in_own_mounts(script: &str, args: &[&str]) -> std::process::Output {
    let wrapper = in_own_mounts(script);
    Command::new("timeout")
        .arg("20")
        .args(&wrapper)
        .arg(BIN)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn assert_one_line_start_error(output: &std::process::Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_read_only_data_dir_is_one_clear_line_at_start() {
    let backend = Backend::start();
    let url = backend.url();
    let tmp = tempfile::tempdir().unwrap();
    // Empty, and holding the store of an earlier run.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let used = tmp.path().join("used");
    {
        let mut gw =
            GatewayProcess::in_front_of(&backend, &["--data-dir", &used.display().to_string()]);
        assert_eq!(gw.put("/ro", 5).status, 200);
        gw.sigterm();
        assert!(gw.wait_exit(HANG_GUARD).success());
    }
    for dir in [&empty, &used] {
        let d = dir.display().to_string();
        let output = run_in_own_mounts(
            &format!("mount --bind '{d}' '{d}' && mount -o remount,bind,ro '{d}'"),
            &["--upstream", &url, "--data-dir", &d],
        );
        assert_one_line_start_error(&output, "Read-only file system");
    }
}

#[test]
fn a_store_truncated_between_runs_is_a_start_error_never_an_empty_table() {
    let backend = Backend::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = dir.display().to_string();
    write_fences_and_stop(&backend, &d, "/t", false);
    let store = dir.join("fences.redb");
    let len = std::fs::metadata(&store).unwrap().len();
    for keep in [len / 2, 4096, 100] {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&store)
            .unwrap();
        file.set_len(keep).unwrap();
        drop(file);
        let output = start_on(&d, backend.url());
        assert_one_line_start_error(&output, "cannot open fence store");
    }
}

/// Fences `PREFIX/0` to `PREFIX/49` at token 9 in the store in `data_dir`,
/// then stops the gateway: with SIGTERM (a clean stop), or `killed` with
/// SIGKILL.
fn write_fences_and_stop(backend: &Backend, data_dir: &str, prefix: &str, killed: bool) {
    let mut gw = GatewayProcess::in_front_of(backend, &["--data-dir", data_dir]);
    for i in 0..50 {
        assert_eq!(gw.put(&format!("{prefix}/{i}"), 9).status, 200);
    }
    if killed {
        gw.kill9();
    } else {
        gw.sigterm();
        assert!(gw.wait_exit(HANG_GUARD).success());
    }
}

/// The gateway on the store in `data_dir`, run until it exits (a start
/// error is expected; `timeout` ends it if it does start).
fn start_on(data_dir: &str, upstream: String) -> std::process::Output {
    Command::new("timeout")
        .arg("20")
        .arg(BIN)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--upstream", &upstream, "--data-dir", data_dir])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Flips a byte inside the newest commit slot of the redb file at `store`
/// (header: 9 bytes of magic, then the "god byte" whose bit 0 names the
/// newest of the two 128-byte commit slots at offsets 64 and 192).
fn corrupt_newest_commit(store: &Path) {
    let mut bytes = std::fs::read(store).unwrap();
    let newest = usize::from(bytes[9] & 1);
    bytes[64 + 128 * newest + 60] ^= 0xff;
    std::fs::write(store, bytes).unwrap();
}

#[test]
fn a_store_whose_newest_commit_is_corrupted_is_a_start_error_never_a_roll_back() {
    let backend = Backend::start();
    // After a clean stop and after kill -9: in neither case may the store
    // fall back to the commit before the newest, forgetting tokens it had
    // acknowledged.
    for killed in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let d = dir.display().to_string();
        write_fences_and_stop(&backend, &d, "/c", killed);
        let store = dir.join("fences.redb");
        let intact = std::fs::read(&store).unwrap();
        corrupt_newest_commit(&store);
        let output = start_on(&d, backend.url());
        assert_one_line_start_error(&output, "Primary is corrupted");
        // The same file uncorrupted holds every fence.
        std::fs::write(&store, intact).unwrap();
        let gw = GatewayProcess::in_front_of(&backend, &["--data-dir", &d]);
        for i in 0..50 {
            assert_eq!(gw.fence(&format!("/c/{i}")), Some(9), "killed: {killed}");
        }
    }
}
