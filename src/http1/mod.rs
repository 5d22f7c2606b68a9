//! HTTP/1.1 messages as the gateway reads them, without I/O (feature
//! `http1`): heads parsed strictly into the `http` crate's parts
//! ([`head`]), and where each body ends ([`framing`], RFC 9112 §6 and
//! §7.1, the rules request smuggling lives in). The gateway's engine
//! drives them over its connections; the differential fuzz target holds
//! them against hyper's reading of the same bytes.

pub mod framing;
pub mod head;
pub mod names;
