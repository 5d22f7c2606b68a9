//! `--config FILE` and `fencegate check-config FILE` (SPEC "Configuration
//! file and routes"), through the real binary:
//!
//! - `check-config` on a file with many mistakes reports every one at
//!   once, each as `FILE:LINE: what`, and exits 1;
//! - `check-config` on a good file prints the effective configuration,
//!   each value with where it came from (`default`, `file`, `env`,
//!   `route`), URL user-info and queries masked, and exits 0; a password
//!   in a URL is never printed;
//! - a running gateway takes a flag over its environment variable over the
//!   file over the default (`enforce`, seen in what a stale write gets),
//!   and reads a relative path in the file from the file's folder;
//! - a gateway started with a bad file exits non-zero, the problem on
//!   stderr as `FILE:LINE: what`.

#[path = "../support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};

use support::{run_on_free_ports, run_to_exit, Backend, Finished, GatewayProcess, HANG_GUARD};

/// Writes `text` as `fencegate.toml` in a new temporary folder.
fn config_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fencegate.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn check_config(path: &Path, envs: &[(&str, &str)]) -> Finished {
    run_to_exit(&["check-config", path.to_str().unwrap()], envs)
}

/// The line of `check-config`'s output that sets `key` in the section
/// (`None`: the top level; `Some(name)`: that `[[route]]`).
fn shown<'a>(stdout: &'a str, route: Option<&str>, key: &str) -> &'a str {
    let mut section = None;
    let mut lines = stdout.lines().peekable();
    while let Some(line) = lines.next() {
        if line == "[[route]]" {
            // The route's name is its first line.
            let name = lines.peek().and_then(|l| {
                let value = l.strip_prefix("name = \"")?;
                Some(&value[..value.find('"')?])
            });
            section = name;
            continue;
        }
        if section == route
            && line
                .strip_prefix(key)
                .is_some_and(|rest| rest.starts_with(" = "))
        {
            return line;
        }
    }
    panic!("no {key} in {route:?} of:\n{stdout}");
}

/// The value and origin (the comment) of a line `key = value  # origin`.
fn value_and_origin(line: &str) -> (&str, &str) {
    let (setting, origin) = line.rsplit_once("  # ").expect("a # origin comment");
    let value = setting.split_once(" = ").expect("key = value").1.trim();
    (value, origin.trim())
}

#[test]
fn check_config_reports_every_mistake_with_its_line_and_exits_1() {
    let (_dir, path) = config_file(concat!(
        "# a configuration with a mistake on each of its option lines\n", // 1
        "upstream_timout = 5\n",                                          // 2
        "enforce = \"sometimes\"\n",                                      // 3
        "max_connections = [1, 2]\n",                                     // 4
        "state = \"memory\"\n",                                           // 5: fine
        "\n",                                                             // 6
        "[[route]]\n",                                                    // 7
        "name = \"docs\"\n",                                              // 8
        "match = { path_prefix = \"no-slash\" }\n",                       // 9
        "\n",                                                             // 10
        "[[route]]\n",                                                    // 11
        "name = \"logs\"\n",                                              // 12
        "match = { host = \"Logs.Example:80\" }\n",                       // 13
        "listen = \"127.0.0.1:1\"\n",                                     // 14
        "colour = \"blue\"\n",                                            // 15
        "\n",                                                             // 16
        "[[route]]\n",                                                    // 17
        "match = { path_prefix = \"/x/\" }\n",                            // 18
        "store = \"gcs\"\n",                                              // 19
        "\n",                                                             // 20
        "[[route]]\n",                                                    // 21
        "name = \"ok\"\n",                                                // 22
        "match = { path_prefix = \"/ok/\" }\n",                           // 23
        "\n",                                                             // 24
        "[[route]]\n",                                                    // 25
        "name = \"ok\"\n",                                                // 26
        "match = { path_prefix = \"/ok2/\" }\n",                          // 27
    ));
    let run = check_config(&path, &[]);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    let file = path.display().to_string();
    // (line, what the line says), every one of them in one run.
    let expected: &[(usize, &[&str])] = &[
        (
            2,
            &[
                "unknown option",
                "upstream_timout",
                "did you mean upstream_timeout",
            ],
        ),
        (3, &["enforce", "sometimes"]),
        (4, &["max_connections", "array"]),
        (9, &["match", "no-slash"]),
        (13, &["match", "Logs.Example:80"]),
        (14, &["listen", "gateway's"]),
        (15, &["colour"]),
        (17, &["needs a name"]),
        (19, &["store", "gcs"]),
        (25, &["a second route named \"ok\""]),
    ];
    let lines: Vec<&str> = run.stderr.lines().filter(|l| !l.is_empty()).collect();
    for (line, words) in expected {
        let prefix = format!("{file}:{line}: ");
        let found = lines
            .iter()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no problem reported for line {line}:\n{}", run.stderr));
        for word in *words {
            assert!(
                found.contains(word),
                "line {line}: {word:?} not in {found:?}"
            );
        }
    }
    // Nothing else, and nothing about the good line 5.
    assert_eq!(lines.len(), expected.len(), "{}", run.stderr);
    assert!(
        lines.iter().all(|l| l.starts_with(&format!("{file}:"))),
        "{}",
        run.stderr
    );
    // Nothing on stdout: no configuration is shown for a file with problems.
    assert_eq!(run.stdout, "", "{run:?}");
}

