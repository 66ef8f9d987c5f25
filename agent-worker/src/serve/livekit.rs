//! LiveKit's webhooks: `participant_joined` with a key in the participant's metadata opens the
//! key's session (and dispatches the user's agent, when the worker names one);
//! `participant_left`, `participant_connection_aborted` and `room_finished` close it and revoke
//! the key at the relay, which ends every session token of it. Nothing changes unless the
//! `Authorization` JWT verifies with the LiveKit API secret and its `sha256` claim is the body's
//! digest (livekit-api).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, header};
use relay_wire::{ErrorCode, Fp, ParticipantMetadata, is_api_key};

use super::error::{self, ApiError, ErrorAnswer, OkAnswer};
use super::kept::LIVEKIT;
use super::state::ServeState;

/// The relay key in a participant's metadata, if it holds one.
pub(crate) fn key_of(participant: Option<&livekit_protocol::ParticipantInfo>) -> Option<String> {
    let metadata = &participant?.metadata;
    let parsed: ParticipantMetadata = serde_json::from_str(metadata).ok()?;
    is_api_key(&parsed.api_key).then_some(parsed.api_key)
}

/// A LiveKit webhook event (`participant_joined` opens the key's session; `participant_left`,
/// `participant_connection_aborted` and `room_finished` close it and revoke the key at the
/// relay). It changes nothing unless the `Authorization` JWT verifies with the LiveKit API
/// secret and its `sha256` claim is the body's digest.
#[utoipa::path(
    post,
    path = "/livekit/webhook",
    tag = "webhooks",
    operation_id = "livekitWebhook",
    request_body(content = Object, content_type = "application/webhook+json",
        description = "LiveKit's WebhookEvent, as LiveKit sends it"),
    security(("livekit_webhook" = [])),
    responses(
        (status = 200, description = "Taken", body = OkAnswer),
        (status = 400, description = "`invalid_request`: the body is not UTF-8 or could not be read", body = ErrorAnswer),
        (status = 401, description = "`unauthorized`: the signature does not verify", body = ErrorAnswer),
        (status = 413, description = "`payload_too_large`: over 1 MiB", body = ErrorAnswer),
    )
)]
pub(crate) async fn livekit_webhook(
    State(state): State<Arc<ServeState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<axum::Json<OkAnswer>, ApiError> {
    let body = error::body(body)?;
    // LiveKit sends the raw JWT; a `Bearer ` prefix (some proxies add one) is tolerated.
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.strip_prefix("Bearer ").unwrap_or(v).trim())
        .unwrap_or_default();
    let body = std::str::from_utf8(&body).map_err(|_| ApiError::invalid("body is not UTF-8"))?;
    let event = match state.receiver.receive(body, auth) {
        Ok(event) => event,
        Err(err) => {
            tracing::warn!(reason = %err, "LiveKit webhook refused");
            return Err(ApiError::unauthorized(
                "the webhook's signature does not verify",
            ));
        }
    };
    let room = event
        .room
        .as_ref()
        .map(|r| r.name.clone())
        .unwrap_or_default();
    let participant = event.participant.as_ref();
    let sessions = &state.worker.sessions;
    match event.event.as_str() {
        "participant_joined" => {
            if let Some(key) = key_of(participant) {
                let identity = participant.map(|p| p.identity.as_str()).unwrap_or_default();
                if joined(&state, &key, &room, identity) {
                    state.persist();
                }
            }
        }
        "participant_left" | "participant_connection_aborted" => {
            if let Some(key) = key_of(participant) {
                if sessions.end(&key, &event.event) {
                    state.persist();
                }
                revoke(&state, &key).await;
            }
        }
        "room_finished" => {
            let keys = sessions.close_room(&room, "room_finished");
            if !keys.is_empty() {
                state.persist();
            }
            for key in keys {
                revoke(&state, &key).await;
            }
        }
        _ => {}
    }
    Ok(axum::Json(OkAnswer { ok: true }))
}

/// A participant with a key is in `room`: its session opens and, the first time, the user's
/// agent is dispatched (when the worker names one). False when the session was open already.
pub(crate) fn joined(state: &ServeState, key: &str, room: &str, identity: &str) -> bool {
    let opened = state
        .worker
        .sessions
        .open(key, room, identity, LIVEKIT, true);
    if opened && let Some(dispatcher) = &state.dispatcher {
        dispatcher.dispatch(key, room, identity);
    }
    opened
}

/// Revokes a key whose participant left: the tab is told and the key can do nothing more.
pub(crate) async fn revoke(state: &ServeState, key: &str) {
    match state.worker.client.revoke(key).await {
        Ok(r) => {
            tracing::info!(key = %Fp(key), tab_notified = r.tab_notified, "key revoked at the relay")
        }
        Err(e) if e.is(ErrorCode::UnknownKey) => {
            tracing::debug!(key = %Fp(key), "key already gone at the relay")
        }
        Err(e) => tracing::warn!(key = %Fp(key), cause = %e, "could not revoke the key"),
    }
}
