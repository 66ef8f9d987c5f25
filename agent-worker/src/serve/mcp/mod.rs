//! The MCP endpoint of `agent-worker serve`: `/mcp`, Streamable HTTP on rmcp, for voice
//! platforms that take their tools from an MCP server (LiveKit Agents, OpenAI Realtime, Vapi,
//! ElevenLabs, Pipecat). It serves the 2025-11-25 handshake (with sessions) and the stateless
//! 2026-07-28 revision.
//!
//! It is a view of the same functions as the HTTP agent API ([`super::agent_api`]):
//! `tools/list` is [`Worker::offer`], `tools/call` is [`Worker::agent_call`]. Every request
//! carries the agent's session token as a Bearer credential, checked by [`guard`] (a layer in
//! front of the MCP service, so even `initialize` is refused without it), which hands the
//! verified [`Agent`](super::auth::Agent) to the handler in the request's extensions; the key comes with the token
//! (`X-Voice-Agent-Key`, optional, must name the token's key). An MCP session belongs to the
//! token that opened it ([`owners`]): a request on it with another token, or for another key,
//! gets `404` as for an unknown session. An MCP session follows its key's session
//! ([`crate::session::Sessions::follow`]): each change of the mode, of what the tab handles or
//! of the catalog reaches its client as `notifications/tools/list_changed`.
//!
//! [`Worker::offer`]: crate::Worker::offer
//! [`Worker::agent_call`]: crate::Worker::agent_call

pub mod config;
mod handler;
pub mod owners;
pub mod surface;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use relay_wire::session::Scope;

use super::error::ApiError;
use super::state::ServeState;
pub use config::McpConfig;
pub use handler::Handler;
pub use owners::Owners;

/// Largest JSON-RPC message accepted on `/mcp`.
const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// The `/mcp` service: the credential and key check in front of rmcp's Streamable HTTP
/// service. `shutdown` ends every MCP session and stream (a server stopping gracefully would
/// otherwise wait for the clients' open streams).
pub fn service(
    state: Arc<ServeState>,
    config: &McpConfig,
    shutdown: CancellationToken,
) -> axum::routing::Router {
    let mut http = StreamableHttpServerConfig::default()
        .with_allowed_hosts(config.allowed_hosts.clone())
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(MAX_MESSAGE_BYTES);
    http = match &config.allowed_origins {
        None => http.disable_allowed_origins(),
        Some(origins) => http
            .with_allowed_origins(origins.clone())
            .enforce_origin_validation(),
    };
    let handler_state = state.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(Handler::new(handler_state.clone())),
        Arc::new(LocalSessionManager::default()),
        http,
    );
    axum::routing::Router::new()
        .fallback_service(mcp)
        .layer(middleware::from_fn(jsonrpc_errors))
        .layer(middleware::from_fn_with_state(state, guard))
}

/// Largest error body of rmcp's that is turned into a JSON-RPC error.
const MAX_ERROR_TEXT: usize = 16 * 1024;

/// rmcp answers some refusals (406, 405, 415, 413, a missing or unknown session, an internal
/// fault) with plain text or no content type at all; this turns each into a JSON-RPC error
/// (`application/json`, same status, rmcp's text as its message), so every failure of `/mcp`
/// has one shape. Successful answers and streams pass untouched.
async fn jsonrpc_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if response.status().as_u16() < 400 || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, MAX_ERROR_TEXT).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    // rmcp answers a body that is not a JSON-RPC message with 415, as if its media type were
    // wrong; it is a bad request (JSON-RPC's parse error or invalid request).
    let mut code = INVALID_REQUEST;
    if parts.status == StatusCode::UNSUPPORTED_MEDIA_TYPE && text.starts_with("fail to deserialize")
    {
        parts.status = StatusCode::BAD_REQUEST;
        code = PARSE_ERROR;
    }
    let message = if text.is_empty() {
        parts
            .status
            .canonical_reason()
            .unwrap_or("refused")
            .to_owned()
    } else {
        text
    };
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code, "message": message},
    });
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body.to_string()))
}

/// The header naming an MCP session.
const SESSION_ID: &str = "mcp-session-id";

/// Refuses, before the MCP service sees it, a request without a valid session token (401),
/// with one for another key or without the `list` scope (403), or on an MCP session another
/// token opened (404, as for an unknown session). Each answer is a JSON-RPC error, which MCP
/// clients show with its message. A request that passes carries its agent in its
/// extensions; the MCP session `initialize` opens is recorded as that agent's.
async fn guard(State(state): State<Arc<ServeState>>, mut request: Request, next: Next) -> Response {
    // A method MCP does not use is refused as such, whoever asks.
    if ![Method::GET, Method::POST, Method::DELETE].contains(request.method()) {
        let mut response = refusal(
            request,
            StatusCode::METHOD_NOT_ALLOWED,
            "Method Not Allowed: /mcp takes GET, POST and DELETE",
        )
        .await;
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
        return response;
    }
    // A stream or a close names the session it is for: without one it is malformed (after the
    // credential, before the key is looked for).
    let method = request.method().clone();
    let no_session = method != Method::POST && !request.headers().contains_key(SESSION_ID);
    let agent = match state.agent(request.headers()).await {
        Ok(_)
        | Err(ApiError {
            status: StatusCode::NOT_FOUND,
            ..
        }) if no_session => {
            return refusal(
                request,
                StatusCode::BAD_REQUEST,
                "Bad Request: Mcp-Session-Id is required on GET and DELETE",
            )
            .await;
        }
        Ok(agent) => agent,
        Err(err) => {
            let status = err.status;
            let mut response = refusal(request, status, &err.message).await;
            if status == StatusCode::UNAUTHORIZED {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            return response;
        }
    };
    if let Err(err) = agent.require(Scope::List) {
        return refusal(request, err.status, &err.message).await;
    }
    let session = request
        .headers()
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session
        && !state.mcp_owners.owns(id, &agent)
    {
        return refusal(
            request,
            StatusCode::NOT_FOUND,
            "Not Found: Session not found",
        )
        .await;
    }
    let closing = method == Method::DELETE;
    request.extensions_mut().insert(agent.clone());
    let response = next.run(request).await;
    match &session {
        None => {
            if let Some(opened) = response
                .headers()
                .get(SESSION_ID)
                .and_then(|v| v.to_str().ok())
            {
                state.mcp_owners.record(opened, &agent);
            }
        }
        Some(id) if response.status() == StatusCode::NOT_FOUND => state.mcp_owners.forget(id),
        Some(id) if closing && response.status().is_success() => state.mcp_owners.forget(id),
        Some(_) => {}
    }
    response
}

/// JSON-RPC "invalid request".
const INVALID_REQUEST: i32 = -32600;
/// JSON-RPC "parse error": the body is not a JSON-RPC message.
const PARSE_ERROR: i32 = -32700;

/// A JSON-RPC error answering the request's message (its `id` when the body has one).
async fn refusal(request: Request, status: StatusCode, message: &str) -> Response {
    let id = request_id(request.into_body()).await;
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": INVALID_REQUEST, "message": message},
    });
    (status, axum::Json(body)).into_response()
}

/// The `id` of a JSON-RPC request body, or null.
async fn request_id(body: Body) -> Value {
    let Ok(bytes) = axum::body::to_bytes(body, MAX_MESSAGE_BYTES).await else {
        return Value::Null;
    };
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .unwrap_or(Value::Null)
}
