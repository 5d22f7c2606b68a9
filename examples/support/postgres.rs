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
    server: Server,
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

        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut command = Command::new(postgres);
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
        server
            .serving(Duration::from_secs(60), || connect(addr))
            .await?;
        Ok(Postgres { addr, server })
    }
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
