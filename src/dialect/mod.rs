//! The store's dialect and its wire formats, without I/O (what credential
//! custody, the gateway's, reads and writes). [`StoreKind`] names the
//! store once (`--store`) and what follows from it: whether keys are flat,
//! which chain dialect `--conditional-writes on` means, and the shape of
//! the gateway's own answers ([`answer`]). Without I/O: AWS Signature
//! Version 4 as S3 speaks it ([`sigv4`]: canonical requests, signing keys,
//! the `Authorization` header and presigned URLs, for verifying what a
//! client signed and signing what the gateway forwards) and aws-chunked
//! bodies ([`chunked`]: chunk signatures verified and re-signed as they
//! pass); Azure Blob's Shared Key ([`shared_key`]). And the operation
//! tables of deny by default (SPEC): every operation the gateway forwards,
//! per dialect ([`s3_operations`], [`azure_operations`],
//! [`plain_operations`]), and S3's copy sources by one strict grammar
//! ([`s3_copy_source`]).

use std::fmt;
use std::str::FromStr;

use crate::chain::Mode;

pub mod answer;

/// AWS Signature Version 4 for S3: verified and signed.
pub mod sigv4;

/// aws-chunked bodies: chunk signatures verified and re-signed.
pub mod chunked;

/// Azure Blob's Shared Key authorization: verified and signed.
pub mod shared_key;

pub mod plain_operations;
pub mod s3_copy_source;
pub mod s3_operations;

pub mod azure_operations;

use self::answer::AnswerStyle;

/// The store behind the gateway (`--store`): its dialect, named once.
///
/// ```
/// use fencegate::dialect::StoreKind;
/// use fencegate::chain::Mode;
///
/// let s3: StoreKind = "s3".parse().unwrap();
/// assert!(s3.flat_keys());
/// assert_eq!(s3.chain_mode(), Mode::S3);
/// assert!(!StoreKind::Webdav.flat_keys());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreKind {
    /// Amazon S3 and the stores that speak its API.
    S3,
    /// Azure Blob Storage.
    Azure,
    /// A WebDAV server (Apache mod_dav).
    Webdav,
    /// Any HTTP store that speaks plain RFC 9110.
    #[default]
    Http,
}

impl StoreKind {
    /// The store has no collections: a `DELETE` changes only its own key.
    pub fn flat_keys(self) -> bool {
        matches!(self, StoreKind::S3 | StoreKind::Azure)
    }

    /// The chain dialect `--conditional-writes on` stands for.
    pub fn chain_mode(self) -> Mode {
        match self {
            StoreKind::S3 => Mode::S3,
            StoreKind::Azure => Mode::Azure,
            StoreKind::Webdav => Mode::Webdav,
            StoreKind::Http => Mode::Http,
        }
    }

    /// The shape of the answers the gateway makes itself.
    pub fn answers(self) -> AnswerStyle {
        match self {
            StoreKind::S3 => AnswerStyle::S3,
            StoreKind::Azure => AnswerStyle::Azure,
            StoreKind::Webdav | StoreKind::Http => AnswerStyle::Json,
        }
    }

    /// The name `--store` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::S3 => "s3",
            StoreKind::Azure => "azure",
            StoreKind::Webdav => "webdav",
            StoreKind::Http => "http",
        }
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StoreKind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "s3" => Ok(StoreKind::S3),
            "azure" => Ok(StoreKind::Azure),
            "webdav" => Ok(StoreKind::Webdav),
            "http" => Ok(StoreKind::Http),
            other => Err(format!(
                "unknown store {other:?}; expected one of: s3, azure, webdav, http"
            )),
        }
    }
}
