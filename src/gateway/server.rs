//! Wiring: the fence table, the backend (real or embedded), the data plane
//! and the admin plane, started on listeners the caller bound and stopped as
//! one [`Gateway`].
//!
//! In the shape of mini-redis's `server::run`: the listeners and the
//! shutdown are values passed in, so that tests and examples run a gateway
//! in-process on `127.0.0.1:0` without faking a command line.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use fencegate::gateway::{self, Config, Listeners, StateKind};
//!
//! let config = Config { state: StateKind::Memory, ..Config::default() };
//! let listeners = Listeners::bind("127.0.0.1:0".parse()?, "127.0.0.1:0".parse()?).await?;
//! gateway::run(config, listeners, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

use super::accept::{self, PlaneOptions};
use super::access_log::AccessLog;
use super::admin::{self, Readiness};
use super::config::{Config, StateKind};
use super::data_plane::DataPlane;
use super::embedded::{self, ObjectStore};
pub use super::error::StartError;
use super::generations::{Generation, Generations};
use super::metrics::{Chains, Metrics};
use super::reload::{ConfigReloader, InForce};
use super::route_build::{
    build_route, check_chain, check_namespaces, counters_for, namespace_shapings, route_specs,
    Issuers, Prepared,
};
use super::routes::RouteTable;
use super::tls::{ServerCert, TlsError};
use super::upstream::Upstream;
use crate::client_tls::{ClientTls, Credentials};
use crate::fences::{FenceCache, NewFenceLimit};
use crate::Fences;

/// The certificate files a gateway re-reads on `SIGHUP`: the one it serves
/// and the one it shows to etcd.
#[derive(Debug, Clone)]
pub struct TlsReloader {
    server: Option<Arc<ServerCert>>,
    etcd: Option<Arc<ClientTls>>,
    issuer: Option<Arc<crate::issuer::UrlIssuer>>,
}

impl TlsReloader {
    /// Whether there is anything to reload.
    pub fn is_empty(&self) -> bool {
        self.server.is_none() && self.etcd.is_none() && self.issuer.is_none()
    }

    /// Reads every file again; each that fails keeps its old certificate,
    /// and the first error is returned. (Credential custody's tables are
    /// read again by a configuration reload: [`ConfigReloader`].)
    pub fn reload(&self) -> Result<(), TlsError> {
        let server = self.server.as_ref().map_or(Ok(()), |cert| cert.reload());
        let etcd = self.etcd.as_ref().map_or(Ok(()), |tls| tls.reload());
        let issuer = self.issuer.as_ref().map_or(Ok(()), |issuer| {
            use crate::issuer::BoundSource as _;
            issuer.source().reload_tls()
        });
        server.and(etcd).and(issuer)
    }
}

/// The two listeners a gateway serves, bound by the caller (or by
/// [`Listeners::bind`]).
#[derive(Debug)]
pub struct Listeners {
    /// The data plane: fenced requests to the backend.
    pub data: TcpListener,
    /// The admin plane: fences, metrics, health.
    pub admin: TcpListener,
}

impl Listeners {
    /// Binds both planes (port 0 picks a free port).
    pub async fn bind(data: SocketAddr, admin: SocketAddr) -> Result<Listeners, StartError> {
        Ok(Listeners {
            data: bind("data plane", data).await?,
            admin: bind("admin plane", admin).await?,
        })
    }
}

