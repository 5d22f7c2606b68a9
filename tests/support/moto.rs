//! moto's S3 server (`moto_server`, from the Python environment that
//! `scripts/install-deps.sh` makes), one per test binary; each test uses
//! buckets of its own.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use super::*;

/// A SigV4-shaped `Authorization` for moto, which does not check
/// signatures but treats anonymous writes differently from signed ones.
pub const S3_AUTH: (&str, &str) = (
    "Authorization",
    "AWS4-HMAC-SHA256 Credential=test/20261125/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
);

/// The Python environment with moto, boto3 and the GCS emulator.
pub fn venv() -> PathBuf {
    std::env::var_os("FENCEGATE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venv"))
}

/// moto's S3 server over plain HTTP, one for the test binary (each test
/// uses buckets of its own); its process group is killed once the binary
/// exits.
pub struct Moto {
    _child: Child,
    pub addr: SocketAddr,
}

impl Moto {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Whether `bucket` lists `key`, asked of moto directly.
    pub fn lists(&self, bucket: &str, key: &str) -> bool {
        let resp = http(
            self.addr,
            "GET",
            &format!("/{bucket}?list-type=2"),
            &[],
            b"",
        );
        assert_eq!(resp.status, 200, "listing {bucket}: {}", resp.text());
        resp.text().contains(&format!("<Key>{key}</Key>"))
    }
}

pub fn moto() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(|| {
        let (child, port) = spawn_moto_server(&[]);
        kill_group_at_exit(child.id(), None);
        Moto {
            _child: child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    })
}

/// Starts `moto_server` on a free loopback port with `extra` arguments (TLS
/// files, say) in a process group of its own, and returns once that process
/// has bound the port: once it prints werkzeug's `Running on` line. A
/// successful connect would not prove it: a server of an earlier test binary,
/// not yet killed, may hold the port while this moto fails to bind and exits
/// (one CI run's TLS test met a refused connection that way, or so it
/// looked). A moto that exits before binding is started again on another
/// port. Its stderr, one line per request, is drained for its life.
pub fn spawn_moto_server(extra: &[&std::ffi::OsStr]) -> (Child, u16) {
    spawn_moto_server_env(extra, &[])
}

/// [`spawn_moto_server`] with `envs` added to moto's environment
/// (`INITIAL_NO_AUTH_ACTION_COUNT`, say).
pub fn spawn_moto_server_env(
    extra: &[&std::ffi::OsStr],
    envs: &[(&std::ffi::OsStr, &std::ffi::OsStr)],
) -> (Child, u16) {
    let bin = venv().join("bin/moto_server");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/install-deps.sh (it makes the Python environment)",
        bin.display()
    );
    let mut last_words = Vec::new();
    for _ in 0..5 {
        let port = dead_port();
        let mut child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .args(extra)
            .envs(envs.iter().copied())
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let stderr = child.stderr.take().expect("stderr is piped");
        let (bound, until_bound) = std::sync::mpsc::channel();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut bound = Some(bound);
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if bound.is_some() {
                    if line.contains("Running on") {
                        bound.take().map(|b| b.send(()));
                    } else {
                        log.lock().unwrap().push(line);
                    }
                }
            }
        });
        match until_bound.recv_timeout(HANG_GUARD) {
            Ok(()) => return (child, port),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!("moto_server did not listen on {port} within {HANG_GUARD:?}");
            }
            // Exited before binding: the port was taken, or it failed.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let _ = child.wait();
                last_words = std::mem::take(&mut *seen.lock().unwrap());
            }
        }
    }
    panic!(
        "moto_server exited before listening, five times; last said: {}",
        last_words.join("\n")
    );
}

/// Runs the Python client `tests/clients/NAME` (in [`venv`]) with `args`,
/// and reads the one JSON object it prints; panics with its output and the
/// gateway's stderr (`gateway_stderr`) if it fails.
pub fn run_client(
    name: &str,
    args: &[&str],
    gateway_stderr: impl FnOnce() -> String,
) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name);
    let out = Command::new(venv().join("bin/python"))
        .arg(script)
        .args(args)
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed: {stdout}\n{}\ngateway stderr:\n{}",
        String::from_utf8_lossy(&out.stderr),
        gateway_stderr()
    );
    serde_json::from_str(stdout.trim()).unwrap()
}
