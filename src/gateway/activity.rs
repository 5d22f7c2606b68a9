//! What a client connection is doing, for its header and idle timeouts.
//!
//! hyper's own `header_read_timeout` starts counting when the server begins
//! waiting for a head, so on a keep-alive connection it is an idle timeout
//! of the same length; and `axum::serve` gives hyper no timer at all, so
//! neither limit held (a slowloris client kept its connection for as long as
//! it liked). The contract has two limits: a head must be complete within
//! the header timeout of its first byte (of the accept, on a new
//! connection), and a connection with no request started within the idle
//! timeout of its previous response is closed. [`Activity`] tracks what they
//! need with a few atomics touched about once per request, and
//! [`Activity::expired`] is one sleeping future per connection that wakes at
//! the next possible deadline, not on every byte.
//!
//! A request body that stalls is the request's own deadline (`deadlines.rs`).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
// tokio's clock, so that tests can pause it.
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;

use super::clock;
use super::config::ClientLimits;

/// One connection's activity. Times are nanoseconds since `born`.
#[derive(Debug)]
pub(crate) struct Activity {
    born: Instant,
    /// Requests (HTTP/2: streams) whose response is not done yet.
    busy: AtomicU32,
    /// When `busy` last fell to zero; 0 = the accept.
    idle_since: AtomicU64,
    /// When the first byte since `idle_since` was read; 0 = none yet.
    first_byte: AtomicU64,
    /// Whether any request has been served: a new connection gets the
    /// header timeout from its accept, a used one the idle timeout.
    served: AtomicBool,
    /// What the watchdog decided ([`Order`]), 0 = nothing yet.
    order: AtomicU8,
    /// The connection's task, woken when an order is given.
    connection: AtomicWaker,
}

/// What the watchdog tells the connection's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// The gateway is stopping: finish the request in progress, take no new one.
    Drain,
    /// A limit was broken: close at once.
    Close(Expiry),
}

/// Why [`Activity::expired`] gave up on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// A head started but was not complete in time (or none started on a
    /// new connection).
    Header,
    /// No request started on a keep-alive connection.
    Idle,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            born: clock::now(),
            busy: AtomicU32::new(0),
            idle_since: AtomicU64::new(0),
            first_byte: AtomicU64::new(0),
            served: AtomicBool::new(false),
            order: AtomicU8::new(0),
            connection: AtomicWaker::new(),
        })
    }

    /// Gives `order` to the connection's task and wakes it.
    pub(crate) fn order(&self, order: Order) {
        let code = match order {
            Order::Drain => 1,
            Order::Close(Expiry::Header) => 2,
            Order::Close(Expiry::Idle) => 3,
        };
        self.order.store(code, Ordering::Release);
        self.connection.wake();
    }

    /// What the connection's task polls for its orders (see [`Orders`]).
    pub(crate) fn orders(&self) -> Orders<'_> {
        Orders {
            activity: self,
            registered: None,
        }
    }

    fn order_given(&self) -> Option<Order> {
        match self.order.load(Ordering::Acquire) {
            1 => Some(Order::Drain),
            2 => Some(Order::Close(Expiry::Header)),
            3 => Some(Order::Close(Expiry::Idle)),
            _ => None,
        }
    }

    fn now(&self) -> u64 {
        // Never 0, which means "unset"; u64 nanoseconds last 584 years.
        (clock::now().saturating_duration_since(self.born).as_nanos() as u64).max(1)
    }

    fn at(&self, nanos: u64) -> Instant {
        self.born + Duration::from_nanos(nanos)
    }

    /// Bytes were read from the client.
    fn read_some(&self) {
        if self.first_byte.load(Ordering::Relaxed) == 0 {
            self.first_byte.store(self.now(), Ordering::Relaxed);
        }
    }

    /// A request starts; the guard marks its response done when dropped
    /// (hyper drops a response body once it has been sent, or the
    /// connection failed).
    pub(crate) fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }

    /// Resolves when the connection has been idle, or has been sending a
    /// head, for longer than `limits` allow. Never resolves while a request
    /// is in progress.
    ///
    /// It sleeps until the current state's deadline, but never longer than
    /// the shorter of the two timeouts: whatever happens meanwhile (a first
    /// byte, a request that starts and ends) sets a deadline at least that
    /// far away, so no deadline is missed and the readers and writers of the
    /// atomics never have to wake this future.
    pub(crate) async fn expired(&self, limits: &ClientLimits) -> Expiry {
        let horizon = limits.header_timeout.min(limits.idle_timeout);
        loop {
            let now = Instant::now();
            let busy = self.busy.load(Ordering::Acquire);
            let first_byte = self.first_byte.load(Ordering::Relaxed);
            let idle_since = self.idle_since.load(Ordering::Acquire);
            let current = if busy > 0 {
                None
            } else if first_byte != 0 {
                Some((self.at(first_byte) + limits.header_timeout, Expiry::Header))
            } else if self.served.load(Ordering::Relaxed) {
                Some((self.at(idle_since) + limits.idle_timeout, Expiry::Idle))
            } else {
                Some((self.at(idle_since) + limits.header_timeout, Expiry::Header))
            };
            let mut wake = now + horizon;
            if let Some((deadline, expiry)) = current {
                if now >= deadline {
                    return expiry;
                }
                wake = wake.min(deadline);
            }
            tokio::time::sleep_until(wake).await;
        }
    }
}