/// Runs a gateway on `listeners` until `shutdown` resolves, then drains it.
/// Returns whether every request in flight finished within the shutdown
/// timeout.
pub async fn run(
    config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<bool, StartError> {
    let gateway = Gateway::start_on(config, listeners).await?;
    shutdown.await;
    Ok(gateway.shutdown().await)
}

/// A running gateway.
#[derive(Debug)]
pub struct Gateway {
    data_addr: SocketAddr,
    admin_addr: SocketAddr,
    upstream: Upstream,
    embedded: bool,
    fences: Fences,
    readiness: Readiness,
    server_cert: Option<Arc<ServerCert>>,
    /// The client certificate shown to etcd, re-read with the server's.
    etcd_tls: Option<Arc<ClientTls>>,
    /// The token issuer, whose long-lived connections' certificates are
    /// re-read with the server's.
    issuer: Option<Arc<crate::issuer::UrlIssuer>>,
    /// Builds and swaps in the routes of a new configuration (`SIGHUP`).
    reloader: ConfigReloader,
    /// Stops the data plane's accept loop and drains its connections.
    stop_data: watch::Sender<bool>,
    /// Stops the admin plane and the embedded backend, once the data plane
    /// has drained: `/readyz` answers "draining" meanwhile.
    stop_rest: watch::Sender<bool>,
    data_accept: JoinHandle<()>,
    data_connections: TaskTracker,
    rest: Vec<JoinHandle<()>>,
    /// Written out at shutdown, after the last request.
    access_log: Option<AccessLog>,
    shutdown_timeout: Duration,
}

impl Gateway {
    /// Binds the addresses in `config` and starts serving on them.
    pub async fn start(config: Config) -> Result<Gateway, StartError> {
        let listeners = Listeners::bind(config.listen, config.admin_listen).await?;
        Self::start_on(config, listeners).await
    }

    /// Opens the fence store, starts the embedded backend if a route has
    /// no upstream, and serves both planes on `listeners`.
    pub async fn start_on(config: Config, listeners: Listeners) -> Result<Gateway, StartError> {
        // Everything that can fail on bad configuration comes before the
        // fence store is opened, so that a bad flag leaves nothing locked.
        let server_cert = config.tls.as_ref().map(ServerCert::load).transpose()?;
        let acceptor = server_cert.as_ref().map(ServerCert::acceptor).transpose()?;
        let access_log = config
            .access_log
            .as_ref()
            .map(|target| {
                AccessLog::open(target).map_err(|source| StartError::AccessLog {
                    target: target.clone(),
                    source,
                })
            })
            .transpose()?;
        let admin_token = config
            .admin_token_file
            .as_deref()
            .map(admin::AdminToken::read)
            .transpose()?;
        let specs = route_specs(&config);
        let mut issuers = Issuers::default();
        let prepared = specs
            .iter()
            .map(|spec| Prepared::of(spec, &mut issuers))
            .collect::<Result<Vec<_>, _>>()?;
        let data_addr = local_addr("data plane", &listeners.data)?;
        let admin_addr = local_addr("admin plane", &listeners.admin)?;

        let mut etcd_tls = None;
        let fences = match config.state {
            StateKind::Disk => Fences::open_with_cache(
                &config.data_dir,
                config
                    .fence_cache
                    .map_or_else(FenceCache::default, FenceCache::bytes),
            )?,
            StateKind::Memory => {
                tracing::warn!(
                    "--state memory: every fence is forgotten on restart, and stale tokens are accepted again after one"
                );
                match config.fence_cache {
                    Some(bytes) => Fences::in_memory_bounded(FenceCache::bytes(bytes)),
                    None => Fences::in_memory(),
                }
            }
            StateKind::Etcd => {
                let options = etcd_options(&config)?;
                etcd_tls = options.tls.clone();
                let cache = config
                    .fence_cache
                    .map_or_else(FenceCache::default, FenceCache::bytes);
                Fences::etcd_with_cache(options, cache).await?
            }
        };
        if let Some((rate, burst)) = config.new_fence_limit {
            fences.limit_new_fences(NewFenceLimit::new(f64::from(rate), burst));
        }
        let (stop_data, data_stopped) = watch::channel(false);
        let (stop_rest, rest_stopped) = watch::channel(false);
        let mut rest = Vec::new();

        let embedded = if specs.iter().any(|spec| spec.options.upstream.is_none()) {
            let (upstream, task) = start_embedded(&config, signalled(rest_stopped.clone())).await?;
            rest.push(task);
            Some(upstream)
        } else {
            None
        };

        let chains: Chains = Arc::new(std::sync::RwLock::new(Vec::new()));
        let issuer = issuers.first();
        let metrics = Metrics::new(
            fences.clone(),
            access_log.clone(),
            issuer.clone(),
            Arc::clone(&chains),
        );
        let mut built = Vec::with_capacity(specs.len());
        for (spec, prepared) in specs.iter().zip(prepared) {
            let counters = counters_for(&config, spec, &metrics);
            built.push(build_route(spec, prepared, &fences, embedded.as_ref(), counters).await?);
        }
        check_namespaces(&specs, &fences).await?;
        let upstream = built
            .first()
            .map(|route| route.plane.proxy.upstream().clone())
            .ok_or_else(|| StartError::Embedded("no route".into()))?;
        *chains
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            built.iter().filter_map(|b| b.chain.clone()).collect();
        let table = RouteTable::new(&specs.iter().map(|s| s.matches.clone()).collect::<Vec<_>>());
        let generations = Generations::new(Generation::new(
            1,
            built.iter().map(|b| b.plane.clone()).collect(),
            table,
        ));
        let reloader = ConfigReloader::new(
            Arc::clone(&generations),
            fences.clone(),
            embedded.clone(),
            issuers,
            chains,
            metrics.clone(),
            InForce {
                config: config.clone(),
                specs,
                built,
            },
        );
        let mut data_plane =
            DataPlane::new(generations, metrics.clone(), config.client.body_timeout);
        if let Some(log) = &access_log {
            data_plane = data_plane.access_log(log.clone());
        }
        let data_connections = TaskTracker::new();
        let data_accept = tokio::spawn(accept::serve(
            listeners.data,
            PlaneOptions {
                name: "data plane",
                limits: config.client,
                tls: acceptor.clone(),
            },
            move |info| data_plane.connection(info),
            data_stopped,
            data_connections.clone(),
        ));

        let instance = (config.state == StateKind::Etcd).then(|| config.etcd.instance_name());
        let readiness = Readiness::new(fences.clone(), instance);
        let admin_app = admin::router(
            fences.clone(),
            metrics,
            readiness.clone(),
            config.scope,
            admin_token,
            reloader.clone(),
        );
        let mut admin_limits = config.client;
        // The admin plane serves operators and scrapers, not the clients the
        // cap is sized for.
        admin_limits.max_connections = ADMIN_MAX_CONNECTIONS;
        let admin_connections = TaskTracker::new();
        rest.push(tokio::spawn(accept::serve(
            listeners.admin,
            PlaneOptions {
                name: "admin plane",
                limits: admin_limits,
                tls: acceptor,
            },
            // The peer's address is the actor of the audit log.
            move |info| {
                hyper_util::service::TowerToHyperService::new(tower_layer::Layer::layer(
                    &axum::Extension(info.peer),
                    admin_app.clone(),
                ))
            },
            rest_stopped,
            admin_connections,
        )));

        Ok(Gateway {
            data_addr,
            admin_addr,
            upstream,
            embedded: embedded.is_some(),
            fences,
            readiness,
            server_cert,
            etcd_tls,
            issuer,
            reloader,
            stop_data,
            stop_rest,
            data_accept,
            data_connections,
            rest,
            access_log,
            shutdown_timeout: config.shutdown_timeout,
        })
    }

    /// Every problem of `config` that would stop a start, found without
    /// starting: certificates, keys and custody tables read, URLs parsed,
    /// every route's options checked together. Binds nothing, opens no
    /// fence store, connects to nothing (`fencegate check-config`).
    pub fn check(config: &Config) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(tls) = &config.tls {
            if let Err(error) = ServerCert::load(tls) {
                problems.push(format!("TLS: {error}"));
            }
        }
        if let Some(file) = &config.admin_token_file {
            if let Err(error) = admin::AdminToken::read(file) {
                problems.push(error.to_string());
            }
        }
        if config.state == StateKind::Etcd {
            if let Err(error) = etcd_options(config) {
                problems.push(error.to_string());
            }
        }
        let mut issuers = Issuers::default();
        let specs = route_specs(config);
        if let Err(error) = namespace_shapings(&specs) {
            problems.push(format!("fence namespaces: {error}"));
        }
        for spec in specs {
            let named = |error: StartError| match config.routes.is_empty() {
                true => error.to_string(),
                false => format!("route {:?}: {error}", spec.name),
            };
            match Prepared::of(&spec, &mut issuers) {
                Ok(_) => {}
                Err(error) => problems.push(named(error)),
            }
            if let Err(error) = check_chain(&spec.options) {
                problems.push(named(error));
            }
        }
        problems
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

    /// Whether the planes speak TLS.
    pub fn is_tls(&self) -> bool {
        self.server_cert.is_some()
    }

    /// The fence table.
    pub fn fences(&self) -> &Fences {
        &self.fences
    }

    /// Reads the TLS certificate and key files again (the binary does it on
    /// `SIGHUP`): the served certificate and the one shown to etcd. New
    /// connections get the new certificates; on an error the old ones stay.
    /// Without TLS, does nothing.
    pub fn reload_tls(&self) -> Result<(), TlsError> {
        self.tls_reloader().reload()
    }

    /// The certificates to reload from another task (a signal handler).
    pub fn tls_reloader(&self) -> TlsReloader {
        TlsReloader {
            server: self.server_cert.clone(),
            etcd: self.etcd_tls.clone(),
            issuer: self.issuer.clone(),
        }
    }

    /// What reloads the configuration from another task (a signal
    /// handler): [`ConfigReloader::reload`].
    pub fn config_reloader(&self) -> ConfigReloader {
        self.reloader.clone()
    }

    /// Graceful shutdown: `/readyz` turns 503, the data plane stops
    /// accepting, requests in flight finish (for at most the shutdown
    /// timeout), then the admin plane stops and the fence store is closed.
    /// Returns whether every request finished in time.
    pub async fn shutdown(self) -> bool {
        self.readiness.set_draining();
        let _ = self.stop_data.send(true);
        let _ = self.data_accept.await;
        self.data_connections.close();
        let drained = tokio::time::timeout(self.shutdown_timeout, self.data_connections.wait())
            .await
            .is_ok();
        if let Some(log) = &self.access_log {
            log.close();
        }
        let _ = self.stop_rest.send(true);
        for task in self.rest {
            // The admin plane and embedded backend have nothing to drain
            // that matters once the data plane is done.
            task.abort();
        }
        self.fences.close();
        drained
    }
}

/// More than enough for Prometheus, a load balancer's health checks and a
/// few operators.
const ADMIN_MAX_CONNECTIONS: usize = 1024;

/// The etcd store's options from `config`. The settings every instance on
/// the prefix must share are the two that decide which fence a request
/// lands on and which token it carries.
fn etcd_options(config: &Config) -> Result<crate::store::EtcdOptions, StartError> {
    let etcd = &config.etcd;
    if etcd.endpoints.is_empty() {
        return Err(StartError::Etcd(
            "--etcd-endpoints is required (comma-separated http://host:port or https://host:port)"
                .into(),
        ));
    }
    for endpoint in &etcd.endpoints {
        // Shown with its user-info and query masked, as everywhere else.
        let shown = super::config_file::mask(endpoint);
        let uri: http::Uri = endpoint
            .parse()
            .map_err(|e| StartError::Etcd(format!("bad etcd endpoint {shown:?}: {e}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(StartError::Etcd(format!(
                "bad etcd endpoint {shown:?}: expected http://host:port or https://host:port"
            )));
        }
    }
    if !etcd.prefix.starts_with('/') || !etcd.prefix.ends_with('/') || !etcd.prefix.is_ascii() {
        return Err(StartError::Etcd(format!(
            "--etcd-prefix must be ASCII, start and end with '/': {:?}",
            etcd.prefix
        )));
    }
    let secure = etcd.endpoints.iter().any(|e| e.starts_with("https://"));
    if !secure && !etcd.tls.is_default() {
        return Err(StartError::Etcd(
            "--etcd-ca, --etcd-cert and --etcd-key need https:// endpoints".into(),
        ));
    }
    let tls = secure
        .then(|| ClientTls::load(etcd.tls.clone(), &[]))
        .transpose()
        .map_err(|e| StartError::Etcd(format!("TLS: {e}")))?;
    let password = etcd
        .password
        .read()
        .map_err(|e| StartError::Etcd(format!("password: {e}")))?;
    let credentials = match (&etcd.user, password) {
        (Some(user), Some(password)) => Some(Credentials {
            user: user.clone(),
            password,
        }),
        (None, None) => None,
        (Some(_), None) => {
            return Err(StartError::Etcd(
                "--etcd-user needs a password: --etcd-password-file or FENCEGATE_ETCD_PASSWORD"
                    .into(),
            ))
        }
        (None, Some(_)) => {
            return Err(StartError::Etcd(
                "a password is given but no --etcd-user".into(),
            ))
        }
    };
    Ok(crate::store::EtcdOptions {
        endpoints: etcd.endpoints.clone(),
        tls,
        credentials,
        prefix: etcd.prefix.clone(),
        lease_ttl: etcd.lease_ttl,
        instance: etcd.instance_name(),
        settings: serde_json::json!({
            "scope": config.scope.to_string(),
            "token_header": config.token_header.as_str(),
        }),
    })
}

