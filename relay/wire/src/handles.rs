//! What a tab says it can do, and the session mode it is told: the payload of
//! `voice-agent:handles` parsed once into a [`Declaration`] (the tool names sorted and
//! deduplicated, the page's own tool definitions as compact JSON), its acknowledgement, and the
//! mode's request and event.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::*;

/// Most tool names one declaration may list.
pub const MAX_HANDLES: usize = 256;
/// Most page-defined tools one declaration may carry.
pub const MAX_PAGE_TOOLS: usize = 32;
/// The largest `pageTools` array, as compact JSON.
pub const MAX_PAGE_TOOLS_BYTES: usize = 16 * 1024;
/// The longest description of a page-defined tool, in characters.
pub const MAX_PAGE_TOOL_DESCRIPTION: usize = 1024;
/// Most modes a page-defined tool may list.
pub const MAX_PAGE_TOOL_MODES: usize = 32;
/// The longest mode id.
pub const MODE_ID_MAX_LEN: usize = 64;

/// True when `id` can name a session mode: 1 to 64 letters, digits, `_` or `-`.
pub fn is_mode_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MODE_ID_MAX_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A tab's declaration, checked: the tools it handles and the tools its page defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    /// The tool names, sorted, without repeats, joined by commas (a tool name holds none).
    handles: Box<str>,
    /// The page's tool definitions as compact JSON, when it sent any.
    page_tools: Option<Box<str>>,
}

/// The fields a tool may have, as a catalog declares it and as a page defines it.
pub const TOOL_FIELDS: [&str; 7] = [
    "name",
    "description",
    "parameters",
    "outputSchema",
    "awaitResult",
    "timeoutMs",
    "modes",
];

impl Declaration {
    /// Checks a `voice-agent:handles` payload; `max_timeout_ms` bounds a page tool's
    /// `timeoutMs`. The error says which field is wrong and why.
    pub fn parse(payload: &Value, max_timeout_ms: u64) -> Result<Declaration, String> {
        let Some(object) = payload.as_object() else {
            return Err("the payload must be an object {\"tools\": [names]}".into());
        };
        if let Some(other) = object
            .keys()
            .find(|k| !["tools", "pageTools"].contains(&k.as_str()))
        {
            return Err(format!(
                "unknown field {other:?} (expected tools, pageTools)"
            ));
        }
        let Some(tools) = object.get("tools").and_then(Value::as_array) else {
            return Err("tools must be an array of tool names".into());
        };
        if tools.len() > MAX_HANDLES {
            return Err(format!("tools lists more than {MAX_HANDLES} names"));
        }
        let mut names: Vec<&str> = Vec::with_capacity(tools.len());
        for (i, name) in tools.iter().enumerate() {
            match name.as_str() {
                Some(n) if is_tool_name(n) => names.push(n),
                _ => {
                    return Err(format!(
                        "tools[{i}] is not a tool name (a letter, then up to 63 letters, \
                         digits, _ or -; not register, revoked, cancel, handles or mode)"
                    ));
                }
            }
        }
        names.sort_unstable();
        names.dedup();
        let page_tools = match object.get("pageTools") {
            None | Some(Value::Null) => None,
            Some(Value::Array(list)) if list.is_empty() => None,
            Some(Value::Array(list)) => Some(page_tools(list, &names, max_timeout_ms)?),
            Some(_) => return Err("pageTools must be an array of tool definitions".into()),
        };
        Ok(Declaration {
            handles: names.join(",").into(),
            page_tools,
        })
    }

    /// A declaration as stored: `handles` the joined names, `page_tools` compact JSON.
    pub fn from_stored(handles: &str, page_tools: Option<&str>) -> Declaration {
        Declaration {
            handles: handles.into(),
            page_tools: page_tools.filter(|p| !p.is_empty()).map(Into::into),
        }
    }

    /// The tool names, joined by commas (how the stores keep them).
    pub fn joined(&self) -> &str {
        &self.handles
    }

