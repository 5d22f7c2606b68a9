//! What the admin plane's handlers share: [`Admin`], the state of every
//! route, and [`Readiness`], what `GET /readyz` answers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::super::metrics::Metrics;
use super::super::reload::ConfigReloader;
use crate::key::Scope;
use crate::Fences;

#[derive(Clone)]
pub(super) struct Admin {
    /// The default namespace's view; `?namespace=NAME` picks another.
    pub(super) fences: Fences,
    /// The configuration in force: its generation, and what `GET /config`
    /// shows.
    pub(super) config: ConfigReloader,
    pub(super) metrics: Metrics,
    pub(super) readiness: Readiness,
    pub(super) scope: Scope,
    pub(super) writes_enabled: bool,
}

/// Whether the gateway can admit requests (`GET /readyz`): it is not
/// draining, and its fence store can be written.
#[derive(Debug, Clone)]
pub(crate) struct Readiness {
    pub(super) fences: Fences,
    draining: Arc<AtomicBool>,
    /// With shared fences, this instance's name, in every answer.
    pub(super) instance: Option<Arc<str>>,
}

impl Readiness {
    /// Ready while the fence store of `fences` is healthy, until
    /// [`Readiness::set_draining`].
    pub(crate) fn new(fences: Fences, instance: Option<String>) -> Self {
        Readiness {
            fences,
            draining: Arc::new(AtomicBool::new(false)),
            instance: instance.map(Into::into),
        }
    }

    /// The gateway is shutting down: not ready from now on.
    pub(crate) fn set_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// `Ok` when ready, else why not.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.draining.load(Ordering::Acquire) {
            return Err("draining: the gateway is shutting down".into());
        }
        self.fences
            .store_health()
            .map_err(|e| format!("fence store: {e}"))
    }
}

impl Admin {
    /// The fences of the namespace `?namespace=NAME` of `query` names
    /// (the default without it), and the query without that parameter.
    /// `None` (answer [`bad_namespace`](super::answers::bad_namespace)) if the name is not one.
    pub(super) fn namespaced(&self, query: Option<&str>) -> Option<(Fences, Option<String>)> {
        let Some(query) = query else {
            return Some((self.fences.clone(), None));
        };
        let mut namespace = None;
        let mut rest = Vec::new();
        for pair in query.split('&') {
            match pair.strip_prefix("namespace=") {
                Some(name) => namespace = Some(name.to_owned()),
                None => rest.push(pair),
            }
        }
        let fences = match namespace {
            None => self.fences.clone(),
            Some(name) => {
                let valid = name.len() <= 64
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
                if !valid {
                    return None;
                }
                self.fences.namespace(&name)
            }
        };
        let rest = rest.join("&");
        Some((fences, (!rest.is_empty()).then_some(rest)))
    }
}

impl Admin {
    /// The key scope of `fences`' namespace: its route's, else the
    /// gateway's.
    pub(super) fn scope_of(&self, fences: &Fences) -> Scope {
        self.config
            .scope_of(fences.namespace_name())
            .unwrap_or(self.scope)
    }
}
