//! This holder's lease: granted, kept alive every TTL/6, and revoked at
//! its deadline, after which a fresh one is taken.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::json;

use super::common::{lock, unavailable, Counters};
use super::layout::Layout;
use crate::etcd_http::{b64, int, CallError, Client};
use crate::store::lease::boot_clock;
use crate::store::{Lease, StoreError};

/// Seconds since the Unix epoch: when an instance started, in its member
/// record.
fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// This holder's lease and who it is under it: every claim is made under
/// the current lease, every record is put on it and named after it (the
/// holder), and nothing is claimed while there is none.
pub(super) struct LeaseKeeper {
    client: Client,
    layout: Arc<Layout>,
    instance: String,
    ttl: Duration,
    /// The lease claims are made under; `None` between losing one and
    /// being granted the next.
    lease: Mutex<Option<Lease>>,
    /// Why the store cannot take claims now, if it cannot.
    failure: Mutex<Option<Arc<str>>>,
    counters: Arc<Counters>,
    /// The store closed: no fresh lease is taken any more.
    closed: AtomicBool,
}

impl LeaseKeeper {
    pub(super) fn new(
        client: Client,
        layout: Arc<Layout>,
        instance: String,
        ttl: Duration,
        counters: Arc<Counters>,
    ) -> Self {
        LeaseKeeper {
            client,
            layout,
            instance,
            ttl,
            lease: Mutex::new(None),
            failure: Mutex::new(None),
            counters,
            closed: AtomicBool::new(false),
        }
    }

    /// This instance's name, as shown in records, logs and metrics.
    pub(super) fn instance(&self) -> &str {
        &self.instance
    }

    /// The current lease, if one is held.
    pub(super) fn current(&self) -> Option<Lease> {
        lock(&self.lease).clone()
    }

    /// The error of a claim made while no live lease is held.
    pub(super) fn no_lease(&self) -> StoreError {
        let failure = lock(&self.failure).clone();
        unavailable(format!(
            "instance {} holds no lease on the shared fences{}",
            self.instance,
            failure.map_or_else(String::new, |f| format!(" ({f})"))
        ))
    }

    /// This holder under `lease`, as named in its records.
    pub(super) fn holder(&self, lease: &Lease) -> String {
        Layout::holder(&self.instance, lease.id())
    }

    /// The store closes: [`Self::keep_lease`] takes no fresh lease from now on.
    pub(super) fn stop(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Gives up the current lease for good (the store closed).
    pub(super) fn release(&self) {
        if let Some(lease) = lock(&self.lease).take() {
            lease.revoke();
            // Best effort: lets the other holders go at once instead of
            // after the TTL. Needs a runtime; at exit there may be none.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let client = self.client.clone();
                runtime.spawn(async move {
                    let _ = client
                        .call("/v3/lease/revoke", &json!({ "ID": lease.id().to_string() }))
                        .await;
                });
            }
        }
    }

    /// Grants a fresh lease and announces this holder under `members/`.
    pub(super) async fn grant(&self) -> Result<Lease, CallError> {
        let sent = boot_clock();
        let answer = self
            .client
            .call("/v3/lease/grant", &json!({ "TTL": self.ttl.as_secs() }))
            .await?;
        let id = int(&answer["ID"]);
        let ttl = int(&answer["TTL"]);
        if id == 0 || ttl <= 0 {
            return Err(CallError::Refused(format!("lease not granted: {answer}")));
        }
        let lease = Lease::new(id, self.deadline(sent, ttl));
        let member = json!({
            "instance": self.instance,
            "lease": format!("{id:x}"),
            "since": unix_seconds(SystemTime::now()),
        });
        self.client
            .call(
                "/v3/kv/put",
                &json!({
                    "key": b64(&self.layout.member(&self.instance)),
                    "value": b64(&member.to_string()),
                    "lease": id.to_string(),
                }),
            )
            .await?;
        *lock(&self.lease) = Some(lease.clone());
        *lock(&self.failure) = None;
        Ok(lease)
    }

