//! What happened to a data plane request, in one place: the label of
//! `fencegate_requests_total{outcome}` and the access log's `outcome`.
//! Adding an outcome is one variant here; the compiler then points at every
//! place that must know it.

use http::Response;

use crate::fencing::WouldRefuse;
use crate::refusal::Refusal;

/// The outcome of one data plane request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RequestOutcome {
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

impl RequestOutcome {
    /// Every outcome, in the order `/metrics` lists them.
    pub(crate) const ALL: [RequestOutcome; 22] = [
        RequestOutcome::Forwarded,
        RequestOutcome::StaleToken,
        RequestOutcome::MissingToken,
        RequestOutcome::InvalidToken,
        RequestOutcome::InvalidPath,
        RequestOutcome::UnfenceableWrite,
        RequestOutcome::FenceStoreUnavailable,
        RequestOutcome::TokenNotIssued,
        RequestOutcome::NewFenceLimit,
        RequestOutcome::TokenIssuerUnavailable,
        RequestOutcome::VersionConflict,
        RequestOutcome::VersionUnknown,
        RequestOutcome::PreconditionNotChainable,
        RequestOutcome::VersionUnavailable,
        RequestOutcome::UnchainableWrite,
        RequestOutcome::UpstreamError,
        RequestOutcome::ClientError,
        RequestOutcome::Unauthenticated,
        RequestOutcome::Forbidden,
        RequestOutcome::WouldRefuse,
        RequestOutcome::NoRoute,
        RequestOutcome::OtherRefusal,
    ];

    /// The label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Forwarded => "forwarded",
            RequestOutcome::StaleToken => "stale_token",
            RequestOutcome::MissingToken => "missing_token",
            RequestOutcome::InvalidToken => "invalid_token",
            RequestOutcome::InvalidPath => "invalid_path",
            RequestOutcome::UnfenceableWrite => "unfenceable_write",
            RequestOutcome::FenceStoreUnavailable => "fence_store_unavailable",
            RequestOutcome::TokenNotIssued => "token_not_issued",
            RequestOutcome::NewFenceLimit => "new_fence_limit",
            RequestOutcome::TokenIssuerUnavailable => "token_issuer_unavailable",
            RequestOutcome::VersionConflict => "version_conflict",
            RequestOutcome::VersionUnknown => "version_unknown",
            RequestOutcome::PreconditionNotChainable => "precondition_not_chainable",
            RequestOutcome::VersionUnavailable => "version_unavailable",
            RequestOutcome::UnchainableWrite => "unchainable_write",
            RequestOutcome::UpstreamError => "upstream_error",
            RequestOutcome::ClientError => "client_error",
            RequestOutcome::Unauthenticated => "unauthenticated",
            RequestOutcome::Forbidden => "forbidden",
            RequestOutcome::WouldRefuse => "would_refuse",
            RequestOutcome::NoRoute => "no_route",
            RequestOutcome::OtherRefusal => "other_refusal",
        }
    }

    /// The outcome a refusal of the fencing layer stands for.
    pub(crate) fn of_refusal(refusal: &Refusal) -> RequestOutcome {
        match refusal {
            Refusal::InvalidToken { .. } => RequestOutcome::InvalidToken,
            Refusal::InvalidPath { .. } => RequestOutcome::InvalidPath,
            Refusal::Unfenceable { .. } => RequestOutcome::UnfenceableWrite,
            Refusal::MissingToken { .. } => RequestOutcome::MissingToken,
            Refusal::Stale { .. } => RequestOutcome::StaleToken,
            Refusal::StoreUnavailable { .. } => RequestOutcome::FenceStoreUnavailable,
            Refusal::TokenNotIssued { .. } => RequestOutcome::TokenNotIssued,
            Refusal::NewFenceLimit { .. } => RequestOutcome::NewFenceLimit,
            Refusal::IssuerUnavailable { .. } => RequestOutcome::TokenIssuerUnavailable,
            Refusal::VersionConflict { .. } => RequestOutcome::VersionConflict,
            Refusal::VersionUnknown { .. } => RequestOutcome::VersionUnknown,
            Refusal::PreconditionNotChainable { .. } => RequestOutcome::PreconditionNotChainable,
            Refusal::VersionUnavailable { .. } => RequestOutcome::VersionUnavailable,
            Refusal::Unchainable { .. } => RequestOutcome::UnchainableWrite,
        }
    }

    /// The outcome of the request answered by `response`: the fencing
    /// layer's [`Refusal`] or the proxy's own [`RequestOutcome`] in its
    /// extensions, or else forwarded.
    pub(crate) fn of<B>(response: &Response<B>) -> RequestOutcome {
        let extensions = response.extensions();
        if let Some(refusal) = extensions.get::<Refusal>() {
            return RequestOutcome::of_refusal(refusal);
        }
        if extensions.get::<WouldRefuse>().is_some() {
            return RequestOutcome::WouldRefuse;
        }
        extensions
            .get::<RequestOutcome>()
            .copied()
            .unwrap_or(RequestOutcome::Forwarded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_and_all_is_complete() {
        let labels: std::collections::HashSet<_> =
            RequestOutcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(labels.len(), RequestOutcome::ALL.len());
        for (index, outcome) in RequestOutcome::ALL.iter().enumerate() {
            assert_eq!(*outcome as usize, index, "{outcome:?} out of order");
        }
    }
}
