//! The tool registry: each tool's name, description, JSON Schema for its parameters, whether the
//! agent waits for the tab's answer, and the session modes that may use it. Arguments are
//! validated here, before anything is sent to the relay.
//!
//! ```
//! use agent_worker::tools::{Registry, ToolSpec};
//! use serde_json::json;
//!
//! let mut tools = Registry::default();
//! tools
//!     .register(ToolSpec {
//!         name: "show_price".into(),
//!         description: "Show a price tag in the user's browser.".into(),
//!         parameters: json!({
//!             "type": "object",
//!             "properties": {"amount": {"type": "number", "minimum": 0}},
//!             "required": ["amount"],
//!             "additionalProperties": false
//!         }),
//!         await_result: false,
//!         timeout_ms: None,
//!         modes: vec!["default".into()],
//!         output_schema: None,
//!     })
//!     .expect("a valid name and schema");
//!
//! assert!(tools.validate("show_price", &json!({"amount": 12})).is_ok());
//! let wrong = tools.validate("show_price", &json!({"amount": "twelve"})).unwrap_err();
//! assert_eq!(wrong.code, "invalid_arguments");
//! assert_eq!(tools.validate("nope", &json!({})).unwrap_err().code, "unknown_tool");
//!
//! // The same tools as OpenAI / Vapi function definitions for a mode.
//! let defs = tools.function_definitions("default");
//! assert_eq!(defs[0]["function"]["name"], "show_price");
//! ```
//!
//! [`Registry::invoke`] validates and sends in one step; `agent_worker::toolsets::registry()`
//! is the registry of the shipped tools.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::client::{CallOptions, RelayClient, ToolError};

/// A tool as declared.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the parameters object.
    pub parameters: Value,
    /// Whether the agent waits for the tab's answer.
    pub await_result: bool,
    /// Relay timeout for the call; the relay's default when `None`.
    pub timeout_ms: Option<u64>,
    /// Session modes that may use the tool.
    pub modes: Vec<String>,
    /// JSON Schema of the result, for tools whose answer carries data.
    pub output_schema: Option<Value>,
}

struct Tool {
    spec: ToolSpec,
    validator: jsonschema::Validator,
}

/// Tools by name.
#[derive(Default)]
pub struct Registry {
    tools: BTreeMap<String, Tool>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

/// Most validation errors listed in one message.
const MAX_REPORTED_ERRORS: usize = 5;

impl Registry {
    /// Adds a tool. Fails when the name is not a valid relay tool name, is taken, or the schema
    /// does not compile.
    pub fn register(&mut self, spec: ToolSpec) -> Result<(), String> {
        if !relay_wire::is_tool_name(&spec.name) {
            return Err(format!("{:?} is not a valid tool name", spec.name));
        }
        if self.tools.contains_key(&spec.name) {
            return Err(format!("tool {} is registered twice", spec.name));
        }
        let validator = jsonschema::validator_for(&spec.parameters)
            .map_err(|e| format!("schema of {} does not compile: {e}", spec.name))?;
        self.tools
            .insert(spec.name.clone(), Tool { spec, validator });
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name).map(|t| &t.spec)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// The tools a mode may use, in name order.
    pub fn for_mode<'a>(&'a self, mode: &'a str) -> impl Iterator<Item = &'a ToolSpec> + 'a {
        self.tools
            .values()
            .map(|t| &t.spec)
            .filter(move |s| s.modes.iter().any(|m| m == mode))
    }

    /// Function definitions in the OpenAI / Vapi `tools` format for a mode.
    pub fn function_definitions(&self, mode: &str) -> Value {
        Value::Array(
            self.for_mode(mode)
                .map(|s| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": s.name,
                            "description": s.description,
                            "parameters": s.parameters,
                        }
                    })
                })
                .collect(),
        )
    }

    /// Checks a tool's arguments against its schema.
    pub fn validate(&self, name: &str, args: &Value) -> Result<&ToolSpec, ToolError> {
        let tool = self.tools.get(name).ok_or_else(|| {
            ToolError::new("unknown_tool", format!("there is no tool named {name}"))
        })?;
        let problems: Vec<String> = tool
            .validator
            .iter_errors(args)
            .take(MAX_REPORTED_ERRORS)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("{path}: {e}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(&tool.spec)
        } else {
            Err(ToolError::new(
                "invalid_arguments",
                format!("arguments of {name} are not valid: {}", problems.join("; ")),
            ))
        }
    }

    /// Validates and sends one call. The result for a tool that does not wait is
    /// `{"success":true}`, what the seeds' agents hand their LLM.
    pub async fn invoke(
        &self,
        client: &RelayClient,
        api_key: &str,
        name: &str,
        args: &Value,
    ) -> Result<Value, ToolError> {
        self.invoke_with(client, api_key, name, args, None).await
    }

    /// [`Registry::invoke`] with the caller's `Idempotency-Key`: a caller that retries with the
    /// same key gets the first call's outcome, and the tab gets the call once.
    pub async fn invoke_with(
        &self,
        client: &RelayClient,
        api_key: &str,
        name: &str,
        args: &Value,
        idempotency_key: Option<String>,
    ) -> Result<Value, ToolError> {
        let spec = self.validate(name, args)?;
        let options = CallOptions {
            await_result: spec.await_result,
            timeout_ms: spec.timeout_ms,
            idempotency_key,
        };
        let ok = client.call(api_key, name, Some(args), &options).await?;
        Ok(match ok.result {
            Some(result) if spec.await_result => result,
            _ => json!({"success": true}),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, parameters: Value, modes: &[&str]) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: "d".into(),
            parameters,
            await_result: false,
            timeout_ms: None,
            modes: modes.iter().map(|m| m.to_string()).collect(),
            output_schema: None,
        }
    }

    #[test]
    fn validates_before_sending() {
        let mut r = Registry::default();
        r.register(spec(
            "show_card",
            json!({"type": "object", "properties": {"cardId": {"type": "string"}, "reversed": {"type": "boolean"}},
                   "required": ["cardId", "reversed"], "additionalProperties": false}),
            &["reading"],
        ))
        .unwrap();
        assert!(
            r.validate(
                "show_card",
                &json!({"cardId": "the-fool", "reversed": false})
            )
            .is_ok()
        );
        let err = r.validate("show_card", &json!({"cardId": 3})).unwrap_err();
        assert_eq!(err.code, "invalid_arguments");
        assert!(err.message.contains("reversed"), "{}", err.message);
        assert!(err.message.contains("/cardId"), "{}", err.message);
        assert_eq!(
            r.validate("nope", &json!({})).unwrap_err().code,
            "unknown_tool"
        );
    }

    #[test]
    fn refuses_bad_declarations() {
        let mut r = Registry::default();
        assert!(r.register(spec("bad name", json!({}), &[])).is_err());
        assert!(r.register(spec("x", json!({"type": 12}), &[])).is_err());
        r.register(spec("x", json!({}), &[])).unwrap();
        assert!(r.register(spec("x", json!({}), &[])).is_err());
    }

    #[test]
    fn function_definitions_follow_modes() {
        let mut r = Registry::default();
        r.register(spec("a", json!({"type": "object"}), &["m1"]))
            .unwrap();
        r.register(spec("b", json!({"type": "object"}), &["m1", "m2"]))
            .unwrap();
        let defs = r.function_definitions("m2");
        assert_eq!(defs.as_array().unwrap().len(), 1);
        assert_eq!(defs[0]["function"]["name"], "b");
        assert_eq!(r.for_mode("m1").count(), 2);
        assert_eq!(r.for_mode("none").count(), 0);
    }
}
