//! The agent worker: the agent side's gateway to the relay. Voice pipelines (LiveKit Agents,
//! Vapi, OpenAI Realtime, ElevenLabs) run the conversation; this crate gives them the UI tools
//! of an app's catalog. Its layers, lowest first:
//!
//! - [`error`]: the closed list of failure codes, and a failure as a value a model can be handed;
//! - [`client`]: the typed relay client (calls, key state and what the tab handles, modes);
//! - [`catalog`]: the app's tools and modes as data, checked as a whole;
//! - [`session`]: sessions, their modes, their tabs, and what an agent is offered;
//! - [`Worker`] ([`worker`]): runs one tool call for any surface; [`demo`]: a scripted tour;
//! - [`serve`]: the server of `agent-worker serve` (agent API, MCP, Vapi, LiveKit webhooks and
//!   rooms, operations, the OpenAPI document); [`cli`]: the commands.
//!
//! It never speaks Socket.IO: tabs are reached only through the relay's HTTP API.
//!
//! # As a library
//!
//! A voice pipeline written in Rust reaches the user's tab through a [`Worker`] (the session's
//! mode decides which tools it may call, arguments are checked against the tool's schema before
//! anything is sent, and each call is logged), or directly through a [`client::RelayClient`].
//! What an agent is offered in a session's current mode, for what the tab handles:
//!
//! ```
//! use agent_worker::Worker;
//! use agent_worker::client::{ClientConfig, RelayClient};
//! use relay_wire::Secret;
//!
//! let secret = Secret::new("the worker's credential (RELAY_WORKER_SECRET)");
//! let relay = RelayClient::new(ClientConfig::new("http://127.0.0.1:3001", secret))?;
//! // The app's catalog (agent_worker::catalog::Catalog::load), or the default one.
//! let worker = Worker::new(relay);
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! // The tab's key, read from the user participant's LiveKit metadata.
//! let key = "va_2222222222222222222222222222222222222222222222222222222222222222";
//! let offer = worker.offer(key).await;
//! assert_eq!(offer.mode, "default");
//! let names: Vec<&str> = offer.tools.iter().map(|t| t.name.as_str()).collect();
//! assert!(names.contains(&"OpenPopover"));
//! assert!(names.contains(&"enter_spread"), "a mode change is a tool too");
//! # });
//! # Ok::<(), agent_worker::error::ToolError>(())
//! ```
//!
//! One call the agent made, and its failure as a sentence the voice model can say:
//!
//! ```no_run
//! # use agent_worker::Worker;
//! # use serde_json::json;
//! # async fn example(worker: &Worker, key: &str, token: &str) {
//! // `token`: the agent's session token for that key (it reaches that tab only).
//! let outcome = worker
//!     .agent_call(key, token, "OpenPopover", &json!({"message": "Here is your reading"}))
//!     .await;
//! match outcome.result {
//!     Ok(result) => println!("shown: {result}"),
//!     Err(error) => println!("say: {}", error.speech()),
//! }
//! # }
//! ```

pub mod catalog;
pub mod cli;
pub mod client;
pub mod demo;
pub mod error;
pub mod serve;
pub mod session;
pub mod worker;

pub use session::{Offer, OfferedTool};
pub use worker::{AgentOutcome, Worker};

/// Now, in Unix seconds (the unit of tokens' expiries).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Installs jsonwebtoken's full RustCrypto provider (EdDSA included) for the whole process,
/// before anything of livekit-api runs: livekit-api installs an HMAC-only one the first time it
/// verifies a webhook, and the first install wins; session tokens need EdDSA.
pub fn install_jwt_crypto() {
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
}

#[cfg(test)]
mod tests;
