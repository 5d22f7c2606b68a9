//! Reloading the configuration (`SIGHUP`): a new generation of routes for
//! new requests, built beside the one in force and swapped in whole, or
//! none at all.
//!
//! A reload never changes what an existing fence means. A route whose
//! fence namespace exists would key it otherwise (another scope, token
//! header, flat keys, store, `s3_domain` or host pattern), or a route that
//! takes the requests an existing route took but in another namespace (a
//! rename without `fence_namespace`), makes the whole reload fail: the old
//! configuration stays, and one line says why. A route whose options did
//! not change is kept as it is (its upstream connections, its chain's
//! known versions), its custody tables read again; any other is built
//! anew. Options of the gateway itself (listeners, TLS files, state, etcd,
//! client limits, the access log) take effect at the next start: a reload
//! that changes one says so and applies the routes.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::config::{Config, RouteMatch};
use super::custody::files::{self, UpstreamCredentials};
use super::custody::fingerprint::Fingerprint;
use super::custody::identities::Identities;
use super::custody::sign::UpstreamSigner;
use super::custody::Custody;
use super::error::StartError;
use super::generations::Generations;
use super::metrics::{Chains, Metrics};
use super::route_build::{
    self, build_route, displaced, namespace_shapings, BuiltRoute, Issuers, Prepared, RouteSpec,
};
use super::routes::RouteTable;
use super::upstream::Upstream;
use crate::fencing::Enforce;
use crate::Fences;

/// Why a reload was refused; the configuration in force stays.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// A route of the new configuration cannot be built.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The new configuration would change what existing fences mean.
    #[error("{0}")]
    Meaning(String),
}

/// What a reload needs, shared with the signal handler that asks for it.
#[derive(Debug, Clone)]
pub struct ConfigReloader {
    shared: Arc<ReloaderShared>,
}

#[derive(Debug)]
struct ReloaderShared {
    generations: Arc<Generations>,
    fences: Fences,
    embedded: Option<Upstream>,
    issuers: Mutex<Issuers>,
    chains: Chains,
    /// For the request counters of routes built by a reload.
    metrics: Metrics,
    /// The effective configuration as the admin plane's `GET /config`
    /// shows it (set by whoever loaded it).
    shown: RwLock<Option<serde_json::Value>>,
    /// One reload at a time; the configuration in force.
    current: tokio::sync::Mutex<InForce>,
}

/// The configuration in force, its routes' specs and their built parts
/// (in the same order).
#[derive(Debug)]
pub(super) struct InForce {
    pub(super) config: Config,
    pub(super) specs: Vec<RouteSpec>,
    pub(super) built: Vec<BuiltRoute>,
}

impl ConfigReloader {
    pub(super) fn new(
        generations: Arc<Generations>,
        fences: Fences,
        embedded: Option<Upstream>,
        issuers: Issuers,
        chains: Chains,
        metrics: Metrics,
        in_force: InForce,
    ) -> Self {
        ConfigReloader {
            shared: Arc::new(ReloaderShared {
                generations,
                fences,
                embedded,
                issuers: Mutex::new(issuers),
                chains,
                metrics,
                shown: RwLock::new(None),
                current: tokio::sync::Mutex::new(in_force),
            }),
        }
    }

    /// The number of the generation in force (1 at start).
    pub fn generation(&self) -> u64 {
        self.shared.generations.number()
    }

    /// The key scope of fence namespace `name` in the routes in force, if
    /// a route uses it (admin writes check their keys against it).
    pub(crate) fn scope_of(&self, name: &str) -> Option<crate::key::Scope> {
        self.shared
            .generations
            .current()
            .routes
            .iter()
            .find(|route| route.fencing.fences().namespace_name() == name)
            .map(|route| route.fencing.key_scope())
    }

    /// Sets what the admin plane's `GET /config` shows: the effective
    /// configuration, secrets masked
    /// ([`Effective::to_json`](super::config_file::Effective::to_json)).
    pub fn show(&self, effective: serde_json::Value) {
        *self
            .shared
            .shown
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(effective);
    }

