//! `--chain-observe gateway-head`: the `HEAD` the gateway sends itself to
//! learn an object's version before a chained write
//! ([`VersionReader`](crate::chain::VersionReader)), through the same proxy
//! (pool, TLS, timeouts) as the requests it forwards.

use std::future::Future;
use std::pin::Pin;

use axum::body::Body;
use http::header::{AUTHORIZATION, COOKIE, HOST};
use http::{HeaderMap, Method, Request, Uri};
use tower_service::Service;

use super::proxy::Proxy;
use crate::chain::{HeadAnswer, VersionReader};

/// Reads versions with `HEAD`s sent through the gateway's proxy.
#[derive(Clone)]
pub(crate) struct HeadThroughProxy(pub(crate) Proxy);

impl VersionReader for HeadThroughProxy {
    fn head(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Pin<Box<dyn Future<Output = HeadAnswer> + Send>> {
        let mut head = Request::new(Body::empty());
        *head.method_mut() = Method::HEAD;
        *head.uri_mut() = uri.clone();
        // The client's credentials, which let it write the object, let the
        // gateway read it; nothing else of the write's head.
        for name in [HOST, AUTHORIZATION, COOKIE] {
            for value in headers.get_all(&name) {
                head.headers_mut().append(name.clone(), value.clone());
            }
        }
        let mut proxy = self.0.clone();
        let path = uri.path().to_owned();
        Box::pin(async move {
            let Ok(answer) = proxy.call(head).await;
            if answer.status().is_server_error() {
                return Err(format!(
                    "the gateway's HEAD of {path} was answered {}",
                    answer.status()
                ));
            }
            let (parts, _body) = answer.into_parts();
            Ok((parts.status, parts.headers))
        })
    }
}
