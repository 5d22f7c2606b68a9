//! A real etcd cluster on loopback: three members (or one), each a child
//! process with its own data dir, which a test can kill, restart, pause
//! and resume.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::*;

/// One member: its ports, its data dir, its process (`None` while killed).
struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
    /// The command prefix that starts it in its network namespace
    /// (`nsenter ...`), empty on loopback.
    wrapper: Vec<String>,
}

/// An etcd cluster on 127.0.0.1. Killed, and its data removed, on drop.
pub struct EtcdCluster {
    members: Vec<Member>,
    initial_cluster: String,
    /// Clients speak TLS and must show a certificate (`--client-cert-auth`).
    tls: Option<EtcdTls>,
    /// Authentication is on: the gateway's user and its password file.
    auth: Option<EtcdAuth>,
    _tmp: tempfile::TempDir,
}

/// The user a gateway acts as on a cluster with authentication on, and the
/// CA and certificates its TLS was made with.
struct EtcdAuth {
    ca: super::tls::TestCa,
    client: super::tls::Leaf,
    password_file: PathBuf,
}

/// The root user's `etcdctl --user`.
const ROOT: &str = "root:rootpw";

/// A cluster's client TLS: the members' certificate, the CA that signs it
/// and the clients' certificates, and a client certificate for the test's
/// own `etcdctl`.
#[derive(Clone)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// The etcd binary, or a panic that names the install script.
fn etcd_binary() -> &'static str {
    let found = Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "etcd is not installed: run scripts/install-deps.sh (Debian's etcd-server)"
    );
    "etcd"
}

impl EtcdCluster {
    /// Starts `size` members and waits until the cluster serves a write.
    ///
    /// A member that cannot bind its ports (another process took one
    /// between the pick and etcd's bind) exits at once; such a start, or
    /// one not writable within the hang guard, is retried on fresh ports,
    /// and the members' logs are in the panic if no attempt comes up.
    pub fn start(size: usize) -> EtcdCluster {
        EtcdCluster::start_with(size, None)
    }

    /// Starts one member on each of `hosts` (the command prefix that puts
    /// it in its network namespace, and its address there: see
    /// `netns::Node`), serving clients on port 2379 and peers on 2380.
    pub fn start_on(hosts: &[(Vec<String>, std::net::Ipv4Addr)]) -> EtcdCluster {
        etcd_binary();
        let mut cluster = EtcdCluster::spawn_all(hosts.len(), None, Some(hosts));
        let up = wait_until(HANG_GUARD, || {
            cluster.any_exited() || cluster.writable_now()
        });
        if !up || cluster.any_exited() {
            let exits: Vec<String> = cluster
                .members
                .iter_mut()
                .map(|m| match m.child.as_mut().map(Child::try_wait) {
                    Some(Ok(Some(status))) => format!("{}: {status}", m.name),
                    _ => format!("{}: running", m.name),
                })
                .collect();
            let logs = cluster.logs();
            cluster.stop_all();
            panic!(
                "etcd cluster in namespaces did not come up ({}); member logs:\n{logs}",
                exits.join(", ")
            );
        }
        cluster
    }

    /// Starts `size` members serving clients over TLS only, each client
    /// verified against the CA (`--client-cert-auth`).
    pub fn start_secured(size: usize, tls: EtcdTls) -> EtcdCluster {
        EtcdCluster::start_with(size, Some(tls))
    }

    /// Starts `size` members as production runs them: TLS only with client
    /// certificates, RBAC on, auth tokens that expire after 2 s; the
    /// gateway's user `fencegate` may read and write every key under `/`.
    /// [`EtcdCluster::gateway_args`] gives the options to reach it.
    pub fn start_authenticated(size: usize) -> EtcdCluster {
        let ca = super::tls::TestCa::new("etcd");
        let server = ca.issue("etcd-server", &["127.0.0.1", "localhost"]);
        // etcd's HTTP gateway refuses client certificates with a common
        // name while authentication is on.
        let client = ca.issue_client_without_cn("gateway-client");
        let admin = ca.issue_client_without_cn("etcdctl");
        let mut cluster = EtcdCluster::start_secured(
            size,
            EtcdTls {
                ca: ca.cert_path(),
                cert: server.cert.clone(),
                key: server.key.clone(),
                client_cert: admin.cert.clone(),
                client_key: admin.key.clone(),
            },
        );
        cluster.etcdctl(None, &["user", "add", ROOT]);
        cluster.etcdctl(None, &["role", "add", "fencegate"]);
        cluster.etcdctl(
            None,
            &[
                "role",
                "grant-permission",
                "fencegate",
                "--prefix=true",
                "readwrite",
                "/",
            ],
        );
        cluster.etcdctl(None, &["user", "add", "fencegate:gateway-pw"]);
        cluster.etcdctl(None, &["user", "grant-role", "fencegate", "fencegate"]);
        cluster.etcdctl(None, &["auth", "enable"]);
        let password_file = ca.dir().join("gateway-password");
        std::fs::write(&password_file, "gateway-pw\n").unwrap();
        cluster.auth = Some(EtcdAuth {
            ca,
            client,
            password_file,
        });
        cluster
    }

