//! A limit on the new fences one client may make: so that nobody fills the
//! table (each new key is a fence kept for good) by writing to many keys,
//! on purpose or by mistake.
//!
//! A token bucket per client: the identity it authenticated as under
//! credential custody, else its IP address (every port of one host is one
//! client). A request whose admission would make `n` new fences takes `n`
//! from its client's bucket, or is refused whole ([`AdmitError::Limited`](super::AdmitError::Limited),
//! 429 with `Retry-After`) and makes none. Requests on keys that already
//! have a fence never count, so a lock holder writing its own objects is
//! never slowed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Buckets kept before the full ones (clients idle long enough to have
/// their whole burst back) are dropped: they hold nothing a new bucket
/// would not.
const BUCKETS_BEFORE_PRUNING: usize = 4096;

/// The limit: `rate` new fences per second per client, up to `burst` at
/// once.
///
/// ```
/// use fencegate::fences::NewFenceLimit;
/// let limit = NewFenceLimit::new(10.0, 1000);
/// assert!(limit.take(Some("billing"), None, 1000).is_ok());
/// assert!(limit.take(Some("billing"), None, 1).is_err());
/// assert!(limit.take(Some("reports"), None, 1).is_ok());
/// ```
#[derive(Debug)]
pub struct NewFenceLimit {
    rate: f64,
    burst: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Refused: the client made its new fences too fast.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{client} makes new fences faster than {rate}/s (at most {burst} at once): {wanted} more now; retry after {} s", retry_after.as_secs())]
pub struct Limited {
    /// Who (an identity, or an IP address).
    pub client: String,
    /// New fences the request would make.
    pub wanted: u32,
    /// The limit, per second.
    pub rate: String,
    /// At most this many at once.
    pub burst: u32,
    /// When the bucket will hold enough (never sooner than 1 s).
    pub retry_after: Duration,
}

impl NewFenceLimit {
    /// `rate` new fences per second per client (more than 0), `burst` at
    /// once (at least 1).
    pub fn new(rate: f64, burst: u32) -> Self {
        NewFenceLimit {
            rate: rate.max(f64::MIN_POSITIVE),
            burst: burst.max(1),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes `wanted` new fences from the bucket of the client named by
    /// `identity`, else by `client`'s IP address.
    pub fn take(
        &self,
        identity: Option<&str>,
        client: Option<SocketAddr>,
        wanted: u32,
    ) -> Result<(), Limited> {
        if wanted == 0 {
            return Ok(());
        }
        let who = match (identity, client) {
            (Some(identity), _) => identity.to_owned(),
            (None, Some(client)) => client.ip().to_string(),
            (None, None) => "-".to_owned(),
        };
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= BUCKETS_BEFORE_PRUNING && !buckets.contains_key(&who) {
            let (rate, burst) = (self.rate, f64::from(self.burst));
            buckets.retain(|_, bucket| bucket.refilled(now, rate, burst) < burst);
        }
        let bucket = buckets.entry(who).or_insert(Bucket {
            tokens: f64::from(self.burst),
            at: now,
        });
        bucket.tokens = bucket.refilled(now, self.rate, f64::from(self.burst));
        bucket.at = now;
        let wanted_f = f64::from(wanted);
        if bucket.tokens >= wanted_f {
            bucket.tokens -= wanted_f;
            return Ok(());
        }
        // More than a burst never fits: say so with the longest wait a
        // whole burst takes, and the message names the burst.
        let missing = wanted_f.min(f64::from(self.burst)) - bucket.tokens;
        let seconds = (missing / self.rate).ceil().max(1.0);
        Err(Limited {
            client: buckets_key(identity, client),
            wanted,
            rate: format!("{}", self.rate),
            burst: self.burst,
            retry_after: Duration::from_secs_f64(seconds.min(86_400.0)),
        })
    }
}

impl Bucket {
    fn refilled(&self, now: Instant, rate: f64, burst: f64) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + elapsed * rate).min(burst)
    }
}

/// The client as a message names it.
fn buckets_key(identity: Option<&str>, client: Option<SocketAddr>) -> String {
    match (identity, client) {
        (Some(identity), _) => format!("identity {identity:?}"),
        (None, Some(client)) => format!("client {}", client.ip()),
        (None, None) => "a client".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bucket_per_identity_else_per_address() {
        let limit = NewFenceLimit::new(1.0, 3);
        let a: SocketAddr = "10.0.0.1:1000".parse().unwrap();
        let a_other_port: SocketAddr = "10.0.0.1:2000".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:1000".parse().unwrap();
        assert!(limit.take(None, Some(a), 2).is_ok());
        let refused = limit.take(None, Some(a_other_port), 2).unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_secs(1));
        assert!(refused.to_string().contains("client 10.0.0.1"), "{refused}");
        assert!(limit.take(None, Some(b), 3).is_ok());
        assert!(limit.take(Some("x"), Some(a), 3).is_ok());
        // More than a burst in one request never fits.
        let refused = limit.take(Some("y"), None, 4).unwrap_err();
        assert!(
            refused.to_string().contains("at most 3 at once"),
            "{refused}"
        );
        assert!(limit.take(Some("y"), None, 0).is_ok());
    }
}