    /// The deadline of a lease whose keep-alive (or grant) was sent at
    /// `sent` and answered with `ttl` seconds: the lease lives at least
    /// until `sent + ttl` in etcd's eyes; a margin of a quarter of the TTL
    /// (at least 250 ms) covers clock drift within the TTL, a pause between
    /// a check and a write, and the time the backend may still apply a
    /// request whose connection was cut (docs/SHARED.md).
    pub(super) fn deadline(&self, sent: Duration, ttl: i64) -> Duration {
        let ttl = Duration::from_secs(u64::try_from(ttl).unwrap_or(0));
        let margin = (ttl / 4).max(Duration::from_millis(250));
        (sent + ttl).saturating_sub(margin)
    }

    /// Keeps `lease` alive; at its deadline (or when etcd says it is gone)
    /// revokes it, then takes a fresh one. Runs for the store's life.
    /// `lost` runs at each loss (the wiring in `mod.rs` forgets this
    /// holder's records of the lost lease with it).
    pub(super) async fn keep_lease(
        self: Arc<Self>,
        mut lease: Lease,
        lost: impl Fn() + Send + Sync + 'static,
    ) {
        let interval = (self.ttl / 6).max(Duration::from_millis(100));
        loop {
            self.renew_until_lost(&lease, interval).await;
            lease.revoke();
            self.counters.lease_losses.fetch_add(1, Ordering::Relaxed);
            *lock(&self.lease) = None;
            lost();
            tracing::error!(
                instance = self.instance.as_str(),
                lease = format!("{:x}", lease.id()),
                "lost the lease on the shared fences: requests in flight cut, new ones refused (503) until a new lease is held"
            );
            // Best effort: the records of the old lease vanish now rather
            // than at its expiry, so the other instances go on sooner.
            let _ = self
                .client
                .call("/v3/lease/revoke", &json!({ "ID": lease.id().to_string() }))
                .await;
            lease = loop {
                if self.closed.load(Ordering::Acquire) {
                    return;
                }
                match self.grant().await {
                    Ok(fresh) => break fresh,
                    Err(error) => {
                        *lock(&self.failure) = Some(error.to_string().into());
                        tokio::time::sleep(interval).await;
                    }
                }
            };
            tracing::warn!(
                instance = self.instance.as_str(),
                lease = format!("{:x}", lease.id()),
                "holds a lease on the shared fences again"
            );
        }
    }

    /// Renews `lease` every `interval` until it is past its deadline or
    /// revoked (by etcd's word or a failed claim).
    pub(super) async fn renew_until_lost(&self, lease: &Lease, interval: Duration) {
        let id = lease.id().to_string();
        let mut failing = false;
        loop {
            let left = lease.deadline().saturating_sub(boot_clock());
            if left.is_zero() || lease.is_revoked() {
                return;
            }
            // Also wakes at the deadline, to cut what is in flight on time.
            tokio::time::sleep(interval.min(left)).await;
            if !lease.is_live() {
                return;
            }
            let sent = boot_clock();
            // The renewal may hang (a partition, a paused member): the
            // deadline does not wait for it.
            let left = lease.deadline().saturating_sub(sent);
            let body = json!({ "ID": id });
            let renewal = self.client.call("/v3/lease/keepalive", &body);
            let Ok(renewed) = tokio::time::timeout(left, renewal).await else {
                return;
            };
            match renewed {
                Ok(answer) => {
                    let ttl = int(&answer["result"]["TTL"]);
                    if ttl <= 0 {
                        *lock(&self.failure) = Some("etcd expired the lease".into());
                        return;
                    }
                    lease.extend(self.deadline(sent, ttl));
                    if failing {
                        tracing::warn!(instance = self.instance.as_str(), "reaches etcd again");
                        failing = false;
                    }
                    *lock(&self.failure) = None;
                }
                Err(error) => {
                    if !failing {
                        tracing::warn!(
                            instance = self.instance.as_str(),
                            %error,
                            "cannot renew the lease on the shared fences; retrying until its deadline"
                        );
                        failing = true;
                    }
                    *lock(&self.failure) = Some(error.to_string().into());
                }
            }
        }
    }
}
