//! The client side of the engine: one HTTP/1.x connection served to its
//! end, in its own task. Each head is read with httparse (no lenient
//! option) and checked against `framing.rs` before anything else sees it:
//! ambiguous framing, a bare LF or a fragment in the target is refused with
//! 400 and the connection closed, never handed on (SPEC, "What is never
//! forwarded"). The request body is read from the connection by whoever
//! polls it ([`RequestBody`]), in the same task; the response is written
//! with the framing its body needs.
//!
//! What hyper's server did that clients rely on is kept: `Expect:
//! 100-continue` is answered when the body is first read; a client that
//! closes its side while its request waits cancels the request (README,
//! "Forwarding"); the unread rest of a request body that was answered early
//! is drained when small, else the connection is closed; a `Date` is added
//! to answers that have none; pipelined requests are answered in order.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use http::{Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::body::{self, poll_fill, BodyError, Decoding};
use super::encode::{itoa, put_field, Lines, Outgoing};
use super::outbound::{self, Outbound, SPARE_LIMIT};
use crate::dialect::answer::{restyle_response, AnswerStyle};
use crate::gateway::activity::ClientStream;
use crate::gateway::hop::end_to_end;
use crate::gateway::BoxError;
use crate::http1::framing::FramingError;
use crate::http1::head::{parse_request, FieldLines, HeadError, Parsed, RequestHead};
use crate::http1::names::eq_lowercase;

/// The most of an unwanted request body read and thrown away after its
/// response, to keep the connection.
const DRAIN_LIMIT: u64 = 64 * 1024;

/// A response body that may carry its head's field lines as the backend
/// sent them, to be written after the response's map (hop-by-hop lines
/// left out): the proxy's answers do, so that no map is built for them.
pub(crate) trait CarriesFields {
    /// The lines, if they travel with the body.
    fn fields(&self) -> Option<&FieldLines> {
        None
    }
}

impl CarriesFields for http_body_util::Full<Bytes> {}

impl CarriesFields for http_body_util::Empty<Bytes> {}

/// What serves the requests of a connection.
pub(crate) trait Handler {
    /// The response body.
    type Body: Body<Data = Bytes, Error: Into<BoxError>> + Unpin + CarriesFields;

    /// Answers the request of `head` (its fields where they were read)
    /// and `body`. The future lives inside the connection's own, so that a
    /// request costs no allocation for it.
    fn call(
        &self,
        head: RequestHead,
        body: RequestBody,
    ) -> impl Future<Output = Response<Self::Body>> + Send;

    /// A head was refused before it became a request: answered `status`
    /// with the SPEC's `error` code (for the handler's metrics and log).
    /// Returns the shape the answer takes (the store's dialect).
    fn refused(&self, status: StatusCode, error: &'static str) -> AnswerStyle;
}

/// How a connection is served.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The largest head.
    pub(crate) max_head: usize,
    /// How long the rest of an unwanted body may take to drain.
    pub(crate) drain_timeout: Duration,
}

/// The connection, shared between the loop that serves it and the body of
/// the request in progress (never at the same time: the loop touches it
/// only between requests, or to see the client leave once the body is read).
struct EngineShared {
    stream: ClientStream,
    read: BytesMut,
    body: Decoding,
    /// The interim answer to `Expect: 100-continue`, owed until the body is
    /// first read; how much of it was written.
    continue_owed: Option<usize>,
}

type SharedConn = Arc<Mutex<EngineShared>>;

fn lock(conn: &SharedConn) -> MutexGuard<'_, EngineShared> {
    // Never held across an await; the state stays consistent.
    conn.lock().unwrap_or_else(PoisonError::into_inner)
}

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A request body, read from the client connection as it is polled.
pub(crate) struct RequestBody {
    /// `None` for a request without a body (a GET), which never reads.
    conn: Option<SharedConn>,
    /// Where the body was after its last frame: only this body's own
    /// polls move it while the request is served, and the proxy asks
    /// whether it is over several times per request, each of which would
    /// otherwise take the connection's lock (two atomic read-modify-writes).
    seen: BodyProgress,
}

#[derive(Debug, Clone, Copy)]
struct BodyProgress {
    over: bool,
    size: Option<u64>,
}

impl RequestBody {
    /// The body on `conn`, which `decoding` (its state) delimits.
    fn new(conn: &SharedConn, decoding: &Decoding) -> Self {
        RequestBody {
            conn: (!matches!(decoding, Decoding::Done)).then(|| Arc::clone(conn)),
            seen: BodyProgress::of(decoding),
        }
    }
}