/// The connection's task's side of [`Activity::order`].
pub(crate) struct Orders<'a> {
    activity: &'a Activity,
    /// The waker last registered, while it still is.
    registered: Option<Waker>,
}

impl Orders<'_> {
    /// The order given, if any; `cx`'s task is woken by the next one.
    ///
    /// Registering a waker costs two atomic read-modify-writes, and the
    /// connection's task polls this on every wake-up with the same waker:
    /// it is registered again only when the waker changed, or once an order
    /// was given (giving one takes the registration). An order given after
    /// the last registration is seen here, or wakes the task to see it.
    pub(crate) fn poll(&mut self, cx: &Context<'_>) -> Option<Order> {
        let given = self.activity.order_given();
        let current = self
            .registered
            .as_ref()
            .is_some_and(|waker| waker.will_wake(cx.waker()));
        if given.is_none() && current {
            return None;
        }
        self.activity.connection.register(cx.waker());
        if !current {
            self.registered = Some(cx.waker().clone());
        }
        self.activity.order_given()
    }
}

/// A request in progress on a connection; see [`Activity::begin`].
#[derive(Debug)]
pub(crate) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let activity = &self.0;
        if activity.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            activity.served.store(true, Ordering::Relaxed);
            activity.first_byte.store(0, Ordering::Relaxed);
            activity.idle_since.store(activity.now(), Ordering::Release);
        }
    }
}

/// A client connection, plain or TLS, that reports reads to its
/// [`Activity`]. One type for both so that the connection code is not
/// compiled twice.
pub(crate) struct ClientStream {
    inner: Inner,
    activity: Arc<Activity>,
}

enum Inner {
    Plain(TcpStream),
    // Boxed: a TLS session is a few KiB, a plain stream a few words.
    Tls(Box<TlsStream<TcpStream>>),
}

impl ClientStream {
    pub(crate) fn plain(stream: TcpStream, activity: Arc<Activity>) -> Self {
        ClientStream {
            inner: Inner::Plain(stream),
            activity,
        }
    }

    pub(crate) fn tls(stream: TlsStream<TcpStream>, activity: Arc<Activity>) -> Self {
        ClientStream {
            inner: Inner::Tls(Box::new(stream)),
            activity,
        }
    }

    /// Whether TLS chose HTTP/2 (ALPN `h2`).
    pub(crate) fn negotiated_h2(&self) -> bool {
        match &self.inner {
            Inner::Plain(_) => false,
            Inner::Tls(stream) => stream.get_ref().1.alpn_protocol() == Some(b"h2"),
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = match &mut this.inner {
            Inner::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Inner::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        };
        if buf.filled().len() > before {
            this.activity.read_some();
        }
        polled
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().inner {
            Inner::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Inner::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().inner {
            Inner::Plain(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Inner::Tls(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.inner {
            Inner::Plain(stream) => stream.is_write_vectored(),
            Inner::Tls(stream) => stream.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Inner::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Inner::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ClientLimits {
        ClientLimits {
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(75),
            ..ClientLimits::default()
        }
    }

    async fn expires_after(activity: &Activity) -> (Expiry, Duration) {
        let start = Instant::now();
        let expiry = activity.expired(&limits()).await;
        (expiry, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_silent_connection_gets_the_header_timeout() {
        let activity = Activity::new();
        let (expiry, after) = expires_after(&activity).await;
        assert_eq!(expiry, Expiry::Header);
        assert!(
            after >= Duration::from_secs(30) && after < Duration::from_secs(31),
            "{after:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_used_connection_gets_the_idle_timeout_and_a_busy_one_none() {
        let activity = Activity::new();
        let busy = activity.begin();
        let watch = tokio::spawn({
            let activity = Arc::clone(&activity);
            async move { expires_after(&activity).await }
        });
        tokio::time::sleep(Duration::from_secs(200)).await;
        assert!(
            !watch.is_finished(),
            "expired while a request was in progress"
        );
        drop(busy);
        let (expiry, after) = watch.await.unwrap();
        assert_eq!(expiry, Expiry::Idle);
        assert!(after >= Duration::from_secs(275), "{after:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_idle_timeout_after_a_long_header_timeout_is_not_missed() {
        let limits = ClientLimits {
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_millis(1500),
            ..ClientLimits::default()
        };
        let activity = Activity::new();
        // The head's first byte is already there when the watch starts.
        activity.read_some();
        let watch = tokio::spawn({
            let activity = Arc::clone(&activity);
            async move {
                let start = Instant::now();
                (activity.expired(&limits).await, start.elapsed())
            }
        });
        tokio::task::yield_now().await;
        drop(activity.begin());
        let (expiry, after) = watch.await.unwrap();
        assert_eq!(expiry, Expiry::Idle);
        assert!(after < Duration::from_secs(4), "{after:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_started_head_gets_the_header_timeout_from_its_first_byte() {
        let activity = Activity::new();
        drop(activity.begin());
        tokio::time::sleep(Duration::from_secs(10)).await;
        activity.read_some();
        let (expiry, after) = expires_after(&activity).await;
        assert_eq!(expiry, Expiry::Header);
        assert!(
            after >= Duration::from_secs(30) && after < Duration::from_secs(31),
            "{after:?}"
        );
    }
}
