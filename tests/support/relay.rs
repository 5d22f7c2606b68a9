//! A fault-injecting TCP relay for tests: put it between two parties (the
//! gateway and its backend, or a client and the gateway) and choose what
//! goes wrong on the bytes flowing back from the server side: nothing, a
//! refused connection, a reset or a close at a chosen byte, a stall, a
//! trickle, a half-close. The fault can be changed between requests, so a
//! test can check that the next request through a healed path succeeds.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What happens to the bytes the server sends back. Counted per connection
/// from its first byte, and read live: a connection already past byte `n`
/// when the fault is set (a pooled one) meets it at its next bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Relay faithfully.
    None,
    /// Accept, then close at once without reading or connecting.
    Refuse,
    /// After relaying `n` bytes, reset the client side (RST).
    ResetAt(usize),
    /// After relaying `n` bytes, close the client side cleanly (FIN).
    CloseAt(usize),
    /// After relaying `n` bytes, relay nothing more (the connection stays
    /// open).
    StallAt(usize),
    /// Relay one byte every `ms` milliseconds.
    Trickle(u64),
    /// Relay everything, then half-close the client side right after the
    /// first response's bytes (shutdown of writing, reading still open).
    HalfCloseAt(usize),
    /// A network partition: nothing is relayed in either direction (bytes
    /// are read and dropped, connections stay open, new ones are accepted
    /// and never reach the server). Connections that lived through it stay
    /// dead after it heals; new ones work.
    Blackhole,
    /// Bytes from the client side reach the server this long after they
    /// came, even if the client gave up meanwhile (a request held in a
    /// queue or a socket buffer, delivered late). Read at every chunk, so
    /// a pooled connection meets it at its next request.
    DelayRequest(Duration),
    /// As `DelayRequest`, for the requests whose head starts with this
    /// method only (a chunk that starts with it, on a connection that
    /// carries several requests one after the other).
    DelayMethod(&'static str, Duration),
}

/// A running relay on `127.0.0.1:0`, in its own runtime. Stopped on drop.
pub struct Relay {
    addr: SocketAddr,
    fault: Arc<Mutex<Fault>>,
    connections: Arc<Mutex<usize>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Relay {
    /// A relay to `target` with `fault`.
    pub fn start(target: SocketAddr, fault: Fault) -> Relay {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let fault = Arc::new(Mutex::new(fault));
        let connections = Arc::new(Mutex::new(0));
        let (accept_fault, accept_count) = (Arc::clone(&fault), Arc::clone(&connections));
        runtime.spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                *accept_count.lock().unwrap() += 1;
                tokio::spawn(relay_one(client, target, Arc::clone(&accept_fault)));
            }
        });
        Relay {
            addr,
            fault,
            connections,
            runtime: Some(runtime),
        }
    }

    /// Where to connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://` URL of the relay.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The fault for connections accepted from now on.
    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Reads and drops everything `client` sends until it hangs up.
async fn swallow(mut client: TcpStream) {
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = client.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

async fn relay_one(client: TcpStream, target: SocketAddr, shared: Arc<Mutex<Fault>>) {
    let fault = *shared.lock().unwrap();
    if fault == Fault::Refuse {
        drop(client);
        return;
    }
    if fault == Fault::Blackhole {
        swallow(client).await;
        return;
    }
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // Requests go through untouched but for a partition; closing either
    // way ends the other.
    let partition = Arc::clone(&shared);
    let upstream = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut cut = false;
        let mut delayed = false;
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let fault = *partition.lock().unwrap();
            cut |= fault == Fault::Blackhole;
            match fault {
                Fault::DelayRequest(delay) => {
                    delayed = true;
                    tokio::time::sleep(delay).await
                }
                Fault::DelayMethod(method, delay)
                    if buf[..n].starts_with(format!("{method} ").as_bytes()) =>
                {
                    delayed = true;
                    tokio::time::sleep(delay).await
                }
                _ => {}
            }
            if !cut && server_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        if delayed {
            // Bytes held in the network arrive on a connection that looks
            // open to the server: it answers before it sees the close (a
            // close right behind them would let a server drop the request).
            return Some(server_write);
        }
        let _ = server_write.shutdown().await;
        None
    });
    let mut cut = false;
    let mut sent = 0usize;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match server_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let fault = match *shared.lock().unwrap() {
            // Set while this connection was open: close it now.
            Fault::Refuse => Fault::CloseAt(0),
            fault => fault,
        };
        cut |= fault == Fault::Blackhole;
        if cut {
            continue;
        }
        let mut chunk = &buf[..n];
        let limit = match fault {
            Fault::ResetAt(at)
            | Fault::CloseAt(at)
            | Fault::StallAt(at)
            | Fault::HalfCloseAt(at) => Some(at),
            _ => None,
        };
        if let Some(at) = limit {
            let room = at.saturating_sub(sent);
            if chunk.len() >= room {
                chunk = &chunk[..room];
                if client_write.write_all(chunk).await.is_err() {
                    break;
                }
                sent += chunk.len();
                match fault {
                    Fault::ResetAt(_) => {
                        // Closing with SO_LINGER 0 sends RST instead of FIN
                        // (deprecated in tokio because a lingering close can
                        // block; with a zero linger it cannot). No FIN first:
                        // dropping a write half would send one, so it is
                        // forgotten and the socket closes with the read half.
                        #[allow(deprecated)]
                        let _ = client_write.as_ref().set_linger(Some(Duration::ZERO));
                        client_write.forget();
                        upstream.abort();
                        return;
                    }
                    Fault::CloseAt(_) => {
                        let _ = client_write.shutdown().await;
                        upstream.abort();
                        return;
                    }
                    Fault::StallAt(_) => {
                        // Hold both sides open, relaying nothing more, until
                        // the client gives up.
                        let _ = upstream.await;
                        drop(client_write);
                        return;
                    }
                    Fault::HalfCloseAt(_) => {
                        let _ = client_write.shutdown().await;
                        let _ = upstream.await;
                        return;
                    }
                    _ => {}
                }
            }
        }
        if let Fault::Trickle(ms) = fault {
            for byte in chunk.chunks(1) {
                if client_write.write_all(byte).await.is_err() {
                    upstream.abort();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            sent += chunk.len();
            continue;
        }
        if client_write.write_all(chunk).await.is_err() {
            break;
        }
        sent += chunk.len();
    }
    let _ = client_write.shutdown().await;
    let _ = upstream.await;
}
