//! moto's S3 server with authentication enforced: the store of the
//! credential-custody tests (SPEC "Credential custody"), whose only door is
//! an IAM key the gateway holds.
//!
//! moto checks credentials only once it has served
//! `INITIAL_NO_AUTH_ACTION_COUNT` actions (of any service, S3's included);
//! `tests/support/moto_auth.py setup` spends exactly [`SETUP_ACTIONS`] of
//! them making the IAM user `fencegate` (policy `s3:*`) and its key, and an
//! admin user (`iam:*`) kept here to add and delete the gateway user's keys
//! while moto enforces; no bucket is made. From then on moto answers S3
//! requests signed with an unknown key 403 `InvalidAccessKeyId`, with a known
//! key and a wrong secret 403 `SignatureDoesNotMatch`, with a deleted key
//! 403 `InvalidAccessKeyId`. Once enforcing, moto cannot serve presigned URLs
//! or unsigned requests (it looks for an `Authorization` header and answers
//! 500 without one; an unsigned GET of an existing object is 403 with an
//! empty body): a test sends those to the gateway, which forwards them
//! header-signed, never to moto directly.
//!
//! The Python side runs with the venv's interpreter ([`venv`]).

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use super::moto::{spawn_moto_server_env, venv};
use super::*;

/// The actions moto serves before it checks credentials: exactly those of
/// `moto_auth.py setup` (its `SETUP_ACTIONS`, which must be the same; the
/// setup checks that moto enforces after them, and fails if not).
pub const SETUP_ACTIONS: u32 = 7;

/// The region the keys sign for.
pub const REGION: &str = "us-east-1";

/// An S3 access key (of the gateway's IAM user, or made up for a client).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Key {
    pub access_key_id: String,
    pub secret_access_key: String,
}

/// moto's S3 server enforcing authentication, on plain HTTP at `addr`, and
/// the IAM key it accepts (`access_key_id`, `secret_access_key`: the
/// store's credentials, for `--upstream-credentials`).
pub struct MotoAuth {
    child: Child,
    pub url: String,
    pub addr: SocketAddr,
    pub access_key_id: String,
    pub secret_access_key: String,
    admin: S3Key,
    /// [`moto_with_auth`]'s, shared by the binary's tests: its key is never
    /// revoked (see [`MotoAuth::revoke_key`]).
    shared: bool,
}

/// One [`MotoAuth`] for the test binary, started at the first call; each
/// test uses buckets of its own. Its process group is killed once the binary
/// exits. A test that revokes keys makes its own ([`MotoAuth::new_key`],
/// [`MotoAuth::revoke`]) or its own server ([`MotoAuth::start`]).
pub fn moto_with_auth() -> &'static MotoAuth {
    static MOTO: OnceLock<MotoAuth> = OnceLock::new();
    MOTO.get_or_init(|| {
        let mut moto = MotoAuth::start();
        kill_group_at_exit(moto.child.id(), None);
        moto.shared = true;
        moto
    })
}

impl MotoAuth {
    /// A moto of the caller's own, enforcing authentication after the
    /// setup; its process group is killed on drop.
    pub fn start() -> MotoAuth {
        let count = SETUP_ACTIONS.to_string();
        let (child, port) = spawn_moto_server_env(
            &[],
            &[(
                OsStr::new("INITIAL_NO_AUTH_ACTION_COUNT"),
                OsStr::new(&count),
            )],
        );
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let url = format!("http://{addr}");
        let mut moto = MotoAuth {
            child,
            url,
            addr,
            access_key_id: String::new(),
            secret_access_key: String::new(),
            admin: S3Key {
                access_key_id: String::new(),
                secret_access_key: String::new(),
            },
            shared: false,
        };
        // Dropped on a panic here: the group is killed.
        let keys = moto_auth_py(&["setup", &moto.url]);
        let field = |name: &str| {
            keys[name]
                .as_str()
                .unwrap_or_else(|| panic!("moto_auth.py setup printed no {name}: {keys}"))
                .to_owned()
        };
        moto.access_key_id = field("access_key_id");
        moto.secret_access_key = field("secret_access_key");
        moto.admin = S3Key {
            access_key_id: field("admin_access_key_id"),
            secret_access_key: field("admin_secret_access_key"),
        };
        moto
    }

    /// The key made at setup, the one moto accepts for S3.
    pub fn key(&self) -> S3Key {
        S3Key {
            access_key_id: self.access_key_id.clone(),
            secret_access_key: self.secret_access_key.clone(),
        }
    }

    /// A further key of the gateway's IAM user (s3:*), valid at once: a
    /// rotation's new key, or one a test may revoke on the shared server.
    pub fn new_key(&self) -> S3Key {
        let key = moto_auth_py(&[
            "new-key",
            &self.url,
            &self.admin.access_key_id,
            &self.admin.secret_access_key,
        ]);
        S3Key {
            access_key_id: key["access_key_id"].as_str().unwrap().to_owned(),
            secret_access_key: key["secret_access_key"].as_str().unwrap().to_owned(),
        }
    }

