//! The gateway's HTTP/1.1 engine: client and backend connections driven
//! with the heads and framing of [`crate::http1`] (httparse, strict), each
//! head parsed once, bodies relayed with the framing already checked, no
//! second task or channel per request.
//!
//! - `encode`: request heads written for the backend (the client's field
//!   lines with the gateway's edits), chunk framing.
//! - `connection`: one connection to the backend, sending a request and
//!   reading its response head in the request's own task.
//! - `body`: reading a body off a connection as its framing says (both
//!   sides).
//! - `response_body`: the response body, read from that connection, which
//!   it gives back to the pool at its end.
//! - `outbound`: writing a message, head and body, in as few writes as the
//!   data allows (both sides).
//! - `server`: a client's HTTP/1.x connection served to its end: heads
//!   read and checked, request bodies read as the proxy polls them,
//!   responses written.

mod body;
mod connection;
mod encode;
mod outbound;
mod response_body;
mod server;

pub(crate) use self::connection::{BackendRequest, BackendSendError, Connection, Failed, Stream};
pub(crate) use self::encode::{write_request_head, Edits, Fields, Outgoing};
pub(crate) use self::outbound::WriteError;
pub(crate) use self::response_body::BackendBody;
pub(crate) use self::server::{serve, CarriesFields, Handler, Limits, RequestBody};
