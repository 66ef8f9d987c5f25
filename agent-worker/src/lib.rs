//! The agent worker: the agent side's gateway to the relay. Voice pipelines (LiveKit Agents,
//! Vapi, OpenAI Realtime, ElevenLabs) run the conversation; this crate gives them the UI tools:
//! a typed relay client ([`client`]), a tool registry with JSON Schemas ([`tools`]), session
//! modes ([`modes`]), the shipped tool sets ([`toolsets`]), sessions and their log
//! ([`sessions`]), and the server of `agent-worker serve` ([`webhooks`], with the agent API
//! [`agent_api`] and the MCP endpoint [`mcp`], both views of [`Worker::offer`] and
//! [`Worker::agent_call`]). It never speaks Socket.IO: tabs are reached only through the relay's
//! HTTP API.
//!
//! # As a library
//!
//! A voice pipeline written in Rust reaches the user's tab through a [`Worker`] (the session's
//! mode decides which tools it may call, arguments are checked against the tool's schema before
//! anything is sent, and each call is logged), or directly through a [`client::RelayClient`]
//! and a [`tools::Registry`] of its own. What an agent is offered in a session's current mode:
//!
//! ```
//! use agent_worker::Worker;
//! use agent_worker::client::{ClientConfig, RelayClient};
//! use relay_wire::Secret;
//!
//! let secret = Secret::new("the relay's agent secret (RELAY_AGENT_SECRET)");
//! let relay = RelayClient::new(ClientConfig::new("http://127.0.0.1:3001", secret))?;
//! let worker = Worker::new(relay); // the shipped tools and modes
//!
//! // The tab's key, read from the user participant's LiveKit metadata.
//! let key = "va_2222222222222222222222222222222222222222222222222222222222222222";
//! let offer = worker.offer(key);
//! assert_eq!(offer.mode, "default");
//! let names: Vec<&str> = offer.tools.iter().map(|t| t.name.as_str()).collect();
//! assert!(names.contains(&"OpenPopover"));
//! assert!(names.contains(&"enter_spread"), "a mode change is a tool too");
//! # Ok::<(), agent_worker::client::ToolError>(())
//! ```
//!
//! One call the agent made, and its failure as a sentence the voice model can say:
//!
//! ```no_run
//! # use agent_worker::Worker;
//! # use serde_json::json;
//! # async fn example(worker: &Worker, key: &str) {
//! let outcome = worker
//!     .agent_call(key, "OpenPopover", &json!({"message": "Here is your reading"}))
//!     .await;
//! match outcome.result {
//!     Ok(result) => println!("shown: {result}"),
//!     Err(error) => println!("say: {}", error.speech()),
//! }
//! # }
//! ```

pub mod agent_api;
pub mod client;
pub mod config;
pub mod demo;
pub mod mcp;
pub mod modes;
pub mod openapi;
pub mod rooms;
pub mod sessions;
pub mod tools;
pub mod toolsets;
pub mod webhooks;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::client::{RelayClient, ToolError};
use crate::sessions::Sessions;
use crate::tools::Registry;

/// The client, the tools and the sessions, together: what runs a tool call for a pipeline.
pub struct Worker {
    pub client: RelayClient,
    pub registry: Registry,
    pub sessions: Sessions,
}

impl Worker {
    /// A worker with the shipped tools and modes.
    pub fn new(client: RelayClient) -> Self {
        Worker {
            client,
            registry: toolsets::registry(),
            sessions: Sessions::new(toolsets::modes()),
        }
    }

    /// Runs one tool call for `key`: the session's mode allows it, the arguments match the
    /// schema (nothing is sent otherwise), the relay delivers it. Logged in the session log.
    pub async fn run_tool(&self, key: &str, tool: &str, args: &Value) -> Result<Value, ToolError> {
        self.run_tool_with(key, tool, args, None).await
    }

    /// [`Worker::run_tool`] with the caller's `Idempotency-Key` (a retry of the same call gets
    /// its first outcome; see [`Registry::invoke_with`]).
    pub async fn run_tool_with(
        &self,
        key: &str,
        tool: &str,
        args: &Value,
        idempotency_key: Option<String>,
    ) -> Result<Value, ToolError> {
        let started = Instant::now();
        let outcome = match self.sessions.check(key, &self.registry, tool) {
            Ok(()) => {
                self.registry
                    .invoke_with(&self.client, key, tool, args, idempotency_key)
                    .await
            }
            Err(e) => Err(e),
        };
        let summary = outcome.as_ref().map(|_| ()).map_err(Clone::clone);
        self.sessions.record(key, tool, started.elapsed(), &summary);
        outcome
    }
}

