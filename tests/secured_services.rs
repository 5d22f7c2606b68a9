//! The services fences rest on, run as production runs them: TLS and
//! authentication turned on, the gateway given the least privilege the docs
//! name (docs/SHARED.md, "Security"), and every way of getting it wrong
//! refused with one clear line, never a silent plaintext connection.
//!
//! - etcd: three members serving clients over TLS only with
//!   `--client-cert-auth`, RBAC on, a role with read-write on the gateway's
//!   prefix alone, auth tokens that expire after 2 s.
//! - Redis: `tls-port` only, an ACL user allowed `GET` on the counters alone.
//! - PostgreSQL: `ssl=on`, `hostssl` lines only, a role with `SELECT` on
//!   the sequence alone.
//! - ZooKeeper: digest authentication, the probe node writable by the
//!   gateway's user alone.

mod support;

#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../examples/support/mod.rs"]
mod demo;

use std::path::{Path, PathBuf};

use support::tls::TestCa;
use support::{run_on_free_ports_with_env, Backend, Gateway, HANG_GUARD};
use support::{EtcdCluster, EtcdTls};

const PASSWORD: &str = "s3cret-fencegate-pw";

/// A file holding `text`, in `dir`.
fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A secured etcd cluster, its CA, a client certificate for the gateway,
/// and a password file for user `fencegate`, whose role may read and write
/// `/fencegate-tls/` and nothing else.
struct SecuredEtcd {
    cluster: EtcdCluster,
    ca: TestCa,
    client_cert: PathBuf,
    client_key: PathBuf,
    password_file: PathBuf,
}

fn secured_etcd() -> SecuredEtcd {
    let ca = TestCa::new("etcd");
    let server = ca.issue("etcd-server", &["127.0.0.1", "localhost"]);
    let client = ca.issue_client_without_cn("gateway-client");
    let admin = ca.issue_client_without_cn("etcdctl");
    let cluster = EtcdCluster::start_secured(
        3,
        EtcdTls {
            ca: ca.cert_path(),
            cert: server.cert.clone(),
            key: server.key.clone(),
            client_cert: admin.cert.clone(),
            client_key: admin.key.clone(),
        },
    );
    // The least-privilege role of docs/SHARED.md, "Security".
    cluster.etcdctl(None, &["user", "add", "root:rootpw"]);
    cluster.etcdctl(None, &["role", "add", "fencegate"]);
    cluster.etcdctl(
        None,
        &[
            "role",
            "grant-permission",
            "fencegate",
            "--prefix=true",
            "readwrite",
            "/fencegate-tls/",
        ],
    );
    cluster.etcdctl(None, &["user", "add", &format!("fencegate:{PASSWORD}")]);
    cluster.etcdctl(None, &["user", "grant-role", "fencegate", "fencegate"]);
    cluster.etcdctl(None, &["auth", "enable"]);
    let password_file = write_file(ca.dir(), "etcd-password", &format!("{PASSWORD}\n"));
    SecuredEtcd {
        cluster,
        ca,
        client_cert: client.cert,
        client_key: client.key,
        password_file,
    }
}

impl SecuredEtcd {
    /// The gateway's `--state etcd` options, with `overrides` replacing
    /// the option of the same name.
    fn args(&self, overrides: &[(&str, &str)]) -> Vec<String> {
        let mut options = vec![
            ("--etcd-endpoints", self.cluster.endpoints()),
            ("--etcd-prefix", "/fencegate-tls/".to_owned()),
            ("--etcd-ca", path(&self.ca.cert_path())),
            ("--etcd-cert", path(&self.client_cert)),
            ("--etcd-key", path(&self.client_key)),
            ("--etcd-user", "fencegate".to_owned()),
            ("--etcd-password-file", path(&self.password_file)),
        ];
        for (name, value) in overrides {
            options.retain(|(n, _)| n != name);
            if !value.is_empty() {
                options.push((name, value.to_string()));
            }
        }
        let mut args = vec!["--state".to_owned(), "etcd".to_owned()];
        for (name, value) in options {
            args.push(name.to_owned());
            args.push(value);
        }
        args
    }
}

