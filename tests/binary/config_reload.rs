//! `SIGHUP` reloads the configuration file: a new generation of routes for
//! new requests, the old one kept until its last request ends; a file that
//! does not load, or that would change what an existing fence means, keeps
//! the configuration in force and says why in one line. And the adoption
//! path: `enforce = "report"` first, then `on` by a reload, with the fences
//! raised while reporting in force. And the namespace guard: every way it
//! refuses a reload that would strand fences, and the ways it takes, under
//! a steady load of fenced writes, a stale token refused after each.

#[path = "../support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use support::{http, Backend, GatewayProcess, HANG_GUARD};

/// A configuration file in a folder of its own.
struct ConfigFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl ConfigFile {
    fn new(text: &str) -> ConfigFile {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fencegate.toml");
        std::fs::write(&path, text).unwrap();
        ConfigFile { _dir: dir, path }
    }

    fn arg(&self) -> &str {
        self.path.to_str().unwrap()
    }

    fn rewrite(&self, text: &str) {
        // Written beside and renamed: a reload never reads half a file.
        let next = self.path.with_extension("next");
        std::fs::write(&next, text).unwrap();
        std::fs::rename(&next, &self.path).unwrap();
    }

    fn dir(&self) -> &Path {
        self.path.parent().unwrap()
    }
}

fn generation(gw: &GatewayProcess) -> u64 {
    gw.admin_get("/readyz").json()["generation"]
        .as_u64()
        .unwrap()
}

/// Sends SIGHUP and waits until the `n`-th line containing `needle` is on
/// stderr.
fn sighup_until(gw: &GatewayProcess, needle: &str, n: usize) {
    gw.sighup();
    assert!(
        support::wait_until(HANG_GUARD, || gw.stderr().matches(needle).count() >= n),
        "no {n}th {needle:?} after SIGHUP:\n{}",
        gw.stderr()
    );
}

