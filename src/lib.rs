//! # fencegate
//!
//! Fencing tokens at the storage edge. A lock with a lease cannot stop a
//! holder that was paused past its lease (GC, SIGSTOP, a page fault) or cut
//! off by the network from writing after the next holder did. The fix is a
//! *fencing token*: a number that grows with every grant of the lock, sent with
//! every request, and checked by the storage, which refuses any token lower
//! than the highest it has already seen for the resource. Most storage cannot
//! check tokens; fencegate does it for them, as an HTTP gateway or as a tower
//! middleware in a Rust service.
//!
//! # Layout, in the order a request meets it
//!
//! 0. [`head`]: what every step below reads of a request (method, target,
//!    header fields by name), provided by `http::Request` and by the
//!    gateway's HTTP/1.1 engine, which reads fields where they arrived;
//!    and [`misreading`]: what a store could read as another operation
//!    (a method override, `TRACE`, the asterisk form), refused before any
//!    step reads the request.
//! 1. [`token`]: read the token header (1 to 20 ASCII digits, one header line).
//! 2. [`key`]: derive the fence key from the normalised path, a prefix of it,
//!    or the `X-Fencing-Lock` header, so that no alias splits a fence; and
//!    [`reach`]: every other object a write changes (a WebDAV `MOVE`'s
//!    destination, what a collection `DELETE` removes, the keys an S3
//!    `DeleteObjects` lists), or a refusal when they cannot be told; what
//!    a request does (its method, its query's operation, `Depth`,
//!    `Overwrite`, `Destination`) is read once, in `reach/operation.rs`,
//!    and nowhere else in `reach`.
//! 3. [`fences`]: admission. Refuse below the highest, raise the highest, wait
//!    until no lower token is in flight on the key, let the request through
//!    holding an [`InFlight`] guard; on several keys at once, all or none. A token that would raise a fence is
//!    first confirmed by its [`issuer`], if one is configured (token trust).
//! 4. [`store`]: claim the token where fences live before the request it
//!    admits goes on: a durable raise (redb with group commit in `disk`
//!    state), nothing (memory state), or a compare-and-set plus an in-flight
//!    record that every instance sharing an etcd prefix sees (feature
//!    `etcd`, `docs/SHARED.md`); admin writes too, each with its
//!    [`admin::audit`] entry.
//! 5. [`chain`]: chained writes, where the store can check a version: a
//!    write carries a precondition on the version its object had before any
//!    higher token existed, so the store refuses it if it arrives late.
//! 6. [`fencing`]: the tower middleware wiring steps 1 to 5 in front of any
//!    `Service<http::Request<B>>` (refusing, or with [`fencing::Enforce`]
//!    only reporting what it would refuse); [`refusal`] holds the JSON
//!    answers.
//!
//! Before step 1, in the gateway, credential custody (feature `custody`)
//! reads the store's wire formats from `dialect`: the store's dialect
//! (`dialect::StoreKind`), the gateway's answers in it (`dialect::answer`),
//! the operation tables of deny by default (`dialect::s3_operations`,
//! `dialect::azure_operations`, `dialect::plain_operations`), and SigV4,
//! aws-chunked and Shared Key without I/O (`dialect::sigv4`,
//! `dialect::chunked`, `dialect::shared_key`), with which the gateway
//! verifies what a client signed and signs what it forwards.
//!
//! Beside the path, `http1` (feature `http1`) reads HTTP/1.1 messages
//! without I/O: heads parsed strictly (fields kept where they were read)
//! and where each body ends (RFC 9112),
//! refusing whatever another parser could read differently; the gateway's
//! engine reads every HTTP/1.1 message with it. [`admin`] holds the
//! library's side of administration:
//! [`admin::input`] parses the admin plane's keys, queries and bodies, for
//! the gateway's admin routes or an admin plane of your own;
//! `client` (feature `client`) is the other side of the wire: what a Rust
//! client of the gateway needs to send its token and read the refusals;
//! `client_tls` (feature `client-tls`) reads the TLS files and passwords with
//! which the gateway reaches etcd, the token issuers and an `https://`
//! backend, and a private module speaks etcd's JSON API for the etcd store
//! and the etcd issuer alike.
//!
//! The gateway binary (feature `gateway`) adds the reverse proxy, the embedded
//! backend, the admin plane and the CLI on top (its files, in a request's
//! order: the `gateway` module's docs); `src/main.rs` is the command line,
//! logging and signals. The library does not depend on any of it:
//! `cargo build --lib --no-default-features` builds steps 1 to 6 with the
//! in-memory store only. This is the one description of the layout; the
//! docs link here.
//!
//! # Example: an axum service that fences itself
//!
//! ```
//! use axum::{body::Body, routing::put, Router};
//! use fencegate::{Fences, FencingLayer};
//! use http::{Request, StatusCode};
//! use tower::ServiceExt;
//!
//! async fn store_object() -> StatusCode {
//!     StatusCode::NO_CONTENT
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let fences = Fences::in_memory(); // or Fences::open("./fences")? for durable fences
//! let app = Router::new()
//!     .route("/{*path}", put(store_object))
//!     .layer(FencingLayer::new(fences.clone()));
//!
//! let write = |token: u64| {
//!     Request::put("/reports/q3.csv")
//!         .header("X-Fencing-Token", token)
//!         .body(Body::from("data"))
//!         .unwrap()
//! };
//! // Client 2 took the lock with token 34 and writes.
//! let current = app.clone().oneshot(write(34)).await.unwrap();
//! assert_eq!(current.status(), StatusCode::NO_CONTENT);
//! // Client 1 wakes from its pause with token 33: refused, never stored.
//! let stale = app.clone().oneshot(write(33)).await.unwrap();
//! assert_eq!(stale.status(), StatusCode::CONFLICT);
//! assert_eq!(stale.headers()["x-fencing-highest"], "34");
//! assert_eq!(fences.highest("/reports/q3.csv"), Some(34));
//! # });
//! ```
//!
//! # What is guaranteed
//!
//! Per fence key: a request whose token is below the highest admitted never
//! reaches the inner service; requests reach it in non-decreasing token
//! order, each lower-token request having finished before a higher one starts;
//! and (with a durable store) an admitted token is never forgotten, also
//! across a crash. What it cannot do is recall a request that has already
//! been handed on: see the README for the residual window. With fences
//! shared through etcd (feature `etcd`) the same holds across every holder
//! of a prefix; the ordering across holders rests on the timing assumptions
//! stated in `docs/SHARED.md` (stale refusal and durability need none).

#![deny(unsafe_code, unreachable_pub)]
#![warn(missing_docs)]

// In the order of the layout above (not alphabetical).
pub mod head;

pub mod misreading;

pub mod token;

pub mod key;

pub mod reach;

pub mod fences;

pub mod issuer;

pub mod store;

pub mod admin;

pub mod chain;
pub mod fencing;

pub mod refusal;

#[cfg(feature = "custody")]
pub mod dialect;
/// The name [`dialect`] had before it said what it holds (wire formats,
/// not custody, which is the gateway's): kept for one release.
#[cfg(feature = "custody")]
#[doc(hidden)]
pub use dialect as custody;

#[cfg(feature = "http1")]
pub mod http1;

#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "client-tls")]
pub mod client_tls;
#[cfg(feature = "etcd-http")]
mod etcd_http;

pub use crate::fences::{AdmitAllError, AdmitError, Fences, InFlight, Stale, StaleReason};
pub use crate::fencing::{Fencing, FencingLayer};
pub use crate::key::Scope;

#[cfg(feature = "gateway")]
pub mod gateway;
