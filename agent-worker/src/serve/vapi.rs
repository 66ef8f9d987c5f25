//! Vapi's server-URL messages: `tool-calls` runs each call through the relay (the key in
//! `message.call.metadata.apiKey`) and answers `{"results":[…]}` in order with single-line
//! strings; `end-of-call-report` closes the session. Vapi's own tool ids make redelivered
//! webhooks emit nothing twice.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use relay_wire::{ErrorCode, is_api_key};
use serde_json::{Value, json};

use super::error::{self, ApiError, ErrorAnswer};
use super::state::ServeState;
use crate::error::{Code, ToolError, single_line};

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
    request_body(content = super::openapi::VapiEnvelope, content_type = "application/json"),
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
) -> Result<axum::Json<VapiResults>, ApiError> {
    if !state.vapi_configured() {
        return Err(ApiError::not_configured(
            "the Vapi webhook is off: VAPI_SECRET is not set",
        ));
    }
    if !state.vapi_authorized(&headers) {
        return Err(ApiError::unauthorized("missing or wrong Vapi secret"));
    }
    let body = error::body(body)?;
    let envelope = serde_json::from_slice::<Value>(&body)
        .map_err(|_| ApiError::invalid("body is not JSON"))?;
    let message = envelope
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| ApiError::invalid("body has no message object"))?;
    vapi_message_shape(message).map_err(ApiError::invalid)?;
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
            return Ok(axum::Json(VapiResults::default()));
        }
        _ => return Ok(axum::Json(VapiResults::default())),
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
                ErrorCode::UnknownKey,
                "the call carries no relay key in call.metadata.apiKey",
            )),
            (_, Err(e)) => Err(ToolError::new(Code::InvalidArguments, e)),
            // Vapi's tool-call id names the call: a redelivered webhook emits nothing twice. A
            // mode move (the exported `enter_<mode>` tools) changes the session's mode.
            (Some(key), Ok(args)) => {
                let idempotency_key = (!call.id.is_empty()).then(|| format!("vapi-{}", call.id));
                state
                    .worker
                    .agent_call_with(key, &call.name, &args, idempotency_key)
                    .await
                    .result
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
