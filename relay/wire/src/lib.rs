//! Wire types of the relay: every body, event payload, header and error code that crosses the
//! relay's boundary. The relay and its agent-side clients (the agent worker) both use these, so
//! the contract is written once. Changing a type here changes the product's outside: treat it as
//! an API.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Short, stable, one-way name for a key, token or secret: the first 8 hex characters of its
/// SHA-256. This is the only form in which such values may reach a log line (and the form
/// `KeyStatus::fingerprint` reports).
pub fn fingerprint(value: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(value.as_bytes());
    hex::encode(&digest[..4])
}

/// A value's [`fingerprint`], computed only when formatted: log fields use `key = %Fp(&key)`, so
/// a line that the filter drops costs no hashing.
pub struct Fp<'a>(pub &'a str);

impl std::fmt::Display for Fp<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&fingerprint(self.0))
    }
}

/// A secret string (agent secret, LiveKit API secret, Vapi secret). Its `Debug` shows only the
/// fingerprint, so a secret inside a logged struct cannot leak.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for the few places that must use it (signing, comparing, sending).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({})", fingerprint(&self.0))
    }
}

/// Prefix of every per-tab routing key.
pub const API_KEY_PREFIX: &str = "va_";
/// Number of lowercase hex characters after the prefix (32 random bytes).
pub const API_KEY_HEX_LEN: usize = 64;
/// Longest accepted tool name (the first character plus 63 more).
pub const TOOL_NAME_MAX_LEN: usize = 64;
/// Prefix of the Socket.IO event that carries a tool call to a tab.
pub const TOOL_EVENT_PREFIX: &str = "voice-agent:";

/// Socket.IO event names used between the relay and a tab.
pub mod events {
    /// Tab → relay: bind a key (bare `va_` key or the LiveKit JWT) to this socket.
    pub const REGISTER: &str = "voice-agent:register";
    /// Relay → tab: this socket no longer holds its key ([`super::RevokedEvent`]).
    pub const REVOKED: &str = "voice-agent:revoked";
    /// Relay → tab: an awaited call ended without an answer ([`super::CancelEvent`]).
    pub const CANCEL: &str = "voice-agent:cancel";
}

/// HTTP header names of the agent API.
pub mod headers {
    /// Retry key: a repeat within the idempotency window gets the first outcome.
    pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
    /// The tab's routing key on requests to the agent worker's agent API and MCP endpoint (never
    /// in a URL).
    pub const VOICE_AGENT_KEY: &str = "x-voice-agent-key";

    /// The credential of an `Authorization: Bearer <credential>` value (scheme case-insensitive).
    pub fn bearer(authorization: &str) -> Option<&str> {
        let (scheme, credential) = authorization.split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| credential.trim())
            .filter(|c| !c.is_empty())
    }
}

