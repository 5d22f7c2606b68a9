//! Wiring: the fence table, the backend (real or embedded), the data plane
//! (metrics, fencing layer, proxy) and the admin plane, started and stopped
//! as one [`Gateway`].

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::config::{Config, StateKind};
use super::data_plane::DataPlane;
use super::embedded::{self, ObjectStore};
use super::metrics::Metrics;
use super::proxy::Proxy;
use super::upstream::Upstream;
use crate::layer::FencingLayer;
use crate::store::StoreError;
use crate::Fences;

/// Why the gateway could not start. Each is one clear line for the user.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The fence store could not be opened (unreadable, corrupt, locked by
    /// another gateway).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The embedded backend's object directory could not be created.
    #[error("cannot use data dir {}: {source}", path.display())]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({plane}): {source}")]
    Bind {
        /// Which listener.
        plane: &'static str,
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The embedded backend's address did not form an upstream URL.
    #[error("embedded backend: {0}")]
    Embedded(String),
}

/// A running gateway.
#[derive(Debug)]
pub struct Gateway {
    data_addr: SocketAddr,
    admin_addr: SocketAddr,
    upstream: Upstream,
    embedded: bool,
    fences: Fences,
    stop: watch::Sender<bool>,
    data: JoinHandle<std::io::Result<()>>,
    others: Vec<JoinHandle<std::io::Result<()>>>,
    shutdown_timeout: Duration,
}

impl Gateway {
    /// Opens the fence store, starts the embedded backend if no upstream is
    /// configured, binds both planes and starts serving.
    pub async fn start(config: Config) -> Result<Gateway, StartError> {
        let fences = match config.state {
            StateKind::Disk => Fences::open(&config.data_dir)?,
            StateKind::Memory => {
                tracing::warn!(
                    "--state memory: every fence is forgotten on restart, and stale tokens are accepted again after one"
                );
                Fences::in_memory()
            }
        };
        let (stop, stopped) = watch::channel(false);
        let mut others = Vec::new();

        let (upstream, embedded) = match config.upstream.clone() {
            Some(upstream) => (upstream, false),
            None => {
                let objects = match config.state {
                    StateKind::Disk => {
                        ObjectStore::on_disk(&config.data_dir).map_err(|source| {
                            StartError::DataDir {
                                path: config.data_dir.clone(),
                                source,
                            }
                        })?
                    }
                    StateKind::Memory => ObjectStore::in_memory(),
                };
                let addr = SocketAddr::from(([127, 0, 0, 1], 0));
                let listener = bind("embedded backend", addr).await?;
                let addr = local_addr("embedded backend", addr, &listener)?;
                let app = embedded::router(objects);
                others.push(tokio::spawn(
                    axum::serve(listener, app)
                        .with_graceful_shutdown(signalled(stopped.clone()))
                        .into_future(),
                ));
                let upstream = Upstream::from_addr(addr).map_err(StartError::Embedded)?;
                (upstream, true)
            }
        };

        let data_listener = bind("data plane", config.listen).await?;
        let admin_listener = bind("admin plane", config.admin_listen).await?;
        let data_addr = local_addr("data plane", config.listen, &data_listener)?;
        let admin_addr = local_addr("admin plane", config.admin_listen, &admin_listener)?;

        let metrics = Metrics::new(fences.clone());
        let fencing = FencingLayer::new(fences.clone())
            .token_header(config.token_header.clone())
            .scope(config.scope)
            .allow_unfenced_writes(config.allow_unfenced_writes);
        let proxy = Proxy::new(
            upstream.clone(),
            config.upstream_timeout,
            config.upstream_idle_timeout,
        );
        let data_plane = DataPlane::new(fencing, proxy, metrics.clone());
        let data = tokio::spawn(
            axum::serve(
                data_listener.tap_io(|tcp| {
                    // Small request/response exchanges must not wait on Nagle.
                    let _ = tcp.set_nodelay(true);
                }),
                data_plane,
            )
            .with_graceful_shutdown(signalled(stopped.clone()))
            .into_future(),
        );
        let admin_app = super::admin::router(fences.clone(), metrics);
        others.push(tokio::spawn(
            axum::serve(admin_listener, admin_app)
                .with_graceful_shutdown(signalled(stopped))
                .into_future(),
        ));

        Ok(Gateway {
            data_addr,
            admin_addr,
            upstream,
            embedded,
            fences,
            stop,
            data,
            others,
            shutdown_timeout: config.shutdown_timeout,
        })
    }

    /// The data plane's bound address.
    pub fn data_addr(&self) -> SocketAddr {
        self.data_addr
    }

    /// The admin plane's bound address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The backend requests are forwarded to.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// Whether the backend is the embedded one.
    pub fn is_embedded(&self) -> bool {
        self.embedded
    }

    /// The fence table.
    pub fn fences(&self) -> &Fences {
        &self.fences
    }

    /// Graceful shutdown: stop accepting, let requests in flight finish
    /// (for at most the shutdown timeout), then close the fence store.
    /// Returns whether every request finished in time.
    pub async fn shutdown(self) -> bool {
        let _ = self.stop.send(true);
        let drained = tokio::time::timeout(self.shutdown_timeout, self.data)
            .await
            .is_ok();
        for task in self.others {
            // The admin plane and embedded backend have nothing to drain
            // that matters once the data plane is done.
            task.abort();
        }
        self.fences.close();
        drained
    }
}

async fn bind(plane: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind {
            plane,
            addr,
            source,
        })
}

fn local_addr(
    plane: &'static str,
    addr: SocketAddr,
    listener: &TcpListener,
) -> Result<SocketAddr, StartError> {
    listener.local_addr().map_err(|source| StartError::Bind {
        plane,
        addr,
        source,
    })
}

async fn signalled(mut stopped: watch::Receiver<bool>) {
    // An error means the sender is gone: the gateway is being dropped, which
    // is a stop too.
    let _ = stopped.wait_for(|stop| *stop).await;
}
