//! How a tab's acknowledgement is read.

use crate::*;

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