fn access_lines(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn report_mode_then_enforce_by_sighup_keeps_the_fences_raised_meanwhile() {
    let backend = Backend::start();
    let route = |enforce: &str| {
        format!(
            "upstream = \"{}\"\naccess_log = \"access.log\"\n\n[[route]]\nname = \"app\"\nmatch = {{ path_prefix = \"/r/\" }}\nenforce = \"{enforce}\"\n",
            backend.url()
        )
    };
    let file = ConfigFile::new(&route("report"));
    let log = file.dir().join("access.log");
    let gw = GatewayProcess::start(&["--config", file.arg()]);
    let addr = gw.data_addr();
    let put = |path: &str, token: &str, extra: &[(&str, &str)]| {
        let mut headers = vec![("X-Fencing-Token", token)];
        headers.extend_from_slice(extra);
        http(addr, "PUT", path, &headers, b"x")
    };

    // A stale write: forwarded, and it lands.
    assert_eq!(put("/r/a", "34", &[]).status, 200);
    assert_eq!(put("/r/a", "33", &[]).status, 200);
    assert_eq!(backend.records_for("/r/a").len(), 2);

    // An overtaken one: 31 waits behind 30 in flight, 32 comes.
    let held = {
        let addr = gw.data_addr();
        std::thread::spawn(move || {
            http(
                addr,
                "PUT",
                "/r/k",
                &[("X-Fencing-Token", "30"), ("X-Test-Hold", "h30")],
                b"x",
            )
        })
    };
    assert!(backend.wait_for(HANG_GUARD, |r| r.iter().any(|r| r.token_u64() == Some(30))));
    let waiting = {
        let addr = gw.data_addr();
        std::thread::spawn(move || http(addr, "PUT", "/r/k", &[("X-Fencing-Token", "31")], b"x"))
    };
    assert!(support::wait_until(HANG_GUARD, || {
        gw.admin_get("/fences?namespace=app").json()["fences"]
            .as_array()
            .is_some_and(|f| {
                f.iter()
                    .any(|f| f["resource"] == "/r/k" && f["highest"] == 31)
            })
    }));
    let last = {
        let addr = gw.data_addr();
        std::thread::spawn(move || http(addr, "PUT", "/r/k", &[("X-Fencing-Token", "32")], b"x"))
    };
    assert_eq!(
        waiting.join().unwrap().status,
        200,
        "overtaken, but forwarded"
    );
    backend.release("h30");
    assert_eq!(held.join().unwrap().status, 200);
    assert_eq!(last.join().unwrap().status, 200);
    let tokens: Vec<_> = backend
        .records_for("/r/k")
        .iter()
        .map(|r| r.token_u64())
        .collect();
    assert_eq!(tokens.len(), 3, "{tokens:?}");
    assert!(tokens.contains(&Some(31)), "{tokens:?}");

    // Each would-be refusal once, with its reason, in the metric and the
    // access log.
    let metrics = gw.metrics();
    for reason in ["below_highest", "overtaken"] {
        let series = format!("fencegate_would_refuse_total{{route=\"app\",reason=\"{reason}\"}}");
        assert_eq!(
            support::metric(&metrics, &series),
            Some(1.0),
            "{series}\n{metrics}"
        );
    }
    assert!(support::wait_until(HANG_GUARD, || access_lines(&log).len() >= 5));
    let lines = access_lines(&log);
    let reasons: Vec<_> = lines
        .iter()
        .filter(|l| l["outcome"] == "would_refuse")
        .map(|l| {
            (
                l["path"].clone(),
                l["would_refuse"].clone(),
                l["route"].clone(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("/r/a".into(), "below_highest".into(), "app".into()),
            ("/r/k".into(), "overtaken".into(), "app".into())
        ],
        "{lines:?}"
    );

    // Enforce: the next stale write is refused on the fence raised while
    // reporting.
    assert_eq!(generation(&gw), 1);
    file.rewrite(&route("on"));
    sighup_until(&gw, "configuration reloaded", 1);
    assert_eq!(generation(&gw), 2);
    let refused = put("/r/a", "33", &[]);
    let body = refused.assert_gateway_error(409, "stale_token");
    assert_eq!(body["highest"], 34, "{body}");
    assert_eq!(backend.records_for("/r/a").len(), 2);
    assert_eq!(put("/r/a", "35", &[]).status, 200);
}

#[test]
fn a_reload_that_does_not_load_or_changes_a_fence_meaning_keeps_the_old() {
    let backend = Backend::start();
    let base = format!("upstream = \"{}\"\n", backend.url());
    let docs = |extra: &str| {
        format!(
            "{base}\n[[route]]\nname = \"docs\"\nmatch = {{ path_prefix = \"/docs/\" }}\n{extra}"
        )
    };
    let file = ConfigFile::new(&docs(""));
    let gw = GatewayProcess::start(&["--config", file.arg()]);
    assert_eq!(gw.put("/docs/a", 10).status, 200);
    let stale = || gw.put("/docs/a", 9).status;
    assert_eq!(stale(), 409);

    // Not TOML: one line, the old configuration stays.
    file.rewrite("[[route]\nname = ");
    sighup_until(&gw, "does not load", 1);
    let said: Vec<_> = gw
        .stderr()
        .lines()
        .filter(|l| l.contains("does not load"))
        .map(str::to_owned)
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("fencegate.toml:1:"), "{said:?}");
    assert_eq!(generation(&gw), 1);
    assert_eq!(stale(), 409);

    // Another scope for the namespace: its fences would mean something else.
    file.rewrite(&docs("scope = \"prefix:1\"\n"));
    sighup_until(&gw, "not reloaded", 1);
    assert!(
        gw.stderr().contains("would key fence namespace \"docs\""),
        "{}",
        gw.stderr()
    );
    assert_eq!(generation(&gw), 1);
    assert_eq!(stale(), 409);

    // A rename without fence_namespace: the fences would be left behind.
    file.rewrite(&docs("").replace("name = \"docs\"", "name = \"documents\""));
    sighup_until(&gw, "not reloaded", 2);
    assert!(
        gw.stderr().contains("would be left behind"),
        "{}",
        gw.stderr()
    );
    assert_eq!(stale(), 409);

    // The rename that keeps them: accepted, and the fence holds.
    file.rewrite(
        &docs("fence_namespace = \"docs\"\n").replace("name = \"docs\"", "name = \"documents\""),
    );
    sighup_until(&gw, "configuration reloaded", 1);
    assert_eq!(generation(&gw), 2);
    assert_eq!(stale(), 409);
    // A path no route takes any more: 404, never forwarded.
    let before = backend.count();
    let lost = http(
        gw.data_addr(),
        "PUT",
        "/other/x",
        &[("X-Fencing-Token", "1")],
        b"x",
    );
    lost.assert_gateway_error(404, "no_route");
    assert_eq!(backend.count(), before);
}

#[test]
fn adding_the_first_route_keeps_the_fences_of_the_gateway_without_routes() {
    let backend = Backend::start();
    let file = ConfigFile::new(&format!("upstream = \"{}\"\n", backend.url()));
    let gw = GatewayProcess::start(&["--config", file.arg()]);
    assert_eq!(gw.put("/app/a", 10).status, 200);
    assert_eq!(gw.fence("/app/a"), Some(10));

    // A route in a namespace of its own would leave the fence behind.
    let with_route = |namespace: &str| {
        format!(
            "upstream = \"{}\"\n\n[[route]]\nname = \"app\"\nmatch = {{ path_prefix = \"/app/\" }}\n{namespace}",
            backend.url()
        )
    };
    file.rewrite(&with_route(""));
    sighup_until(&gw, "not reloaded", 1);
    assert!(
        gw.stderr().contains("fence_namespace = \"\""),
        "{}",
        gw.stderr()
    );
    assert_eq!(gw.put("/app/a", 9).status, 409);

    file.rewrite(&with_route("fence_namespace = \"\"\n"));
    sighup_until(&gw, "configuration reloaded", 1);
    assert_eq!(
        gw.put("/app/a", 9).status,
        409,
        "the fence is still in force"
    );
    assert_eq!(gw.put("/app/a", 11).status, 200);
    // The admin plane's default namespace is the one the route uses.
    assert_eq!(gw.fence("/app/a"), Some(11));
}

#[test]
fn a_restart_that_would_rekey_a_namespace_is_refused_in_one_line() {
    let backend = Backend::start();
    let config = |scope: &str| {
        format!(
            "upstream = \"{}\"\n\n[[route]]\nname = \"docs\"\nmatch = {{ path_prefix = \"/\" }}\nscope = \"{scope}\"\n",
            backend.url()
        )
    };
    let file = ConfigFile::new(&config("path"));
    let data = file.dir().join("data");
    let data = data.to_str().unwrap();
    let mut gw = GatewayProcess::start(&["--config", file.arg(), "--data-dir", data]);
    assert_eq!(gw.put("/d/a", 5).status, 200);
    gw.sigterm();
    assert!(gw.wait_exit(HANG_GUARD).success());

    file.rewrite(&config("prefix:1"));
    let finished = support::run_on_free_ports(&["--config", file.arg(), "--data-dir", data]);
    let line = finished.start_error("rekeyed namespace");
    assert!(line.contains("fence namespace \"docs\""), "{line}");
    assert!(line.contains("prefix:1"), "{line}");

    // A rename without fence_namespace would leave the fences behind.
    file.rewrite(&config("path").replace("name = \"docs\"", "name = \"documents\""));
    let finished = support::run_on_free_ports(&["--config", file.arg(), "--data-dir", data]);
    let line = finished.start_error("renamed route");
    assert!(line.contains("would be left behind"), "{line}");
    assert!(line.contains("fence_namespace = \"docs\""), "{line}");

    // The old settings start again, with the fence; so does the rename
    // that keeps the namespace.
    for text in [
        config("path"),
        config("path").replace(
            "name = \"docs\"",
            "name = \"documents\"\nfence_namespace = \"docs\"",
        ),
    ] {
        file.rewrite(&text);
        let mut gw = GatewayProcess::start(&["--config", file.arg(), "--data-dir", data]);
        assert_eq!(gw.put("/d/a", 4).status, 409);
        gw.sigterm();
        assert!(gw.wait_exit(HANG_GUARD).success());
    }
}

/// Three reloads while clients write: one adds a route, one is invalid,
/// one changes a timeout. No request fails, none is answered by a
/// half-loaded configuration: a path under the added route is 404
/// `no_route` until the reload, then forwarded.
#[test]
fn reloads_under_load_fail_no_request() {
    let backend = Backend::start();
    let route_a = "[[route]]\nname = \"a\"\nmatch = { path_prefix = \"/a/\" }\n";
    let route_b = "[[route]]\nname = \"b\"\nmatch = { path_prefix = \"/b/\" }\n";
    let top = |timeout: u32| {
        format!(
            "upstream = \"{}\"\nupstream_timeout = {timeout}\n\n",
            backend.url()
        )
    };
    let file = ConfigFile::new(&format!("{}{route_a}", top(30)));
    let gw = GatewayProcess::start(&["--config", file.arg()]);
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let b_forwarded = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let (addr, stop, served, b_forwarded) = (
                gw.data_addr(),
                Arc::clone(&stop),
                Arc::clone(&served),
                Arc::clone(&b_forwarded),
            );
            std::thread::spawn(move || {
                let mut token = 0u64;
                let mut failures = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    token += 1;
                    let token_text = token.to_string();
                    let headers = [("X-Fencing-Token", token_text.as_str())];
                    let a = http(addr, "PUT", &format!("/a/{client}"), &headers, b"x");
                    if a.status != 200 {
                        failures.push(format!("/a/{client} {token}: {} {}", a.status, a.text()));
                    }
                    let b = http(addr, "PUT", &format!("/b/{client}"), &headers, b"x");
                    match b.status {
                        404 if !b_forwarded.load(Ordering::SeqCst) => {
                            assert_eq!(b.json()["error"], "no_route", "{}", b.text());
                        }
                        200 => b_forwarded.store(true, Ordering::SeqCst),
                        other => {
                            failures.push(format!("/b/{client} {token}: {other} {}", b.text()))
                        }
                    }
                    served.fetch_add(2, Ordering::Relaxed);
                }
                failures
            })
        })
        .collect();
    let wait_served = |n: usize| {
        let target = served.load(Ordering::Relaxed) + n;
        assert!(support::wait_until(HANG_GUARD, || served
            .load(Ordering::Relaxed)
            >= target));
    };
    wait_served(100);
    file.rewrite(&format!("{}{route_a}\n{route_b}", top(30)));
    sighup_until(&gw, "configuration reloaded", 1);
    wait_served(100);
    assert!(b_forwarded.load(Ordering::SeqCst), "the added route serves");
    file.rewrite("upstream_timeout = \"soon\"\n");
    sighup_until(&gw, "does not load", 1);
    wait_served(100);
    file.rewrite(&format!("{}{route_a}\n{route_b}", top(20)));
    sighup_until(&gw, "configuration reloaded", 2);
    wait_served(100);
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let failures = client.join().unwrap();
        assert!(failures.is_empty(), "{failures:?}");
    }
    assert_eq!(generation(&gw), 3);
    let said = gw.stderr();
    assert_eq!(said.matches("does not load").count(), 1, "{said}");
    assert!(
        said.contains("fencegate.toml:1: upstream_timeout"),
        "{said}"
    );
}