    /// The tool names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.handles.split(',').filter(|n| !n.is_empty())
    }

    /// The page's tool definitions as compact JSON.
    pub fn page_tools(&self) -> Option<&str> {
        self.page_tools.as_deref()
    }

    /// The page's tool definitions.
    pub fn page_tools_value(&self) -> Option<Vec<Value>> {
        self.page_tools
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok())
    }
}

/// Checks the page's tool definitions; compact JSON of them.
fn page_tools(list: &[Value], handles: &[&str], max_timeout_ms: u64) -> Result<Box<str>, String> {
    if list.len() > MAX_PAGE_TOOLS {
        return Err(format!("pageTools holds more than {MAX_PAGE_TOOLS} tools"));
    }
    let mut seen: Vec<&str> = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        let at = |field: &str, why: &str| format!("pageTools[{i}].{field} {why}");
        let Some(t) = tool.as_object() else {
            return Err(format!("pageTools[{i}] must be an object"));
        };
        if let Some(other) = t.keys().find(|k| !TOOL_FIELDS.contains(&k.as_str())) {
            return Err(format!("pageTools[{i}] has an unknown field {other:?}"));
        }
        let name = match t.get("name").and_then(Value::as_str) {
            Some(n) if is_tool_name(n) => n,
            _ => return Err(at("name", "must be a tool name")),
        };
        if !handles.contains(&name) {
            return Err(at("name", "must also be listed in tools"));
        }
        if seen.contains(&name) {
            return Err(at("name", "is defined twice"));
        }
        seen.push(name);
        match t.get("description").and_then(Value::as_str) {
            Some(d) if !d.trim().is_empty() && d.chars().count() <= MAX_PAGE_TOOL_DESCRIPTION => {}
            _ => {
                return Err(at(
                    "description",
                    &format!("must be a string of 1 to {MAX_PAGE_TOOL_DESCRIPTION} characters"),
                ));
            }
        }
        if !t.get("parameters").is_some_and(Value::is_object) {
            return Err(at("parameters", "must be a JSON Schema object"));
        }
        if t.get("outputSchema").is_some_and(|s| !s.is_object()) {
            return Err(at("outputSchema", "must be a JSON Schema object"));
        }
        if t.get("awaitResult").is_some_and(|a| !a.is_boolean()) {
            return Err(at("awaitResult", "must be true or false"));
        }
        if let Some(ms) = t.get("timeoutMs")
            && !ms
                .as_u64()
                .is_some_and(|ms| (1..=max_timeout_ms).contains(&ms))
        {
            return Err(at(
                "timeoutMs",
                &format!("must be an integer from 1 to {max_timeout_ms}"),
            ));
        }
        if let Some(modes) = t.get("modes") {
            let ok = modes.as_array().is_some_and(|m| {
                m.len() <= MAX_PAGE_TOOL_MODES
                    && m.iter().all(|id| id.as_str().is_some_and(is_mode_id))
            });
            if !ok {
                return Err(at(
                    "modes",
                    &format!("must be an array of at most {MAX_PAGE_TOOL_MODES} mode ids"),
                ));
            }
        }
    }
    let compact = serde_json::to_string(list).map_err(|_| "pageTools cannot be encoded")?;
    if compact.len() > MAX_PAGE_TOOLS_BYTES {
        return Err(format!(
            "pageTools is larger than {MAX_PAGE_TOOLS_BYTES} bytes"
        ));
    }
    Ok(compact.into())
}

/// Acknowledgement of `voice-agent:handles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandlesAck {
    pub ok: bool,
    /// The key's declaration revision after this one (`ok` true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
}

/// Payload of `voice-agent:mode`, and body of `PUT /api/voice-agent/keys/{apiKey}/mode`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModeEvent {
    /// The session's mode: 1 to 64 letters, digits, `_` or `-`.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9_-]{1,64}$"))]
    pub mode: String,
}

