//! A request on its way through the data plane, from the client's server to
//! the proxy: its head as that server gave it, and its body. The HTTP/1.1
//! engine's head keeps its fields where they were read (`FieldLines`):
//! the fencing layer reads them by name and the proxy forwards them from
//! there, with the SPEC's edits, so that no `HeaderMap` is built for it
//! (docs/BENCHMARKS.md). hyper's (HTTP/2) and the gateway's own requests
//! (the chain's `HEAD`) come as `http` parts.

use http::{HeaderName, HeaderValue, Method, Request, Uri, Version};

use super::engine::{write_request_head, Edits, Fields, Outgoing};
use crate::fencing::Fenced;
use crate::head::{HeaderFields, RequestView, SetHeader};
use crate::http1::head::{FieldLines, RequestHead};
use crate::reach::ListedObjects;
use crate::store::Lease;

use super::custody::verified::Verified;

/// A request in the data plane (see the module docs).
pub(crate) struct Inbound<B> {
    pub(crate) head: Head,
    pub(crate) body: B,
    /// The lease it was admitted under (shared fences), which the proxy
    /// watches while it forwards the request.
    pub(crate) lease: Option<Lease>,
    /// The objects an S3 `DeleteObjects` lists, once its body was read.
    listed: Option<ListedObjects>,
    /// Credential custody: who sent it and how it goes on, once verified.
    pub(crate) custody: Option<Box<Verified>>,
    /// The names of the fields set on the way (a chained write's
    /// condition), which the gateway's signature must cover.
    pub(crate) set_names: Vec<HeaderName>,
    /// The target as the client sent it, when the gateway reads the request
    /// under another one ([`Inbound::read_as`]); forwarded as sent.
    sent_target: Option<Box<Uri>>,
}

/// A request's head, as its server gave it.
pub(crate) enum Head {
    /// `http` parts: from hyper (HTTP/2) or made by the gateway.
    Parts(Box<http::request::Parts>),
    /// Read by the HTTP/1.1 engine.
    Lines(Box<ReadHead>),
}

/// A head the HTTP/1.1 engine read, and the fields the chain set since
/// (each replaces every line of its name). Boxed with it, so that moving a
/// request copies a pointer.
pub(crate) struct ReadHead {
    head: RequestHead,
    set: Vec<(HeaderName, HeaderValue)>,
}

impl<B> Inbound<B> {
    /// A request read by the HTTP/1.1 engine.
    pub(crate) fn http1(head: RequestHead, body: B) -> Self {
        Inbound {
            head: Head::Lines(Box::new(ReadHead {
                head,
                set: Vec::new(),
            })),
            body,
            lease: None,
            listed: None,
            custody: None,
            set_names: Vec::new(),
            sent_target: None,
        }
    }

    /// The version the client spoke.
    pub(crate) fn version(&self) -> Version {
        match &self.head {
            Head::Parts(parts) => parts.version,
            Head::Lines(read) => read.head.version,
        }
    }

    /// The same request with its body made by `f`.
    pub(crate) fn map_body<C>(self, f: impl FnOnce(B) -> C) -> Inbound<C> {
        Inbound {
            head: self.head,
            body: f(self.body),
            lease: self.lease,
            listed: self.listed,
            custody: self.custody,
            set_names: self.set_names,
            sent_target: self.sent_target,
        }
    }

    /// The body, and the request without it.
    pub(crate) fn split_body(self) -> (Inbound<()>, B) {
        (
            Inbound {
                head: self.head,
                body: (),
                lease: self.lease,
                listed: self.listed,
                custody: self.custody,
                set_names: self.set_names,
                sent_target: self.sent_target,
            },
            self.body,
        )
    }

    /// Replaces the request-target (credential custody: a virtual-hosted
    /// S3 request becomes its path-style twin before it is fenced).
    pub(crate) fn set_target(&mut self, uri: Uri) {
        match &mut self.head {
            Head::Parts(parts) => parts.uri = uri,
            Head::Lines(read) => read.head.uri = uri,
        }
    }

    /// Reads the request as addressed to `uri` from here on (routing,
    /// fencing, the chain), while it is forwarded with the target the
    /// client sent: an S3 virtual-hosted request read as its path-style
    /// twin without custody, whose client signed the target it sent.
    pub(crate) fn read_as(&mut self, uri: Uri) {
        let sent = std::mem::replace(
            match &mut self.head {
                Head::Parts(parts) => &mut parts.uri,
                Head::Lines(read) => &mut read.head.uri,
            },
            uri,
        );
        self.sent_target.get_or_insert_with(|| Box::new(sent));
    }

