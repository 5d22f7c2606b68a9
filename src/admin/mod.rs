//! Administration of fences, the library's side: what an operator's request
//! says ([`input`]: the key, the queries and bodies of the admin plane,
//! parsed for the gateway's routes or an admin plane of your own) and what
//! it leaves behind ([`audit`]: the audit log's entries).
//!
//! The other layers of an admin write own their part: the fence table's
//! freeze and retire rules in `fences/admin.rs`, each store's durable
//! change beside its claims, the HTTP routes and bearer authentication in
//! the gateway's `admin` module.

pub mod audit;
pub mod input;