/// `GET /config` on the admin plane: the effective configuration and its
/// generation, behind the admin token only, secrets masked.
#[test]
fn get_config_shows_the_generation_in_force_behind_the_admin_token() {
    let backend = Backend::start();
    let text = |timeout: u32| {
        format!(
            "upstream = \"{}\"\nupstream_timeout = {timeout}\ntoken_issuer = \"postgres://fencegate@127.0.0.1:1/locks?sequence=s&password=hunter2\"\n\n[[route]]\nname = \"app\"\nmatch = {{ path_prefix = \"/app/\" }}\n",
            backend.url()
        )
    };
    let file = ConfigFile::new(&text(30));
    let token_file = file.dir().join("admin.token");
    std::fs::write(&token_file, "s3cr3t-admin-token\n").unwrap();
    let token_arg = token_file.display().to_string();
    let gw = GatewayProcess::start(&["--config", file.arg(), "--admin-token-file", &token_arg]);
    let get = |token: Option<&str>| {
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| vec![("Authorization", a)])
            .unwrap_or_default();
        http(gw.admin_addr(), "GET", "/config", &headers, b"")
    };
    assert_eq!(get(None).status, 401);
    let shown = get(Some("s3cr3t-admin-token"));
    assert_eq!(shown.status, 200, "{}", shown.text());
    let body = shown.json();
    assert_eq!(body["generation"], 1, "{body}");
    let options = &body["configuration"]["options"];
    assert_eq!(options["upstream_timeout"]["value"], "30", "{body}");
    assert_eq!(options["upstream_timeout"]["source"], "file", "{body}");
    assert_eq!(options["listen"]["source"], "flag", "{body}");
    assert_eq!(body["configuration"]["routes"][0]["name"], "app", "{body}");
    assert!(!shown.text().contains("hunter2"), "{}", shown.text());
    assert!(
        !shown.text().contains("s3cr3t-admin-token"),
        "{}",
        shown.text()
    );

    file.rewrite(&text(20));
    sighup_until(&gw, "configuration reloaded", 1);
    let body = get(Some("s3cr3t-admin-token")).json();
    assert_eq!(body["generation"], 2, "{body}");
    assert_eq!(
        body["configuration"]["options"]["upstream_timeout"]["value"], "20",
        "{body}"
    );
}

/// Without an admin token file the admin plane is open and read-only:
/// `GET /config` is not served there.
#[test]
fn get_config_needs_an_admin_token_file() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let refused = http(gw.admin_addr(), "GET", "/config", &[], b"");
    refused.assert_gateway_error(403, "config_needs_admin_token");
}

