//! `[[route]]` tables (SPEC "Configuration file and routes"): one gateway,
//! one `--config` file, in front of three real backends at once:
//!
//! - `s3`: moto's S3 under `/fg-routes/`, `store = "s3"`,
//!   `conditional_writes = "on"` (S3's dialect: a fenced `HEAD` first, then
//!   `If-Match`), every answer of the gateway's own an S3 error document;
//! - `dav`: Apache mod_dav under `/dav/`, `store = "webdav"`,
//!   `conditional_writes = "on"` (WebDAV's dialect: the gateway's own
//!   `HEAD`), JSON answers;
//! - `logs`: the recording backend under `/logs/`, `enforce = "off"`;
//! - `a` (`/shared-x/`) and `b` (host `b.example`): the recording backend,
//!   the same paths in two fence namespaces.
//!
//! The top level's upstream is the recording backend too, so a request no
//! route takes would show up there if it were forwarded at all.

#[path = "../support/mod.rs"]
mod support;

use std::sync::OnceLock;

use support::apache::Apache;
use support::moto::{moto, S3_AUTH};
use support::*;

const BUCKET: &str = "fg-routes";
/// The collection under Apache's `/dav` this test works in.
const DAV: &str = "/dav/fg-routes";

struct Fixture {
    gw: GatewayProcess,
    backend: Backend,
    /// The configuration file's folder: the access log is in it.
    dir: std::path::PathBuf,
}

/// The one gateway of this test binary, with the configuration file of the
/// module docs; killed (its process group) once the binary exits.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let made = http(moto().addr, "PUT", &format!("/{BUCKET}"), &[S3_AUTH], b"");
        assert_eq!(made.status, 200, "CreateBucket at moto: {}", made.text());
        let apache = Apache::shared();
        apache.mkcol(DAV);
        let backend = Backend::start();
        let dir = tempfile::tempdir().unwrap().keep();
        let config = dir.join("fencegate.toml");
        std::fs::write(
            &config,
            format!(
                r#"state = "memory"
upstream = "{backend}"
access_log = "access.log"

[[route]]
name = "s3"
match = {{ path_prefix = "/{BUCKET}/" }}
upstream = "{moto}"
store = "s3"
conditional_writes = "on"

[[route]]
name = "dav"
match = {{ path_prefix = "/dav/" }}
upstream = "{apache}"
store = "webdav"
conditional_writes = "on"

[[route]]
name = "logs"
match = {{ path_prefix = "/logs/" }}
enforce = "off"

[[route]]
name = "a"
match = {{ path_prefix = "/shared-x/" }}

[[route]]
name = "b"
match = {{ host = "b.example" }}
"#,
                backend = backend.url(),
                moto = moto().url(),
                apache = apache.url(),
            ),
        )
        .unwrap();
        let data_dir = dir.join("data");
        // In a session of its own (`setsid` execs it, same pid): its
        // process group is killed once this binary exits, as the shared
        // moto and Apache are.
        let gw = GatewayProcess::start_full(
            &["setsid"],
            &[
                "--config",
                config.to_str().unwrap(),
                "--data-dir",
                data_dir.to_str().unwrap(),
            ],
            &[],
        );
        kill_group_at_exit(gw.pid(), Some(&dir));
        Fixture { gw, backend, dir }
    })
}

fn req(
    method: &str,
    target: &str,
    token: Option<u64>,
    extra: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let token = token.map(|t| t.to_string());
    let mut headers: Vec<(&str, &str)> = extra.to_vec();
    if let Some(token) = &token {
        headers.push(("X-Fencing-Token", token));
    }
    fixture().gw.req(method, target, &headers, body)
}

/// A request to the `s3` route, signed-looking for moto.
fn s3(method: &str, target: &str, token: u64, body: &[u8]) -> Resp {
    req(method, target, Some(token), &[S3_AUTH], body)
}

/// The object's bytes at moto, asked directly (`None`: absent).
fn at_moto(target: &str) -> Option<String> {
    let got = http(moto().addr, "GET", target, &[S3_AUTH], b"");
    match got.status {
        200 => Some(got.text()),
        404 => None,
        other => panic!("GET {target} at moto: {other} {}", got.text()),
    }
}

