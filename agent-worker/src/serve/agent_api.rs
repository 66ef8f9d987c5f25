//! The agent API of `agent-worker serve`: what a voice agent in the room (the reference
//! LiveKit Agents agents, or any other) uses to run the UI tools without speaking to the relay
//! itself. `GET /agent/tools` gives the instructions and tools of the session's current mode
//! (and, asked with the revision it has, waits for the next change), `POST /agent/tools/{name}`
//! runs one (a UI tool through the relay, or a mode move). Every request carries the agent's
//! session token as a Bearer credential ([`Agent`]); the key comes with it (`X-Voice-Agent-Key`,
//! which must name the token's key, or the session the worker follows for it), never in the
//! URL.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use relay_wire::headers;
use serde::Deserialize;
use serde_json::{Value, json};

use relay_wire::session::Scope;

use super::auth::Agent;
use super::error::{self, ApiError, ErrorAnswer};
use super::state::ServeState;
use crate::catalog::Move;
use crate::error::Code;
use crate::session::Offer;

/// The longest wait for a changed offer.
pub const MAX_WAIT_MS: u64 = 30_000;

/// `offer` as `agent`'s token may use it: only the tools it may call, the moves only with the
/// `mode` scope.
fn for_agent(agent: &Agent, mut offer: Offer) -> Offer {
    offer.tools.retain(|t| agent.may_use(&t.name, t.is_move));
    offer
}

/// `GET /agent/tools`'s query: wait for an offer other than the one the caller has.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// The `revision` of the offer the caller has: the answer waits until the offer differs
    /// (its mode, its instructions or its tools), at most `waitMs`.
    #[param(max_length = 64)]
    after: Option<String>,
    /// How long to wait for a change, 0 to 30000 ms (default 0: answer at once).
    #[param(minimum = 0, maximum = 30000)]
    wait_ms: Option<u64>,
}

/// The instructions and tools of the key's session in its current mode, for what its tab
/// handles now (the session opens on the first request for a key). With `after` and `waitMs`
/// the answer waits for the next change.
#[utoipa::path(
    get,
    path = "/agent/tools",
    tag = "agent",
    operation_id = "listTools",
    params(super::params::VoiceAgentKey, WaitQuery),
    security(("session_token" = [])),
    responses(
        (status = 200, description = "The session's mode, instructions and tools (those the token may use)", body = Offer),
        (status = 400, description = "`invalid_request`: X-Voice-Agent-Key not a key; a bad `after` or `waitMs`", body = ErrorAnswer),
        (status = 401, description = "`unauthorized`: a missing, forged, expired or foreign session token", body = ErrorAnswer),
        (status = 403, description = "`forbidden`: a token for another key, or without the `list` scope", body = ErrorAnswer),
        (status = 404, description = "`unknown_key`: no X-Voice-Agent-Key, and the worker follows no session of the token's key", body = ErrorAnswer),
    )
)]
pub(crate) async fn list_tools(
    State(state): State<Arc<ServeState>>,
    agent: Agent,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<axum::Json<Offer>, ApiError> {
    agent.require(Scope::List)?;
    let key = &agent.key;
    let Query(query) =
        query.map_err(|e| ApiError::invalid(format!("bad query: {}", e.body_text())))?;
    let wait = query.wait_ms.unwrap_or(0);
    if wait > MAX_WAIT_MS {
        return Err(ApiError::invalid(format!(
            "waitMs must be 0 to {MAX_WAIT_MS}"
        )));
    }
    if query.after.as_ref().is_some_and(|a| a.chars().count() > 64) {
        return Err(ApiError::invalid("after must be at most 64 characters"));
    }
    let offer = match query.after.filter(|_| wait > 0) {
        Some(after) => {
            // A stopping server answers at once rather than hold the request to the end.
            tokio::select! {
                offer = state.worker.wait_offer(key, &after, Duration::from_millis(wait)) => offer,
                _ = state.shutdown.cancelled() => state.worker.offer(key).await,
            }
        }
        None => state.worker.offer(key).await,
    };
    Ok(axum::Json(for_agent(&agent, offer)))
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
    /// Why it failed (`ok` false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<AgentFailure>,
    /// The session's mode after the call.
    pub mode: String,
    /// Whether the call changed the mode.
    pub mode_changed: bool,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct AgentFailure {
    /// `tab_offline`, `timeout`, `tool_failed`, `no_handler`, `invalid_arguments`,
    /// `tool_not_allowed`, `unknown_tool`, `unknown_key`, …
    pub code: Code,
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
        super::params::VoiceAgentKey,
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[\\x21-\\x7E]{1,128}$",
            description = "Passed on to the relay: a retried call is emitted once"),
    ),
    request_body(content = Option<Object>, content_type = "application/json",
        description = "The tool's arguments; an empty body or `null` is `{}`"),
    security(("session_token" = [])),
    responses(
        (status = 200, description = "The tool's outcome and the session's mode", body = AgentAnswer),
        (status = 400, description = "`invalid_request`: X-Voice-Agent-Key not a key, a body that is not a JSON object, a bad Idempotency-Key", body = ErrorAnswer),
        (status = 401, description = "`unauthorized`: a missing, forged, expired or foreign session token", body = ErrorAnswer),
        (status = 403, description = "`forbidden`: a token for another key; for a tool it may not call (scope `call`, its tool list) or a mode move without the `mode` scope", body = ErrorAnswer),
        (status = 404, description = "`unknown_key`: no X-Voice-Agent-Key, and the worker follows no session of the token's key", body = ErrorAnswer),
        (status = 413, description = "`payload_too_large`: over 1 MiB", body = ErrorAnswer),
    )
)]
pub(crate) async fn call_tool(
    State(state): State<Arc<ServeState>>,
    agent: Agent,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<axum::Json<AgentAnswer>, ApiError> {
    let Path(name) =
        name.map_err(|_| ApiError::invalid("the tool name in the path is not valid UTF-8"))?;
    let is_move = Move::of(&name).is_some() && state.worker.catalog.current().tool(&name).is_none();
    agent.require_tool(&name, is_move)?;
    let body = error::body(body)?;
    let args: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => v,
            Ok(Value::Null) => json!({}),
            _ => {
                return Err(ApiError::invalid(
                    "the body must be the tool's arguments as a JSON object",
                ));
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
                return Err(ApiError::invalid(
                    "Idempotency-Key must be 1 to 128 visible ASCII characters",
                ));
            }
        },
    };
    let outcome = state
        .worker
        .agent_call_with(
            &agent.key,
            agent.token.expose(),
            &name,
            &args,
            idempotency_key,
        )
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
    Ok(axum::Json(AgentAnswer {
        ok: error.is_none(),
        result,
        error,
        mode: outcome.mode,
        mode_changed: outcome.mode_changed,
    }))
}
