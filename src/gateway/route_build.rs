//! A route, built from its options: the checks that can fail on bad
//! configuration first (before the fence store is opened), then its proxy,
//! the store's signature, the chain and its probe, its fencing layer over
//! its fence namespace. At start and at each reload.
//!
//! A route's stages, in the order they happen, one type each:
//! 1. `RouteConfig` (`config.rs`): the `[[route]]` as loaded, a whole
//!    `Config` of options;
//! 2. [`RouteSpec`] (here, [`route_specs`]): one route to build, a
//!    `[[route]]` or the one route of a configuration without; what a
//!    reload compares;
//! 3. [`Prepared`] (here): what can fail on bad configuration (the
//!    upstream's TLS, the token issuer), made before the fence store is
//!    opened;
//! 4. [`BuiltRoute`] (here, [`build_route`]): its `RoutePlane`, its chain
//!    (for metrics) and its custody (for reloads);
//! 5. `RoutePlane` (`generations.rs`): the route as a generation serves it;
//! 6. `RouteConnection` (`data_plane.rs`): the route for one client
//!    connection, its proxy bound to that connection's forwarding headers.

use std::num::NonZeroUsize;
use std::sync::Arc;

use http::HeaderValue;

use super::azure_reading::AzureReading;
use super::config::{Anonymous, Config, RouteMatch, TableSource};
use super::custody::files::{self, UpstreamCredentials};
use super::custody::sign::UpstreamSigner;
use super::custody::{Custody, CustodyFiles, DialectOptions};
use super::error::StartError;
use super::generations::RoutePlane;
use super::metrics::{Metrics, RouteCounters};
use super::proxy::Proxy;
use super::routes::RouteTable;
use super::s3_hosts::S3Reading;
use super::tls;
use super::upstream::Upstream;
use super::version_head::{self, HeadThroughProxy, Probe};
use crate::chain::{Chain, Mode, Observer};
use crate::dialect::plain_operations::PlainDialect;
use crate::dialect::StoreKind;
use crate::fencing::{Enforce, FencingLayer};
use crate::Fences;

/// Where the start-up probe of `--conditional-writes webdav|http` writes when
/// `--conditional-probe` does not say.
pub(super) const DEFAULT_PROBE_PATH: &str = "/.fencegate-probe";

/// What credential custody re-reads on `SIGHUP`: the identities, and the
/// store's credentials with the file they come from.
#[derive(Debug, Clone)]
pub(super) struct CustodyReload {
    pub(super) custody: Arc<Custody>,
    pub(super) signer: Option<(Arc<UpstreamSigner>, TableSource)>,
}

