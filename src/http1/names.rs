//! Field names (and tokens such as `chunked`) compared as RFC 9110 §5.1
//! says, without regard to case, against a name the gateway knows in
//! lowercase: [`eq_lowercase`], which lives in [`crate::head`] so that the
//! table readers built without the engine compare names the same way.

pub use crate::head::eq_lowercase;
