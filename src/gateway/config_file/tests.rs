use super::secrets::{ambiguous_user_info, masked_message};
use super::*;

fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fencegate.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn load_file(path: &Path, extra: &[&str]) -> Result<Loaded, LoadError> {
    let mut args = vec!["fencegate", "--config", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    load(args)
}

#[test]
fn flags_win_over_the_file_which_wins_over_defaults() {
    let (_dir, path) = write(
        "token_issuer = \"redis://:issuer-secret-7@127.0.0.1:9000/lock?x=1\"\nscope = \"prefix:2\"\nflat_keys = true\netcd_endpoints = [\"http://a:2379\", \"http://b:2379\"]\n",
    );
    let loaded = load_file(&path, &["--scope", "path"]).unwrap();
    assert_eq!(loaded.config.scope.to_string(), "path");
    assert!(loaded.config.flat_keys);
    assert_eq!(loaded.config.etcd.endpoints.len(), 2);
    assert_eq!(loaded.effective.origin("scope"), Some(Origin::Flag));
    assert_eq!(loaded.effective.origin("flat_keys"), Some(Origin::File));
    assert_eq!(loaded.effective.origin("listen"), Some(Origin::Default));
    let shown = loaded.effective.to_string();
    assert!(shown.contains("***@127.0.0.1:9000/lock?***"), "{shown}");
    // A password of its own: "pw" was also in some temporary folders'
    // names, which the first line shows.
    assert!(!shown.contains("issuer-secret-7"), "{shown}");
}

#[test]
fn every_problem_is_reported_with_its_line() {
    let (_dir, path) = write(
        "upstream_timout = 5\nscope = \"prefix:0\"\nmax_connections = \"many\"\n\n[[route]]\nname = \"a\"\nmatch = { path_prefix = \"nope\" }\n\n[[route]]\nstore = \"gcs\"\nlisten = \"127.0.0.1:1\"\n",
    );
    let Err(LoadError::File { problems, .. }) = load_file(&path, &[]) else {
        panic!("loaded");
    };
    let lines: Vec<_> = problems.iter().map(|p| p.line).collect();
    assert_eq!(
        lines,
        [
            Some(1),
            Some(2),
            Some(3),
            Some(7),
            Some(9),
            Some(10),
            Some(11)
        ],
        "{problems:?}"
    );
    assert!(problems[0].what.contains("did you mean upstream_timeout"));
}

#[test]
fn routes_inherit_the_top_level_and_override_it() {
    let (_dir, path) = write(
        "store = \"s3\"\nupstream_timeout = 7\n\n[[route]]\nname = \"docs\"\nmatch = { path_prefix = \"/dav/\" }\nstore = \"webdav\"\nupstream = \"http://127.0.0.1:1\"\nenforce = \"report\"\n\n[[route]]\nname = \"same\"\nmatch = { path_prefix = \"/dav/\" }\n",
    );
    let loaded = load_file(&path, &[]).unwrap();
    let routes = &loaded.config.routes;
    assert_eq!(routes.len(), 2);
    assert_eq!(routes[0].options.store.to_string(), "webdav");
    assert!(!routes[0].options.flat_keys);
    assert_eq!(routes[0].options.upstream_timeout.as_secs(), 7);
    assert_eq!(routes[0].fence_namespace, "docs");
    assert_eq!(routes[1].options.store.to_string(), "s3");
    assert!(routes[1].options.flat_keys);
    assert_eq!(loaded.effective.warnings.len(), 1);
}

/// The overlap warnings of a file of `[[route]]` tables, each given
/// as `(name, its lines)`, with a prefix of its own unless its lines
/// give a match.
fn overlap_warnings(routes: &[(&str, &str)]) -> Vec<String> {
    let mut text = String::from("state = \"memory\"\n");
    for (name, lines) in routes {
        text.push_str(&format!("[[route]]\nname = \"{name}\"\n{lines}\n"));
        if !lines.contains("match =") {
            text.push_str(&format!("match = {{ path_prefix = \"/{name}/\" }}\n"));
        }
    }
    let (_dir, path) = write(&text);
    let loaded = load_file(&path, &[]).unwrap();
    loaded
        .effective
        .warnings
        .into_iter()
        .filter(|w| w.contains("fenced twice"))
        .collect()
}

#[test]
fn routes_of_one_store_under_two_namespaces_are_warned_about() {
    let host = "match = { host = \"a.example\" }\n";
    // One store whatever the spelling: the scheme's port, the host's
    // case and trailing dot, a base path under the other's.
    for (a, b) in [
        ("http://h:80/x", "http://H./x/y"),
        ("https://h/a", "https://h:443/a/b/"),
        ("http://10.0.0.5:8080", "http://10.0.0.5:8080/dav"),
    ] {
        let warnings = overlap_warnings(&[
            ("a", &format!("upstream = \"{a}\"")),
            ("b", &format!("upstream = \"{b}\"")),
        ]);
        assert_eq!(warnings.len(), 1, "{a} {b}: {warnings:?}");
        assert!(warnings[0].contains("\"a\" and \"b\""), "{}", warnings[0]);
    }
    // The same base path: apart by the router alone, unless the host
    // matches differ, or the store is S3.
    let same = "upstream = \"http://h:9000/base\"";
    assert_eq!(
        overlap_warnings(&[("a", same), ("b", same)]),
        Vec::<String>::new()
    );
    let hosted = format!("{same}\n{host}");
    assert_eq!(overlap_warnings(&[("a", same), ("b", &hosted)]).len(), 1);
    let s3 = format!("{same}\nstore = \"s3\"");
    assert_eq!(overlap_warnings(&[("a", &s3), ("b", &s3)]).len(), 1);
    // Every route without an upstream is the embedded backend's.
    let warnings = overlap_warnings(&[("a", host), ("b", "")]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("the embedded backend"), "{warnings:?}");
}

#[test]
fn routes_of_one_namespace_or_of_different_stores_are_not_warned_about() {
    let one_namespace = "upstream = \"http://h/x\"\nfence_namespace = \"shared\"";
    let under = "upstream = \"http://h/x/y\"\nfence_namespace = \"shared\"";
    assert_eq!(
        overlap_warnings(&[("a", one_namespace), ("b", under)]),
        Vec::<String>::new()
    );
    for (a, b) in [
        ("http://h/x", "http://h/xy"),
        ("http://h/x", "https://h/x"),
        ("http://h:8080", "http://h:8081"),
        ("http://h", "http://g"),
    ] {
        let warnings = overlap_warnings(&[
            ("a", &format!("upstream = \"{a}\"\nstore = \"s3\"")),
            ("b", &format!("upstream = \"{b}\"\nstore = \"s3\"")),
        ]);
        assert_eq!(warnings, Vec::<String>::new(), "{a} {b}");
    }
    // One route on the embedded backend, one on an upstream.
    assert_eq!(
        overlap_warnings(&[
            ("a", "upstream = \"http://h\""),
            ("b", "match = { host = \"b\" }")
        ]),
        Vec::<String>::new()
    );
}

/// A list's values are read one by one for an ambiguous user-info: a
/// password in a later etcd endpoint was refused as ambiguous, with
/// the list shown as one masked URL, when only the joined text was.
#[test]
fn each_value_of_a_list_is_checked_for_ambiguous_user_info_alone() {
    let (_dir, path) = write(
        "etcd_endpoints = [\"http://127.0.0.1:2379\", \"http://root:etcd-pw-2@127.0.0.1:2380\"]\n",
    );
    let loaded = load_file(&path, &[]).unwrap();
    assert_eq!(loaded.config.etcd.endpoints.len(), 2);
    let shown = loaded.effective.to_string();
    assert!(
        shown.contains("[\"http://127.0.0.1:2379\", \"http://***@127.0.0.1:2380\"]"),
        "{shown}"
    );
    assert!(!shown.contains("etcd-pw-2"), "{shown}");
    let (_dir, path) = write(
        "etcd_endpoints = [\"http://127.0.0.1:2379\", \"http://root:etcd/pw@127.0.0.1:2380\"]\n",
    );
    let Err(LoadError::File { problems, .. }) = load_file(&path, &[]) else {
        panic!("loaded");
    };
    assert!(
        problems[0].what.contains("\"http://***@127.0.0.1:2380\""),
        "{problems:?}"
    );
    assert!(!problems[0].what.contains("etcd/pw"), "{problems:?}");
}

/// Found by the config_file fuzz target: a parser that quotes the
/// value escaped (`"{raw:?}" is not a URL`) showed the password of a
/// value with a control character or a quote in it.
#[test]
fn a_refused_value_is_masked_however_its_parser_quotes_it() {
    for (text, secret) in [
        (
            "upstream = \"http://user:hunter2@127.0.0.1:\\u0019/\"\n",
            "hunter2",
        ),
        (
            "upstream = \"http://user:hun\\\"ter2@127.0.0.1:9/\"\n",
            "ter2",
        ),
    ] {
        let (_dir, path) = write(text);
        let Err(error) = load_file(&path, &[]) else {
            panic!("loaded: {text}");
        };
        let shown = error.to_string();
        assert!(!shown.contains(secret), "{secret} in {shown}");
        assert!(shown.contains("***@127.0.0.1"), "{shown}");
    }
    // A message that names the value only partly is not shown.
    assert_eq!(
        masked_message("bad password 'pw-1'", "http://u:pw-1@h", None),
        None
    );
    assert_eq!(
        masked_message(
            "invalid value 'http://u:pw-1@h' for '[x]': no",
            "http://u:pw-1@h",
            None
        )
        .as_deref(),
        Some("invalid value 'http://***@h' for '[x]': no")
    );
}

#[test]
fn masks_user_info_and_queries() {
    assert_eq!(mask("redis://:pw@h:6379/k"), "redis://***@h:6379/k");
    assert_eq!(mask("redis://:p/w?x#y@h:6379/k"), "redis://***@h:6379/k");
    assert!(ambiguous_user_info("redis://:p/w@h:6379/k"));
    assert!(!ambiguous_user_info("redis://:p%2Fw@h:6379/k"));
    // An `@` in a path reads as user-info to a reader that takes the
    // last one: as ambiguous, and refused.
    assert!(ambiguous_user_info("http://h/a@b"));
    assert!(!ambiguous_user_info("http://h/a"));
    assert_eq!(mask("http://h/b?X-Amz-Signature=x"), "http://h/b?***");
    assert_eq!(mask("plain"), "plain");
}