/// Credential custody as `config` asks for it, its files read: the
/// client side and the store's credentials; `None` without custody.
pub(super) fn custody_from(
    config: &Config,
    allowed: Option<&Vec<String>>,
) -> Result<Option<(Arc<Custody>, UpstreamCredentials)>, StartError> {
    if config.s3_domain.is_some() && config.store != StoreKind::S3 {
        return Err(StartError::Custody("--s3-domain needs --store s3".into()));
    }
    let Some(source) = &config.upstream_credentials else {
        if config.identities.is_some() || config.anonymous_clients != Anonymous::Off {
            return Err(StartError::Custody(
                "--identities and --anonymous-clients need --upstream-credentials: the gateway signs every request to the store with them".into(),
            ));
        }
        return Ok(None);
    };
    if config.identities.is_none() && config.anonymous_clients == Anonymous::Off {
        return Err(StartError::Custody(
            "--upstream-credentials needs --identities or --anonymous-clients: without them anyone who reaches the gateway would write as the store's owner".into(),
        ));
    }
    if config.anonymous_clients == Anonymous::Write {
        tracing::warn!(
            "--anonymous-clients write: any client that reaches the gateway may write, signed with the store's credentials"
        );
    }
    let credentials =
        files::read_upstream(source).map_err(|e| StartError::Custody(e.to_string()))?;
    let path = source.path();
    let kind = match &credentials {
        UpstreamCredentials::AwsSigV4 { .. } => "aws-sigv4",
        UpstreamCredentials::AzureSharedKey { .. } => "azure-shared-key",
        UpstreamCredentials::Basic { .. } => "basic",
        UpstreamCredentials::Bearer { .. } => "bearer",
    };
    let expected: &[&str] = match config.store {
        StoreKind::S3 => &["aws-sigv4"],
        StoreKind::Azure => &["azure-shared-key"],
        StoreKind::Webdav | StoreKind::Http => &["basic", "bearer"],
    };
    if !expected.contains(&kind) {
        return Err(StartError::Custody(format!(
            "--store {} signs with kind = {} ({}), not {kind:?}",
            config.store,
            expected
                .iter()
                .map(|k| format!("{k:?}"))
                .collect::<Vec<_>>()
                .join(" or "),
            path.display()
        )));
    }
    let upstream = match (&config.upstream, config.store) {
        (Some(upstream), _) => upstream.to_string(),
        (None, StoreKind::Azure) => {
            return Err(StartError::Custody(
                "--store azure under custody needs --upstream: the store's blob endpoint (https://ACCOUNT.blob.core.windows.net, or http://azurite:10000/ACCOUNT)".into(),
            ))
        }
        (None, _) => String::new(),
    };
    let regions = match &credentials {
        UpstreamCredentials::AwsSigV4 { region, .. } => vec![region.clone()],
        _ => Vec::new(),
    };
    let mut must_sign = vec![config.token_header.clone()];
    if config.scope == crate::key::Scope::Header {
        must_sign.push(http::HeaderName::from_static("x-fencing-lock"));
    }
    if config.store == StoreKind::Azure {
        if let Some(name) = must_sign.iter().find(|n| !n.as_str().starts_with("x-ms-")) {
            tracing::warn!(
                "--store azure: a Shared Key signature covers only x-ms-* headers, so a SharedKey client's request that carries {name} is refused (SAS clients are not); name the token header x-ms-fencing-token with --token-header"
            );
        }
    }
    let custody = Custody::load(
        config.store,
        CustodyFiles {
            identities: config.identities.clone(),
            anonymous: config.anonymous_clients,
            allowed: allowed.cloned(),
        },
        DialectOptions {
            s3_domain: config.s3_domain.clone(),
            must_sign,
            regions,
            upstream,
        },
        &credentials,
    )
    .map_err(|e| StartError::Custody(e.to_string()))?;
    Ok(Some((Arc::new(custody), credentials)))
}

/// One route to build: the configuration's `[[route]]`, or the one route
/// of a configuration without (named `default`, in the default fence
/// namespace, taking every request).
#[derive(Debug)]
pub(super) struct RouteSpec {
    pub(super) name: String,
    pub(super) matches: RouteMatch,
    pub(super) namespace: String,
    pub(super) identities: Option<Vec<String>>,
    pub(super) options: Config,
}

pub(super) fn route_specs(config: &Config) -> Vec<RouteSpec> {
    if config.routes.is_empty() {
        return vec![RouteSpec {
            name: "default".into(),
            matches: RouteMatch::default(),
            namespace: String::new(),
            identities: None,
            options: config.clone(),
        }];
    }
    config
        .routes
        .iter()
        .map(|route| RouteSpec {
            name: route.name.clone(),
            matches: route.matches.clone(),
            namespace: route.fence_namespace.clone(),
            identities: route.identities.clone(),
            options: (*route.options).clone(),
        })
        .collect()
}