/// A tool as an agent is offered it in a session's current mode: a UI tool of the registry or a
/// mode change (`enter_<mode>`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OfferedTool {
    pub name: String,
    pub description: String,
    /// The arguments' JSON Schema.
    #[schema(value_type = Object)]
    pub parameters: Value,
    /// The answer's JSON Schema, for tools that answer with a shape.
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Value>,
    pub await_result: bool,
    pub timeout_ms: Option<u64>,
}

/// What an agent runs with in a session's current mode: its instructions and its tools.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Offer {
    pub mode: String,
    pub instructions: String,
    pub tools: Vec<OfferedTool>,
}

/// The outcome of one agent tool call, with the mode the session is in afterwards.
#[derive(Debug, Clone)]
pub struct AgentOutcome {
    pub result: Result<Value, ToolError>,
    pub mode: String,
    pub mode_changed: bool,
}

/// The parameters of a mode change: none.
fn no_parameters() -> Value {
    json!({"type": "object", "properties": {}, "additionalProperties": false})
}

fn ui_tool(spec: &tools::ToolSpec) -> OfferedTool {
    OfferedTool {
        name: spec.name.clone(),
        description: spec.description.clone(),
        parameters: spec.parameters.clone(),
        output_schema: spec.output_schema.clone(),
        await_result: spec.await_result,
        timeout_ms: spec.timeout_ms,
    }
}

/// The tool that moves a session to `next`.
fn enter_tool(next: &modes::Mode) -> OfferedTool {
    OfferedTool {
        name: modes::enter_tool_name(&next.id),
        description: format!(
            "Move the conversation to its {} phase. In that phase: {}",
            next.id, next.instructions
        ),
        parameters: no_parameters(),
        output_schema: None,
        await_result: false,
        timeout_ms: None,
    }
}

impl Worker {
    /// The mode `key`'s session is in, opening a session (source `agent`, modes enforced) when
    /// none is open yet: an agent may ask before LiveKit's webhook arrives.
    fn agent_mode(&self, key: &str) -> String {
        if let Some(mode) = self.sessions.mode(key) {
            return mode;
        }
        self.sessions.open(key, "", "", "agent", true);
        self.sessions
            .mode(key)
            .unwrap_or_else(|| self.sessions.modes().initial().to_owned())
    }

    /// The instructions and tools of `key`'s session in its current mode.
    pub fn offer(&self, key: &str) -> Offer {
        let modes = self.sessions.modes();
        let id = self.agent_mode(key);
        let mode = modes
            .get(&id)
            .or_else(|| modes.get(modes.initial()))
            .expect("the initial mode exists");
        let mut tools: Vec<OfferedTool> = self.registry.for_mode(&mode.id).map(ui_tool).collect();
        tools.extend(
            mode.next
                .iter()
                .filter_map(|n| modes.get(n))
                .map(enter_tool),
        );
        Offer {
            mode: mode.id.clone(),
            instructions: mode.instructions.clone(),
            tools,
        }
    }

    /// The tool named `name` as it is offered in the modes that offer it: a UI tool of the
    /// registry or a mode change. `None` when no mode offers such a tool.
    pub fn offerable(&self, name: &str) -> Option<OfferedTool> {
        if let Some(spec) = self.registry.get(name) {
            return Some(ui_tool(spec));
        }
        let target = name.strip_prefix(modes::ENTER_PREFIX)?;
        self.sessions.modes().get(target).map(enter_tool)
    }

    /// Runs one tool an agent called for `key`: a mode change of the session's current mode,
    /// or a UI tool through [`Worker::run_tool`].
    pub async fn agent_call(&self, key: &str, tool: &str, args: &Value) -> AgentOutcome {
        self.agent_call_with(key, tool, args, None).await
    }

    /// [`Worker::agent_call`] with the caller's `Idempotency-Key` for a UI tool.
    pub async fn agent_call_with(
        &self,
        key: &str,
        tool: &str,
        args: &Value,
        idempotency_key: Option<String>,
    ) -> AgentOutcome {
        let before = self.agent_mode(key);
        let result = if self.sessions.has_ended(key) {
            Err(ToolError::new(
                "unknown_key",
                "the user's session has ended: they left the room",
            ))
        } else if tool.starts_with(modes::ENTER_PREFIX) && self.registry.get(tool).is_none() {
            self.change_mode(key, tool, args)
        } else {
            self.run_tool_with(key, tool, args, idempotency_key).await
        };
        let mode = self.agent_mode(key);
        AgentOutcome {
            result,
            mode_changed: mode != before,
            mode,
        }
    }

