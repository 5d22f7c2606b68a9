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

#[path = "../support/mod.rs"]
mod support;

#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../examples/support/mod.rs"]
mod demo;

use std::path::{Path, PathBuf};

use support::tls::TestCa;
use support::{run_on_free_ports_with_env, Backend, GatewayProcess, HANG_GUARD};
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

/// What is wrong, the options that make it so, and what the start error
/// must say.
type Misconfiguration<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);

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
    let cases: [Misconfiguration; 5] = [
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
    let a = GatewayProcess::start_with_env(&strs(&args), &[("FENCEGATE_ETCD_PASSWORD", PASSWORD)]);
    let mut args = vec!["--upstream".to_owned(), upstream.clone()];
    args.extend(etcd.args(&[]));
    let b = GatewayProcess::start(&strs(&args));

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

    // The etcd token issuer over the same TLS, as a user that may read one
    // key and nothing else (a lock's revision is read with its header).
    etcd.cluster
        .etcdctl(Some("root:rootpw"), &["role", "add", "lock-reader"]);
    etcd.cluster.etcdctl(
        Some("root:rootpw"),
        &["role", "grant-permission", "lock-reader", "read", "/locks/"],
    );
    etcd.cluster.etcdctl(
        Some("root:rootpw"),
        &["user", "add", &format!("issuer:{PASSWORD}")],
    );
    etcd.cluster.etcdctl(
        Some("root:rootpw"),
        &["user", "grant-role", "issuer", "lock-reader"],
    );
    let hosts = etcd.cluster.endpoints().replace("https://", "");
    let trusting = GatewayProcess::start_with_env(
        &[
            "--upstream",
            &upstream,
            "--token-issuer",
            &format!("etcds://issuer@{hosts}/locks/"),
            "--token-issuer-ca",
            &path(&etcd.ca.cert_path()),
            "--token-issuer-cert",
            &path(&etcd.client_cert),
            "--token-issuer-key",
            &path(&etcd.client_key),
        ],
        &[("FENCEGATE_TOKEN_ISSUER_PASSWORD", PASSWORD)],
    );
    trusting
        .put("/x", 1_000_000_000)
        .assert_gateway_error(403, "token_not_issued");
    assert_eq!(trusting.put("/x", 2).status, 200);
    trusting.sighup();
    assert!(trusting.wait_stderr("TLS certificates reloaded", HANG_GUARD));

    // SIGHUP re-reads the client certificate, and new connections show
    // it: one from a CA etcd does not trust is refused, the right one
    // works again.
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("client.pem");
    let key = dir.path().join("client.key");
    std::fs::copy(&etcd.client_cert, &cert).unwrap();
    std::fs::copy(&etcd.client_key, &key).unwrap();
    let mut args = vec!["--upstream".to_owned(), upstream.clone()];
    args.extend(etcd.args(&[("--etcd-cert", &path(&cert)), ("--etcd-key", &path(&key))]));
    let c = GatewayProcess::start(&strs(&args));
    assert_eq!(c.put("/reports/q5", 9).status, 200);
    let untrusted_ca = TestCa::new("untrusted");
    let untrusted = untrusted_ca.issue_client_without_cn("impostor");
    std::fs::copy(&untrusted.cert, &cert).unwrap();
    std::fs::copy(&untrusted.key, &key).unwrap();
    c.sighup();
    assert!(c.wait_stderr("TLS certificates reloaded", HANG_GUARD));
    let refused = c.put("/reports/q6", 10);
    let err = refused.assert_gateway_error(503, "fence_store_unavailable");
    assert!(
        err["detail"].as_str().unwrap().contains("BadCertificate"),
        "{err}"
    );
    std::fs::copy(&etcd.client_cert, &cert).unwrap();
    std::fs::copy(&etcd.client_key, &key).unwrap();
    c.sighup();
    assert!(support::wait_until(HANG_GUARD, || {
        c.put("/reports/q6", 10).status == 200
    }));
    assert_eq!(backend.count(), 6);
    for gw in [&a, &b, &c, &trusting] {
        assert!(!gw.stderr().contains(PASSWORD));
    }
}