/// A `[[route]]` whose name repeats an earlier route's, and that has
/// another problem as well, is reported for both at once.
#[test]
fn a_duplicate_route_name_is_reported_beside_the_routes_other_problems() {
    let (_dir, path) = config_file(concat!(
        "[[route]]\n",                         // 1
        "name = \"a\"\n",                      // 2
        "match = { path_prefix = \"/a/\" }\n", // 3
        "\n",                                  // 4
        "[[route]]\n",                         // 5
        "name = \"a\"\n",                      // 6
        "match = { path_prefix = \"/b/\" }\n", // 7
        "store = \"gcs\"\n",                   // 8
    ));
    let run = check_config(&path, &[]);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let file = path.display().to_string();
    assert!(
        run.stderr.contains(&format!("{file}:8: store")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("a second route named \"a\""),
        "the duplicate name is not reported: {}",
        run.stderr
    );
}

#[test]
fn check_config_shows_each_values_origin_and_masks_secrets() {
    let (dir, path) = config_file(concat!(
        "upstream_timeout = 7\n",
        "enforce = \"report\"\n",
        "scope = \"prefix:3\"\n",
        "access_log = \"logs/access.log\"\n",
        "token_issuer = \"postgres://fencegate@127.0.0.1:5432/locks?sequence=fence_seq\"\n",
        "\n",
        "[[route]]\n",
        "name = \"billing\"\n",
        "match = { host = \"*.s3.internal\", path_prefix = \"/billing-\" }\n",
        "upstream = \"http://127.0.0.1:9/base\"\n",
        "store = \"s3\"\n",
        "enforce = \"off\"\n",
    ));
    // The environment wins over the file (scope), and gives what the file
    // does not (max_connections).
    let run = check_config(
        &path,
        &[
            ("FENCEGATE_SCOPE", "prefix:2"),
            ("FENCEGATE_MAX_CONNECTIONS", "77"),
        ],
    );
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let out = run.stdout.as_str();
    let top = |key| value_and_origin(shown(out, None, key));
    assert_eq!(top("upstream_timeout"), ("7", "file"), "{out}");
    assert_eq!(top("enforce"), ("\"report\"", "file"), "{out}");
    assert_eq!(top("scope"), ("\"prefix:2\"", "env"), "{out}");
    assert_eq!(top("max_connections"), ("77", "env"), "{out}");
    assert_eq!(top("listen"), ("\"127.0.0.1:8080\"", "default"), "{out}");
    assert_eq!(top("store"), ("\"http\"", "default"), "{out}");
    // A relative path in the file is the file's folder's.
    let log = dir.path().join("logs/access.log");
    assert_eq!(
        top("access_log"),
        (format!("\"{}\"", log.display()).as_str(), "file"),
        "{out}"
    );
    // User-info and the query of a URL are masked.
    assert_eq!(
        top("token_issuer"),
        ("\"postgres://***@127.0.0.1:5432/locks?***\"", "file"),
        "{out}"
    );
    assert!(!out.contains("fence_seq"), "{out}");

    // The route: its own values, and the top level's where it sets none.
    let route = |key| value_and_origin(shown(out, Some("billing"), key));
    assert_eq!(route("name"), ("\"billing\"", "route"), "{out}");
    assert_eq!(
        route("match"),
        (
            "{ host = \"*.s3.internal\", path_prefix = \"/billing-\" }",
            "route"
        ),
        "{out}"
    );
    assert_eq!(route("fence_namespace"), ("\"billing\"", "route"), "{out}");
    assert_eq!(route("store"), ("\"s3\"", "route"), "{out}");
    assert_eq!(route("enforce"), ("\"off\"", "route"), "{out}");
    assert_eq!(
        route("upstream"),
        ("\"http://127.0.0.1:9/base\"", "route"),
        "{out}"
    );
    assert_eq!(route("upstream_timeout"), ("7", "file"), "{out}");
    assert_eq!(route("scope"), ("\"prefix:2\"", "env"), "{out}");
    assert_eq!(
        route("token_header"),
        ("\"X-Fencing-Token\"", "default"),
        "{out}"
    );
    // Every value line says where it came from.
    for line in out.lines() {
        if line.is_empty() || line.starts_with('#') || line == "[[route]]" {
            continue;
        }
        let (_, origin) = value_and_origin(line);
        assert!(
            ["default", "file", "env", "flag", "route"].contains(&origin),
            "{line}"
        );
    }
}

#[test]
fn a_password_in_a_url_of_the_file_is_never_printed() {
    // The gateway refuses a password in the issuer's URL (it belongs in
    // token_issuer_password_file): check-config says so, masked.
    let (_dir, path) = config_file(concat!(
        "upstream_timeout = 7\n",
        "token_issuer = \"redis://:secretpw@127.0.0.1:6379/lock\"\n",
    ));
    let run = check_config(&path, &[]);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    assert!(!run.stdout.contains("secretpw"), "{run:?}");
    assert!(!run.stderr.contains("secretpw"), "{run:?}");
    assert!(
        run.stderr.contains("redis://:***@127.0.0.1:6379/lock")
            || run.stderr.contains("redis://***@127.0.0.1:6379/lock"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.starts_with(&format!("{}", path.display())),
        "{}",
        run.stderr
    );
    // Nor does a gateway started with it print it.
    let started = run_on_free_ports(&["--config", path.to_str().unwrap()]);
    assert!(!started.status.success(), "{started:?}");
    assert!(!started.stderr.contains("secretpw"), "{started:?}");
    assert!(!started.stdout.contains("secretpw"), "{started:?}");
}

/// A value refused by its option's parser is shown in the problem line
/// with its URL user-info and query masked as `***`, as everywhere else.
#[test]
fn a_refused_url_value_is_masked_in_the_problem_line() {
    let (_dir, path) = config_file(concat!(
        "upstream = \"http://user:hunter2@127.0.0.1:9/\"\n",
        "[[route]]\n",
        "name = \"r\"\n",
        "match = { path_prefix = \"/r/\" }\n",
        "upstream = \"http://127.0.0.1:9/b?X-Amz-Signature=sekrit\"\n",
    ));
    let run = check_config(&path, &[]);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let file = path.display().to_string();
    assert!(
        run.stderr.contains(&format!("{file}:1: upstream")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!("{file}:5: upstream")),
        "{}",
        run.stderr
    );
    for secret in ["hunter2", "sekrit"] {
        assert!(
            !run.stderr.contains(secret),
            "{secret} printed: {}",
            run.stderr
        );
    }
}

/// `fencegate check-config FILE [OPTIONS]`: options given after the file
/// show as `# flag`, over the file's values.
#[test]
fn check_config_shows_a_flag_given_value_as_flag() {
    let (_dir, path) = config_file("enforce = \"report\"\nupstream_timeout = 7\n");
    let run = run_to_exit(
        &["check-config", path.to_str().unwrap(), "--enforce", "on"],
        &[],
    );
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let out = run.stdout.as_str();
    assert_eq!(
        value_and_origin(shown(out, None, "enforce")),
        ("\"on\"", "flag"),
        "{out}"
    );
    assert_eq!(
        value_and_origin(shown(out, None, "upstream_timeout")),
        ("7", "file"),
        "{out}"
    );
}

/// What a stale write gets from a gateway started with `args` and `envs`
/// (fence 5 first): 409 under `enforce on`, forwarded (200) under
/// `report`.
fn stale_write_status(backend: &Backend, args: &[&str], envs: &[(&str, &str)]) -> u16 {
    let gw = GatewayProcess::start_with_env(args, envs);
    let path = "/precedence/report";
    let first = gw.put(path, 5);
    assert_eq!(first.status, 200, "{}", first.text());
    let before = backend.records_for(path).len();
    let stale = gw.put(path, 4);
    match stale.status {
        409 => {
            stale.assert_gateway_error(409, "stale_token");
            assert_eq!(
                backend.records_for(path).len(),
                before,
                "a 409 was forwarded"
            );
        }
        200 => assert_eq!(backend.records_for(path).len(), before + 1),
        other => panic!("stale write: {other} {}", stale.text()),
    }
    stale.status
}

#[test]
fn a_flag_wins_over_the_environment_which_wins_over_the_file_which_wins_over_the_default() {
    let backend = Backend::start();
    let (dir, path) = config_file(&format!(
        "upstream = \"{}\"\nstate = \"memory\"\nenforce = \"report\"\naccess_log = \"access.log\"\n",
        backend.url()
    ));
    let file = path.to_str().unwrap();
    // The default (on) refuses; the file's report forwards.
    let (_plain_dir, plain) = config_file(&format!("upstream = \"{}\"\n", backend.url()));
    assert_eq!(
        stale_write_status(&backend, &["--config", plain.to_str().unwrap()], &[]),
        409
    );
    assert_eq!(stale_write_status(&backend, &["--config", file], &[]), 200);
    // The environment wins over the file.
    assert_eq!(
        stale_write_status(
            &backend,
            &["--config", file],
            &[("FENCEGATE_ENFORCE", "on")]
        ),
        409
    );
    // A flag wins over the file, and over the environment.
    assert_eq!(
        stale_write_status(&backend, &["--config", file, "--enforce", "on"], &[]),
        409
    );
    assert_eq!(
        stale_write_status(
            &backend,
            &["--config", file, "--enforce", "report"],
            &[("FENCEGATE_ENFORCE", "on")]
        ),
        200
    );
    // access_log = "access.log": the file's folder's, whatever the
    // gateway's working directory.
    let gw = GatewayProcess::start(&["--config", file]);
    assert_eq!(gw.put("/precedence/logged", 1).status, 200);
    let log = dir.path().join("access.log");
    let logged = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .find(|json| json["path"] == "/precedence/logged")
    };
    assert!(
        support::wait_until(HANG_GUARD, || logged().is_some()),
        "no line in an access log at {}",
        log.display()
    );
    assert_eq!(logged().unwrap()["route"], "default");
}

#[test]
fn a_gateway_started_with_a_bad_file_exits_with_the_files_line() {
    let (_dir, path) = config_file(concat!(
        "state = \"memory\"\n",
        "# the next line is wrong\n",
        "upstream_timeout = \"soon\"\n",
    ));
    let run = run_on_free_ports(&["--config", path.to_str().unwrap()]);
    let line = run.start_error("a bad configuration file");
    let expected = format!("{}:3: upstream_timeout", path.display());
    assert!(line.contains(&expected), "{expected:?} not in {line:?}");
    assert!(line.contains("soon"), "{line}");

    // Several mistakes: each with its line, and the gateway never listens.
    let (_dir, path) = config_file(concat!(
        "upstream_timout = 5\n",
        "enforce = \"sometimes\"\n",
        "\n",
        "[[route]]\n",
        "name = \"x\"\n",
        "match = { path_prefix = \"x\" }\n",
    ));
    let run = run_on_free_ports(&["--config", path.to_str().unwrap()]);
    assert!(!run.status.success(), "{run:?}");
    assert!(!run.stdout.contains("listening"), "{run:?}");
    let file = path.display().to_string();
    for line in [1, 2, 6] {
        assert!(
            run.stderr.contains(&format!("{file}:{line}: ")),
            "line {line} not reported:\n{}",
            run.stderr
        );
    }
    // A file that does not exist: one line naming it.
    let missing = std::env::temp_dir().join("fencegate-no-such-config.toml");
    let run = run_on_free_ports(&["--config", missing.to_str().unwrap()]);
    let line = run.start_error("a missing configuration file");
    assert!(line.contains(missing.to_str().unwrap()), "{line}");
}

/// The example of docs/CONFIGURATION.md is docs/fencegate.example.toml,
/// word for word, and it loads: `check-config` passes with its secrets'
/// variables set, and names each one missing otherwise.
#[test]
fn the_documented_example_file_loads() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = root.join("docs/fencegate.example.toml");
    let text = std::fs::read_to_string(&example).unwrap();
    let doc = std::fs::read_to_string(root.join("docs/CONFIGURATION.md")).unwrap();
    let block = doc
        .split("```toml\n")
        .map(|rest| rest.split("```").next().unwrap_or_default())
        .find(|block| block.starts_with("# One gateway in front of"))
        .expect("the example's block in docs/CONFIGURATION.md");
    assert_eq!(
        block, text,
        "docs/CONFIGURATION.md's copy differs from the file"
    );

    let secrets = [
        ("FENCEGATE_BILLING_SECRET", "billing-secret-0123456789"),
        ("FENCEGATE_DOCS_SECRET", "docs-secret-0123456789"),
        ("FENCEGATE_LOGS_SECRET", "logs-secret-0123456789"),
        ("FENCEGATE_S3_SECRET", "s3-secret-0123456789"),
        ("FENCEGATE_DAV_PASSWORD", "dav-password-0123456789"),
    ];
    let path = example.to_str().unwrap();
    let run = run_to_exit(&["check-config", path], &secrets);
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    for route in ["billing", "docs", "logs"] {
        assert!(
            run.stdout.contains(&format!("name = \"{route}\"")),
            "{}",
            run.stdout
        );
    }
    for (_, secret) in secrets {
        assert!(!run.stdout.contains(secret), "{}", run.stdout);
    }
    let run = run_to_exit(&["check-config", path], &[]);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    for (var, _) in secrets {
        assert!(run.stderr.contains(var), "{var}: {}", run.stderr);
    }
}

