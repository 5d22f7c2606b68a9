//! The issuer every lock service shares: a cached bound per counter,
//! concurrent questions merged, each check bounded in time.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{CheckFuture, IssuerError, TokenIssuer};

/// How long a check may take, waiting for a question already asked
/// included; past it the request gets 503 `token_issuer_unavailable`.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// The future returned by [`BoundSource::ask`].
pub type AskFuture<'a> = Pin<Box<dyn Future<Output = Result<u64, String>> + Send + 'a>>;

/// A lock service's counter: it only grows, and every token the service
/// hands out is at most its value at the time.
pub trait BoundSource: std::fmt::Debug + Send + Sync + 'static {
    /// The counter that issues the tokens of fence `key`, when each lock has
    /// its own; `None` when one counter issues every token.
    fn counter(&self, key: &str) -> Option<String>;

    /// The counter's current value, read so that every token handed out
    /// before the question is at most the answer (a linearizable read).
    /// `counter` is what [`counter`](BoundSource::counter) named.
    fn ask<'a>(&'a self, counter: Option<&'a str>) -> AskFuture<'a>;

    /// Reads the TLS files of long-lived connections again (on `SIGHUP`):
    /// new connections show the new certificate. Sources that read their
    /// files at each connection do nothing.
    #[cfg(feature = "client-tls")]
    fn reload_tls(&self) -> Result<(), crate::client_tls::TlsError> {
        Ok(())
    }
}

impl BoundSource for Box<dyn BoundSource> {
    #[cfg(feature = "client-tls")]
    fn reload_tls(&self) -> Result<(), crate::client_tls::TlsError> {
        (**self).reload_tls()
    }

    fn counter(&self, key: &str) -> Option<String> {
        (**self).counter(key)
    }

    fn ask<'a>(&'a self, counter: Option<&'a str>) -> AskFuture<'a> {
        (**self).ask(counter)
    }
}

/// A [`TokenIssuer`] over a [`BoundSource`].
///
/// - **Cached bound.** Counters only grow, so a token at or below a value
///   read once is issued for ever: most raises need no question.
/// - **Merged questions.** Questions about one counter are asked one at a
///   time; a check that waited for one that *started after the check did*
///   takes its answer instead of asking again. (An answer to a question
///   sent earlier could predate the token and refuse it wrongly.)
/// - **Bounded.** A check takes at most [`ASK_TIMEOUT`], waiting included.
#[derive(Debug)]
pub struct CachedIssuer<S> {
    source: S,
    /// The counter of every key, for a source with one counter: checked
    /// with one atomic load, no lookup.
    global: Arc<Counter>,
    /// One per lock, for a source with a counter per lock.
    counters: Mutex<HashMap<String, Arc<Counter>>>,
    stats: IssuerStats,
}

#[derive(Debug, Default)]
struct Counter {
    /// The highest value confirmed so far.
    bound: AtomicU64,
    /// Numbers the questions about this counter, in the order they start.
    started: AtomicU64,
    /// Held while a question is out; the last answer.
    asking: tokio::sync::Mutex<Answer>,
}

/// The last question's number and result.
#[derive(Debug, Default)]
struct Answer {
    question: u64,
    result: Option<Result<u64, Arc<str>>>,
}

/// What a [`CachedIssuer`] has done since it was built.
#[derive(Debug, Default)]
pub struct IssuerStats {
    checks: AtomicU64,
    cached: AtomicU64,
    merged: AtomicU64,
    questions: AtomicU64,
    failures: AtomicU64,
    not_issued: AtomicU64,
    question_micros: AtomicU64,
}

/// A snapshot of [`IssuerStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IssuerCounts {
    /// Tokens checked (raises above the fence's highest).
    pub checks: u64,
    /// Checks answered by the cached bound.
    pub cached: u64,
    /// Checks answered by a question another check asked.
    pub merged: u64,
    /// Questions asked of the lock service (round trips).
    pub questions: u64,
    /// Questions that failed or timed out, and checks that timed out.
    pub failures: u64,
    /// Tokens refused as never issued.
    pub not_issued: u64,
    /// Total time spent in questions, in microseconds.
    pub question_micros: u64,
}