/// What a token issuer behind TLS and a password must do: a token above
/// the lock service's counter is refused, one at it admitted.
fn check_trusted(gw: &GatewayProcess, issued: u64) {
    let err = gw
        .put("/a", issued + 1_000)
        .assert_gateway_error(403, "token_not_issued");
    assert_eq!(err["issued"].as_u64(), Some(issued));
    assert_eq!(gw.put("/a", issued).status, 200);
    assert_eq!(gw.fence("/a"), Some(issued));
}

/// A raise the issuer cannot confirm: 503, and why (never the password).
fn unavailable_detail(gw: &GatewayProcess) -> String {
    let err = gw
        .put("/b", 1)
        .assert_gateway_error(503, "token_issuer_unavailable");
    let detail = err["detail"].as_str().unwrap_or_default().to_owned();
    assert!(!detail.contains(PASSWORD), "{detail}");
    assert!(!gw.stderr().contains(PASSWORD));
    detail
}

/// A Redis server with TLS on its only port, and two ACL users: `admin`
/// (everything, for the test) and `fencegate`, allowed `GET` on the
/// `locks:` counters alone (docs/SHARED.md, "Security").
struct SecuredRedis {
    port: u16,
    ca: TestCa,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl SecuredRedis {
    fn start() -> SecuredRedis {
        let ca = TestCa::new("redis");
        let server = ca.issue("redis-server", &["127.0.0.1"]);
        let dir = tempfile::tempdir().unwrap();
        let port = demo::port::free_port().unwrap();
        let child = std::process::Command::new("redis-server")
            .args(["--port", "0", "--bind", "127.0.0.1"])
            .args(["--tls-port", &port.to_string()])
            .arg("--tls-cert-file")
            .arg(&server.cert)
            .arg("--tls-key-file")
            .arg(&server.key)
            .arg("--tls-ca-cert-file")
            .arg(ca.cert_path())
            .args(["--tls-auth-clients", "no"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir.path())
            .args(["--user", "default", "off"])
            .args(["--user", "admin", "on", ">adminpw", "~*", "&*", "+@all"])
            .args(["--user", "fencegate", "on"])
            .arg(format!(">{PASSWORD}"))
            .args(["~locks:*", "-@all", "+get"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server: run scripts/install-deps.sh");
        let redis = SecuredRedis {
            port,
            ca,
            child,
            _dir: dir,
        };
        support::wait_until(HANG_GUARD, || {
            redis
                .cli("admin", "adminpw", &["PING"])
                .is_some_and(|out| out == "PONG")
        });
        redis
    }

    /// `redis-cli` over TLS as `user`; its output, if it succeeded.
    fn cli(&self, user: &str, password: &str, args: &[&str]) -> Option<String> {
        let output = std::process::Command::new("redis-cli")
            .args(["--tls", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .arg("--cacert")
            .arg(self.ca.cert_path())
            .args(["--user", user, "--pass", password, "--no-auth-warning"])
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (output.status.success() && !text.starts_with("ERR") && !text.starts_with("NOPERM"))
            .then_some(text)
    }
}

impl Drop for SecuredRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn redis_over_tls_with_an_acl_user() {
    let redis = SecuredRedis::start();
    redis
        .cli("admin", "adminpw", &["SET", "locks:counter", "41"])
        .unwrap();
    // The least-privilege user can read the counter, and nothing else.
    assert_eq!(
        redis.cli("fencegate", PASSWORD, &["GET", "locks:counter"]),
        Some("41".into())
    );
    assert_eq!(
        redis.cli("fencegate", PASSWORD, &["SET", "locks:counter", "1"]),
        None
    );
    assert_eq!(redis.cli("fencegate", PASSWORD, &["GET", "other"]), None);

    let backend = Backend::start();
    let url = format!("rediss://fencegate@127.0.0.1:{}/locks:counter", redis.port);
    let ca = path(&redis.ca.cert_path());
    let with = |ca: &str, password: &str| {
        GatewayProcess::start_with_env(
            &[
                "--upstream",
                &backend.url(),
                "--token-issuer",
                &url,
                "--token-issuer-ca",
                ca,
            ],
            &[("FENCEGATE_TOKEN_ISSUER_PASSWORD", password)],
        )
    };
    check_trusted(&with(&ca, PASSWORD), 41);

    // A CA that did not sign the server's certificate: refused, never
    // plaintext.
    let other = TestCa::new("not-redis");
    let detail = unavailable_detail(&with(&path(&other.cert_path()), PASSWORD));
    assert!(detail.contains("UnknownIssuer"), "{detail}");
    let detail = unavailable_detail(&with(&ca, "wrong-password"));
    assert!(detail.contains("AuthenticationFailed"), "{detail}");

    // A password in the URL is refused at start, and not printed back.
    let leaked = format!("rediss://fencegate:{PASSWORD}@127.0.0.1:{}/k", redis.port);
    let run = run_on_free_ports_with_env(&["--token-issuer", &leaked], &[]);
    let line = run.start_error("password in the URL");
    assert!(line.contains("password in the URL is refused"), "{line}");
    assert!(!run.stderr.contains(PASSWORD), "{}", run.stderr);
    // A user without a password, a CA for a plaintext URL: start errors.
    let plain = format!("redis://fencegate@127.0.0.1:{}/k", redis.port);
    let run = run_on_free_ports_with_env(&["--token-issuer", &plain], &[]);
    assert!(run.start_error("no password").contains("needs a password"));
    let run = run_on_free_ports_with_env(
        &["--token-issuer", &plain, "--token-issuer-ca", &ca],
        &[("FENCEGATE_TOKEN_ISSUER_PASSWORD", PASSWORD)],
    );
    assert!(run
        .start_error("CA for redis://")
        .contains("need TLS (rediss://)"));
}

#[test]
fn postgres_over_tls_only_with_a_password() {
    let ca = TestCa::new("postgres");
    let server = ca.issue("postgres-server", &["127.0.0.1"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let postgres = rt
        .block_on(demo::postgres::Postgres::start_secured(
            demo::postgres::ServerTls {
                cert: &server.cert,
                key: &server.key,
            },
        ))
        .unwrap();
    // The least-privilege role: SELECT on the sequence, nothing else.
    rt.block_on(async {
        let admin = demo::postgres::connect_socket(&postgres.socket_dir, postgres.addr.port())
            .await
            .unwrap();
        admin
            .batch_execute(&format!(
                "CREATE SEQUENCE lock_tokens; SELECT nextval('lock_tokens'); SELECT nextval('lock_tokens');
                 CREATE ROLE fencegate LOGIN PASSWORD '{PASSWORD}';
                 GRANT SELECT ON SEQUENCE lock_tokens TO fencegate;"
            ))
            .await
            .unwrap();
    });
    let backend = Backend::start();
    let password_file = write_file(ca.dir(), "pg-password", PASSWORD);
    let url = |mode: &str| {
        format!(
            "postgres://fencegate@127.0.0.1:{}/postgres?sequence=lock_tokens&sslmode={mode}",
            postgres.addr.port()
        )
    };
    let with = |url: &str, ca: &Path, password: &Path| {
        GatewayProcess::start(&[
            "--upstream",
            &backend.url(),
            "--token-issuer",
            url,
            "--token-issuer-ca",
            &path(ca),
            "--token-issuer-password-file",
            &path(password),
        ])
    };
    check_trusted(
        &with(&url("verify-full"), &ca.cert_path(), &password_file),
        2,
    );

    let other = TestCa::new("not-postgres");
    let detail = unavailable_detail(&with(
        &url("verify-full"),
        &other.cert_path(),
        &password_file,
    ));
    assert!(detail.contains("UnknownIssuer"), "{detail}");
    let wrong = write_file(ca.dir(), "pg-wrong", "wrong-password");
    let detail = unavailable_detail(&with(&url("verify-full"), &ca.cert_path(), &wrong));
    assert!(
        detail.contains("password authentication failed"),
        "{detail}"
    );

    // Plaintext is refused by the server (hostssl only); TLS without
    // verification is refused by the gateway at start.
    let plain = GatewayProcess::start_with_env(
        &[
            "--upstream",
            &backend.url(),
            "--token-issuer",
            &url("disable"),
        ],
        &[("FENCEGATE_TOKEN_ISSUER_PASSWORD", PASSWORD)],
    );
    let detail = unavailable_detail(&plain);
    assert!(detail.contains("no pg_hba.conf entry"), "{detail}");
    let run = run_on_free_ports_with_env(&["--token-issuer", &url("require")], &[]);
    assert!(run
        .start_error("sslmode=require")
        .contains("sslmode=require is not supported"));
}

#[test]
fn zookeeper_with_digest_authentication() {
    use zookeeper_client as zk;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let zookeeper = rt.block_on(demo::zookeeper::ZooKeeper::start()).unwrap();
    // The least-privilege ACL: the probe node, writable by the gateway's
    // digest user alone (`digest:fencegate:base64(sha1("fencegate:PASSWORD"))`).
    let digest = std::process::Command::new("python3")
        .args([
            "-c",
            "import base64,hashlib,sys; print(base64.b64encode(hashlib.sha1(sys.argv[1].encode()).digest()).decode())",
        ])
        .arg(format!("fencegate:{PASSWORD}"))
        .output()
        .unwrap();
    let digest = String::from_utf8(digest.stdout).unwrap().trim().to_owned();
    let token = rt.block_on(async {
        let admin = demo::zookeeper::connect(zookeeper.addr, std::time::Duration::from_secs(10))
            .await
            .unwrap();
        let write_only = [zk::Acl::new(
            zk::Permission::WRITE,
            zk::AuthId::new("digest", &format!("fencegate:{digest}")),
        )];
        let probe = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&write_only));
        admin
            .create(fencegate::issuer::zookeeper::PROBE_NODE, b"", &probe)
            .await
            .unwrap();
        // Nobody else may write it.
        let denied = admin
            .set_data(fencegate::issuer::zookeeper::PROBE_NODE, b"", None)
            .await;
        assert!(matches!(denied, Err(zk::Error::NoAuth)), "{denied:?}");
        let lock = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
        let (stat, _) = admin.create("/lock-", b"", &lock).await.unwrap();
        stat.czxid as u64
    });
    let backend = Backend::start();
    let url = format!("zookeeper://fencegate@{}", zookeeper.addr);
    let with = |password: &str| {
        GatewayProcess::start_with_env(
            &["--upstream", &backend.url(), "--token-issuer", &url],
            &[("FENCEGATE_TOKEN_ISSUER_PASSWORD", password)],
        )
    };
    let gw = with(PASSWORD);
    let err = gw
        .put("/a", token + 1_000_000)
        .assert_gateway_error(403, "token_not_issued");
    assert!(err["issued"].as_u64().unwrap() >= token);
    assert_eq!(gw.put("/a", token).status, 200);
    let detail = unavailable_detail(&with("wrong-password"));
    assert!(detail.contains("not authorized"), "{detail}");
    // No TLS to ZooKeeper: said at start, never a plaintext fallback.
    let run = run_on_free_ports_with_env(
        &["--token-issuer", &url, "--token-issuer-ca", "/dev/null"],
        &[("FENCEGATE_TOKEN_ISSUER_PASSWORD", PASSWORD)],
    );
    assert!(run
        .start_error("TLS to ZooKeeper")
        .contains("TLS to ZooKeeper is not supported"));
}
