//! Vapi's server-URL messages, each signed with the webhook's HMAC credential (see
//! [`super::signature`]): `tool-calls` runs each call through the relay with the user's session
//! token, which the call carries as `agentToken` (with the key as `apiKey`) in
//! `call.assistantOverrides.variableValues` or `call.metadata`, and answers `{"results":[…]}` in
//! order with single-line strings; `end-of-call-report` ends that token's session and no other.
//! Vapi's own tool ids make redelivered webhooks emit nothing twice.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use relay_wire::session::looks_like_jwt;
use relay_wire::{ErrorCode, Fp, is_api_key};
use serde_json::{Value, json};

use super::auth::Agent;
use super::error::{self, ApiError, ErrorAnswer};
use super::state::ServeState;
use crate::catalog::Move;
use crate::error::{Code, ToolError, single_line};

/// Where a Vapi call carries the user's values, first found first.
const VALUE_PLACES: [&str; 2] = ["/call/assistantOverrides/variableValues", "/call/metadata"];

/// A string value `name` of the call's values (see [`VALUE_PLACES`]).
fn call_value<'m>(message: &'m Value, name: &str) -> Option<&'m str> {
    VALUE_PLACES
        .iter()
        .find_map(|place| message.pointer(place)?.get(name)?.as_str())
}

/// The agent a Vapi call acts as: its session token verified like any agent's (the key it
/// carries must be the token's).
async fn call_agent(state: &ServeState, message: &Value) -> Result<Agent, ToolError> {
    let token = call_value(message, "agentToken")
        .filter(|t| looks_like_jwt(t))
        .ok_or_else(|| {
            ToolError::new(
                ErrorCode::Unauthorized,
                "the call carries no session token (agentToken in the call's variableValues or metadata)",
            )
        })?;
    let mut headers = axum::http::HeaderMap::new();
    let bearer = axum::http::HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| ToolError::new(ErrorCode::Unauthorized, "the session token is not a token"))?;
    headers.insert(axum::http::header::AUTHORIZATION, bearer);
    if let Some(key) = call_value(message, "apiKey").filter(|k| is_api_key(k))
        && let Ok(value) = axum::http::HeaderValue::from_str(key)
    {
        headers.insert(relay_wire::headers::VOICE_AGENT_KEY, value);
    }
    state
        .agent(&headers)
        .await
        .map_err(|e| ToolError::new(e.code, e.message))
}

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
    request_body(content = super::params::VapiEnvelope, content_type = "application/json"),
    security(("vapi_signature" = [])),
    responses(
        (status = 200, description = "The calls' results in order (`{}` for a message that is not `tool-calls`); a call without a valid session token, or one for another key, has its `error`", body = VapiResults),
        (status = 400, description = "`invalid_request`: not JSON, no `message` object, or a field of it with another type", body = ErrorAnswer),
        (status = 401, description = "`unauthorized`: no signature or timestamp, a signature that does not verify, a timestamp over five minutes away, or a message already taken", body = ErrorAnswer),
        (status = 413, description = "`payload_too_large`: over 1 MiB", body = ErrorAnswer),
        (status = 503, description = "`not_configured`: VAPI_SECRET is not set, the webhook is off", body = ErrorAnswer),
    )
)]
pub(crate) async fn vapi_webhook(
    State(state): State<Arc<ServeState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<axum::Json<VapiResults>, ApiError> {
    let Some(signing) = &state.vapi else {
        return Err(ApiError::not_configured(
            "the Vapi webhook is off: VAPI_SECRET is not set",
        ));
    };
    let body = error::body(body)?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Err(rejected) = signing.check(
        header("x-signature"),
        header("x-timestamp"),
        &body,
        crate::unix_now(),
    ) {
        tracing::warn!(reason = rejected.message(), "Vapi message refused");
        return Err(if rejected == super::signature::Rejected::Busy {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Unavailable,
                rejected.message(),
            )
        } else {
            ApiError::unauthorized(rejected.message())
        });
    }
    let envelope = serde_json::from_slice::<Value>(&body)
        .map_err(|_| ApiError::invalid("body is not JSON"))?;
    let message = envelope
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| ApiError::invalid("body has no message object"))?;
    vapi_message_shape(message).map_err(ApiError::invalid)?;
    let call_id = message
        .pointer("/call/id")
        .and_then(Value::as_str)
        .unwrap_or("vapi");
    let sessions = &state.worker.sessions;

    match message.get("type").and_then(Value::as_str) {
        Some("tool-calls") => {}
        Some("end-of-call-report") => {
            end_of_call(&state, message).await;
            return Ok(axum::Json(VapiResults::default()));
        }
        _ => return Ok(axum::Json(VapiResults::default())),
    }

    let agent = call_agent(&state, message).await;
    if let Ok(agent) = &agent {
        sessions.open(&agent.key, call_id, "vapi", "vapi", false);
    }
    let mut results = Vec::new();
    // In order, one after another: UI tools are often sequential (a loading line, then a
    // cassette), and the answer lists results in the calls' order.
    for call in vapi_calls(message) {
        let outcome = match (&agent, call.arguments) {
            (Err(e), _) => Err(e.clone()),
            (_, Err(e)) => Err(ToolError::new(Code::InvalidArguments, e)),
            // Vapi's tool-call id names the call: a redelivered webhook emits nothing twice. A
            // mode move (the exported `enter_<mode>` tools) changes the session's mode.
            (Ok(agent), Ok(args)) => {
                let is_move = Move::of(&call.name).is_some()
                    && state.worker.catalog.current().tool(&call.name).is_none();
                match agent.require_tool(&call.name, is_move) {
                    Err(refused) => Err(ToolError::new(refused.code, refused.message)),
                    Ok(()) => {
                        let idempotency_key =
                            (!call.id.is_empty()).then(|| format!("vapi-{}", call.id));
                        state
                            .worker
                            .agent_call_with(
                                &agent.key,
                                agent.token.expose(),
                                &call.name,
                                &args,
                                idempotency_key,
                            )
                            .await
                            .result
                    }
                }
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
    Ok(axum::Json(VapiResults {
        results: Some(results),
    }))
}

/// The call ended: its session token's session is ended at the relay (that session only: the
/// key, its tab and its other sessions stay), and the worker's Vapi session of that key closes.
async fn end_of_call(state: &ServeState, message: &Value) {
    let agent = match call_agent(state, message).await {
        Ok(agent) => agent,
        Err(e) => {
            tracing::debug!(cause = %e, "end-of-call report without a usable session token");
            return;
        }
    };
    if let Err(e) = state
        .worker
        .client
        .end_session(&agent.grant.session_id)
        .await
    {
        tracing::warn!(session = %Fp(&agent.grant.session_id), cause = %e, "could not end the session at the relay");
    }
    if state.worker.sessions.source(&agent.key) == Some("vapi") {
        state
            .worker
            .sessions
            .close(&agent.key, "end-of-call-report");
    }
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
