//! `fencegate check-config FILE` on any file: the loader and every check a
//! start makes without binding or connecting
//! (`fencegate::gateway::config_file::check`), and what `check-config`
//! prints from its answer: the effective configuration with its warnings
//! (and its JSON, which the admin plane's `GET /config` shows), or the
//! error.
//!
//! The input is the file's text when it is UTF-8 (libFuzzer mutates the
//! committed configurations); otherwise its bytes choose a configuration
//! from the option names, routes, matches, upstreams and URLs with
//! passwords the gateway knows, so that most runs load far enough to
//! build routes.
//!
//! The oracles (SPEC "Configuration file and routes": `check-config` never
//! shows a secret and never panics on any input):
//! - no panic;
//! - no password of an option's URL in what is printed: for each string
//!   value of an option (at the top level or in a route; not of one that
//!   names a file, whose path is no secret) with a `://` and an `@`, the
//!   user-info (everything between them, up to the last `@`, as the
//!   gateway masks it), when it is in what is printed, must be there for
//!   another reason: the same file with that user-info's letters and
//!   digits changed (its `%` escapes, reserved characters and length
//!   kept) prints it too;
//! - nor the content of a secret file (`pw.secret`, beside the file) or
//!   of a secret environment variable (`FENCEGATE_FUZZ_SECRET`), which the
//!   committed configurations name, unless the file itself holds it.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use clap::CommandFactory;
use fencegate::gateway::cli::Cli;
use fencegate::gateway::config_file::check;
use libfuzzer_sys::arbitrary::{Result as ArbitraryResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// What `pw.secret` holds; what `FENCEGATE_FUZZ_SECRET` holds.
const FILE_SECRET: &str = "FileSecret-6f1c27d0";
const ENV_SECRET: &str = "EnvSecret-93ab54e2";

/// The folder of the configuration file, with its secret file.
fn folder() -> &'static PathBuf {
    static FOLDER: OnceLock<PathBuf> = OnceLock::new();
    FOLDER.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("fencegate-fuzz-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        std::fs::write(dir.join("pw.secret"), format!("{FILE_SECRET}\n")).expect("pw.secret");
        // The process's own variable: nothing else reads it.
        std::env::set_var("FENCEGATE_FUZZ_SECRET", ENV_SECRET);
        dir
    })
}

/// What `check-config` prints for `text`: stdout or stderr.
fn printed(text: &str) -> String {
    let path = folder().join("fencegate.toml");
    std::fs::write(&path, text).expect("write the configuration");
    let args = ["fencegate".as_ref(), "--config".as_ref(), path.as_os_str()];
    match check(args) {
        Ok(loaded) => format!("{}\n{}", loaded.effective, loaded.effective.to_json()),
        Err(error) => error.to_string(),
    }
}

fuzz_target!(|input: &[u8]| {
    let text = match std::str::from_utf8(input) {
        Ok(text) => text.to_owned(),
        Err(_) => match assemble(&mut Unstructured::new(input)) {
            Ok(text) => text,
            Err(_) => return,
        },
    };
    let shown = printed(&text);
    for secret in [FILE_SECRET, ENV_SECRET] {
        assert!(
            !shown.contains(secret) || text.contains(secret),
            "a secret read by the loader is printed:\n{shown}"
        );
    }
    for (at, len) in user_infos(&text) {
        let secret = &text[at..at + len];
        // A shorter one is in most answers by chance, and the control
        // run would double the cost of most runs.
        if secret.len() < 4 || !shown.contains(secret) {
            continue;
        }
        let Some(other) = changed(secret) else {
            continue;
        };
        let mut control = text.clone();
        control.replace_range(at..at + len, &other);
        assert!(
            printed(&control).contains(secret),
            "the user-info {secret:?} of a URL is printed:\n{shown}"
        );
    }
});

/// The options whose value is a file's or a folder's path, as the loader
/// tells them (their value names, and the access log).
fn paths() -> &'static Vec<String> {
    static PATHS: OnceLock<Vec<String>> = OnceLock::new();
    PATHS.get_or_init(|| {
        Cli::command()
            .get_arguments()
            .filter(|arg| {
                arg.get_id() == "access_log"
                    || arg.get_value_names().is_some_and(|names| {
                        names.iter().any(|n| matches!(n.as_str(), "FILE" | "DIR"))
                    })
            })
            .map(|arg| arg.get_id().to_string())
            .collect()
    })
}

