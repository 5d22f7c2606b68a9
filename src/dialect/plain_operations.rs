//! The WebDAV and plain HTTP operations the gateway forwards, as data
//! (SPEC "Deny by default"), beside [`s3_operations`](super::s3_operations)
//! and in its shape: each recognised by its method (as registered) and the
//! WebDAV fields that change what it does, with the access it needs under
//! custody, what it reaches (and so what is fenced), and the fields it
//! honours. `webdav` is RFC 4918 as Apache's mod_dav serves it; `http` is
//! plain RFC 9110 methods (and `PATCH`) on one object.
//!
//! A request whose method no row of its dialect lists, or that carries a
//! WebDAV field ([`DAV_FIELDS`]) its row does not take, is refused before
//! anything is forwarded ([`recognise`]): under custody always (501
//! `not_implemented`), without custody when it is a write (400
//! `unfenceable_write`, unless `--allow-unfenced-writes`). A `Destination`
//! on a `PUT`, or a `Depth` sent to a plain HTTP store, is not something
//! the gateway fenced for; a store that reads it anyway would do what the
//! gateway neither authorised nor fenced.
//!
//! Only the fields that change what a request reaches are checked
//! (`Timeout`, `Content-Range` and the like change nothing the fence
//! cares about, and are listed for the reader). What is fenced is read by
//! [`reach`](crate::reach), the one reader; a test holds each row's
//! [`Reach`] to it.
//!
//! `docs/WEBDAV_OPERATIONS.md` shows both tables, rendered by [`markdown`]
//! and checked against them by a test.
//!
//! ```
//! use fencegate::dialect::plain_operations::{recognise, PlainDialect, Need};
//!
//! let copy = recognise(PlainDialect::Webdav, "COPY", &["destination", "overwrite"]).unwrap();
//! assert_eq!(copy.need, Need::Write);
//! // WebDAV methods are no plain HTTP operation, nor a Destination on a PUT.
//! assert!(recognise(PlainDialect::Http, "MKCOL", &[]).is_err());
//! assert!(recognise(PlainDialect::Webdav, "PUT", &["destination"]).is_err());
//! ```

/// The two dialects this table covers (`--store webdav`, `--store http`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainDialect {
    /// A WebDAV server (RFC 4918; Apache mod_dav).
    Webdav,
    /// Any HTTP store that speaks plain RFC 9110.
    Http,
}

/// The access an operation needs under custody, on every object it
/// reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// `read`.
    Read,
    /// `write` (on a `COPY`'s source: `read`).
    Write,
}

/// What an operation reaches, and so what the fence covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The object its path names.
    Object,
    /// Its path and, on a collection, everything under it (a `DELETE`).
    Subtree,
    /// Its path, and everything under it when `Depth` is `1` or `infinity`
    /// (a `PROPPATCH`).
    SubtreeWithDepth,
    /// Its path, and everything under it when `Depth` is `infinity` or
    /// absent (a `LOCK`, which is `Depth: infinity` without the field;
    /// mod_dav refuses `Depth: 1` on it).
    SubtreeAtInfinity,
    /// Its path (read) and the `Destination`'s subtree (a `COPY`; only
    /// the destination itself with `Depth: 0` and `Overwrite: F`).
    SourceAndDestination,
    /// Both subtrees, the path's and the `Destination`'s (a `MOVE`).
    BothSubtrees,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    /// The method, as registered.
    pub method: &'static str,
    /// The access it needs.
    pub need: Need,
    /// What it reaches.
    pub reach: Reach,
    /// The [`DAV_FIELDS`] it takes.
    pub fields: &'static [&'static str],
    /// Other fields it honours that change nothing the fence covers (for
    /// the reader; not checked).
    pub honours: &'static [&'static str],
}

/// The WebDAV fields that change what a request does or reaches (RFC 4918
/// §10): a request may carry only those of its row. All are among
/// [`DECIDING_FIELDS`](crate::misreading::DECIDING_FIELDS).
pub const DAV_FIELDS: [&str; 5] = ["depth", "destination", "overwrite", "if", "lock-token"];

/// [`DAV_FIELDS`] as a mask of [`DecidingFields`](crate::misreading::DecidingFields)
/// (bit `i`: `DECIDING_FIELDS[i]`): a request that carries none of them
/// is recognised by its method alone.
pub const DAV_FIELDS_MASK: u16 = 0b11_1110;

/// Whether a request of `method` that carries none of [`DAV_FIELDS`] is an
/// operation of `dialect`: [`recognise`] without the search, for the
/// methods most requests have.
pub fn plain_method(dialect: PlainDialect, method: &http::Method) -> bool {
    match *method {
        http::Method::GET
        | http::Method::HEAD
        | http::Method::OPTIONS
        | http::Method::PUT
        | http::Method::POST
        | http::Method::DELETE => true,
        _ => recognise(dialect, method.as_str(), &[]).is_ok(),
    }
}

use PlainDialect::{Http, Webdav};

