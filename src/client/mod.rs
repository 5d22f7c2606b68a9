//! The client's half of fencing, for Rust clients of a fencegate gateway
//! (feature `client`; no dependency beyond the library's own).
//!
//! A client takes a token from its lock service at each grant, sends it with
//! every request while it holds the lock, and never computes one. Three
//! pieces do that:
//!
//! - [`TokenSource`]: where the current token comes from. A plain `u64` for a
//!   token held for a whole task, or a [`LockToken`] that the code holding the
//!   lock updates at each grant, renewal and loss.
//! - [`FencingTokenLayer`]: a tower layer over any HTTP client service
//!   (`Service<http::Request<B>>`: hyper-util's client, a `reqwest` wrapper, a
//!   tower stack) that sets the token header on every request, and refuses
//!   to send ([`SendError::LockLost`]) once the source knows the lock is lost.
//!   Under credential custody, sign after this layer: the header must be
//!   among the signed ones.
//! - [`FencingError::from_answer`]: the gateway's refusals (`stale_token`,
//!   `version_conflict`, `version_unknown`, `missing_token`, ...) read from
//!   its JSON, an S3 error document (`--store s3`) or an Azure one
//!   (`--store azure`), with [`FencingError::retry`] saying what to do next.
//!
//! ```
//! use std::convert::Infallible;
//! use fencegate::client::{FencingError, FencingTokenLayer, LockToken, Retry, SendError};
//! use http::{Request, Response, StatusCode};
//! use tower::{service_fn, Service, ServiceExt};
//! use tower_layer::Layer;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // A stand-in for an HTTP client (hyper-util's, say): it answers as a
//! // gateway whose fence for /b/report is at 35.
//! let client = service_fn(|request: Request<String>| async move {
//!     let token = request.headers()["x-fencing-token"].to_str().unwrap().to_owned();
//!     assert_eq!(token, "34");
//!     let body = r#"{"error":"stale_token","resource":"/b/report","token":34,"highest":35,"reason":"below_highest"}"#;
//!     Ok::<_, Infallible>(Response::builder().status(409).body(body.to_owned()).unwrap())
//! });
//!
//! let lock = LockToken::new();
//! lock.grant(34, None); // the token the lock service handed out with the grant
//! let mut fenced = FencingTokenLayer::new(lock.clone()).layer(client);
//!
//! let answer = fenced.ready().await.unwrap()
//!     .call(Request::put("http://gateway/b/report").body("rows".to_owned()).unwrap())
//!     .await.unwrap();
//! let refusal = FencingError::from_answer(answer.status(), answer.headers(), answer.body().as_bytes());
//! match refusal {
//!     Some(error @ FencingError::StaleToken { highest: Some(35), .. }) => {
//!         assert_eq!(error.retry(), Retry::Never); // the lock is gone: take it again
//!         lock.lose("the gateway saw a higher token");
//!     }
//!     other => panic!("{other:?}"),
//! }
//!
//! // Known lost: nothing more is sent.
//! let refused = fenced.ready().await.unwrap()
//!     .call(Request::put("http://gateway/b/report").body(String::new()).unwrap())
//!     .await;
//! assert!(matches!(refused, Err(SendError::LockLost(_))));
//! # }
//! ```

mod answer;
mod layer;
mod token_source;

pub use answer::{FencingError, Retry};
pub use layer::{FenceFuture, FencingToken, FencingTokenLayer, SendError};
pub use token_source::{LockLost, LockToken, TokenSource};
