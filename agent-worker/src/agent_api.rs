//! The agent API of `agent-worker serve`: what a voice agent in the room (the reference
//! LiveKit Agents agent, or any other) uses to run the UI tools without speaking to the relay
//! itself. `GET /agent/tools` gives the instructions and tools of the session's current mode,
//! `POST /agent/tools/{name}` runs one (a UI tool through the relay, or a mode change). Every
//! request carries the agent secret as a Bearer credential and the tab's key in
//! `X-Voice-Agent-Key`, never in the URL.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use relay_wire::{headers, is_api_key};
use serde_json::{Value, json};

use crate::webhooks::{ErrorAnswer, ServeState, body_or_error, error};

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

/// The instructions and tools of the key's session in its current mode (the session opens on
/// the first request for a key).
#[utoipa::path(
    get,
    path = "/agent/tools",
    tag = "agent",
    operation_id = "listTools",
    params(crate::openapi::VoiceAgentKey),
    security(("agent_secret" = [])),
    responses(
        (status = 200, description = "The session's mode, instructions and tools", body = crate::Offer),
        (status = 400, description = "`invalid_request`: X-Voice-Agent-Key missing or not a key", body = ErrorAnswer),
        (status = 401, description = "`unauthorized`: missing or wrong agent secret", body = ErrorAnswer),
    )
)]
pub(crate) async fn list_tools(
    State(state): State<Arc<ServeState>>,
    headers: HeaderMap,
) -> Response {
    match authorize(&state, &headers) {
        Ok(key) => axum::Json(state.worker.offer(&key)).into_response(),
        Err(response) => response,
    }
}

/// The answer to `POST /agent/tools/{name}`: the tool's result or its failure as a sentence a
/// model can speak, and the session's mode afterwards.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentAnswer {
    pub ok: bool,
    /// The tool's answer (`ok` true).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub result: Option<Value>,
    /// Why it failed (`ok` false): `tab_offline`, `timeout`, `tool_failed`,
    /// `invalid_arguments`, `tool_not_allowed`, `unknown_tool`, `unknown_key`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<AgentFailure>,
    /// The session's mode after the call.
    pub mode: String,
    /// Whether the call changed the mode.
    pub mode_changed: bool,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct AgentFailure {
    pub code: String,
    /// A sentence the voice model can say.
    pub message: String,
}

/// Runs one tool for the key's session: a UI tool through the relay (arguments checked
/// against its schema first) or a mode change `enter_<mode>`. A tool's failure is a 200 with
/// `ok: false`.
#[utoipa::path(
    post,
    path = "/agent/tools/{name}",
    tag = "agent",
    operation_id = "callTool",
    params(
        ("name" = String, Path, description = "The tool, as `GET /agent/tools` lists it"),
        crate::openapi::VoiceAgentKey,
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[\\x21-\\x7E]{1,128}$",
            description = "Passed on to the relay: a retried call is emitted once"),
    ),
    request_body(content = Option<Object>, content_type = "application/json",
        description = "The tool's arguments; an empty body or `null` is `{}`"),
    security(("agent_secret" = [])),
    responses(
        (status = 200, description = "The tool's outcome and the session's mode", body = AgentAnswer),
        (status = 400, description = "`invalid_request`: X-Voice-Agent-Key missing or not a key, a body that is not a JSON object, a bad Idempotency-Key", body = ErrorAnswer),
        (status = 401, description = "`unauthorized`: missing or wrong agent secret", body = ErrorAnswer),
        (status = 413, description = "`payload_too_large`: over 1 MiB", body = ErrorAnswer),
    )
)]
pub(crate) async fn call_tool(
    State(state): State<Arc<ServeState>>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let key = match authorize(&state, &headers) {
        Ok(key) => key,
        Err(response) => return response,
    };
    let Ok(Path(name)) = name else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the tool name in the path is not valid UTF-8",
        );
    };
    let body = match body_or_error(body) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let args: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => v,
            Ok(Value::Null) => json!({}),
            _ => {
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
    let (result, error) = match outcome.result {
        Ok(result) => (Some(result), None),
        Err(e) => (
            None,
            Some(AgentFailure {
                message: e.speech(),
                code: e.code,
            }),
        ),
    };
    axum::Json(AgentAnswer {
        ok: error.is_none(),
        result,
        error,
        mode: outcome.mode,
        mode_changed: outcome.mode_changed,
    })
    .into_response()
}
