//! The catalog's tools in the formats of platforms that keep tool definitions in their own
//! dashboard or API (`agent-worker catalog export`): OpenAI function tools, Vapi function tools
//! whose `tool-calls` webhook is the worker's, and ElevenLabs webhook tools that call the
//! worker's agent API with the tab's key from a dynamic variable. Each export holds the UI tools
//! and the mode moves (`enter_<mode>`, `leave_<mode>`), so a platform's agent can go past the
//! first mode; the worker still holds every call to the session's current mode.

use serde_json::{Value, json};

use super::{Catalog, Mode, Move, Tool};

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

impl Format {
    /// Whether the platform calls the worker back, so an export needs the worker's URL.
    pub fn calls_the_worker(self) -> bool {
        !matches!(self, Format::Openai)
    }
}

/// What an export needs besides the catalog.
#[derive(Debug, Clone, Default)]
pub struct Target<'a> {
    /// Only the tools and moves this mode offers; every tool and move when `None`.
    pub mode: Option<&'a str>,
    /// The worker's public base URL, for formats that call it back (required for them).
    pub worker_url: Option<&'a str>,
}

/// The name of the variable that holds the tab's key, in every platform's setup (the field of
/// the `/token` answer and of Vapi's `call.metadata`).
pub const KEY_VARIABLE: &str = "apiKey";

/// The ElevenLabs dynamic variable that holds `Bearer ` and the conversation's session token: a
/// `secret__` variable, which ElevenLabs never puts in the model's prompt.
pub const AUTHORIZATION_VARIABLE: &str = "secret__agentAuthorization";

/// `{{apiKey}}`: how a platform's request headers read the tab's key from the conversation's
/// variables.
pub fn key_placeholder() -> String {
    format!("{{{{{KEY_VARIABLE}}}}}")
}

/// The parameters of a mode move: none.
pub fn no_parameters() -> Value {
    json!({"type": "object", "properties": {}, "additionalProperties": false})
}

/// Why an export cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    #[error("{0} has no mode {1:?}")]
    UnknownMode(String, String),
    #[error(
        "--format {0} needs --worker-url: the platform calls the worker back there (its public \
         https:// base URL, e.g. --worker-url https://worker.example.com)"
    )]
    NoWorkerUrl(&'static str),
    #[error("--worker-url must be an http:// or https:// URL, not {0:?}")]
    BadWorkerUrl(String),
}

/// One exported tool: a UI tool of the catalog, or a mode move.
enum Exported<'c> {
    Ui(&'c Tool),
    Move(Move<'c>, Option<&'c Mode>),
}

impl Exported<'_> {
    fn name(&self) -> String {
        match self {
            Exported::Ui(t) => t.spec.name.clone(),
            Exported::Move(m, _) => m.tool_name(),
        }
    }

    fn description(&self) -> String {
        match self {
            Exported::Ui(t) => t.spec.description.clone(),
            Exported::Move(m, target) => m.description(*target),
        }
    }

    fn parameters(&self) -> Value {
        match self {
            Exported::Ui(t) => t.spec.parameters.clone(),
            Exported::Move(..) => no_parameters(),
        }
    }

    /// Whether the agent waits for the answer (a move's answer holds the new instructions).
    fn awaited(&self) -> bool {
        match self {
            Exported::Ui(t) => t.spec.await_result,
            Exported::Move(..) => true,
        }
    }

    /// Seconds a platform should wait: the tool's own timeout, else the relay's default (15 s),
    /// plus a little for the trip; a move is answered by the worker at once.
    fn wait_secs(&self) -> u64 {
        match self {
            Exported::Ui(t) => t.spec.timeout_ms.unwrap_or(15_000).div_ceil(1000) + 2,
            Exported::Move(..) => 5,
        }
    }
}

/// The mode moves an export offers: those of `mode` (into each of its `next` modes, out of it
/// when it is nested), or of every mode.
/// The moves in, then the moves out (each once).
fn moves<'c>(catalog: &'c Catalog, mode: Option<&str>) -> Vec<Exported<'c>> {
    let from: Vec<&Mode> = catalog
        .modes()
        .filter(|m| mode.is_none_or(|id| m.id == id))
        .collect();
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for id in from.iter().flat_map(|m| &m.next) {
        if let Some(target) = catalog.mode(id)
            && seen.insert(target.id.as_str())
        {
            out.push(Exported::Move(
                Move::Enter(target.id.as_str()),
                Some(target),
            ));
        }
    }
    for nested in from.iter().filter(|m| m.nested) {
        out.push(Exported::Move(Move::Leave(nested.id.as_str()), None));
    }
    out
}

/// The catalog's tools and mode moves (of one mode, or all) in `format`, as a JSON array.
pub fn export(
    catalog: &Catalog,
    format: Format,
    target: &Target<'_>,
) -> Result<Value, ExportError> {
    if let Some(mode) = target.mode
        && catalog.mode(mode).is_none()
    {
        return Err(ExportError::UnknownMode(
            catalog.source().to_owned(),
            mode.to_owned(),
        ));
    }
    let base = match (format.calls_the_worker(), target.worker_url) {
        (false, _) => "",
        (true, None) => {
            return Err(ExportError::NoWorkerUrl(match format {
                Format::Vapi => "vapi",
                _ => "elevenlabs",
            }));
        }
        (true, Some(url)) if url.starts_with("https://") || url.starts_with("http://") => {
            url.trim_end_matches('/')
        }
        (true, Some(url)) => return Err(ExportError::BadWorkerUrl(url.to_owned())),
    };
    let mut all: Vec<Exported<'_>> = catalog
        .tools()
        .filter(|t| target.mode.is_none_or(|m| t.spec.offered_in(m)))
        .map(Exported::Ui)
        .collect();
    all.extend(moves(catalog, target.mode));
    Ok(Value::Array(
        all.iter()
            .map(|tool| match format {
                Format::Openai => openai(tool),
                Format::Vapi => vapi(tool, base),
                Format::Elevenlabs => elevenlabs(tool, base),
            })
            .collect(),
    ))
}

fn openai(tool: &Exported<'_>) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": tool.name(),
            "description": tool.description(),
            "parameters": tool.parameters(),
        }
    })
}

fn vapi(tool: &Exported<'_>, base: &str) -> Value {
    json!({
        "type": "function",
        // A tool that only shows something does not hold the conversation up.
        "async": !tool.awaited(),
        "function": {
            "name": tool.name(),
            "description": tool.description(),
            "parameters": tool.parameters(),
        },
        "server": {
            "url": format!("{base}/vapi/webhook"),
            "timeoutSeconds": tool.wait_secs(),
        },
    })
}

fn elevenlabs(tool: &Exported<'_>, base: &str) -> Value {
    json!({
        "type": "webhook",
        "name": tool.name(),
        "description": tool.description(),
        "response_timeout_secs": tool.wait_secs().min(120),
        "api_schema": {
            "url": format!("{base}/agent/tools/{}", tool.name()),
            "method": "POST",
            "request_headers": {
                // The conversation's own session token, a secret dynamic variable (never shown
                // to the model), set when the conversation starts.
                "Authorization": format!("{{{{{AUTHORIZATION_VARIABLE}}}}}"),
                "X-Voice-Agent-Key": key_placeholder(),
            },
            "request_body_schema": tool.parameters(),
        },
    })
}