/// Admin writes into a route's namespace are checked against that route's
/// scope, and take effect there only.
#[test]
fn admin_writes_take_the_namespace_and_its_routes_scope() {
    let backend = Backend::start();
    let file = ConfigFile::new(&format!(
        "upstream = \"{}\"\n\n[[route]]\nname = \"docs\"\nmatch = {{ path_prefix = \"/docs/\" }}\nscope = \"prefix:2\"\n",
        backend.url()
    ));
    let token_file = file.dir().join("admin.token");
    std::fs::write(&token_file, "admin-token-0123\n").unwrap();
    let token_arg = token_file.display().to_string();
    let gw = GatewayProcess::start(&["--config", file.arg(), "--admin-token-file", &token_arg]);
    let admin = |method: &str, target: &str, body: &[u8]| {
        http(
            gw.admin_addr(),
            method,
            target,
            &[("Authorization", "Bearer admin-token-0123")],
            body,
        )
    };
    // Three segments are no key in prefix:2 (the route's scope), though
    // they are in the gateway's default path scope.
    let body = b"{\"highest\": 9, \"reason\": \"test\"}";
    let deep = admin("PUT", "/fences/%2Fdocs%2Fa%2Fb?namespace=docs", body);
    assert_eq!(deep.status, 400, "{}", deep.text());
    assert!(deep.text().contains("prefix:2"), "{}", deep.text());
    let set = admin("PUT", "/fences/%2Fdocs%2Fa?namespace=docs", body);
    assert_eq!(set.status, 200, "{}", set.text());
    // In force for the route's requests under that fence, not elsewhere.
    assert_eq!(gw.put("/docs/a/report", 8).status, 409);
    assert_eq!(gw.put("/docs/a/report", 9).status, 200);
    let default = admin("GET", "/fences/%2Fdocs%2Fa", b"");
    assert_eq!(
        default.status,
        404,
        "the default namespace has none: {}",
        default.text()
    );
    let listed = admin("GET", "/fences?namespace=docs", b"").json();
    assert_eq!(listed["fences"][0]["resource"], "/docs/a", "{listed}");
    assert_eq!(admin("GET", "/fences?namespace=no%20such", b"").status, 400);
}

/// A `SIGHUP` sent the moment the gateway has printed its addresses
/// reloads it; it does not end it (the handler was once registered after
/// the print, and SIGHUP's default action ended about half such starts).
#[test]
fn a_sighup_right_after_the_start_does_not_end_the_gateway() {
    for _ in 0..10 {
        let mut gw = GatewayProcess::start(&["--state", "memory"]);
        gw.sighup();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(gw.try_exit_status(), None, "{}", gw.stderr());
        assert_eq!(gw.put("/after-hup", 1).status, 204, "{}", gw.stderr());
    }
}

/// Every way a reload could hand a namespace's requests (and so its
/// fences) to another namespace or to a route that does not fence is
/// refused, by coverage, not only an equal match (routes issue, item 3):
/// a more specific route inside the space, a host added in front of it, a
/// prefix's trailing slash changed with a rename, a catch-all renamed, a
/// route turned off. The ways that keep the fences are taken. A stale token
/// is refused after each.
#[test]
fn reloads_that_would_strand_fences_are_refused_by_coverage() {
    let backend = Backend::start();
    let route = |name: &str, matches: &str, extra: &str| {
        format!("[[route]]\nname = \"{name}\"\nmatch = {{ {matches} }}\n{extra}\n")
    };
    let base = format!("upstream = \"{}\"\nstate = \"memory\"\n\n", backend.url());
    let billing = route("billing", "path_prefix = \"/billing/\"", "");
    let rest = route("rest", "path_prefix = \"/\"", "");
    let file = ConfigFile::new(&format!("{base}{billing}{rest}"));
    let gw = GatewayProcess::start(&["--config", file.arg()]);
    assert_eq!(gw.put("/billing/q", 10).status, 200);
    assert_eq!(gw.put("/billing/special/x", 10).status, 200);
    assert_eq!(gw.put("/other", 10).status, 200);
    assert_eq!(gw.put("/new/y", 10).status, 200);
    let stale_everywhere = |what: &str| {
        for path in ["/billing/q", "/billing/special/x", "/other", "/new/y"] {
            let resp = gw.put(path, 9);
            assert_eq!(resp.status, 409, "{what}: {path}: {}", resp.text());
        }
    };
    let mut refused = 0;
    for (what, text) in [
        (
            "a more specific route",
            format!(
                "{base}{billing}{rest}{}",
                route("special", "path_prefix = \"/billing/special/\"", "")
            ),
        ),
        (
            "a host in front of a prefix",
            format!(
                "{base}{billing}{rest}{}",
                route(
                    "hosted",
                    "host = \"127.0.0.1\", path_prefix = \"/billing/\"",
                    ""
                )
            ),
        ),
        (
            "a trailing slash changed with a rename",
            format!(
                "{base}{}{rest}",
                route("billing2", "path_prefix = \"/billing\"", "")
            ),
        ),
        (
            "a catch-all renamed",
            format!(
                "{base}{billing}{}",
                route("everything", "path_prefix = \"/\"", "")
            ),
        ),
        (
            "a new route inside the catch-all's space",
            format!(
                "{base}{billing}{rest}{}",
                route("new", "path_prefix = \"/new/\"", "")
            ),
        ),
        (
            "a route turned off",
            format!(
                "{base}{}{rest}",
                route(
                    "billing",
                    "path_prefix = \"/billing/\"",
                    "enforce = \"off\""
                )
            ),
        ),
    ] {
        file.rewrite(&text);
        refused += 1;
        sighup_until(&gw, "not reloaded", refused);
        let line = gw
            .stderr()
            .lines()
            .rfind(|l| l.contains("not reloaded"))
            .unwrap_or_default()
            .to_owned();
        assert!(line.contains("would be left behind"), "{what}: {line}");
        assert_eq!(generation(&gw), 1, "{what}");
        stale_everywhere(what);
    }
    // The ways that keep the fences: the new route in the catch-all's
    // namespace, the rename naming its namespace.
    file.rewrite(&format!(
        "{base}{}{rest}{}",
        route(
            "billing-2026",
            "path_prefix = \"/billing/\"",
            "fence_namespace = \"billing\""
        ),
        route(
            "new",
            "path_prefix = \"/new/\"",
            "fence_namespace = \"rest\""
        ),
    ));
    sighup_until(&gw, "configuration reloaded", 1);
    assert_eq!(generation(&gw), 2);
    stale_everywhere("after the reload that keeps them");
    assert_eq!(gw.put("/billing/q", 11).status, 200);
    // And a configuration that starts also reloads unchanged, two hosts in
    // one namespace included.
    let hosts = format!(
        "{base}{}{}",
        route("a", "host = \"a.example\"", "fence_namespace = \"shared\""),
        route("b", "host = \"b.example\"", "fence_namespace = \"shared\""),
    );
    let file = ConfigFile::new(&hosts);
    let gw = GatewayProcess::start(&["--config", file.arg()]);
    sighup_until(&gw, "configuration reloaded", 1);
    assert_eq!(generation(&gw), 2);
}

