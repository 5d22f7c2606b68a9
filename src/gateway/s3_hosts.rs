//! How an S3 store reads the bucket out of a request's host, for the
//! gateway to read it the same way (SPEC: under `--store s3` a port never
//! changes a key, and a virtual-hosted object and its path-style spelling
//! share one key).
//!
//! `BUCKET.<--s3-domain>` names a bucket; `<--s3-domain>`, an IP literal
//! and a name of one label name none; any other host is refused, with or
//! without `--s3-domain`: the gateway could not tell which bucket the store
//! reads. Credential custody forwards such a request
//! path-style ([`super::custody`]); without custody the client signed the
//! target it sent, so the request is forwarded as sent and only read as its
//! path-style twin ([`S3Reading`]).

use std::sync::Arc;

use http::{HeaderName, Method, Uri};

use super::custody::s3::{is_presigned, operation_of};
use super::inbound::Inbound;
use crate::dialect::s3_operations::{plain_row, Level};
use crate::head::{visible_str, HeaderFields, RequestView};
use crate::misreading::{DecidingFields, HostField, Misreading};

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

use crate::dialect::s3_copy_source::is_bucket_name;

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

/// Whether every store reads `bare` (a host without port or trailing dot,
/// in any case) path-style whatever its domain: an IP literal, or a name
/// of one label (a virtual-hosted host is `BUCKET.domain`, two labels at
/// least).
pub(crate) fn names_no_bucket(bare: &str) -> bool {
    !bare.contains('.') || bare.starts_with('[') || is_ipv4(bare.as_bytes())
}

/// [`names_no_bucket`] of `host` as sent (with its port and any trailing
/// dots), read from its bytes: every request under `--store s3` asks it
/// of its `Host`, and text, a port split off and an address parsed were
/// a thirtieth of a plain write's instructions. A host that is not
/// visible ASCII is `false` here, and read as text by the caller.
fn names_no_bucket_as_sent(host: &[u8]) -> bool {
    if host.first() == Some(&b'[') {
        return true;
    }
    // The port: the digits after the last `:` (none is a port too).
    let mut end = host.len();
    while end > 0 && host[end - 1].is_ascii_digit() {
        end -= 1;
    }
    end = match end.checked_sub(1) {
        Some(colon) if host[colon] == b':' => colon,
        _ => host.len(),
    };
    while end > 0 && host[end - 1] == b'.' {
        end -= 1;
    }
    // A dotted quad first (a gateway is most often reached by address),
    // then a visible name without a dot. Any other host is left to the
    // text path, which answers the same for every host this one settles.
    let name = &host[..end];
    is_ipv4(name) || (!name.contains(&b'.') && name.iter().all(u8::is_ascii_graphic))
}

/// Whether `name` is an IPv4 address in dotted-decimal form exactly as
/// [`std::net::Ipv4Addr`]'s parser takes one: four octets of one to three
/// digits, none above 255, none with a leading zero. (The parser itself
/// takes text, and its generic machinery cost 180 instructions a host.)
fn is_ipv4(name: &[u8]) -> bool {
    let mut at = 0;
    for octet in 0..4 {
        if octet > 0 {
            if name.get(at) != Some(&b'.') {
                return false;
            }
            at += 1;
        }
        let value = match name.get(at..).unwrap_or_default() {
            [b'0', ..] => {
                at += 1;
                0
            }
            [a @ b'1'..=b'9', b @ b'0'..=b'9', c @ b'0'..=b'9', ..] => {
                at += 3;
                u32::from(a - b'0') * 100 + u32::from(b - b'0') * 10 + u32::from(c - b'0')
            }
            [a @ b'1'..=b'9', b @ b'0'..=b'9', ..] => {
                at += 2;
                u32::from(a - b'0') * 10 + u32::from(b - b'0')
            }
            [a @ b'1'..=b'9', ..] => {
                at += 1;
                u32::from(a - b'0')
            }
            _ => return false,
        };
        if value > 255 {
            return false;
        }
    }
    at == name.len()
}

