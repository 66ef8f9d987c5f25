//! A key's status (read at once, or waited for until what its tab declared changes), its
//! session mode, and its revocation.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use relay_wire::{
    ErrorBody, KeyStatus, ModeEvent, ModeResponse, RevokeReason, RevokeResponse, events, is_mode_id,
};
use serde::Deserialize;

use super::principal::Principal;
use super::{key_param, parse_object, read_body};
use crate::app::{App, ServerRole};
use crate::delivery::{self, room};
use crate::error::{ApiError, encode, json_response};
use crate::store::{KeyStore, TabAt};
use relay_wire::Fp;
use relay_wire::session::Scope;

/// The longest `waitMs` a status request may ask for.
pub const MAX_WAIT_MS: u64 = 30_000;

/// The status request's query: wait for a revision other than `after`, at most `waitMs`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct StatusQuery {
    /// Answer once the key's revision differs from this one (what the tab declared changed).
    after: Option<u64>,
    /// How long to wait for that, in milliseconds (0 to 30000; without `after` the answer comes
    /// at once). At the end of the wait the key's status is answered as it is.
    #[param(maximum = 30000)]
    wait_ms: Option<u64>,
}

impl StatusQuery {
    /// The revision to wait past and for how long; `None` to answer at once.
    fn wait(&self) -> Result<Option<(u64, std::time::Duration)>, ApiError> {
        match (self.after, self.wait_ms) {
            (_, Some(ms)) if ms > MAX_WAIT_MS => Err(ApiError::invalid(format!(
                "waitMs must be from 0 to {MAX_WAIT_MS}"
            ))),
            (Some(after), Some(ms)) if ms > 0 => {
                Ok(Some((after, std::time::Duration::from_millis(ms))))
            }
            _ => Ok(None),
        }
    }
}

