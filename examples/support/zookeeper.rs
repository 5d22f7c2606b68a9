//! ZooKeeper for the demos: a standalone server (Debian's ZooKeeper 3.8 on
//! Java) on loopback with a temporary data dir and a short tick, so that a
//! session whose client stops heartbeating expires within about two
//! seconds. Clients use the pure-Rust `zookeeper-client` crate.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use zookeeper_client as zk;

use super::port::free_port;
use super::process::{require_binary, temp_dir, Server};
use super::Result;

/// The server's classes (Debian's jar lists its dependencies in its manifest).
pub const JAR: &str = "/usr/share/java/zookeeper.jar";
/// A logger binding, if installed, so that the server's log says something.
const LOGGER_JAR: &str = "/usr/share/java/slf4j-simple.jar";
/// The server's tick: session timeouts are whole ticks, at least two.
pub const TICK: Duration = Duration::from_millis(500);

/// A running ZooKeeper; killed, and its data dir removed, on drop.
pub struct ZooKeeper {
    /// The client port's address.
    pub addr: SocketAddr,
    _server: Server,
}

impl ZooKeeper {
    /// Exits with one line naming the install script if Java or ZooKeeper's
    /// jar is missing.
    pub fn require() {
        require_binary("java");
        require_binary(JAR);
    }

    /// Starts `QuorumPeerMain` (standalone) on a free loopback port, with no
    /// admin server and no JMX, and waits until a session can be opened.
    pub async fn start() -> Result<ZooKeeper> {
        let java = require_binary("java");
        require_binary(JAR);
        let dir = temp_dir("fencegate-zookeeper-", None)?;
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let data = dir.path().join("data");
        std::fs::create_dir(&data)?;
        let config = dir.path().join("zoo.cfg");
        std::fs::write(
            &config,
            format!(
                "tickTime={tick}\n\
                 dataDir={data}\n\
                 clientPort={port}\n\
                 clientPortAddress=127.0.0.1\n\
                 admin.enableServer=false\n\
                 minSessionTimeout={min}\n\
                 maxSessionTimeout=10000\n\
                 standaloneEnabled=true\n",
                tick = TICK.as_millis(),
                data = data.display(),
                min = 2 * TICK.as_millis(),
            ),
        )?;
        let mut classpath = format!("{}:{JAR}", dir.path().display());
        if Path::new(LOGGER_JAR).is_file() {
            classpath.push(':');
            classpath.push_str(LOGGER_JAR);
        }
        let mut command = Command::new(java);
        command
            .current_dir(dir.path())
            // zkServer.sh's switch; without the jmxremote properties below
            // the JVM opens no JMX port anyway.
            .env("JMXDISABLE", "true")
            .args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Dzookeeper.admin.enableServer=false")
            .arg("-Dzookeeper.jmx.log4j.disable=true")
            .arg(format!("-Dzookeeper.log.dir={}", dir.path().display()))
            .arg("-cp")
            .arg(classpath)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&config);
        let server = Server::start("zookeeper", &mut command, dir)?;
        let session = || connect(addr, Duration::from_secs(4));
        server.serving(Duration::from_secs(60), session).await?;
        Ok(ZooKeeper {
            addr,
            _server: server,
        })
    }
}

/// A new session with `timeout`.
pub async fn connect(addr: SocketAddr, timeout: Duration) -> Result<zk::Client> {
    let client = zk::Client::connector()
        .with_session_timeout(timeout)
        .with_connection_timeout(Duration::from_secs(5))
        .connect(&addr.to_string())
        .await?;
    Ok(client)
}
