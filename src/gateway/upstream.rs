//! The backend's address, parsed once at start-up (`--upstream`).

use std::fmt;

use http::uri::{Authority, PathAndQuery, Scheme, Uri};

/// A parsed `http[s]://host[:port][/base]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// Whether the backend is reached over TLS.
    tls: bool,
    authority: Authority,
    /// The base path without its trailing `/` (empty for none); every request
    /// path is appended to it.
    base: String,
}

impl Upstream {
    /// Parses and checks an upstream URL: `http://` or `https://`, a host,
    /// an optional port and base path, nothing else.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let uri: Uri = raw
            .parse()
            .map_err(|e| format!("{raw:?} is not a URL: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => {
                return Err(format!(
                    "{raw:?}: only http:// and https:// upstreams are supported, not {other}://"
                ))
            }
            None => return Err(format!("{raw:?}: expected http[s]://host[:port][/base]")),
        };
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| format!("{raw:?}: missing host"))?;
        if authority.as_str().contains('@') {
            return Err(format!("{raw:?}: credentials in the URL are not supported"));
        }
        if authority.host().is_empty() {
            return Err(format!("{raw:?}: missing host"));
        }
        // `Authority::port` hides a port that does not parse, so look at the
        // text: whatever follows the last ':' after the host is the port.
        let after_host = authority
            .as_str()
            .rsplit_once(']')
            .map_or(authority.as_str(), |(_, rest)| rest);
        if let Some((_, port)) = after_host.rsplit_once(':') {
            if port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(format!("{raw:?}: the port must be 1 to 65535"));
            }
        }
        if uri.query().is_some() {
            return Err(format!("{raw:?}: a query string is not allowed"));
        }
        let base = uri.path().trim_end_matches('/').to_owned();
        Ok(Upstream {
            tls,
            authority,
            base,
        })
    }

    /// Whether the backend is reached over TLS (`https://`).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The host name or IP address to connect to, and to verify the
    /// backend's certificate against (IPv6 without brackets).
    pub fn host(&self) -> &str {
        self.authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
    }

    /// The port to connect to: as given, or the scheme's default.
    pub fn port(&self) -> u16 {
        self.authority
            .port_u16()
            .unwrap_or(if self.tls { 443 } else { 80 })
    }

    /// An upstream at a socket address, with no base path.
    pub fn from_addr(addr: std::net::SocketAddr) -> Result<Self, String> {
        Upstream::parse(&format!("http://{addr}"))
    }

    /// Whether requests go under a base path (`http://host/base`).
    pub fn has_base(&self) -> bool {
        !self.base.is_empty()
    }

    /// `host:port` as given.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The base path without its trailing `/` (empty for none).
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// The backend URI for a request whose path and query are `original`,
    /// kept as the client sent them.
    pub fn uri_for(&self, original: Option<&PathAndQuery>) -> Result<Uri, http::Error> {
        let original = original.map_or("/", PathAndQuery::as_str);
        let original = if original.starts_with('/') {
            original
        } else {
            "/"
        };
        let path_and_query = format!("{}{}", self.base, original);
        Uri::builder()
            .scheme(if self.tls {
                Scheme::HTTPS
            } else {
                Scheme::HTTP
            })
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
    }
}

impl Upstream {
    /// The request target to send on a connection to the backend: the path
    /// and query as the client sent them (`/` for anything else, such as
    /// `OPTIONS *`), after the base path, in origin form. A request already
    /// in that form with no base path to add is passed through as is.
    pub fn origin_form(&self, original: Uri) -> Result<Uri, http::Error> {
        let path_and_query = original.path_and_query().map(PathAndQuery::as_str);
        let origin = path_and_query.filter(|pq| pq.starts_with('/'));
        if self.base.is_empty()
            && origin.is_some()
            && original.scheme().is_none()
            && original.authority().is_none()
        {
            return Ok(original);
        }
        let path_and_query = format!("{}{}", self.base, origin.unwrap_or("/"));
        Ok(Uri::from(PathAndQuery::try_from(path_and_query)?))
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority, self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_joins() {
        let u = Upstream::parse("http://127.0.0.1:9000/base/").unwrap();
        let pq: PathAndQuery = "/a//b?x=1".parse().unwrap();
        assert_eq!(
            u.uri_for(Some(&pq)).unwrap().to_string(),
            "http://127.0.0.1:9000/base/a//b?x=1"
        );
        assert_eq!(
            u.origin_form("http://h/a//b?x=1".parse().unwrap())
                .unwrap()
                .to_string(),
            "/base/a//b?x=1"
        );
        let u = Upstream::parse("http://localhost:9000").unwrap();
        assert_eq!(
            u.origin_form("/a/%2e/b?q".parse().unwrap())
                .unwrap()
                .to_string(),
            "/a/%2e/b?q"
        );
        assert_eq!(
            u.origin_form("http://h:1/x".parse().unwrap())
                .unwrap()
                .to_string(),
            "/x"
        );
        assert_eq!(
            u.origin_form("*".parse().unwrap()).unwrap().to_string(),
            "/"
        );
        assert_eq!(
            u.uri_for(None).unwrap().to_string(),
            "http://localhost:9000/"
        );
        let u = Upstream::parse("https://s3.eu-west-1.amazonaws.com").unwrap();
        assert!(u.is_tls());
        assert_eq!((u.host(), u.port()), ("s3.eu-west-1.amazonaws.com", 443));
        assert_eq!(u.to_string(), "https://s3.eu-west-1.amazonaws.com");
        let u = Upstream::parse("http://[::1]:9000").unwrap();
        assert_eq!((u.host(), u.port(), u.is_tls()), ("::1", 9000, false));
        for bad in [
            "",
            "localhost:9000",
            "ftps://x",
            "ftp://x",
            "http://u:p@x",
            "http://x/?q=1",
            "http:///a",
            "http://127.0.0.1:99999",
            "http://127.0.0.1:0",
            "http://[::1]:70000",
            "http://localhost:",
        ] {
            assert!(Upstream::parse(bad).is_err(), "{bad}");
        }
    }
}