/// The key's lifecycle state (issued, online: a tab is bound, offline: waiting for its tab), the
/// tools its tab declared it handles and the session mode. With `after` and `waitMs`, the answer
/// waits until what the tab declared changes (its `revision` differs from `after`).
#[utoipa::path(
    get,
    path = "/api/voice-agent/keys/{apiKey}",
    tag = "agent",
    operation_id = "keyStatus",
    params(("apiKey" = String, Path, pattern = "^va_[0-9a-f]{64}$", description = "The tab's routing key"), StatusQuery),
    security(("session_token" = []), ("worker_secret" = []), ("operator_secret" = [])),
    responses(
        (status = 200, description = "The key's state", body = KeyStatus),
        (status = 400, description = "`invalid_request`: not a key (va_ and 64 lowercase hex characters), or a bad `after`/`waitMs`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: a missing, forged or expired credential, or an ended session's token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "`forbidden`: a session token for another key or without the `status` scope; the token issuer's credential", body = ErrorBody),
        (status = 404, description = "`unknown_key`: never issued, expired, revoked or removed", body = ErrorBody),
        (status = 503, description = "`unavailable`: several nodes and Redis unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn key_status(
    State(app): State<Arc<App>>,
    principal: Principal,
    Path(api_key): Path<String>,
    query: Result<Query<StatusQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    key_param(&api_key)?;
    principal.require(
        &api_key,
        Scope::Status,
        &[ServerRole::Worker, ServerRole::Operator],
    )?;
    principal.still_open(&app).await?;
    let Query(query) =
        query.map_err(|e| ApiError::invalid(format!("bad query: {}", e.body_text())))?;
    let status = match query.wait()? {
        // A draining relay answers at once: the agent asks again elsewhere.
        Some((after, wait)) if !app.drain.is_draining() => {
            let deadline = tokio::time::Instant::now() + wait;
            app.store.wait_status(&api_key, after, deadline).await?
        }
        _ => app.store.status(&api_key).await?,
    };
    let status = status.ok_or_else(ApiError::unknown_key)?;
    Ok(json_response(StatusCode::OK, encode(&status)))
}

/// Sets the key's session mode. Its tab is told `voice-agent:mode` now when it is bound (on any
/// node), or when it binds next.
#[utoipa::path(
    put,
    path = "/api/voice-agent/keys/{apiKey}/mode",
    tag = "agent",
    operation_id = "setMode",
    params(("apiKey" = String, Path, pattern = "^va_[0-9a-f]{64}$", description = "The tab's routing key")),
    request_body = ModeEvent,
    security(("session_token" = []), ("worker_secret" = [])),
    responses(
        (status = 200, description = "Set", body = ModeResponse),
        (status = 400, description = "`invalid_request`: not a key, or not a mode id (1 to 64 letters, digits, `_` or `-`)", body = ErrorBody),
        (status = 401, description = "`unauthorized`: a missing, forged or expired credential, or an ended session's token", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "`forbidden`: a session token for another key or without the `mode` scope; an operator's or the token issuer's credential", body = ErrorBody),
        (status = 404, description = "`unknown_key`: never issued, expired, revoked or removed", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the configured limit", body = ErrorBody),
        (status = 503, description = "`unavailable`: several nodes and Redis unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn key_mode(
    State(app): State<Arc<App>>,
    principal: Principal,
    Path(api_key): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    key_param(&api_key)?;
    principal.require(&api_key, Scope::Mode, &[ServerRole::Worker])?;
    principal.still_open(&app).await?;
    let body = read_body(&app, request).await?;
    let event: ModeEvent = parse_object(&body)?;
    if !is_mode_id(&event.mode) {
        return Err(ApiError::invalid(
            "mode must be 1 to 64 letters, digits, _ or -",
        ));
    }
    let at = app
        .store
        .set_mode(&api_key, &event.mode)
        .await?
        .ok_or_else(ApiError::unknown_key)?;
    let tab_notified = match at {
        TabAt::Nowhere => false,
        TabAt::Here(binding) => binding.socket.emit(events::MODE, &event).is_ok(),
        TabAt::Elsewhere => match app.io.get() {
            Some(io) => io
                .emit_to_room(&room(&api_key), None, events::MODE, &event)
                .await
                .is_ok(),
            None => false,
        },
    };
    tracing::debug!(key = %Fp(&api_key), tab_notified, "session mode set");
    Ok(json_response(
        StatusCode::OK,
        encode(&ModeResponse {
            ok: true,
            tab_notified,
        }),
    ))
}

/// Revokes the key: its tab is told `voice-agent:revoked` and unbound, and the key can do nothing
/// more.
#[utoipa::path(
    delete,
    path = "/api/voice-agent/keys/{apiKey}",
    tag = "agent",
    operation_id = "revokeKey",
    params(("apiKey" = String, Path, pattern = "^va_[0-9a-f]{64}$", description = "The tab's routing key")),
    security(("worker_secret" = []), ("operator_secret" = [])),
    responses(
        (status = 200, description = "Revoked", body = RevokeResponse),
        (status = 400, description = "`invalid_request`: not a key (va_ and 64 lowercase hex characters)", body = ErrorBody),
        (status = 401, description = "`unauthorized`: a missing or unknown credential", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "`forbidden`: a session token (agents never revoke) or the token issuer's credential", body = ErrorBody),
        (status = 404, description = "`unknown_key`: never issued, expired, revoked or removed", body = ErrorBody),
        (status = 503, description = "`shutting_down`: the relay is draining; `unavailable`: several nodes and Redis unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn key_revoke(
    State(app): State<Arc<App>>,
    principal: Principal,
    Path(api_key): Path<String>,
) -> Result<Response, ApiError> {
    if app.drain.is_draining() {
        return Err(ApiError::shutting_down());
    }
    principal.require_server(&[ServerRole::Worker, ServerRole::Operator])?;
    key_param(&api_key)?;
    let tab_notified = revoke(&app, &api_key).await?;
    tracing::info!(key = %Fp(&api_key), tab_notified, "key revoked");
    Ok(json_response(
        StatusCode::OK,
        encode(&RevokeResponse {
            ok: true,
            tab_notified,
        }),
    ))
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
        delivery::dismiss(old);
    }
    if let (Some(node), Some(io)) = (&revocation.remote, app.io.get()) {
        io.dismiss_in_room(
            room(api_key),
            app.server_of(node),
            api_key,
            RevokeReason::Revoked,
        )
        .await;
    }
    Ok(tab_notified)
}