/// What shapes each fence namespace's keys, as recorded in the fence
/// store: its routes' scope, token header, flat keys, store and
/// `s3_domain`, which must agree, and their host patterns. An error says
/// which routes disagree.
pub(super) fn namespace_shapings(specs: &[RouteSpec]) -> Result<Vec<(String, String)>, String> {
    let mut namespaces: Vec<(String, serde_json::Value, Vec<String>, &str)> = Vec::new();
    for spec in specs {
        let o = &spec.options;
        let keys = serde_json::json!({
            "scope": o.scope.to_string(),
            "token_header": o.token_header.as_str(),
            "flat_keys": o.flat_keys,
            "store": o.store.to_string(),
            "s3_domain": o.s3_domain,
        });
        let host = spec.matches.host.clone().unwrap_or_else(|| "*".into());
        match namespaces
            .iter_mut()
            .find(|(name, ..)| *name == spec.namespace)
        {
            Some((name, known, hosts, first)) => {
                if *known != keys {
                    return Err(format!(
                        "routes {first:?} and {:?} share fence namespace {name:?} but key it differently ({known} and {keys})",
                        spec.name
                    ));
                }
                if !hosts.contains(&host) {
                    hosts.push(host);
                }
            }
            None => namespaces.push((spec.namespace.clone(), keys, vec![host], &spec.name)),
        }
    }
    Ok(namespaces
        .into_iter()
        .map(|(name, mut keys, mut hosts, _)| {
            hosts.sort();
            keys["hosts"] = serde_json::json!(hosts);
            (name, keys.to_string())
        })
        .collect())
}

/// Checks every namespace of `specs` against the fence store's records
/// (recording those it has none of): none keyed otherwise, and no route
/// taking, in another namespace, requests a recorded namespace's routes
/// took (a rename without `fence_namespace`, a first route in front of the
/// route-less gateway), which would leave its fences behind. Then records
/// which requests each namespace's routes take now, beside those they took
/// before (coverage only grows).
pub(super) async fn check_namespaces(
    specs: &[RouteSpec],
    fences: &Fences,
) -> Result<(), StartError> {
    let shapings = namespace_shapings(specs).map_err(StartError::Namespace)?;
    let mut recorded = Vec::new();
    for (name, matches) in fences.namespace_matches().await? {
        let matches: Vec<serde_json::Value> = serde_json::from_str(&matches).unwrap_or_default();
        for m in matches {
            let text = |key: &str| m.get(key).and_then(|v| v.as_str()).map(str::to_owned);
            recorded.push((
                name.clone(),
                RouteMatch {
                    host: text("host"),
                    path_prefix: text("path_prefix"),
                },
            ));
        }
    }
    if let Some(displaced) = displaced(specs, &recorded) {
        return Err(StartError::Namespace(format!(
            "{displaced} (as the fence store records): the fences raised there would be left behind"
        )));
    }
    for (name, shaping) in shapings {
        fences.check_namespace(&name, &shaping).await?;
        // What the namespace ever covered, not only what it covers now: a
        // space its routes left (a prefix moved) keeps its fences, which
        // no other namespace may take in a later step either.
        let mut matches: Vec<serde_json::Value> = recorded
            .iter()
            .filter(|(recorded_name, _)| *recorded_name == name)
            .map(|(_, m)| match_json(m))
            .collect();
        for spec in specs.iter().filter(|s| s.namespace == name) {
            let current = match_json(&spec.matches);
            if !matches.contains(&current) {
                matches.push(current);
            }
        }
        fences
            .record_matches(&name, &serde_json::Value::from(matches).to_string())
            .await?;
    }
    Ok(())
}