    /// Deletes the gateway user's key `access_key_id` (IAM
    /// `DeleteAccessKey`): from now on moto answers requests signed with it
    /// 403 `InvalidAccessKeyId`.
    pub fn revoke(&self, access_key_id: &str) {
        moto_auth_py(&[
            "revoke",
            &self.url,
            &self.admin.access_key_id,
            &self.admin.secret_access_key,
            access_key_id,
        ]);
    }

    /// Deletes the setup's key ([`Self::key`]). Only on a server of the
    /// test's own ([`MotoAuth::start`]): on [`moto_with_auth`]'s it would
    /// fail every other test of the binary, so it panics there (revoke a
    /// [`Self::new_key`] instead).
    pub fn revoke_key(&self) {
        assert!(
            !self.shared,
            "revoke_key on the shared moto_with_auth(): use MotoAuth::start(), or revoke(new_key())"
        );
        self.revoke(&self.access_key_id);
    }

    /// What moto holds at `bucket`/`key`, read with the setup's key
    /// directly (no gateway); `None` if there is no such object (or the
    /// bucket does not exist).
    pub fn read(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        let got = moto_auth_py(&[
            "get",
            &self.url,
            &self.access_key_id,
            &self.secret_access_key,
            bucket,
            key,
        ]);
        match got["status"].as_u64() {
            Some(200) => {
                let hex = got["body_hex"].as_str().unwrap();
                Some(
                    (0..hex.len())
                        .step_by(2)
                        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                        .collect(),
                )
            }
            Some(404) => None,
            _ => panic!("reading {bucket}/{key} from moto: {got}"),
        }
    }

    /// The multipart uploads in progress in `bucket` as moto holds them,
    /// read with the setup's key directly (no gateway): `(key, the store's
    /// upload id, part numbers)`, in moto's order.
    pub fn uploads(&self, bucket: &str) -> Vec<(String, String, Vec<u64>)> {
        let got = moto_auth_py(&[
            "uploads",
            &self.url,
            &self.access_key_id,
            &self.secret_access_key,
            bucket,
        ]);
        got["uploads"]
            .as_array()
            .unwrap_or_else(|| panic!("listing the uploads of {bucket} in moto: {got}"))
            .iter()
            .map(|upload| {
                (
                    upload["key"].as_str().unwrap().to_owned(),
                    upload["upload_id"].as_str().unwrap().to_owned(),
                    upload["parts"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|n| n.as_u64().unwrap())
                        .collect(),
                )
            })
            .collect()
    }

    /// `method target` sent to moto directly (no gateway), every field
    /// signed with the setup's key (the store's): what the store holds, as
    /// the store itself answers it.
    pub fn store(&self, method: &str, target: &str, fields: &[(&str, &str)], body: &[u8]) -> Resp {
        let signer =
            super::sigv4_client::Signer::now((&self.access_key_id, &self.secret_access_key));
        let host = self.addr.to_string();
        let headers = signer.headers(&host, method, target, fields, &[], body);
        let refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        http(self.addr, method, target, &refs, body)
    }

    /// Writes `--upstream-credentials` for the setup's key into `dir`
    /// ([`write_upstream_credentials`]); returns the TOML file's path.
    pub fn write_credentials(&self, dir: &Path) -> PathBuf {
        write_upstream_credentials(dir, &self.key())
    }
}

impl Drop for MotoAuth {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// Writes an `--upstream-credentials` file for `key` (SPEC "Credential
/// custody": `kind = "aws-sigv4"`, the secret in a file of its own, mode
/// 0600) into `dir`: `upstream-credentials.toml` and `upstream-secret`,
/// overwritten if there (a rotation rewrites them in place). Returns the
/// TOML file's path.
pub fn write_upstream_credentials(dir: &Path, key: &S3Key) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let secret = dir.join("upstream-secret");
    std::fs::write(&secret, &key.secret_access_key).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let toml = dir.join("upstream-credentials.toml");
    std::fs::write(
        &toml,
        format!(
            "kind = \"aws-sigv4\"\naccess_key_id = \"{}\"\nsecret_access_key_file = \"{}\"\nregion = \"{REGION}\"\n",
            key.access_key_id,
            secret.display()
        ),
    )
    .unwrap();
    toml
}

/// Runs `tests/support/moto_auth.py ARGS` with the venv's Python and reads
/// the one JSON line it prints; panics with its output if it fails.
fn moto_auth_py(args: &[&str]) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/moto_auth.py");
    let python = venv().join("bin/python");
    let out = Command::new(&python)
        .arg(&script)
        .args(args)
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "moto_auth.py {} failed: {stdout}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("moto_auth.py {}: {e}: {stdout}", args.join(" ")))
}
