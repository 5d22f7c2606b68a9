//! PostgreSQL for the demos: `initdb` into a temporary dir and `postgres`
//! listening on 127.0.0.1 only (its unix socket in the same dir), trust
//! authentication for the `postgres` role. Both refuse to run as root, so
//! when the demo runs as root they run as the unprivileged `nobody` user,
//! which then owns the temporary dir.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::port::free_port;
use super::process::{require_binary, temp_dir, Server};
use super::Result;

/// Where Debian puts each installed PostgreSQL version's server binaries
/// (`/usr/lib/postgresql/<version>/bin`); the newest is used.
pub const VERSIONS_DIR: &str = "/usr/lib/postgresql";

/// A running PostgreSQL; stopped (fast shutdown, then killed) and its data
/// dir removed on drop.
pub struct Postgres {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The directory of its Unix socket (`host=` for a local connection).
    pub socket_dir: PathBuf,
    server: Server,
}

/// A server certificate and key (PEM files) for [`Postgres::start_secured`].
pub struct ServerTls<'a> {
    pub cert: &'a std::path::Path,
    pub key: &'a std::path::Path,
}

/// uid and gid of `nobody`, from /etc/passwd.
fn nobody() -> Result<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    for line in passwd.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() > 3 && fields[0] == "nobody" {
            return Ok((fields[2].parse()?, fields[3].parse()?));
        }
    }
    Err("running as root, and there is no user nobody to run PostgreSQL as".into())
}

/// Whether this process runs as root (its /proc entry is owned by its
/// effective uid).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `name` in the newest installed version's `bin` directory (a path that
/// does not exist if none is installed, which `require_binary` reports).
fn binary(name: &str) -> String {
    let newest = std::fs::read_dir(VERSIONS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|version| {
            std::path::Path::new(&format!("{VERSIONS_DIR}/{version}/bin/{name}")).is_file()
        })
        .max();
    match newest {
        Some(version) => format!("{VERSIONS_DIR}/{version}/bin/{name}"),
        None => format!("{VERSIONS_DIR}/<version>/bin/{name}"),
    }
}

impl Postgres {
    /// Exits with one line naming the install script if PostgreSQL is
    /// missing.
    pub fn require() {
        require_binary(&binary("initdb"));
        require_binary(&binary("postgres"));
    }

    /// `initdb`, then `postgres` on a free loopback port; waits until it
    /// accepts a connection.
    pub async fn start() -> Result<Postgres> {
        Postgres::start_with(None).await
    }

    /// As [`Postgres::start`], with TLS on (`ssl=on`) and TCP connections
    /// accepted only over TLS with a password (`hostssl ... scram-sha-256`,
    /// no `host` line); `postgres` connects without a password through the
    /// Unix socket alone.
    pub async fn start_secured(tls: ServerTls<'_>) -> Result<Postgres> {
        Postgres::start_with(Some(tls)).await
    }

    async fn start_with(tls: Option<ServerTls<'_>>) -> Result<Postgres> {
        let initdb = require_binary(&binary("initdb"));
        let postgres = require_binary(&binary("postgres"));
        let root = running_as_root();
        // As root the server runs as nobody, who must be able to reach the
        // dir: under /tmp, whatever TMPDIR says.
        let base = match root {
            true => PathBuf::from("/tmp"),
            false => std::env::temp_dir(),
        };
        let dir = temp_dir("fencegate-postgres-", Some(&base))?;
        let user = if root {
            let (uid, gid) = nobody()?;
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
            Some((uid, gid))
        } else {
            None
        };
        let as_user = |command: &mut Command| {
            command.current_dir(dir.path());
            if let Some((uid, gid)) = user {
                command.uid(uid).gid(gid);
            }
        };
        let data = dir.path().join("data");

        let mut init = Command::new(initdb);
        as_user(&mut init);
        let output = init
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "--no-sync"])
            .args(["-E", "UTF8", "--locale=C"])
            .output()?;
        if !output.status.success() {
            return Err(format!(
                "initdb failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )
            .into());
        }

        let mut ssl_options = Vec::new();
        if let Some(tls) = &tls {
            // The server reads its key only if the key is its own and
            // private.
            let cert = dir.path().join("server.crt");
            let key = dir.path().join("server.key");
            std::fs::copy(tls.cert, &cert)?;
            std::fs::copy(tls.key, &key)?;
            std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
            if let Some((uid, gid)) = user {
                std::os::unix::fs::chown(&cert, Some(uid), Some(gid))?;
                std::os::unix::fs::chown(&key, Some(uid), Some(gid))?;
            }
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
            )?;
            ssl_options = vec![
                "ssl=on".to_owned(),
                format!("ssl_cert_file={}", cert.display()),
                format!("ssl_key_file={}", key.display()),
            ];
        }
        let socket_dir = dir.path().to_owned();
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut command = Command::new(postgres);
        for option in &ssl_options {
            command.args(["-c", option]);
        }
        as_user(&mut command);
        command
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(dir.path())
            .args(["-p", &port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            // A throwaway database: no fsync, and dynamic shared memory in
            // the data dir, so that nothing outlives the temporary dir.
            .args(["-c", "fsync=off"])
            .args(["-c", "dynamic_shared_memory_type=mmap"]);
        let mut server = Server::start("postgres", &mut command, dir)?;
        // Fast shutdown (SIGINT) first, on drop and on Ctrl-C, so that the
        // server removes its shared memory; whatever is left is killed.
        server.graceful(Signal::SIGINT, data.join("postmaster.pid"));
        if tls.is_some() {
            server
                .serving(Duration::from_secs(60), || {
                    connect_socket(&socket_dir, port)
                })
                .await?;
        } else {
            server
                .serving(Duration::from_secs(60), || connect(addr))
                .await?;
        }
        Ok(Postgres {
            addr,
            socket_dir,
            server,
        })
    }
}

/// A session as `postgres` on database `postgres` through the Unix socket in
/// `dir`; the connection is driven by a spawned task.
pub async fn connect_socket(dir: &std::path::Path, port: u16) -> Result<tokio_postgres::Client> {
    let mut config = tokio_postgres::Config::new();
    config
        .host_path(dir)
        .port(port)
        .user("postgres")
        .dbname("postgres")
        .connect_timeout(Duration::from_secs(5));
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// A session as `postgres` on database `postgres`; the connection is driven
/// by a spawned task.
pub async fn connect(addr: SocketAddr) -> Result<tokio_postgres::Client> {
    let config = format!(
        "host={} port={} user=postgres dbname=postgres connect_timeout=5",
        addr.ip(),
        addr.port()
    );
    let (client, connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}
