//! What custody's verifiers produce and the rest of the request reads:
//! who sent it ([`Verified`]) and how its fields go on to the store
//! ([`Forwarding`], with an S3 request's verified payload hash and where
//! its signed lines are). Plain values, on a floor below the verifiers
//! (`s3/`, `azure.rs`, `basic.rs`), the request (`inbound.rs`) that
//! carries them, and the signer (`sign.rs`) that reads them.

use std::sync::Arc;

use http::{HeaderName, HeaderValue};

use super::denied::{Denied, DeniedKind};
use super::files::Identity;
use super::stream;
use crate::dialect::sigv4::SignedHeaders;

/// Who sent a request, verified, and how it goes on to the store.
#[derive(Debug)]
pub(crate) struct Verified {
    pub(crate) identity: Arc<Identity>,
    pub(crate) forward: Forwarding,
    /// The identity may write the object the request names, and so raise
    /// its fence (a token above the highest from one that may only read
    /// it is refused).
    pub(crate) may_raise: bool,
    /// How the store's answer hands out the gateway's handles for the
    /// store's: a WebDAV `LOCK`'s tokens (`dav_locks.rs`), an S3
    /// `CreateMultipartUpload`'s upload id (`upload_ids.rs`). Boxed: most
    /// requests have none.
    pub(crate) answer: Option<Box<AnswerRewrite>>,
}

/// What the store's answer to a request needs rewritten before it is
/// relayed: the store's handles in it become the gateway's sealed ones.
#[derive(Debug, Clone)]
pub(crate) enum AnswerRewrite {
    /// A WebDAV `LOCK`'s tokens.
    Lock(LockAnswer),
    /// An S3 `CreateMultipartUpload`'s upload id.
    Upload(UploadAnswer),
}

/// What a WebDAV `LOCK`'s answer needs to hand out tokens bound to the
/// identity that took the lock: the store's tokens in it become tokens
/// sealed with `key` over the store's token, `identity` and `root`.
#[derive(Debug, Clone)]
pub(crate) struct LockAnswer {
    /// The key tokens are sealed with.
    pub(crate) key: ring::hmac::Key,
    /// The identity that took the lock.
    pub(crate) identity: String,
    /// The lock's root: the request's normalised path.
    pub(crate) root: String,
    /// `(store token, token handed out)` of the locks the request named in
    /// `If` (a refresh names the lock it refreshes).
    pub(crate) known: Vec<(String, String)>,
}

/// What an answer needs to hand out the gateway's ids for the store's:
/// sealed with `key` over each store id, `bucket` and the upload's key.
#[derive(Clone)]
pub(crate) struct UploadAnswer {
    /// The key ids are sealed with.
    pub(crate) key: ring::hmac::Key,
    /// The request's bucket.
    pub(crate) bucket: String,
    /// Which answer, and what it needs besides.
    pub(crate) kind: AnswerKind,
}

/// The answers that carry upload ids the gateway rewrites.
#[derive(Debug, Clone)]
pub(crate) enum AnswerKind {
    /// `CreateMultipartUpload`'s, of the request's key as S3 reads it.
    Created { object_key: String },
    /// `ListMultipartUploads`', each upload with its key; `url_encoded`:
    /// its keys are URL-encoded (`encoding-type=url`).
    Listed { url_encoded: bool },
}

/// How a verified request's fields go on, signed by the gateway.
#[derive(Debug, Clone)]
pub(crate) enum Forwarding {
    /// S3, signed in its `Authorization` header: only the fields the
    /// client signed go on (with the gateway's additions), and its payload
    /// hash.
    Signed {
        names: SignedHeaders,
        payload: PayloadHash,
        /// Where the verifier found the signed lines, for the re-signer to
        /// take them from again (`None`: the head was not as read).
        filed: Option<Filed>,
        /// A signed aws-chunked body: the client's chain, and where the
        /// gateway's seed goes once its head is signed.
        /// Boxed: most requests have none.
        chunked: Option<Box<(stream::ClientSide, stream::SeedCell)>>,
    },
    /// S3, a presigned URL: the fields it signed, its query without the
    /// authentication parameters, and its other signed `x-amz-*`
    /// parameters as fields.
    Presigned {
        names: SignedHeaders,
        query: String,
        moved: Vec<(HeaderName, HeaderValue)>,
    },
    /// Every field but the client's credentials (Basic or Bearer clients,
    /// anonymous ones, the gateway's own requests).
    Gateway,
    /// As it came, unsigned (a CORS preflight).
    Unsigned,
}

impl Verified {
    /// The refusal of a token that would raise `key`'s fence (whose
    /// highest is `highest`) from an identity that may only read the
    /// object: only writers raise fences.
    pub(crate) fn check_raise(
        &self,
        key: &str,
        token: u64,
        highest: Option<u64>,
    ) -> Result<(), Denied> {
        if self.may_raise || highest.is_some_and(|highest| token <= highest) {
            return Ok(());
        }
        Err(Denied::new(
            DeniedKind::Forbidden {
                object: key.to_owned(),
            },
            format!(
                "identity {:?} may only read {key}, and token {token} would raise its fence",
                self.identity.name
            ),
        ))
    }
}

/// A verified `x-amz-content-sha256` (a SHA-256 in hex or a payload form,
/// at most 64 bytes), kept inline: a `String` of it cost an allocation on
/// every signed request.
#[derive(Clone, Copy)]
pub(crate) struct PayloadHash {
    pub(super) bytes: [u8; 64],
    pub(super) len: u8,
}

impl PayloadHash {
    /// `text`, if it is at most 64 bytes.
    pub(crate) fn new(text: &str) -> Option<PayloadHash> {
        let mut bytes = [0u8; 64];
        bytes
            .get_mut(..text.len())?
            .copy_from_slice(text.as_bytes());
        Some(PayloadHash {
            bytes,
            len: u8::try_from(text.len()).ok()?,
        })
    }

    /// The value, as the client sent it.
    pub(crate) fn as_str(&self) -> &str {
        // A copy of a `&str`'s bytes whole: always UTF-8.
        self.bytes
            .get(..usize::from(self.len))
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for PayloadHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// `(line, place)`: the head's `line`th line as read is a value of the
/// `place`th signed name.
pub(crate) type FiledLines = smallvec::SmallVec<[(u16, u8); 12]>;

/// Where a header-signed request's signed lines are, found once by the
/// verifier: the re-signer, which signs over the same list when the head is
/// still as read and nothing is added, takes them from here rather than
/// looking each line up again.
#[derive(Debug, Clone)]
pub(crate) struct Filed {
    /// The signed lines, in the head's order.
    pub(crate) lines: FiledLines,
    /// The places of [`Filed::OWN`] in the list: the gateway writes
    /// these values itself.
    pub(crate) own: [u8; 3],
}

impl Filed {
    /// The fields every header-signed request signs and whose values the
    /// gateway sets when it signs again.
    pub(crate) const OWN: [&'static str; 3] = ["host", "x-amz-date", "x-amz-content-sha256"];
}
