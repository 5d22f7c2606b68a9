//! What happened to a data plane request, in one place: the label of
//! `fencegate_requests_total{outcome}` and the access log's `outcome`.
//! Adding an outcome is one variant here; the compiler then points at every
//! place that must know it.

use http::Response;

use crate::fencing::WouldRefuse;
use crate::refusal::Refusal;

/// The outcome of one data plane request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Outcome {
    /// Admitted (or unfenced) and answered by the backend.
    Forwarded,
    /// 409: below the highest, or overtaken.
    StaleToken,
    /// 428: a write without a token.
    MissingToken,
    /// 400: a malformed token or lock header.
    InvalidToken,
    /// 400: a path that escapes the root or is not UTF-8.
    InvalidPath,
    /// 400: a write that changes objects the gateway cannot determine.
    UnfenceableWrite,
    /// 503: the raise could not be made durable.
    FenceStoreUnavailable,
    /// 403: the token's issuer never handed it out.
    TokenNotIssued,
    /// 429: the client made new fences faster than its limit.
    NewFenceLimit,
    /// 503: the token's issuer could not be asked.
    TokenIssuerUnavailable,
    /// 409: the store refused a chained write's condition.
    VersionConflict,
    /// 428: a chained write whose object's version is not known.
    VersionUnknown,
    /// 428: a client precondition the chain cannot stand on.
    PreconditionNotChainable,
    /// 503: the gateway's own `HEAD` for a chained write failed.
    VersionUnavailable,
    /// 400: a chained write whose signature covers the condition headers.
    UnchainableWrite,
    /// 502 or 504: the backend failed, or a response body stalled.
    UpstreamError,
    /// 408 or 400: the client's request body stalled or was cut off.
    ClientError,
    /// Credential custody: no valid credentials (S3's 403 codes, 401).
    Unauthenticated,
    /// Credential custody: the identity may not touch an object the
    /// request reaches.
    Forbidden,
    /// `--enforce report`: forwarded, and `on` would have refused it.
    WouldRefuse,
    /// 404: no `[[route]]` matches the request; nothing was forwarded.
    NoRoute,
    /// Refused by the proxy itself: an upgrade, CONNECT, a request it could
    /// not rewrite, or an HTTP/1.x head the engine refused (malformed,
    /// ambiguous framing, too large, an unsupported version or coding).
    OtherRefusal,
}

impl Outcome {
    /// Every outcome, in the order `/metrics` lists them.
    pub(crate) const ALL: [Outcome; 22] = [
        Outcome::Forwarded,
        Outcome::StaleToken,
        Outcome::MissingToken,
        Outcome::InvalidToken,
        Outcome::InvalidPath,
        Outcome::UnfenceableWrite,
        Outcome::FenceStoreUnavailable,
        Outcome::TokenNotIssued,
        Outcome::NewFenceLimit,
        Outcome::TokenIssuerUnavailable,
        Outcome::VersionConflict,
        Outcome::VersionUnknown,
        Outcome::PreconditionNotChainable,
        Outcome::VersionUnavailable,
        Outcome::UnchainableWrite,
        Outcome::UpstreamError,
        Outcome::ClientError,
        Outcome::Unauthenticated,
        Outcome::Forbidden,
        Outcome::WouldRefuse,
        Outcome::NoRoute,
        Outcome::OtherRefusal,
    ];

    /// The label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::StaleToken => "stale_token",
            Outcome::MissingToken => "missing_token",
            Outcome::InvalidToken => "invalid_token",
            Outcome::InvalidPath => "invalid_path",
            Outcome::UnfenceableWrite => "unfenceable_write",
            Outcome::FenceStoreUnavailable => "fence_store_unavailable",
            Outcome::TokenNotIssued => "token_not_issued",
            Outcome::NewFenceLimit => "new_fence_limit",
            Outcome::TokenIssuerUnavailable => "token_issuer_unavailable",
            Outcome::VersionConflict => "version_conflict",
            Outcome::VersionUnknown => "version_unknown",
            Outcome::PreconditionNotChainable => "precondition_not_chainable",
            Outcome::VersionUnavailable => "version_unavailable",
            Outcome::UnchainableWrite => "unchainable_write",
            Outcome::UpstreamError => "upstream_error",
            Outcome::ClientError => "client_error",
            Outcome::Unauthenticated => "unauthenticated",
            Outcome::Forbidden => "forbidden",
            Outcome::WouldRefuse => "would_refuse",
            Outcome::NoRoute => "no_route",
            Outcome::OtherRefusal => "other_refusal",
        }
    }

    /// The outcome a refusal of the fencing layer stands for.
    pub(crate) fn of_refusal(refusal: &Refusal) -> Outcome {
        match refusal {
            Refusal::InvalidToken { .. } => Outcome::InvalidToken,
            Refusal::InvalidPath { .. } => Outcome::InvalidPath,
            Refusal::Unfenceable { .. } => Outcome::UnfenceableWrite,
            Refusal::MissingToken { .. } => Outcome::MissingToken,
            Refusal::Stale { .. } => Outcome::StaleToken,
            Refusal::StoreUnavailable { .. } => Outcome::FenceStoreUnavailable,
            Refusal::TokenNotIssued { .. } => Outcome::TokenNotIssued,
            Refusal::NewFenceLimit { .. } => Outcome::NewFenceLimit,
            Refusal::IssuerUnavailable { .. } => Outcome::TokenIssuerUnavailable,
            Refusal::VersionConflict { .. } => Outcome::VersionConflict,
            Refusal::VersionUnknown { .. } => Outcome::VersionUnknown,
            Refusal::PreconditionNotChainable { .. } => Outcome::PreconditionNotChainable,
            Refusal::VersionUnavailable { .. } => Outcome::VersionUnavailable,
            Refusal::Unchainable { .. } => Outcome::UnchainableWrite,
        }
    }

    /// The outcome of the request answered by `response`: the fencing
    /// layer's [`Refusal`] or the proxy's own [`Outcome`] in its
    /// extensions, or else forwarded.
    pub(crate) fn of<B>(response: &Response<B>) -> Outcome {
        let extensions = response.extensions();
        if let Some(refusal) = extensions.get::<Refusal>() {
            return Outcome::of_refusal(refusal);
        }
        if extensions.get::<WouldRefuse>().is_some() {
            return Outcome::WouldRefuse;
        }
        extensions
            .get::<Outcome>()
            .copied()
            .unwrap_or(Outcome::Forwarded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_and_all_is_complete() {
        let labels: std::collections::HashSet<_> =
            Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(labels.len(), Outcome::ALL.len());
        for (index, outcome) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*outcome as usize, index, "{outcome:?} out of order");
        }
    }
}
