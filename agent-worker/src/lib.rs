//! The agent worker: the agent side's gateway to the relay. Voice pipelines (LiveKit Agents,
//! Vapi, OpenAI Realtime, ElevenLabs) run the conversation; this crate gives them the UI tools:
//! a typed relay client ([`client`]), a tool registry with JSON Schemas ([`tools`]), session
//! modes ([`modes`]), the shipped tool sets ([`toolsets`]), sessions and their log
//! ([`sessions`]), and the webhook server ([`webhooks`]). It never speaks Socket.IO: tabs are
//! reached only through the relay's HTTP API.

pub mod client;
pub mod config;
pub mod demo;
pub mod modes;
pub mod sessions;
pub mod tools;
pub mod toolsets;
pub mod webhooks;

use serde_json::Value;
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
        let started = Instant::now();
        let outcome = match self.sessions.check(key, &self.registry, tool) {
            Ok(()) => self.registry.invoke(&self.client, key, tool, args).await,
            Err(e) => Err(e),
        };
        let summary = outcome.as_ref().map(|_| ()).map_err(Clone::clone);
        self.sessions.record(key, tool, started.elapsed(), &summary);
        outcome
    }
}
