//! Every body wrapper of the data plane, by direction. A request body goes
//! client → gateway → backend, a response body backend → gateway → client;
//! each layer below is one wrapper, outermost first.
//!
//! Request bodies ([`request`]):
//! - [`ToBackend`](request::ToBackend): what the backend connection sends;
//!   records when the body was sent in full (the response-head deadline
//!   starts there) and stops at the end of the lease (shared fences);
//! - [`Counted`](request::Counted): its bytes, for the access log;
//! - [`DrainOnDrop`](request::DrainOnDrop): a small rest read and thrown
//!   away after an early answer, so that the client keeps its connection;
//! - a [`StallTimeout`](super::deadlines::StallTimeout) on the client's side;
//! - [`IncomingBody`](request::IncomingBody): the body as the client's
//!   server gives it, hyper's (HTTP/2) or the engine's (HTTP/1.x).
//!
//! Response bodies ([`response`]):
//! - [`Relayed`](super::exchange::Relayed) (in `exchange.rs`, beside the
//!   record it carries): what the client's server sends; counts bytes and
//!   cuts, stops at the end of the lease, and carries the request's
//!   [`Exchange`](super::exchange::Exchange) to its end;
//! - the fencing layer's `ResponseBody`: keeps the request in flight until
//!   its response has been relayed;
//! - [`FromProxy`](response::FromProxy): the proxy's answer, with the
//!   backend's header lines when they are not in the response's map;
//! - a [`StallTimeout`](super::deadlines::StallTimeout) on the backend's
//!   side;
//! - the engine's `BackendBody`: read off a backend connection, which it
//!   returns to the pool at the end.
//!
//! Each is kept as small as it can be: bodies are moved several times per
//! request, and a larger body type measurably cost every request
//! (docs/BENCHMARKS.md); what is rarely needed sits behind a pointer.

pub(crate) mod request;
pub(crate) mod response;
