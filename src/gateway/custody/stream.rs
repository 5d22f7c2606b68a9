//! S3 under custody, a signed aws-chunked request body
//! (`x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD` and
//! `...-TRAILER`): each chunk verified against the client's signature
//! chain as it passes, and re-signed into the gateway's, whose seed is the
//! signature `sign.rs` gives the forwarded head. The framing keeps its
//! length, so `Content-Length` and `x-amz-decoded-content-length` go on
//! unchanged. The state machines are [`crate::dialect::chunked`]'s; this
//! file is the body around them.
//!
//! The store never sees the end of a body the gateway has not verified
//! whole: the final chunk, the trailer and the closing CRLF are held until
//! the client's body has ended and every byte of it has verified. A body
//! that fails (a bad signature, bad framing, a chunk over 1 MiB, a body cut
//! short) fails towards the store too, so the store keeps nothing.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::dialect::chunked::{
    ChunkResigner, ChunkedError, ChunkedVerifier, Event, DEFAULT_MAX_CHUNK,
};
use crate::dialect::sigv4::{self, SigningKey};
use crate::gateway::BoxError;

/// Whether `payload` (a verified request's `x-amz-content-sha256`) is a
/// signed aws-chunked body, and if so whether it ends with a signed
/// trailer: `Some(false)` for `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`,
/// `Some(true)` for `...-TRAILER`, `None` for anything else.
pub(crate) fn streaming_trailer(payload: &str) -> Option<bool> {
    match payload {
        sigv4::STREAMING_PAYLOAD => Some(false),
        sigv4::STREAMING_PAYLOAD_TRAILER => Some(true),
        _ => None,
    }
}

/// The client's side of a signed aws-chunked body: what its chunk
/// signatures are checked with. Computed when the request's head is
/// verified ([`client_side`]), carried to where the body is wrapped.
#[derive(Debug, Clone)]
pub(crate) struct ClientSide {
    /// The identity's signing key for the request's scope.
    key: SigningKey,
    /// The request's `x-amz-date`.
    amz_date: String,
    /// The request's credential scope, `date/region/s3/aws4_request`.
    scope: String,
    /// The request's signature: the chain starts there.
    seed: [u8; 32],
    /// `...-PAYLOAD-TRAILER`: a signed trailer follows the final chunk.
    trailer: bool,
    /// The largest chunk taken: each is held whole until verified.
    max_chunk: usize,
}

/// The client's side of a signed aws-chunked body whose head was verified
/// with `authorization` (its `Authorization` header, parsed), `amz_date`
/// (its `x-amz-date`) and `key` (the identity's signing key for the
/// authorization's scope, the one the head's signature matched).
/// `trailer`: [`streaming_trailer`] of its `x-amz-content-sha256`.
pub(crate) fn client_side(
    authorization: &sigv4::Authorization,
    amz_date: &str,
    key: SigningKey,
    trailer: bool,
) -> ClientSide {
    ClientSide {
        key,
        amz_date: amz_date.to_owned(),
        scope: authorization.credential.scope().to_owned(),
        seed: authorization.signature,
        trailer,
        max_chunk: DEFAULT_MAX_CHUNK,
    }
}

/// The gateway's side of a signed aws-chunked body: the key, time and scope
/// the forwarded head was signed with, and that head's signature, which
/// the re-signed chunks chain from. Known only once the head is signed,
/// after the body was wrapped: it reaches the body through a [`SeedCell`].
#[derive(Debug, Clone)]
pub(crate) struct GatewaySeed {
    key: SigningKey,
    amz_date: String,
    scope: String,
    seed: [u8; 32],
}

impl GatewaySeed {
    /// The seed of a head signed with `key` at `amz_date` in `scope`
    /// (`date/region/service/aws4_request`), its signature `signature`.
    pub(crate) fn new(key: SigningKey, amz_date: &str, scope: &str, signature: [u8; 32]) -> Self {
        GatewaySeed {
            key,
            amz_date: amz_date.to_owned(),
            scope: scope.to_owned(),
            seed: signature,
        }
    }
}

/// Where the gateway's seed is put once the head is signed; shared by the
/// body ([`Resigned::new`]) and whoever signs the head.
pub(crate) type SeedCell = Arc<OnceLock<GatewaySeed>>;

