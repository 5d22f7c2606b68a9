//! How an S3 store reads the bucket out of a request's host, for the
//! gateway to read it the same way (SPEC: under `--store s3` a port never
//! changes a key, and a virtual-hosted object and its path-style spelling
//! share one key).
//!
//! `BUCKET.<--s3-domain>` names a bucket, `<--s3-domain>` none, and under
//! `--s3-domain` any other host is refused: the gateway could not tell
//! which bucket the store reads. Credential custody forwards such a request
//! path-style ([`super::custody`]); without custody the client signed the
//! target it sent, so the request is forwarded as sent and only read as its
//! path-style twin ([`S3Reading`]).

use std::sync::Arc;

use http::{HeaderName, Method, Uri};

use super::custody::s3::{is_presigned, operation_of};
use super::inbound::Inbound;
use crate::custody::s3_operations::{plain_row, Level};
use crate::head::{visible_str, HeaderFields, RequestView};
use crate::misreading::Misreading;

/// `host` without its port (an IPv6 literal kept whole).
pub(crate) fn host_without_port(host: &str) -> &str {
    if host.starts_with('[') {
        // An IPv6 literal up to its `]`; without one, the whole (no bucket
        // of the domain either way).
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
}

/// S3's bucket naming rules, loosely: 3 to 63 of `a-z0-9.-`.
pub(crate) fn is_bucket_name(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
}

/// The bucket `host` (lowercased, without port or trailing dot) names
/// under `domain`: `Some` for `BUCKET.domain`, `None` for the domain
/// itself, an error naming both for any other host.
pub(crate) fn bucket_of(domain: &str, host: &str) -> Result<Option<String>, String> {
    if host == domain {
        return Ok(None);
    }
    match host
        .strip_suffix(domain)
        .and_then(|rest| rest.strip_suffix('.'))
        .filter(|bucket| is_bucket_name(bucket))
    {
        Some(bucket) => Ok(Some(bucket.to_owned())),
        None => Err(format!(
            "Host {host:?} is neither {domain} nor BUCKET.{domain}"
        )),
    }
}

/// `host` as the store reads it: without port, trailing dot or case.
pub(crate) fn bare_host(host: &str) -> String {
    host_without_port(host)
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// The reading of an S3 route without custody.
#[derive(Debug, Clone)]
pub(crate) struct S3Reading {
    /// `--s3-domain`.
    domain: Option<Arc<str>>,
    /// The route's scope keys on the host (`host+path`, `host+prefix:N`):
    /// the host is read without its port.
    host_scoped: bool,
}

impl S3Reading {
    /// The reading under `domain`, for a scope that keys on the host or not.
    pub(crate) fn new(domain: Option<&str>, host_scoped: bool) -> Self {
        S3Reading {
            domain: domain.map(Arc::from),
            host_scoped,
        }
    }

    /// Without custody, a write the S3 table does not list (or whose
    /// sub-resources or `x-amz-*` fields its row does not take): the
    /// gateway cannot tell what it changes, so it cannot fence it (400
    /// `unfenceable_write`, unless `--allow-unfenced-writes`). Reads
    /// change nothing fenced and go on: the client signed them with its
    /// own keys. Call it once the request is read path-style.
    ///
    /// Without `--s3-domain` a request's host may name its bucket (a
    /// client using the gateway as its HTTP proxy in virtual-hosted style,
    /// under a `host+` scope): a write is then taken if it is a row at its
    /// path's level or one below it.
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
        let path = request.uri().path().as_bytes();
        let rest = path.strip_prefix(b"/").unwrap_or(path);
        let level = match memchr::memchr(b'/', rest) {
            _ if rest.is_empty() => Level::Service,
            None => Level::Bucket,
            Some(slash) if slash + 1 == rest.len() => Level::Bucket,
            Some(_) => Level::Object,
        };
        // Most writes are a plain row (PutObject, DeleteObject): no query
        // and no x-amz-* field to weigh.
        let plain = request.uri().query().is_none_or(str::is_empty)
            && !request.fields().names().any(|name| {
                name.get(..6)
                    .is_some_and(|start| start.eq_ignore_ascii_case(b"x-amz-"))
            });
        if plain && plain_row(request.method().as_str(), level).is_some() {
            return None;
        }
        let presigned = is_presigned(request);
        let refused = match operation_of(request, level, presigned, read_fields) {
            Ok(_) => return None,
            Err(refused) => refused,
        };
        let below = match level {
            Level::Service => Some(Level::Bucket),
            Level::Bucket => Some(Level::Object),
            Level::Object => None,
        };
        match below.filter(|_| self.domain.is_none()) {
            Some(below) if operation_of(request, below, presigned, read_fields).is_ok() => None,
            _ => Some(Misreading::UnknownWrite { detail: refused.0 }),
        }
    }

    /// The target `request` is to be read under (`None`: its own): its
    /// path-style twin when its host names a bucket, and in the host
    /// scopes the host without its port. A host `--s3-domain` does not
    /// cover is refused.
    pub(crate) fn read_as<B>(&self, request: &Inbound<B>) -> Result<Option<Uri>, Misreading> {
        if self.domain.is_none() && !self.host_scoped {
            return Ok(None);
        }
        let uri = request.uri();
        let host = match uri.authority() {
            Some(authority) => authority.as_str(),
            None => match request.fields().first(&http::header::HOST) {
                Some(value) => visible_str(value).unwrap_or_default(),
                // An HTTP/1.0 request without Host: the store reads its path.
                None => return Ok(None),
            },
        };
        let bare = bare_host(host);
        let bucket = match &self.domain {
            Some(domain) => bucket_of(domain, &bare)
                .map_err(|detail| Misreading::NotTheStoresHost { detail })?,
            None => None,
        };
        // Stores disagree on a dotted bucket in a host: AWS reads all of
        // `a.b.<domain>` as bucket `a.b`, moto its first label `a`. The
        // request is forwarded as sent, so the gateway cannot tell which
        // object it writes (custody forwards path-style, and may take it).
        if let Some(dotted) = bucket.as_ref().filter(|bucket| bucket.contains('.')) {
            return Err(Misreading::NotTheStoresHost {
                detail: format!(
                    "the virtual-hosted bucket {dotted:?} has a dot, which stores read differently; address it path-style"
                ),
            });
        }
        if bucket.is_none() && (!self.host_scoped || (host == bare && uri.authority().is_none())) {
            return Ok(None);
        }
        let path = uri.path();
        let mut target = String::with_capacity(host.len() + path.len() + 16);
        if self.host_scoped {
            target.push_str("http://");
            target.push_str(self.domain.as_deref().unwrap_or(&bare));
        }
        if let Some(bucket) = &bucket {
            target.push('/');
            target.push_str(bucket);
        }
        target.push_str(path);
        if let Some(query) = uri.query() {
            target.push('?');
            target.push_str(query);
        }
        target
            .parse()
            .map(Some)
            .map_err(|_| Misreading::NotTheStoresHost {
                detail: format!("the path-style target {target:?} is no URI"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_lose_their_port_and_never_panic() {
        assert_eq!(host_without_port("b.s3.internal:8080"), "b.s3.internal");
        assert_eq!(host_without_port("[::1]:80"), "[::1]");
        assert_eq!(host_without_port("[::1"), "[::1");
        assert_eq!(host_without_port("["), "[");
        assert_eq!(host_without_port(""), "");
        assert!(is_bucket_name("cust-billing") && !is_bucket_name("ab"));
        assert_eq!(bare_host("Bkt.S3.Local.:8080"), "bkt.s3.local");
    }

    #[test]
    fn a_bucket_is_read_from_its_domain_alone() {
        assert_eq!(bucket_of("s3.local", "s3.local"), Ok(None));
        assert_eq!(
            bucket_of("s3.local", "bkt.s3.local"),
            Ok(Some("bkt".into()))
        );
        assert!(bucket_of("s3.local", "bkts3.local").is_err());
        assert!(bucket_of("s3.local", "ab.s3.local").is_err());
        assert!(bucket_of("s3.local", "other.host").is_err());
    }

    fn read(
        reading: &S3Reading,
        target: &str,
        host: Option<&str>,
    ) -> Result<Option<String>, Misreading> {
        let mut request = http::Request::builder().uri(target);
        if let Some(host) = host {
            request = request.header("host", host);
        }
        let request = Inbound::from(request.body(()).unwrap());
        reading
            .read_as(&request)
            .map(|uri| uri.map(|uri| uri.to_string()))
    }

    #[test]
    fn virtual_hosted_requests_are_read_path_style_and_ports_never_count() {
        let domain = S3Reading::new(Some("s3.local"), false);
        assert_eq!(
            read(&domain, "/k?x=1", Some("bkt.s3.local:8080"))
                .unwrap()
                .as_deref(),
            Some("/bkt/k?x=1")
        );
        assert_eq!(
            read(&domain, "/bkt/k", Some("s3.local:8080")).unwrap(),
            None
        );
        assert_eq!(
            read(&domain, "http://bkt.s3.local/k", None)
                .unwrap()
                .as_deref(),
            Some("/bkt/k")
        );
        assert!(matches!(
            read(&domain, "/k", Some("127.0.0.1:8080")),
            Err(Misreading::NotTheStoresHost { .. })
        ));
        assert!(matches!(
            read(&domain, "/k", Some("www.bkt.s3.local")),
            Err(Misreading::NotTheStoresHost { .. })
        ));
        let hosts = S3Reading::new(None, true);
        assert_eq!(read(&hosts, "/bkt/k", Some("gw")).unwrap(), None);
        assert_eq!(
            read(&hosts, "/bkt/k", Some("GW:8080")).unwrap().as_deref(),
            Some("http://gw/bkt/k")
        );
        let both = S3Reading::new(Some("s3.local"), true);
        assert_eq!(
            read(&both, "/k", Some("bkt.s3.local:9000"))
                .unwrap()
                .as_deref(),
            Some("http://s3.local/bkt/k")
        );
        let neither = S3Reading::new(None, false);
        assert_eq!(
            read(&neither, "/k", Some("bkt.s3.local:9000")).unwrap(),
            None
        );
    }
}