    fn change_mode(&self, key: &str, tool: &str, args: &Value) -> Result<Value, ToolError> {
        let started = Instant::now();
        let outcome = if !args.as_object().is_some_and(|o| o.is_empty()) && !args.is_null() {
            Err(ToolError::new(
                "invalid_arguments",
                format!("{tool} takes no arguments"),
            ))
        } else {
            match self.sessions.change_by_tool(key, tool) {
                Some(mode) => {
                    let instructions = self
                        .sessions
                        .modes()
                        .get(&mode)
                        .map(|m| m.instructions.clone())
                        .unwrap_or_default();
                    Ok(json!({"mode": mode, "instructions": instructions}))
                }
                None => {
                    let target = tool.trim_start_matches(modes::ENTER_PREFIX);
                    let code = if self.sessions.modes().get(target).is_some() {
                        "tool_not_allowed"
                    } else {
                        "unknown_tool"
                    };
                    Err(ToolError::new(
                        code,
                        format!(
                            "{tool} is not a phase change available from the {} phase",
                            self.agent_mode(key)
                        ),
                    ))
                }
            }
        };
        let summary = outcome.as_ref().map(|_| ()).map_err(Clone::clone);
        self.sessions.record(key, tool, started.elapsed(), &summary);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConfig;
    use relay_wire::Secret;

    const KEY: &str = "va_2222222222222222222222222222222222222222222222222222222222222222";

    fn worker() -> Worker {
        // Nothing listens there: these tests never reach the relay.
        let client = RelayClient::new(ClientConfig::new(
            "http://127.0.0.1:9",
            Secret::new("s".repeat(32)),
        ))
        .unwrap();
        Worker::new(client)
    }

    fn names(offer: &Offer) -> Vec<&str> {
        offer.tools.iter().map(|t| t.name.as_str()).collect()
    }

    #[tokio::test]
    async fn an_agent_moves_through_the_modes_with_tools() {
        let w = worker();
        let offer = w.offer(KEY);
        assert_eq!(offer.mode, "default");
        assert_eq!(
            names(&offer),
            [
                "OpenPopover",
                "loading_status",
                "present_to_cassette",
                "enter_intent",
                "enter_spread"
            ]
        );
        assert!(w.sessions.is_open(KEY), "asking opens the session");

        let refused = w.agent_call(KEY, "enter_reading", &json!({})).await;
        assert_eq!(refused.result.unwrap_err().code, "tool_not_allowed");
        assert!(!refused.mode_changed);
        let unknown = w.agent_call(KEY, "enter_nowhere", &json!({})).await;
        assert_eq!(unknown.result.unwrap_err().code, "unknown_tool");
        let with_args = w.agent_call(KEY, "enter_spread", &json!({"x": 1})).await;
        assert_eq!(with_args.result.unwrap_err().code, "invalid_arguments");

        let moved = w.agent_call(KEY, "enter_spread", &json!({})).await;
        assert!(moved.mode_changed);
        assert_eq!(moved.mode, "spread");
        assert_eq!(moved.result.unwrap()["mode"], "spread");
        let offer = w.offer(KEY);
        assert_eq!(names(&offer), ["draw_card", "enter_reading"]);
        let draw = &offer.tools[0];
        assert!(draw.await_result);
        assert_eq!(
            draw.output_schema.as_ref().unwrap()["required"],
            json!(["cardId", "cardName", "reversed"])
        );
        let not_here = w.agent_call(KEY, "OpenPopover", &json!({})).await;
        assert_eq!(not_here.result.unwrap_err().code, "tool_not_allowed");
        let bad = w.agent_call(KEY, "draw_card", &json!({})).await;
        assert_eq!(bad.result.unwrap_err().code, "invalid_arguments");
        assert_eq!(bad.mode, "spread");
    }

    #[tokio::test]
    async fn a_session_that_ended_is_not_reopened_by_an_agent() {
        let w = worker();
        assert!(w.sessions.open(KEY, "room-1", "tab-1", "livekit", true));
        assert!(w.sessions.end(KEY, "participant_left"));
        // The agent goes on calling for the key its user left with: refused, no new session.
        let call = w.agent_call(KEY, "enter_spread", &json!({})).await;
        assert_eq!(call.result.unwrap_err().code, "unknown_key");
        assert!(!call.mode_changed);
        assert_eq!(w.offer(KEY).mode, "default");
        assert!(!w.sessions.is_open(KEY));
        assert!(!w.sessions.open(KEY, "room-1", "tab-1", "livekit", true));
    }

    #[test]
    fn failures_are_sentences() {
        let e = ToolError::new("tab_offline", "no tab came back within 15000 ms");
        let s = e.speech();
        assert!(s.starts_with("The user's screen is not connected"), "{s}");
        assert!(s.contains("tab_offline"), "{s}");
        assert!(!s.contains('\n'));
    }
}
