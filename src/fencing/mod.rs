//! Step 5 of the data path: the tower middleware that puts steps 1 to 4 in
//! front of any service, in the tower-http shape: [`FencingLayer`],
//! [`Fencing`], [`ResponseFuture`], and a [`ResponseBody`] that keeps the
//! request in flight until the response has been read.
//!
//! For each request, in this order:
//!
//! 1. token syntax, and in `header` scope `X-Fencing-Lock`: 400 `invalid_token`;
//! 2. the path, for fenced requests and writes: 400 `invalid_path`;
//! 3. a write without a token: 428 `missing_token` (unless unfenced writes are
//!    allowed);
//! 4. admission on the fence key: 409 `stale_token`, or 503
//!    `fence_store_unavailable` if the raise could not be made durable;
//! 5. with chained writes ([`FencingLayer::chained_writes`]), the version a
//!    write may carry (428 `version_unknown`, `precondition_not_chainable`)
//!    and, once the store answered, a refused condition (409
//!    `version_conflict`).
//!
//! Refused requests never reach the inner service. Unfenced reads pass
//! untouched and never wait. The service keeps `Error = S::Error`: refusals
//! are responses, because an `Err` would drop the connection unanswered.
//!
//! ```
//! use axum::{body::Body, routing::put, Router};
//! use fencegate::{Fences, FencingLayer};
//! use http::{Request, StatusCode};
//! use tower::ServiceExt;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let app = Router::new()
//!     .route("/{*path}", put(|| async { StatusCode::NO_CONTENT }))
//!     .layer(FencingLayer::new(Fences::in_memory()));
//!
//! let put = |token: &str| {
//!     Request::put("/bucket/report").header("x-fencing-token", token).body(Body::empty()).unwrap()
//! };
//! let unfenced = Request::put("/bucket/report").body(Body::empty()).unwrap();
//! assert_eq!(app.clone().oneshot(put("34")).await.unwrap().status(), StatusCode::NO_CONTENT);
//! assert_eq!(app.clone().oneshot(put("33")).await.unwrap().status(), StatusCode::CONFLICT);
//! assert_eq!(app.clone().oneshot(put("x")).await.unwrap().status(), StatusCode::BAD_REQUEST);
//! assert_eq!(app.clone().oneshot(unfenced).await.unwrap().status(), StatusCode::PRECONDITION_REQUIRED);
//! # });
//! ```

mod body;
#[cfg(test)]
mod chain_property;
mod chained;
mod config;
mod forward;
mod future;
mod layer;
mod service;

pub use self::body::ResponseBody;
pub use self::config::{Enforce, WouldRefuse, DEFAULT_SAFE_METHODS, TOKEN_HEADER};
#[cfg(feature = "gateway")]
pub(crate) use self::forward::Forward;
#[cfg(feature = "gateway")]
pub(crate) use self::future::refusal_response;
pub use self::future::ResponseFuture;
pub use self::layer::FencingLayer;
#[cfg(feature = "gateway")]
pub(crate) use self::service::Fenced;
pub use self::service::Fencing;
