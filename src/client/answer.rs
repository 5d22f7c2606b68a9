//! The gateway's refusals, read back by a client.

use http::{HeaderMap, StatusCode};

/// The header that carries the fence's highest token on a 409.
const HIGHEST_HEADER: &str = "x-fencing-highest";
/// Azure's error code header.
const MS_ERROR_CODE: &str = "x-ms-error-code";

/// An answer the gateway made itself instead of forwarding the request
/// (SPEC "Data plane": the error names and their fields), in any of its
/// dialects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FencingError {
    /// 409 `stale_token`: a higher token was admitted for `resource`. The
    /// lock is gone: take it again for a new token; never retry, never send
    /// `highest + 1`.
    #[error("stale fencing token {token:?} for {resource:?}: the highest admitted is {highest:?}")]
    StaleToken {
        /// The token the request carried.
        token: Option<u64>,
        /// The highest admitted for the fence.
        highest: Option<u64>,
        /// The fence key.
        resource: Option<String>,
        /// `below_highest` or `overtaken`.
        reason: Option<String>,
    },
    /// 409 `version_conflict` (`--conditional-writes`): with `retry` the
    /// object changed under a write the gateway did not see (a fenced `HEAD`,
    /// then the same write, goes through); without it a higher token was
    /// admitted meanwhile, as [`FencingError::StaleToken`].
    #[error("version conflict on {object:?} (fence {resource:?}, token {token:?}, retry {retry})")]
    VersionConflict {
        /// The fence key.
        resource: Option<String>,
        /// The object whose version did not match.
        object: Option<String>,
        /// The token the request carried.
        token: Option<u64>,
        /// Whether a fenced `HEAD` and the same write may succeed.
        retry: bool,
    },
    /// 428 `version_unknown` (`--chain-observe client-head`): send a fenced
    /// `HEAD` of `object`, then the same write.
    #[error("the version of {object:?} is unknown (fence {resource:?}): HEAD it first")]
    VersionUnknown {
        /// The fence key.
        resource: Option<String>,
        /// The object to `HEAD`.
        object: Option<String>,
    },
    /// 428 `missing_token`: a write went out without the token header.
    #[error("a write to {resource:?} carried no fencing token")]
    MissingToken {
        /// The fence key.
        resource: Option<String>,
    },
    /// Any other answer of the gateway's own (`invalid_token`,
    /// `invalid_path`, `unfenceable_write`, ...): the request is wrong as
    /// sent.
    #[error("the gateway refused the request ({status} {code}): {message}")]
    Gateway {
        /// The HTTP status.
        status: u16,
        /// The SPEC's error name.
        code: String,
        /// The answer's message, where it has one.
        message: String,
    },
}

/// What a client does after a [`FencingError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Send the same request again after a fenced `HEAD` of the object (a
    /// chained write whose version the gateway did not know).
    AfterFencedHead,
    /// Do not send it again: the lock is gone, or the request is wrong.
    Never,
}

impl FencingError {
    /// What to do next. Never a retry of a stale token.
    pub fn retry(&self) -> Retry {
        match self {
            FencingError::VersionConflict { retry: true, .. }
            | FencingError::VersionUnknown { .. } => Retry::AfterFencedHead,
            _ => Retry::Never,
        }
    }

    /// The SPEC's name of this refusal (`stale_token`, ...).
    pub fn code(&self) -> &str {
        match self {
            FencingError::StaleToken { .. } => "stale_token",
            FencingError::VersionConflict { .. } => "version_conflict",
            FencingError::VersionUnknown { .. } => "version_unknown",
            FencingError::MissingToken { .. } => "missing_token",
            FencingError::Gateway { code, .. } => code,
        }
    }