/// `--store webdav`'s rows, in the order `docs/WEBDAV_OPERATIONS.md`
/// shows them: RFC 4918 as mod_dav serves it. Every method may carry
/// `If` (§10.4) but `OPTIONS` and `PROPFIND`, which no store reads it on.
const WEBDAV: [Operation; 13] = [
    row("GET", Need::Read, Reach::Object, &["if"], &["range"]),
    row("HEAD", Need::Read, Reach::Object, &["if"], &[]),
    row("OPTIONS", Need::Read, Reach::Object, &[], &[]),
    row("PROPFIND", Need::Read, Reach::Object, &["depth"], &[]),
    row(
        "PUT",
        Need::Write,
        Reach::Object,
        &["if"],
        &["content-range"],
    ),
    row("POST", Need::Write, Reach::Object, &["if"], &[]),
    row("DELETE", Need::Write, Reach::Subtree, &["depth", "if"], &[]),
    row(
        "PROPPATCH",
        Need::Write,
        Reach::SubtreeWithDepth,
        &["depth", "if"],
        &[],
    ),
    row("MKCOL", Need::Write, Reach::Object, &["if"], &[]),
    row(
        "COPY",
        Need::Write,
        Reach::SourceAndDestination,
        &["destination", "overwrite", "depth", "if"],
        &[],
    ),
    row(
        "MOVE",
        Need::Write,
        Reach::BothSubtrees,
        &["destination", "overwrite", "depth", "if"],
        &[],
    ),
    row(
        "LOCK",
        Need::Write,
        Reach::SubtreeAtInfinity,
        &["depth", "if"],
        &["timeout"],
    ),
    row(
        "UNLOCK",
        Need::Write,
        Reach::Object,
        &["lock-token", "if"],
        &[],
    ),
];

/// `--store http`'s rows: RFC 9110's methods (and RFC 5789's `PATCH`) on
/// one object, no WebDAV field. A `DELETE` still reaches everything under
/// its path unless `--flat-keys`: a plain store may have collections.
const HTTP: [Operation; 7] = [
    row("GET", Need::Read, Reach::Object, &[], &["range"]),
    row("HEAD", Need::Read, Reach::Object, &[], &[]),
    row("OPTIONS", Need::Read, Reach::Object, &[], &[]),
    row("PUT", Need::Write, Reach::Object, &[], &["content-range"]),
    row("POST", Need::Write, Reach::Object, &[], &[]),
    row("PATCH", Need::Write, Reach::Object, &[], &[]),
    row("DELETE", Need::Write, Reach::Subtree, &[], &[]),
];

const fn row(
    method: &'static str,
    need: Need,
    reach: Reach,
    fields: &'static [&'static str],
    honours: &'static [&'static str],
) -> Operation {
    Operation {
        method,
        need,
        reach,
        fields,
        honours,
    }
}

/// `dialect`'s rows, in the table's order.
pub fn operations(dialect: PlainDialect) -> &'static [Operation] {
    match dialect {
        Webdav => &WEBDAV,
        Http => &HTTP,
    }
}

/// Why a request was not recognised: the sentence of its refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotRecognised(pub String);

/// The operation a request of `method` carrying the WebDAV fields
/// `fields` (lowercase names among [`DAV_FIELDS`]) is in `dialect`; `Err`
/// names what is not understood.
pub fn recognise(
    dialect: PlainDialect,
    method: &str,
    fields: &[&str],
) -> Result<&'static Operation, NotRecognised> {
    let operation = operations(dialect)
        .iter()
        .find(|op| op.method == method)
        .ok_or_else(|| {
            NotRecognised(match dialect {
                Http => format!(
                    "{method} is no operation of a plain HTTP store (--store http); a WebDAV server is --store webdav"
                ),
                Webdav => format!("{method} is no WebDAV operation the gateway forwards"),
            })
        })?;
    match fields
        .iter()
        .find(|field| !operation.fields.contains(field))
    {
        Some(field) => Err(NotRecognised(format!(
            "{method} does not take the field {field}{}",
            match dialect {
                Http => " in a plain HTTP store (--store http; a WebDAV server is --store webdav)",
                Webdav => "",
            }
        ))),
        None => Ok(operation),
    }
}

