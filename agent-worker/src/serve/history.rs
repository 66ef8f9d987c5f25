//! Session timelines for operators: `GET /sessions/{id}/events` answers the events of one
//! session (open, or closed and still kept) after a given one, waiting a bounded time for the
//! next when there is none yet. Behind the operators' credential; keys appear only as
//! fingerprints.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use relay_wire::ErrorCode;
use serde::Deserialize;

use super::error::{ApiError, ErrorAnswer};
use super::state::ServeState;
use crate::session::Timeline;
use crate::session::timeline::Page;

/// The longest wait for a new event.
pub const MAX_WAIT_MS: u64 = 30_000;

/// A closed session whose timeline is still kept, as `GET /sessions` lists it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClosedSession {
    pub id: String,
    /// The key's fingerprint.
    pub key: String,
    pub source: &'static str,
    pub room: String,
    pub opened_ms: u64,
    pub closed_ms: u64,
}

impl ClosedSession {
    /// The listing of a timeline, when its session is closed.
    pub fn of(timeline: &Timeline) -> Option<ClosedSession> {
        let page = timeline.page(u64::MAX);
        Some(ClosedSession {
            closed_ms: page.closed_ms?,
            id: page.id,
            key: page.key,
            source: page.source,
            room: page.room,
            opened_ms: page.opened_ms,
        })
    }
}

/// `GET /sessions/{id}/events`'s query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only the events after this `seq` (default 0: all that are kept).
    #[param(minimum = 0)]
    after: Option<u64>,
    /// How long to wait for an event after `after` when there is none yet, 0 to 30000 ms
    /// (default 0: answer at once).
    #[param(minimum = 0, maximum = 30000)]
    wait_ms: Option<u64>,
}

/// The events of the session `id` after `after` (all kept by default), in order: opened, mode
/// changes, offer and declaration revisions, the tab online or offline, tool calls started and
/// settled (outcome, the relay's call id, the trace id, the relay's time split), closed. With
/// `waitMs`, the answer waits for the next event when there is none yet.
#[utoipa::path(
    get,
    path = "/sessions/{id}/events",
    tag = "operations",
    operation_id = "sessionEvents",
    params(
        ("id" = String, Path, pattern = "^s_[0-9a-f]{16}$", description = "The session's id, as `GET /sessions` lists it"),
        EventsQuery,
    ),
    security(("operator_secret" = [])),
    responses(
        (status = 200, description = "The session's events after `after`", body = Page),
        (status = 400, description = "`invalid_request`: a bad `after` or `waitMs`", body = ErrorAnswer),
        (status = 401, description = "`unauthorized`: missing or wrong operators' credential", body = ErrorAnswer),
        (status = 404, description = "`unknown_key`: no such session, or closed too long ago to be kept", body = ErrorAnswer),
    )
)]
pub(crate) async fn session_events(
    State(state): State<Arc<ServeState>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<axum::Json<Page>, ApiError> {
    state.operator(&headers)?;
    let Path(id) = id.map_err(|_| ApiError::invalid("the session id in the path is not valid"))?;
    let Query(query) =
        query.map_err(|e| ApiError::invalid(format!("bad query: {}", e.body_text())))?;
    let wait = query.wait_ms.unwrap_or(0);
    if wait > MAX_WAIT_MS {
        return Err(ApiError::invalid(format!(
            "waitMs must be 0 to {MAX_WAIT_MS}"
        )));
    }
    let timeline = state.worker.sessions.timeline(&id).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::UnknownKey,
            "no session with this id: never opened, or closed too long ago to be kept",
        )
    })?;
    let page = timeline
        .wait_after(
            query.after.unwrap_or(0),
            Duration::from_millis(wait),
            state.shutdown.cancelled(),
        )
        .await;
    Ok(axum::Json(page))
}
