//! `agent-worker serve`: LiveKit webhooks (verified with livekit-api: the raw JWT in
//! `Authorization`, its `sha256` claim covering the body) open and close sessions and revoke keys
//! at the relay; Vapi's server-URL `tool-calls` messages run tools through the relay and answer
//! `{"results":[…]}` with single-line strings. The agent API ([`crate::agent_api`]) and the MCP
//! endpoint ([`crate::mcp`], at `/mcp`) share this server and its state.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use livekit_api::access_token::TokenVerifier;
use livekit_api::webhooks::WebhookReceiver;
use relay_wire::Fp;
use relay_wire::{ErrorCode, ParticipantMetadata, Secret, is_api_key};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::Worker;
use crate::client::{ToolError, single_line};

/// Largest webhook body accepted.
const MAX_WEBHOOK_BYTES: usize = 1 << 20;

pub struct ServeState {
    pub worker: Worker,
    receiver: WebhookReceiver,
    vapi_secret: Option<[u8; 32]>,
    agent_secrets: Vec<[u8; 32]>,
    state_file: Option<crate::rooms::StateFile>,
    mcp: crate::mcp::McpConfig,
    /// Fired when the server stops: ends the MCP sessions and their open streams.
    shutdown: tokio_util::sync::CancellationToken,
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Constant-time check of a presented secret against a known digest.
fn matches(known: &[u8; 32], presented: &str) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(known.ct_eq(&digest(presented)))
}

impl ServeState {
    pub fn new(
        worker: Worker,
        livekit_key: &str,
        livekit_secret: &Secret,
        vapi_secret: Option<&Secret>,
        agent_secrets: &[Secret],
    ) -> Self {
        ServeState {
            worker,
            receiver: WebhookReceiver::new(TokenVerifier::with_api_key(
                livekit_key,
                livekit_secret.expose(),
            )),
            vapi_secret: vapi_secret.map(|s| digest(s.expose())),
            agent_secrets: agent_secrets.iter().map(|s| digest(s.expose())).collect(),
            state_file: None,
            mcp: crate::mcp::McpConfig::default(),
            shutdown: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Who may reach the MCP endpoint (hosts and origins).
    pub fn with_mcp(mut self, config: crate::mcp::McpConfig) -> Self {
        self.mcp = config;
        self
    }

    /// Keeps the open LiveKit sessions in `file`, and opens the ones it kept from the last run
    /// (the first read of the rooms closes those whose participant is gone).
    pub fn with_state_file(mut self, file: crate::rooms::StateFile) -> Self {
        for kept in file.load() {
            self.worker.sessions.open(
                &kept.key,
                &kept.room,
                &kept.identity,
                crate::rooms::LIVEKIT,
                true,
            );
        }
        self.state_file = Some(file);
        self
    }

    /// Writes the open LiveKit sessions to the state file, when there is one.
    pub fn persist(&self) {
        if let Some(file) = &self.state_file {
            let kept: Vec<crate::rooms::Kept> = self
                .worker
                .sessions
                .from_source(crate::rooms::LIVEKIT)
                .into_iter()
                .map(|(key, room, identity)| crate::rooms::Kept {
                    key,
                    room,
                    identity,
                })
                .collect();
            file.save(&kept);
        }
    }

    /// True when the request carries one of the agent secrets as its Bearer credential (each
    /// compared in constant time).
    pub fn agent_authorized(&self, headers: &HeaderMap) -> bool {
        bearer(headers).is_some_and(|p| {
            self.agent_secrets
                .iter()
                .fold(false, |found, known| found | matches(known, p))
        })
    }
}

pub fn router(state: Arc<ServeState>) -> Router {
    let mcp = crate::mcp::service(state.clone(), &state.mcp, state.shutdown.clone());
    Router::new()
        .nest_service("/mcp", mcp)
        .route("/livekit/webhook", post(livekit_webhook))
        .route("/vapi/webhook", post(vapi_webhook))
        .route("/sessions", get(sessions))
        .merge(crate::agent_api::routes())
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(crate::openapi::openapi_json))
        .layer(DefaultBodyLimit::max(MAX_WEBHOOK_BYTES))
        .with_state(state)
}

/// `{"ok":false,"error":{"code","message"}}`: every failure of the worker's own HTTP routes
/// (`/mcp` answers JSON-RPC errors instead).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ErrorAnswer {
    #[schema(schema_with = relay_wire::openapi::always_false)]
    ok: bool,
    error: ErrorDetail,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// `invalid_request`, `unauthorized`, `payload_too_large` or `not_configured`.
    code: String,
    /// What to fix, in a sentence.
    message: String,
}

/// `{"ok":true}`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct OkAnswer {
    #[schema(schema_with = relay_wire::openapi::always_true)]
    ok: bool,
}

