//! The layer's own answers: RFC 9457 problem details (`application/problem+json`).
//!
//! Each kind of refusal has its own `type` URI, so a client can tell the layer's 409 ("the
//! key's first request is still running") from a 409 the application answers itself.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

/// Where the problem types are described.
const TYPES: &str = "https://github.com/retry-rs/retry/blob/main/retry-idempotency/README.md";

/// A refusal the layer answers without running the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemKind {
    /// 400: the route needs a key and the request has none.
    KeyMissing,
    /// 400: the key is not one bounded sf-string.
    KeyInvalid,
    /// 409: the key's first request is still running; retry later with the same key.
    InProgress,
    /// 422: the key was used for a different request (another fingerprint).
    KeyReused,
    /// 413: the body is larger than the layer reads to fingerprint it.
    BodyTooLarge,
    /// 400: the request body could not be read.
    BodyUnreadable,
    /// 503: the key store could not be reached; the handler did not run, so a retry is safe.
    StoreUnavailable,
}

impl ProblemKind {
    /// The status answered.
    pub const fn status(self) -> StatusCode {
        match self {
            ProblemKind::KeyMissing | ProblemKind::KeyInvalid | ProblemKind::BodyUnreadable => {
                StatusCode::BAD_REQUEST
            }
            ProblemKind::InProgress => StatusCode::CONFLICT,
            ProblemKind::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            ProblemKind::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ProblemKind::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The fragment naming the type (`{README}#{slug}`).
    pub const fn slug(self) -> &'static str {
        match self {
            ProblemKind::KeyMissing => "idempotency-key-missing",
            ProblemKind::KeyInvalid => "idempotency-key-invalid",
            ProblemKind::InProgress => "idempotency-key-in-progress",
            ProblemKind::KeyReused => "idempotency-key-reused",
            ProblemKind::BodyTooLarge => "idempotency-body-too-large",
            ProblemKind::BodyUnreadable => "idempotency-body-unreadable",
            ProblemKind::StoreUnavailable => "idempotency-store-unavailable",
        }
    }

    /// The problem's `type` URI.
    pub fn type_uri(self) -> String {
        format!("{TYPES}#{}", self.slug())
    }

    /// The problem's short, fixed `title`.
    pub const fn title(self) -> &'static str {
        match self {
            ProblemKind::KeyMissing => "Idempotency-Key is missing",
            ProblemKind::KeyInvalid => "Idempotency-Key is invalid",
            ProblemKind::InProgress => {
                "A request with this Idempotency-Key is still being processed"
            }
            ProblemKind::KeyReused => "Idempotency-Key is already used for a different request",
            ProblemKind::BodyTooLarge => "Request body too large for an idempotent request",
            ProblemKind::BodyUnreadable => "Request body could not be read",
            ProblemKind::StoreUnavailable => "Idempotency store unavailable",
        }
    }

    /// The whole response: status, `content-type: application/problem+json`, and the body
    /// `{"type", "title", "status", "detail"}`.
    pub fn response(self, detail: &str) -> Response<Bytes> {
        let body = serde_json::json!({
            "type": self.type_uri(),
            "title": self.title(),
            "status": self.status().as_u16(),
            "detail": detail,
        });
        // A map of strings and a number always serializes.
        let body = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = Response::new(Bytes::from(body));
        *response.status_mut() = self.status();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_rfc_9457_json() {
        let r = ProblemKind::InProgress.response("retry \"later\"");
        assert_eq!(r.status(), 409);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
        assert_eq!(v["status"], 409);
        assert_eq!(v["detail"], "retry \"later\"");
        assert!(
            v["type"]
                .as_str()
                .unwrap()
                .ends_with("#idempotency-key-in-progress")
        );
        assert_eq!(ProblemKind::KeyReused.status(), 422);
        assert_eq!(ProblemKind::KeyMissing.status(), 400);
    }
}
