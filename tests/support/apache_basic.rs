//! A real Apache httpd serving WebDAV (mod_dav, mod_dav_fs) behind HTTP
//! Basic authentication: the password-protected store of the
//! credential-custody tests (SPEC "Credential custody", `--store webdav`,
//! `kind = "basic"`), where only the gateway knows the password.
//!
//! The same Apache as [`super::apache::Apache`] (one process, `-X`, no
//! keep-alive, a minimal configuration generated in a temporary directory),
//! with `/dav` behind `AuthType Basic`, an `AuthUserFile` made by
//! `htpasswd -bc` for user [`USER`] and `Require valid-user`. Everything
//! outside `/dav` stays open (the start-up probe and [`ApacheBasic::settle`]
//! use it). The access log records the user name sent too (`%u`):
//! `PUT /dav/x HTTP/1.1 201 fencegate`, `... 401 -` without credentials, and
//! `... 401 fencegate` with a wrong password (the status tells).

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::apache::APACHE2;
use super::*;

/// Debian's Apache modules.
const MODULES: &str = "/usr/lib/apache2/modules";
/// apache2-utils' `htpasswd` (Debian's apache2 depends on apache2-utils).
pub const HTPASSWD: &str = "htpasswd";
/// The one user Apache knows.
pub const USER: &str = "fencegate";
/// Its password.
pub const PASSWORD: &str = "dav-store-secret";
/// Requests made by [`ApacheBasic::settle`] to know the access log is
/// written (outside `/dav`: no credentials needed).
const SETTLE: &str = "/settle-";
/// nobody / nogroup on Debian.
const NOBODY: u32 = 65534;

/// Apache httpd with WebDAV under `/dav` behind Basic authentication, on
/// `127.0.0.1:PORT`. Its process group is killed on drop.
pub struct ApacheBasic {
    child: Child,
    addr: SocketAddr,
    /// Configuration, password file, logs, lock database and the DAV tree.
    dir: tempfile::TempDir,
    settles: AtomicU64,
    /// The credentials `/dav` accepts: [`USER`], [`PASSWORD`].
    pub user: String,
    pub password: String,
}

