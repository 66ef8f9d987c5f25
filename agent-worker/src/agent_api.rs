//! The agent API of `agent-worker serve`: what a voice agent in the room (the reference
//! LiveKit Agents agent, or any other) uses to run the UI tools without speaking to the relay
//! itself. `GET /agent/tools` gives the instructions and tools of the session's current mode,
//! `POST /agent/tools/{name}` runs one (a UI tool through the relay, or a mode change). Every
//! request carries the agent secret as a Bearer credential and the tab's key in
//! `X-Voice-Agent-Key`, never in the URL.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use relay_wire::{headers, is_api_key};
use serde_json::{Value, json};

use crate::webhooks::{ServeState, error};

pub fn routes() -> Router<Arc<ServeState>> {
    Router::new()
        .route("/agent/tools", get(list_tools))
        .route("/agent/tools/{name}", post(call_tool))
}

/// The caller's key after its credential is checked; the error response otherwise.
#[allow(clippy::result_large_err)]
pub(crate) fn authorize(state: &ServeState, headers: &HeaderMap) -> Result<String, Response> {
    if !state.agent_authorized(headers) {
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong agent secret",
        ));
    }
    routing_key(headers)
        .map_err(|message| error(StatusCode::BAD_REQUEST, "invalid_request", message))
}

/// The tab's routing key from `X-Voice-Agent-Key`.
pub fn routing_key(headers: &HeaderMap) -> Result<String, &'static str> {
    let value = headers
        .get(headers::VOICE_AGENT_KEY)
        .ok_or("the X-Voice-Agent-Key header with the tab's key (va_…) is missing")?;
    let key = value
        .to_str()
        .map(str::trim)
        .map_err(|_| "X-Voice-Agent-Key is not a key (va_ and 64 lowercase hex characters)")?;
    if is_api_key(key) {
        Ok(key.to_owned())
    } else {
        Err("X-Voice-Agent-Key is not a key (va_ and 64 lowercase hex characters)")
    }
}

async fn list_tools(State(state): State<Arc<ServeState>>, headers: HeaderMap) -> Response {
    match authorize(&state, &headers) {
        Ok(key) => axum::Json(state.worker.offer(&key)).into_response(),
        Err(response) => response,
    }
}

async fn call_tool(
    State(state): State<Arc<ServeState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = match authorize(&state, &headers) {
        Ok(key) => key,
        Err(response) => return response,
    };
    let args: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "the body must be the tool's arguments as a JSON object",
                );
            }
        }
    };
    // A caller's retry key travels to the relay: a retried call is emitted once.
    let idempotency_key = match headers.get(headers::IDEMPOTENCY_KEY) {
        None => None,
        Some(v) => match v.to_str().map(str::trim) {
            Ok(k) if !k.is_empty() && k.len() <= 128 && k.bytes().all(|b| b.is_ascii_graphic()) => {
                Some(k.to_owned())
            }
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "Idempotency-Key must be 1 to 128 visible ASCII characters",
                );
            }
        },
    };
    let outcome = state
        .worker
        .agent_call_with(&key, &name, &args, idempotency_key)
        .await;
    let body = match outcome.result {
        Ok(result) => json!({"ok": true, "result": result}),
        Err(e) => json!({"ok": false, "error": {"code": e.code, "message": e.speech()}}),
    };
    let mut body = body;
    body["mode"] = json!(outcome.mode);
    body["modeChanged"] = json!(outcome.mode_changed);
    axum::Json(body).into_response()
}
