//! A key's status and its revocation.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use relay_wire::{ErrorBody, KeyStatus, RevokeReason, RevokeResponse};

use super::{authorize, key_param};
use crate::App;
use crate::error::{ApiError, encode, json_response};
use crate::store::KeyStore;
use crate::tabs;
use relay_wire::Fp;

/// The key's lifecycle state: issued, online (a tab is bound) or offline (waiting for its tab).
#[utoipa::path(
    get,
    path = "/api/voice-agent/keys/{apiKey}",
    tag = "agent",
    operation_id = "keyStatus",
    params(("apiKey" = String, Path, pattern = "^va_[0-9a-f]{64}$", description = "The tab's routing key")),
    security(("agent_secret" = [])),
    responses(
        (status = 200, description = "The key's state", body = KeyStatus),
        (status = 400, description = "`invalid_request`: not a key (va_ and 64 lowercase hex characters)", body = ErrorBody),
        (status = 401, description = "`unauthorized`: missing or wrong agent secret", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 404, description = "`unknown_key`: never issued, expired, revoked or removed", body = ErrorBody),
        (status = 503, description = "`unavailable`: several nodes and Redis unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn key_status(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(api_key): Path<String>,
) -> Response {
    let result = async {
        authorize(&app, &headers)?;
        key_param(&api_key)?;
        let status = app.store.status(&api_key).await?;
        status.ok_or_else(ApiError::unknown_key)
    }
    .await;
    match result {
        Ok(status) => json_response(StatusCode::OK, encode(&status)),
        Err(e) => e.into_response(),
    }
}

/// Revokes the key: its tab is told `voice-agent:revoked` and unbound, and the key can do nothing
/// more.
#[utoipa::path(
    delete,
    path = "/api/voice-agent/keys/{apiKey}",
    tag = "agent",
    operation_id = "revokeKey",
    params(("apiKey" = String, Path, pattern = "^va_[0-9a-f]{64}$", description = "The tab's routing key")),
    security(("agent_secret" = [])),
    responses(
        (status = 200, description = "Revoked", body = RevokeResponse),
        (status = 400, description = "`invalid_request`: not a key (va_ and 64 lowercase hex characters)", body = ErrorBody),
        (status = 401, description = "`unauthorized`: missing or wrong agent secret", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 404, description = "`unknown_key`: never issued, expired, revoked or removed", body = ErrorBody),
        (status = 503, description = "`shutting_down`: the relay is draining; `unavailable`: several nodes and Redis unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn key_revoke(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(api_key): Path<String>,
) -> Response {
    let result = async {
        if app.drain.is_draining() {
            return Err(ApiError::shutting_down());
        }
        authorize(&app, &headers)?;
        key_param(&api_key)?;
        revoke(&app, &api_key).await
    }
    .await;
    match result {
        Ok(tab_notified) => {
            tracing::info!(key = %Fp(&api_key), tab_notified, "key revoked");
            json_response(
                StatusCode::OK,
                encode(&RevokeResponse {
                    ok: true,
                    tab_notified,
                }),
            )
        }
        Err(e) => e.into_response(),
    }
}

/// Revokes a key wherever its tab is; true when a tab was told.
pub(crate) async fn revoke(app: &App, api_key: &str) -> Result<bool, ApiError> {
    let revocation = app
        .store
        .revoke(api_key)
        .await?
        .ok_or_else(ApiError::unknown_key)?;
    let tab_notified = revocation.tab_notified();
    if let Some(old) = revocation.local {
        tabs::dismiss(old);
    }
    if revocation.remote {
        tabs::dismiss_remote(app, api_key, RevokeReason::Revoked).await;
    }
    Ok(tab_notified)
}
