//! Credential custody in front of a WebDAV store behind Basic
//! authentication (Apache httpd, mod_dav, `AuthType Basic`): clients
//! authenticate to the gateway with credentials of its own (Basic or
//! Bearer), the gateway alone holds the store's password, and every object
//! a request reaches (a `MOVE`'s destination too) is authorised.

#[path = "../support/mod.rs"]
mod support;

use std::process::Command;

use support::apache_basic::{basic, ApacheBasic};
use support::GatewayProcess;

const IDENTITIES: &str = r#"
[[identity]]
name = "team-writer"
access_key_id = "writer"
secret_file = "writer.secret"
allow = [ { prefix = "/dav/team/", access = "write" }, { prefix = "/dav/public/", access = "read" } ]

[[identity]]
name = "robot"
secret_file = "robot.token"
allow = [ { prefix = "/dav/", access = "write" } ]

[[identity]]
name = "lock-a"
access_key_id = "locka"
secret_file = "locka.secret"
allow = [ { prefix = "/dav/c6", access = "write" } ]

[[identity]]
name = "lock-b"
access_key_id = "lockb"
secret_file = "lockb.secret"
allow = [ { prefix = "/dav/c6/b/", access = "write" }, { prefix = "/dav/c6", access = "read" } ]

[[identity]]
name = "dav-admin"
secret_file = "admin.token"
allow = [ { prefix = "/", access = "admin" } ]
"#;

const WRITER_PASSWORD: &str = "writer-password-42";
const ROBOT_TOKEN: &str = "robot-bearer-token-0123456789";
const LOCK_A_PASSWORD: &str = "lock-a-password-7";
const LOCK_B_PASSWORD: &str = "lock-b-password-8";
const ADMIN_TOKEN: &str = "dav-admin-bearer-token-9876543210";

fn gateway(apache: &ApacheBasic, extra: &[&str]) -> (tempfile::TempDir, GatewayProcess) {
    gateway_for(apache, "webdav", extra)
}

/// [`gateway`] with `--store store`.
fn gateway_for(
    apache: &ApacheBasic,
    store: &str,
    extra: &[&str],
) -> (tempfile::TempDir, GatewayProcess) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("writer.secret"), WRITER_PASSWORD).unwrap();
    std::fs::write(dir.path().join("robot.token"), ROBOT_TOKEN).unwrap();
    std::fs::write(dir.path().join("locka.secret"), LOCK_A_PASSWORD).unwrap();
    std::fs::write(dir.path().join("lockb.secret"), LOCK_B_PASSWORD).unwrap();
    std::fs::write(dir.path().join("admin.token"), ADMIN_TOKEN).unwrap();
    let identities = dir.path().join("identities.toml");
    std::fs::write(&identities, IDENTITIES).unwrap();
    let credentials = apache.write_credentials(dir.path());
    let mut args = vec![
        "--upstream".to_owned(),
        apache.url(),
        "--store".to_owned(),
        store.to_owned(),
        "--upstream-credentials".to_owned(),
        credentials.display().to_string(),
        "--identities".to_owned(),
        identities.display().to_string(),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = GatewayProcess::start(&refs);
    (dir, gw)
}

/// curl, as a user would run it: `curl -u USER:PASSWORD -T FILE URL`.
fn curl_put(url: &str, user: &str, password: &str, token: u64, body: &str) -> u16 {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), body).unwrap();
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-u"])
        .arg(format!("{user}:{password}"))
        .arg("-H")
        .arg(format!("X-Fencing-Token: {token}"))
        .arg("-T")
        .arg(file.path())
        .arg(url)
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// The collections both tests write in, made once for the binary's shared
/// Apache: the tests run in parallel, in either order.
fn team_collections(apache: &ApacheBasic) {
    static MADE: std::sync::Once = std::sync::Once::new();
    MADE.call_once(|| {
        apache.mkcol("/dav/team");
        apache.mkcol("/dav/other");
    });
}

#[test]
fn curl_with_basic_goes_through_the_gateway_not_around_it() {
    let apache = ApacheBasic::shared();
    team_collections(apache);
    let (_dir, gw) = gateway(apache, &["--conditional-writes", "on"]);
    let url = format!("{}/dav/team/report.txt", gw.data_url());
    assert_eq!(curl_put(&url, "writer", WRITER_PASSWORD, 5, "v5"), 201);
    assert_eq!(
        apache.read("/dav/team/report.txt").as_deref(),
        Some(&b"v5"[..])
    );
    // Chained: the gateway's own PROPFIND is signed with the store's
    // password, and the second write carries the version it learnt.
    assert_eq!(curl_put(&url, "writer", WRITER_PASSWORD, 6, "v6"), 204);
    assert_eq!(
        apache.read("/dav/team/report.txt").as_deref(),
        Some(&b"v6"[..])
    );
    // A stale token: 409, in JSON (the webdav dialect).
    assert_eq!(curl_put(&url, "writer", WRITER_PASSWORD, 4, "late"), 409);
    // The same credentials straight to the store: unknown there.
    let direct = format!("{}/dav/team/report.txt", apache.url());
    assert_eq!(
        curl_put(&direct, "writer", WRITER_PASSWORD, 7, "direct"),
        401
    );
    assert_eq!(
        apache.read("/dav/team/report.txt").as_deref(),
        Some(&b"v6"[..])
    );
    let metrics = gw.metrics();
    assert_eq!(
        support::outcome(&metrics, "version_unknown"),
        0.0,
        "{metrics}"
    );
}

