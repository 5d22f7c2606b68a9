//! Transparency (SPEC, "What is never forwarded": a request through the
//! gateway gets the answer it would get from the backend directly): litmus,
//! the WebDAV server test suite (Debian's `litmus`), run against Apache
//! mod_dav directly and through the gateway with `--allow-unfenced-writes`,
//! must give every one of its tests the same result, warnings included.
//!
//! Before the gateway read HTTP/1.1 itself, `basic/delete_fragment` differed:
//! the fragment of `DELETE /coll/#frag` was dropped on the way, and Apache
//! removed the collection ("unsafe", litmus warned); now the gateway refuses
//! that request as Apache does.

#[path = "../support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::process::Command;

use support::apache::Apache;
use support::apache_basic::ApacheBasic;
use support::GatewayProcess;

/// Runs litmus against the collection `url`; each test's name (with its
/// suite) and result (`pass`, `FAIL`, `SKIPPED`, `WARNING`...).
fn litmus(url: &str) -> BTreeMap<String, String> {
    litmus_as(url, None)
}

/// [`litmus`], authenticating with `(user, password)` when given.
fn litmus_as(url: &str, credentials: Option<(&str, &str)>) -> BTreeMap<String, String> {
    // litmus writes debug.log and child.log where it runs.
    let logs = tempfile::tempdir().expect("a temporary directory");
    let mut command = Command::new("litmus");
    // Every suite, whatever the one before it did: litmus stops at a
    // suite that fails otherwise.
    command.arg("--keep-going").arg(url);
    if let Some((user, password)) = credentials {
        command.args([user, password]);
    }
    let keep = std::env::var_os("LITMUS_LOGS");
    let output = command
        .current_dir(keep.as_deref().map_or(logs.path(), std::path::Path::new))
        .output()
        .expect("litmus: run scripts/install-deps.sh (it installs litmus)");
    let text = String::from_utf8_lossy(&output.stdout);
    if std::env::var_os("LITMUS_SHOW").is_some() {
        eprintln!("{text}");
    }
    let mut results = BTreeMap::new();
    let mut suite = String::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("-> running `") {
            suite = name.trim_end_matches([':', '\'', '`']).to_owned();
            continue;
        }
        // "\r 3. put_get......\r 3. put_get...... pass": progress,
        // then the result, on one line.
        let line = line.rsplit('\r').next().unwrap_or(line).trim();
        let Some((number, rest)) = line.split_once('.') else {
            continue;
        };
        if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Some((name, result)) = rest.trim_start().split_once("..") else {
            continue;
        };
        let result = result.trim_start_matches('.').trim();
        let result = result.to_owned();
        results.insert(format!("{suite}/{number}.{}", name.trim()), result);
    }
    assert!(
        results.len() > 40,
        "litmus ran too few tests ({}):\n{text}\n{}",
        results.len(),
        String::from_utf8_lossy(&output.stderr)
    );
    results
}

/// The tests that pass against Apache directly and not through custody,
/// with the reason (docs/CUSTODY.md lists them too).
const DIFFERENT_UNDER_CUSTODY: &[(&str, &str)] = &[(
    "locks/7.discover",
    "a PROPFIND's lockdiscovery shows the store's lock token, not the one the gateway handed out: \
     the gateway cannot tell whose lock a token of the store's is, so it binds none to the reader",
)];

#[test]
fn litmus_gives_every_test_the_same_result_through_the_gateway() {
    let apache = Apache::start();
    apache.mkcol("/dav/direct/");
    apache.mkcol("/dav/through/");
    let gateway = GatewayProcess::start(&["--upstream", &apache.url(), "--allow-unfenced-writes"]);
    let direct = litmus(&format!("{}/dav/direct/", apache.url()));
    let through = litmus(&format!("{}/dav/through/", gateway.data_url()));
    let tally = |results: &BTreeMap<String, String>| {
        let mut tally = BTreeMap::new();
        for result in results.values() {
            *tally.entry(result.clone()).or_insert(0) += 1;
        }
        tally
    };
    eprintln!(
        "litmus direct: {:?}; through the gateway: {:?}",
        tally(&direct),
        tally(&through)
    );
    let differences: Vec<String> = direct
        .iter()
        .filter(|(name, result)| through.get(*name) != Some(*result))
        .map(|(name, result)| {
            format!(
                "{name}: direct {result}, through the gateway {}",
                through.get(name).map_or("(not run)", String::as_str)
            )
        })
        .collect();
    assert!(
        differences.is_empty() && direct.len() == through.len(),
        "litmus differs through the gateway:\n{}",
        differences.join("\n")
    );
}

/// Credential custody (issue 49): litmus against Apache behind Basic
/// authentication, directly with the store's password and through the
/// gateway as an `admin` identity of its own; every test that passes
/// directly passes through custody, but those [`DIFFERENT_UNDER_CUSTODY`]
/// names. Lock tokens are the gateway's under custody (bound to the
/// identity that took the lock): the `locks` suite is the one that
/// matters.
#[test]
fn litmus_passes_through_custody_as_it_passes_directly() {
    let apache = ApacheBasic::start();
    apache.mkcol("/dav/direct/");
    apache.mkcol("/dav/custody/");
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("admin.secret"), "litmus-admin-password").unwrap();
    let identities = dir.path().join("identities.toml");
    std::fs::write(
        &identities,
        r#"
[[identity]]
name = "litmus"
access_key_id = "litmus"
secret_file = "admin.secret"
allow = [ { prefix = "/", access = "admin" } ]
"#,
    )
    .unwrap();
    let credentials = apache.write_credentials(dir.path());
    let gateway = GatewayProcess::start(&[
        "--upstream",
        &apache.url(),
        "--store",
        "webdav",
        "--upstream-credentials",
        credentials.to_str().unwrap(),
        "--identities",
        identities.to_str().unwrap(),
        "--allow-unfenced-writes",
    ]);
    let direct = litmus_as(
        &format!("{}/dav/direct/", apache.url()),
        Some((&apache.user, &apache.password)),
    );
    let through = litmus_as(
        &format!("{}/dav/custody/", gateway.data_url()),
        Some(("litmus", "litmus-admin-password")),
    );
    let mut failures = Vec::new();
    for (name, result) in &direct {
        let got = through.get(name).map_or("(not run)", String::as_str);
        let expected = DIFFERENT_UNDER_CUSTODY
            .iter()
            .any(|(different, _)| different == name);
        if result == "pass" && got != "pass" && !expected {
            failures.push(format!("{name}: direct {result}, through custody {got}"));
        }
        if expected && got == "pass" {
            failures.push(format!(
                "{name} passes through custody now: take it off DIFFERENT_UNDER_CUSTODY"
            ));
        }
    }
    let locks = through
        .keys()
        .filter(|name| name.starts_with("locks/"))
        .count();
    assert!(locks > 20, "the locks suite did not run: {through:?}");
    assert!(
        failures.is_empty(),
        "litmus under custody:\n{}\n{}",
        failures.join("\n"),
        gateway.stderr()
    );
}