/// Starts the embedded object store on a loopback port of its own, reached
/// through the same proxy path as any real backend.
async fn start_embedded(
    config: &Config,
    stopped: impl Future<Output = ()> + Send + 'static,
) -> Result<(Upstream, JoinHandle<()>), StartError> {
    let objects = match config.state {
        // The embedded backend is a demo backend: with shared fences too,
        // each instance has its own, on disk.
        StateKind::Disk | StateKind::Etcd => {
            ObjectStore::on_disk(&config.data_dir).map_err(|source| StartError::DataDir {
                path: config.data_dir.clone(),
                source,
            })?
        }
        StateKind::Memory => ObjectStore::in_memory(),
    };
    let listener = bind("embedded backend", SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = local_addr("embedded backend", &listener)?;
    let serve = axum::serve(listener, embedded::router(objects))
        .with_graceful_shutdown(stopped)
        .into_future();
    let task = tokio::spawn(async move {
        if let Err(error) = serve.await {
            tracing::error!(%error, "embedded backend stopped");
        }
    });
    let upstream = Upstream::from_addr(addr).map_err(StartError::Embedded)?;
    Ok((upstream, task))
}

/// Connections the kernel completes and queues while the gateway is at
/// `--max-connections` (capped by `net.core.somaxconn`). `TcpListener::bind`
/// asks for 128, which a burst of clients fills at once; nginx asks for 511.
const BACKLOG: u32 = 1024;

async fn bind(plane: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    let bound = (|| {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // As std's bind does: a restarted gateway can take its port back
        // while old connections linger in TIME_WAIT.
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(BACKLOG)
    })();
    bound.map_err(|source| StartError::Bind {
        plane,
        addr,
        source,
    })
}

fn local_addr(plane: &'static str, listener: &TcpListener) -> Result<SocketAddr, StartError> {
    listener.local_addr().map_err(|source| StartError::Bind {
        plane,
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source,
    })
}

async fn signalled(mut stopped: watch::Receiver<bool>) {
    // An error means the sender is gone: the gateway is being dropped, which
    // is a stop too.
    let _ = stopped.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found while checking what the config_file fuzz target covers: an
    /// etcd endpoint that is refused was shown whole, the password of its
    /// user-info with it, by `check-config` and at start.
    #[test]
    fn a_refused_etcd_endpoint_is_shown_masked() {
        for endpoint in [
            "ftp://root:etcd-pw-3@127.0.0.1:2379",
            "http://root:etcd-pw-3@h\u{1}:1",
        ] {
            let mut etcd = Config::default().etcd;
            etcd.endpoints = vec!["http://127.0.0.1:2379".into(), endpoint.into()];
            let config = Config {
                state: StateKind::Etcd,
                etcd,
                ..Config::default()
            };
            let Err(error) = etcd_options(&config) else {
                panic!("{endpoint} accepted");
            };
            let shown = error.to_string();
            assert!(!shown.contains("etcd-pw-3"), "{shown}");
            assert!(shown.contains("***@"), "{shown}");
        }
    }
}