/// Where the user-info of each option's URL is in `text` (byte offset,
/// length), for the values written without escapes.
fn user_infos(text: &str) -> Vec<(usize, usize)> {
    let (root, _) = DeTable::parse_recoverable(text);
    let mut found = Vec::new();
    let path = |key: &str| paths().iter().any(|p| p == key);
    for (key, value) in root.get_ref().iter() {
        match key.get_ref().as_ref() {
            "identity" => {}
            key if path(key) => {}
            "route" => {
                let Some(routes) = value.get_ref().as_array() else {
                    continue;
                };
                for route in routes.iter() {
                    let Some(route) = route.get_ref().as_table() else {
                        continue;
                    };
                    for (key, value) in route.iter() {
                        // The route's own keys are not options (and a
                        // table's values are not shown).
                        let key = key.get_ref().as_ref();
                        if !matches!(key, "name" | "match" | "fence_namespace" | "identities")
                            && !path(key)
                        {
                            strings(text, value, &mut found);
                        }
                    }
                }
            }
            _ => strings(text, value, &mut found),
        }
    }
    found
}

/// The user-info of each URL among the strings of `value` (a string or an
/// array of them, at any depth).
fn strings(text: &str, value: &Spanned<DeValue<'_>>, found: &mut Vec<(usize, usize)>) {
    match value.get_ref() {
        DeValue::String(s) => {
            let span = value.span();
            let Some(raw) = text.get(span.start..span.end) else {
                return;
            };
            // Only a value written as it reads (no escape) is found in the
            // text, where it can be changed.
            let Some(inner) = raw.find(s.as_ref()).filter(|_| !s.is_empty()) else {
                return;
            };
            let Some(scheme_end) = s.find("://") else {
                return;
            };
            let rest = &s[scheme_end + 3..];
            if let Some(last_at) = rest.rfind('@') {
                found.push((span.start + inner + scheme_end + 3, last_at));
            }
        }
        DeValue::Array(items) => {
            for item in items.iter() {
                strings(text, item, found);
            }
        }
        _ => {}
    }
}

/// `secret` with each letter and digit changed to another of its kind, but
/// those of `%` escapes (which keep what they decode to valid or not): the
/// same shape, other characters. `None` if nothing could change.
fn changed(secret: &str) -> Option<String> {
    let mut out = String::with_capacity(secret.len());
    let mut escape = 0;
    let mut any = false;
    for c in secret.chars() {
        if escape > 0 {
            escape -= 1;
            out.push(c);
            continue;
        }
        let next = match c {
            '%' => {
                escape = 2;
                c
            }
            'a'..='y' | 'A'..='Y' | '0'..='8' => char::from(c as u8 + 1),
            'z' => 'a',
            'Z' => 'A',
            '9' => '0',
            _ => c,
        };
        any |= next != c;
        out.push(next);
    }
    any.then_some(out)
}

/// A configuration chosen by `u`: top-level options, custody tables and
/// routes, from what the gateway knows, with passwords of any characters
/// a TOML basic string takes unescaped.
fn assemble(u: &mut Unstructured<'_>) -> ArbitraryResult<String> {
    let mut text = String::new();
    for _ in 0..u.int_in_range(0..=4)? {
        let (key, value) = *u.choose(TOP)?;
        let value = fill(u, value)?;
        text.push_str(&format!("{key} = {value}\n"));
    }
    if u.ratio(1, 4)? {
        text.push_str(u.choose(CUSTODY)?);
    }
    for _ in 0..u.int_in_range(0..=4)? {
        text.push_str(&format!("\n[[route]]\nname = \"{}\"\n", u.choose(NAMES)?));
        let host = u.choose(HOSTS)?;
        let prefix = u.choose(PREFIXES)?;
        let matches = match u.int_in_range(0..=2)? {
            0 => format!("{{ path_prefix = \"{prefix}\" }}"),
            1 => format!("{{ host = \"{host}\" }}"),
            _ => format!("{{ host = \"{host}\", path_prefix = \"{prefix}\" }}"),
        };
        text.push_str(&format!("match = {matches}\n"));
        for _ in 0..u.int_in_range(0..=4)? {
            let (key, value) = *u.choose(ROUTE)?;
            let value = fill(u, value)?;
            text.push_str(&format!("{key} = {value}\n"));
        }
    }
    Ok(text)
}