fn path(path: &Path) -> String {
    path.display().to_string()
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn etcd_with_client_certificates_and_rbac() {
    let etcd = secured_etcd();
    let backend = Backend::start();
    let upstream = backend.url();

    // Every way of getting it wrong: one line, no start, no secret shown.
    let other_ca = TestCa::new("not-etcds");
    let other_ca = path(&other_ca.cert_path());
    let wrong_password = path(&write_file(etcd.ca.dir(), "wrong", "not-the-password"));
    let plain_endpoints = etcd.cluster.endpoints().replace("https://", "http://");
    let cases: [(&str, Vec<(&str, &str)>, &str); 5] = [
        (
            "no client certificate",
            vec![("--etcd-cert", ""), ("--etcd-key", "")],
            "no etcd member answered",
        ),
        (
            "wrong password",
            vec![("--etcd-password-file", &wrong_password)],
            "invalid user ID or password",
        ),
        (
            "a CA that did not sign the members' certificates",
            vec![("--etcd-ca", &other_ca)],
            "UnknownIssuer",
        ),
        (
            "no user while the cluster has authentication on",
            vec![("--etcd-user", ""), ("--etcd-password-file", "")],
            "is authentication on in the cluster?",
        ),
        (
            "TLS options with http:// endpoints",
            vec![("--etcd-endpoints", &plain_endpoints)],
            "need https:// endpoints",
        ),
    ];
    for (what, overrides, expected) in cases {
        let mut args = vec!["--upstream".to_owned(), upstream.clone()];
        args.extend(etcd.args(&overrides));
        let run = run_on_free_ports_with_env(&strs(&args), &[]);
        let line = run.start_error(what);
        assert!(line.contains(expected), "{what}: {line}");
        eprintln!("{what}: {line}");
        assert!(!run.stderr.contains(PASSWORD), "{what}: {}", run.stderr);
    }
    // The password from the environment instead of a file.
    let mut args = vec!["--upstream".to_owned(), upstream.clone()];
    args.extend(etcd.args(&[("--etcd-password-file", "")]));
    let a = Gateway::start_with_env(&strs(&args), &[("FENCEGATE_ETCD_PASSWORD", PASSWORD)]);
    let mut args = vec!["--upstream".to_owned(), upstream.clone()];
    args.extend(etcd.args(&[]));
    let b = Gateway::start(&strs(&args));

    // Shared fences work through TLS and RBAC: a raise at A is seen at B.
    assert_eq!(a.put("/reports/q3", 5).status, 200);
    b.put("/reports/q3", 4)
        .assert_gateway_error(409, "stale_token");
    assert_eq!(b.fence("/reports/q3"), Some(5));
    assert_eq!(a.admin_get("/readyz").status, 200);

    // The auth tokens expire after 2 s idle, and a change of the auth
    // store makes every token issued before it stale: the gateway fetches
    // new ones and goes on.
    std::thread::sleep(std::time::Duration::from_secs(3));
    etcd.cluster
        .etcdctl(Some("root:rootpw"), &["user", "add", "someone-else:pw"]);
    assert_eq!(b.put("/reports/q4", 7).status, 200);
    a.put("/reports/q4", 6)
        .assert_gateway_error(409, "stale_token");
    assert_eq!(a.put("/reports/q3", 8).status, 200);
    assert_eq!(b.fence("/reports/q3"), Some(8));

    // SIGHUP re-reads the client certificate, and fencing goes on.
    b.sighup();
    assert!(b.wait_stderr("TLS certificates reloaded", HANG_GUARD));
    assert_eq!(b.put("/reports/q5", 9).status, 200);
    assert_eq!(backend.count(), 4);
    for gw in [&a, &b] {
        assert!(!gw.stderr().contains(PASSWORD));
    }
}
