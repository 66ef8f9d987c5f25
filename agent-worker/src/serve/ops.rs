//! Operations: liveness and the open sessions.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::error::{ApiError, ErrorAnswer, OkAnswer};
use super::state::ServeState;

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

/// The open sessions: key fingerprint, room, identity, source, mode, age, mode changes,
/// per-tool call statistics, followers, what the tab handles.
#[utoipa::path(
    get,
    path = "/sessions",
    tag = "operations",
    operation_id = "sessions",
    security(("operator_secret" = [])),
    responses(
        (status = 200, description = "The open sessions", body = super::params::SessionList),
        (status = 401, description = "`unauthorized`: missing or wrong operators' credential (a session token never lists sessions)", body = ErrorAnswer),
    )
)]
pub(crate) async fn sessions(
    State(state): State<Arc<ServeState>>,
    headers: HeaderMap,
) -> Result<axum::Json<Value>, ApiError> {
    state.operator(&headers)?;
    Ok(axum::Json(
        json!({"sessions": state.worker.sessions.snapshot()}),
    ))
}
