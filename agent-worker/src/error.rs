//! Every failure the worker reports, as one closed list of codes: the relay's error table
//! ([`ErrorCode`]) and the worker's own (arguments that do not match a tool's schema, a tool the
//! catalog does not have or the session's mode does not offer, a relay that cannot be reached).
//! A failure is a value ([`ToolError`]) that an agent can be handed: `to_llm_value` for a model
//! that reads JSON, `speech` for a voice model, `to_line` for platforms that want one string.

use relay_wire::ErrorCode;
use serde::{Serialize, Serializer};
use serde_json::Value;

/// One code of the closed list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// A code of the relay's error table.
    Relay(ErrorCode),
    /// The arguments do not match the tool's JSON Schema (nothing was sent).
    InvalidArguments,
    /// No tool of that name: not in the catalog, not a mode move, not a page tool on offer.
    UnknownTool,
    /// The tool exists, but the session's current mode does not offer it.
    ToolNotAllowed,
    /// The relay could not be reached (after the retries).
    RelayUnreachable,
    /// The relay or the tab answered something that could not be read, or a result that does
    /// not have the tool's declared output shape.
    BadResponse,
    /// The caller cancelled the call.
    Cancelled,
    /// The route is turned off by the configuration (a webhook without its secret).
    NotConfigured,
}

/// The worker's own codes, in the order of [`Code`].
const WORKER_CODES: [Code; 7] = [
    Code::InvalidArguments,
    Code::UnknownTool,
    Code::ToolNotAllowed,
    Code::RelayUnreachable,
    Code::BadResponse,
    Code::Cancelled,
    Code::NotConfigured,
];

impl Code {
    /// Every code: the relay's table first, then the worker's own.
    pub fn all() -> impl Iterator<Item = Code> {
        ErrorCode::ALL
            .into_iter()
            .map(Code::Relay)
            .chain(WORKER_CODES)
    }

    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Relay(code) => code.as_str(),
            Code::InvalidArguments => "invalid_arguments",
            Code::UnknownTool => "unknown_tool",
            Code::ToolNotAllowed => "tool_not_allowed",
            Code::RelayUnreachable => "relay_unreachable",
            Code::BadResponse => "bad_response",
            Code::Cancelled => "cancelled",
            Code::NotConfigured => "not_configured",
        }
    }

    /// The code named `text`, if it is one of the list.
    pub fn parse(text: &str) -> Option<Code> {
        Code::all().find(|c| c.as_str() == text)
    }
}

impl From<ErrorCode> for Code {
    fn from(code: ErrorCode) -> Self {
        Code::Relay(code)
    }
}

impl PartialEq<ErrorCode> for Code {
    fn eq(&self, other: &ErrorCode) -> bool {
        *self == Code::Relay(*other)
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl utoipa::PartialSchema for Code {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(Code::all().map(Code::as_str)))
            .description(Some(
                "The relay's error codes, then the worker's own (invalid_arguments, \
                 unknown_tool, tool_not_allowed, relay_unreachable, bad_response, cancelled, \
                 not_configured)",
            ))
            .into()
    }
}

impl utoipa::ToSchema for Code {}

/// A failure of a tool call, as a value.
///
/// ```
/// use agent_worker::error::{Code, ToolError};
/// use relay_wire::ErrorCode;
/// use serde_json::json;
///
/// let e = ToolError::new(ErrorCode::TabOffline, "no tab came back within 15000 ms");
/// assert_eq!(
///     e.to_llm_value(),
///     json!({"ok": false, "error": {"code": "tab_offline", "message": "no tab came back within 15000 ms"}})
/// );
/// assert_eq!(e.to_line(), "tab_offline: no tab came back within 15000 ms");
/// assert!(e.speech().starts_with("The user's screen is not connected right now"));
/// assert_eq!(ToolError::new(Code::UnknownTool, "x").code.as_str(), "unknown_tool");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    pub code: Code,
    pub message: String,
    /// HTTP status when the relay answered, `None` when it was never reached.
    pub status: Option<u16>,
    pub call_id: Option<String>,
}

impl ToolError {
    pub fn new(code: impl Into<Code>, message: impl Into<String>) -> Self {
        ToolError {
            code: code.into(),
            message: message.into(),
            status: None,
            call_id: None,
        }
    }

    /// True when the relay answered with this code.
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code == code
    }

    /// The object an LLM is handed: `{"ok":false,"error":{"code","message"}}`.
    pub fn to_llm_value(&self) -> Value {
        serde_json::json!({"ok": false, "error": {"code": self.code, "message": self.message}})
    }

    /// A sentence a voice model can say to the user (or act on) for this failure.
    pub fn speech(&self) -> String {
        let what = match self.code {
            Code::Relay(ErrorCode::TabOffline) => {
                "The user's screen is not connected right now, so nothing could be shown."
            }
            Code::Relay(ErrorCode::UnknownKey) => {
                "This session is no longer linked to the user's screen."
            }
            Code::Relay(ErrorCode::Timeout) => "The user's screen did not answer in time.",
            Code::Relay(ErrorCode::NoHandler) => "The user's screen cannot show that.",
            Code::Relay(ErrorCode::ToolFailed) => "The user's screen could not do that",
            Code::Relay(ErrorCode::RateLimited) => {
                "Too many requests to the user's screen at once; try again in a moment."
            }
            Code::Relay(ErrorCode::ShuttingDown | ErrorCode::Unavailable)
            | Code::RelayUnreachable => {
                "The screen service is unavailable for a moment; try again shortly."
            }
            Code::InvalidArguments | Code::Relay(ErrorCode::InvalidRequest) => {
                "The request had invalid arguments"
            }
            Code::UnknownTool => "There is no such tool",
            Code::ToolNotAllowed => "That tool is not available in this mode of the conversation",
            Code::Cancelled => "The call was cancelled",
            _ => "The request to the user's screen failed",
        };
        let what = what.trim_end_matches('.');
        single_line(&format!("{what}. ({}: {})", self.code, self.message))
    }

    /// One line for a voice platform that wants a string: `code: message`, no line breaks.
    pub fn to_line(&self) -> String {
        single_line(&format!("{}: {}", self.code, self.message))
    }
}

/// Replaces line breaks and other control characters with spaces.
pub fn single_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_parses_back_and_none_repeats() {
        let all: Vec<Code> = Code::all().collect();
        assert_eq!(all.len(), ErrorCode::ALL.len() + WORKER_CODES.len());
        for code in &all {
            assert_eq!(Code::parse(code.as_str()), Some(*code));
        }
        let mut names: Vec<&str> = all.iter().map(|c| c.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert_eq!(Code::parse("nope"), None);
    }

    #[test]
    fn failures_are_sentences() {
        let e = ToolError::new(ErrorCode::TabOffline, "no tab came back within 15000 ms");
        let s = e.speech();
        assert!(s.starts_with("The user's screen is not connected"), "{s}");
        assert!(s.contains("tab_offline"), "{s}");
        assert!(!s.contains('\n'));
        assert_eq!(
            serde_json::to_value(Code::ToolNotAllowed).unwrap(),
            "tool_not_allowed"
        );
    }
}