/// Whether `specs` would hand any part of what a namespace covered (each
/// `(namespace, match)` of `covered`: requests its routes took) to a
/// route of another namespace, or to one that does not fence: the sentence
/// that says so, naming both. By coverage, not equality (SPEC "What a
/// namespace covers is recorded and guarded"): the route that now wins
/// the space itself (a rename, a catch-all, a prefix's trailing slash), and
/// a route that wins any part of it (a longer prefix inside it, a host in
/// front of it whatever its own prefix), are both found.
pub(super) fn displaced(specs: &[RouteSpec], covered: &[(String, RouteMatch)]) -> Option<String> {
    let matches: Vec<RouteMatch> = specs.iter().map(|spec| spec.matches.clone()).collect();
    let table = RouteTable::new(&matches);
    let other = |spec: &RouteSpec, namespace: &str| {
        spec.namespace != namespace || spec.options.enforce == Enforce::Off
    };
    let taker = |request: Option<(Option<String>, String)>| {
        let (host, path) = request?;
        table
            .owner(host.as_deref(), &path)
            .and_then(|i| specs.get(i))
    };
    for (namespace, space) in covered {
        // The space's own request: who takes it now?
        let own = taker(shared_request(space, &RouteMatch::default()))
            .filter(|spec| other(spec, namespace));
        // The first request of the space each route also matches: who
        // takes it now? Another namespace's route there is new unless its
        // own namespace already covered exactly its match (a carve-out
        // that was there).
        let part = specs
            .iter()
            .filter_map(|spec| taker(shared_request(space, &spec.matches)))
            .find(|spec| {
                other(spec, namespace)
                    && !covered
                        .iter()
                        .any(|(name, known)| *name == spec.namespace && *known == spec.matches)
            });
        if let Some(spec) = own.or(part) {
            return Some(format!(
                "route {:?} would take requests that fence namespace {namespace:?} covered ({}) into {}",
                spec.name,
                describe(space),
                if spec.options.enforce == Enforce::Off {
                    "a route that does not fence".to_owned()
                } else {
                    format!("namespace {:?} (set fence_namespace = {namespace:?} to keep them)", spec.namespace)
                }
            ));
        }
    }
    None
}

/// The first request both `a` and `b` match, if any: the narrower host
/// pattern of the two (a name for a `*.` one), the longer path prefix. A
/// route wins that request wherever it wins any request both match: its
/// host and prefix are as short as theirs allow.
fn shared_request(a: &RouteMatch, b: &RouteMatch) -> Option<(Option<String>, String)> {
    let host = match (a.host.as_deref(), b.host.as_deref()) {
        (None, None) => None,
        (Some(host), None) | (None, Some(host)) => Some(host),
        (Some(x), Some(y)) if host_inside(x, y) => Some(x),
        (Some(x), Some(y)) if host_inside(y, x) => Some(y),
        (Some(_), Some(_)) => return None,
    };
    let path = match (a.path_prefix.as_deref(), b.path_prefix.as_deref()) {
        (None, None) => "/",
        (Some(prefix), None) | (None, Some(prefix)) => prefix,
        (Some(x), Some(y)) if x.starts_with(y) => x,
        (Some(x), Some(y)) if y.starts_with(x) => y,
        (Some(_), Some(_)) => return None,
    };
    let host = host.map(|host| match host.strip_prefix('*') {
        Some(suffix) => format!("fencegate-sample{suffix}"),
        None => host.to_owned(),
    });
    Some((host, path.to_owned()))
}

/// Whether every host the pattern `inner` matches, `outer` matches.
fn host_inside(inner: &str, outer: &str) -> bool {
    match (inner.strip_prefix('*'), outer.strip_prefix('*')) {
        (None, None) => inner == outer,
        (None, Some(suffix)) => inner.len() > suffix.len() && inner.ends_with(suffix),
        (Some(inner), Some(suffix)) => inner.ends_with(suffix),
        (Some(_), None) => false,
    }
}

/// `space` for a message.
fn describe(space: &RouteMatch) -> String {
    match (&space.host, &space.path_prefix) {
        (None, None) => "every request".to_owned(),
        (Some(host), None) => format!("host {host}"),
        (None, Some(prefix)) => format!("prefix {prefix}"),
        (Some(host), Some(prefix)) => format!("host {host}, prefix {prefix}"),
    }
}

fn match_json(matches: &RouteMatch) -> serde_json::Value {
    serde_json::json!({ "host": matches.host, "path_prefix": matches.path_prefix })
}

