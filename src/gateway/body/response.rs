//! Response bodies, from the backend connection to the proxy's answer
//! ([`FromProxy`]); the body the client's server sends, which carries the
//! exchange, is [`Relayed`](crate::gateway::exchange::Relayed).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::gateway::deadlines::StallTimeout;
use crate::gateway::engine;
use crate::http1::head::FieldLines;

pin_project! {
    /// A response body as the proxy hands it up: the backend's, with the
    /// backend's header lines when they were not put in the response's map
    /// (the HTTP/1.1 engine writes them to the client from there, HTTP/2
    /// clients get them in the map: `data_plane.rs`), or one the gateway
    /// made.
    pub struct FromProxy {
        #[pin]
        source: ProxyBody,
    }
}

pin_project! {
    #[project = ProxyBodyProj]
    enum ProxyBody {
        // Boxed, body and lines in one allocation: the response is moved
        // several times on its way to the client, and a pointer copies
        // cheaper than both.
        Backend { backend: Box<BackendAnswer> },
        Made { #[pin] body: Body },
    }
}

/// The backend's answer past its head.
struct BackendAnswer {
    /// Its body, which fails if it stalls (its connection is then not
    /// reused).
    body: StallTimeout<engine::BackendBody>,
    fields: Option<FieldLines>,
}

impl FromProxy {
    /// The backend's `body`, and its head's lines unless they are in the
    /// response's map.
    pub(crate) fn backend(
        body: StallTimeout<engine::BackendBody>,
        fields: Option<FieldLines>,
    ) -> Self {
        FromProxy {
            source: ProxyBody::Backend {
                backend: Box::new(BackendAnswer { body, fields }),
            },
        }
    }

    /// The backend's header lines, if they travel here.
    pub(crate) fn fields(&self) -> Option<&FieldLines> {
        match &self.source {
            ProxyBody::Backend { backend } => backend.fields.as_ref(),
            ProxyBody::Made { .. } => None,
        }
    }

    /// The backend's header lines, taken (to be put in a map).
    pub(crate) fn take_fields(&mut self) -> Option<FieldLines> {
        match &mut self.source {
            ProxyBody::Backend { backend } => backend.fields.take(),
            ProxyBody::Made { .. } => None,
        }
    }
}

impl From<Body> for FromProxy {
    fn from(body: Body) -> Self {
        FromProxy {
            source: ProxyBody::Made { body },
        }
    }
}

impl http_body::Body for FromProxy {
    type Data = Bytes;
    type Error = axum::Error;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        match self.project().source.project() {
            ProxyBodyProj::Backend { backend } => Pin::new(&mut backend.body)
                .poll_frame(cx)
                .map_err(axum::Error::new),
            ProxyBodyProj::Made { body } => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.source {
            ProxyBody::Backend { backend } => backend.body.is_end_stream(),
            ProxyBody::Made { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            ProxyBody::Backend { backend } => backend.body.size_hint(),
            ProxyBody::Made { body } => body.size_hint(),
        }
    }
}