/// Why a [`Resigned`] body failed (the inner body's own errors pass on as
/// they came). Found in an error's source chain with
/// `deadlines::find_cause::<StreamError>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StreamError {
    /// The client's aws-chunked body is refused: a chunk or trailer whose
    /// signature does not match, bad framing, a chunk too large, a body
    /// that ends before its final chunk.
    #[error("the client's aws-chunked body is refused: {0}")]
    Refused(ChunkedError),
    /// The body was read before the gateway's seed was set: the head was
    /// not signed first, so no chunk can be signed.
    #[error("the aws-chunked body was read before the gateway signed its head")]
    NoGatewaySeed,
    /// Polled again after it failed: refused for good.
    #[error("the aws-chunked body failed before")]
    Failed,
}

/// Where a [`Resigned`] body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading the client's body.
    Reading,
    /// The client's body ended, verified whole: what is queued (the held
    /// end among it) and the HTTP trailers go on, then the end.
    Draining,
    /// Ended cleanly.
    Over,
    /// Failed; every later poll fails too, so that no consumer can take
    /// the failure for an end.
    Failed,
}

pin_project! {
    /// An aws-chunked request body verified chunk by chunk against the
    /// client's signatures and re-signed with the gateway's, as it passes.
    pub(crate) struct Resigned<B> {
        #[pin]
        inner: B,
        verifier: ChunkedVerifier,
        gateway: SeedCell,
        // Made from the cell on the first poll.
        resigner: Option<ChunkResigner>,
        // Reused for every frame: no allocation per chunk.
        events: Vec<Event>,
        pieces: Vec<Bytes>,
        // Re-signed pieces ready to go on, in order.
        out: VecDeque<Bytes>,
        // The final chunk and what follows it, re-signed, held until the
        // client's body has ended and verified whole.
        tail: Vec<Bytes>,
        // The final chunk was seen: what follows goes to `tail`.
        at_tail: bool,
        // The inner body's HTTP trailers, sent after the data.
        trailers: Option<HeaderMap>,
        // Bytes read from the inner body and passed on: what is held in
        // between is the difference (lengths are kept).
        read: u64,
        passed: u64,
        phase: Phase,
    }
}

impl<B> Resigned<B> {
    /// `inner`, an aws-chunked body signed as `client` says, to be
    /// re-signed with the seed put in `gateway` before it is first polled.
    pub(crate) fn new(inner: B, client: ClientSide, gateway: SeedCell) -> Self {
        let ClientSide {
            key,
            amz_date,
            scope,
            seed,
            trailer,
            max_chunk,
        } = client;
        Resigned {
            inner,
            verifier: ChunkedVerifier::new(key, &amz_date, &scope, seed, trailer, max_chunk),
            gateway,
            resigner: None,
            events: Vec::new(),
            pieces: Vec::new(),
            out: VecDeque::new(),
            tail: Vec::new(),
            at_tail: false,
            trailers: None,
            read: 0,
            passed: 0,
            phase: Phase::Reading,
        }
    }
}

