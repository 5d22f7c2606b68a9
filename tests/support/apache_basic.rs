//! Apache httpd serving WebDAV under `/dav` behind `AuthType Basic` (an
//! `htpasswd` file, `Require valid-user`): the store of the
//! credential-custody tests (`--store webdav`), whose only password the
//! gateway holds. It is [`Apache`] started with a user; outside `/dav`
//! stays open (the start-up probe, [`Apache::settle`]). Its access log
//! names the user sent: `PUT /dav/x HTTP/1.1 201 fencegate`, `... 401 -`
//! without credentials.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::apache::Apache;

/// The one user Apache knows.
pub const USER: &str = "fencegate";
/// Its password.
pub const PASSWORD: &str = "dav-store-secret";

/// [`Apache`] with `/dav` behind Basic authentication for [`USER`].
pub struct ApacheBasic {
    apache: Apache,
    /// The credentials `/dav` accepts: [`USER`], [`PASSWORD`].
    pub user: String,
    pub password: String,
}

impl Deref for ApacheBasic {
    type Target = Apache;

    fn deref(&self) -> &Apache {
        &self.apache
    }
}

impl ApacheBasic {
    /// One for the whole test binary, started at the first call: the tests
    /// that share it work in collections of their own. Its process group is
    /// killed (and its directory removed) once the binary exits.
    pub fn shared() -> &'static ApacheBasic {
        static SHARED: OnceLock<ApacheBasic> = OnceLock::new();
        SHARED.get_or_init(|| {
            let apache = ApacheBasic::start();
            apache.kill_at_exit();
            apache
        })
    }

    /// Starts Apache with `/dav` behind Basic authentication.
    pub fn start() -> ApacheBasic {
        Self::start_configured("")
    }

    /// [`ApacheBasic::start`] with `directives` added to the server's
    /// configuration.
    pub fn start_configured(directives: &str) -> ApacheBasic {
        ApacheBasic {
            apache: Apache::start_configured(Some((USER, PASSWORD)), directives),
            user: USER.to_owned(),
            password: PASSWORD.to_owned(),
        }
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