/// A route with a host in front of a prefix's space takes the space's
/// requests for that host whatever its own prefix (an exact host wins over
/// no host before prefixes are compared): a host alone, or a host with a
/// prefix shorter than the space's, hands them to its namespace as surely
/// as a host with the same prefix. Refused at a reload and at a restart,
/// with no catch-all in the configuration (a catch-all's space caught the
/// shorter prefix before; the host alone was taken either way).
#[test]
fn a_host_in_front_of_a_prefix_is_refused_whatever_its_own_prefix() {
    let backend = Backend::start();
    let route = |name: &str, matches: &str| {
        format!("[[route]]\nname = \"{name}\"\nmatch = {{ {matches} }}\n\n")
    };
    let base = format!(
        "upstream = \"{}\"\n\n{}",
        backend.url(),
        route("billing", "path_prefix = \"/billing/\"")
    );
    let file = ConfigFile::new(&base);
    let data = file.dir().join("data");
    let data = data.to_str().unwrap();
    let mut gw = GatewayProcess::start(&["--config", file.arg(), "--data-dir", data]);
    assert_eq!(gw.put("/billing/q", 10).status, 200);
    let hosts = [
        "host = \"127.0.0.1\"",
        "host = \"127.0.0.1\", path_prefix = \"/\"",
        "host = \"127.0.0.1\", path_prefix = \"/bil\"",
    ];
    for (n, matches) in hosts.iter().enumerate() {
        file.rewrite(&format!("{base}{}", route("hosted", matches)));
        sighup_until(&gw, "not reloaded", n + 1);
        let line = gw
            .stderr()
            .lines()
            .rfind(|l| l.contains("not reloaded"))
            .unwrap_or_default()
            .to_owned();
        assert!(
            line.contains("route \"hosted\"")
                && line.contains("namespace \"billing\"")
                && line.contains("would be left behind"),
            "{matches}: {line}"
        );
        assert_eq!(generation(&gw), 1, "{matches}");
        let stale = gw.put("/billing/q", 9);
        assert_eq!(stale.status, 409, "{matches}: {}", stale.text());
    }
    gw.sigterm();
    assert!(gw.wait_exit(HANG_GUARD).success());
    for matches in hosts {
        file.rewrite(&format!("{base}{}", route("hosted", matches)));
        let finished = support::run_on_free_ports(&["--config", file.arg(), "--data-dir", data]);
        let line = finished.start_error(matches);
        assert!(
            line.contains("route \"hosted\"") && line.contains("namespace \"billing\""),
            "{matches}: {line}"
        );
    }
    assert_eq!(
        backend.records_for("/billing/q").len(),
        1,
        "{:#?}",
        backend.records()
    );
}

/// What a namespace covered is never forgotten: moving `billing` off
/// `/billing/` is taken (its requests then have no route), but a later
/// route of another namespace on `/billing/` is refused, by reload and by
/// restart, as it would be in one step; the space goes back only to a
/// route in `billing`'s namespace, where the fence still counts.
#[test]
fn a_space_left_by_its_namespace_is_not_handed_over_in_a_second_step() {
    let backend = Backend::start();
    let route = |name: &str, prefix: &str, extra: &str| {
        format!("[[route]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"{prefix}\" }}\n{extra}\n")
    };
    let top = format!("upstream = \"{}\"\n\n", backend.url());
    let file = ConfigFile::new(&format!("{top}{}", route("billing", "/billing/", "")));
    let data = file.dir().join("data");
    let data = data.to_str().unwrap();
    let mut gw = GatewayProcess::start(&["--config", file.arg(), "--data-dir", data]);
    assert_eq!(gw.put("/billing/q", 10).status, 200);
    // Step 1: billing moves away; /billing/ has no route.
    let moved = format!("{top}{}", route("billing", "/bill/", ""));
    file.rewrite(&moved);
    sighup_until(&gw, "reloaded", 1);
    assert_eq!(generation(&gw), 2);
    gw.put("/billing/q", 9)
        .assert_gateway_error(404, "no_route");
    // Step 2: another namespace on /billing/: refused.
    let taken = format!("{moved}{}", route("ledger", "/billing/", ""));
    file.rewrite(&taken);
    sighup_until(&gw, "not reloaded", 1);
    let line = gw
        .stderr()
        .lines()
        .rfind(|l| l.contains("not reloaded"))
        .unwrap_or_default()
        .to_owned();
    assert!(
        line.contains("route \"ledger\"") && line.contains("namespace \"billing\""),
        "{line}"
    );
    assert_eq!(generation(&gw), 2);
    gw.put("/billing/q", 9)
        .assert_gateway_error(404, "no_route");
    gw.sigterm();
    assert!(gw.wait_exit(HANG_GUARD).success());
    // The same at a restart.
    let finished = support::run_on_free_ports(&["--config", file.arg(), "--data-dir", data]);
    let line = finished.start_error("a second step by restart");
    assert!(line.contains("route \"ledger\""), "{line}");
    // In billing's namespace the space is taken back, fence and all.
    file.rewrite(&format!(
        "{moved}{}",
        route("ledger", "/billing/", "fence_namespace = \"billing\"")
    ));
    let gw = GatewayProcess::start(&["--config", file.arg(), "--data-dir", data]);
    let stale = gw.put("/billing/q", 9);
    stale.assert_gateway_error(409, "stale_token");
    assert_eq!(
        backend.records_for("/billing/q").len(),
        1,
        "{:#?}",
        backend.records()
    );
}