pub(crate) fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let answer = ErrorAnswer {
        ok: false,
        error: ErrorDetail {
            code: code.to_owned(),
            message: message.to_owned(),
        },
    };
    (status, axum::Json(answer)).into_response()
}

/// The request body, or the error answer for one that could not be read (over the limit: 413).
#[allow(clippy::result_large_err)]
pub(crate) fn body_or_error(body: Result<Bytes, BytesRejection>) -> Result<Bytes, Response> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "the request body is over the limit",
            )
        } else {
            error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "the request body could not be read",
            )
        }
    })
}

/// Alive: the process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    operation_id = "healthz",
    responses((status = 200, description = "Alive", body = OkAnswer)),
)]
pub(crate) async fn healthz() -> axum::Json<OkAnswer> {
    axum::Json(OkAnswer { ok: true })
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(relay_wire::headers::bearer)
}

// ---- LiveKit ----------------------------------------------------------------------------------

/// The relay key in a participant's metadata, if it holds one.
pub(crate) fn key_of(participant: Option<&livekit_protocol::ParticipantInfo>) -> Option<String> {
    let metadata = &participant?.metadata;
    let parsed: ParticipantMetadata = serde_json::from_str(metadata).ok()?;
    is_api_key(&parsed.api_key).then_some(parsed.api_key)
}

/// A LiveKit webhook event (`participant_joined` opens the key's session; `participant_left`,
/// `participant_connection_aborted` and `room_finished` close it and revoke the key at the
/// relay). It changes nothing unless the `Authorization` JWT verifies with the LiveKit API
/// secret and its `sha256` claim is the body's digest.
#[utoipa::path(
    post,
    path = "/livekit/webhook",
    tag = "webhooks",
    operation_id = "livekitWebhook",
    request_body(content = Object, content_type = "application/webhook+json",
        description = "LiveKit's WebhookEvent, as LiveKit sends it"),
    security(("livekit_webhook" = [])),
    responses(
        (status = 200, description = "Taken", body = OkAnswer),
        (status = 400, description = "`invalid_request`: the body is not UTF-8 or could not be read", body = ErrorAnswer),
        (status = 401, description = "`unauthorized`: the signature does not verify", body = ErrorAnswer),
        (status = 413, description = "`payload_too_large`: over 1 MiB", body = ErrorAnswer),
    )
)]
pub(crate) async fn livekit_webhook(
    State(state): State<Arc<ServeState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body_or_error(body) {
        Ok(body) => body,
        Err(response) => return response,
    };
    // LiveKit sends the raw JWT; a `Bearer ` prefix (some proxies add one) is tolerated.
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.strip_prefix("Bearer ").unwrap_or(v).trim())
        .unwrap_or_default();
    let Ok(body) = std::str::from_utf8(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "body is not UTF-8",
        );
    };
    let event = match state.receiver.receive(body, auth) {
        Ok(event) => event,
        Err(err) => {
            tracing::warn!(reason = %err, "LiveKit webhook refused");
            return error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the webhook's signature does not verify",
            );
        }
    };
    let room = event
        .room
        .as_ref()
        .map(|r| r.name.clone())
        .unwrap_or_default();
    let participant = event.participant.as_ref();
    let sessions = &state.worker.sessions;
    match event.event.as_str() {
        "participant_joined" => {
            if let Some(key) = key_of(participant) {
                let identity = participant.map(|p| p.identity.as_str()).unwrap_or_default();
                if sessions.open(&key, &room, identity, crate::rooms::LIVEKIT, true) {
                    state.persist();
                }
            }
        }
        "participant_left" | "participant_connection_aborted" => {
            if let Some(key) = key_of(participant) {
                if sessions.end(&key, &event.event) {
                    state.persist();
                }
                revoke(&state, &key).await;
            }
        }
        "room_finished" => {
            let keys = sessions.close_room(&room, "room_finished");
            if !keys.is_empty() {
                state.persist();
            }
            for key in keys {
                revoke(&state, &key).await;
            }
        }
        _ => {}
    }
    axum::Json(OkAnswer { ok: true }).into_response()
}

/// Revokes a key whose participant left: the tab is told and the key can do nothing more.
pub(crate) async fn revoke(state: &ServeState, key: &str) {
    match state.worker.client.revoke(key).await {
        Ok(r) => {
            tracing::info!(key = %Fp(key), tab_notified = r.tab_notified, "key revoked at the relay")
        }
        Err(e) if e.is(ErrorCode::UnknownKey) => {
            tracing::debug!(key = %Fp(key), "key already gone at the relay")
        }
        Err(e) => tracing::warn!(key = %Fp(key), cause = %e, "could not revoke the key"),
    }
}

