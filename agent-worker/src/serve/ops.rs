//! Operations: liveness, readiness (the relay reachable), the metrics, and the open sessions.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::{ApiError, ErrorAnswer, OkAnswer};
use super::history::ClosedSession;
use super::state::ServeState;

/// Bound on asking the relay whether it is ready.
const READY_BOUND: Duration = Duration::from_secs(2);

/// Alive: the process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    operation_id = "healthz",
    responses((status = 200, description = "Alive", body = OkAnswer)),
)]
pub(crate) async fn healthz() -> axum::Json<OkAnswer> {
    axum::Json(OkAnswer { ok: true })
}

/// `/readyz` answers.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Readiness {
    ok: bool,
    /// Why the worker is not ready: `stopping`, `relay unreachable` or `relay not ready`.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
}

/// Ready to serve: the relay answers its own `/readyz` as ready (within 2 s), and the worker is
/// not stopping.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    operation_id = "readyz",
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "Not ready, with the reason", body = Readiness),
    ),
)]
pub(crate) async fn readyz(State(state): State<Arc<ServeState>>) -> Response {
    let reason = if state.shutdown.is_cancelled() {
        Some("stopping")
    } else {
        match state.worker.client.relay_ready(READY_BOUND).await {
            Ok(true) => None,
            Ok(false) => Some("relay not ready"),
            Err(_) => Some("relay unreachable"),
        }
    };
    let status = match reason {
        None => StatusCode::OK,
        Some(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    let ok = reason.is_none();
    (status, axum::Json(Readiness { ok, reason })).into_response()
}

/// Prometheus metrics (text exposition), each described in `docs/operations.md`: sessions by
/// source, tool calls by tool and outcome with their latency, relay attempts, mode transitions,
/// webhook verification failures, MCP sessions, timelines, the relay reachable, the build.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    operation_id = "metrics",
    responses((status = 200, description = "OpenMetrics text", body = String,
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8")),
)]
pub(crate) async fn metrics(State(state): State<Arc<ServeState>>) -> Response {
    let metrics = state.worker.client.metrics();
    // Counted when scraped, from the maps themselves, so the gauges cannot drift.
    let (timelines, by_source) = state.worker.sessions.counts();
    let mcp = state.mcp_sessions.sessions.read().await.len();
    metrics.set_gauges(&by_source, mcp, timelines);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.render(),
    )
        .into_response()
}

/// The open sessions: id, key fingerprint, room, identity, source, mode, age, mode changes,
/// per-tool call statistics, followers, what the tab handles; and the closed sessions whose
/// timelines are still kept.
#[utoipa::path(
    get,
    path = "/sessions",
    tag = "operations",
    operation_id = "sessions",
    security(("operator_secret" = [])),
    responses(
        (status = 200, description = "The open sessions, and the closed ones still kept", body = super::params::SessionList),
        (status = 401, description = "`unauthorized`: missing or wrong operators' credential (a session token never lists sessions)", body = ErrorAnswer),
    )
)]
pub(crate) async fn sessions(
    State(state): State<Arc<ServeState>>,
    headers: HeaderMap,
) -> Result<axum::Json<Value>, ApiError> {
    state.operator(&headers)?;
    let closed: Vec<ClosedSession> = state
        .worker
        .sessions
        .timelines()
        .iter()
        .filter_map(|t| ClosedSession::of(t))
        .collect();
    Ok(axum::Json(
        json!({"sessions": state.worker.sessions.snapshot(), "closed": closed}),
    ))
}
