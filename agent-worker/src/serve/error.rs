//! The one error of the worker's own HTTP routes: a status and a code of the closed list, sent
//! as `{"ok":false,"error":{"code","message"}}` (`/mcp` answers JSON-RPC errors instead). Every
//! handler returns `Result<_, ApiError>`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use relay_wire::ErrorCode;

use crate::error::Code;

/// A refused request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: Code,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: impl Into<Code>, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.into(),
            message: message.into(),
        }
    }

    /// 400 `invalid_request`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
    }

    /// 401 `unauthorized`.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
    }

    /// 401 for a missing or wrong agent secret.
    pub fn agent_secret() -> Self {
        ApiError::unauthorized("missing or wrong agent secret")
    }

    /// 503 `not_configured`: the route is off.
    pub fn not_configured(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Code::NotConfigured,
            message,
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let answer = ErrorAnswer {
            ok: false,
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
        };
        (self.status, axum::Json(answer)).into_response()
    }
}

/// `{"ok":false,"error":{"code","message"}}`: every failure of the worker's own HTTP routes.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ErrorAnswer {
    #[schema(schema_with = relay_wire::openapi::always_false)]
    ok: bool,
    error: ErrorDetail,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// `invalid_request`, `unauthorized`, `payload_too_large` or `not_configured`.
    code: Code,
    /// What to fix, in a sentence.
    message: String,
}

/// `{"ok":true}`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct OkAnswer {
    #[schema(schema_with = relay_wire::openapi::always_true)]
    pub ok: bool,
}

/// The request body, or the refusal of one that could not be read (over the limit: 413).
pub fn body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::PayloadTooLarge,
                "the request body is over the limit",
            )
        } else {
            ApiError::invalid("the request body could not be read")
        }
    })
}