    /// The gateway options that reach this cluster besides
    /// `--etcd-endpoints`: TLS files and the user, when it has them.
    pub fn gateway_args(&self) -> Vec<String> {
        let Some(auth) = &self.auth else {
            return Vec::new();
        };
        let path = |p: &std::path::Path| p.display().to_string();
        vec![
            "--etcd-ca".into(),
            path(&auth.ca.cert_path()),
            "--etcd-cert".into(),
            path(&auth.client.cert),
            "--etcd-key".into(),
            path(&auth.client.key),
            "--etcd-user".into(),
            "fencegate".into(),
            "--etcd-password-file".into(),
            path(&auth.password_file),
        ]
    }

    /// The library's view of [`EtcdCluster::gateway_args`].
    pub fn library_access(
        &self,
    ) -> (
        Option<std::sync::Arc<fencegate::client_tls::ClientTls>>,
        Option<fencegate::client_tls::Credentials>,
    ) {
        let Some(auth) = &self.auth else {
            return (None, None);
        };
        let files = fencegate::client_tls::ClientTlsFiles {
            ca: Some(auth.ca.cert_path()),
            cert: Some(auth.client.cert.clone()),
            key: Some(auth.client.key.clone()),
        };
        let credentials = fencegate::client_tls::Credentials {
            user: "fencegate".into(),
            password: fencegate::client_tls::Secret::new("gateway-pw"),
        };
        (
            Some(fencegate::client_tls::ClientTls::load(files, &[]).unwrap()),
            Some(credentials),
        )
    }