#[test]
fn bad_credentials_and_objects_outside_the_prefixes_are_refused() {
    let apache = ApacheBasic::shared();
    team_collections(apache);
    apache.mkcol("/dav/team2");
    let (_dir, gw) = gateway(apache, &[]);
    let writer = basic("writer", WRITER_PASSWORD);
    let put = |path: &str, auth: &str, token: &str| {
        gw.req(
            "PUT",
            path,
            &[("Authorization", auth), ("X-Fencing-Token", token)],
            b"x",
        )
    };
    // No credentials, a wrong password, an unknown user, an unknown token,
    // another scheme: 401 with WWW-Authenticate, never forwarded.
    for auth in [
        None,
        Some(basic("writer", "wrong")),
        Some(basic("nobody", WRITER_PASSWORD)),
        Some("Bearer not-a-token".to_owned()),
        Some("Digest username=\"writer\"".to_owned()),
    ] {
        let mut headers = vec![("X-Fencing-Token", "1")];
        if let Some(auth) = &auth {
            headers.push(("Authorization", auth.as_str()));
        }
        let resp = gw.req("PUT", "/dav/team2/a.txt", &headers, b"x");
        assert_eq!(resp.status, 401, "{auth:?}: {}", resp.text());
        assert_eq!(resp.json()["error"], "unauthenticated", "{auth:?}");
        assert!(resp.header("www-authenticate").is_some(), "{auth:?}");
        assert!(resp.header("x-fencing-highest").is_none());
    }
    assert!(!apache.exists("/dav/team2/a.txt"));
    assert_eq!(gw.fence("/dav/team2/a.txt"), None);

    assert_eq!(put("/dav/team2/../team/x.txt", &writer, "3").status, 201);
    // Outside its prefixes: 403, the object named.
    let resp = put("/dav/public/x.txt", &writer, "3");
    assert_eq!(resp.status, 403, "{}", resp.text());
    assert_eq!(resp.json()["error"], "forbidden");
    assert_eq!(resp.json()["object"], "/dav/public/x.txt");
    // A MOVE whose destination is outside them.
    apache.mkcol("/dav/team3");
    let (_dir3, gw3) = gateway(apache, &[]);
    let writer_put = gw3.req(
        "PUT",
        "/dav/team/moved.txt",
        &[("Authorization", &writer), ("X-Fencing-Token", "3")],
        b"m",
    );
    assert_eq!(writer_put.status, 201, "{}", writer_put.text());
    let resp = gw3.req(
        "MOVE",
        "/dav/team/moved.txt",
        &[
            ("Authorization", &writer),
            ("X-Fencing-Token", "4"),
            ("Destination", "/dav/team3/moved.txt"),
        ],
        b"",
    );
    assert_eq!(resp.status, 403, "{}", resp.text());
    assert_eq!(resp.json()["object"], "/dav/team3/moved.txt");
    assert!(apache.exists("/dav/team/moved.txt"));
    assert!(!apache.exists("/dav/team3/moved.txt"));
    // A COPY whose destination is outside them, and a collection DELETE
    // whose subtree reaches outside them (/dav/public/ is read-only).
    let resp = gw3.req(
        "COPY",
        "/dav/team/moved.txt",
        &[
            ("Authorization", &writer),
            ("X-Fencing-Token", "4"),
            ("Destination", "/dav/team3/copied.txt"),
        ],
        b"",
    );
    assert_eq!(resp.status, 403, "{}", resp.text());
    assert_eq!(resp.json()["object"], "/dav/team3/copied.txt");
    assert!(!apache.exists("/dav/team3/copied.txt"));
    let resp = gw3.req(
        "DELETE",
        "/dav/",
        &[("Authorization", &writer), ("X-Fencing-Token", "4")],
        b"",
    );
    assert_eq!(resp.status, 403, "{}", resp.text());
    assert_eq!(resp.json()["error"], "forbidden");
    assert!(resp.header("x-fencing-highest").is_none());
    assert!(apache.exists("/dav/team/moved.txt"));
    // A bearer identity may.
    let robot = format!("Bearer {ROBOT_TOKEN}");
    let destination = format!("http://{}/dav/team3/moved.txt", gw3.data_addr());
    let resp = gw3.req(
        "MOVE",
        "/dav/team/moved.txt",
        &[
            ("Authorization", &robot),
            ("X-Fencing-Token", "4"),
            ("Destination", &destination),
        ],
        b"",
    );
    assert_eq!(resp.status, 201, "{}", resp.text());
    assert!(apache.exists("/dav/team3/moved.txt"));
    // No secret in any log line.
    for log in [gw.stderr(), gw3.stderr()] {
        for secret in [WRITER_PASSWORD, ROBOT_TOKEN, apache.password.as_str()] {
            assert!(!log.contains(secret), "a secret in the log:\n{log}");
        }
    }
    let metrics = gw.metrics();
    assert!(all_series(&metrics, "unauthenticated") >= 5.0, "{metrics}");
    assert!(all_series(&metrics, "forbidden") >= 1.0, "{metrics}");
}