/// True when `key` has the exact shape of a relay key: `va_` + 64 lowercase hex characters.
pub fn is_api_key(key: &str) -> bool {
    key.len() == API_KEY_PREFIX.len() + API_KEY_HEX_LEN
        && key.starts_with(API_KEY_PREFIX)
        && key[API_KEY_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// True when `name` matches `^[A-Za-z][A-Za-z0-9_-]{0,63}$`, which keeps every tool event clear
/// of Socket.IO's reserved event names and of the relay's own `voice-agent:` events.
pub fn is_tool_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= TOOL_NAME_MAX_LEN
        && bytes[0].is_ascii_alphabetic()
        && bytes[1..]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
        && !RESERVED_TOOL_NAMES.contains(&name)
}

/// Tool names that would collide with the relay's own `voice-agent:*` events.
const RESERVED_TOOL_NAMES: &[&str] = &["register", "revoked", "cancel"];

/// A routing key read at the edge: `va_` and 64 lowercase hex characters, checked once when a
/// request is parsed, so nothing further in has to ask again. Its `Debug` prints only the
/// fingerprint, and it has no `Display`: a key cannot reach a log line whole by accident.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ApiKey(String);

impl ApiKey {
    /// `None` unless `value` is a well-formed key ([`is_api_key`]).
    pub fn parse(value: impl Into<String>) -> Option<Self> {
        let value = value.into();
        is_api_key(&value).then_some(ApiKey(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for ApiKey {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKey({})", Fp(&self.0))
    }
}

/// A tool name read at the edge: `^[A-Za-z][A-Za-z0-9_-]{0,63}$` and none of the relay's own
/// event names ([`is_tool_name`]).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ToolName(String);

impl ToolName {
    /// `None` unless `value` is an acceptable tool name.
    pub fn parse(value: impl Into<String>) -> Option<Self> {
        let value = value.into();
        is_tool_name(&value).then_some(ToolName(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for ToolName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A call's timeout read at the edge: between 1 ms and the relay's maximum.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CallTimeout(std::time::Duration);

impl CallTimeout {
    /// `timeout_ms` as sent (`None`: `default`), or `None` when outside `1..=max`.
    pub fn parse(
        timeout_ms: Option<u64>,
        default: std::time::Duration,
        max: std::time::Duration,
    ) -> Option<Self> {
        match timeout_ms {
            None => Some(CallTimeout(default)),
            Some(ms) if ms >= 1 && u128::from(ms) <= max.as_millis() => {
                Some(CallTimeout(std::time::Duration::from_millis(ms)))
            }
            Some(_) => None,
        }
    }

    pub fn get(self) -> std::time::Duration {
        self.0
    }
}

/// The closed list of error codes. Each has exactly one HTTP status.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    Unauthorized,
    UnknownKey,
    TabOffline,
    PayloadTooLarge,
    RateLimited,
    ToolFailed,
    NoHandler,
    ShuttingDown,
    /// Several-node deployments only: the shared state store (Redis) is unreachable. Retryable.
    Unavailable,
    Timeout,
    /// Unexpected server fault; the cause is logged, never sent.
    Internal,
}

impl ErrorCode {
    /// Every code, in table order.
    pub const ALL: [ErrorCode; 12] = [
        ErrorCode::InvalidRequest,
        ErrorCode::Unauthorized,
        ErrorCode::UnknownKey,
        ErrorCode::TabOffline,
        ErrorCode::PayloadTooLarge,
        ErrorCode::RateLimited,
        ErrorCode::ToolFailed,
        ErrorCode::NoHandler,
        ErrorCode::ShuttingDown,
        ErrorCode::Unavailable,
        ErrorCode::Timeout,
        ErrorCode::Internal,
    ];

    /// The HTTP status this code is always sent with.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::UnknownKey => 404,
            ErrorCode::TabOffline => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::RateLimited => 429,
            ErrorCode::ToolFailed | ErrorCode::NoHandler => 502,
            ErrorCode::ShuttingDown | ErrorCode::Unavailable => 503,
            ErrorCode::Timeout => 504,
            ErrorCode::Internal => 500,
        }
    }

    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::UnknownKey => "unknown_key",
            ErrorCode::TabOffline => "tab_offline",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::ToolFailed => "tool_failed",
            ErrorCode::NoHandler => "no_handler",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{"code","message"}`: the error object of every failure body and of a tab's error answer.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// One of the closed list of codes (a tab's own error answer may carry any string; the HTTP
    /// API always sends a code of [`ErrorCode`]).
    #[cfg_attr(feature = "openapi", schema(value_type = ErrorCode))]
    pub code: String,
    pub message: String,
}

/// `{"ok":false,"callId"?,"error":{…}}`: every failure of the HTTP API.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    #[cfg_attr(feature = "openapi", schema(schema_with = openapi::always_false))]
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub error: ErrorObject,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>, call_id: Option<String>) -> Self {
        ErrorBody {
            ok: false,
            call_id,
            error: ErrorObject {
                code: code.as_str().to_owned(),
                message: message.into(),
            },
        }
    }
}

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
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

/// Schemas of the fields that serde's types cannot say (an `ok` that is always `true` or always
/// `false`), and a touch to the generated documents.
#[cfg(feature = "openapi")]
pub mod openapi {
    use serde_json::Value;
    use utoipa::openapi::schema::{ObjectBuilder, Type};

    /// `true`, always (the `ok` of every success body).
    pub fn always_true() -> ObjectBuilder {
        ObjectBuilder::new()
            .schema_type(Type::Boolean)
            .enum_values(Some([true]))
    }

    /// `false`, always (the `ok` of every failure body).
    pub fn always_false() -> ObjectBuilder {
        ObjectBuilder::new()
            .schema_type(Type::Boolean)
            .enum_values(Some([false]))
    }

    /// utoipa writes an optional body as `oneOf: [null, T]`; an absent body is what is optional.
    pub fn drop_null_bodies(doc: &mut Value) {
        let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
            return;
        };
        for operation in paths.values_mut().filter_map(Value::as_object_mut) {
            for op in operation.values_mut() {
                let Some(content) = op
                    .pointer_mut("/requestBody/content")
                    .and_then(Value::as_object_mut)
                else {
                    continue;
                };
                for media in content.values_mut() {
                    let Some(schema) = media.get_mut("schema") else {
                        continue;
                    };
                    let alternatives = schema.get("oneOf").and_then(Value::as_array);
                    if let Some([first, second]) = alternatives.map(Vec::as_slice)
                        && first.get("type") == Some(&Value::from("null"))
                    {
                        *schema = second.clone();
                    }
                }
            }
        }
    }
}

/// What a tab's acknowledgement means, decoded from any JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum TabAnswer {
    /// `{"ok":true,"result":…}`, or any value that is not an envelope.
    Result(serde_json::Value),
    /// `{"ok":false,"error":{"code","message"}}`.
    Error(ErrorObject),
}

impl TabAnswer {
    /// Reads an acknowledgement value: an envelope when it is one, otherwise the value itself is
    /// the result.
    pub fn from_ack(value: serde_json::Value) -> TabAnswer {
        let serde_json::Value::Object(mut map) = value else {
            return TabAnswer::Result(value);
        };
        match map.get("ok") {
            Some(serde_json::Value::Bool(true)) if is_envelope(&map, "result") => {
                TabAnswer::Result(map.remove("result").unwrap_or(serde_json::Value::Null))
            }
            Some(serde_json::Value::Bool(false)) if is_envelope(&map, "error") => {
                let error = map.remove("error").unwrap_or(serde_json::Value::Null);
                TabAnswer::Error(error_object_from(error))
            }
            _ => TabAnswer::Result(serde_json::Value::Object(map)),
        }
    }
}

/// An envelope holds `ok` and at most the one payload field; anything else is a plain result
/// that happens to contain an `ok` field.
fn is_envelope(map: &serde_json::Map<String, serde_json::Value>, payload: &str) -> bool {
    map.keys().all(|k| k == "ok" || k == payload)
}

fn error_object_from(error: serde_json::Value) -> ErrorObject {
    let field = |name: &str| match error.get(name) {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(other) if !other.is_null() => Some(other.to_string()),
        _ => None,
    };
    let message = match (&error, field("message")) {
        (_, Some(m)) => m,
        (serde_json::Value::String(s), None) => s.clone(),
        _ => "the tab reported an error".to_owned(),
    };
    ErrorObject {
        code: field("code").unwrap_or_else(|| ErrorCode::ToolFailed.as_str().to_owned()),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bearer_credentials() {
        assert_eq!(headers::bearer("Bearer abc"), Some("abc"));
        assert_eq!(headers::bearer("bearer  abc "), Some("abc"));
        assert_eq!(headers::bearer("Basic abc"), None);
        assert_eq!(headers::bearer("Bearer "), None);
        assert_eq!(headers::bearer("Bearerabc"), None);
    }

    #[test]
    fn api_key_shape() {
        let good = format!("va_{}", "a1".repeat(32));
        assert!(is_api_key(&good));
        assert!(!is_api_key(&good.to_uppercase()));
        assert!(!is_api_key(&good[..good.len() - 1]));
        assert!(!is_api_key(&format!("vb_{}", "a1".repeat(32))));
        assert!(!is_api_key(&format!("va_{}", "g1".repeat(32))));
        assert!(!is_api_key(""));
    }

    #[test]
    fn tool_names() {
        for ok in [
            "OpenPopover",
            "draw_card",
            "a",
            "x-1",
            &format!("a{}", "b".repeat(63)),
        ] {
            assert!(is_tool_name(ok), "{ok}");
        }
        for bad in [
            "",
            "1abc",
            "_x",
            "connect error",
            "a:b",
            "ü",
            "register",
            "cancel",
            "revoked",
            &format!("a{}", "b".repeat(64)),
        ] {
            assert!(!is_tool_name(bad), "{bad}");
        }
    }

    #[test]
    fn every_code_has_one_status_and_round_trips() {
        for code in ErrorCode::ALL {
            let text = serde_json::to_string(&code).unwrap();
            assert_eq!(text, format!("\"{}\"", code.as_str()));
            assert_eq!(serde_json::from_str::<ErrorCode>(&text).unwrap(), code);
            assert!((400..600).contains(&code.http_status()));
        }
    }

    #[test]
    fn tab_answers() {
        assert_eq!(
            TabAnswer::from_ack(json!({"ok": true, "result": {"cardId": "the-fool"}})),
            TabAnswer::Result(json!({"cardId": "the-fool"}))
        );
        assert_eq!(
            TabAnswer::from_ack(json!({"ok": true})),
            TabAnswer::Result(json!(null))
        );
        assert_eq!(
            TabAnswer::from_ack(
                json!({"ok": false, "error": {"code": "no_handler", "message": "m"}})
            ),
            TabAnswer::Error(ErrorObject {
                code: "no_handler".into(),
                message: "m".into()
            })
        );
        assert_eq!(
            TabAnswer::from_ack(json!({"ok": false, "error": "boom"})),
            TabAnswer::Error(ErrorObject {
                code: "tool_failed".into(),
                message: "boom".into()
            })
        );
        // Not an envelope: the whole value is the result.
        assert_eq!(TabAnswer::from_ack(json!(42)), TabAnswer::Result(json!(42)));
        assert_eq!(
            TabAnswer::from_ack(json!({"ok": true, "count": 3})),
            TabAnswer::Result(json!({"ok": true, "count": 3}))
        );
        assert_eq!(
            TabAnswer::from_ack(json!({"success": true, "cardId": "x"})),
            TabAnswer::Result(json!({"success": true, "cardId": "x"}))
        );
    }

    #[test]
    fn tool_call_request_keeps_params_raw() {
        let body = r#"{"apiKey":"k","toolName":"t","params":{"b":1,  "a":[1,2]}}"#;
        let req: ToolCallRequest = serde_json::from_str(body).unwrap();
        assert_eq!(req.params.unwrap().get(), r#"{"b":1,  "a":[1,2]}"#);
        assert!(!req.await_result);
    }
}