/// A value over 65,535 characters (the largest padding width Rust's
/// formatting takes) made `check-config` panic while it lined up the
/// origins (routes issue, configuration hygiene).
#[test]
fn check_config_takes_a_value_of_any_length_without_a_panic() {
    let long = "a".repeat(70_000);
    let (_dir, path) = config_file(&format!("state = \"memory\"\ntoken_header = \"x{long}\"\n"));
    let finished = check_config(&path, &[]);
    assert!(
        !finished.stderr.contains("panicked"),
        "{}",
        &finished.stderr[..finished.stderr.len().min(500)]
    );
    assert!(finished.status.code().is_some(), "killed by a signal");
    let (_dir, path) = config_file(&format!("state = \"memory\"\ndata_dir = \"/tmp/{long}\"\n"));
    let finished = check_config(&path, &[]);
    assert!(
        !finished.stderr.contains("panicked"),
        "{}",
        &finished.stderr[..finished.stderr.len().min(500)]
    );
    assert!(finished.status.code().is_some(), "killed by a signal");
}

/// Configuration hygiene (routes issue, item 5): a password with a
/// reserved character in a URL's user-info is refused at load and never
/// shown, whichever way a reader would split it; a route prefix that no
/// normalised path has is an error; a long value is cut in the message.
#[test]
fn check_config_refuses_ambiguous_user_info_and_prefixes_that_never_match() {
    let (_dir, path) = config_file(
        "state = \"memory\"\ntoken_issuer = \"redis://:se/cr?et#x@127.0.0.1:6379/lock\"\n\n[[route]]\nname = \"a\"\nmatch = { path_prefix = \"/a//b/\" }\n\n[[route]]\nname = \"b\"\nmatch = { path_prefix = \"/b/../c/\" }\n\n[[route]]\nname = \"dotted\"\nmatch = { path_prefix = \"/.well-known/\" }\n",
    );
    let finished = check_config(&path, &[]);
    assert_eq!(finished.status.code(), Some(1), "{}", finished.stderr);
    let text = format!("{}{}", finished.stdout, finished.stderr);
    for secret in ["se/cr", "cr?et", "et#x"] {
        assert!(!text.contains(secret), "{secret} shown:\n{text}");
    }
    assert!(text.contains("percent-encode the password"), "{text}");
    assert!(
        text.contains("\"/a//b/\"") && text.contains("\"/b/../c/\""),
        "{text}"
    );
    assert!(
        !text.contains("/.well-known/"),
        "a prefix that can match was refused:\n{text}"
    );
    let long = "x".repeat(5000);
    let (_dir, path) = config_file(&format!("state = \"memory\"\nupstream = \"{long}\"\n"));
    let finished = check_config(&path, &[]);
    assert_eq!(finished.status.code(), Some(1), "{}", finished.stderr);
    assert!(
        finished.stderr.len() < 2000,
        "the whole value echoed: {} bytes",
        finished.stderr.len()
    );
}

