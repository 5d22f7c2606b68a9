//! How the gateway reads an Azure Blob request as one operation of the
//! table ([`azure_operations`](crate::dialect::azure_operations)), with
//! custody and without: its query parameters (percent-decoded, a SAS's
//! credentials left out) and its `x-ms-*` fields (but those the gateway
//! reads itself), once, by this code.
//!
//! Without custody the client signed the request with the store's key and
//! it goes to the store as sent: a write the table does not read is
//! refused 400 `unfenceable_write` (unless `--allow-unfenced-writes`),
//! since the gateway cannot tell what it changes ([`AzureReading`]); reads
//! go on as before.

use std::borrow::Cow;

use http::{HeaderName, Method};
use smallvec::SmallVec;

use super::inbound::Inbound;
use super::upstream::Upstream;
use crate::dialect::azure_operations::{
    self, Level, NotRecognised, Operation, Selectors, Unsupported,
};
use crate::head::{eq_lowercase, RequestView};
use crate::misreading::Misreading;

/// A request read as a row of the table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadOperation {
    /// The row.
    pub(crate) row: &'static Operation,
    /// It carries a field that changes who may read the blob or what the
    /// store does by itself ([`azure_operations::admin_field`]): a write
    /// with one needs `admin`.
    pub(crate) admin_fields: bool,
}

/// The row of the table `request` is at `level`: its method, its query's
/// names and values (percent-decoded; a SAS's parameters, in any case,
/// are credentials and left out) and its `x-ms-*` fields but
/// `read_fields` (the token and lock headers). `Err` names what is not
/// understood.
pub(crate) fn operation_of<B>(
    request: &Inbound<B>,
    level: Level,
    read_fields: &[HeaderName],
) -> Result<ReadOperation, NotRecognised> {
    let query = request.uri().query().unwrap_or("");
    let mut params: SmallVec<[(Cow<'_, str>, Cow<'_, str>); 8]> = SmallVec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
        // A SAS's names are short: compared lowercase without a copy.
        let mut lower = [0u8; 8];
        let is_sas = name.len() <= lower.len() && {
            let lower = &mut lower[..name.len()];
            lower.copy_from_slice(name.as_bytes());
            lower.make_ascii_lowercase();
            std::str::from_utf8(lower).is_ok_and(crate::chain::is_sas_parameter)
        };
        if is_sas {
            continue;
        }
        let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        params.push((name, value));
    }
    // One pass over the fields: the selectors with their values, every
    // other `x-ms-*` name, and `Connection`.
    let mut selectors = Selectors::default();
    let mut fields: SmallVec<[&[u8]; 16]> = SmallVec::new();
    let mut admin_fields = false;
    for (name, value) in request.fields().each_line() {
        if eq_lowercase(name, b"connection") {
            connection_names_no_x_ms(value)?;
            continue;
        }
        if !name
            .get(..5)
            .is_some_and(|start| eq_lowercase(start, b"x-ms-"))
        {
            continue;
        }
        // Fields any operation takes (the date, the version) need no more
        // reading: no row refuses them, and none needs admin.
        if azure_operations::every_operation_field(name)
            || read_fields
                .iter()
                .any(|read| eq_lowercase(name, read.as_str().as_bytes()))
            || selectors.offer(name, value)
        {
            continue;
        }
        admin_fields |= azure_operations::admin_field_bytes(name);
        fields.push(name);
    }
    let params: SmallVec<[(&str, &str); 8]> = params.iter().map(|(n, v)| (&**n, &**v)).collect();
    let row = azure_operations::recognise_read(
        request.method().as_str(),
        level,
        &params,
        &selectors,
        &fields,
    )?;
    Ok(ReadOperation { row, admin_fields })
}

