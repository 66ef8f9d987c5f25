//! Request and response bodies and the events' payloads.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::*;

/// `POST /token` body (all optional; `GET /token` takes the same as query parameters). Which
/// fields a caller may set depends on the relay's token mode: `roomName` and `identity` only
/// with the issuer secret (the app's backend); with an app session JWT they come from its
/// claims, and an anonymous caller always gets a fresh room and identity.
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::ToSchema, utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenRequest {
    /// Display name in the room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 64, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"),
        param(max_length = 64, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")
    )]
    pub participant_name: Option<String>,
    /// The room to join (issuer mode only): letters, digits, `-`, `_` and `.`; spaces only is
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 64, pattern = r"^( *|[A-Za-z0-9._-]*)$"),
        param(max_length = 64, pattern = r"^( *|[A-Za-z0-9._-]*)$")
    )]
    pub room_name: Option<String>,
    /// The LiveKit identity: the app's id for its user (issuer mode only; at most 128
    /// characters, no control characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 128, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"),
        param(max_length = 128, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")
    )]
    pub identity: Option<String>,
}

/// `200` answer of the token service.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenResponse {
    /// LiveKit JWT; its `metadata` claim is `{"apiKey":"va_…"}`.
    pub token: String,
    /// LiveKit server URL the tab joins.
    pub url: String,
    pub room_name: String,
    pub identity: String,
    pub api_key: String,
    /// Token expiry, Unix seconds (the JWT's `exp`).
    pub expires_at: u64,
    /// A session token for this tab's key only (the tab's own agent may use it, and nothing
    /// else can be reached with it): see `POST /api/voice-agent/sessions`.
    pub agent_token: String,
    /// The session of `agentToken` (`DELETE /api/voice-agent/sessions/{sessionId}` ends it).
    pub agent_session_id: String,
    /// `agentToken`'s expiry, Unix seconds.
    pub agent_token_expires_at: u64,
}

/// The participant metadata embedded in every token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParticipantMetadata {
    pub api_key: String,
}

/// `POST /api/voice-agent/tool-call` body. `params` is kept as raw JSON: the relay passes it to
/// the tab as it came, without decoding and re-encoding it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRequest {
    /// The tab's routing key.
    #[cfg_attr(feature = "openapi", schema(pattern = "^va_[0-9a-f]{64}$"))]
    pub api_key: String,
    /// The tool; the tab receives the event `voice-agent:<toolName>`. `register`, `revoked` and
    /// `cancel` are reserved.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z][A-Za-z0-9_-]{0,63}$"))]
    pub tool_name: String,
    /// Any JSON value; passed to the tab as it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<serde_json::Value>))]
    pub params: Option<Box<RawValue>>,
    /// Wait for the tab's answer and return it as `result`.
    #[serde(default)]
    pub await_result: bool,
    /// How long the call may take, milliseconds (default 15000, at most the relay's
    /// `RELAY_MAX_TIMEOUT_MS`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole::optional"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 120_000))]
    pub timeout_ms: Option<u64>,
}

/// `200` answer of a tool call.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallResponse {
    #[cfg_attr(feature = "openapi", schema(schema_with = openapi::always_true))]
    pub ok: bool,
    pub call_id: String,
    /// The tab's answer, present when the call was awaited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<serde_json::Value>))]
    pub result: Option<serde_json::Value>,
}

/// Second argument of every tool event: `(params, meta)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallMeta {
    pub call_id: String,
    pub expects_result: bool,
    /// Milliseconds the tab has to answer, counted from when the event was sent; `null` for a
    /// call that expects no answer. Relative, so a skewed browser clock does not matter.
    pub deadline_ms: Option<u64>,
}

/// Lifecycle state of a key as the agent API reports it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyState {
    /// Minted, never bound to a tab.
    Issued,
    /// Bound to a live tab.
    Online,
    /// Its tab went away; kept for a reconnect until the grace ends.
    Offline,
}

/// `GET /api/voice-agent/keys/{apiKey}` answer.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyStatus {
    #[cfg_attr(feature = "openapi", schema(schema_with = openapi::always_true))]
    pub ok: bool,
    pub state: KeyState,
    /// Short SHA-256 fingerprint of the key, as it appears in logs.
    pub fingerprint: String,
    /// Unix milliseconds of the last state change.
    pub since_ms: u64,
    /// For an offline key: Unix milliseconds when it will be removed unless its tab comes back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ends_ms: Option<u64>,
    /// Unix milliseconds when the tab's token expires: no session token of the key outlives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_expires_ms: Option<u64>,
    /// Counts the changes of what the tab declared (`voice-agent:handles`); 0 when it never
    /// did. Ask again with `after` set to it to wait for the next change.
    #[serde(default)]
    pub revision: u64,
    /// The tools the tab handles now, sorted; absent when it never said (it then counts as
    /// handling every tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handles: Option<Vec<String>>,
    /// The tools the tab's page defined with their schemas, as the page sent them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<Object>>))]
    pub page_tools: Option<Vec<serde_json::Value>>,
    /// The session mode an agent last set for the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// `DELETE /api/voice-agent/keys/{apiKey}` answer.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevokeResponse {
    #[cfg_attr(feature = "openapi", schema(schema_with = openapi::always_true))]
    pub ok: bool,
    /// True when a live tab was told and unbound.
    pub tab_notified: bool,
}

/// Acknowledgement of `voice-agent:register`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterAck {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
}

/// Why a socket lost its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RevokeReason {
    /// A newer valid bind of the same key took over.
    Replaced,
    /// The agent side revoked the key.
    Revoked,
    /// The relay is shutting down.
    ShuttingDown,
}

/// Payload of `voice-agent:revoked`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokedEvent {
    pub reason: RevokeReason,
}

/// Payload of `voice-agent:cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelEvent {
    pub call_id: String,
}
