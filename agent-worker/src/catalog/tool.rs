//! One tool as declared (a catalog entry or a page's definition) and as compiled: its JSON
//! Schemas checked and compiled once, its arguments validated before anything is sent.

use serde::Deserialize;
use serde_json::Value;

use crate::error::{Code, ToolError};

/// The longest call timeout a tool may declare, in milliseconds (the relay's own maximum by
/// default).
pub const MAX_TIMEOUT_MS: u64 = 120_000;
/// The longest description a tool may have, in characters.
pub const MAX_DESCRIPTION: usize = 4096;
/// Most validation errors listed in one message.
const MAX_REPORTED_ERRORS: usize = 5;

/// A tool as declared: the catalog file's field names.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    /// JSON Schema of the tab's answer, for a tool whose answer has a shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Whether the agent waits for the tab's answer.
    #[serde(default)]
    pub await_result: bool,
    /// The relay's timeout for the call; the relay's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The modes that offer the tool; every mode when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modes: Option<Vec<String>>,
}

impl ToolSpec {
    /// True when a session in `mode` is offered this tool.
    pub fn offered_in(&self, mode: &str) -> bool {
        self.modes
            .as_ref()
            .is_none_or(|modes| modes.iter().any(|m| m == mode))
    }
}

/// What is wrong with a tool's shape: the field (as the file names it, empty for the tool as a
/// whole) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolShapeError {
    pub field: &'static str,
    pub message: String,
}

fn shape(field: &'static str, message: impl Into<String>) -> ToolShapeError {
    ToolShapeError {
        field,
        message: message.into(),
    }
}

/// A declared tool with its schemas compiled.
pub struct Tool {
    pub spec: ToolSpec,
    validator: jsonschema::Validator,
    /// The answer's schema, when the tool declares one.
    output: Option<jsonschema::Validator>,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Tool").field(&self.spec.name).finish()
    }
}

/// Compiles a schema; the compiler's complaint otherwise, in one line.
fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::validator_for(schema).map_err(|e| {
        let at = e.instance_path().to_string();
        if at.is_empty() {
            format!("the schema does not compile: {e}")
        } else {
            format!("the schema does not compile at {at}: {e}")
        }
    })
}

impl Tool {
    /// Checks a tool's own shape (not its modes, which only a catalog knows) and compiles its
    /// schemas. Every problem found, each with its field.
    pub fn compile(spec: ToolSpec) -> Result<Tool, Vec<ToolShapeError>> {
        let mut problems = Vec::new();
        if !relay_wire::is_tool_name(&spec.name) {
            problems.push(shape(
                "name",
                format!(
                    "{:?} is not a tool name the relay accepts: a letter, then up to 63 letters, \
                     digits, _ or -, and none of register, revoked, cancel, handles, mode",
                    spec.name
                ),
            ));
        }
        let description = spec.description.trim();
        if description.is_empty() {
            problems.push(shape(
                "description",
                "is empty: the agent's model chooses tools by their description",
            ));
        } else if spec.description.chars().count() > MAX_DESCRIPTION {
            problems.push(shape(
                "description",
                format!("is over {MAX_DESCRIPTION} characters"),
            ));
        }
        let validator = if spec.parameters.get("type").and_then(Value::as_str) != Some("object") {
            problems.push(shape(
                "parameters",
                "must be a JSON Schema with \"type\": \"object\" (a tool takes an object of \
                 arguments)",
            ));
            None
        } else {
            compile(&spec.parameters)
                .map_err(|m| problems.push(shape("parameters", m)))
                .ok()
        };
        let mut output_validator = None;
        if let Some(output) = &spec.output_schema {
            if !output.is_object() {
                problems.push(shape("outputSchema", "must be a JSON Schema object"));
            } else {
                match compile(output) {
                    Ok(v) => output_validator = Some(v),
                    Err(m) => problems.push(shape("outputSchema", m)),
                }
            }
            if !spec.await_result {
                problems.push(shape(
                    "outputSchema",
                    "is declared, but awaitResult is false: nothing would be answered",
                ));
            }
        }
        if let Some(ms) = spec.timeout_ms
            && !(1..=MAX_TIMEOUT_MS).contains(&ms)
        {
            problems.push(shape(
                "timeoutMs",
                format!("{ms} is out of bounds (1 to {MAX_TIMEOUT_MS} ms)"),
            ));
        }
        match validator {
            Some(validator) if problems.is_empty() => Ok(Tool {
                spec,
                validator,
                output: output_validator,
            }),
            _ => Err(problems),
        }
    }