/// A field named in `Connection` is dropped on the way to the store, after
/// the gateway read it: the store would read another operation.
fn connection_names_no_x_ms(value: &[u8]) -> Result<(), NotRecognised> {
    for option in value.split(|&b| b == b',') {
        let option = option.trim_ascii();
        if option
            .get(..5)
            .is_some_and(|start| eq_lowercase(start, b"x-ms-"))
        {
            return Err(NotRecognised {
                what: Unsupported::Header,
                message: format!(
                    "{} is named in Connection: it would not reach the store as the gateway read it",
                    String::from_utf8_lossy(option)
                ),
            });
        }
    }
    Ok(())
}

/// Where `path` (as sent; `skip`: leading segments that name the account)
/// is addressed.
pub(crate) fn level_of(path: &str, skip: usize) -> Level {
    // The non-empty segments, counted in one look at each byte (up to the
    // one that makes a blob): every Azure request is read here.
    let mut segments = 0;
    let mut inside = false;
    for &b in path.as_bytes() {
        if b == b'/' {
            inside = false;
        } else if !inside {
            inside = true;
            segments += 1;
            if segments > skip + 1 {
                break;
            }
        }
    }
    match segments.saturating_sub(skip) {
        0 => Level::Account,
        1 => Level::Container,
        _ => Level::Blob,
    }
}

/// The reading of an Azure route without custody.
#[derive(Debug, Clone)]
pub(crate) struct AzureReading {
    /// The store reads the account from the path's first segment (Azurite
    /// at an IP address or a name without a dot, with no base path): skip
    /// it.
    account_in_path: bool,
}

impl AzureReading {
    /// The reading of requests for `upstream`: Azurite reads the account
    /// from the path when the host is an IP address, a name without a dot
    /// (`localhost`, `azurite`) or `host.docker.internal`
    /// (`extractStoragePartsFromPath`; and always under
    /// `--disableProductStyleUrl`, which the gateway cannot see); Azure, and
    /// Azurite under any other host, from the host's first label. An
    /// upstream with a base path (`http://azurite:10000/ACCOUNT`) names the
    /// account itself.
    pub(crate) fn new(upstream: &Upstream) -> Self {
        let host = upstream
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let path_style = host.parse::<std::net::IpAddr>().is_ok()
            || !host.contains('.')
            || host.eq_ignore_ascii_case("host.docker.internal");
        AzureReading {
            account_in_path: path_style && !upstream.has_base(),
        }
    }