/// Two `[[route]]` tables: `a` under `/a/` on `upstream_a`, `b` under
/// `/b/` on `upstream_b`, each `extra` line appended to both.
fn two_routes(upstream_a: &str, upstream_b: &str, extra: &str) -> String {
    format!(
        "state = \"memory\"\n\n[[route]]\nname = \"a\"\nmatch = {{ path_prefix = \"/a/\" }}\nupstream = \"{upstream_a}\"\n{extra}\n\n[[route]]\nname = \"b\"\nmatch = {{ path_prefix = \"/b/\" }}\nupstream = \"{upstream_b}\"\n{extra}\n"
    )
}

/// Configuration hygiene (routes issue, item 5): routes whose upstreams
/// are one store under different fence namespaces are a warning in
/// `check-config`'s output (exit 0), naming both routes and the upstream;
/// none for the same store in one namespace, or for different stores.
#[test]
fn check_config_warns_about_one_store_under_two_namespaces() {
    // One store: the same host and port, one base path under the other.
    let (_dir, path) = config_file(&two_routes(
        "http://10.0.0.5:8080",
        "http://10.0.0.5:8080/b-base",
        "",
    ));
    let run = check_config(&path, &[]);
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let warning = run
        .stdout
        .lines()
        .find(|l| l.starts_with("# warning: ") && l.contains("fenced twice"))
        .unwrap_or_else(|| panic!("no warning:\n{}", run.stdout));
    for word in [
        "\"a\" and \"b\"",
        "http://10.0.0.5:8080",
        "http://10.0.0.5:8080/b-base",
    ] {
        assert!(warning.contains(word), "{word} not in {warning}");
    }

    // The same, in one namespace: no warning.
    let (_dir, path) = config_file(&two_routes(
        "http://10.0.0.5:8080",
        "http://10.0.0.5:8080/b-base",
        "fence_namespace = \"shared\"",
    ));
    let run = check_config(&path, &[]);
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    assert!(!run.stdout.contains("warning"), "{}", run.stdout);

    // Different stores: another port, another host, a sibling base path.
    for (a, b) in [
        ("http://10.0.0.5:8080", "http://10.0.0.5:8081"),
        ("http://10.0.0.5:8080", "http://10.0.0.6:8080"),
        ("http://10.0.0.5:8080/x", "http://10.0.0.5:8080/xy"),
    ] {
        let (_dir, path) = config_file(&two_routes(a, b, ""));
        let run = check_config(&path, &[]);
        assert_eq!(run.status.code(), Some(0), "{run:?}");
        assert!(!run.stdout.contains("warning"), "{a} {b}:\n{}", run.stdout);
    }
}