    /// The target to forward: as the client sent it.
    pub(crate) fn sent_uri(&self) -> &Uri {
        match &self.sent_target {
            Some(sent) => sent,
            None => self.uri(),
        }
    }

    /// The keys an S3 `DeleteObjects` lists, read from its body.
    pub(crate) fn set_listed(&mut self, listed: ListedObjects) {
        self.listed = Some(listed);
    }
}

impl<B> From<Request<B>> for Inbound<B> {
    fn from(request: Request<B>) -> Self {
        let (parts, body) = request.into_parts();
        Inbound {
            head: Head::Parts(Box::new(parts)),
            body,
            lease: None,
            listed: None,
            custody: None,
            set_names: Vec::new(),
            sent_target: None,
        }
    }
}

impl<B> RequestView for Inbound<B> {
    type Fields = Head;

    fn method(&self) -> &Method {
        match &self.head {
            Head::Parts(parts) => &parts.method,
            Head::Lines(read) => &read.head.method,
        }
    }

    fn uri(&self) -> &Uri {
        match &self.head {
            Head::Parts(parts) => &parts.uri,
            Head::Lines(read) => &read.head.uri,
        }
    }

    fn fields(&self) -> &Head {
        &self.head
    }

    fn listed_objects(&self) -> Option<&ListedObjects> {
        self.listed.as_ref()
    }

    fn signed_by_gateway(&self) -> bool {
        self.custody.is_some()
    }
}

impl HeaderFields for Head {
    fn values_of<'a, 'n>(&'a self, name: &'n HeaderName) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        match self {
            Head::Parts(parts) => Values::Map(parts.headers.values_of(name)),
            Head::Lines(read) if read.set.iter().any(|(set, _)| set == name) => Values::Set(
                read.set
                    .iter()
                    .filter(move |(set, _)| set == name)
                    .map(|(_, value)| value.as_bytes()),
            ),
            Head::Lines(read) => Values::Lines(read.head.fields.values_of(name)),
        }
    }

    fn each_field<'a>(&'a self, mut each: impl FnMut(&'a [u8], &'a [u8])) -> bool {
        match self {
            // The usual case, as read and nothing set: the lines directly.
            Head::Lines(read) if read.set.is_empty() => read.head.fields.each_field(each),
            _ => {
                for (name, value) in self.each_line() {
                    each(name, value);
                }
                true
            }
        }
    }
}

/// One iterator type for the three places a value may be.
enum Values<M, S, L> {
    Map(M),
    Set(S),
    Lines(L),
}

impl<T, M, S, L> Iterator for Values<M, S, L>
where
    M: Iterator<Item = T>,
    S: Iterator<Item = T>,
    L: Iterator<Item = T>,
{
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match self {
            Values::Map(values) => values.next(),
            Values::Set(values) => values.next(),
            Values::Lines(values) => values.next(),
        }
    }
}

impl<B> SetHeader for Inbound<B> {
    fn set(&mut self, name: HeaderName, value: HeaderValue) {
        if !self.set_names.contains(&name) {
            self.set_names.push(name.clone());
        }
        match &mut self.head {
            Head::Parts(parts) => {
                parts.headers.insert(name, value);
            }
            Head::Lines(read) => {
                read.set.retain(|(set, _)| *set != name);
                read.set.push((name, value));
            }
        }
    }
}

impl<B: Send + 'static> Fenced for Inbound<B> {
    fn hand_lease(&mut self, lease: Lease) {
        self.lease = Some(lease);
    }

    fn identity(&self) -> Option<&str> {
        self.custody
            .as_deref()
            .map(|verified| verified.identity.name.as_str())
    }
}

