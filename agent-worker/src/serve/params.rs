//! Shapes the surfaces name in their documentation (headers, envelopes, the session list) and
//! the OpenAPI document lists: kept here, below both, so no surface imports the document that
//! imports it.

use serde_json::Value;

use crate::session::SessionInfo;

/// The tab's routing key, on a request of the agent API or of `/mcp` (never in a URL): it must
/// be the session token's key; without it, the key of the session the worker follows for the
/// token's key.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub struct VoiceAgentKey {
    /// The tab's routing key (the session token's key).
    #[param(
        rename = "X-Voice-Agent-Key",
        pattern = "^va_[0-9a-f]{64}$",
        required = false
    )]
    key: String,
}

/// The headers of a request to `/mcp`. (`Accept` must list both `application/json` and
/// `text/event-stream` on a POST, `text/event-stream` on a GET; 406 otherwise.)
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub struct McpHeaders {
    /// The tab's routing key (the session token's key).
    #[param(
        rename = "X-Voice-Agent-Key",
        pattern = "^va_[0-9a-f]{64}$",
        required = false
    )]
    key: String,
    /// The MCP session, from the answer to `initialize` (2025-11-25).
    #[param(rename = "Mcp-Session-Id", required = false)]
    session: String,
    /// The negotiated protocol revision.
    #[param(rename = "MCP-Protocol-Version", required = false)]
    version: String,
}

/// The headers of a request to `/mcp` within an MCP session (its stream, its close).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub struct McpSessionHeaders {
    /// The tab's routing key (the session token's key).
    #[param(
        rename = "X-Voice-Agent-Key",
        pattern = "^va_[0-9a-f]{64}$",
        required = false
    )]
    key: String,
    /// The MCP session, from the answer to `initialize`.
    #[param(rename = "Mcp-Session-Id")]
    session: String,
    /// The negotiated protocol revision.
    #[param(rename = "MCP-Protocol-Version", required = false)]
    version: String,
}

/// A JSON-RPC 2.0 error: every refusal of `/mcp`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct JsonRpcError {
    /// `2.0`.
    jsonrpc: String,
    /// The request's id, or null.
    #[schema(value_type = Option<serde_json::Value>)]
    id: Value,
    error: JsonRpcErrorObject,
}

#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct JsonRpcErrorObject {
    code: i32,
    message: String,
    #[schema(value_type = Option<serde_json::Value>)]
    data: Option<Value>,
}

/// Vapi's server-URL message envelope (the handler reads it as JSON; these are the fields it
/// uses).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct VapiEnvelope {
    message: VapiMessage,
}

/// `message`: its `type` (`tool-calls`, `end-of-call-report`, others acknowledged), the call
/// with the user's session token in `agentToken` (and its key in `apiKey`) of
/// `call.assistantOverrides.variableValues` or `call.metadata`, and the calls as `toolCallList` or
/// `toolCalls` (each `{id, function: {name, arguments}}`, or `name` and `arguments` or
/// `parameters` at the top; arguments an object or a JSON string).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct VapiMessage {
    #[schema(rename = "type")]
    kind: Option<String>,
    #[schema(value_type = Option<Object>)]
    call: Option<Value>,
    #[schema(rename = "toolCallList", value_type = Option<Vec<Object>>)]
    tool_call_list: Option<Value>,
    #[schema(rename = "toolCalls", value_type = Option<Vec<Object>>)]
    tool_calls: Option<Value>,
}

/// `GET /sessions`: one object per open session.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct SessionList {
    sessions: Vec<SessionInfo>,
}
