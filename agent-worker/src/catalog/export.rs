//! The catalog's tools in the formats of platforms that keep tool definitions in their own
//! dashboard or API (`agent-worker catalog export`): OpenAI function tools, Vapi function tools
//! whose `tool-calls` webhook is the worker's, and ElevenLabs webhook tools that call the
//! worker's agent API with the tab's key from a dynamic variable.

use serde_json::{Value, json};

use super::{Catalog, Tool};

/// A platform's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `{"type":"function","function":{name, description, parameters}}` (Chat Completions;
    /// the Realtime API takes the inner object's fields at the top).
    Openai,
    /// Vapi function tools, answered by the worker's `POST /vapi/webhook`.
    Vapi,
    /// ElevenLabs webhook tools on the worker's `POST /agent/tools/{name}`.
    Elevenlabs,
}

/// What an export needs besides the catalog.
#[derive(Debug, Clone, Default)]
pub struct Target<'a> {
    /// Only the tools this mode offers; every tool when `None`.
    pub mode: Option<&'a str>,
    /// The worker's public base URL, for formats that call it back.
    pub worker_url: Option<&'a str>,
}

/// The placeholder for the worker's URL when none is given.
const WORKER_URL_PLACEHOLDER: &str = "https://WORKER_HOST";
/// The dynamic variable an ElevenLabs conversation must be started with: the tab's key.
pub const ELEVENLABS_KEY_VARIABLE: &str = "{{va_key}}";

/// The catalog's tools (of one mode, or all) in `format`, as a JSON array.
pub fn export(catalog: &Catalog, format: Format, target: &Target<'_>) -> Value {
    let base = target
        .worker_url
        .unwrap_or(WORKER_URL_PLACEHOLDER)
        .trim_end_matches('/');
    let tools = catalog
        .tools()
        .filter(|t| target.mode.is_none_or(|m| t.spec.offered_in(m)));
    Value::Array(
        tools
            .map(|tool| match format {
                Format::Openai => openai(tool),
                Format::Vapi => vapi(tool, base),
                Format::Elevenlabs => elevenlabs(tool, base),
            })
            .collect(),
    )
}

fn openai(tool: &Tool) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": tool.spec.name,
            "description": tool.spec.description,
            "parameters": tool.spec.parameters,
        }
    })
}

/// Seconds a platform should wait for a tool: the tool's own timeout, else the relay's default
/// (15 s), plus a little for the trip.
fn wait_secs(tool: &Tool) -> u64 {
    tool.spec.timeout_ms.unwrap_or(15_000).div_ceil(1000) + 2
}

fn vapi(tool: &Tool, base: &str) -> Value {
    json!({
        "type": "function",
        // A tool that only shows something does not hold the conversation up.
        "async": !tool.spec.await_result,
        "function": {
            "name": tool.spec.name,
            "description": tool.spec.description,
            "parameters": tool.spec.parameters,
        },
        "server": {
            "url": format!("{base}/vapi/webhook"),
            "timeoutSeconds": wait_secs(tool),
        },
    })
}

fn elevenlabs(tool: &Tool, base: &str) -> Value {
    json!({
        "type": "webhook",
        "name": tool.spec.name,
        "description": tool.spec.description,
        "response_timeout_secs": wait_secs(tool).min(120),
        "api_schema": {
            "url": format!("{base}/agent/tools/{}", tool.spec.name),
            "method": "POST",
            "request_headers": {
                // Replace with the agent secret, kept as a workspace secret of the platform.
                "Authorization": "Bearer AGENT_SECRET",
                "X-Voice-Agent-Key": ELEVENLABS_KEY_VARIABLE,
            },
            "request_body_schema": tool.spec.parameters,
        },
    })
}
