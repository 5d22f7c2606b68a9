//! A real Apache httpd (Debian's `apache2`, `scripts/install-deps.sh`
//! installs it) serving WebDAV with mod_dav and mod_dav_fs: the store that
//! COPY, MOVE and collection DELETE tests put behind the gateway.
//!
//! Each [`Apache`] runs in a process group of its own, from a minimal
//! configuration generated in a temporary directory: `/dav/...` is the
//! directory [`Apache::dav_dir`] (`Dav On`), and every request is logged as
//! `%r %>s` (`MOVE /dav/x HTTP/1.1 201`), so a test can tell which requests
//! reached Apache ([`Apache::requests`]) and read what Apache really holds
//! from the disk ([`Apache::read`]), never through the gateway.
//!
//! Apache serves one connection at a time (`-X`: one process, prefork, no
//! keep-alive). It logs a request only after sending its answer, so the
//! client may see the answer first; but it logs it before it accepts the
//! next connection, so once it has answered a request of
//! [`Apache::settle`]'s, every request it answered before is in the log.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::*;

/// Debian's binary; its modules are under [`MODULES`].
pub const APACHE2: &str = "/usr/sbin/apache2";
const MODULES: &str = "/usr/lib/apache2/modules";

/// Requests made by [`Apache::settle`] to know the access log is written.
const SETTLE: &str = "/settle-";

/// Apache httpd with WebDAV on `127.0.0.1:PORT`. Its process group is killed
/// on drop.
pub struct Apache {
    child: Child,
    addr: SocketAddr,
    /// Configuration, logs, lock database and the DAV tree.
    dir: tempfile::TempDir,
    settles: AtomicU64,
    /// `/dav` behind `AuthType Basic` with this user and password
    /// (`apache_basic.rs`); `None`: open.
    basic: Option<(String, String)>,
}