// ---- Vapi -------------------------------------------------------------------------------------

/// One tool call of a Vapi `tool-calls` message, whatever shape it came in.
#[derive(Debug, PartialEq)]
pub struct VapiCall {
    pub id: String,
    pub name: String,
    pub arguments: Result<Value, String>,
}

/// Reads the calls of a `tool-calls` message: `toolCallList` or `toolCalls`; each with its name
/// and `arguments` or `parameters` at the top or under `function`; arguments as an object or
/// as a JSON string.
pub fn vapi_calls(message: &Value) -> Vec<VapiCall> {
    let list = message
        .get("toolCallList")
        .or_else(|| message.get("toolCalls"))
        .and_then(Value::as_array);
    let Some(list) = list else { return Vec::new() };
    list.iter()
        .map(|call| {
            let function = call.get("function").unwrap_or(call);
            let field = |name: &str| function.get(name).or_else(|| call.get(name));
            let name = field("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let arguments = match field("arguments").or_else(|| field("parameters")) {
                None | Some(Value::Null) => Ok(json!({})),
                Some(Value::String(s)) if s.trim().is_empty() => Ok(json!({})),
                Some(Value::String(s)) => {
                    serde_json::from_str(s).map_err(|_| "arguments are not valid JSON".to_owned())
                }
                Some(v) => Ok(v.clone()),
            };
            VapiCall {
                id: call
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                name,
                arguments,
            }
        })
        .collect()
}

/// The fields of a Vapi message that the webhook reads must have their types: `type` a string,
/// `call` an object, `toolCallList` and `toolCalls` arrays of objects (each may be absent or
/// null).
fn vapi_message_shape(message: &Value) -> Result<(), &'static str> {
    let field = |name: &str| message.get(name).filter(|v| !v.is_null());
    if field("type").is_some_and(|v| !v.is_string()) {
        return Err("message.type must be a string");
    }
    if field("call").is_some_and(|v| !v.is_object()) {
        return Err("message.call must be an object");
    }
    let list_of_objects = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_object));
    if field("toolCallList").is_some_and(|v| !list_of_objects(v))
        || field("toolCalls").is_some_and(|v| !list_of_objects(v))
    {
        return Err("message.toolCallList and message.toolCalls must be arrays of objects");
    }
    Ok(())
}

/// Vapi's server-URL messages: `tool-calls` runs each call through the relay (the key in
/// `message.call.metadata.apiKey`) and answers its results in order; `end-of-call-report`
/// closes the session; other types are acknowledged with `{}`.
#[utoipa::path(
    post,
    path = "/vapi/webhook",
    tag = "webhooks",
    operation_id = "vapiWebhook",
    request_body(content = crate::openapi::VapiEnvelope, content_type = "application/json"),
    security(("vapi_secret" = []), ("vapi_bearer" = [])),
    responses(
        (status = 200, description = "The calls' results in order (`{}` for a message that is not `tool-calls`)", body = VapiResults),
        (status = 400, description = "`invalid_request`: not JSON, no `message` object, or a field of it with another type", body = ErrorAnswer),
        (status = 401, description = "`unauthorized`: missing or wrong Vapi secret", body = ErrorAnswer),
        (status = 413, description = "`payload_too_large`: over 1 MiB", body = ErrorAnswer),
        (status = 503, description = "`not_configured`: VAPI_SECRET is not set, the webhook is off", body = ErrorAnswer),
    )
)]
pub(crate) async fn vapi_webhook(
    State(state): State<Arc<ServeState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(known) = &state.vapi_secret else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_configured",
            "the Vapi webhook is off: VAPI_SECRET is not set",
        );
    };
    let presented = headers
        .get("x-vapi-secret")
        .and_then(|v| v.to_str().ok())
        .or_else(|| bearer(&headers));
    if !presented.is_some_and(|p| matches(known, p)) {
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong Vapi secret",
        );
    }
    let body = match body_or_error(body) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let Ok(envelope) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "body is not JSON",
        );
    };
    let Some(message) = envelope.get("message").filter(|m| m.is_object()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "body has no message object",
        );
    };
    if let Err(problem) = vapi_message_shape(message) {
        return error(StatusCode::BAD_REQUEST, "invalid_request", problem);
    }
    let key = message
        .pointer("/call/metadata/apiKey")
        .and_then(Value::as_str)
        .filter(|k| is_api_key(k))
        .map(str::to_owned);
    let call_id = message
        .pointer("/call/id")
        .and_then(Value::as_str)
        .unwrap_or("vapi");
    let sessions = &state.worker.sessions;

    match message.get("type").and_then(Value::as_str) {
        Some("tool-calls") => {}
        Some("end-of-call-report") => {
            if let Some(key) = &key {
                sessions.close(key, "end-of-call-report");
            }
            return axum::Json(VapiResults::default()).into_response();
        }
        _ => return axum::Json(VapiResults::default()).into_response(),
    }

    if let Some(key) = &key {
        sessions.open(key, call_id, "vapi", "vapi", false);
    }
    let mut results = Vec::new();
    // In order, one after another: UI tools are often sequential (a loading line, then a
    // cassette), and the answer lists results in the calls' order.
    for call in vapi_calls(message) {
        let outcome = match (&key, call.arguments) {
            (None, _) => Err(ToolError::new(
                "unknown_key",
                "the call carries no relay key in call.metadata.apiKey",
            )),
            (_, Err(e)) => Err(ToolError::new("invalid_arguments", e)),
            // Vapi's tool-call id names the call: a redelivered webhook emits nothing twice.
            (Some(key), Ok(args)) => {
                let idempotency_key = (!call.id.is_empty()).then(|| format!("vapi-{}", call.id));
                state
                    .worker
                    .run_tool_with(key, &call.name, &args, idempotency_key)
                    .await
            }
        };
        results.push(match outcome {
            Ok(value) => VapiResult {
                tool_call_id: call.id,
                result: Some(single_line(&value.to_string())),
                error: None,
            },
            Err(err) => VapiResult {
                tool_call_id: call.id,
                result: None,
                error: Some(err.to_line()),
            },
        });
    }
    axum::Json(VapiResults {
        results: Some(results),
    })
    .into_response()
}