impl<B> http_body::Body for Resigned<B>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            if let Some(piece) = this.out.pop_front() {
                *this.passed += piece.len() as u64;
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            match *this.phase {
                Phase::Reading => {}
                Phase::Draining => {
                    *this.phase = Phase::Over;
                    return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
                }
                Phase::Over => return Poll::Ready(None),
                Phase::Failed => return fail(this.phase, StreamError::Failed.into()),
            }
            if this.resigner.is_none() {
                // Checked before the client's body is read: nothing is
                // taken from it that could not be passed on.
                let Some(gateway) = this.gateway.get() else {
                    return fail(this.phase, StreamError::NoGatewaySeed.into());
                };
                *this.resigner = Some(ChunkResigner::new(
                    gateway.key.clone(),
                    &gateway.amz_date,
                    &gateway.scope,
                    gateway.seed,
                ));
            }
            let frame = match std::task::ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(error)) => return fail(this.phase, error.into()),
                None => {
                    if let Err(error) = end(this.phase, this.verifier, this.out, this.tail) {
                        return fail(this.phase, error);
                    }
                    continue;
                }
            };
            match frame.into_data() {
                Ok(data) => {
                    *this.read += data.len() as u64;
                    if let Err(error) = this.verifier.feed(&data, this.events) {
                        return fail(this.phase, StreamError::Refused(error).into());
                    }
                    // Only verified chunks reach the resigner, in order.
                    let Some(resigner) = this.resigner.as_mut() else {
                        return fail(this.phase, StreamError::NoGatewaySeed.into());
                    };
                    for event in this.events.drain(..) {
                        if matches!(&event, Event::Chunk(chunk) if chunk.is_final()) {
                            *this.at_tail = true;
                        }
                        resigner.resign(&event, this.pieces);
                        if *this.at_tail {
                            this.tail.append(this.pieces);
                        } else {
                            this.out.extend(this.pieces.drain(..));
                        }
                    }
                }
                Err(frame) => {
                    // HTTP trailers (chunked transfer coding's) are not the
                    // aws-chunked ones: they go on as they came, last.
                    if let Ok(trailers) = frame.into_trailers() {
                        *this.trailers = Some(trailers);
                    }
                }
            }
            // A body that says it has ended with its last frame is not
            // polled again by every consumer: its end is taken now, so
            // that ours can be said with our last frame too.
            if this.inner.is_end_stream() {
                if let Err(error) = end(this.phase, this.verifier, this.out, this.tail) {
                    return fail(this.phase, error);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self.phase {
            Phase::Draining => self.out.is_empty() && self.trailers.is_none(),
            Phase::Over => true,
            // A failed body is not ended: a poll says why.
            Phase::Reading | Phase::Failed => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        if self.phase == Phase::Failed {
            return SizeHint::default();
        }
        // The framing keeps its length: what is left is what the inner body
        // has left and what was read from it but not yet passed on (the
        // inner's own hint before the first poll).
        let held = self.read.saturating_sub(self.passed);
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(held));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(held).max(hint.lower()));
        }
        hint
    }
}

/// The client's body has ended: it must have been complete and verified;
/// then what was held of its end goes on.
fn end(
    phase: &mut Phase,
    verifier: &ChunkedVerifier,
    out: &mut VecDeque<Bytes>,
    tail: &mut Vec<Bytes>,
) -> Result<(), BoxError> {
    if *phase != Phase::Reading {
        return Ok(());
    }
    verifier.finish().map_err(StreamError::Refused)?;
    out.extend(tail.drain(..));
    *phase = Phase::Draining;
    Ok(())
}

