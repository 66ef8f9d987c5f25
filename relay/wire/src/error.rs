//! The error table: one code, one HTTP status, one body shape.

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use crate::openapi;

/// The closed list of error codes. Each has exactly one HTTP status.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    Unauthorized,
    /// A valid credential that does not reach what was asked: another key, a tool or a scope
    /// its session token lacks, or a server's credential on an agent's surface.
    Forbidden,
    UnknownKey,
    TabOffline,
    PayloadTooLarge,
    RateLimited,
    ToolFailed,
    NoHandler,
    ShuttingDown,
    /// Several-node deployments only: the shared state store (Redis) is unreachable. Retryable.
    Unavailable,
    Timeout,
    /// Unexpected server fault; the cause is logged, never sent.
    Internal,
}

impl ErrorCode {
    /// Every code, in table order.
    pub const ALL: [ErrorCode; 13] = [
        ErrorCode::InvalidRequest,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::UnknownKey,
        ErrorCode::TabOffline,
        ErrorCode::PayloadTooLarge,
        ErrorCode::RateLimited,
        ErrorCode::ToolFailed,
        ErrorCode::NoHandler,
        ErrorCode::ShuttingDown,
        ErrorCode::Unavailable,
        ErrorCode::Timeout,
        ErrorCode::Internal,
    ];

    /// The HTTP status this code is always sent with.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::UnknownKey => 404,
            ErrorCode::TabOffline => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::RateLimited => 429,
            ErrorCode::ToolFailed | ErrorCode::NoHandler => 502,
            ErrorCode::ShuttingDown | ErrorCode::Unavailable => 503,
            ErrorCode::Timeout => 504,
            ErrorCode::Internal => 500,
        }
    }

    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::UnknownKey => "unknown_key",
            ErrorCode::TabOffline => "tab_offline",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::ToolFailed => "tool_failed",
            ErrorCode::NoHandler => "no_handler",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{"code","message"}`: the error object of every failure body and of a tab's error answer.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// One of the closed list of codes (a tab's own error answer may carry any string; the HTTP
    /// API always sends a code of [`ErrorCode`]).
    #[cfg_attr(feature = "openapi", schema(value_type = ErrorCode))]
    pub code: String,
    pub message: String,
}

/// `{"ok":false,"callId"?,"error":{…}}`: every failure of the HTTP API.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    #[cfg_attr(feature = "openapi", schema(schema_with = openapi::always_false))]
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub error: ErrorObject,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>, call_id: Option<String>) -> Self {
        ErrorBody {
            ok: false,
            call_id,
            error: ErrorObject {
                code: code.as_str().to_owned(),
                message: message.into(),
            },
        }
    }
}