/// A route table of the reload-under-load test.
fn route(name: &str, matches: &str, extra: &str) -> String {
    format!("[[route]]\nname = \"{name}\"\nmatch = {{ {matches} }}\n{extra}\n")
}

/// Rounds of each loader of the reload-under-load test at most (each four
/// requests): a bound, never reached in a run that goes well.
const LOAD_ROUNDS: u64 = 50_000;

/// What the loaders of the reload-under-load test saw.
#[derive(Default)]
struct LoadTally {
    /// Answers of any kind.
    answers: AtomicUsize,
    /// Fresh writes answered 200.
    written: AtomicUsize,
    /// Stale writes answered 409 `stale_token`.
    refused: AtomicUsize,
}

/// One loader: on its own two objects (one per namespace in force from the
/// start), a fresh token (answered 200) then one below it (answered 409
/// `stale_token`), round after round until `stop`; every other answer is
/// returned, one line each.
fn fenced_load(
    addr: std::net::SocketAddr,
    n: usize,
    stop: &AtomicBool,
    tally: &LoadTally,
) -> Vec<String> {
    let objects = [format!("/billing/load{n}"), format!("/docs/load{n}")];
    let mut unexpected = Vec::new();
    for round in 1..=LOAD_ROUNDS {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        for object in &objects {
            for (token, fresh) in [(2 * round, true), (2 * round - 1, false)] {
                let token = token.to_string();
                let answer =
                    support::try_http(addr, "PUT", object, &[("X-Fencing-Token", &token)], b"x");
                tally.answers.fetch_add(1, Ordering::Relaxed);
                match answer {
                    Ok(resp) if fresh && resp.status == 200 => {
                        tally.written.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(resp) if !fresh && resp.status == 409 && is_stale_token(&resp) => {
                        tally.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(resp) => unexpected.push(format!(
                        "{object} with {token} ({}): {} {}",
                        if fresh { "fresh" } else { "stale" },
                        resp.status,
                        resp.text()
                    )),
                    Err(e) => unexpected.push(format!("{object} with {token}: {e}")),
                }
            }
        }
    }
    unexpected
}

/// Whether `resp` is the gateway's JSON `stale_token` refusal.
fn is_stale_token(resp: &support::Resp) -> bool {
    serde_json::from_slice::<serde_json::Value>(&resp.body)
        .is_ok_and(|json| json["error"] == "stale_token")
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The gateway of the reload-under-load test, the file it reads, and what
/// the test wrote: every fenced object with its namespace and the highest
/// token written to it.
struct Reloads<'a> {
    gw: &'a GatewayProcess,
    file: &'a ConfigFile,
    tally: &'a LoadTally,
    /// `Authorization` of the admin plane.
    bearer: String,
    /// Reloads refused ("not reloaded" lines) and taken so far.
    refused: usize,
    taken: usize,
    objects: Vec<(String, String, u64)>,
}

impl Reloads<'_> {
    fn admin(&self, target: &str) -> support::Resp {
        let resp = http(
            self.gw.admin_addr(),
            "GET",
            target,
            &[("Authorization", &self.bearer)],
            b"",
        );
        assert_eq!(resp.status, 200, "GET {target}: {}", resp.text());
        resp
    }

    /// The generation in force and its routes' names, as the admin plane
    /// shows them (`/readyz` and `GET /config` agree on the generation).
    fn in_force(&self) -> (u64, Vec<String>) {
        let ready = generation(self.gw);
        let config = self.admin("/config").json();
        assert_eq!(config["generation"], ready, "{config}");
        let names = config["configuration"]["routes"]
            .as_array()
            .expect("routes")
            .iter()
            .map(|route| route["name"].as_str().unwrap_or_default().to_owned())
            .collect();
        (ready, names)
    }

    fn fence(&self, namespace: &str, key: &str) -> Option<u64> {
        let target = format!("/fences/{}?namespace={namespace}", support::pct(key));
        self.admin(&target).json()["highest"].as_u64()
    }

    /// Waits (bounded) until the loaders have had `n` more answers: every
    /// step runs under load.
    fn under_load(&self, n: usize) {
        let target = self.tally.answers.load(Ordering::Relaxed) + n;
        assert!(
            support::wait_until(HANG_GUARD, || self.tally.answers.load(Ordering::Relaxed)
                >= target),
            "the load stalled"
        );
    }

    /// Writes `object` with a token above its highest: 200, and its fence
    /// is raised in `namespace` (the route in force there took it).
    fn write(&mut self, object: &str, namespace: &str) {
        let token = match self.objects.iter().find(|(o, ..)| o == object) {
            Some((_, known, highest)) => {
                assert_eq!(known, namespace, "{object}");
                highest + 1
            }
            None => 10,
        };
        let resp = self.gw.put(object, token);
        assert_eq!(resp.status, 200, "{object} with {token}: {}", resp.text());
        assert_eq!(
            self.fence(namespace, object),
            Some(token),
            "{object}: not raised in {namespace}"
        );
        self.objects.retain(|(o, ..)| o != object);
        self.objects
            .push((object.to_owned(), namespace.to_owned(), token));
    }

    /// A token below each fenced object's highest: 409 `stale_token`.
    fn stale_everywhere(&self, what: &str) {
        for (object, _, highest) in &self.objects {
            let resp = self.gw.put(object, highest - 1);
            assert_eq!(
                resp.status,
                409,
                "{what}: a stale token for {object}: {}",
                resp.text()
            );
            let json = resp.json();
            assert_eq!(json["error"], "stale_token", "{what}: {json}");
            assert_eq!(json["highest"], *highest, "{what}: {json}");
        }
    }

    /// A reload of `text` that must be refused: one more "not reloaded"
    /// line, holding every one of `said`; the generation and the routes in
    /// force unchanged on the admin plane; `contested` (an object of
    /// namespace `namespace`) still written through the old route; a stale
    /// token refused everywhere.
    fn refused(&mut self, what: &str, text: &str, said: &[&str], contested: (&str, &str)) {
        let before = self.in_force();
        self.file.rewrite(text);
        self.refused += 1;
        sighup_until(self.gw, "not reloaded", self.refused);
        let stderr = self.gw.stderr();
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("not reloaded"))
            .collect();
        assert_eq!(
            lines.len(),
            self.refused,
            "{what}: one line each: {lines:#?}"
        );
        let line = lines[lines.len() - 1];
        for needle in said.iter().chain(&["the one in force stays"]) {
            assert!(line.contains(needle), "{what}: no {needle:?} in {line}");
        }
        assert_eq!(self.in_force(), before, "{what}: the admin plane");
        self.under_load(40);
        let (object, namespace) = contested;
        self.write(object, namespace);
        self.stale_everywhere(what);
    }

    /// A reload of `text` that must be taken: one more "configuration
    /// reloaded" line, the next generation with `routes` in force, a stale
    /// token refused everywhere.
    fn taken(&mut self, what: &str, text: &str, routes: &[&str]) {
        let (generation, _) = self.in_force();
        self.file.rewrite(text);
        self.taken += 1;
        sighup_until(self.gw, "configuration reloaded", self.taken);
        assert_eq!(
            self.in_force(),
            (
                generation + 1,
                routes.iter().map(|r| r.to_string()).collect()
            ),
            "{what}: {}",
            self.gw.stderr()
        );
        self.under_load(40);
        self.stale_everywhere(what);
    }
}

