//! The gateway's own answers in the store's dialect: an SDK parses its
//! store's error document, not fencegate's JSON, so under `--store s3` a
//! refusal is an S3 error document and under `--store azure` an Azure one,
//! with the SPEC's error name as the code. botocore reads `Code` and
//! `Message` from S3's XML; the Azure SDK reads `x-ms-error-code`.
//!
//! The fields of the JSON answer travel as elements of their own, named in
//! the document's CamelCase (`resource` as `Resource`, `highest` as
//! `Highest`), so nothing the JSON says is lost in XML.
//!
//! ```
//! use fencegate::dialect::answer::{restyle, AnswerStyle};
//! use serde_json::json;
//!
//! let json = json!({"error": "stale_token", "resource": "/b/k", "token": 33,
//!                   "highest": 34, "reason": "below_highest"});
//! let answer = restyle(AnswerStyle::S3, &json, "token 33 is below the highest 34 admitted for /b/k")
//!     .unwrap();
//! assert_eq!(answer.content_type, "application/xml");
//! let text = String::from_utf8(answer.body.to_vec()).unwrap();
//! assert!(text.contains("<Code>stale_token</Code>"));
//! assert!(text.contains("<Highest>34</Highest>"));
//! ```

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::header::HeaderName;
use http::HeaderValue;

/// The shape of the answers the gateway makes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AnswerStyle {
    /// fencegate's JSON (`http`, `webdav`).
    #[default]
    Json,
    /// An S3 error document (`Content-Type: application/xml`,
    /// `x-amz-request-id`).
    S3,
    /// Azure Blob's error document with `x-ms-error-code`.
    Azure,
}

/// An answer rewritten in a store's dialect.
#[derive(Debug, Clone)]
pub struct Restyled {
    /// The new body.
    pub body: Bytes,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Headers the dialect adds (request id, error code).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// `x-amz-request-id`, which SDKs print beside an error.
const AMZ_REQUEST_ID: HeaderName = HeaderName::from_static("x-amz-request-id");
/// Azure's request id.
const MS_REQUEST_ID: HeaderName = HeaderName::from_static("x-ms-request-id");
/// Azure's error code header, which the Azure SDKs read first.
const MS_ERROR_CODE: HeaderName = HeaderName::from_static("x-ms-error-code");

/// The JSON answer `json` (an object with `error` and the SPEC's other
/// fields) in `style`, with `message` as its human sentence; `None` for
/// [`AnswerStyle::Json`] (nothing to change) or a value without `error`.
pub fn restyle(style: AnswerStyle, json: &serde_json::Value, message: &str) -> Option<Restyled> {
    let fields = json.as_object()?;
    let code = fields.get("error")?.as_str()?;
    let request_id = request_id();
    let mut extra = String::new();
    for (name, value) in fields {
        if name == "error" {
            continue;
        }
        let text = match value {
            serde_json::Value::String(text) => text.clone(),
            serde_json::Value::Null => continue,
            other => other.to_string(),
        };
        let element = camel_case(name);
        let _ = write!(extra, "<{element}>{}</{element}>", escape(&text));
    }
    let (body, content_type, headers) = match style {
        AnswerStyle::Json => return None,
        AnswerStyle::S3 => (
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>{}</Message>{extra}<RequestId>{request_id}</RequestId></Error>",
                escape(code),
                escape(message),
            ),
            "application/xml",
            vec![(AMZ_REQUEST_ID, header_value(&request_id))],
        ),
        AnswerStyle::Azure => (
            // Azure puts the request id and time in the message's last
            // lines; its SDKs show the message as it is.
            format!(
                "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<Error><Code>{}</Code><Message>{}\nRequestId:{request_id}</Message>{extra}</Error>",
                escape(code),
                escape(message),
            ),
            "application/xml",
            vec![
                (MS_REQUEST_ID, header_value(&request_id)),
                (MS_ERROR_CODE, header_value(code)),
            ],
        ),
    };
    Some(Restyled {
        body: Bytes::from(body),
        content_type,
        headers,
    })
}

/// `response`, an answer of the gateway's own with its
/// [`OwnAnswer`](crate::refusal::OwnAnswer), made again in `style` (body,
/// `Content-Type` and the dialect's headers; status and the rest stay).
pub fn restyle_response(style: AnswerStyle, response: &mut http::Response<Bytes>) {
    let Some(own) = response.extensions().get::<crate::refusal::OwnAnswer>() else {
        return;
    };
    let Some(restyled) = restyle(style, &own.json, &own.message) else {
        return;
    };
    *response.body_mut() = restyled.body;
    let headers = response.headers_mut();
    headers.remove(http::header::CONTENT_LENGTH);
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(restyled.content_type),
    );
    for (name, value) in restyled.headers {
        headers.insert(name, value);
    }
}

/// A request id unique within this process and unlikely across restarts:
/// a counter from the start time in nanoseconds, as 16 hex digits.
fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut next = NEXT.load(Ordering::Relaxed);
    if next == 0 {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 | 1);
        // Only the first request of the process sets the start; a race
        // between two first requests leaves one of them, which is fine.
        let _ = NEXT.compare_exchange(0, start, Ordering::Relaxed, Ordering::Relaxed);
    }
    next = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{next:016X}")
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// `snake_case` as `SnakeCase`.
fn camel_case(name: &str) -> String {
    name.split('_')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// XML character data: the five markup characters escaped, and control
/// characters XML 1.0 cannot carry replaced.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' => out.push(c),
            c if (c as u32) < 0x20 => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn s3_documents_carry_every_field_escaped() {
        let json = json!({"error": "invalid_path", "detail": "a <b> & \"c\"\u{1}"});
        let answer = restyle(AnswerStyle::S3, &json, "a <b>").unwrap();
        let text = std::str::from_utf8(&answer.body).unwrap();
        assert!(text.starts_with("<?xml"));
        assert!(text.contains("<Code>invalid_path</Code>"));
        assert!(text.contains("<Message>a &lt;b&gt;</Message>"));
        assert!(text.contains("<Detail>a &lt;b&gt; &amp; &quot;c&quot;\u{FFFD}</Detail>"));
        assert_eq!(answer.headers[0].0, AMZ_REQUEST_ID);
        let id = answer.headers[0].1.to_str().unwrap();
        assert!(text.contains(&format!("<RequestId>{id}</RequestId>")));
    }

    #[test]
    fn azure_documents_name_the_code_in_a_header() {
        let json = json!({"error": "stale_token", "token": 3, "highest": 4, "resource": "/c/b"});
        let answer = restyle(AnswerStyle::Azure, &json, "stale").unwrap();
        let code = answer
            .headers
            .iter()
            .find(|(name, _)| *name == MS_ERROR_CODE)
            .unwrap();
        assert_eq!(code.1, "stale_token");
        let text = std::str::from_utf8(&answer.body).unwrap();
        assert!(
            text.contains("<Token>3</Token><Highest>4</Highest>")
                || text.contains("<Highest>4</Highest>")
        );
    }

    #[test]
    fn json_and_shapeless_values_are_left_alone() {
        assert!(restyle(AnswerStyle::Json, &json!({"error": "x"}), "m").is_none());
        assert!(restyle(AnswerStyle::S3, &json!({"status": "x"}), "m").is_none());
        assert_ne!(request_id(), request_id());
    }
}
