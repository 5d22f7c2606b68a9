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
use support::GatewayProcess;

/// Runs litmus against the collection `url`; each test's name (with its
/// suite) and result (`pass`, `FAIL`, `SKIPPED`, `WARNING`...).
fn litmus(url: &str) -> BTreeMap<String, String> {
    // litmus writes debug.log and child.log where it runs.
    let logs = tempfile::tempdir().expect("a temporary directory");
    let output = Command::new("litmus")
        .arg(url)
        .current_dir(logs.path())
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