/// The answer to a Vapi message: `{"results":[…]}` for `tool-calls`, `{}` otherwise.
#[derive(Debug, Default, serde::Serialize, utoipa::ToSchema)]
pub struct VapiResults {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub results: Option<Vec<VapiResult>>,
}

/// One call's outcome, as Vapi reads it: `result` or `error`, each a single line.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VapiResult {
    pub tool_call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

// ---- sessions ---------------------------------------------------------------------------------

/// The open sessions: key, room, identity, source, mode, age, mode changes, per-tool call
/// statistics.
#[utoipa::path(
    get,
    path = "/sessions",
    tag = "operations",
    operation_id = "sessions",
    security(("agent_secret" = [])),
    responses(
        (status = 200, description = "The open sessions", body = crate::openapi::SessionList),
        (status = 401, description = "`unauthorized`: missing or wrong agent secret", body = ErrorAnswer),
    )
)]
pub(crate) async fn sessions(State(state): State<Arc<ServeState>>, headers: HeaderMap) -> Response {
    if !state.agent_authorized(&headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong agent secret",
        );
    }
    axum::Json(json!({"sessions": state.worker.sessions.snapshot()})).into_response()
}

/// Runs the webhook server on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<ServeState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let stop = state.shutdown.clone();
    // Small writes go out at once: an MCP answer streamed as SSE ends with a chunk of its own,
    // which Nagle's algorithm would otherwise hold until the client's delayed ACK (~40 ms).
    let listener = listener.tap_io(|tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(cause = %err, "TCP_NODELAY not set");
        }
    });
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            shutdown.await;
            stop.cancel();
        })
        .await
}

/// Bound on finishing in-flight webhooks at shutdown.
pub const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vapi_shapes() {
        let both = json!({
            "toolCallList": [
                {"id": "a", "type": "function", "function": {"name": "OpenPopover", "arguments": {"message": "hi"}}},
                {"id": "b", "function": {"name": "show_card", "arguments": "{\"cardId\":\"the-fool\",\"reversed\":false}"}},
                {"id": "c", "name": "draw_card", "parameters": {"positionLabel": "Past", "promptRole": "r"}},
                {"id": "d", "function": {"name": "x", "arguments": "{broken"}},
                {"id": "e", "function": {"name": "loading_status"}}
            ]
        });
        let calls = vapi_calls(&both);
        assert_eq!(calls.len(), 5);
        assert_eq!(calls[0].arguments, Ok(json!({"message": "hi"})));
        assert_eq!(
            calls[1].arguments,
            Ok(json!({"cardId": "the-fool", "reversed": false}))
        );
        assert_eq!(calls[2].name, "draw_card");
        assert_eq!(
            calls[2].arguments.as_ref().unwrap()["positionLabel"],
            "Past"
        );
        assert!(calls[3].arguments.is_err());
        assert_eq!(calls[4].arguments, Ok(json!({})));
        let legacy =
            json!({"toolCalls": [{"id": "z", "function": {"name": "t", "arguments": {}}}]});
        assert_eq!(vapi_calls(&legacy)[0].id, "z");
        assert!(vapi_calls(&json!({})).is_empty());
    }
}