/// With `[[route]]` tables, the counters of `spec`'s requests; none for the
/// one route of a configuration without (its requests are the gateway's).
pub(super) fn counters_for(
    config: &Config,
    spec: &RouteSpec,
    metrics: &Metrics,
) -> Option<RouteCounters> {
    (!config.routes.is_empty()).then(|| metrics.route_counters(&spec.name))
}

/// The token issuers of every route, one per URL.
#[derive(Debug, Default)]
pub(super) struct Issuers(Vec<(String, Arc<crate::issuer::UrlIssuer>)>);

impl Issuers {
    fn get(
        &mut self,
        config: &Config,
    ) -> Result<Option<Arc<crate::issuer::UrlIssuer>>, StartError> {
        let Some(url) = config.token_issuer.as_deref() else {
            return Ok(None);
        };
        if let Some((_, issuer)) = self.0.iter().find(|(known, _)| known == url) {
            return Ok(Some(Arc::clone(issuer)));
        }
        let access = crate::issuer::IssuerAccess {
            tls: config.token_issuer_tls.clone(),
            password: config
                .token_issuer_password
                .read()
                .map_err(|e| crate::issuer::IssuerUrlError::new(url, e.to_string()))?,
        };
        let issuer = Arc::new(crate::issuer::from_url_with(url, &access)?);
        self.0.push((url.to_owned(), Arc::clone(&issuer)));
        Ok(Some(issuer))
    }

    pub(super) fn first(&self) -> Option<Arc<crate::issuer::UrlIssuer>> {
        self.0.first().map(|(_, issuer)| Arc::clone(issuer))
    }
}

/// What a route needs that can fail on bad configuration, made before the
/// fence store is opened.
pub(super) struct Prepared {
    upstream_tls: Option<tokio_rustls::TlsConnector>,
    issuer: Option<Arc<crate::issuer::UrlIssuer>>,
    custody: Option<(Arc<Custody>, UpstreamCredentials)>,
}

impl Prepared {
    pub(super) fn of(spec: &RouteSpec, issuers: &mut Issuers) -> Result<Prepared, StartError> {
        let config = &spec.options;
        let upstream_tls = match &config.upstream {
            Some(upstream) if upstream.is_tls() => {
                Some(tls::upstream_connector(config.upstream_ca.as_deref())?)
            }
            _ => None,
        };
        Ok(Prepared {
            upstream_tls,
            issuer: issuers.get(config)?,
            custody: custody_from(config, spec.identities.as_ref())?,
        })
    }
}

/// What `--conditional-writes` cannot work with in `config`.
pub(super) fn check_chain(config: &Config) -> Result<(), StartError> {
    if config.conditional_writes == Mode::Webdav
        && config.upstream.as_ref().is_some_and(Upstream::has_base)
    {
        // The `If` header names the object by the path the client sent;
        // under a base path the store would see another one, and a
        // tagged list naming another resource is no condition at all.
        return Err(StartError::Chain(
            "webdav needs an upstream without a base path".into(),
        ));
    }
    Ok(())
}

/// One route, built: what the data plane serves it with, its chain (for
/// metrics) and its custody (for reloads).
#[derive(Debug, Clone)]
pub(super) struct BuiltRoute {
    pub(super) plane: RoutePlane,
    pub(super) chain: Option<Arc<Chain>>,
    pub(super) custody: Option<CustodyReload>,
}

