//! The HTTP side: token service (`token`), agent API (`tool_call`, `keys`, `sessions`),
//! operations endpoints (`ops`). Every agent-API route takes its caller as a [`Principal`]
//! (`principal`) and states what it needs of it. Handlers validate and translate at the edge (a
//! key, a tool name and a timeout become wire types here); the work lives in `tokens`,
//! `sessions`, `calls` and `store`.

pub(crate) mod keys;
pub(crate) mod ops;
pub(crate) mod principal;
pub(crate) mod sessions;
pub(crate) mod token;
pub(crate) mod tool_call;

pub use ops::Health;
pub use tool_call::{CancelRequest, CancelResponse};

use keys::{key_mode, key_revoke, key_status};
use ops::{healthz, metrics, readyz};
use sessions::{create_session, end_session, session_keys};
use token::{token_get, token_post};
use tool_call::{tool_call, tool_call_cancel};

use std::sync::Arc;

use axum::extract::Request;
use axum::http::header;
use axum::routing::{delete, get, post, put};
use axum::{Extension, Router};
use bytes::Bytes;
use relay_wire::{ErrorCode, is_api_key};

use crate::app::App;
use crate::calls;
use crate::error::{ApiError, truncate};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/token", post(token_post).get(token_get))
        .route("/api/voice-agent/tool-call", post(tool_call))
        .route("/api/voice-agent/tool-call/cancel", post(tool_call_cancel))
        .route(
            "/api/voice-agent/keys/{api_key}",
            get(key_status).delete(key_revoke),
        )
        .route("/api/voice-agent/keys/{api_key}/mode", put(key_mode))
        .route("/api/voice-agent/sessions", post(create_session))
        .route(
            "/api/voice-agent/sessions/{session_id}",
            delete(end_session),
        )
        .route(relay_wire::session::SESSION_KEYS_PATH, get(session_keys))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(Extension(Arc::new(calls::Running::default())))
}

/// The shared store unreachable: `unavailable` (503), for the agent to try again. Here, at the
/// HTTP edge, so that neither the store nor the error type knows the other.
impl From<crate::store::redis::StoreError> for ApiError {
    fn from(_: crate::store::redis::StoreError) -> ApiError {
        ApiError::unavailable()
    }
}

/// Most of an oversized body that is read and discarded before answering 413: closing a
/// connection with unread data makes the client see a reset instead of the 413.
const OVERSIZE_DRAIN_BYTES: usize = 1 << 20;
/// Bound on receiving a whole request body.
const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads a request body up to the configured limit (413 beyond it).
pub(super) async fn read_body(app: &App, request: Request) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt;

    let limit = app.config.max_body_bytes;
    let too_large = || {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("request body is larger than {limit} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > OVERSIZE_DRAIN_BYTES as u64) {
        return Err(too_large());
    }
    let mut body = request.into_body();
    let mut buf = bytes::BytesMut::new();
    let mut seen = 0usize;
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| ApiError::invalid("could not read the request body"))?;
            if let Ok(data) = frame.into_data() {
                seen += data.len();
                if seen > OVERSIZE_DRAIN_BYTES {
                    break;
                }
                if seen <= limit {
                    buf.extend_from_slice(&data);
                }
            }
        }
        Ok::<(), ApiError>(())
    };
    tokio::time::timeout(BODY_READ_TIMEOUT, read)
        .await
        .map_err(|_| ApiError::invalid("the request body did not arrive in time"))??;
    if seen > limit {
        return Err(too_large());
    }
    Ok(buf.freeze())
}

/// Parses a JSON object body. Arrays are refused even where serde would map them onto a struct's
/// fields by position.
pub(super) fn parse_object<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(ApiError::invalid("the body must be a JSON object"));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("invalid JSON body: {}", short(&e))))
}

/// A serde error, cut short: enough to fix the request, never a whole echoed value.
pub(super) fn short(err: &serde_json::Error) -> String {
    let mut text = err.to_string();
    truncate(&mut text, 200);
    text
}

/// Checks a key given in a path or a body: `va_` and 64 lowercase hex characters.
pub(super) fn key_param(api_key: &str) -> Result<(), ApiError> {
    if is_api_key(api_key) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "apiKey must be va_ followed by 64 lowercase hex characters",
        ))
    }
}