/// Asserts an S3 error document the gateway made itself: `status`, XML,
/// `<Code>code</Code>`. Returns the body.
fn assert_s3_error(resp: &Resp, status: u16, code: &str) -> String {
    let text = resp.text();
    assert_eq!(resp.status, status, "{text}");
    let content_type = resp.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("application/xml"),
        "content-type {content_type:?}: {text}"
    );
    assert!(text.contains(&format!("<Code>{code}</Code>")), "{text}");
    assert!(
        serde_json::from_str::<serde_json::Value>(&text).is_err(),
        "{text}"
    );
    text
}

#[test]
fn the_s3_route_fences_and_chains_in_s3s_dialect() {
    let target = format!("/{BUCKET}/report");
    // client-head: a write of an object whose version is unknown is 428,
    // in S3's shape, and reaches nothing.
    let unknown = s3("PUT", &target, 10, b"v0");
    assert_s3_error(&unknown, 428, "version_unknown");
    assert_eq!(at_moto(&target), None);
    // A fenced HEAD teaches the version (absent); the chained writes go.
    assert_eq!(s3("HEAD", &target, 10, b"").status, 404);
    let first = s3("PUT", &target, 10, b"v1");
    assert_eq!(first.status, 200, "{}", first.text());
    let second = s3("PUT", &target, 10, b"v2");
    assert_eq!(second.status, 200, "{}", second.text());
    assert_eq!(at_moto(&target).as_deref(), Some("v2"));

    // A write behind the gateway's back: the version the gateway chains
    // to is no longer moto's, moto refuses the next write (its If-Match
    // fails) and the gateway says version_conflict, in S3's shape.
    let behind = http(moto().addr, "PUT", &target, &[S3_AUTH], b"behind");
    assert_eq!(behind.status, 200, "{}", behind.text());
    let conflict = s3("PUT", &target, 10, b"v3");
    assert_s3_error(&conflict, 409, "version_conflict");
    assert_eq!(at_moto(&target).as_deref(), Some("behind"));

    // A stale token: 409 stale_token as an S3 error document, with the
    // highest in its header and its body.
    let stale = s3("PUT", &target, 9, b"stale");
    let body = assert_s3_error(&stale, 409, "stale_token");
    assert_eq!(stale.header("x-fencing-highest"), Some("10"), "{body}");
    assert!(body.contains("<Highest>10</Highest>"), "{body}");
    assert!(body.contains("<Token>9</Token>"), "{body}");
    assert_eq!(at_moto(&target).as_deref(), Some("behind"));
}