impl IssuerStats {
    /// The counters now.
    pub fn counts(&self) -> IssuerCounts {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        IssuerCounts {
            checks: load(&self.checks),
            cached: load(&self.cached),
            merged: load(&self.merged),
            questions: load(&self.questions),
            failures: load(&self.failures),
            not_issued: load(&self.not_issued),
            question_micros: load(&self.question_micros),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl<S: BoundSource> CachedIssuer<S> {
    /// An issuer asking `source`.
    pub fn new(source: S) -> Self {
        CachedIssuer {
            source,
            global: Arc::default(),
            counters: Mutex::new(HashMap::new()),
            stats: IssuerStats::default(),
        }
    }

    /// What it has done so far.
    pub fn stats(&self) -> IssuerCounts {
        self.stats.counts()
    }

    /// The lock service asked.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The counter of `key`, and its name for questions.
    fn counter(&self, key: &str) -> (Arc<Counter>, Option<String>) {
        match self.source.counter(key) {
            None => (Arc::clone(&self.global), None),
            Some(name) => {
                let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
                let counter = Arc::clone(counters.entry(name.clone()).or_default());
                (counter, Some(name))
            }
        }
    }

    /// The cached bound of `key`'s counter, if any was confirmed.
    fn cached_bound(&self, key: &str) -> u64 {
        match self.source.counter(key) {
            None => self.global.bound.load(Ordering::Acquire),
            Some(name) => self
                .counters
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&name)
                .map_or(0, |counter| counter.bound.load(Ordering::Acquire)),
        }
    }

    async fn check_unbounded(&self, key: &str, token: u64) -> Result<(), IssuerError> {
        let (counter, name) = self.counter(key);
        if token <= counter.bound.load(Ordering::Acquire) {
            bump(&self.stats.cached);
            return Ok(());
        }
        // Questions numbered above this one started after this check did.
        let arrived = counter.started.load(Ordering::Acquire);
        let mut answer = counter.asking.lock().await;
        let bound = counter.bound.load(Ordering::Acquire);
        if token <= bound {
            bump(&self.stats.merged);
            return Ok(());
        }
        if answer.question > arrived {
            if let Some(result) = &answer.result {
                bump(&self.stats.merged);
                return match result {
                    Ok(_) => Err(self.not_issued(bound)),
                    Err(detail) => Err(IssuerError::Unavailable(Arc::clone(detail))),
                };
            }
        }
        let question = counter.started.fetch_add(1, Ordering::AcqRel) + 1;
        bump(&self.stats.questions);
        let started = Instant::now();
        let asked = self.source.ask(name.as_deref()).await;
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.stats
            .question_micros
            .fetch_add(micros, Ordering::Relaxed);
        answer.question = question;
        match asked {
            Ok(value) => {
                let bound = counter.bound.fetch_max(value, Ordering::AcqRel).max(value);
                answer.result = Some(Ok(bound));
                if token <= bound {
                    Ok(())
                } else {
                    Err(self.not_issued(bound))
                }
            }
            Err(detail) => {
                bump(&self.stats.failures);
                let detail: Arc<str> = detail.into();
                answer.result = Some(Err(Arc::clone(&detail)));
                Err(IssuerError::Unavailable(detail))
            }
        }
    }

    fn not_issued(&self, issued: u64) -> IssuerError {
        bump(&self.stats.not_issued);
        IssuerError::NotIssued { issued }
    }
}

impl<S: BoundSource> TokenIssuer for CachedIssuer<S> {
    fn known_issued(&self, key: &str, token: u64) -> bool {
        let known = token <= self.cached_bound(key);
        if known {
            bump(&self.stats.checks);
            bump(&self.stats.cached);
        }
        known
    }

    fn check<'a>(&'a self, key: &'a str, token: u64) -> CheckFuture<'a> {
        Box::pin(async move {
            bump(&self.stats.checks);
            match tokio::time::timeout(ASK_TIMEOUT, self.check_unbounded(key, token)).await {
                Ok(checked) => checked,
                Err(_) => {
                    bump(&self.stats.failures);
                    Err(IssuerError::Unavailable(
                        format!(
                            "no answer from the token issuer within {} s",
                            ASK_TIMEOUT.as_secs()
                        )
                        .into(),
                    ))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A counter in memory that counts the questions it is asked.
    #[derive(Debug, Default)]
    struct Fixed {
        value: AtomicU64,
        asked: AtomicUsize,
        down: std::sync::atomic::AtomicBool,
    }

    impl BoundSource for Arc<Fixed> {
        fn counter(&self, _key: &str) -> Option<String> {
            None
        }

        fn ask<'a>(&'a self, _counter: Option<&'a str>) -> AskFuture<'a> {
            Box::pin(async move {
                self.asked.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                if self.down.load(Ordering::SeqCst) {
                    return Err("down".to_owned());
                }
                Ok(self.value.load(Ordering::SeqCst))
            })
        }
    }

    #[tokio::test]
    async fn a_confirmed_bound_answers_later_checks_without_asking() {
        let source = Arc::new(Fixed::default());
        source.value.store(100, Ordering::SeqCst);
        let issuer = CachedIssuer::new(Arc::clone(&source));
        issuer.check("/a", 90).await.unwrap();
        issuer.check("/b", 100).await.unwrap();
        assert_eq!(source.asked.load(Ordering::SeqCst), 1);
        assert_eq!(
            issuer.check("/a", 101).await,
            Err(IssuerError::NotIssued { issued: 100 })
        );
        assert_eq!(source.asked.load(Ordering::SeqCst), 2);
        source.value.store(101, Ordering::SeqCst);
        issuer.check("/a", 101).await.unwrap();
        let stats = issuer.stats();
        assert_eq!((stats.checks, stats.cached, stats.questions), (4, 1, 3));
    }

    #[tokio::test]
    async fn an_issuer_that_fails_is_unavailable_and_then_recovers() {
        let source = Arc::new(Fixed::default());
        source.down.store(true, Ordering::SeqCst);
        let issuer = CachedIssuer::new(Arc::clone(&source));
        assert!(matches!(
            issuer.check("/a", 1).await,
            Err(IssuerError::Unavailable(_))
        ));
        source.down.store(false, Ordering::SeqCst);
        source.value.store(5, Ordering::SeqCst);
        issuer.check("/a", 1).await.unwrap();
    }

    #[tokio::test]
    async fn concurrent_checks_share_one_question() {
        let source = Arc::new(Fixed::default());
        source.value.store(1000, Ordering::SeqCst);
        let issuer = Arc::new(CachedIssuer::new(Arc::clone(&source)));
        let checks: Vec<_> = (1..=50)
            .map(|token| {
                let issuer = Arc::clone(&issuer);
                tokio::spawn(async move { issuer.check("/k", token).await })
            })
            .collect();
        for check in checks {
            check.await.unwrap().unwrap();
        }
        assert_eq!(source.asked.load(Ordering::SeqCst), 1);
    }
}
