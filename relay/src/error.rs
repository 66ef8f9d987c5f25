//! The HTTP API's one error type. Every failure leaves through [`ApiError`]'s `IntoResponse`, so
//! every failure body has the same shape and every code has its one status (`ApiError::status`).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use relay_wire::{ErrorBody, ErrorCode};

/// A failure of an API request: a code from the closed list, a message for the caller, and the
/// call id when a call had started.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub call_id: Option<String>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            call_id: None,
        }
    }

    pub fn with_call_id(mut self, call_id: &str) -> Self {
        self.call_id = Some(call_id.to_owned());
        self
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::InvalidRequest, message)
    }

    pub fn unauthorized() -> Self {
        ApiError::new(
            ErrorCode::Unauthorized,
            "missing or wrong credential (Authorization: Bearer <session token>)",
        )
    }

    /// A credential that is valid but does not reach what was asked (another key, a tool or a
    /// scope it lacks, a server's credential where an agent's is needed). Answered before
    /// anything is looked up, so it says nothing of whether that key exists.
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::Forbidden, message)
    }

    /// A session token whose session was ended.
    pub fn session_ended() -> Self {
        ApiError::new(
            ErrorCode::Unauthorized,
            "this agent session was ended; ask for a new session token",
        )
    }

    pub fn unknown_key() -> Self {
        ApiError::new(
            ErrorCode::UnknownKey,
            "unknown key: never issued, expired, revoked or removed",
        )
    }

    pub fn shutting_down() -> Self {
        ApiError::new(ErrorCode::ShuttingDown, "the relay is shutting down")
    }

    pub fn unavailable() -> Self {
        ApiError::new(
            ErrorCode::Unavailable,
            "the relay cannot reach its shared state store (Redis); retry shortly",
        )
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody::new(self.code, self.message.clone(), self.call_id.clone())
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

/// A JSON body with a status, already encoded (also used to replay idempotent outcomes).
pub fn json_response(status: StatusCode, body: bytes::Bytes) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = json_response(status, encode(&self.body()));
        if self.code == ErrorCode::Unauthorized {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Encodes a wire value. Serializing these plain types cannot fail; should it ever, the client
/// gets the generic internal error body rather than a panic.
pub fn encode<T: serde::Serialize>(value: &T) -> bytes::Bytes {
    match serde_json::to_vec(value) {
        Ok(v) => v.into(),
        Err(err) => {
            tracing::error!(cause = %err, "failed to encode a response body");
            bytes::Bytes::from_static(
                br#"{"ok":false,"error":{"code":"internal","message":"internal error"}}"#,
            )
        }
    }
}

/// Cuts `s` to at most `max` bytes, on a character boundary: for messages that echo what a
/// client or a tab sent.
pub fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}