impl BodyProgress {
    fn of(decoding: &Decoding) -> BodyProgress {
        BodyProgress {
            over: decoding.is_over(),
            size: decoding.size_hint().exact(),
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let Some(conn) = &this.conn else {
            return Poll::Ready(None);
        };
        let mut guard = lock(conn);
        let frame = poll_body(&mut guard, cx);
        this.seen = BodyProgress::of(&guard.body);
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.seen.over
    }

    fn size_hint(&self) -> SizeHint {
        match self.seen.size {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

/// The next frame of the request body on `conn`, with the interim
/// `100 Continue` first if it is owed.
fn poll_body(
    conn: &mut EngineShared,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
    if let Some(written) = conn.continue_owed {
        let mut at = written;
        while at < CONTINUE.len() {
            match Pin::new(&mut conn.stream).poll_write(cx, &CONTINUE[at..]) {
                Poll::Ready(Ok(n)) if n > 0 => at += n,
                Poll::Ready(Ok(_)) => return fail(conn, BodyError::Incomplete),
                Poll::Ready(Err(error)) => return fail(conn, BodyError::Io(error)),
                Poll::Pending => {
                    conn.continue_owed = Some(at);
                    return Poll::Pending;
                }
            }
        }
        if Pin::new(&mut conn.stream).poll_flush(cx).is_pending() {
            conn.continue_owed = Some(at);
            return Poll::Pending;
        }
        conn.continue_owed = None;
    }
    body::poll_frame(&mut conn.body, &mut conn.read, &mut conn.stream, cx)
}

/// A request body that failed before it was read: its connection cannot
/// be reused.
fn fail(
    conn: &mut EngineShared,
    error: BodyError,
) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
    conn.body = Decoding::Broken;
    Poll::Ready(Some(Err(error)))
}

/// What the loop keeps of a request to answer it.
struct Asked {
    to_head: bool,
    http10: bool,
    keep_alive: bool,
}

/// A head the gateway refuses itself, before any handler sees it.
struct Refused {
    status: StatusCode,
    error: &'static str,
    detail: String,
}

/// Serves HTTP/1.x requests on `stream` with `handler` until the client
/// closes it, a request asks to close it, or `draining` turns true between
/// two requests. `read` holds bytes already read from the stream.
pub(crate) async fn serve<H: Handler>(
    stream: ClientStream,
    read: BytesMut,
    handler: &H,
    draining: &AtomicBool,
    limits: Limits,
) -> io::Result<()> {
    let conn = Arc::new(Mutex::new(EngineShared {
        stream,
        read,
        body: Decoding::Done,
        continue_owed: None,
    }));
    // The buffer the last response head was written from, kept for the
    // next one (one allocation per connection, not per response).
    let mut spare = Vec::new();
    loop {
        let parsed = match poll_fn(|cx| poll_head(&conn, cx, draining, limits.max_head)).await {
            None => break,
            Some(parsed) => parsed,
        };
        let ((head, body), asked) = match parsed {
            Ok(parsed) => parsed,
            Err(refused) => {
                let style = handler.refused(refused.status, refused.error);
                let mut response =
                    crate::refusal::error_response(refused.status, refused.error, &refused.detail);
                restyle_response(style, &mut response);
                let asked = Asked {
                    to_head: false,
                    http10: false,
                    keep_alive: false,
                };
                let response = response.map(http_body_util::Full::new);
                write_response(&conn, response, &asked, &mut spare).await?;
                break;
            }
        };
        let mut keep_alive = asked.keep_alive;
        let mut future = pin!(handler.call(head, body));
        let answered = poll_fn(|cx| {
            match future.as_mut().poll(cx) {
                Poll::Ready(response) => return Poll::Ready(Some(response)),
                Poll::Pending => {}
            }
            // While the request waits, a client that closes its side has
            // gone: its request is cancelled.
            if watch_for_close(&conn, cx, limits.max_head) {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await;
        let Some(response) = answered else {
            break;
        };
        if draining.load(Ordering::Relaxed) {
            keep_alive = false;
        }
        let asked = Asked {
            keep_alive,
            ..asked
        };
        let written = write_response(&conn, response, &asked, &mut spare).await?;
        if !written.keep_alive
            || (!written.body_read && !drain_body(&conn, limits.drain_timeout).await)
        {
            break;
        }
    }
    // A clean end of the write side (a FIN after the last response, before
    // the socket goes), bounded: a TLS close_notify waits on the client.
    if let Ok(shared) = Arc::try_unwrap(conn) {
        let mut stream = shared
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .stream;
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.shutdown()).await;
    }
    Ok(())
}

/// The gateway's answer to a head it refuses.
fn refused(error: HeadError) -> Refused {
    let (status, code) = match error {
        HeadError::TooLarge(_) | HeadError::TooManyHeaders => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request_header_too_large",
        ),
        HeadError::Version => (
            StatusCode::HTTP_VERSION_NOT_SUPPORTED,
            "version_not_supported",
        ),
        HeadError::Fragment => (StatusCode::BAD_REQUEST, "invalid_path"),
        HeadError::Framing(FramingError::UnsupportedCoding) => {
            (StatusCode::NOT_IMPLEMENTED, "unsupported_transfer_coding")
        }
        _ => (StatusCode::BAD_REQUEST, "bad_request"),
    };
    Refused {
        status,
        error: code,
        detail: error.to_string(),
    }
}

/// A request to serve, or a head refused before any handler sees it.
type NextHead = Result<((RequestHead, RequestBody), Asked), Refused>;

/// Reads the next head. `None`: the connection is over (closed by the
/// client between requests, or draining).
fn poll_head(
    conn: &SharedConn,
    cx: &mut Context<'_>,
    draining: &AtomicBool,
    max_head: usize,
) -> Poll<Option<NextHead>> {
    let mut guard = lock(conn);
    let shared = &mut *guard;
    loop {
        if !shared.read.is_empty() {
            match parse_request(&mut shared.read, max_head) {
                Ok(Parsed::Complete(head)) => {
                    let asked = Asked {
                        to_head: head.method == http::Method::HEAD,
                        http10: head.version == Version::HTTP_10,
                        keep_alive: head.keep_alive,
                    };
                    let expects = head.expects_continue;
                    shared.body = Decoding::new(head.body);
                    shared.continue_owed =
                        (expects && !matches!(shared.body, Decoding::Done)).then_some(0);
                    let body = RequestBody::new(conn, &shared.body);
                    return Poll::Ready(Some(Ok(((head, body), asked))));
                }
                Ok(Parsed::Partial | Parsed::Interim) => {}
                Err(error) => return Poll::Ready(Some(Err(refused(error)))),
            }
        } else if draining.load(Ordering::Relaxed) {
            return Poll::Ready(None);
        }
        match poll_fill(&mut shared.stream, &mut shared.read, cx) {
            // Closed between requests, or in the middle of a head: either
            // way there is nobody to answer.
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(None),
            Poll::Ready(Ok(_)) => {}
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// Whether the client has closed the connection while its request waits
/// (only watched once its body has been read: before that, the body sees
/// it). Bytes that arrive meanwhile are the next request's, kept.
fn watch_for_close(conn: &SharedConn, cx: &mut Context<'_>, max_head: usize) -> bool {
    let mut guard = lock(conn);
    let shared = &mut *guard;
    if !matches!(shared.body, Decoding::Done) {
        return false;
    }
    while shared.read.len() < max_head {
        match poll_fill(&mut shared.stream, &mut shared.read, cx) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return true,
            Poll::Ready(Ok(_)) => {}
            Poll::Pending => return false,
        }
    }
    false
}

/// What the connection may do once a response is written.
struct Written {
    /// Carry another request.
    keep_alive: bool,
    /// The request body was read to its end: nothing to drain (seen under
    /// the lock the last write took, rather than taking it again).
    body_read: bool,
}

/// Writes `response` from `spare` (the buffer of the last response head,
/// given back for the next one).
async fn write_response<B>(
    conn: &SharedConn,
    response: Response<B>,
    asked: &Asked,
    spare: &mut Vec<u8>,
) -> io::Result<Written>
where
    B: Body<Data = Bytes> + Unpin + CarriesFields,
    B::Error: Into<BoxError>,
{
    let (parts, body) = response.into_parts();
    let status = parts.status.as_u16();
    let no_body = asked.to_head || (100..200).contains(&status) || status == 204 || status == 304;
    let mut keep_alive = asked.keep_alive;
    let mut out = std::mem::take(spare);
    out.reserve(outbound::capacity_for(body.size_hint().exact()));
    // The highest version the gateway speaks, to HTTP/1.0 clients too (RFC
    // 9110 §2.5); what an HTTP/1.0 client can read (no chunks, a close
    // after) is decided by what it asked, below.
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    // The backend's reason phrase as it sent it; the standard one for the
    // gateway's own answers.
    match body.fields().and_then(FieldLines::reason) {
        Some(reason) => out.extend_from_slice(reason),
        None => out.extend_from_slice(parts.status.canonical_reason().unwrap_or("").as_bytes()),
    }
    out.extend_from_slice(b"\r\n");
    let mut declared = None;
    let mut has_date = false;
    // The gateway's own fields (or the whole head, for answers it made),
    // then the backend's lines as they came: one rule for both.
    let mut keep = |name: &[u8], value: &[u8]| {
        if eq_lowercase(name, b"content-length") {
            declared = declared.or_else(|| std::str::from_utf8(value).ok()?.parse::<u64>().ok());
        } else if eq_lowercase(name, b"date") {
            has_date = true;
        } else if eq_lowercase(name, b"transfer-encoding") {
            return false;
        }
        true
    };
    for (name, value) in &parts.headers {
        if name == http::header::CONNECTION {
            keep_alive &= !value
                .as_bytes()
                .split(|&b| b == b',')
                .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"));
            // Said below, once, as this connection needs.
            continue;
        }
        let (name, value) = (name.as_str().as_bytes(), value.as_bytes());
        if keep(name, value) {
            put_field(&mut out, name, value);
        }
    }
    if let Some(fields) = body.fields() {
        let mut lines = Lines::new(fields.head_bytes());
        for (name, value) in end_to_end(|| fields.iter()) {
            if keep(name, value) {
                lines.put(&mut out, name, value);
            }
        }
        lines.flush(&mut out);
    }
    if !has_date {
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(&http_date());
        out.extend_from_slice(b"\r\n");
    }
    let outgoing = if no_body {
        Outgoing::Empty
    } else if let Some(n) = declared {
        Outgoing::Length(n)
    } else if body.is_end_stream() {
        out.extend_from_slice(b"content-length: 0\r\n");
        Outgoing::Length(0)
    } else if let Some(n) = body.size_hint().exact() {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa(n, &mut [0; 20]));
        out.extend_from_slice(b"\r\n");
        Outgoing::Length(n)
    } else if asked.http10 {
        // An HTTP/1.0 client knows no chunks: the data as it comes, ended
        // by the close.
        keep_alive = false;
        Outgoing::UntilClose
    } else {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        Outgoing::Chunked
    };
    if !keep_alive && !asked.http10 {
        out.extend_from_slice(b"connection: close\r\n");
    } else if keep_alive && asked.http10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    let body = (!no_body).then_some(body);
    let mut outbound = Outbound::new(out, body, outgoing);
    let written = poll_fn(|cx| {
        let mut guard = lock(conn);
        let written = std::task::ready!(outbound.poll_write_all(&mut guard.stream, cx));
        Poll::Ready(written.map(|()| matches!(guard.body, Decoding::Done)))
    })
    .await;
    match written {
        Ok(body_read) => {
            let mut buffer = outbound.into_buffer();
            if buffer.capacity() <= SPARE_LIMIT {
                buffer.clear();
                *spare = buffer;
            }
            Ok(Written {
                keep_alive,
                body_read,
            })
        }
        // The head is out: the client sees the response cut off.
        Err(error) => Err(io::Error::other(error)),
    }
}
/// Reads and throws away what is left of a request body that was answered
/// before it was read, if that is little and comes in time; whether the
/// connection can go on.
async fn drain_body(conn: &SharedConn, timeout: Duration) -> bool {
    let mut body = {
        let shared = lock(conn);
        match shared.body {
            Decoding::Done => return true,
            Decoding::Broken => return false,
            // The client was never told to send it.
            _ if shared.continue_owed.is_some() => return false,
            Decoding::Length(left) if left > DRAIN_LIMIT => return false,
            _ => {}
        }
        RequestBody::new(conn, &shared.body)
    };
    let drained = tokio::time::timeout(timeout, async {
        let mut read = 0u64;
        while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            let Ok(frame) = frame else { return false };
            read += frame.data_ref().map_or(0, |data| data.len() as u64);
            if read > DRAIN_LIMIT {
                return false;
            }
        }
        true
    })
    .await;
    drained.unwrap_or(false)
}

/// Today's date for a `Date` field, formatted once a second.
fn http_date() -> [u8; 29] {
    use std::sync::atomic::AtomicU64;
    static CACHED_AT: AtomicU64 = AtomicU64::new(u64::MAX);
    static CACHED: Mutex<[u8; 29]> = Mutex::new([0; 29]);
    let now = SystemTime::now();
    let second = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut cached = CACHED.lock().unwrap_or_else(PoisonError::into_inner);
    if CACHED_AT.load(Ordering::Relaxed) != second {
        let text = httpdate::fmt_http_date(now);
        if text.len() == 29 {
            cached.copy_from_slice(text.as_bytes());
            CACHED_AT.store(second, Ordering::Relaxed);
        }
    }
    *cached
}
