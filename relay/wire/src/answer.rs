//! How a tab's acknowledgement is read.

use crate::*;

/// The envelope field with the tab's handler time, in milliseconds; read only by a relay that
/// told the tab it accepts it (`CallMeta::accepts_handler_ms`).
pub const HANDLER_MS_FIELD: &str = "handlerMs";

/// What a tab's acknowledgement means, decoded from any JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum TabAnswer {
    /// `{"ok":true,"result":…}`, or any value that is not an envelope.
    Result(serde_json::Value),
    /// `{"ok":false,"error":{"code","message"}}`.
    Error(ErrorObject),
}

impl TabAnswer {
    /// Reads an acknowledgement value: an envelope when it is one (exactly `ok` and `result` or
    /// `error`), otherwise the value itself is the result.
    pub fn from_ack(value: serde_json::Value) -> TabAnswer {
        Self::read(value, false).0
    }

    /// Reads an acknowledgement to a call whose meta said the relay accepts the handler's time:
    /// the envelope may also hold `handlerMs`, a finite number of milliseconds ≥ 0, answered
    /// apart from the result. An envelope with any other `handlerMs` is no envelope (the value
    /// is the result, as [`TabAnswer::from_ack`] reads it).
    pub fn from_timed_ack(value: serde_json::Value) -> (TabAnswer, Option<f64>) {
        Self::read(value, true)
    }

    fn read(value: serde_json::Value, timed: bool) -> (TabAnswer, Option<f64>) {
        let serde_json::Value::Object(mut map) = value else {
            return (TabAnswer::Result(value), None);
        };
        // An envelope without the handler's time has two fields at most: no lookup then.
        let field = if map.len() > 2 {
            map.get(HANDLER_MS_FIELD)
        } else {
            None
        };
        let handler_ms = match field {
            None => None,
            Some(v) if timed => match v.as_f64() {
                Some(ms) if ms.is_finite() && ms >= 0.0 => Some(ms),
                _ => return (TabAnswer::Result(serde_json::Value::Object(map)), None),
            },
            Some(_) => return (TabAnswer::Result(serde_json::Value::Object(map)), None),
        };
        let answer = match map.get("ok") {
            Some(serde_json::Value::Bool(true)) if is_envelope(&map, "result") => {
                TabAnswer::Result(map.remove("result").unwrap_or(serde_json::Value::Null))
            }
            Some(serde_json::Value::Bool(false)) if is_envelope(&map, "error") => {
                let error = map.remove("error").unwrap_or(serde_json::Value::Null);
                TabAnswer::Error(error_object_from(error))
            }
            _ => return (TabAnswer::Result(serde_json::Value::Object(map)), None),
        };
        (answer, handler_ms)
    }
}

/// An envelope holds `ok` and at most the one payload field (and the handler's time, already
/// checked by the caller); anything else is a plain result that happens to contain an `ok`
/// field.
fn is_envelope(map: &serde_json::Map<String, serde_json::Value>, payload: &str) -> bool {
    map.keys()
        .all(|k| k == "ok" || k == payload || k == HANDLER_MS_FIELD)
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