impl Apache {
    /// One Apache for the whole test binary, started at the first call: the
    /// tests that share it work in collections of their own. Its process
    /// group is killed (and its directory removed) once the binary exits.
    pub fn shared() -> &'static Apache {
        static SHARED: OnceLock<Apache> = OnceLock::new();
        SHARED.get_or_init(|| {
            let apache = Apache::start();
            kill_group_at_exit(apache.child.id(), Some(apache.dir.path()));
            apache
        })
    }

    /// Starts Apache on a free port (three attempts, each on a fresh port:
    /// another process may take the port between its pick and Apache's
    /// bind), and waits (bounded) until it answers.
    pub fn start() -> Apache {
        Self::start_with(None)
    }

    /// [`Apache::start`], `/dav` behind `AuthType Basic` for `basic` (user,
    /// password) when given.
    pub fn start_with(basic: Option<(&str, &str)>) -> Apache {
        Self::start_configured(basic, "")
    }

    /// [`Apache::start_with`], with `directives` added to the server's
    /// configuration (`AllowEncodedSlashes NoDecode`).
    pub fn start_configured(basic: Option<(&str, &str)>, directives: &str) -> Apache {
        assert!(
            Path::new(APACHE2).exists(),
            "{APACHE2} is missing: run scripts/install-deps.sh (it installs apache2)"
        );
        let mut failures = String::new();
        for attempt in 1..=3 {
            match Self::try_start(basic, directives) {
                Ok(apache) => return apache,
                Err(why) => failures.push_str(&format!("attempt {attempt}: {why}\n")),
            }
        }
        panic!("Apache did not start:\n{failures}");
    }

    fn try_start(basic: Option<(&str, &str)>, directives: &str) -> Result<Apache, String> {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for sub in ["dav", "lock", "htdocs", "run"] {
            std::fs::create_dir(root.join(sub)).unwrap();
        }
        if let Some((user, password)) = basic {
            write_htpasswd(&root.join("htpasswd"), user, password);
        }
        // /proc/self belongs to the effective user.
        let as_root = std::os::unix::fs::MetadataExt::uid(
            &std::fs::metadata("/proc/self").expect("/proc/self"),
        ) == 0;
        if as_root {
            // Apache refuses to serve as root: its workers run as nobody,
            // who must reach the tree, write the DAV directory and the lock
            // database (logs are opened by the root parent).
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
            for sub in ["dav", "lock"] {
                std::os::unix::fs::chown(root.join(sub), Some(NOBODY), Some(NOBODY)).unwrap();
            }
        }
        let port = dead_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        std::fs::write(
            root.join("httpd.conf"),
            config(root, addr, as_root, basic.is_some()) + directives,
        )
        .unwrap();
        let child = Command::new(APACHE2)
            .arg("-f")
            .arg(root.join("httpd.conf"))
            .arg("-X")
            // Debian's apache2 reads its run-time settings from these; the
            // configuration sets everything it needs itself.
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
        let mut apache = Apache {
            child,
            addr,
            dir,
            settles: AtomicU64::new(0),
            basic: basic.map(|(user, password)| (user.to_owned(), password.to_owned())),
        };
        let mut exited = false;
        let ready = wait_until(HANG_GUARD, || {
            exited = !matches!(apache.child.try_wait(), Ok(None));
            exited || std::net::TcpStream::connect(addr).is_ok()
        });
        if ready && !exited {
            // Something listens and Apache runs: make sure it is Apache
            // answering, with its log written.
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

    /// The bytes Apache holds at `path` (`/dav/...`), read from disk; `None`
    /// if there is no such file.
    pub fn read(&self, path: &str) -> Option<Vec<u8>> {
        std::fs::read(self.on_disk(path)).ok()
    }

    /// Whether anything (file or collection) exists at `path` on disk.
    pub fn exists(&self, path: &str) -> bool {
        self.on_disk(path).exists()
    }

    /// Makes the collection `path` (`/dav/...`) directly at Apache, not
    /// through any gateway (so no fence is involved), with the Basic
    /// credentials if `/dav` needs them.
    pub fn mkcol(&self, path: &str) {
        let authorization = self
            .basic
            .as_ref()
            .map(|(user, password)| super::apache_basic::basic(user, password));
        let headers: Vec<(&str, &str)> = authorization
            .iter()
            .map(|value| ("Authorization", value.as_str()))
            .collect();
        let resp = http(self.addr, "MKCOL", path, &headers, b"");
        assert_eq!(resp.status, 201, "MKCOL {path}: {}", resp.text());
    }

    /// The child's process id and the directory, for a shared instance's
    /// clean-up at exit.
    pub(super) fn kill_at_exit(&self) {
        kill_group_at_exit(self.child.id(), Some(self.dir.path()));
    }

    /// Waits (bounded) until every request Apache answered before this call
    /// is in its access log: Apache takes one connection at a time, so the
    /// request sent here is logged after all of them (module docs).
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

    /// Every request that reached Apache so far (after [`settle`](Self::settle)),
    /// as `METHOD TARGET HTTP/1.1 STATUS`, in the order logged.
    pub fn access_log(&self) -> Vec<String> {
        self.settle();
        self.log_lines()
            .into_iter()
            .filter(|l| !l.split(' ').nth(1).unwrap_or_default().starts_with(SETTLE))
            .collect()
    }

    /// The requests that reached Apache with `method` and a target at or
    /// under `path` (`/dav/t` matches `/dav/t` and `/dav/t/x`).
    pub fn requests(&self, method: &str, path: &str) -> Vec<String> {
        self.access_log()
            .into_iter()
            .filter(|line| {
                let mut words = line.split(' ');
                let (Some(m), Some(target)) = (words.next(), words.next()) else {
                    return false;
                };
                m == method
                    && (target == path
                        || target
                            .strip_prefix(path)
                            .is_some_and(|rest| rest.starts_with('/')))
            })
            .collect()
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Apache {
    fn drop(&mut self) {
        // The whole group: the foreground parent and its worker processes.
        let pgid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// nobody / nogroup on Debian.
const NOBODY: u32 = 65534;

/// Writes an `htpasswd` file for `user` (apache2-utils' `htpasswd`, which
/// Debian's apache2 depends on), readable by the workers.
fn write_htpasswd(path: &Path, user: &str, password: &str) {
    let made = Command::new("htpasswd")
        .arg("-bc")
        .arg(path)
        .args([user, password])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run htpasswd ({e}): install apache2-utils (scripts/install-deps.sh)")
        });
    assert!(
        made.status.success(),
        "htpasswd -bc failed: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// The whole configuration: nothing from `/etc/apache2` is read. With
/// `basic`, `/dav` is behind `AuthType Basic` (the `htpasswd` file beside
/// it), and the log names the user sent (`%u`).
fn config(root: &Path, addr: SocketAddr, as_root: bool, basic: bool) -> String {
    let root = root.display();
    let auth_modules: &[(&str, &str)] = if basic {
        &[
            ("authn_core_module", "mod_authn_core.so"),
            ("authn_file_module", "mod_authn_file.so"),
            ("auth_basic_module", "mod_auth_basic.so"),
            ("authz_user_module", "mod_authz_user.so"),
        ]
    } else {
        &[]
    };
    let modules = [
        ("mpm_prefork_module", "mod_mpm_prefork.so"),
        ("authz_core_module", "mod_authz_core.so"),
        ("alias_module", "mod_alias.so"),
        ("dav_module", "mod_dav.so"),
        ("dav_fs_module", "mod_dav_fs.so"),
    ]
    .iter()
    .chain(auth_modules)
    .map(|(name, file)| format!("LoadModule {name} {MODULES}/{file}\n"))
    .collect::<String>();
    let (log_format, access) = if basic {
        (
            "%r %>s %u",
            format!(
                "AuthType Basic\n    AuthName \"fencegate store\"\n    AuthBasicProvider file\n    AuthUserFile \"{root}/htpasswd\"\n    Require valid-user"
            ),
        )
    } else {
        ("%r %>s", "Require all granted".to_owned())
    };
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
LogFormat "{log_format}" requests
CustomLog "{root}/access.log" requests
DocumentRoot "{root}/htdocs"
DavLockDB "{root}/lock/DavLock"
Alias /dav "{root}/dav"
<Directory "{root}/dav">
    Dav On
    {access}
</Directory>
"#
    )
}