/// `PUT /api/voice-agent/keys/{apiKey}/mode` answer.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModeResponse {
    #[cfg_attr(feature = "openapi", schema(schema_with = openapi::always_true))]
    pub ok: bool,
    /// True when a bound tab was told at once (otherwise it is told when it binds next).
    pub tab_notified: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Declaration, String> {
        Declaration::parse(&v, 120_000)
    }

    fn tool(name: &str) -> Value {
        json!({"name": name, "description": "Zoom.", "parameters": {"type": "object"},
               "awaitResult": true, "timeoutMs": 3000, "modes": ["editing"]})
    }

    #[test]
    fn names_are_sorted_and_deduplicated() {
        let d = parse(json!({"tools": ["b", "a", "b"]})).unwrap();
        assert_eq!(d.joined(), "a,b");
        assert_eq!(d.names().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(d.page_tools(), None);
        let empty = parse(json!({"tools": []})).unwrap();
        assert_eq!(empty.names().count(), 0);
        let with = parse(json!({"tools": ["zoom"], "pageTools": [tool("zoom")]})).unwrap();
        assert_eq!(with.page_tools_value().unwrap()[0]["name"], "zoom");
        assert_eq!(
            Declaration::from_stored(with.joined(), with.page_tools()),
            with
        );
    }

    #[test]
    fn every_bound_is_refused_with_its_field() {
        let many: Vec<String> = (0..=MAX_HANDLES).map(|i| format!("t{i}")).collect();
        let many_pages: Vec<Value> = (0..=MAX_PAGE_TOOLS)
            .map(|i| tool(&format!("t{i}")))
            .collect();
        let mut huge = tool("t0");
        huge["parameters"]["description"] = json!("x".repeat(MAX_PAGE_TOOLS_BYTES));
        let cases = [
            (json!(["a"]), "payload must be an object"),
            (json!({"tool": []}), "unknown field \"tool\""),
            (json!({"tools": "a"}), "tools must be an array"),
            (json!({"tools": many}), "more than 256"),
            (
                json!({"tools": ["ok", "bad name"]}),
                "tools[1] is not a tool name",
            ),
            (json!({"tools": ["handles"]}), "tools[0] is not a tool name"),
            (
                json!({"tools": ["a"], "pageTools": {}}),
                "pageTools must be an array",
            ),
            (
                json!({"tools": many.iter().take(40).collect::<Vec<_>>(), "pageTools": many_pages}),
                "more than 32",
            ),
            (
                json!({"tools": ["zoom"], "pageTools": [tool("other")]}),
                "must also be listed in tools",
            ),
            (
                json!({"tools": ["zoom"], "pageTools": [tool("zoom"), tool("zoom")]}),
                "defined twice",
            ),
            (
                json!({"tools": ["zoom"], "pageTools": [{"name": "zoom", "description": "", "parameters": {}}]}),
                "pageTools[0].description",
            ),
            (
                json!({"tools": ["zoom"], "pageTools": [{"name": "zoom", "description": "z", "parameters": 5}]}),
                "pageTools[0].parameters",
            ),
            (
                json!({"tools": ["zoom"], "pageTools": [{"name": "zoom", "description": "z", "parameters": {}, "timeoutMs": 0}]}),
                "pageTools[0].timeoutMs",
            ),
            (
                json!({"tools": ["zoom"], "pageTools": [{"name": "zoom", "description": "z", "parameters": {}, "modes": ["a b"]}]}),
                "pageTools[0].modes",
            ),
            (
                json!({"tools": ["zoom"], "pageTools": [{"name": "zoom", "description": "z", "parameters": {}, "extra": 1}]}),
                "unknown field \"extra\"",
            ),
            (
                json!({"tools": ["t0"], "pageTools": [huge]}),
                "larger than 16384 bytes",
            ),
        ];
        for (payload, expected) in cases {
            let err = parse(payload.clone()).expect_err(expected);
            assert!(err.contains(expected), "{payload}: {err}");
        }
    }

    #[test]
    fn mode_ids() {
        assert!(is_mode_id("follow-up_2"));
        assert!(!is_mode_id(""));
        assert!(!is_mode_id("two words"));
        assert!(!is_mode_id(&"m".repeat(65)));
    }
}