/// Every way the SPEC refuses a reload that would strand fences, and the
/// ways it allows, while loaders write fenced objects all along (routes
/// issue, "Done when"). Refused: a more specific route, a host in front of
/// a prefix (with the prefix, alone, with a shorter one), a rename, a
/// trailing slash changed with a rename, a prefix moved with its space
/// handed to another route, a route turned off, a namespace keyed
/// otherwise; then, with a catch-all: a catch-all in front of it, the
/// catch-all renamed, a new route inside its space, a prefix changed so
/// that the catch-all takes the old space. Each says so in one line naming
/// the route and the namespace, leaves the generation and routes the admin
/// plane shows, and the old routes still write. Taken: an unchanged reload,
/// a route for a prefix no fence is under, a carve-out that keeps the
/// namespace, an upstream changed in the same namespace, a catch-all behind
/// the routes, a new route in the catch-all's namespace. A stale token is
/// refused 409 after each; the loaders see nothing but 200 for a fresh
/// token and 409 for a stale one; and no write at or below a token already
/// written reached either backend.
#[test]
fn every_refused_and_taken_reload_under_load_keeps_every_fence() {
    let backend = Backend::start();
    let moved_to = Backend::start();
    let base = format!("upstream = \"{}\"\n\n", backend.url());
    let billing = route("billing", "path_prefix = \"/billing/\"", "");
    let docs = route("docs", "path_prefix = \"/docs/\"", "");
    let file = ConfigFile::new(&format!("{base}{billing}{docs}"));
    let token_file = file.dir().join("admin.token");
    std::fs::write(&token_file, "reload-admin-token\n").unwrap();
    let token_arg = token_file.display().to_string();
    let gw = GatewayProcess::start(&["--config", file.arg(), "--admin-token-file", &token_arg]);
    let stop = AtomicBool::new(false);
    let tally = LoadTally::default();

    std::thread::scope(|s| {
        // The loaders stop however this closure ends (a failed assertion
        // included): the scope waits for them.
        let _stop = StopOnDrop(&stop);
        let loaders: Vec<_> = (0..3)
            .map(|n| {
                let (addr, stop, tally) = (gw.data_addr(), &stop, &tally);
                s.spawn(move || fenced_load(addr, n, stop, tally))
            })
            .collect();
        let mut run = Reloads {
            gw: &gw,
            file: &file,
            tally: &tally,
            bearer: "Bearer reload-admin-token".into(),
            refused: 0,
            taken: 0,
            objects: Vec::new(),
        };
        for object in ["/billing/q", "/billing/special/x", "/billing/archive/z"] {
            run.write(object, "billing");
        }
        run.write("/docs/d", "docs");
        run.under_load(40);

        // --- No catch-all.
        let hosted =
            |matches: &str| format!("{base}{billing}{docs}{}", route("hosted", matches, ""));
        run.refused(
            "a more specific route",
            &format!(
                "{base}{billing}{docs}{}",
                route("special", "path_prefix = \"/billing/special/\"", "")
            ),
            &[
                "route \"special\"",
                "fence namespace \"billing\"",
                "would be left behind",
            ],
            ("/billing/special/x", "billing"),
        );
        run.taken(
            "an unchanged reload",
            &format!("{base}{billing}{docs}"),
            &["billing", "docs"],
        );
        for (what, matches) in [
            (
                "a host in front of a prefix",
                "host = \"127.0.0.1\", path_prefix = \"/billing/\"",
            ),
            ("a host alone", "host = \"127.0.0.1\""),
            (
                "a host with a shorter prefix",
                "host = \"127.0.0.1\", path_prefix = \"/\"",
            ),
        ] {
            run.refused(
                what,
                &hosted(matches),
                &[
                    "route \"hosted\"",
                    "fence namespace \"billing\"",
                    "would be left behind",
                ],
                ("/billing/q", "billing"),
            );
        }
        let reports = route("reports", "path_prefix = \"/reports/\"", "");
        run.taken(
            "a route for a prefix no fence is under",
            &format!("{base}{billing}{docs}{reports}"),
            &["billing", "docs", "reports"],
        );
        run.write("/reports/r", "reports");
        let others = format!("{docs}{reports}");
        for (what, routes, new) in [
            (
                "a rename",
                route("invoices", "path_prefix = \"/billing/\"", ""),
                "invoices",
            ),
            (
                "a trailing slash changed with a rename",
                route("billing2", "path_prefix = \"/billing\"", ""),
                "billing2",
            ),
            (
                "a prefix moved, its space handed to another route",
                format!(
                    "{}{}",
                    route("billing", "path_prefix = \"/bill/\"", ""),
                    route("ledger", "path_prefix = \"/billing/\"", "")
                ),
                "ledger",
            ),
        ] {
            run.refused(
                what,
                &format!("{base}{routes}{others}"),
                &[
                    &format!("route \"{new}\""),
                    "fence namespace \"billing\"",
                    "would be left behind",
                ],
                ("/billing/q", "billing"),
            );
        }
        run.refused(
            "a route turned off",
            &format!(
                "{base}{}{others}",
                route(
                    "billing",
                    "path_prefix = \"/billing/\"",
                    "enforce = \"off\""
                )
            ),
            &["route \"billing\"", "a route that does not fence"],
            ("/billing/q", "billing"),
        );
        run.refused(
            "a namespace keyed otherwise",
            &format!(
                "{base}{}{others}",
                route(
                    "billing",
                    "path_prefix = \"/billing/\"",
                    "scope = \"prefix:2\""
                )
            ),
            &[
                "fence namespace \"billing\"",
                "prefix:2",
                "mean something else",
            ],
            ("/billing/q", "billing"),
        );
        let archive = route(
            "archive",
            "path_prefix = \"/billing/archive/\"",
            "fence_namespace = \"billing\"",
        );
        run.taken(
            "a carve-out that keeps the namespace",
            &format!("{base}{billing}{archive}{others}"),
            &["billing", "archive", "docs", "reports"],
        );
        run.write("/billing/archive/z", "billing");
        let billing = route(
            "billing",
            "path_prefix = \"/billing/\"",
            &format!("upstream = \"{}\"", moved_to.url()),
        );
        run.taken(
            "an upstream changed in the same namespace",
            &format!("{base}{billing}{archive}{others}"),
            &["billing", "archive", "docs", "reports"],
        );
        let before = moved_to.records_for("/billing/q").len();
        run.write("/billing/q", "billing");
        assert_eq!(moved_to.records_for("/billing/q").len(), before + 1);

        // --- With a catch-all.
        let routes = format!("{billing}{archive}{others}");
        let rest = route("rest", "path_prefix = \"/\"", "");
        run.taken(
            "a catch-all behind the routes",
            &format!("{base}{routes}{rest}"),
            &["billing", "archive", "docs", "reports", "rest"],
        );
        run.write("/other/o", "rest");
        for (what, text, new) in [
            (
                "a catch-all in front of the catch-all",
                format!(
                    "{base}{routes}{}{rest}",
                    route("all", "path_prefix = \"/\"", "")
                ),
                "all",
            ),
            (
                "the catch-all renamed",
                format!(
                    "{base}{routes}{}",
                    route("everything", "path_prefix = \"/\"", "")
                ),
                "everything",
            ),
            (
                "a new route inside the catch-all's space",
                format!(
                    "{base}{routes}{rest}{}",
                    route("misc", "path_prefix = \"/misc/\"", "")
                ),
                "misc",
            ),
        ] {
            run.refused(
                what,
                &text,
                &[
                    &format!("route \"{new}\""),
                    "fence namespace \"rest\"",
                    "would be left behind",
                ],
                ("/other/o", "rest"),
            );
        }
        run.refused(
            "a prefix changed, the catch-all takes the old space",
            &format!(
                "{base}{billing}{archive}{}{reports}{rest}",
                route("docs", "path_prefix = \"/documents/\"", "")
            ),
            &[
                "route \"rest\"",
                "fence namespace \"docs\"",
                "would be left behind",
            ],
            ("/docs/d", "docs"),
        );
        let misc = route(
            "misc",
            "path_prefix = \"/misc/\"",
            "fence_namespace = \"rest\"",
        );
        run.taken(
            "a new route in the catch-all's namespace",
            &format!("{base}{routes}{rest}{misc}"),
            &["billing", "archive", "docs", "reports", "rest", "misc"],
        );
        run.write("/misc/m", "rest");
        run.taken(
            "an unchanged reload, at the end",
            &format!("{base}{routes}{rest}{misc}"),
            &["billing", "archive", "docs", "reports", "rest", "misc"],
        );

        stop.store(true, Ordering::Relaxed);
        let unexpected: Vec<String> = loaders
            .into_iter()
            .flat_map(|loader| loader.join().unwrap())
            .collect();
        eprintln!(
            "{} reloads refused, {} taken; the load: {} answers, {} fresh writes 200, {} stale 409, {} other",
            run.refused,
            run.taken,
            tally.answers.load(Ordering::Relaxed),
            tally.written.load(Ordering::Relaxed),
            tally.refused.load(Ordering::Relaxed),
            unexpected.len(),
        );
        assert!(unexpected.is_empty(), "{unexpected:#?}");
        assert_eq!((run.refused, run.taken), (13, 7));
    });

    // No write at or below a token already written to its object reached
    // either backend (each object has one writer: arrival order is its
    // order).
    let mut records = backend.records();
    records.extend(moved_to.records());
    records.sort_by_key(|r| r.arrived);
    let mut highest: std::collections::HashMap<String, u64> = Default::default();
    let mut stale = Vec::new();
    for record in &records {
        let token = record.token_u64().expect("every write is fenced");
        let top = highest.entry(record.target.clone()).or_default();
        if token <= *top {
            stale.push(format!(
                "{} {}: {token} after {top}",
                record.method, record.target
            ));
        }
        *top = token.max(*top);
    }
    assert!(
        stale.is_empty(),
        "stale writes reached a backend: {stale:#?}"
    );
    assert!(
        tally.written.load(Ordering::Relaxed) > 0 && tally.refused.load(Ordering::Relaxed) > 0,
        "inconclusive: no load"
    );
}