    /// Without custody, a write the Azure table does not read (or whose
    /// `comp`, parameters or `x-ms-*` fields its row does not take): the
    /// gateway cannot tell what it changes, so it cannot fence it (400
    /// `unfenceable_write`, unless `--allow-unfenced-writes`). Reads change
    /// nothing fenced and go on: the client signed them with its own keys.
    pub(crate) fn unknown_write<B>(
        &self,
        request: &Inbound<B>,
        read_fields: &[HeaderName],
    ) -> Option<Misreading> {
        if matches!(
            *request.method(),
            Method::GET | Method::HEAD | Method::OPTIONS
        ) {
            return None;
        }
        let level = level_of(request.uri().path(), usize::from(self.account_in_path));
        match operation_of(request, level, read_fields) {
            Ok(_) => None,
            Err(refused) => Some(Misreading::UnknownWrite {
                detail: refused.message,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, target: &str, headers: &[(&str, &str)]) -> Inbound<()> {
        let mut builder = http::Request::builder().method(method).uri(target);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        Inbound::from(builder.body(()).unwrap())
    }

    #[test]
    fn levels_are_the_non_empty_segments_after_the_skipped_ones() {
        let by_split = |path: &str, skip: usize| {
            let mut segments = path.split('/').filter(|s| !s.is_empty()).skip(skip);
            match (segments.next(), segments.next()) {
                (None, _) => Level::Account,
                (Some(_), None) => Level::Container,
                (Some(_), Some(_)) => Level::Blob,
            }
        };
        let mut paths = vec![String::new()];
        for _ in 0..8 {
            let longer: Vec<String> = paths
                .iter()
                .flat_map(|p| ['/', 'a'].map(|c| format!("{p}{c}")))
                .collect();
            for path in &longer {
                for skip in 0..3 {
                    assert_eq!(
                        level_of(path, skip),
                        by_split(path, skip),
                        "{path:?} {skip}"
                    );
                }
            }
            paths = longer;
        }
    }

    #[test]
    fn levels_skip_the_account_where_the_store_reads_it_from_the_path() {
        assert_eq!(level_of("/acct/c/b", 1), Level::Blob);
        assert_eq!(level_of("/acct/c", 1), Level::Container);
        assert_eq!(level_of("/acct", 1), Level::Account);
        assert_eq!(level_of("/acct/", 1), Level::Account);
        assert_eq!(level_of("/c/b/d", 0), Level::Blob);
        assert_eq!(level_of("/", 0), Level::Account);
        let azurite = AzureReading::new(&Upstream::parse("http://127.0.0.1:10000").unwrap());
        assert!(azurite.account_in_path);
        let based = AzureReading::new(&Upstream::parse("http://127.0.0.1:10000/acct").unwrap());
        assert!(!based.account_in_path);
        let azure =
            AzureReading::new(&Upstream::parse("https://acct.blob.core.windows.net").unwrap());
        assert!(!azure.account_in_path);
        for path_style in ["http://localhost:10000", "http://azurite:10000"] {
            let reading = AzureReading::new(&Upstream::parse(path_style).unwrap());
            assert!(reading.account_in_path, "{path_style}");
        }
    }

    #[test]
    fn a_write_the_table_does_not_read_is_unfenceable() {
        let reading = AzureReading::new(&Upstream::parse("http://127.0.0.1:10000").unwrap());
        let token = [HeaderName::from_static("x-ms-fencing-token")];
        let unknown = |method: &str, target: &str, headers: &[(&str, &str)]| {
            reading.unknown_write(&request(method, target, headers), &token)
        };
        let put = [("x-ms-blob-type", "BlockBlob"), ("x-ms-fencing-token", "3")];
        assert_eq!(unknown("PUT", "/acct/c/b", &put), None);
        assert_eq!(
            unknown(
                "PUT",
                "/acct/c/b?comp=block&blockid=QQ%3D%3D&timeout=30",
                &[]
            ),
            None
        );
        assert_eq!(unknown("PUT", "/acct/c?restype=container", &[]), None);
        // A SAS is the client's credential.
        assert_eq!(unknown("PUT", "/acct/c/b?sv=1&sig=x&SP=w", &put), None);
        for (target, headers) in [
            ("/acct/c/b?comp=bogus", &put[..]),
            ("/acct/c/b?Comp=tier", &put[..]),
            (
                "/acct/c/b",
                &[("x-ms-blob-type", "BlockBlob"), ("X-Ms-Rename-Source", "x")][..],
            ),
            ("/acct/c?restype=container&comp=batch", &[][..]),
        ] {
            let found = unknown("PUT", target, headers);
            assert!(
                matches!(found, Some(Misreading::UnknownWrite { .. })),
                "{target}"
            );
        }
        assert!(unknown("POST", "/acct/c?restype=container&comp=batch", &[]).is_some());
        // A selecting header dropped as hop-by-hop: the store would read
        // a Put Blob From URL as a Copy Blob.
        let hop = [
            ("x-ms-blob-type", "BlockBlob"),
            ("x-ms-copy-source", "http://h/acct/c/s"),
            ("connection", "keep-alive, X-Ms-Blob-Type"),
        ];
        assert!(matches!(
            unknown("PUT", "/acct/c/b", &hop),
            Some(Misreading::UnknownWrite { .. })
        ));
        // Reads go on as before, whatever they carry.
        assert_eq!(unknown("GET", "/acct/c/b?comp=bogus", &[]), None);
        // Query Blob Contents is no row: a read sent as a POST, which the
        // fencing core would take for a write.
        assert!(unknown("POST", "/acct/c/b?comp=query", &[]).is_some());
    }
}