    /// The refusal an answer carries, or `None` when the answer is not one
    /// of the gateway's own (a success, or the store's own error, whose
    /// codes are the store's: `NoSuchKey`, `BlobNotFound`).
    ///
    /// Reads the gateway's JSON (`--store http`, `webdav`), an S3 error
    /// document (`--store s3`) and Azure's (`--store azure`). A 409 with
    /// `X-Fencing-Highest` whose body could not be read is still a
    /// [`FencingError::StaleToken`].
    pub fn from_answer(
        status: StatusCode,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Option<FencingError> {
        if !status.is_client_error() && !status.is_server_error() {
            return None;
        }
        let fields = AnswerFields::json(body)
            .or_else(|| AnswerFields::xml(body))
            .or_else(|| AnswerFields::azure_header(headers));
        match fields {
            Some(fields) if is_gateway_code(&fields.code) => Some(fields.into_error(status)),
            Some(_) => None,
            None => {
                let highest = headers.get(HIGHEST_HEADER)?.to_str().ok()?.parse().ok()?;
                (status == StatusCode::CONFLICT).then_some(FencingError::StaleToken {
                    token: None,
                    highest: Some(highest),
                    resource: None,
                    reason: None,
                })
            }
        }
    }
}

/// The gateway's error names are lower snake case; the stores' codes are
/// CamelCase, so the two never collide.
fn is_gateway_code(code: &str) -> bool {
    !code.is_empty() && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

/// An answer's code and fields, whatever its shape; field names as the JSON
/// spells them (`highest`), XML's CamelCase elements lowered to match.
#[derive(Debug, Default)]
struct AnswerFields {
    code: String,
    message: String,
    values: Vec<(String, String)>,
}

impl AnswerFields {
    fn json(body: &[u8]) -> Option<AnswerFields> {
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        let object = value.as_object()?;
        let code = object.get("error")?.as_str()?.to_owned();
        let mut fields = AnswerFields {
            code,
            ..AnswerFields::default()
        };
        for (name, value) in object {
            let text = match value {
                serde_json::Value::String(text) => text.clone(),
                serde_json::Value::Null => continue,
                other => other.to_string(),
            };
            if name == "message" {
                fields.message.clone_from(&text);
            }
            fields.values.push((name.clone(), text));
        }
        Some(fields)
    }

    fn xml(body: &[u8]) -> Option<AnswerFields> {
        let text = std::str::from_utf8(body).ok()?;
        let document = roxmltree::Document::parse(text).ok()?;
        let root = document.root_element();
        if root.tag_name().name() != "Error" {
            return None;
        }
        let mut fields = AnswerFields::default();
        for element in root.children().filter(roxmltree::Node::is_element) {
            let value = element.text().unwrap_or_default().to_owned();
            match element.tag_name().name() {
                "Code" => fields.code = value,
                "Message" => fields.message = value,
                name => fields.values.push((snake_case(name), value)),
            }
        }
        (!fields.code.is_empty()).then_some(fields)
    }

    /// A `HEAD` answer has no body: Azure's code header still names it.
    fn azure_header(headers: &HeaderMap) -> Option<AnswerFields> {
        let code = headers.get(MS_ERROR_CODE)?.to_str().ok()?;
        Some(AnswerFields {
            code: code.to_owned(),
            ..AnswerFields::default()
        })
    }

    fn text(&self, name: &str) -> Option<String> {
        self.values
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.clone())
    }

    fn number(&self, name: &str) -> Option<u64> {
        self.text(name)?.parse().ok()
    }

    fn into_error(self, status: StatusCode) -> FencingError {
        match self.code.as_str() {
            "stale_token" => FencingError::StaleToken {
                token: self.number("token"),
                highest: self.number("highest"),
                resource: self.text("resource"),
                reason: self.text("reason"),
            },
            "version_conflict" => FencingError::VersionConflict {
                resource: self.text("resource"),
                object: self.text("object"),
                token: self.number("token"),
                retry: self.text("retry").as_deref() == Some("true"),
            },
            "version_unknown" => FencingError::VersionUnknown {
                resource: self.text("resource"),
                object: self.text("object"),
            },
            "missing_token" => FencingError::MissingToken {
                resource: self.text("resource"),
            },
            _ => FencingError::Gateway {
                status: status.as_u16(),
                code: self.code,
                message: self.message,
            },
        }
    }
}

/// `HighestToken` as `highest_token`.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

// The dialects are rendered by the gateway's own code (feature `custody`).
#[cfg(all(test, feature = "custody"))]
mod tests {
    use super::*;
    use crate::dialect::answer::{restyle, AnswerStyle};
    use http::HeaderValue;

    fn read(style: AnswerStyle, json: serde_json::Value, status: u16) -> Option<FencingError> {
        let status = StatusCode::from_u16(status).unwrap();
        let mut headers = HeaderMap::new();
        let body = match restyle(style, &json, "the message") {
            Some(restyled) => {
                for (name, value) in restyled.headers {
                    headers.insert(name, value);
                }
                restyled.body.to_vec()
            }
            None => json.to_string().into_bytes(),
        };
        FencingError::from_answer(status, &headers, &body)
    }

    #[test]
    fn every_dialect_of_the_gateway_reads_back_as_the_same_error() {
        for style in [AnswerStyle::Json, AnswerStyle::S3, AnswerStyle::Azure] {
            let stale = serde_json::json!({"error": "stale_token", "resource": "/b/k",
                "token": 33, "highest": 34, "reason": "below_highest"});
            assert_eq!(
                read(style, stale, 409),
                Some(FencingError::StaleToken {
                    token: Some(33),
                    highest: Some(34),
                    resource: Some("/b/k".into()),
                    reason: Some("below_highest".into()),
                }),
                "{style:?}"
            );
            let conflict = serde_json::json!({"error": "version_conflict", "resource": "/b/k",
                "object": "/b/k", "token": 5, "retry": true});
            let conflict = read(style, conflict, 409).unwrap();
            assert_eq!(conflict.retry(), Retry::AfterFencedHead, "{style:?}");
            let unknown = serde_json::json!({"error": "version_unknown", "resource": "/b/k", "object": "/b/k"});
            assert_eq!(
                read(style, unknown, 428).unwrap().retry(),
                Retry::AfterFencedHead
            );
            let invalid = serde_json::json!({"error": "invalid_token", "message": "not a number"});
            assert_eq!(read(style, invalid, 400).unwrap().code(), "invalid_token");
        }
    }

    #[test]
    fn the_stores_own_errors_and_successes_are_not_refusals() {
        let s3 =
            b"<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>gone</Message></Error>";
        assert_eq!(
            FencingError::from_answer(StatusCode::NOT_FOUND, &HeaderMap::new(), s3),
            None
        );
        assert_eq!(
            FencingError::from_answer(
                StatusCode::OK,
                &HeaderMap::new(),
                br#"{"error":"stale_token"}"#
            ),
            None
        );
        let mut headers = HeaderMap::new();
        headers.insert("x-fencing-highest", HeaderValue::from_static("12"));
        assert!(matches!(
            FencingError::from_answer(StatusCode::CONFLICT, &headers, b""),
            Some(FencingError::StaleToken {
                highest: Some(12),
                ..
            })
        ));
    }
}