/// The sum of `fencegate_requests_total` for `outcome` over every identity
/// (and none).
fn all_series(metrics: &str, outcome: &str) -> f64 {
    let prefix = format!("fencegate_requests_total{{outcome=\"{outcome}\"");
    metrics
        .lines()
        .filter(|line| line.starts_with(&prefix))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `--anonymous-clients`: a request with no credentials may read (or, with
/// `write`, write, after a warning at start), signed with the store's
/// password; a bad credential is never taken as anonymous.
#[test]
fn anonymous_clients_read_or_write_as_told() {
    let apache = ApacheBasic::shared();
    team_collections(apache);
    let (_dir, gw) = gateway(apache, &["--anonymous-clients", "read"]);
    let writer = basic("writer", WRITER_PASSWORD);
    let put = gw.req(
        "PUT",
        "/dav/team/anon.txt",
        &[("Authorization", &writer), ("X-Fencing-Token", "1")],
        b"a",
    );
    assert!(matches!(put.status, 201 | 204), "{}", put.text());
    let read = gw.req("GET", "/dav/team/anon.txt", &[], b"");
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(read.text(), "a");
    let write = gw.req(
        "PUT",
        "/dav/team/anon.txt",
        &[("X-Fencing-Token", "2")],
        b"anonymous",
    );
    assert_eq!(write.status, 403, "{}", write.text());
    assert_eq!(write.json()["error"], "forbidden");
    let wrong = basic("writer", "wrong");
    let bad = gw.req(
        "GET",
        "/dav/team/anon.txt",
        &[("Authorization", &wrong)],
        b"",
    );
    assert_eq!(bad.status, 401, "{}", bad.text());
    assert_eq!(
        apache.read("/dav/team/anon.txt").as_deref(),
        Some(&b"a"[..])
    );

    let (_dir, open) = gateway(apache, &["--anonymous-clients", "write"]);
    assert!(
        open.stderr().contains("WARN") && open.stderr().contains("anonymous"),
        "{}",
        open.stderr()
    );
    let write = open.req(
        "PUT",
        "/dav/team/anon.txt",
        &[("X-Fencing-Token", "3")],
        b"anonymous",
    );
    assert!(matches!(write.status, 201 | 204), "{}", write.text());
    assert_eq!(
        apache.read("/dav/team/anon.txt").as_deref(),
        Some(&b"anonymous"[..])
    );
}

/// The store refusing the gateway's own password (changed on disk, read
/// again without a signal): 502 `upstream_credentials_rejected`, none of
/// Apache's answer and no `WWW-Authenticate`; put right, writes go on.
#[test]
fn a_store_refusing_the_gateways_password_is_a_502() {
    let apache = ApacheBasic::shared();
    team_collections(apache);
    let (dir, gw) = gateway(apache, &[]);
    let writer = basic("writer", WRITER_PASSWORD);
    let put = |token: &str| {
        gw.req(
            "PUT",
            "/dav/team/rejected.txt",
            &[("Authorization", &writer), ("X-Fencing-Token", token)],
            b"r",
        )
    };
    let first = put("1");
    assert!(matches!(first.status, 201 | 204), "{}", first.text());
    let password = dir.path().join("upstream-password");
    std::fs::write(&password, "not-the-stores-password").unwrap();
    let mut refused = None;
    assert!(
        support::wait_until(std::time::Duration::from_secs(20), || {
            let resp = put("2");
            let done = resp.status == 502;
            refused = Some(resp);
            done
        }),
        "{}",
        gw.stderr()
    );
    let refused = refused.unwrap();
    assert_eq!(refused.json()["error"], "upstream_credentials_rejected");
    assert!(refused.header("www-authenticate").is_none());
    let text = refused.text().to_lowercase();
    assert!(
        !text.contains("<html") && !text.contains("apache"),
        "{text}"
    );
    std::fs::write(&password, &apache.password).unwrap();
    assert!(
        support::wait_until(std::time::Duration::from_secs(20), || {
            matches!(put("3").status, 201 | 204)
        }),
        "{}",
        gw.stderr()
    );
}

/// Under custody each access-log line names who sent the request: the
/// identity's name, and `null` for a request that did not authenticate.
#[test]
fn the_access_log_names_the_identity() {
    let apache = ApacheBasic::shared();
    team_collections(apache);
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("access.log");
    let (_dir, gw) = gateway(apache, &["--access-log", log.to_str().unwrap()]);
    let writer = basic("writer", WRITER_PASSWORD);
    let put = gw.req(
        "PUT",
        "/dav/team/logged.txt",
        &[("Authorization", &writer), ("X-Fencing-Token", "1")],
        b"l",
    );
    assert!(matches!(put.status, 201 | 204), "{}", put.text());
    let wrong = basic("writer", "wrong");
    let refused = gw.req(
        "GET",
        "/dav/team/logged.txt",
        &[("Authorization", &wrong)],
        b"",
    );
    assert_eq!(refused.status, 401);
    let mut lines = Vec::new();
    assert!(
        support::wait_until(std::time::Duration::from_secs(10), || {
            lines = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .collect();
            lines.len() >= 2
        }),
        "{lines:?}"
    );
    let of = |method: &str| {
        lines
            .iter()
            .find(|l| l["method"] == method)
            .unwrap_or_else(|| panic!("no {method} line: {lines:?}"))
    };
    assert_eq!(of("PUT")["identity"], "team-writer", "{lines:?}");
    assert!(of("GET")["identity"].is_null(), "{lines:?}");
    assert_eq!(of("GET")["outcome"], "unauthenticated", "{lines:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    for secret in [
        WRITER_PASSWORD,
        &writer["Basic ".len()..],
        &wrong["Basic ".len()..],
    ] {
        assert!(
            !text.contains(secret),
            "a credential in the access log:\n{text}"
        );
    }
}

/// Azure/WebDAV issue, class 8: behind Apache with `AllowEncodedSlashes
/// NoDecode`, an encoded slash is no separator to Apache. A path the
/// gateway would decode and normalise across it (`/dav/other/..%2Fteam`
/// read as `/dav/team`, inside team-writer's prefix) is a directory
/// named `..%2Fteam` inside `/dav/other` to Apache. Under custody an
/// encoded slash is refused 400 `invalid_path`, nothing forwarded.
#[test]
fn class8_an_encoded_slash_apache_keeps_literal_is_refused_under_custody() {
    let apache = ApacheBasic::start_configured("AllowEncodedSlashes NoDecode\n");
    apache.mkcol("/dav/team");
    apache.mkcol("/dav/other");
    let auth = apache.authorization();
    let store_auth = [(auth.0, auth.1.as_str())];
    // At Apache, with the store's password: the name is literal, inside
    // /dav/other.
    let proof = support::http(
        apache.addr(),
        "MKCOL",
        "/dav/other/..%2Fproof",
        &store_auth,
        b"",
    );
    assert_eq!(proof.status, 201, "MKCOL at Apache: {}", proof.text());
    let entries: Vec<String> = std::fs::read_dir(apache.on_disk("/dav/other"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].contains("proof"), "{entries:?}");

    let (_dir, gw) = gateway(&apache, &[]);
    let writer = basic("writer", WRITER_PASSWORD);
    let as_writer = [("Authorization", writer.as_str()), ("X-Fencing-Token", "5")];
    for (method, target) in [
        ("MKCOL", "/dav/other/..%2Fteam"),
        ("PUT", "/dav/other/..%2Fteam/x"),
        ("PUT", "/dav/other/..%2fteam/x"),
        ("PUT", "/dav/team/a%2Fb"),
    ] {
        let resp = gw.req(method, target, &as_writer, b"escaped");
        let json = resp.assert_gateway_error(400, "invalid_path");
        assert!(json["detail"].is_string(), "{method} {target}: {json}");
    }
    let after: Vec<String> = std::fs::read_dir(apache.on_disk("/dav/other"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(after, entries, "something reached /dav/other");
    // Apache's log: the proof, and nothing through the gateway.
    let reached = apache.requests("MKCOL", "/dav/other/..%2Fproof");
    assert_eq!(reached.len(), 1, "{:?}", apache.access_log());
    assert!(
        apache.requests("PUT", "/dav").is_empty(),
        "{:?}",
        apache.access_log()
    );
    assert!(apache.requests("MKCOL", "/dav/other/..%2Fteam").is_empty());
}

/// Fences beyond memory: `--new-fence-rate` bounds the new fences each
/// identity makes (writes to keys that have none yet), so that no client
/// fills the table; past the burst, 429 `new_fence_limit` with
/// `Retry-After`, nothing forwarded; writes to fenced keys and other
/// identities never count; `/metrics` counts the refusals per identity.
#[test]
fn new_fences_are_limited_per_identity() {
    let apache = ApacheBasic::shared();
    team_collections(apache);
    let (_dir, gw) = gateway(apache, &["--new-fence-rate", "1", "--new-fence-burst", "3"]);
    let writer = basic("writer", WRITER_PASSWORD);
    let robot = format!("Bearer {ROBOT_TOKEN}");
    let put = |auth: &str, path: &str, token: u64| {
        let token = token.to_string();
        gw.req(
            "PUT",
            path,
            &[("Authorization", auth), ("X-Fencing-Token", &token)],
            b"limited",
        )
    };
    for i in 0..3 {
        let resp = put(&writer, &format!("/dav/team/limit-{i}"), 5);
        assert!(
            resp.status == 201 || resp.status == 204,
            "{i}: {}",
            resp.text()
        );
    }
    let resp = put(&writer, "/dav/team/limit-3", 5);
    let json = resp.assert_gateway_error(429, "new_fence_limit");
    assert_eq!(resp.header("retry-after"), Some("1"), "{json}");
    assert!(
        json["detail"].as_str().unwrap().contains("team-writer"),
        "{json}"
    );
    assert_eq!(
        apache.read("/dav/team/limit-3"),
        None,
        "a refused write reached the store"
    );
    // A fenced key never counts; another identity has its own bucket.
    let resp = put(&writer, "/dav/team/limit-0", 6);
    assert!(resp.status == 201 || resp.status == 204, "{}", resp.text());
    let resp = put(&robot, "/dav/other/limit-robot", 5);
    assert!(resp.status == 201 || resp.status == 204, "{}", resp.text());
    let metrics = gw.metrics();
    assert_eq!(all_series(&metrics, "new_fence_limit"), 1.0, "{metrics}");
    assert!(
        metrics.contains("outcome=\"new_fence_limit\",identity=\"team-writer\"")
            || metrics.contains("identity=\"team-writer\",outcome=\"new_fence_limit\""),
        "{metrics}"
    );
    // A second later the bucket holds one more.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let resp = put(&writer, "/dav/team/limit-3", 5);
    assert!(resp.status == 201 || resp.status == 204, "{}", resp.text());
}

/// Deny by default under custody (docs/WEBDAV_OPERATIONS.md): a request no
/// row of the store's table takes (a method of the other dialect, a
/// WebDAV field its row does not read) is refused 501 `not_implemented`,
/// naming what was not understood, whoever sends it; nothing reaches the
/// store and nothing is fenced.
#[test]
fn what_no_row_of_the_table_takes_is_refused_under_custody() {
    let apache = ApacheBasic::shared();
    team_collections(apache);
    let robot = format!("Bearer {ROBOT_TOKEN}");
    let refused = |gw: &GatewayProcess, method: &str, path: &str, extra: &[(&str, &str)]| {
        let mut headers = vec![("Authorization", robot.as_str()), ("X-Fencing-Token", "5")];
        headers.extend_from_slice(extra);
        let resp = gw.req(method, path, &headers, b"x");
        assert_eq!(resp.status, 501, "{method} {extra:?}: {}", resp.text());
        let json = resp.json();
        assert_eq!(json["error"], "not_implemented", "{json}");
        assert!(
            !json["detail"].as_str().unwrap_or_default().is_empty(),
            "{json}"
        );
        assert_eq!(gw.fence(path), None, "{method} {extra:?} made a fence");
    };
    let (_dir, gw) = gateway(apache, &[]);
    refused(&gw, "PATCH", "/dav/team/patched.txt", &[]);
    refused(
        &gw,
        "PUT",
        "/dav/team/put-with-destination.txt",
        &[("Destination", "/dav/public/elsewhere.txt")],
    );
    refused(
        &gw,
        "UNLOCK",
        "/dav/team/unlocked.txt",
        &[("Depth", "infinity")],
    );
    assert!(!apache.exists("/dav/team/patched.txt"));
    assert!(!apache.exists("/dav/team/put-with-destination.txt"));
    assert!(!apache.exists("/dav/public/elsewhere.txt"));
    // The same store named a plain HTTP store: WebDAV's methods and fields
    // are not its operations, reads included.
    let (_http_dir, http) = gateway_for(apache, "http", &[]);
    refused(&http, "MKCOL", "/dav/team/made-by-mkcol", &[]);
    refused(&http, "PROPFIND", "/dav/team/", &[("Depth", "1")]);
    refused(
        &http,
        "PUT",
        "/dav/team/put-with-if.txt",
        &[("If", "(<urn:x>)")],
    );
    assert!(!apache.exists("/dav/team/made-by-mkcol"));
    assert!(!apache.exists("/dav/team/put-with-if.txt"));
    // What a row takes still goes through.
    let resp = http.req(
        "PUT",
        "/dav/team/plain.txt",
        &[("Authorization", robot.as_str()), ("X-Fencing-Token", "5")],
        b"x",
    );
    assert!(matches!(resp.status, 200..=204), "{}", resp.text());
}

/// A `LOCK` request's body: an exclusive write lock.
const LOCKINFO: &[u8] = br#"<?xml version="1.0" encoding="utf-8"?>
<D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype><D:owner>fencegate test</D:owner></D:lockinfo>"#;

/// `auth` locks `path` through `gw` with `depth`; the lock token handed
/// out (the `Lock-Token` field, without its angle brackets) and the
/// answer's body.
fn lock(gw: &GatewayProcess, auth: &str, path: &str, depth: &str) -> (String, String) {
    let resp = gw.req(
        "LOCK",
        path,
        &[
            ("Authorization", auth),
            ("X-Fencing-Token", "7"),
            ("Depth", depth),
            ("Timeout", "Second-600"),
            ("Content-Type", "application/xml"),
        ],
        LOCKINFO,
    );
    assert!(
        matches!(resp.status, 200 | 201),
        "LOCK {path}: {} {}",
        resp.status,
        resp.text()
    );
    let token = resp
        .header("lock-token")
        .unwrap_or_else(|| panic!("LOCK {path}: no Lock-Token: {}", resp.text()))
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .to_owned();
    (token, resp.text())
}

/// A `PUT` straight to Apache with the store's password and no `If`:
/// 423 while a lock covers `path` (Apache answers 207 with a 423 inside
/// for a lock on a collection above it, reported here as 423).
fn direct_put(apache: &ApacheBasic, path: &str) -> u16 {
    let auth = apache.authorization();
    let resp = support::http(apache.addr(), "PUT", path, &[(auth.0, &auth.1)], b"direct");
    if resp.status == 207 && resp.text().contains("423 Locked") {
        return 423;
    }
    resp.status
}

/// The lock tokens Apache itself shows for `path` (`lockdiscovery`, asked
/// with the store's password).
fn store_tokens(apache: &ApacheBasic, path: &str) -> Vec<String> {
    let auth = apache.authorization();
    let body = br#"<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:prop><D:lockdiscovery/></D:prop></D:propfind>"#;
    let resp = support::http(
        apache.addr(),
        "PROPFIND",
        path,
        &[(auth.0, &auth.1), ("Depth", "0")],
        body,
    );
    assert_eq!(resp.status, 207, "{}", resp.text());
    let text = resp.text();
    text.split("<D:href>")
        .skip(1)
        .filter_map(|rest| rest.split_once("</D:href>"))
        .map(|(href, _)| href.trim().to_owned())
        .filter(|href| href.starts_with("opaquelocktoken:"))
        .collect()
}

/// WebDAV issue, class 6: every identity reaches Apache as one user, so
/// Apache cannot tell whose lock token a request carries. One identity
/// (robot) must not remove another's (team-writer's) lock with its token:
/// refused 403 `forbidden`, nothing forwarded, the lock still there at
/// Apache.
#[test]
fn class6_an_identity_cannot_unlock_anothers_lock() {
    let apache = ApacheBasic::shared();
    team_collections(apache);
    let (_dir, gw) = gateway(apache, &[]);
    let writer = basic("writer", WRITER_PASSWORD);
    let robot = format!("Bearer {ROBOT_TOKEN}");
    let path = "/dav/team/c6-unlock.txt";
    let (token, _) = lock(&gw, &writer, path, "0");
    let coded = format!("<{token}>");
    let resp = gw.req(
        "UNLOCK",
        path,
        &[
            ("Authorization", &robot),
            ("X-Fencing-Token", "7"),
            ("Lock-Token", &coded),
        ],
        b"",
    );
    resp.assert_gateway_error(403, "forbidden");
    assert!(resp.header("x-fencing-highest").is_none());
    assert_eq!(direct_put(apache, path), 423, "the lock was removed");
    assert!(
        apache.requests("UNLOCK", path).is_empty(),
        "{:?}",
        apache.access_log()
    );
    // Its holder may.
    let resp = gw.req(
        "UNLOCK",
        path,
        &[
            ("Authorization", &writer),
            ("X-Fencing-Token", "7"),
            ("Lock-Token", &coded),
        ],
        b"",
    );
    assert_eq!(resp.status, 204, "{}", resp.text());
}

/// Class 6: one identity must not write under another's lock with its
/// token in `If`, in either of the list forms (untagged and tagged).
#[test]
fn class6_an_identity_cannot_write_with_anothers_lock_token() {
    let apache = ApacheBasic::shared();
    team_collections(apache);
    let (_dir, gw) = gateway(apache, &[]);
    let writer = basic("writer", WRITER_PASSWORD);
    let robot = format!("Bearer {ROBOT_TOKEN}");
    let path = "/dav/team/c6-write.txt";
    let put = gw.req(
        "PUT",
        path,
        &[("Authorization", &writer), ("X-Fencing-Token", "7")],
        b"writer's",
    );
    assert!(matches!(put.status, 201 | 204), "{}", put.text());
    let (token, _) = lock(&gw, &writer, path, "0");
    let tagged = format!("<{}{path}> (<{token}>)", gw.data_url());
    for condition in [format!("(<{token}>)"), tagged] {
        let resp = gw.req(
            "PUT",
            path,
            &[
                ("Authorization", &robot),
                ("X-Fencing-Token", "7"),
                ("If", &condition),
            ],
            b"robot's",
        );
        resp.assert_gateway_error(403, "forbidden");
        assert_eq!(apache.read(path).as_deref(), Some(&b"writer's"[..]));
    }
    // The lock's holder writes with it.
    let resp = gw.req(
        "PUT",
        path,
        &[
            ("Authorization", &writer),
            ("X-Fencing-Token", "7"),
            ("If", &format!("(<{token}>)")),
        ],
        b"writer's again",
    );
    assert!(matches!(resp.status, 201 | 204), "{}", resp.text());
    assert_eq!(apache.read(path).as_deref(), Some(&b"writer's again"[..]));
}

/// Class 6: a depth-infinity lock on a collection (`/dav/c6/`, lock-a's)
/// protects members outside lock-b's write prefixes (`/dav/c6/secret.txt`).
/// lock-b, which may write only under `/dav/c6/b/`, must not remove it
/// through a member it may write: the lock's root is outside its write
/// prefixes, and the token is another identity's.
#[test]
fn class6_an_unlock_of_a_lock_rooted_outside_the_identitys_prefixes_is_refused() {
    let apache = ApacheBasic::shared();
    apache.mkcol("/dav/c6");
    apache.mkcol("/dav/c6/b");
    assert!(matches!(
        direct_put(apache, "/dav/c6/b/mine.txt"),
        201 | 204
    ));
    let (_dir, gw) = gateway(apache, &[]);
    let a = basic("locka", LOCK_A_PASSWORD);
    let b = basic("lockb", LOCK_B_PASSWORD);
    let (token, _) = lock(&gw, &a, "/dav/c6/", "infinity");
    assert_eq!(direct_put(apache, "/dav/c6/secret.txt"), 423);
    let coded = format!("<{token}>");
    let resp = gw.req(
        "UNLOCK",
        "/dav/c6/b/mine.txt",
        &[
            ("Authorization", &b),
            ("X-Fencing-Token", "7"),
            ("Lock-Token", &coded),
        ],
        b"",
    );
    resp.assert_gateway_error(403, "forbidden");
    assert_eq!(
        direct_put(apache, "/dav/c6/secret.txt"),
        423,
        "the lock on /dav/c6/ was removed"
    );
    // Apache's own token for it (as a PROPFIND shows anyone who may
    // read) is no better.
    let raw = store_tokens(apache, "/dav/c6/");
    assert_eq!(raw.len(), 1, "{raw:?}");
    let resp = gw.req(
        "UNLOCK",
        "/dav/c6/b/mine.txt",
        &[
            ("Authorization", &b),
            ("X-Fencing-Token", "7"),
            ("Lock-Token", &format!("<{}>", raw[0])),
        ],
        b"",
    );
    resp.assert_gateway_error(403, "forbidden");
    assert_eq!(direct_put(apache, "/dav/c6/secret.txt"), 423);
    let resp = gw.req(
        "UNLOCK",
        "/dav/c6/",
        &[
            ("Authorization", &a),
            ("X-Fencing-Token", "7"),
            ("Lock-Token", &coded),
        ],
        b"",
    );
    assert_eq!(resp.status, 204, "{}", resp.text());
}

/// Class 6, the holder's side: a lock taken through the gateway is used,
/// refreshed and removed through it by its holder. The token handed out
/// is the gateway's (Apache's own, as `lockdiscovery` shows it, does not
/// pass the gateway, even from the holder), in the `Lock-Token` field and
/// in the answer's body alike.
#[test]
fn class6_a_holders_lock_write_refresh_unlock_cycle_works() {
    let apache = ApacheBasic::shared();
    team_collections(apache);
    let (_dir, gw) = gateway(apache, &[]);
    let writer = basic("writer", WRITER_PASSWORD);
    let path = "/dav/team/c6-cycle.txt";
    let (token, body) = lock(&gw, &writer, path, "0");
    assert!(
        body.contains(&token),
        "the body names another token than {token}: {body}"
    );
    let raw = store_tokens(apache, path);
    assert_eq!(raw.len(), 1, "{raw:?}");
    assert_ne!(raw[0], token, "the store's own token was handed out");
    // The gateway's token starts with Apache's UUID; Apache's own token
    // does not stand whole in the body.
    assert!(!body.contains(&format!("{}<", raw[0])), "{body}");
    let put = |condition: Option<&str>, content: &[u8]| {
        let mut headers = vec![("Authorization", writer.as_str()), ("X-Fencing-Token", "7")];
        if let Some(condition) = condition {
            headers.push(("If", condition));
        }
        gw.req("PUT", path, &headers, content)
    };
    assert_eq!(put(None, b"no token").status, 423);
    let own = format!("(<{token}>)");
    let resp = put(Some(&own), b"locked write");
    assert!(matches!(resp.status, 201 | 204), "{}", resp.text());
    let resp = put(Some(&format!("(<{}>)", raw[0])), b"store's token");
    resp.assert_gateway_error(403, "forbidden");
    assert_eq!(apache.read(path).as_deref(), Some(&b"locked write"[..]));
    // A refresh names the lock in If; the answer names it as handed out.
    let resp = gw.req(
        "LOCK",
        path,
        &[
            ("Authorization", &writer),
            ("X-Fencing-Token", "7"),
            ("If", &own),
            ("Timeout", "Second-300"),
        ],
        b"",
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp.text().contains(&token), "{}", resp.text());
    assert!(
        !resp.text().contains(&format!("{}<", raw[0])),
        "{}",
        resp.text()
    );
    // A malformed If is refused, not forwarded with its tokens unread.
    let resp = put(Some("(<unterminated"), b"bad");
    assert_eq!(resp.status, 400, "{}", resp.text());
    let resp = gw.req(
        "UNLOCK",
        path,
        &[
            ("Authorization", &writer),
            ("X-Fencing-Token", "7"),
            ("Lock-Token", &format!("<{token}>")),
        ],
        b"",
    );
    assert_eq!(resp.status, 204, "{}", resp.text());
    assert!(matches!(direct_put(apache, path), 201 | 204));
}

/// Class 6 across instances: the binding lives in the token (sealed with
/// a key every instance derives from the store's credentials), so a lock
/// taken through one gateway is its holder's at another that never saw
/// the `LOCK`, and still no other identity's.
#[test]
fn class6_a_lock_taken_through_one_instance_is_bound_at_another() {
    let apache = ApacheBasic::shared();
    team_collections(apache);
    let (_dir1, first) = gateway(apache, &[]);
    let (_dir2, second) = gateway(apache, &[]);
    let writer = basic("writer", WRITER_PASSWORD);
    let robot = format!("Bearer {ROBOT_TOKEN}");
    let path = "/dav/team/c6-instances.txt";
    let (token, _) = lock(&first, &writer, path, "0");
    let own = format!("(<{token}>)");
    let coded = format!("<{token}>");
    let put = |auth: &str| {
        second.req(
            "PUT",
            path,
            &[
                ("Authorization", auth),
                ("X-Fencing-Token", "7"),
                ("If", &own),
            ],
            b"through the second",
        )
    };
    put(&robot).assert_gateway_error(403, "forbidden");
    let resp = put(&writer);
    assert!(matches!(resp.status, 201 | 204), "{}", resp.text());
    let unlock = |auth: &str| {
        second.req(
            "UNLOCK",
            path,
            &[
                ("Authorization", auth),
                ("X-Fencing-Token", "7"),
                ("Lock-Token", &coded),
            ],
            b"",
        )
    };
    unlock(&robot).assert_gateway_error(403, "forbidden");
    assert_eq!(direct_put(apache, path), 423);
    assert_eq!(unlock(&writer).status, 204);
    assert!(matches!(direct_put(apache, path), 201 | 204));
}

/// Class 6, the root rule on its own: an identity whose grants narrowed
/// since it took a depth-infinity lock on a collection (it may still write
/// the members, no longer the collection) may not remove that lock, even
/// with its own token; put back, it may.
#[test]
fn class6_an_unlock_after_the_identitys_grants_narrowed_is_refused() {
    let apache = ApacheBasic::shared();
    apache.mkcol("/dav/c6r");
    apache.mkcol("/dav/c6r/inner");
    let (dir, gw) = gateway(apache, &[]);
    let a = basic("locka", LOCK_A_PASSWORD);
    let (token, _) = lock(&gw, &a, "/dav/c6r/", "infinity");
    let coded = format!("<{token}>");
    let unlock = || {
        gw.req(
            "UNLOCK",
            "/dav/c6r/inner/",
            &[
                ("Authorization", &a),
                ("X-Fencing-Token", "7"),
                ("Lock-Token", &coded),
            ],
            b"",
        )
    };
    let identities = dir.path().join("identities.toml");
    let narrowed = IDENTITIES.replace(
        r#"allow = [ { prefix = "/dav/c6", access = "write" } ]"#,
        r#"allow = [ { prefix = "/dav/c6r/", access = "write" } ]"#,
    );
    assert_ne!(narrowed, IDENTITIES);
    let reload = |text: &str, times: usize| {
        std::fs::write(&identities, text).unwrap();
        gw.sighup();
        assert!(
            support::wait_until(std::time::Duration::from_secs(10), || {
                gw.stderr().matches("identities reloaded").count() >= times
            }),
            "{}",
            gw.stderr()
        );
    };
    reload(&narrowed, 1);
    let resp = unlock();
    let json = resp.assert_gateway_error(403, "forbidden");
    assert_eq!(json["object"], "/dav/c6r", "{json}");
    assert_eq!(direct_put(apache, "/dav/c6r/inner/x.txt"), 423);
    reload(IDENTITIES, 2);
    assert_eq!(unlock().status, 204);
    assert!(matches!(
        direct_put(apache, "/dav/c6r/inner/x.txt"),
        201 | 204
    ));
}

// ---------------------------------------------------------------------------
// Conformance: every row of the tables does at the store what it declares
// ---------------------------------------------------------------------------

/// A request straight to Apache with the store's password: what the store
/// holds, seen around the gateway.
fn direct(
    apache: &ApacheBasic,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> support::Resp {
    let auth = apache.authorization();
    let mut all = vec![(auth.0, auth.1.as_str())];
    all.extend_from_slice(headers);
    support::http(apache.addr(), method, path, &all, body)
}

/// A file `path` with `body`, written straight to Apache.
fn direct_file(apache: &ApacheBasic, path: &str, body: &[u8]) {
    let resp = direct(apache, "PUT", path, &[], body);
    assert!(
        matches!(resp.status, 201 | 204),
        "PUT {path} at Apache: {} {}",
        resp.status,
        resp.text()
    );
}

/// A dead property of the conformance run, set by PROPPATCH.
const DEAD_PROPERTY: &[u8] = br#"<?xml version="1.0" encoding="utf-8"?>
<D:propertyupdate xmlns:D="DAV:" xmlns:Z="urn:fencegate:conformance"><D:set><D:prop><Z:colour>conformance-blue</Z:colour></D:prop></D:set></D:propertyupdate>"#;

/// Issue 49, "Done when": every row of the WebDAV table, sent through the
/// gateway under custody by an admin identity to Apache, and checked at
/// Apache directly (the store's password, or its disk) to have done what
/// the row declares: GET and HEAD read, PUT wrote, DELETE removed the
/// subtree, MKCOL made a collection, COPY copied (source kept), MOVE moved
/// (source gone), PROPPATCH set a dead property, LOCK locked (a PUT
/// without the token is 423 at Apache), UNLOCK unlocked, OPTIONS and
/// PROPFIND answered, POST answered as Apache answers it. Each reached
/// Apache with its own method. A row without a case here fails the test.
#[test]
fn conformance_every_row_of_the_webdav_table_does_at_apache_what_it_declares() {
    use fencegate::dialect::plain_operations::{operations, PlainDialect};
    let apache = ApacheBasic::shared();
    apache.mkcol("/dav/conformance");
    let (_dir, gw) = gateway(apache, &[]);
    let admin = format!("Bearer {ADMIN_TOKEN}");
    let send = |method: &str, path: &str, extra: &[(&str, &str)], body: &[u8]| {
        let mut headers = vec![("Authorization", admin.as_str())];
        headers.extend_from_slice(extra);
        let before = all_series(&gw.metrics(), "forwarded");
        let resp = gw.req(method, path, &headers, body);
        assert_eq!(
            all_series(&gw.metrics(), "forwarded"),
            before + 1.0,
            "{method} {path}: not forwarded: {} {}",
            resp.status,
            resp.text()
        );
        assert!(
            !apache.requests(method, path).is_empty(),
            "{method} {path} never reached Apache as {method}: {:#?}",
            apache.access_log()
        );
        resp
    };
    let token = ("X-Fencing-Token", "1");
    let base = "/dav/conformance";
    let mut covered = Vec::new();
    for row in operations(PlainDialect::Webdav) {
        let method = row.method;
        match method {
            "GET" => {
                let path = format!("{base}/get.txt");
                direct_file(apache, &path, b"read me");
                let resp = send(method, &path, &[], b"");
                assert_eq!((resp.status, resp.text()), (200, "read me".to_owned()));
                assert_eq!(apache.read(&path).as_deref(), Some(&b"read me"[..]));
            }
            "HEAD" => {
                let path = format!("{base}/head.txt");
                direct_file(apache, &path, b"four");
                let resp = send(method, &path, &[], b"");
                assert_eq!(resp.status, 200, "{}", resp.text());
                assert_eq!(resp.header("content-length"), Some("4"));
                assert!(resp.body.is_empty());
            }
            "OPTIONS" => {
                let path = format!("{base}/");
                let resp = send(method, &path, &[], b"");
                assert_eq!(resp.status, 200, "{}", resp.text());
                let at_store = direct(apache, method, &path, &[], b"");
                assert_eq!(resp.header("dav"), at_store.header("dav"));
                assert!(resp.header("dav").is_some_and(|dav| dav.contains('1')));
                assert_eq!(resp.header("allow"), at_store.header("allow"));
            }
            "PROPFIND" => {
                let path = format!("{base}/listed/");
                apache.mkcol(&path);
                direct_file(apache, &format!("{path}member.txt"), b"m");
                let resp = send(method, &path, &[("Depth", "1")], b"");
                assert_eq!(resp.status, 207, "{}", resp.text());
                assert!(resp.text().contains("member.txt"), "{}", resp.text());
            }
            "PUT" => {
                let path = format!("{base}/put.txt");
                let resp = send(method, &path, &[token], b"written");
                assert_eq!(resp.status, 201, "{}", resp.text());
                assert_eq!(apache.read(&path).as_deref(), Some(&b"written"[..]));
            }
            "POST" => {
                let path = format!("{base}/post.txt");
                direct_file(apache, &path, b"posted to");
                let at_store = direct(apache, method, &path, &[], b"body");
                let resp = send(method, &path, &[token], b"body");
                println!(
                    "POST: Apache answers {} directly and through the gateway {}",
                    at_store.status, resp.status
                );
                assert_eq!(
                    resp.status,
                    at_store.status,
                    "Apache answers {}: {}",
                    at_store.status,
                    resp.text()
                );
                assert_eq!(apache.read(&path).as_deref(), Some(&b"posted to"[..]));
            }
            "DELETE" => {
                let path = format!("{base}/removed/");
                apache.mkcol(&path);
                apache.mkcol(&format!("{path}sub/"));
                direct_file(apache, &format!("{path}sub/deep.txt"), b"d");
                direct_file(apache, &format!("{path}top.txt"), b"t");
                let resp = send(method, &path, &[token], b"");
                assert_eq!(resp.status, 204, "{}", resp.text());
                assert!(!apache.exists(&path), "the subtree is gone");
                assert_eq!(
                    direct(apache, "GET", &format!("{path}sub/deep.txt"), &[], b"").status,
                    404
                );
            }
            "PROPPATCH" => {
                let path = format!("{base}/propertied.txt");
                direct_file(apache, &path, b"p");
                let resp = send(
                    method,
                    &path,
                    &[token, ("Content-Type", "application/xml")],
                    DEAD_PROPERTY,
                );
                assert_eq!(resp.status, 207, "{}", resp.text());
                let shown = direct(
                    apache,
                    "PROPFIND",
                    &path,
                    &[("Depth", "0"), ("Content-Type", "application/xml")],
                    br#"<?xml version="1.0" encoding="utf-8"?><D:propfind xmlns:D="DAV:"><D:prop><Z:colour xmlns:Z="urn:fencegate:conformance"/></D:prop></D:propfind>"#,
                );
                assert_eq!(shown.status, 207, "{}", shown.text());
                assert!(
                    shown.text().contains("conformance-blue"),
                    "{}",
                    shown.text()
                );
            }
            "MKCOL" => {
                let path = format!("{base}/made");
                let resp = send(method, &path, &[token], b"");
                assert_eq!(resp.status, 201, "{}", resp.text());
                assert!(apache.on_disk(&path).is_dir(), "a collection at Apache");
            }
            "COPY" => {
                let path = format!("{base}/copy-source.txt");
                let destination = format!("{base}/copy-destination.txt");
                direct_file(apache, &path, b"copied");
                let absolute = format!("{}{destination}", gw.data_url());
                let resp = send(method, &path, &[token, ("Destination", &absolute)], b"");
                assert_eq!(resp.status, 201, "{}", resp.text());
                assert_eq!(apache.read(&destination).as_deref(), Some(&b"copied"[..]));
                assert_eq!(apache.read(&path).as_deref(), Some(&b"copied"[..]));
            }
            "MOVE" => {
                let path = format!("{base}/move-source.txt");
                let destination = format!("{base}/move-destination.txt");
                direct_file(apache, &path, b"moved");
                let absolute = format!("{}{destination}", gw.data_url());
                let resp = send(method, &path, &[token, ("Destination", &absolute)], b"");
                assert_eq!(resp.status, 201, "{}", resp.text());
                assert_eq!(apache.read(&destination).as_deref(), Some(&b"moved"[..]));
                assert!(!apache.exists(&path), "the source is gone");
            }
            "LOCK" => {
                let path = format!("{base}/locked.txt");
                direct_file(apache, &path, b"l");
                assert!(matches!(direct_put(apache, &path), 201 | 204));
                let (_token, _) = lock(&gw, &admin, &path, "0");
                assert!(!apache.requests(method, &path).is_empty());
                assert_eq!(direct_put(apache, &path), 423, "Apache holds the lock");
                assert_eq!(store_tokens(apache, &path).len(), 1);
            }
            "UNLOCK" => {
                let path = format!("{base}/unlocked.txt");
                direct_file(apache, &path, b"u");
                let (token, _) = lock(&gw, &admin, &path, "0");
                assert_eq!(direct_put(apache, &path), 423);
                let coded = format!("<{token}>");
                let resp = send(
                    method,
                    &path,
                    &[("X-Fencing-Token", "7"), ("Lock-Token", &coded)],
                    b"",
                );
                assert_eq!(resp.status, 204, "{}", resp.text());
                assert!(store_tokens(apache, &path).is_empty(), "no lock at Apache");
                assert!(matches!(direct_put(apache, &path), 201 | 204));
            }
            other => panic!("no conformance case for the WebDAV row {other}: add one"),
        }
        covered.push(method);
    }
    let every: Vec<&str> = operations(PlainDialect::Webdav)
        .iter()
        .map(|row| row.method)
        .collect();
    assert_eq!(covered, every, "every row of the WebDAV table ran");
}

/// The http table's rows without custody, against the recording backend:
/// each is forwarded with its method, target, fields and body as sent;
/// nothing else changed. A row without a case fails the test.
#[test]
fn conformance_every_row_of_the_http_table_is_forwarded_as_sent() {
    use fencegate::dialect::plain_operations::{operations, Need, PlainDialect};
    let backend = support::Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &["--store", "http"]);
    let mut covered = Vec::new();
    for row in operations(PlainDialect::Http) {
        let method = row.method;
        let body: &[u8] = match method {
            "PUT" | "POST" | "PATCH" => b"conformance body",
            "GET" | "HEAD" | "OPTIONS" | "DELETE" => b"",
            other => panic!("no conformance case for the http row {other}: add one"),
        };
        let path = format!("/conformance/http/{}", method.to_ascii_lowercase());
        let mut headers = vec![
            ("X-Test-Keep-Body", "1"),
            ("X-Conformance", "as-sent"),
            ("Content-Type", "text/plain"),
        ];
        if row.need == Need::Write {
            headers.push(("X-Fencing-Token", "3"));
        }
        let before = backend.count();
        let resp = gw.req(method, &path, &headers, body);
        assert_eq!(resp.status, 200, "{method}: {}", resp.text());
        assert_eq!(backend.count(), before + 1, "{method}: forwarded once");
        let record = backend.records().pop().unwrap();
        assert_eq!(record.method, method);
        assert_eq!(record.target, path, "{method}");
        assert_eq!(record.body.as_deref().unwrap_or_default(), body, "{method}");
        for (name, value) in &headers {
            assert_eq!(
                record.header_all(name),
                vec![*value],
                "{method}: {name} as sent: {:?}",
                record.headers
            );
        }
        if row.need == Need::Write {
            assert_eq!(gw.fence(&path), Some(3), "{method} fenced");
        }
        covered.push(method);
    }
    let every: Vec<&str> = operations(PlainDialect::Http)
        .iter()
        .map(|row| row.method)
        .collect();
    assert_eq!(covered, every, "every row of the http table ran");
}