    pub(crate) fn shown(&self) -> Option<serde_json::Value> {
        self.shared
            .shown
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `config` in force for new requests; requests in flight finish
    /// under the routes they started with. On an error nothing changed.
    /// Returns the new generation's number.
    pub async fn reload(&self, config: Config) -> Result<u64, ReloadError> {
        let shared = &self.shared;
        let mut in_force = shared.current.lock().await;
        for changed in gateway_changes(&in_force.config, &config) {
            tracing::warn!(
                "{changed} changed in the configuration: it takes effect at the next start"
            );
        }
        let specs = route_build::route_specs(&config);
        check_meaning(&in_force.specs, &specs)?;
        if shared.embedded.is_none() && specs.iter().any(|s| s.options.upstream.is_none()) {
            return Err(ReloadError::Meaning(
                "a route without an upstream needs the embedded backend, which this gateway did not start: restart it".into(),
            ));
        }
        let mut built = Vec::with_capacity(specs.len());
        // Kept routes' custody tables, read now and put in force only once
        // every route is built: a reload takes whole or not at all.
        let mut rereads = Vec::new();
        for spec in &specs {
            let same = in_force
                .specs
                .iter()
                .zip(&in_force.built)
                .find(|(old, _)| same_route(old, spec));
            match same {
                Some((_, kept)) => {
                    if let Some(reread) = reread_custody(spec, kept)? {
                        rereads.push(reread);
                    }
                    built.push(kept.clone());
                }
                None => {
                    let prepared = {
                        let mut issuers = shared
                            .issuers
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner);
                        Prepared::of(spec, &mut issuers)?
                    };
                    let embedded = shared.embedded.as_ref();
                    let counters = route_build::counters_for(&config, spec, &shared.metrics);
                    built.push(
                        build_route(spec, prepared, &shared.fences, embedded, counters).await?,
                    );
                }
            }
        }
        route_build::check_namespaces(&specs, &shared.fences)
            .await
            .map_err(|e| ReloadError::Meaning(e.to_string()))?;
        for reread in rereads {
            reread.apply("SIGHUP");
        }
        let table = RouteTable::new(&specs.iter().map(|s| s.matches.clone()).collect::<Vec<_>>());
        let planes = built.iter().map(|b| b.plane.clone()).collect();
        let number = shared.generations.replace(planes, table);
        *shared
            .chains
            .write()
            .unwrap_or_else(PoisonError::into_inner) =
            built.iter().filter_map(|b| b.chain.clone()).collect();
        *in_force = InForce {
            config,
            specs,
            built,
        };
        Ok(number)
    }

    /// Watches the credential files of every route in force (identities,
    /// the store's credentials, the secret files they name): every
    /// `every`, reads them and puts in force what changed, without a new
    /// generation. A change is taken once two reads in a row find the same
    /// content, so a file caught half-written is never put in force; a
    /// file that does not load keeps what is in force and is logged once.
    /// Runs until dropped (the binary aborts it at shutdown).
    pub async fn watch_credential_files(self, every: std::time::Duration) {
        let mut watch = Watch::default();
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            self.look_at_credential_files(&mut watch).await;
        }
    }

    async fn look_at_credential_files(&self, watch: &mut Watch) {
        let in_force = self.shared.current.lock().await;
        let mut print = Fingerprint::new();
        let mut changes = Vec::new();
        for (spec, built) in in_force.specs.iter().zip(&in_force.built) {
            match reread_custody(spec, built) {
                Ok(None) => {}
                Ok(Some(reread)) => {
                    reread.fingerprint(&mut print);
                    changes.extend(reread.changes());
                }
                Err(error) => {
                    let error = error.to_string();
                    if watch.error.as_ref() != Some(&error) {
                        tracing::warn!(
                            "the credential files do not load, those in force stay: {error}"
                        );
                        watch.error = Some(error);
                    }
                    watch.seen = None;
                    return;
                }
            }
        }
        if watch.error.take().is_some() {
            tracing::info!("the credential files load again");
        }
        let seen = Some(print.finish());
        // A file being written between two looks reads otherwise at each.
        if watch.seen == seen {
            for change in changes {
                change.apply("changed on disk");
            }
        }
        watch.seen = seen;
    }
}

/// A kept route's custody tables, read again, to be put in force: its
/// identities and the store's credentials (`None`: left as they are).
struct Reread {
    route: String,
    custody: Arc<Custody>,
    identities: Option<Identities>,
    signer: Option<(Arc<UpstreamSigner>, UpstreamCredentials)>,
}

impl Reread {
    /// What the files hold now, as one digest (the route's name in it).
    fn fingerprint(&self, print: &mut Fingerprint) {
        print
            .field(&self.route)
            .optional(self.identities.as_ref().map(Identities::fingerprint))
            .optional(self.signer.as_ref().map(|(_, c)| c.fingerprint()));
    }

    /// Only the tables whose content differs from those in force; `None`
    /// when neither does.
    fn changes(mut self) -> Option<Reread> {
        if self
            .identities
            .as_ref()
            .is_some_and(|new| new.fingerprint() == self.custody.fingerprint())
        {
            self.identities = None;
        }
        if self
            .signer
            .as_ref()
            .is_some_and(|(signer, new)| signer.fingerprint() == new.fingerprint())
        {
            self.signer = None;
        }
        (self.identities.is_some() || self.signer.is_some()).then_some(self)
    }