/// An upstream's password is refused at load, masked: with routes that
/// would overlap, neither the refusal nor anything else shows it.
#[test]
fn the_overlap_check_never_shows_an_upstreams_password() {
    let (_dir, path) = config_file(&two_routes(
        "http://fencegate:Pa55-overlap@10.0.0.5:8080",
        "http://10.0.0.5:8080/b-base",
        "",
    ));
    let run = check_config(&path, &[]);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let text = format!("{}{}", run.stdout, run.stderr);
    assert!(!text.contains("Pa55-overlap"), "{text}");
    assert!(text.contains("***@10.0.0.5:8080"), "{text}");
}

/// The gateway logs the warning at start, and again at each reload that
/// puts the configuration in force.
#[test]
fn the_gateway_logs_the_overlap_warning_at_start_and_reload() {
    let backend = Backend::start();
    let url = backend.url();
    let (_dir, path) = config_file(&two_routes(&url, &format!("{url}/b-base"), ""));
    let gw = GatewayProcess::start(&["--config", path.to_str().unwrap()]);
    let warned = |n: usize| {
        support::wait_until(HANG_GUARD, || {
            gw.stderr()
                .lines()
                .filter(|l| l.contains("fenced twice") && l.contains("\"a\" and \"b\""))
                .count()
                >= n
        })
    };
    assert!(warned(1), "no warning at start:\n{}", gw.stderr());
    assert!(gw.stderr().contains(&url), "{}", gw.stderr());
    gw.sighup();
    assert!(warned(2), "no warning at reload:\n{}", gw.stderr());
    // A warning, not a refusal: the routes serve.
    assert_eq!(gw.put("/a/x", 1).status, 200);
}

/// A secret file that never ends (`/dev/zero` given by mistake) is an
/// error, not a check-config that reads until the machine's memory is
/// gone (run_to_exit's bound catches a hang).
#[test]
fn a_secret_file_that_never_ends_is_refused_not_read_forever() {
    let (_dir, path) = config_file("state = \"memory\"\nadmin_token_file = \"/dev/zero\"\n");
    let finished = check_config(&path, &[]);
    assert_eq!(finished.status.code(), Some(1), "{finished:?}");
    let all = format!("{}{}", finished.stdout, finished.stderr);
    assert!(all.contains("larger than 16 MiB"), "{all}");
}