#[test]
fn the_dav_route_fences_and_chains_in_webdavs_dialect() {
    let apache = Apache::shared();
    fixture();
    let target = format!("{DAV}/doc");
    let dav = |method: &str, token: u64, body: &[u8]| req(method, &target, Some(token), &[], body);
    // No HEAD from the client: the gateway learns the version itself.
    let created = dav("PUT", 20, b"a");
    assert_eq!(created.status, 201, "{}", created.text());
    let rewritten = dav("PUT", 20, b"b");
    assert_eq!(rewritten.status, 204, "{}", rewritten.text());
    assert_eq!(apache.read(&target).as_deref(), Some(&b"b"[..]));
    // Before each write, the gateway's own read of the version (WebDAV's:
    // a PROPFIND of getetag) reached Apache: the chain is WebDAV's, where
    // the S3 route's would have answered 428 for want of a client's HEAD.
    let log = apache.access_log();
    let mine: Vec<&str> = log
        .iter()
        .filter(|l| l.split(' ').nth(1) == Some(target.as_str()))
        .map(|l| l.split(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(mine, ["PROPFIND", "PUT", "PROPFIND", "PUT"], "{log:?}");

    // A stale token: 409 stale_token, the JSON of the SPEC, not forwarded.
    let stale = dav("PUT", 19, b"stale");
    let json = stale.assert_gateway_error(409, "stale_token");
    assert_eq!(json["highest"], 20, "{json}");
    assert_eq!(stale.header("x-fencing-highest"), Some("20"));
    assert_eq!(apache.read(&target).as_deref(), Some(&b"b"[..]));
    let seen = apache
        .access_log()
        .iter()
        .filter(|l| l.split(' ').nth(1) == Some(target.as_str()))
        .count();
    assert_eq!(seen, mine.len(), "the stale write reached Apache");
}

#[test]
fn the_same_path_under_two_routes_has_two_fences() {
    let fx = fixture();
    let path = "/shared-x/k";
    let on_b = [("Host", "b.example")];
    // Route a (no host) raises its fence to 10.
    let a10 = req("PUT", path, Some(10), &[], b"a10");
    assert_eq!(a10.status, 200, "{}", a10.text());
    // Route b (host b.example), the same path: its own fence, so 5 goes.
    let b5 = req("PUT", path, Some(5), &on_b, b"b5");
    assert_eq!(b5.status, 200, "{}", b5.text());
    // Each namespace fences on its own.
    req("PUT", path, Some(4), &on_b, b"b4").assert_gateway_error(409, "stale_token");
    let a9 = req("PUT", path, Some(9), &[], b"a9");
    let json = a9.assert_gateway_error(409, "stale_token");
    assert_eq!(json["highest"], 10, "{json}");
    let b6 = req("PUT", path, Some(6), &on_b, b"b6");
    assert_eq!(b6.status, 200, "{}", b6.text());
    // What reached the backend: the three admitted writes, in order.
    let tokens: Vec<Option<u64>> = fx
        .backend
        .records_for(path)
        .iter()
        .map(|r| r.token_u64())
        .collect();
    assert_eq!(tokens, [Some(10), Some(5), Some(6)]);
    // The admin plane shows the default namespace only: neither fence.
    assert_eq!(fx.gw.fence(path), None);
}

#[test]
fn a_request_no_route_takes_is_404_no_route_and_reaches_no_backend() {
    let fx = fixture();
    let before_metrics = fx.gw.metrics();
    let before = outcome(&before_metrics, "no_route");
    for (method, target, host) in [
        ("PUT", "/nowhere/x", None),
        ("GET", "/nowhere/x", None),
        ("DELETE", "/nowhere/x", Some("c.example")),
        // Near misses: not under a prefix, a host that is not b's.
        ("PUT", "/logsx", None),
        ("PUT", "/shared-xy/k", Some("a.b.example")),
    ] {
        let mut headers = vec![("X-Fencing-Token", "7")];
        if let Some(host) = host {
            headers.push(("Host", host));
        }
        let resp = fx.gw.req(method, target, &headers, b"x");
        // JSON whatever the first route's dialect (here `s3`).
        assert_eq!(resp.status, 404, "{method} {target}: {}", resp.text());
        if method != "HEAD" {
            assert_eq!(
                resp.json()["error"],
                "no_route",
                "{method} {target}: {}",
                resp.text()
            );
        }
        assert!(resp.header("x-fencing-highest").is_none());
    }
    // The recording backend (the top level's upstream) saw none of them,
    // nor did Apache.
    let apache_log = Apache::shared().access_log();
    for target in ["/nowhere/x", "/logsx", "/shared-xy/k"] {
        assert!(
            fx.backend.records_for(target).is_empty(),
            "{target} was forwarded"
        );
        assert!(
            !apache_log.iter().any(|l| l.contains(target)),
            "{target} reached Apache: {apache_log:?}"
        );
    }
    let metrics = fx.gw.metrics();
    // (At least: the access log test sends one of its own meanwhile.)
    assert!(outcome(&metrics, "no_route") - before >= 5.0, "{metrics}");
}

/// A request no route takes is answered in JSON (`{"error":"no_route"}`),
/// whatever the dialect of the first route of the file (`s3` here).
#[test]
fn no_route_is_answered_in_json_whatever_the_first_route() {
    let fx = fixture();
    let resp = fx
        .gw
        .req("PUT", "/nowhere/json", &[("X-Fencing-Token", "7")], b"x");
    let json = resp.assert_gateway_error(404, "no_route");
    assert!(json["detail"].is_string(), "{json}");
}

#[test]
fn the_logs_route_forwards_without_fencing() {
    let fx = fixture();
    let path = "/logs/today";
    // No token: forwarded (a fenced route would say 428).
    let untokened = req("PUT", path, None, &[], b"line 1");
    assert_eq!(untokened.status, 200, "{}", untokened.text());
    // Tokens raise nothing: a lower one after a higher one goes too.
    assert_eq!(req("PUT", path, Some(10), &[], b"line 2").status, 200);
    assert_eq!(req("PUT", path, Some(5), &[], b"line 3").status, 200);
    assert_eq!(req("DELETE", path, None, &[], b"").status, 200);
    let records = fx.backend.records_for(path);
    let methods: Vec<&str> = records.iter().map(|r| r.method.as_str()).collect();
    assert_eq!(methods, ["PUT", "PUT", "PUT", "DELETE"]);
    assert_eq!(records[0].token, None);
    // A fenced route next to it still refuses a write without a token, and
    // a fenced write there raises a fence, logged as such.
    let fenced = req("PUT", "/shared-x/untokened", None, &[], b"x");
    fenced.assert_gateway_error(428, "missing_token");
    assert_eq!(
        req("PUT", "/shared-x/beside-logs", Some(3), &[], b"x").status,
        200
    );
    let raised = |l: &str| l.contains("fence raised") && l.contains("/shared-x/beside-logs");
    assert!(
        wait_until(HANG_GUARD, || fx.gw.stderr().lines().any(raised)),
        "{}",
        fx.gw.stderr()
    );
    // No "fence raised" line names the logs route's path.
    let stderr = fx.gw.stderr();
    assert!(
        !stderr
            .lines()
            .any(|l| l.contains("fence raised") && l.contains("/logs/")),
        "{stderr}"
    );
    // Each route's requests are counted by outcome under its name (other
    // tests share the gateway: at least these).
    let metrics = fx.gw.metrics();
    let count = |route: &str, outcome: &str| {
        let series =
            format!("fencegate_route_requests_total{{route=\"{route}\",outcome=\"{outcome}\"}}");
        metric(&metrics, &series).unwrap_or_else(|| panic!("{series} missing:\n{metrics}"))
    };
    assert!(count("logs", "forwarded") >= 4.0, "{metrics}");
    assert!(count("a", "missing_token") >= 1.0, "{metrics}");
    assert_eq!(count("logs", "stale_token"), 0.0, "{metrics}");
}

#[test]
fn every_access_log_line_names_its_route() {
    let fx = fixture();
    // One request per route, and one that no route takes.
    let sent = [
        ("s3", "GET", format!("/{BUCKET}/access-check"), None),
        ("dav", "GET", format!("{DAV}/access-check"), None),
        ("logs", "PUT", "/logs/access-check".to_owned(), None),
        ("a", "GET", "/shared-x/access-check".to_owned(), None),
        (
            "b",
            "GET",
            "/elsewhere/access-check".to_owned(),
            Some("b.example"),
        ),
        ("", "GET", "/elsewhere/access-check".to_owned(), None),
    ];
    for (route, method, target, host) in &sent {
        let mut headers = vec![S3_AUTH];
        if let Some(host) = host {
            headers.push(("Host", host));
        }
        let resp = fx.gw.req(method, target, &headers, b"");
        let expected = if route.is_empty() { 404 } else { resp.status };
        assert_eq!(resp.status, expected, "{route}: {}", resp.text());
        assert_ne!(resp.status, 502, "{route}: {}", resp.text());
    }
    let log = fx.dir.join("access.log");
    let lines = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };
    let of = |lines: &[serde_json::Value], target: &str| -> Vec<serde_json::Value> {
        lines
            .iter()
            .filter(|l| l["path"] == target)
            .cloned()
            .collect()
    };
    assert!(
        wait_until(HANG_GUARD, || {
            let lines = lines();
            of(&lines, "/elsewhere/access-check").len() == 2
                && sent.iter().all(|(_, _, t, _)| !of(&lines, t).is_empty())
        }),
        "access log {}:\n{:?}",
        log.display(),
        lines()
    );
    let lines = lines();
    for (route, _, target, _) in &sent[..4] {
        let mine = of(&lines, target);
        assert_eq!(mine.len(), 1, "{target}: {mine:?}");
        assert_eq!(mine[0]["route"], *route, "{:?}", mine[0]);
    }
    let mut elsewhere: Vec<serde_json::Value> = of(&lines, "/elsewhere/access-check")
        .iter()
        .map(|l| serde_json::json!([l["route"], l["outcome"]]))
        .collect();
    elsewhere.sort_by_key(|v| v.to_string());
    // The one no route took: outcome no_route, and no route to name.
    assert_eq!(
        elsewhere,
        [
            serde_json::json!(["b", "forwarded"]),
            serde_json::json!([null, "no_route"]),
        ]
    );
    // Every line of the log, of every test so far, has the field: a
    // route's name, or null for a request no route took.
    for line in &lines {
        match &line["route"] {
            serde_json::Value::String(name) => {
                assert!(
                    ["s3", "dav", "logs", "a", "b"].contains(&name.as_str()),
                    "{line}"
                )
            }
            serde_json::Value::Null => assert_eq!(line["outcome"], "no_route", "{line}"),
            _ => panic!("no route field: {line}"),
        }
    }
}