/// `dialect`'s table as Markdown, for `docs/WEBDAV_OPERATIONS.md`.
pub fn markdown(dialect: PlainDialect) -> String {
    let mut out = String::from(
        "| method | needs | reaches (fenced) | WebDAV fields it takes | also honours |\n|---|---|---|---|---|\n",
    );
    let list = |items: &[&str]| {
        items
            .iter()
            .map(|item| format!("`{item}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for op in operations(dialect) {
        let need = match op.need {
            Need::Read => "read",
            Need::Write if op.reach == Reach::SourceAndDestination => {
                "read (source), write (destination)"
            }
            Need::Write => "write",
        };
        let reach = match op.reach {
            Reach::Object => "its path",
            Reach::Subtree => "its path and everything under it",
            Reach::SubtreeWithDepth => "its path; everything under it with `Depth: 1` or `infinity`",
            Reach::SubtreeAtInfinity => "its path; everything under it without `Depth` or with `Depth: infinity`",
            Reach::SourceAndDestination => {
                "its path; the destination and everything under it (only the destination with `Depth: 0` and `Overwrite: F`)"
            }
            Reach::BothSubtrees => "its path and the destination, each with everything under it",
        };
        out.push_str(&format!(
            "| `{}` | {need} | {reach} | {} | {} |\n",
            op.method,
            list(op.fields),
            list(op.honours),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::misreading::{DECIDING_FIELDS, KNOWN_METHODS};

    #[test]
    fn every_row_is_recognised_with_its_fields() {
        for dialect in [Webdav, Http] {
            for op in operations(dialect) {
                assert_eq!(recognise(dialect, op.method, op.fields), Ok(op));
            }
        }
    }

    #[test]
    fn anything_else_is_refused_and_named() {
        let refused = [
            recognise(Http, "PROPFIND", &[]),
            recognise(Http, "MOVE", &["destination"]),
            recognise(Http, "DELETE", &["depth"]),
            recognise(Http, "PUT", &["if"]),
            recognise(Webdav, "PATCH", &[]),
            recognise(Webdav, "PUT", &["destination"]),
            recognise(Webdav, "UNLOCK", &["depth"]),
            recognise(Webdav, "get", &[]),
            recognise(Webdav, "LOCK", &["lock-token"]),
        ];
        for found in refused {
            let error = found.expect_err("refused");
            assert!(!error.0.is_empty());
        }
    }

    #[test]
    fn the_tables_fields_and_methods_are_the_gateways() {
        let mut mask = 0u16;
        for field in DAV_FIELDS {
            let at = DECIDING_FIELDS.iter().position(|known| known == field);
            mask |= 1 << at.expect("a deciding field");
        }
        assert_eq!(mask, DAV_FIELDS_MASK);
        for method in KNOWN_METHODS {
            let method = http::Method::from_bytes(method.as_bytes()).expect("method");
            for dialect in [Webdav, Http] {
                assert_eq!(
                    plain_method(dialect, &method),
                    recognise(dialect, method.as_str(), &[]).is_ok(),
                    "{method}"
                );
            }
            // Every method some dialect lists is in one of these two
            // tables but PATCH (http) and the WebDAV ones (webdav).
            assert!(
                recognise(Webdav, method.as_str(), &[]).is_ok()
                    || recognise(Http, method.as_str(), &[]).is_ok(),
                "{method}"
            );
        }
        for dialect in [Webdav, Http] {
            for op in operations(dialect) {
                assert!(KNOWN_METHODS.contains(&op.method), "{}", op.method);
                assert!(op.fields.iter().all(|field| DAV_FIELDS.contains(field)));
            }
        }
    }

    #[test]
    fn each_rows_reach_is_what_the_core_reads() {
        use crate::reach::{reach, Rules};
        let rules = Rules::default();
        for dialect in [Webdav, Http] {
            for op in operations(dialect) {
                let depths: &[Option<&str>] = match op.fields.contains(&"depth") {
                    true => &[None, Some("0"), Some("1"), Some("infinity")],
                    false => &[None],
                };
                for depth in depths {
                    let mut request = http::Request::builder()
                        .method(op.method)
                        .uri("/d/a")
                        .header("host", "h");
                    if op.fields.contains(&"destination") {
                        request = request.header("destination", "/d/b");
                    }
                    if let Some(depth) = depth {
                        request = request.header("depth", *depth);
                    }
                    let request = request.body(()).expect("request");
                    let Ok(reached) = reach(&request, &rules, None) else {
                        continue;
                    };
                    let deep = match op.reach {
                        Reach::SubtreeWithDepth => matches!(depth, Some("1" | "infinity")),
                        Reach::SubtreeAtInfinity => matches!(depth, None | Some("infinity")),
                        _ => true,
                    };
                    let mut expected: Vec<&str> = match op.reach {
                        Reach::Object => vec!["/d/a"],
                        Reach::Subtree | Reach::SubtreeWithDepth | Reach::SubtreeAtInfinity => {
                            match deep {
                                true => vec!["/d/a", "/d/a/"],
                                false => vec!["/d/a"],
                            }
                        }
                        // With Overwrite: T (the default) the destination
                        // is replaced whole at any depth.
                        Reach::SourceAndDestination => vec!["/d/a", "/d/b", "/d/b/"],
                        Reach::BothSubtrees => vec!["/d/a", "/d/a/", "/d/b", "/d/b/"],
                    };
                    expected.sort_unstable();
                    assert_eq!(reached.keys, expected, "{} {depth:?}", op.method);
                }
            }
        }
    }

    #[test]
    fn the_documented_tables_are_these() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/WEBDAV_OPERATIONS.md");
        let doc = std::fs::read_to_string(path).expect("docs/WEBDAV_OPERATIONS.md");
        for dialect in [Webdav, Http] {
            let table = markdown(dialect);
            assert!(
                doc.contains(&table),
                "docs/WEBDAV_OPERATIONS.md does not hold the {dialect:?} table of src/dialect/plain_operations.rs; it is:\n{table}"
            );
        }
    }
}