    /// `http` or `https`, as its members serve clients.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    fn start_with(size: usize, tls: Option<EtcdTls>) -> EtcdCluster {
        etcd_binary();
        let mut logs = String::new();
        for attempt in 1..=3 {
            let mut cluster = EtcdCluster::spawn_all(size, tls.clone(), None);
            // A member that could not bind exits at once: no use waiting.
            wait_until(HANG_GUARD, || {
                cluster.any_exited() || cluster.writable_now()
            });
            if !cluster.any_exited() && cluster.writable_now() {
                return cluster;
            }
            cluster.stop_all();
            logs.push_str(&format!("attempt {attempt}:\n{}", cluster.logs()));
            eprintln!("etcd cluster attempt {attempt} did not come up; retrying on fresh ports");
        }
        panic!("etcd cluster did not come up in 3 attempts; member logs:\n{logs}");
    }

    fn spawn_all(
        size: usize,
        tls: Option<EtcdTls>,
        hosts: Option<&[(Vec<String>, std::net::Ipv4Addr)]>,
    ) -> EtcdCluster {
        let tmp = tempfile::tempdir().unwrap();
        let members: Vec<Member> = (0..size)
            .map(|i| {
                let (wrapper, client, peer) = match hosts {
                    Some(hosts) => (
                        hosts[i].0.clone(),
                        SocketAddr::from((hosts[i].1, 2379)),
                        SocketAddr::from((hosts[i].1, 2380)),
                    ),
                    None => (
                        Vec::new(),
                        SocketAddr::from(([127, 0, 0, 1], free_port())),
                        SocketAddr::from(([127, 0, 0, 1], free_port())),
                    ),
                };
                Member {
                    name: format!("m{i}"),
                    client,
                    peer,
                    dir: tmp.path().join(format!("m{i}")),
                    child: None,
                    wrapper,
                }
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            members,
            initial_cluster,
            tls,
            auth: None,
            _tmp: tmp,
        };
        // Members must not outlive the test binary, also when the cluster
        // sits in a static (whose destructor never runs): a watchdog kills
        // them, and removes their data, once this process is gone.
        let _ = Command::new("sh")
            .args([
                "-c",
                r#"while kill -0 "$0" 2>/dev/null; do sleep 1; done; pkill -9 -f "$1"; rm -rf "$1""#,
            ])
            .arg(std::process::id().to_string())
            .arg(cluster._tmp.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        for i in 0..size {
            cluster.spawn(i);
        }
        cluster
    }

    /// Whether a member started here has exited (etcd exits when it cannot
    /// bind a port or join).
    fn any_exited(&mut self) -> bool {
        let exited = |m: &mut Member| {
            m.child
                .as_mut()
                .is_some_and(|c| !matches!(c.try_wait(), Ok(None)))
        };
        self.members.iter_mut().any(exited)
    }

    /// Whether some live member takes a write now.
    fn writable_now(&self) -> bool {
        (0..self.members.len()).any(|i| self.members[i].child.is_some() && self.writable_via(i))
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self._tmp
            .path()
            .join(format!("{}.log", self.members[i].name))
    }

    /// The last lines of every member's log.
    fn logs(&self) -> String {
        let mut out = String::new();
        for i in 0..self.members.len() {
            let log = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(10)..];
            out.push_str(&format!(
                "--- {}\n{}\n",
                self.members[i].name,
                tail.join("\n")
            ));
        }
        out
    }

    fn stop_all(&mut self) {
        for i in 0..self.members.len() {
            self.pause(i, false);
            self.kill(i);
        }
    }

    fn spawn(&mut self, i: usize) {
        let initial_cluster = self.initial_cluster.clone();
        let log_path = self.log_path(i);
        let member = &mut self.members[i];
        let state = if member.dir.exists() {
            "existing"
        } else {
            "new"
        };
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut command = match member.wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(etcd_binary());
                command
            }
            None => Command::new(etcd_binary()),
        };
        command
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(&member.dir)
            .args([
                "--listen-client-urls",
                &format!("{scheme}://{}", member.client),
            ])
            .args([
                "--advertise-client-urls",
                &format!("{scheme}://{}", member.client),
            ])
            .args(["--listen-peer-urls", &format!("http://{}", member.peer)])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://{}", member.peer),
            ])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-state", state])
            .args(["--logger", "zap", "--log-level", "error"]);
        if let Some(tls) = &self.tls {
            command
                // Short-lived auth tokens: a gateway must fetch new ones.
                .args(["--auth-token-ttl", "2"])
                .arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth");
        }
        command.stdin(Stdio::null()).stdout(Stdio::null());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path);
        if let Ok(log) = log {
            command.stderr(log);
        } else {
            command.stderr(Stdio::null());
        }
        // ETCD_* variables would override the flags above.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                command.env_remove(key);
            }
        }
        member.child = Some(command.spawn().expect("spawn etcd"));
    }

    /// `--etcd-endpoints`: every member's client URL.
    pub fn endpoints(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.members
            .iter()
            .map(|m| format!("{scheme}://{}", m.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The keys under `prefix` (raw, as stored), read through member `i`.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        if self.tls.is_some() {
            let user = self.auth.as_ref().map(|_| ROOT);
            return self
                .etcdctl(user, &["get", prefix, "--prefix", "--keys-only"])
                .lines()
                .filter(|line| !line.is_empty())
                .map(str::to_owned)
                .collect();
        }
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut end = prefix.as_bytes().to_vec();
        *end.last_mut().unwrap() += 1;
        let body = serde_json::json!({
            "key": b64.encode(prefix),
            "range_end": b64.encode(&end),
            "keys_only": true,
        });
        for member in &self.members {
            let Ok(resp) = try_http(
                member.client,
                "POST",
                "/v3/kv/range",
                &[("Content-Type", "application/json")],
                body.to_string().as_bytes(),
            ) else {
                continue;
            };
            if resp.status != 200 {
                continue;
            }
            let json = resp.json();
            return json["kvs"]
                .as_array()
                .map(|kvs| {
                    kvs.iter()
                        .filter_map(|kv| b64.decode(kv["key"].as_str()?).ok())
                        .map(|key| String::from_utf8_lossy(&key).into_owned())
                        .collect()
                })
                .unwrap_or_default();
        }
        panic!("no etcd member answered a read");
    }

    /// How many members the cluster has.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The leases etcd holds now, asked of the first member that answers.
    pub fn lease_count(&self) -> Option<usize> {
        self.members.iter().find_map(|member| {
            let resp = try_http(
                member.client,
                "POST",
                "/v3/lease/leases",
                &[("Content-Type", "application/json")],
                b"{}",
            )
            .ok()?;
            (resp.status == 200).then(|| resp.json()["leases"].as_array().map_or(0, Vec::len))
        })
    }

    /// Member `i`'s client address.
    pub fn client(&self, i: usize) -> SocketAddr {
        self.members[i].client
    }

    /// Kills member `i` (SIGKILL); its data stays for [`restart`](Self::restart).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a killed member `i` again on its data.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) member `i`.
    pub fn pause(&self, i: usize, paused: bool) {
        if let Some(child) = &self.members[i].child {
            let signal = if paused {
                Signal::SIGSTOP
            } else {
                Signal::SIGCONT
            };
            let _ = kill(Pid::from_raw(child.id() as i32), signal);
        }
    }

    /// Runs `etcdctl` against every member with the test's client
    /// certificate (and `user`, `name:password`, if given); its stdout, or
    /// a panic with its stderr.
    pub fn etcdctl(&self, user: Option<&str>, args: &[&str]) -> String {
        let members: Vec<usize> = (0..self.members.len()).collect();
        let output = self.etcdctl_output(&members, user, args);
        assert!(
            output.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `etcdctl` through member `i` alone; its stdout if it succeeded.
    fn etcdctl_via(&self, i: usize, user: Option<&str>, args: &[&str]) -> Option<String> {
        let output = self.etcdctl_output(&[i], user, args);
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn etcdctl_output(
        &self,
        members: &[usize],
        user: Option<&str>,
        args: &[&str],
    ) -> std::process::Output {
        let mut command = Command::new("etcdctl");
        command.env("ETCDCTL_API", "3").args([
            "--endpoints",
            &members
                .iter()
                .map(|&i| format!("{}", self.members[i].client))
                .collect::<Vec<_>>()
                .join(","),
            "--command-timeout",
            "2s",
        ]);
        if let Some(tls) = &self.tls {
            command
                .arg("--cacert")
                .arg(&tls.ca)
                .arg("--cert")
                .arg(&tls.client_cert)
                .arg("--key")
                .arg(&tls.client_key);
        }
        if let Some(user) = user {
            command.args(["--user", user]);
        }
        command.args(args).output().expect("run etcdctl")
    }

    /// Whether a write through member `i` succeeds now.
    pub fn writable_via(&self, i: usize) -> bool {
        if self.auth.is_some() {
            return self
                .etcdctl_via(i, Some(ROOT), &["put", "__probe__", "1"])
                .is_some();
        }
        if let Some(tls) = &self.tls {
            // Before authentication is turned on, any client with a
            // certificate may write.
            return Command::new("curl")
                .args(["-s", "-f", "-o", "/dev/null", "--max-time", "2"])
                .arg("--cacert")
                .arg(&tls.ca)
                .arg("--cert")
                .arg(&tls.client_cert)
                .arg("--key")
                .arg(&tls.client_key)
                .args(["-d", r#"{"key":"X19wcm9iZV9f","value":"MQ=="}"#])
                .arg(format!("https://{}/v3/kv/put", self.members[i].client))
                .status()
                .is_ok_and(|s| s.success());
        }
        let body = r#"{"key":"X19wcm9iZV9f","value":"MQ=="}"#; // __probe__ = 1
        try_http(
            self.members[i].client,
            "POST",
            "/v3/kv/put",
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
        .is_ok_and(|r| r.status == 200)
    }

    /// The index of the current leader, from each live member's status.
    pub fn leader(&self) -> Option<usize> {
        if self.tls.is_some() {
            let user = self.auth.as_ref().map(|_| ROOT);
            for (i, member) in self.members.iter().enumerate() {
                if member.child.is_none() {
                    continue;
                }
                let Some(out) = self.etcdctl_via(i, user, &["endpoint", "status", "-w", "json"])
                else {
                    continue;
                };
                let json: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
                let status = &json[0]["Status"];
                if status["leader"].is_u64() && status["leader"] == status["header"]["member_id"] {
                    return Some(i);
                }
            }
            return None;
        }
        for (i, member) in self.members.iter().enumerate() {
            if member.child.is_none() {
                continue;
            }
            let resp = try_http(
                member.client,
                "POST",
                "/v3/maintenance/status",
                &[("Content-Type", "application/json")],
                b"{}",
            );
            let Ok(resp) = resp else { continue };
            if resp.status != 200 {
                continue;
            }
            let json = resp.json();
            let leader = json["leader"].as_str().unwrap_or_default().to_owned();
            let me = json["header"]["member_id"].as_str().unwrap_or_default();
            if !leader.is_empty() && leader == me {
                return Some(i);
            }
        }
        None
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

fn free_port() -> u16 {
    super::port::free_port().unwrap()
}