impl Head {
    /// Writes the head of this request for the backend into `out` (see
    /// [`write_request_head`]), from its fields where they are: one copy
    /// of the writer per kind of head, so that no line goes through a
    /// choice between the two.
    pub(crate) fn write_for_backend(
        &self,
        out: &mut Vec<u8>,
        method: &Method,
        target: &str,
        edits: &Edits<'_>,
        has_body: bool,
        length: Option<u64>,
    ) -> Outgoing {
        match self {
            Head::Parts(parts) => {
                let fields = Fields {
                    read_from: &[],
                    lines: || {
                        parts
                            .headers
                            .iter()
                            .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()))
                    },
                };
                write_request_head(out, method, target, fields, edits, has_body, length)
            }
            Head::Lines(read) => {
                let fields = Fields {
                    read_from: read.head.fields.head_bytes(),
                    lines: || read.head.fields.iter(),
                };
                write_request_head(out, method, target, fields, edits, has_body, length)
            }
        }
    }

    /// Every value of the field `name` (lowercase), as it goes on: what
    /// [`HeaderFields::values_of`] gives, without a `HeaderName` made of
    /// text (which allocates for a name that is not HTTP's own).
    pub(crate) fn values_named<'a, 'n>(
        &'a self,
        name: &'n str,
    ) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        match self {
            Head::Parts(parts) => Values::Map(
                parts
                    .headers
                    .get_all(name)
                    .iter()
                    .map(HeaderValue::as_bytes),
            ),
            Head::Lines(read) if read.set.iter().any(|(set, _)| set.as_str() == name) => {
                Values::Set(
                    read.set
                        .iter()
                        .filter(move |(set, _)| set.as_str() == name)
                        .map(|(_, value)| value.as_bytes()),
                )
            }
            Head::Lines(read) => Values::Lines(read.head.fields.values_named(name.as_bytes())),
        }
    }

    /// The name of every field line, as sent (any case; a name once per
    /// line), then those set since it was read.
    pub(crate) fn names(&self) -> impl Iterator<Item = &[u8]> + '_ {
        // No third place here: `Values`' middle arm stays empty.
        type Nowhere<'a> = std::iter::Empty<&'a [u8]>;
        match self {
            Head::Parts(parts) => Values::<_, Nowhere<'_>, _>::Map(
                parts.headers.keys().map(|name| name.as_str().as_bytes()),
            ),
            Head::Lines(read) => Values::Lines(
                read.head
                    .fields
                    .iter()
                    .map(|(name, _)| name)
                    .chain(read.set.iter().map(|(name, _)| name.as_str().as_bytes())),
            ),
        }
    }

    /// The field lines as read, when nothing is set on the head (they are
    /// then the lines that go on, in [`Head::each_line`]'s order): a reader
    /// that filed them by place finds them here again.
    pub(crate) fn lines_as_read(&self) -> Option<&FieldLines> {
        match self {
            Head::Lines(read) if read.set.is_empty() => Some(&read.head.fields),
            _ => None,
        }
    }

    /// Every field line as it goes on, `(name as sent, value)`: those read
    /// (less any a set field replaces), then those set. One pass over the
    /// head, where a lookup per name scans it once per name.
    pub(crate) fn lines(&self) -> Vec<(&[u8], &[u8])> {
        self.each_line().collect()
    }

    /// [`Head::lines`] without the `Vec`: a reader that looks at each line
    /// once (custody's signed fields) needs no list of them.
    pub(crate) fn each_line(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        match self {
            // Nothing set (custody reads a head before the chain sets
            // anything): the lines as read, with no filter to run per line.
            Head::Lines(read) if read.set.is_empty() => Values::Set(read.head.fields.iter()),
            Head::Parts(parts) => Values::Map(
                parts
                    .headers
                    .iter()
                    .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes())),
            ),
            Head::Lines(read) => Values::Lines(
                read.head
                    .fields
                    .iter()
                    .filter(|(name, _)| {
                        !read
                            .set
                            .iter()
                            .any(|(set, _)| set.as_str().as_bytes().eq_ignore_ascii_case(name))
                    })
                    .chain(
                        read.set
                            .iter()
                            .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes())),
                    ),
            ),
        }
    }

    /// The fields set since it was read, each replacing every line of its
    /// name.
    pub(crate) fn set_fields(&self) -> &[(HeaderName, HeaderValue)] {
        match self {
            Head::Parts(_) => &[],
            Head::Lines(read) => &read.set,
        }
    }

    /// A `Content-Length` read spelled oddly (repeated, a list): its one
    /// value, which replaces every line of it.
    pub(crate) fn normalized_length(&self) -> Option<u64> {
        match self {
            Head::Parts(_) => None,
            Head::Lines(read) => read.head.fields.normalized_length(),
        }
    }
}
