//! `SIGHUP` reloads the configuration file: a new generation of routes for
//! new requests, the old one kept until its last request ends; a file that
//! does not load, or that would change what an existing fence means, keeps
//! the configuration in force and says why in one line. And the adoption
//! path: `enforce = "report"` first, then `on` by a reload, with the fences
//! raised while reporting in force.

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