pub(super) async fn build_route(
    spec: &RouteSpec,
    prepared: Prepared,
    fences: &Fences,
    embedded: Option<&Upstream>,
    counters: Option<RouteCounters>,
) -> Result<BuiltRoute, StartError> {
    let config = &spec.options;
    let upstream = match (&config.upstream, embedded) {
        (Some(upstream), _) => upstream.clone(),
        (None, Some(embedded)) => embedded.clone(),
        (None, None) => return Err(StartError::Embedded("not started".into())),
    };
    check_chain(config)?;
    let mut proxy = Proxy::new(
        upstream.clone(),
        config.upstream_timeout,
        config.upstream_idle_timeout,
        prepared.upstream_tls,
        // The chain reads the ETag of answers from their map.
        config.conditional_writes != Mode::Off,
    );
    let (custody, signer) = match prepared.custody {
        Some((custody, credentials)) => {
            let host = HeaderValue::from_str(upstream.authority().as_str())
                .map_err(|e| StartError::Custody(format!("the upstream's authority: {e}")))?;
            let signer = Arc::new(UpstreamSigner::new(credentials, host));
            proxy = proxy.signed_by(Arc::clone(&signer));
            (Some(custody), Some(signer))
        }
        None => (None, None),
    };
    let probe_path = config.conditional_probe.clone().or_else(|| {
        matches!(config.conditional_writes, Mode::Webdav | Mode::Http)
            .then(|| DEFAULT_PROBE_PATH.to_owned())
    });
    if let (Some(path), true) = (probe_path, config.conditional_writes != Mode::Off) {
        match version_head::probe(&proxy, config.conditional_writes, &path).await {
            Probe::Honoured => {}
            Probe::Ignored(status) => {
                return Err(StartError::Chain(format!(
                    "the store applied the probe's PUT of {path} ({status}) although its condition could not match: it ignores conditions, and chaining in front of it would protect nothing"
                )));
            }
            Probe::Inconclusive(why) => tracing::warn!(
                route = spec.name.as_str(),
                "--conditional-writes: {why}; cannot tell whether the store checks conditions (--conditional-probe names a path the gateway may write)"
            ),
        }
    }
    let chain = (config.conditional_writes != Mode::Off).then(|| {
        let entries = NonZeroUsize::new(config.chain_cache_entries).unwrap_or(NonZeroUsize::MIN);
        let chain = Chain::new(config.conditional_writes, entries);
        // Under custody the gateway signs its own HEAD: every mode can
        // observe versions itself.
        let observer = config.chain_observe.unwrap_or_else(|| {
            if signer.is_some() {
                Observer::GatewayHead
            } else {
                config.conditional_writes.default_observer()
            }
        });
        Arc::new(match observer {
            Observer::GatewayHead => chain.with_reader(Arc::new(HeadThroughProxy {
                proxy: proxy.clone(),
                mode: config.conditional_writes,
            })),
            Observer::ClientHead => chain,
        })
    });
    let mut fencing = FencingLayer::new(fences.namespace(&spec.namespace))
        .token_header(config.token_header.clone())
        .scope(config.scope)
        .allow_unfenced_writes(config.allow_unfenced_writes)
        .enforce(config.enforce)
        .flat_keys(config.flat_keys);
    if let Some(issuer) = &prepared.issuer {
        fencing = fencing.token_issuer(issuer.clone());
    }
    if let Some(chain) = &chain {
        fencing = fencing.chained_writes(Arc::clone(chain));
    }
    let reload = custody.as_ref().map(|custody| CustodyReload {
        custody: Arc::clone(custody),
        signer: signer.clone().zip(config.upstream_credentials.clone()),
    });
    Ok(BuiltRoute {
        plane: RoutePlane {
            name: spec.name.as_str().into(),
            fencing,
            proxy,
            answers: config.store.answers(),
            // Custody reads the bucket from the host itself (and forwards
            // path-style).
            s3_reading: (config.store == StoreKind::S3 && custody.is_none())
                .then(|| S3Reading::new(config.s3_domain.as_deref(), config.scope.has_host())),
            plain_dialect: match (config.store, &custody) {
                (StoreKind::Webdav, None) => Some(PlainDialect::Webdav),
                (StoreKind::Http, None) => Some(PlainDialect::Http),
                _ => None,
            },
            // Custody reads every request by the table itself.
            azure_reading: (config.store == StoreKind::Azure && custody.is_none())
                .then(|| AzureReading::new(&upstream)),
            custody,
            counters,
        },
        chain,
        custody: reload,
    })
}