/// Fails the body with `error`; whatever was queued is dropped, so nothing
/// after the failure reaches the store.
fn fail(phase: &mut Phase, error: BoxError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    *phase = Phase::Failed;
    Poll::Ready(Some(Err(error)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::chunked::{Chunk, Trailer};
    use crate::dialect::sigv4::{signing_key, Credential};
    use http_body::Body as _;
    use http_body_util::{BodyExt, Full, StreamBody};

    const AMZ_DATE: &str = "20130524T000000Z";
    const SCOPE_A: &str = "20130524/us-east-1/s3/aws4_request";
    const GATEWAY_DATE: &str = "20130524T000105Z";
    const SCOPE_B: &str = "20130524/eu-west-1/s3/aws4_request";
    const SEED_A: [u8; 32] = [7; 32];
    const SEED_B: [u8; 32] = [9; 32];

    fn key_a() -> SigningKey {
        signing_key(
            b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "20130524",
            "us-east-1",
            "s3",
        )
    }

    fn key_b() -> SigningKey {
        signing_key(b"the store's secret", "20130524", "eu-west-1", "s3")
    }

    fn client(trailer: bool) -> ClientSide {
        let authorization = sigv4::Authorization {
            credential: Credential::new("AKIAIOSFODNN7EXAMPLE", "20130524", "us-east-1", "s3"),
            signed_headers: sigv4::SignedHeaders::parse("host").unwrap(),
            signature: SEED_A,
        };
        client_side(&authorization, AMZ_DATE, key_a(), trailer)
    }

    fn cell_b() -> SeedCell {
        let cell = SeedCell::default();
        assert!(cell
            .set(GatewaySeed::new(key_b(), GATEWAY_DATE, SCOPE_B, SEED_B))
            .is_ok());
        cell
    }

    fn checksum() -> Trailer {
        Trailer::new(&[("x-amz-checksum-crc32c", "sOO8/Q==")])
    }

    /// The data of chunk `i` of `n` bytes.
    fn data(i: usize, n: usize) -> Vec<u8> {
        (0..n).map(|j| (i * 31 + j) as u8).collect()
    }

    /// A body of chunks of `sizes` (and `trailer`), signed with key A.
    fn signed_body(sizes: &[usize], trailer: Option<&Trailer>) -> Vec<u8> {
        let mut resigner = ChunkResigner::new(key_a(), AMZ_DATE, SCOPE_A, SEED_A);
        let mut events: Vec<Event> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| Event::Chunk(Chunk::new(Bytes::from(data(i, n)))))
            .collect();
        events.push(Event::Chunk(Chunk::new(Bytes::new())));
        if let Some(trailer) = trailer {
            events.push(Event::Trailer(trailer.clone()));
        }
        events.push(Event::End);
        let mut pieces = Vec::new();
        for event in &events {
            resigner.resign(event, &mut pieces);
        }
        pieces.concat()
    }

    /// A client's body as a stream of frames, each failing with an I/O error.
    type Inner = StreamBody<futures_util::stream::Iter<std::vec::IntoIter<InnerFrame>>>;
    type InnerFrame = Result<Frame<Bytes>, std::io::Error>;

    /// `body` as an inner body of frames of `size` bytes (then `trailers`).
    fn in_frames(body: &[u8], size: usize, trailers: Option<HeaderMap>) -> Inner {
        let mut frames: Vec<InnerFrame> = body
            .chunks(size.max(1))
            .map(|piece| Ok(Frame::data(Bytes::copy_from_slice(piece))))
            .collect();
        frames.extend(trailers.map(|t| Ok(Frame::trailers(t))));
        StreamBody::new(futures_util::stream::iter(frames))
    }

    /// What a body gave: its data, its HTTP trailers, and the error it
    /// ended with.
    struct Drained {
        data: Vec<u8>,
        trailers: Option<HeaderMap>,
        error: Option<BoxError>,
    }

    async fn drain<B>(mut body: B) -> Drained
    where
        B: http_body::Body<Data = Bytes, Error = BoxError> + Unpin,
    {
        let mut drained = Drained {
            data: Vec::new(),
            trailers: None,
            error: None,
        };
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => {
                        assert!(drained.trailers.is_none(), "data after the trailers");
                        drained.data.extend_from_slice(&data);
                    }
                    Err(frame) => drained.trailers = frame.into_trailers().ok(),
                },
                Err(error) => {
                    drained.error = Some(error);
                    // Refused for good: polled again, it fails again.
                    let again = body.frame().await;
                    assert!(matches!(again, Some(Err(_))), "after the error: {again:?}");
                    break;
                }
            }
        }
        drained
    }

    fn refusal(error: &BoxError) -> Option<&StreamError> {
        error.downcast_ref::<StreamError>()
    }

    /// `body` verified under key B, as the store would: its events.
    fn verify_b(body: &[u8], trailer: bool) -> Result<Vec<Event>, ChunkedError> {
        let mut verifier =
            ChunkedVerifier::new(key_b(), GATEWAY_DATE, SCOPE_B, SEED_B, trailer, 1 << 20);
        let mut events = Vec::new();
        verifier.feed(body, &mut events)?;
        verifier.finish()?;
        Ok(events)
    }

    fn data_of(events: &[Event]) -> Vec<u8> {
        let mut out = Vec::new();
        for event in events {
            if let Event::Chunk(chunk) = event {
                out.extend_from_slice(&chunk.data);
            }
        }
        out
    }

    #[tokio::test]
    async fn resigned_in_any_frames_verifies_under_the_gateway_key() {
        let sizes = [8192, 1, 300];
        let expected: Vec<u8> = sizes
            .iter()
            .enumerate()
            .flat_map(|(i, &n)| data(i, n))
            .collect();
        for trailer in [false, true] {
            let body = signed_body(&sizes, trailer.then(checksum).as_ref());
            for frame in [1, 7, 4096, body.len()] {
                let wrapped =
                    Resigned::new(in_frames(&body, frame, None), client(trailer), cell_b());
                let drained = drain(wrapped).await;
                assert!(drained.error.is_none(), "{:?}", drained.error);
                assert_eq!(drained.data.len(), body.len(), "the length is kept");
                assert_ne!(drained.data, body, "re-signed");
                let events = verify_b(&drained.data, trailer).unwrap();
                assert_eq!(data_of(&events), expected, "frames of {frame}");
                if trailer {
                    assert!(events.contains(&Event::Trailer(checksum())));
                }
                // The client's body does not verify as the gateway's.
                assert_eq!(
                    verify_b(&body, trailer),
                    Err(ChunkedError::ChunkSignatureMismatch)
                );
            }
        }
    }

    #[tokio::test]
    async fn length_and_end_are_said_exactly() {
        let body = signed_body(&[100, 20], None);
        let mut wrapped = Resigned::new(
            Full::new(Bytes::from(body.clone())),
            client(false),
            cell_b(),
        );
        assert_eq!(wrapped.size_hint().exact(), Some(body.len() as u64));
        assert!(!wrapped.is_end_stream());
        let mut seen = 0u64;
        while let Some(frame) = wrapped.frame().await {
            seen += frame.unwrap().into_data().unwrap().len() as u64;
            // What is left, exactly, at every frame (the inner has given
            // all of it at once).
            assert_eq!(wrapped.size_hint().exact(), Some(body.len() as u64 - seen));
            if seen == body.len() as u64 {
                // Said with the last frame, not one poll later.
                assert!(wrapped.is_end_stream());
            }
        }
        assert_eq!(seen, body.len() as u64);
        assert!(wrapped.is_end_stream());
    }

    #[tokio::test]
    async fn a_tampered_chunk_fails_and_nothing_after_it_goes_on() {
        let body = signed_body(&[64, 64, 64], None);
        let header_len = body.iter().position(|&b| b == b'\n').unwrap() + 1;
        // A byte of the second chunk's data.
        let second = header_len + 64 + 2 + header_len;
        for frame in [1, 7, body.len()] {
            let mut bad = body.clone();
            bad[second + 10] ^= 1;
            let wrapped = Resigned::new(in_frames(&bad, frame, None), client(false), cell_b());
            let drained = drain(wrapped).await;
            let error = drained.error.expect("an error");
            assert_eq!(
                refusal(&error),
                Some(&StreamError::Refused(ChunkedError::ChunkSignatureMismatch))
            );
            // At most the first chunk went on, re-signed, and nothing of
            // the second.
            assert!(
                drained.data.len() <= header_len + 64 + 2,
                "frames of {frame}"
            );
            let mut verifier =
                ChunkedVerifier::new(key_b(), GATEWAY_DATE, SCOPE_B, SEED_B, false, 1 << 20);
            let mut events = Vec::new();
            verifier.feed(&drained.data, &mut events).unwrap();
            assert!(data_of(&events).len() <= 64);
            assert_eq!(verifier.finish(), Err(ChunkedError::Truncated));
        }
    }

    #[tokio::test]
    async fn a_body_cut_short_never_shows_its_end() {
        for trailer in [false, true] {
            let body = signed_body(&[50], trailer.then(checksum).as_ref());
            for cut in 0..body.len() {
                let wrapped =
                    Resigned::new(in_frames(&body[..cut], 9, None), client(trailer), cell_b());
                let drained = drain(wrapped).await;
                let error = drained.error.expect("an error");
                assert_eq!(
                    refusal(&error),
                    Some(&StreamError::Refused(ChunkedError::Truncated)),
                    "cut at {cut}"
                );
                // The final chunk is held until the body verified whole.
                let text = String::from_utf8_lossy(&drained.data);
                assert!(!text.contains("\r\n0;chunk-signature"), "cut at {cut}");
            }
            // Bytes after the end: refused, the end held back too.
            let mut extra = body.clone();
            extra.extend_from_slice(b"x");
            let drained = drain(Resigned::new(
                in_frames(&extra, 1, None),
                client(trailer),
                cell_b(),
            ))
            .await;
            assert_eq!(
                refusal(&drained.error.expect("an error")),
                Some(&StreamError::Refused(ChunkedError::TrailingData))
            );
            assert!(!String::from_utf8_lossy(&drained.data).contains("\r\n0;chunk-signature"));
        }
    }

    #[tokio::test]
    async fn without_the_gateway_seed_nothing_is_read() {
        let body = signed_body(&[10], None);
        let empty = SeedCell::default();
        let mut wrapped = Resigned::new(Full::new(Bytes::from(body.clone())), client(false), empty);
        let error = wrapped
            .frame()
            .await
            .expect("a frame")
            .expect_err("an error");
        assert_eq!(refusal(&error), Some(&StreamError::NoGatewaySeed));
        // The client's body was not touched.
        assert_eq!(wrapped.inner.size_hint().exact(), Some(body.len() as u64));
        let again = wrapped
            .frame()
            .await
            .expect("a frame")
            .expect_err("an error");
        assert_eq!(refusal(&again), Some(&StreamError::Failed));

        // Set after the body was made and before it was read: as it should be.
        let cell = SeedCell::default();
        let wrapped = Resigned::new(
            Full::new(Bytes::from(body)),
            client(false),
            Arc::clone(&cell),
        );
        assert!(cell
            .set(GatewaySeed::new(key_b(), GATEWAY_DATE, SCOPE_B, SEED_B))
            .is_ok());
        let drained = drain(wrapped).await;
        assert!(drained.error.is_none());
        assert_eq!(
            data_of(&verify_b(&drained.data, false).unwrap()),
            data(0, 10)
        );
    }

    #[tokio::test]
    async fn oversized_chunks_and_bad_framing_fail() {
        let signature = "0".repeat(64);
        let big = format!("100001;chunk-signature={signature}\r\n");
        let drained = drain(Resigned::new(
            in_frames(big.as_bytes(), 7, None),
            client(false),
            cell_b(),
        ))
        .await;
        assert_eq!(
            refusal(&drained.error.expect("an error")),
            Some(&StreamError::Refused(ChunkedError::ChunkTooLarge {
                size: 0x100001,
                max: 1 << 20
            }))
        );
        assert!(drained.data.is_empty());

        let unsigned = "5\r\nhello\r\n0\r\n\r\n";
        let drained = drain(Resigned::new(
            in_frames(unsigned.as_bytes(), 100, None),
            client(false),
            cell_b(),
        ))
        .await;
        assert!(matches!(
            refusal(&drained.error.expect("an error")),
            Some(StreamError::Refused(ChunkedError::Malformed(_)))
        ));
        assert!(drained.data.is_empty());

        // A -TRAILER body read as one without: refused at the trailer.
        let body = signed_body(&[10], Some(&checksum()));
        let drained = drain(Resigned::new(
            in_frames(&body, 13, None),
            client(false),
            cell_b(),
        ))
        .await;
        assert!(matches!(
            refusal(&drained.error.expect("an error")),
            Some(StreamError::Refused(ChunkedError::Malformed(_)))
        ));
    }

    #[tokio::test]
    async fn http_trailers_and_inner_errors_pass_on() {
        let body = signed_body(&[33, 44], Some(&checksum()));
        let mut trailers = HeaderMap::new();
        trailers.insert("x-transfer-trailer", http::HeaderValue::from_static("kept"));
        let wrapped = Resigned::new(
            in_frames(&body, 5, Some(trailers.clone())),
            client(true),
            cell_b(),
        );
        let drained = drain(wrapped).await;
        assert!(drained.error.is_none(), "{:?}", drained.error);
        assert_eq!(drained.trailers, Some(trailers));
        assert_eq!(
            data_of(&verify_b(&drained.data, true).unwrap()),
            [data(0, 33), data(1, 44)].concat()
        );

        // The client's body failing: its error, as it came.
        let frames: Vec<InnerFrame> = vec![
            Ok(Frame::data(Bytes::copy_from_slice(&body[..20]))),
            Err(std::io::Error::other("the client went away")),
        ];
        let inner = StreamBody::new(futures_util::stream::iter(frames));
        let drained = drain(Resigned::new(inner, client(true), cell_b())).await;
        let error = drained.error.expect("an error");
        assert!(error.downcast_ref::<std::io::Error>().is_some(), "{error}");
    }

    #[test]
    fn payload_forms() {
        assert_eq!(
            streaming_trailer("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            Some(false)
        );
        assert_eq!(
            streaming_trailer("STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"),
            Some(true)
        );
        assert_eq!(
            streaming_trailer("STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
            None
        );
        assert_eq!(streaming_trailer("UNSIGNED-PAYLOAD"), None);
        let side = client(true);
        assert_eq!(side.scope, SCOPE_A);
        assert_eq!(side.seed, SEED_A);
        assert_eq!(side.amz_date, AMZ_DATE);
        assert!(side.trailer);
        assert_eq!(side.max_chunk, DEFAULT_MAX_CHUNK);
    }
}