    /// Puts the tables in force; `why` goes in the log line.
    fn apply(self, why: &'static str) {
        let route = self.route.as_str();
        if let Some(identities) = self.identities {
            self.custody.replace(identities);
            tracing::info!(route, why, "identities reloaded");
        }
        if let Some((signer, credentials)) = self.signer {
            self.custody.rekey(&credentials);
            signer.replace(credentials);
            tracing::info!(route, why, "upstream credentials reloaded");
        }
    }
}

/// What the watcher of the credential files saw at its last look.
#[derive(Debug, Default)]
struct Watch {
    /// The digest of every route's tables as last read, when they read;
    /// a change is put in force once two looks in a row read it alike.
    seen: Option<[u8; 32]>,
    /// The last error logged, so that a file that stays broken is logged
    /// once, not at every look.
    error: Option<String>,
}

/// Reads a kept route's custody tables again: its identities and the
/// store's credentials.
fn reread_custody(spec: &RouteSpec, kept: &BuiltRoute) -> Result<Option<Reread>, ReloadError> {
    let Some(reload) = &kept.custody else {
        return Ok(None);
    };
    let identities = reload.custody.read_again().map_err(|e| {
        ReloadError::Meaning(format!(
            "cannot reload the identities of route {:?}: {e}",
            spec.name
        ))
    })?;
    let signer = match &reload.signer {
        Some((signer, source)) => {
            let credentials = files::read_upstream(source).map_err(|e| {
                ReloadError::Meaning(format!(
                    "cannot reload the upstream credentials of route {:?}: {e}",
                    spec.name
                ))
            })?;
            Some((Arc::clone(signer), credentials))
        }
        None => None,
    };
    Ok(Some(Reread {
        route: spec.name.clone(),
        custody: Arc::clone(&reload.custody),
        identities: Some(identities),
        signer,
    }))
}

/// Whether `new` is `old` unchanged: the same route, built the same way.
fn same_route(old: &RouteSpec, new: &RouteSpec) -> bool {
    old.name == new.name
        && old.matches == new.matches
        && old.namespace == new.namespace
        && old.identities == new.identities
        && format!("{:?}", route_options(&old.options))
            == format!("{:?}", route_options(&new.options))
}

/// What shapes a route's path through the gateway, for comparison.
fn route_options(config: &Config) -> impl std::fmt::Debug + '_ {
    (
        (
            &config.upstream,
            &config.token_header,
            config.scope,
            config.allow_unfenced_writes,
            config.enforce,
            config.store,
            &config.upstream_credentials,
            &config.identities,
            config.anonymous_clients,
            &config.s3_domain,
            config.flat_keys,
        ),
        (
            config.conditional_writes,
            config.chain_cache_entries,
            config.chain_observe,
            &config.conditional_probe,
            config.upstream_timeout,
            config.upstream_idle_timeout,
            &config.upstream_ca,
            &config.token_issuer,
            &config.token_issuer_tls,
            &config.token_issuer_password,
        ),
    )
}

/// A reload may not change what an existing fence means.
fn check_meaning(old: &[RouteSpec], new: &[RouteSpec]) -> Result<(), ReloadError> {
    // One rule with the start's (`route_build`): each namespace's shaping,
    // its routes' host patterns together, compared namespace by namespace.
    let before = namespace_shapings(old).map_err(ReloadError::Meaning)?;
    let after = namespace_shapings(new).map_err(ReloadError::Meaning)?;
    for (namespace, shaping) in &after {
        if let Some((_, was)) = before.iter().find(|(name, _)| name == namespace) {
            if was != shaping {
                return Err(ReloadError::Meaning(format!(
                    "the routes would key fence namespace {namespace:?} with {shaping} instead of {was}: its fences would mean something else (a new namespace, or a restart with the old settings, keeps them meaningful)"
                )));
            }
        }
    }
    let covered: Vec<(String, RouteMatch)> = old
        .iter()
        .filter(|spec| spec.options.enforce != Enforce::Off)
        .map(|spec| (spec.namespace.clone(), spec.matches.clone()))
        .collect();
    match displaced(new, &covered) {
        Some(displaced) => Err(ReloadError::Meaning(format!(
            "{displaced}: the fences raised there would be left behind"
        ))),
        None => Ok(()),
    }
}

/// The gateway-level options that differ between `old` and `new`.
fn gateway_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    let mut check = |name: &'static str, differs: bool| {
        if differs {
            changed.push(name);
        }
    };
    check("listen", old.listen != new.listen);
    check("admin_listen", old.admin_listen != new.admin_listen);
    check("data_dir", old.data_dir != new.data_dir);
    check("state", old.state != new.state);
    check("etcd", old.etcd != new.etcd);
    check("tls_cert/tls_key", old.tls != new.tls);
    check("client limits", old.client != new.client);
    check("access_log", old.access_log != new.access_log);
    check(
        "shutdown_timeout",
        old.shutdown_timeout != new.shutdown_timeout,
    );
    check(
        "admin_token_file",
        old.admin_token_file != new.admin_token_file,
    );
    changed
}
