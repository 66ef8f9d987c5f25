//! Names on the wire: the key and tool-name formats, event names, headers, and the types a
//! request's key, tool name and timeout are parsed into.

use crate::*;

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
    /// Tab → relay: the tools this tab handles now ([`super::Declaration`]), acknowledged with
    /// [`super::HandlesAck`].
    pub const HANDLES: &str = "voice-agent:handles";
    /// Relay → tab: the session's mode ([`super::ModeEvent`]), on each change and after each
    /// bind of a key whose mode is set.
    pub const MODE: &str = "voice-agent:mode";
}

/// HTTP header names of the agent API.
pub mod headers {
    /// Retry key: a repeat within the idempotency window gets the first outcome.
    pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
    /// The tab's routing key on requests to the agent worker's agent API and MCP endpoint (never
    /// in a URL).
    pub const VOICE_AGENT_KEY: &str = "x-voice-agent-key";
    /// W3C Trace Context: the caller's trace and span ([`crate::TraceParent`]).
    pub const TRACEPARENT: &str = "traceparent";
    /// W3C Trace Context: vendors' trace state ([`crate::TraceState`]).
    pub const TRACESTATE: &str = "tracestate";
    /// The split of a tool call's time the relay answers with: `relay`, `delivery`, `tab`.
    pub const SERVER_TIMING: &str = "server-timing";

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
const RESERVED_TOOL_NAMES: &[&str] = &["register", "revoked", "cancel", "handles", "mode"];

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
