//! Operations endpoints: liveness, readiness, metrics.

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::calls;
use crate::error::{encode, json_response};
use crate::store::KeyStore;

/// `/healthz` and `/readyz` answers.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Health {
    ok: bool,
    /// Why the relay is not ready: `draining` or `redis unreachable`.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
}

impl Health {
    fn response(status: StatusCode, reason: Option<&'static str>) -> Response {
        let ok = reason.is_none();
        json_response(status, encode(&Health { ok, reason }))
    }
}

/// Alive: the process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    operation_id = "healthz",
    responses((status = 200, description = "Alive", body = Health)),
)]
pub(crate) async fn healthz() -> Response {
    Health::response(StatusCode::OK, None)
}

/// Ready to serve: false while draining, or (several nodes) while Redis is unreachable.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    operation_id = "readyz",
    responses(
        (status = 200, description = "Ready", body = Health),
        (status = 503, description = "Not ready, with the reason", body = Health),
    ),
)]
pub(crate) async fn readyz(State(app): State<Arc<App>>) -> Response {
    match not_ready(&app) {
        Some(reason) => Health::response(StatusCode::SERVICE_UNAVAILABLE, Some(reason)),
        None => Health::response(StatusCode::OK, None),
    }
}

/// Why the relay is not ready now, if it is not.
fn not_ready(app: &App) -> Option<&'static str> {
    if app.drain.is_draining() {
        Some("draining")
    } else if !app.store.is_healthy() {
        Some("redis unreachable")
    } else {
        None
    }
}

/// Prometheus metrics (OpenMetrics text), each described in `docs/operations.md`: tabs and keys,
/// tool calls by outcome with their latency, the tabs' handler time, deliveries by route, binds,
/// Redis operations by connection, the runtime's lateness, readiness, the build.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    operation_id = "metrics",
    responses((status = 200, description = "OpenMetrics text", body = String,
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8")),
)]
pub(crate) async fn metrics(
    State(app): State<Arc<App>>,
    Extension(running): Extension<Arc<calls::Running>>,
) -> Response {
    // Counted at scrape time from the sockets and maps themselves, so the gauges cannot drift.
    if let Some(io) = app.io.get() {
        app.metrics
            .connected_tabs
            .set(io.local_socket_count() as i64);
    }
    let (inflight, pending) = app.keys.load();
    app.metrics.calls_in_flight.set(inflight as i64);
    app.metrics.acks_pending.set(pending as i64);
    app.metrics.calls_cancellable.set(running.len() as i64);
    app.metrics.bind_limit.set(app.binds.limit() as i64);
    app.metrics.binds_waiting.set(app.binds.waiting() as i64);
    app.metrics.ready.set(i64::from(not_ready(&app).is_none()));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.render(),
    )
        .into_response()
}
