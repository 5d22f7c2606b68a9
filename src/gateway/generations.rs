//! Configuration generations: the routes new requests are served with,
//! swapped whole by a reload (`SIGHUP`), and [`RoutePlane`], one route as
//! the data plane serves it.
//!
//! A connection takes the generation in force when it is accepted and
//! builds its routes once. Each request compares the connection's
//! generation with the current number (one load, no lock); a request that
//! arrives after a reload is served under the new generation, routes built
//! for it alone, and on HTTP/1.x its connection is closed after the answer
//! so that the client's next connection is built under the new one. A
//! request that arrived before a reload finishes under the routes it
//! started with: each holds its generation until it ends, and an old
//! generation is dropped with its last request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use super::azure_reading::AzureReading;
use super::custody::Custody;
use super::metrics::RouteCounters;
use super::proxy::Proxy;
use super::routes::RouteTable;
use super::s3_hosts::S3Reading;
use crate::dialect::answer::AnswerStyle;
use crate::dialect::plain_operations::PlainDialect;
use crate::fencing::FencingLayer;

/// One route as the data plane serves it: its fencing layer, its proxy
/// (upstream, pool, signer), the shape of its answers, its custody.
#[derive(Debug, Clone)]
pub(crate) struct RoutePlane {
    /// Its name: the access log's `route`, the metrics' label.
    pub(crate) name: Arc<str>,
    pub(crate) fencing: FencingLayer,
    pub(crate) proxy: Proxy,
    /// The shape of the gateway's own answers (its `store`).
    pub(crate) answers: AnswerStyle,
    /// Credential custody: every request authenticated and authorised
    /// before it is fenced.
    pub(crate) custody: Option<Arc<Custody>>,
    /// An S3 route without custody: how its requests' hosts name buckets.
    pub(crate) s3_reading: Option<S3Reading>,
    /// A `webdav` or `http` route without custody: the table its writes
    /// must be a row of.
    pub(crate) plain_dialect: Option<PlainDialect>,
    /// An Azure route without custody: which writes the table reads.
    pub(crate) azure_reading: Option<AzureReading>,
    /// With `[[route]]` tables: its requests counted by outcome.
    pub(crate) counters: Option<RouteCounters>,
}

/// One configuration's routes.
#[derive(Debug)]
pub(crate) struct Generation {
    /// 1 at start, one more for each reload that took.
    pub(crate) number: u64,
    pub(crate) routes: Arc<[RoutePlane]>,
    pub(crate) table: RouteTable,
    /// The shape of the answers made before a route is known (an engine
    /// refusal): the routes' if they all have one, else JSON.
    pub(crate) answers: AnswerStyle,
}

impl Generation {
    pub(crate) fn new(number: u64, routes: Vec<RoutePlane>, table: RouteTable) -> Self {
        let answers = match routes.first() {
            Some(first) if routes.iter().all(|r| r.answers == first.answers) => first.answers,
            _ => AnswerStyle::Json,
        };
        Generation {
            number,
            routes: routes.into(),
            table,
            answers,
        }
    }
}

/// The generation in force, and its number for a lock-free check.
#[derive(Debug)]
pub(crate) struct Generations {
    number: AtomicU64,
    current: RwLock<Arc<Generation>>,
}

impl Generations {
    pub(crate) fn new(first: Generation) -> Arc<Self> {
        Arc::new(Generations {
            number: AtomicU64::new(first.number),
            current: RwLock::new(Arc::new(first)),
        })
    }

    /// The number of the generation in force.
    pub(crate) fn number(&self) -> u64 {
        self.number.load(Ordering::Acquire)
    }

    /// The generation in force.
    pub(crate) fn current(&self) -> Arc<Generation> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts `next` in force for new requests (its number is the next one);
    /// returns its number.
    pub(crate) fn replace(&self, routes: Vec<RoutePlane>, table: RouteTable) -> u64 {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        let number = current.number + 1;
        *current = Arc::new(Generation::new(number, routes, table));
        // After the swap: a request that sees the new number finds the new
        // generation.
        self.number.store(number, Ordering::Release);
        number
    }
}