impl ApacheBasic {
    /// One for the whole test binary, started at the first call: the tests
    /// that share it work in collections of their own. Its process group is
    /// killed (and its directory removed) once the binary exits.
    pub fn shared() -> &'static ApacheBasic {
        static SHARED: OnceLock<ApacheBasic> = OnceLock::new();
        SHARED.get_or_init(|| {
            let apache = ApacheBasic::start();
            kill_group_at_exit(apache.child.id(), Some(apache.dir.path()));
            apache
        })
    }

    /// Starts Apache on a free port (three attempts, each on a fresh port),
    /// and waits (bounded) until it answers.
    pub fn start() -> ApacheBasic {
        assert!(
            Path::new(APACHE2).exists(),
            "{APACHE2} is missing: run scripts/install-deps.sh (it installs apache2)"
        );
        let mut failures = String::new();
        for attempt in 1..=3 {
            match Self::try_start() {
                Ok(apache) => return apache,
                Err(why) => failures.push_str(&format!("attempt {attempt}: {why}\n")),
            }
        }
        panic!("Apache (Basic auth) did not start:\n{failures}");
    }

    fn try_start() -> Result<ApacheBasic, String> {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for sub in ["dav", "lock", "htdocs", "run"] {
            std::fs::create_dir(root.join(sub)).unwrap();
        }
        let htpasswd = root.join("htpasswd");
        let made = Command::new(HTPASSWD)
            .arg("-bc")
            .arg(&htpasswd)
            .args([USER, PASSWORD])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {HTPASSWD} ({e}): install apache2-utils (scripts/install-deps.sh)"
                )
            });
        assert!(
            made.status.success(),
            "htpasswd -bc failed: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        let as_root = std::os::unix::fs::MetadataExt::uid(
            &std::fs::metadata("/proc/self").expect("/proc/self"),
        ) == 0;
        {
            use std::os::unix::fs::PermissionsExt;
            // Read by the worker, which runs as nobody under root.
            std::fs::set_permissions(&htpasswd, std::fs::Permissions::from_mode(0o644)).unwrap();
            if as_root {
                std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
                for sub in ["dav", "lock"] {
                    std::os::unix::fs::chown(root.join(sub), Some(NOBODY), Some(NOBODY)).unwrap();
                }
            }
        }
        let port = dead_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        std::fs::write(root.join("httpd.conf"), config(root, addr, as_root)).unwrap();
        let child = Command::new(APACHE2)
            .arg("-f")
            .arg(root.join("httpd.conf"))
            .arg("-X")
            .env_remove("APACHE_CONFDIR")
            .env_remove("APACHE_RUN_USER")
            .env_remove("APACHE_RUN_GROUP")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(root.join("stderr.log")).unwrap(),
            ))
            .spawn()
            .map_err(|e| format!("cannot run {APACHE2}: {e}"))?;
        let mut apache = ApacheBasic {
            child,
            addr,
            dir,
            settles: AtomicU64::new(0),
            user: USER.to_owned(),
            password: PASSWORD.to_owned(),
        };
        let mut exited = false;
        let ready = wait_until(HANG_GUARD, || {
            exited = !matches!(apache.child.try_wait(), Ok(None));
            exited || std::net::TcpStream::connect(addr).is_ok()
        });
        if ready && !exited {
            let probe = try_http(addr, "GET", "/", &[], b"");
            if probe
                .as_ref()
                .is_ok_and(|r| r.header("server").unwrap_or_default().contains("Apache"))
            {
                apache.settle();
                return Ok(apache);
            }
        }
        let why = format!(
            "on {addr} (exited: {exited})\nstderr: {}\nerror log: {}",
            std::fs::read_to_string(apache.dir.path().join("stderr.log")).unwrap_or_default(),
            apache.error_log()
        );
        Err(why)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for `--upstream`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The `Authorization` header Apache accepts under `/dav`.
    pub fn authorization(&self) -> (&'static str, String) {
        ("Authorization", basic(&self.user, &self.password))
    }

    /// Writes an `--upstream-credentials` file (`kind = "basic"`, the
    /// password in a file of its own, mode 0600) into `dir`:
    /// `upstream-credentials.toml` and `upstream-password`, overwritten if
    /// there. Returns the TOML file's path.
    pub fn write_credentials(&self, dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let password = dir.join("upstream-password");
        std::fs::write(&password, &self.password).unwrap();
        std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).unwrap();
        let toml = dir.join("upstream-credentials.toml");
        std::fs::write(
            &toml,
            format!(
                "kind = \"basic\"\nuser = \"{}\"\npassword_file = \"{}\"\n",
                self.user,
                password.display()
            ),
        )
        .unwrap();
        toml
    }

    /// The directory served as `/dav`.
    pub fn dav_dir(&self) -> PathBuf {
        self.dir.path().join("dav")
    }

    /// The file or directory on disk behind URL path `path` (`/dav/...`).
    pub fn on_disk(&self, path: &str) -> PathBuf {
        let rest = path
            .strip_prefix("/dav")
            .unwrap_or_else(|| panic!("{path} is not under /dav"));
        self.dav_dir().join(rest.trim_start_matches('/'))
    }

    /// The bytes Apache holds at `path` (`/dav/...`), read from disk.
    pub fn read(&self, path: &str) -> Option<Vec<u8>> {
        std::fs::read(self.on_disk(path)).ok()
    }

    /// Whether anything exists at `path` on disk.
    pub fn exists(&self, path: &str) -> bool {
        self.on_disk(path).exists()
    }

    /// Makes the collection `path` (`/dav/...`) directly at Apache, with
    /// the credentials.
    pub fn mkcol(&self, path: &str) {
        let (name, value) = self.authorization();
        let resp = http(self.addr, "MKCOL", path, &[(name, &value)], b"");
        assert_eq!(resp.status, 201, "MKCOL {path}: {}", resp.text());
    }

    /// Waits (bounded) until every request Apache answered before this call
    /// is in its access log (see `apache.rs`).
    pub fn settle(&self) {
        let target = format!("{SETTLE}{}", self.settles.fetch_add(1, Ordering::Relaxed));
        let _ = http(self.addr, "GET", &target, &[], b"");
        let line = format!("GET {target} HTTP/1.1 ");
        assert!(
            wait_until(HANG_GUARD, || self
                .log_lines()
                .iter()
                .any(|l| l.starts_with(&line))),
            "Apache never logged {target}; error log:\n{}",
            self.error_log()
        );
    }

    fn log_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Every request that reached Apache so far, as
    /// `METHOD TARGET HTTP/1.1 STATUS USER` (`USER`: the Basic user name
    /// sent, right or wrong, `-` for none), in the order logged.
    pub fn access_log(&self) -> Vec<String> {
        self.settle();
        self.log_lines()
            .into_iter()
            .filter(|l| !l.split(' ').nth(1).unwrap_or_default().starts_with(SETTLE))
            .collect()
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for ApacheBasic {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// `Basic base64(user:password)`.
pub fn basic(user: &str, password: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let raw = format!("{user}:{password}");
    let mut out = String::from("Basic ");
    for chunk in raw.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The whole configuration: nothing from `/etc/apache2` is read.
fn config(root: &Path, addr: SocketAddr, as_root: bool) -> String {
    let root = root.display();
    let modules = [
        ("mpm_prefork_module", "mod_mpm_prefork.so"),
        ("authz_core_module", "mod_authz_core.so"),
        ("authn_core_module", "mod_authn_core.so"),
        ("authn_file_module", "mod_authn_file.so"),
        ("auth_basic_module", "mod_auth_basic.so"),
        ("authz_user_module", "mod_authz_user.so"),
        ("alias_module", "mod_alias.so"),
        ("dav_module", "mod_dav.so"),
        ("dav_fs_module", "mod_dav_fs.so"),
    ]
    .iter()
    .map(|(name, file)| format!("LoadModule {name} {MODULES}/{file}\n"))
    .collect::<String>();
    let user = if as_root {
        format!("User #{NOBODY}\nGroup #{NOBODY}\n")
    } else {
        String::new()
    };
    format!(
        r#"ServerRoot "{root}"
ServerName 127.0.0.1
Listen {addr}
KeepAlive Off
PidFile "{root}/run/httpd.pid"
DefaultRuntimeDir "{root}/run"
Mutex file:{root}/run default
{modules}{user}
ErrorLog "{root}/error.log"
LogLevel warn
LogFormat "%r %>s %u" requests
CustomLog "{root}/access.log" requests
DocumentRoot "{root}/htdocs"
DavLockDB "{root}/lock/DavLock"
Alias /dav "{root}/dav"
<Directory "{root}/dav">
    Dav On
    AuthType Basic
    AuthName "fencegate store"
    AuthBasicProvider file
    AuthUserFile "{root}/htpasswd"
    Require valid-user
</Directory>
"#
    )
}
