//! Bad configuration: the binary exits non-zero with exactly one line on
//! stderr, never a panic or a backtrace. Also the accepted spellings.

#[path = "../support/mod.rs"]
mod support;

use std::net::TcpListener;

use support::{
    run_on_free_ports, run_on_free_ports_with_env, run_to_exit, Finished, GatewayProcess,
};

fn assert_one_line_failure(what: &str, out: &Finished) {
    assert!(
        !out.status.success(),
        "{what}: exited successfully: {out:?}"
    );
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: expected exactly one line on stderr, got:\n{}",
        out.stderr
    );
    assert!(!lines[0].trim().is_empty(), "{what}: empty error line");
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE", "stack backtrace"] {
        assert!(
            !out.stderr.contains(bad),
            "{what}: {bad} in {:?}",
            out.stderr
        );
    }
    assert!(
        !out.stdout.contains("listening on"),
        "{what}: started anyway: {}",
        out.stdout
    );
}

/// The gateway with its data plane on `data`, admin plane on `admin` and
/// data dir `dir`, run to its exit.
fn run_on(data: &str, admin: &str, dir: &str) -> Finished {
    run_to_exit(
        &["--listen", data, "--admin-listen", admin, "--data-dir", dir],
        &[],
    )
}

#[test]
fn unparsable_upstream() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().display().to_string();
    for url in [
        "not a url",
        "localhost:9000",
        "ftp://example.com",
        "https://",
        "http://",
        "http://user:pw@host:1",
        "http://127.0.0.1:1/base?x=1",
        "",
    ] {
        let out = run_on_free_ports(&["--upstream", url, "--data-dir", &dir]);
        assert_one_line_failure(&format!("--upstream {url:?}"), &out);
    }
    let out =
        run_on_free_ports_with_env(&["--data-dir", &dir], &[("FENCEGATE_UPSTREAM", "ftp://x")]);
    assert_one_line_failure("FENCEGATE_UPSTREAM=ftp://x", &out);
}

#[test]
fn bad_scope_state_timeout_header_and_addresses() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().display().to_string();
    let cases: &[&[&str]] = &[
        &["--scope", "prefix:0"],
        &["--scope", "prefix:"],
        &["--scope", "prefix:-1"],
        &["--scope", "prefix:x"],
        &["--scope", "bucket"],
        &["--scope", ""],
        &["--state", "tape"],
        &["--upstream-timeout", "-1"],
        &["--upstream-timeout", "0"],
        &["--upstream-timeout", "soon"],
        &["--token-header", "bad header"],
        &["--token-header", ""],
        &["--no-such-option"],
    ];
    for case in cases {
        let mut args: Vec<&str> = case.to_vec();
        args.extend(["--data-dir", &dir]);
        let out = run_on_free_ports(&args);
        assert_one_line_failure(&format!("{case:?}"), &out);
    }
    for (flag, value) in [
        ("--listen", "nowhere"),
        ("--admin-listen", "127.0.0.1:99999"),
    ] {
        let out = run_to_exit(&[flag, value, "--data-dir", &dir], &[]);
        assert_one_line_failure(&format!("{flag} {value}"), &out);
    }
    let out = run_on_free_ports_with_env(&["--data-dir", &dir], &[("FENCEGATE_SCOPE", "prefix:0")]);
    assert_one_line_failure("FENCEGATE_SCOPE=prefix:0", &out);
}

#[test]
fn port_in_use() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().display().to_string();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run_on(&addr, "127.0.0.1:0", &dir);
    assert_one_line_failure("data port in use", &out);
    assert!(
        out.stderr.contains(&addr),
        "names the address: {}",
        out.stderr
    );
    let out = run_on("127.0.0.1:0", &addr, &dir);
    assert_one_line_failure("admin port in use", &out);
    // Both planes on one port.
    let port = support::dead_port();
    let same = format!("127.0.0.1:{port}");
    let out = run_on(&same, &same, &dir);
    assert_one_line_failure("data and admin on one port", &out);
}

#[test]
fn data_dir_that_is_a_regular_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let file = file.display().to_string();
    // With the embedded backend and with an upstream.
    let out = run_on_free_ports(&["--data-dir", &file]);
    assert_one_line_failure("--data-dir is a file", &out);
    let out = run_on_free_ports(&["--data-dir", &file, "--upstream", "http://127.0.0.1:9"]);
    assert_one_line_failure("--data-dir is a file (upstream)", &out);
    // A data dir below a file.
    let below = format!("{file}/sub");
    let out = run_on_free_ports(&["--data-dir", &below]);
    assert_one_line_failure("--data-dir below a file", &out);
}

