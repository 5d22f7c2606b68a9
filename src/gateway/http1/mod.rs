//! The gateway's HTTP/1.1 engine, built on httparse: each head parsed once,
//! bodies relayed with the framing already checked, no second task or
//! channel per request.
//!
//! - `framing`: where a message's body ends (RFC 9112 §6 and §7.1), the
//!   rules request smuggling lives in, in one file.
//! - `head`: request heads written for the backend, response heads read
//!   from it.
//! - `connection`: one connection to the backend, sending a request and
//!   reading its response head in the request's own task.
//! - `response_body`: the response body, read from that connection, which
//!   it gives back to the pool at its end.

mod connection;
pub(crate) mod framing;
mod head;
mod response_body;

pub(crate) use self::connection::{Connection, Failed, Request, SendError, Stream};
pub(crate) use self::response_body::ResponseBody;