/// `bucket`, the bucket `host` (as sent) names under `--s3-domain`, if
/// the stores we know read it as that bucket too. Without custody the
/// request goes to the store with the host as sent, so where one store
/// reads it otherwise the gateway cannot tell which object it reaches:
/// moto reads a host that starts with `localhost` or `localstack`
/// path-style, drops a leading `www.`, and takes a bucket in the case it
/// was sent in, where the gateway lowercases it (as DNS, and AWS, do).
fn read_alike(host: &str, bucket: Option<String>) -> Result<Option<String>, String> {
    let Some(bucket) = bucket else {
        return Ok(None);
    };
    let sent = host.get(..bucket.len()).unwrap_or_default();
    let differs = if sent != bucket {
        Some("is not lowercase as sent")
    } else if bucket.starts_with("localhost") || bucket.starts_with("localstack") {
        Some("starts with a name stores read as their own host")
    } else if bucket == "www" {
        Some("is 'www', which stores drop from a host")
    } else {
        None
    };
    match differs {
        Some(why) => Err(format!(
            "the virtual-hosted bucket {bucket:?} {why}, so stores read this host differently; \
             address it path-style"
        )),
        None => Ok(Some(bucket)),
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
    /// The host never names a bucket here: [`S3Reading::read_as`] has
    /// read a virtual-hosted request as its path-style twin, or refused a
    /// host that could name one. `deciding`: what the misreading pass saw
    /// of its fields.
    pub(crate) fn unknown_write<B>(
        &self,
        request: &Inbound<B>,
        read_fields: &[HeaderName],
        deciding: DecidingFields,
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
        // Most writes are a plain row (PutObject, DeleteObject): no query,
        // no x-amz-* field to weigh, no Content-Type (or none that makes
        // the body a form, which `operation_of` refuses).
        let plain = request.uri().query().is_none_or(str::is_empty)
            && !deciding.may_carry_amz_fields()
            && !(deciding.has_content_type()
                && request
                    .fields()
                    .first(&http::header::CONTENT_TYPE)
                    .is_some_and(crate::dialect::s3_operations::is_form_body));
        if plain && plain_row(request.method().as_str(), level).is_some() {
            return None;
        }
        operation_of(request, level, is_presigned(request), read_fields)
            .err()
            .map(|refused| Misreading::UnknownWrite { detail: refused.0 })
    }

    /// The target `request` is to be read under (`None`: its own): its
    /// path-style twin when its host names a bucket, and in the host
    /// scopes the host without its port. A host `--s3-domain` does not
    /// cover is refused.
    /// `host_field`: its `Host` as the misreading pass found it.
    pub(crate) fn read_as<B>(
        &self,
        request: &Inbound<B>,
        host_field: HostField<'_>,
    ) -> Result<Option<Uri>, Misreading> {
        let uri = request.uri();
        // Most requests name the gateway by an address or by one label:
        // path-style whatever the domain, and with nothing to rewrite
        // unless the scope keys on the host. Read from the bytes first.
        let sent = match uri.authority() {
            Some(authority) => authority.as_str().as_bytes(),
            None => match host_field.unwrap_or_else(|| request.fields().first(&http::header::HOST))
            {
                Some(value) => value,
                // An HTTP/1.0 request without Host: the store reads its path.
                None => return Ok(None),
            },
        };
        if !self.host_scoped && names_no_bucket_as_sent(sent) {
            return Ok(None);
        }
        let host = match uri.authority() {
            Some(authority) => authority.as_str(),
            None => visible_str(sent).unwrap_or_default(),
        };
        // The same question of a host the bytes did not settle (one with a
        // byte that is not visible ASCII reads as empty: no bucket). Case
        // and a trailing dot do not change the answer, so the host needs
        // no lowercase copy.
        if !self.host_scoped && names_no_bucket(host_without_port(host).trim_end_matches('.')) {
            return Ok(None);
        }
        let bare = bare_host(host);
        let bucket = match &self.domain {
            // A name no store reads a bucket from is path-style here too
            // (clients may reach the gateway by its address).
            Some(domain) if names_no_bucket(&bare) && bare != **domain => None,
            Some(domain) => bucket_of(domain, &bare)
                .and_then(|bucket| read_alike(host, bucket))
                .map_err(|detail| Misreading::NotTheStoresHost { detail })?,
            None if names_no_bucket(&bare) => None,
            None => {
                return Err(Misreading::NotTheStoresHost {
                    detail: format!(
                        "Host {bare:?} could name a bucket (virtual-hosted) and the store's \
                         domain is not known (--s3-domain names it; an IP address or a \
                         one-label name never names a bucket)"
                    ),
                })
            }
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
        // The host scopes key on the domain (or the bare host), whichever
        // host spelled the request.
        let key_host = self.domain.as_deref().unwrap_or(&bare);
        if bucket.is_none()
            && (!self.host_scoped || (host == key_host && uri.authority().is_none()))
        {
            return Ok(None);
        }
        let path = uri.path();
        let mut target = String::with_capacity(host.len() + path.len() + 16);
        if self.host_scoped {
            target.push_str("http://");
            target.push_str(key_host);
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
    proptest::proptest! {
        #[test]
        fn an_ipv4_address_is_read_as_the_standard_parser_reads_it(
            name in "[0-9.]{0,16}|[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}"
        ) {
            proptest::prop_assert_eq!(
                super::is_ipv4(name.as_bytes()),
                name.parse::<std::net::Ipv4Addr>().is_ok(),
                "{}", name
            );
        }

        #[test]
        fn a_host_as_sent_names_no_bucket_as_its_text_does(
            host in "[\\[a-zA-Z0-9.:\\] \\x7f-]{0,24}|[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}(:[0-9]{0,5})?\\.?"
        ) {
            // The bytes may answer "no bucket" only where the text does.
            let text = super::visible_str(host.as_bytes()).unwrap_or_default();
            let by_text = super::names_no_bucket(
                super::host_without_port(text).trim_end_matches('.'),
            );
            if super::names_no_bucket_as_sent(host.as_bytes()) {
                proptest::prop_assert!(by_text, "{:?}", host);
            }
            if host.bytes().all(|b| b.is_ascii_graphic()) {
                proptest::prop_assert_eq!(
                    super::names_no_bucket_as_sent(host.as_bytes()),
                    by_text,
                    "{:?}", host
                );
            }
        }
    }

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
        let looked_up = reading
            .read_as(&request, None)
            .map(|uri| uri.map(|uri| uri.to_string()));
        // As the misreading pass hands it over: the same reading.
        let handed = reading
            .read_as(&request, Some(host.map(str::as_bytes)))
            .map(|uri| uri.map(|uri| uri.to_string()));
        assert_eq!(looked_up, handed, "{target} {host:?}");
        looked_up
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
        assert_eq!(
            read(&domain, "/bkt/k", Some("127.0.0.1:8080")).unwrap(),
            None
        );
        assert!(matches!(
            read(&domain, "/k", Some("elsewhere.example")),
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
        assert_eq!(
            read(&both, "/bkt/k", Some("10.0.0.1")).unwrap().as_deref(),
            Some("http://s3.local/bkt/k")
        );
        let neither = S3Reading::new(None, false);
        assert!(matches!(
            read(&neither, "/k", Some("bkt.s3.local:9000")),
            Err(Misreading::NotTheStoresHost { .. })
        ));
        for path_style in ["127.0.0.1:9000", "[::1]:9000", "gateway", "LOCALHOST:80"] {
            assert_eq!(read(&neither, "/bkt/k", Some(path_style)).unwrap(), None);
        }
        assert!(read(&neither, "http://bkt.s3.local/k", None).is_err());
    }

    #[test]
    fn a_bucket_stores_read_otherwise_is_refused() {
        let domain = S3Reading::new(Some("s3.local"), false);
        for host in [
            "BKT.s3.local",
            "localhost-x.s3.local",
            "localstack1.s3.local",
            "www.s3.local",
        ] {
            assert!(
                matches!(
                    read(&domain, "/k", Some(host)),
                    Err(Misreading::NotTheStoresHost { .. })
                ),
                "{host}"
            );
        }
        assert_eq!(
            read(&domain, "/k", Some("bkt.S3.Local"))
                .unwrap()
                .as_deref(),
            Some("/bkt/k")
        );
    }
}