#[test]
fn corrupt_fence_store() {
    for garbage in [
        &b"this is not a redb database"[..],
        &[0u8; 4096][..],
        &[0xffu8; 10_000][..],
    ] {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("fences.redb"), garbage).unwrap();
        let dir = tmp.path().display().to_string();
        let out = run_on_free_ports(&["--data-dir", &dir]);
        assert_one_line_failure("garbage fences.redb", &out);
        // Never silently reset: the file is still the garbage.
        assert_eq!(
            std::fs::read(tmp.path().join("fences.redb")).unwrap(),
            garbage,
            "the corrupt store was overwritten"
        );
    }
    // A directory where the store file should be.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("fences.redb")).unwrap();
    let dir = tmp.path().display().to_string();
    let out = run_on_free_ports(&["--data-dir", &dir]);
    assert_one_line_failure("fences.redb is a directory", &out);
}

#[test]
fn unreadable_data_dir() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("locked");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::read_dir(&dir).is_ok() {
        // root ignores permissions: nothing to test black-box.
        eprintln!("SKIPPED: running as root, permissions are not enforced");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        return;
    }
    let out = run_on_free_ports(&["--data-dir", &dir.display().to_string()]);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_one_line_failure("unreadable data dir", &out);
}

#[test]
fn help_and_version_succeed() {
    let out = run_to_exit(&["--help"], &[]);
    assert!(out.status.success());
    for option in [
        "--listen",
        "--admin-listen",
        "--upstream",
        "--data-dir",
        "--state",
        "--token-header",
        "--scope",
        "--allow-unfenced-writes",
        "--upstream-timeout",
    ] {
        assert!(out.stdout.contains(option), "--help lacks {option}");
    }
    let out = run_to_exit(&["--version"], &[]);
    assert!(out.status.success());
    assert!(out.stdout.contains("fencegate"));
}

#[test]
fn serve_subcommand_and_defaults() {
    // `fencegate serve [OPTIONS]` is the same as `fencegate [OPTIONS]`.
    let gw = GatewayProcess::start(&["serve"]);
    assert!((200..300).contains(&gw.put("/s", 1).status));
    // The embedded backend's quick-start line.
    assert!(
        gw.wait_stdout("curl", support::HANG_GUARD),
        "{:?}",
        gw.stdout()
    );
    // The data dir is created with the store inside.
    assert!(gw.data_dir().join("fences.redb").exists());
}

#[test]
fn fractional_upstream_timeout_is_accepted() {
    let gw = GatewayProcess::start(&[
        "--upstream-timeout",
        "0.25",
        "--upstream",
        "http://127.0.0.1:9",
    ]);
    assert_eq!(gw.admin_get("/healthz").status, 200);
}

/// `fencegate` with no arguments: embedded backend, `./fencegate-data`,
/// 127.0.0.1:8080 and :8081, one curl hint. Skipped if those ports are busy.
#[test]
fn no_arguments_starts_a_working_gateway_with_the_defaults() {
    use std::io::BufRead;
    for port in [8080, 8081] {
        if TcpListener::bind(("127.0.0.1", port)).is_err() {
            eprintln!("SKIPPED: port {port} is busy");
            return;
        }
    }
    let cwd = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(support::BIN);
    command
        .current_dir(cwd.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    for (key, _) in std::env::vars() {
        if key.starts_with("FENCEGATE_") {
            command.env_remove(key);
        }
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = std::time::Instant::now() + support::HANG_GUARD;
    while lines.len() < 3 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => break,
        }
    }
    let data: std::net::SocketAddr = "127.0.0.1:8080".parse().unwrap();
    let resp = support::try_http(
        data,
        "PUT",
        "/demo/object",
        &[("X-Fencing-Token", "34")],
        b"v2",
    );
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        lines.contains(&"data plane listening on 127.0.0.1:8080".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"admin plane listening on 127.0.0.1:8081".to_string()),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.contains("curl")), "{lines:?}");
    assert!((200..300).contains(&resp.unwrap().status));
    assert!(cwd
        .path()
        .join("fencegate-data")
        .join("fences.redb")
        .exists());
}

/// A port above 65535 is no port: the URL cannot be used, so the gateway
/// must refuse to start rather than answer 502 to every request.
#[test]
fn upstream_with_an_out_of_range_port_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().display().to_string();
    let mut command = std::process::Command::new(support::BIN);
    command
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--data-dir",
            &dir,
            "--upstream",
            "http://127.0.0.1:99999",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    // Give it a moment to fail; a gateway that starts is then killed.
    let exited = support::wait_until(std::time::Duration::from_secs(3), || {
        child.try_wait().unwrap().is_some()
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        panic!("--upstream http://127.0.0.1:99999 was accepted: the gateway started");
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
