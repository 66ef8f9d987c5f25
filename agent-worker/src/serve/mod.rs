//! `agent-worker serve`: one HTTP server with several surfaces over the same [`Worker`]
//! (its catalog, sessions and relay client). This is the only module that knows every surface:
//!
//! - [`agent_api`]: `GET /agent/tools`, `POST /agent/tools/{name}` for voice agents in the room;
//! - [`mcp`]: `/mcp`, the same tools for platforms that speak MCP;
//! - [`vapi`]: Vapi's server-URL `tool-calls` webhook, signed ([`signature`]);
//! - [`livekit`]: LiveKit's webhooks, and [`rooms`]: its RoomService, which open and close
//!   sessions; [`dispatch`]: the agent dispatched for each user, with its session token;
//! - [`ops`]: liveness and the open sessions; [`openapi`]: the document of all of them.
//!
//! [`state`] holds what they share, [`auth`] who may call (one check for every surface),
//! [`error`] the one error they answer with, [`params`] the shapes their documentation names,
//! [`kept`] what outlives a run.
//!
//! [`Worker`]: crate::Worker

pub mod agent_api;
pub mod auth;
pub mod dispatch;
pub mod error;
pub mod kept;
pub mod livekit;
pub mod mcp;
pub mod openapi;
pub mod ops;
pub mod params;
pub mod rooms;
pub mod signature;
pub mod state;
pub mod vapi;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

pub use state::ServeState;

/// Largest request body accepted (webhooks, tool arguments).
const MAX_BODY_BYTES: usize = 1 << 20;

/// Every route of the server.
pub fn router(state: Arc<ServeState>) -> Router {
    let mcp = mcp::service(state.clone(), &state.mcp, state.shutdown.clone());
    Router::new()
        .nest_service("/mcp", mcp)
        .route("/agent/tools", get(agent_api::list_tools))
        .route("/agent/tools/{name}", post(agent_api::call_tool))
        .route("/livekit/webhook", post(livekit::livekit_webhook))
        .route("/vapi/webhook", post(vapi::vapi_webhook))
        .route("/sessions", get(ops::sessions))
        .route("/healthz", get(ops::healthz))
        .route("/openapi.json", get(openapi::openapi_json))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Runs the server on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<ServeState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let stop = state.shutdown.clone();
    // Small writes go out at once: an MCP answer streamed as SSE ends with a chunk of its own,
    // which Nagle's algorithm would otherwise hold until the client's delayed ACK (~40 ms).
    let listener = listener.tap_io(|tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(cause = %err, "TCP_NODELAY not set");
        }
    });
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            shutdown.await;
            stop.cancel();
        })
        .await
}

/// Bound on finishing in-flight requests at shutdown.
pub const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);
