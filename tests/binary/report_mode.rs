//! `--enforce report`: the first day in front of production. Admission
//! runs and raises fences as under `on`, but nothing is refused for fencing
//! reasons: every request is forwarded, and each one `on` would have
//! refused is an outcome of its own (`would_refuse`, with the reason) in
//! the access log, `fencegate_would_refuse_total` and an INFO line.
//! `--enforce off` forwards without fencing.

#[path = "../support/mod.rs"]
mod support;

use support::{http, Backend, GatewayProcess, HANG_GUARD};

#[test]
fn report_mode_forwards_what_on_refuses_and_says_why() {
    let backend = Backend::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("access.log");
    let gw = GatewayProcess::in_front_of(
        &backend,
        &[
            "--enforce",
            "report",
            "--access-log",
            &log.display().to_string(),
        ],
    );
    let addr = gw.data_addr();
    let put = |path: &str, headers: &[(&str, &str)]| http(addr, "PUT", path, headers, b"x").status;
    assert_eq!(put("/report/a", &[("X-Fencing-Token", "34")]), 200);
    // Each of these is refused under `on`; here each reaches the backend.
    assert_eq!(put("/report/a", &[("X-Fencing-Token", "33")]), 200);
    assert_eq!(put("/report/b", &[]), 200);
    assert_eq!(put("/report/c", &[("X-Fencing-Token", "0x10")]), 200);
    assert_eq!(backend.records_for("/report/a").len(), 2);
    assert_eq!(backend.records_for("/report/b").len(), 1);
    assert_eq!(backend.records_for("/report/c").len(), 1);
    // Fences are raised as under `on`, never lowered by a stale token.
    assert_eq!(gw.fence("/report/a"), Some(34));
    // A path that escapes the root is refused in every mode.
    assert_eq!(put("/report/../../x", &[("X-Fencing-Token", "1")]), 400);

    let metrics = gw.metrics();
    for reason in ["below_highest", "missing_token", "invalid_token"] {
        let series =
            format!("fencegate_would_refuse_total{{route=\"default\",reason=\"{reason}\"}}");
        assert_eq!(
            support::metric(&metrics, &series),
            Some(1.0),
            "{series}\n{metrics}"
        );
    }
    assert_eq!(support::outcome(&metrics, "would_refuse"), 3.0, "{metrics}");
    assert_eq!(support::outcome(&metrics, "stale_token"), 0.0, "{metrics}");
    assert!(
        gw.wait_stderr("would_refuse", HANG_GUARD),
        "{}",
        gw.stderr()
    );

    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        support::wait_until(HANG_GUARD, || read().lines().count() >= 5),
        "{}",
        read()
    );
    let lines: Vec<serde_json::Value> = read()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let stale = lines
        .iter()
        .find(|line| line["token"] == 33)
        .expect("the stale write's line");
    assert_eq!(stale["outcome"], "would_refuse", "{stale}");
    assert_eq!(stale["would_refuse"], "below_highest", "{stale}");
    assert_eq!(stale["status"], 200, "{stale}");
}

#[test]
fn off_forwards_without_fencing() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--enforce", "off"]);
    let addr = gw.data_addr();
    assert_eq!(
        http(addr, "PUT", "/off/a", &[("X-Fencing-Token", "34")], b"x").status,
        200
    );
    assert_eq!(
        http(addr, "PUT", "/off/a", &[("X-Fencing-Token", "33")], b"x").status,
        200
    );
    assert_eq!(http(addr, "PUT", "/off/a", &[], b"x").status, 200);
    assert_eq!(gw.fence("/off/a"), None);
    assert_eq!(backend.records_for("/off/a").len(), 3);
    let metrics = gw.metrics();
    assert_eq!(support::outcome(&metrics, "forwarded"), 3.0, "{metrics}");
}