/// `template` with each `{pw}` a password from `u`, each `{up}` an
/// upstream.
fn fill(u: &mut Unstructured<'_>, template: &str) -> ArbitraryResult<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        let Some(end) = rest[at..].find('}') else {
            break;
        };
        match &rest[at..at + end + 1] {
            "{pw}" => {
                let len = u.int_in_range(1..=24)?;
                for _ in 0..len {
                    out.push(char::from(*u.choose(PASSWORD_BYTES)?));
                }
            }
            "{up}" => out.push_str(u.choose(UPSTREAMS)?),
            other => out.push_str(other),
        }
        rest = &rest[at + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// What a password is made of: anything a TOML basic string holds
/// unescaped, reserved characters included.
const PASSWORD_BYTES: &[u8] =
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:%/?#@[] ";

const TOP: &[(&str, &str)] = &[
    ("state", "\"memory\""),
    ("state", "\"etcd\""),
    ("state", "\"disk\""),
    ("token_issuer", "\"redis://:{pw}@127.0.0.1:6379/lock\""),
    (
        "token_issuer",
        "\"redis://fencegate:{pw}@127.0.0.1:6379/lock?db=2\"",
    ),
    (
        "token_issuer",
        "\"postgres://fencegate:{pw}@127.0.0.1:5432/locks?sequence=s\"",
    ),
    ("token_issuer", "\"etcd://u:{pw}@127.0.0.1:2379/lock\""),
    ("token_issuer", "\"zookeeper://127.0.0.1:2181/lock\""),
    ("token_issuer_password_file", "\"pw.secret\""),
    (
        "etcd_endpoints",
        "[\"http://u:{pw}@127.0.0.1:2379\", \"http://127.0.0.1:2380\"]",
    ),
    (
        "etcd_endpoints",
        "\"http://u:{pw}@127.0.0.1:2379,http://127.0.0.1:2380\"",
    ),
    ("etcd_password_file", "\"pw.secret\""),
    ("upstream", "\"{up}\""),
    ("upstream", "\"http://u:{pw}@127.0.0.1:9000\""),
    ("store", "\"s3\""),
    ("store", "\"webdav\""),
    ("scope", "\"prefix:2\""),
    ("scope", "\"host+path\""),
    ("enforce", "\"report\""),
    ("conditional_writes", "\"on\""),
    ("s3_domain", "\"s3.internal\""),
    ("admin_token_file", "\"pw.secret\""),
    ("upstream_timeout", "5"),
    ("access_log", "\"https://u:{pw}@h/log\""),
];

const ROUTE: &[(&str, &str)] = &[
    ("upstream", "\"{up}\""),
    ("upstream", "\"{up}\""),
    ("upstream", "\"https://u:{pw}@127.0.0.1:9000/b\""),
    ("fence_namespace", "\"shared\""),
    ("fence_namespace", "\"\""),
    ("store", "\"s3\""),
    ("store", "\"webdav\""),
    ("store", "\"azure\""),
    ("enforce", "\"off\""),
    ("enforce", "\"report\""),
    ("scope", "\"prefix:3\""),
    ("token_issuer", "\"redis://:{pw}@127.0.0.1:6379/lock\""),
    ("token_issuer_password_file", "\"pw.secret\""),
    ("conditional_writes", "\"on\""),
    ("s3_domain", "\"s3.internal\""),
    ("identities", "[\"a\"]"),
    (
        "upstream_credentials",
        "{ kind = \"basic\", user = \"u\", password_file = \"pw.secret\" }",
    ),
    (
        "upstream_credentials",
        "{ kind = \"bearer\", token_env = \"FENCEGATE_FUZZ_SECRET\" }",
    ),
    ("listen", "\"127.0.0.1:1\""),
];

const CUSTODY: &[&str] = &[
    "\n[upstream_credentials]\nkind = \"basic\"\nuser = \"u\"\npassword_file = \"pw.secret\"\n\n[[identity]]\nname = \"a\"\naccess_key_id = \"a\"\nsecret_env = \"FENCEGATE_FUZZ_SECRET\"\nallow = [ { prefix = \"/\", access = \"write\" } ]\n",
    "\n[upstream_credentials]\nkind = \"aws-sigv4\"\naccess_key_id = \"AKIA\"\nsecret_access_key_env = \"FENCEGATE_FUZZ_SECRET\"\nregion = \"eu-west-1\"\n\n[[identity]]\nname = \"a\"\naccess_key_id = \"a\"\nsecret_file = \"pw.secret\"\nallow = [ { prefix = \"/a\", access = \"read\" } ]\n",
];

const NAMES: &[&str] = &["a", "b", "c", "billing", "docs", "a", "bad name", ""];
const HOSTS: &[&str] = &[
    "a.example",
    "*.example",
    "*.s3.internal",
    "A.example",
    "a.example:80",
];
const PREFIXES: &[&str] = &[
    "/",
    "/a/",
    "/b/",
    "/a/b/",
    "/billing-",
    "/dav",
    "/a//b/",
    "/x/../y/",
    "nope",
];
const UPSTREAMS: &[&str] = &[
    "http://127.0.0.1:9000",
    "http://127.0.0.1:9000/a",
    "http://127.0.0.1:9000/a/b/",
    "http://127.0.0.1:80",
    "http://127.0.0.1",
    "http://LOCALHOST.:9000/a",
    "http://localhost:9000",
    "https://127.0.0.1:9000",
    "http://[::1]:9000",
    "http://127.0.0.1:9001/a",
];