    /// Checks the arguments of one call against the tool's schema.
    pub fn validate(&self, args: &Value) -> Result<(), ToolError> {
        let problems = problems(&self.validator, args);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ToolError::new(
                Code::InvalidArguments,
                format!(
                    "arguments of {} are not valid: {}",
                    self.spec.name,
                    problems.join("; ")
                ),
            ))
        }
    }

    /// Checks a tab's answer against the declared output schema; true when none is declared.
    pub fn answer_fits(&self, answer: &Value) -> bool {
        self.output.as_ref().is_none_or(|v| v.is_valid(answer))
    }

    /// Checks a tab's answer against the declared output schema (none declared: any answer
    /// fits). An answer of another shape is `bad_response`, whichever surface asked: the agent
    /// would otherwise act on something the tool never promised.
    pub fn check_answer(&self, answer: &Value) -> Result<(), ToolError> {
        let Some(output) = &self.output else {
            return Ok(());
        };
        let problems = problems(output, answer);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ToolError::new(
                Code::BadResponse,
                format!(
                    "the screen's answer to {} does not have the declared shape: {}",
                    self.spec.name,
                    problems.join("; ")
                ),
            ))
        }
    }
}

/// What `validator` finds wrong with `value`, each with its path (at most
/// [`MAX_REPORTED_ERRORS`]).
fn problems(validator: &jsonschema::Validator, value: &Value) -> Vec<String> {
    validator
        .iter_errors(value)
        .take(MAX_REPORTED_ERRORS)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("{path}: {e}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(parameters: Value) -> ToolSpec {
        ToolSpec {
            name: "show_card".into(),
            description: "d".into(),
            parameters,
            output_schema: None,
            await_result: false,
            timeout_ms: None,
            modes: None,
        }
    }

    #[test]
    fn validates_before_sending() {
        let tool = Tool::compile(spec(json!({"type": "object",
            "properties": {"cardId": {"type": "string"}, "reversed": {"type": "boolean"}},
            "required": ["cardId", "reversed"], "additionalProperties": false})))
        .unwrap();
        assert!(
            tool.validate(&json!({"cardId": "the-fool", "reversed": false}))
                .is_ok()
        );
        let err = tool.validate(&json!({"cardId": 3})).unwrap_err();
        assert_eq!(err.code, Code::InvalidArguments);
        assert!(err.message.contains("reversed"), "{}", err.message);
        assert!(err.message.contains("/cardId"), "{}", err.message);
    }

    #[test]
    fn every_problem_of_a_tool_is_named() {
        let mut bad = spec(json!({"type": 12}));
        bad.name = "bad name".into();
        bad.description = " ".into();
        bad.timeout_ms = Some(0);
        bad.output_schema = Some(json!({"type": "object"}));
        let problems = Tool::compile(bad).unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            [
                "name",
                "description",
                "parameters",
                "outputSchema",
                "timeoutMs"
            ]
        );
        let not_compiling =
            Tool::compile(spec(json!({"type": "object", "minProperties": "x"}))).unwrap_err();
        assert!(
            not_compiling[0].message.contains("does not compile"),
            "{:?}",
            not_compiling
        );
        assert!(Tool::compile(spec(json!({"type": "object"}))).is_ok());
    }
}
