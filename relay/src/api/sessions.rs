//! Agents' sessions: a session token for one key (`POST /api/voice-agent/sessions`, for the app's
//! backend, the worker or an operator), ending one session (`DELETE …/sessions/{sessionId}`),
//! and the public keys that verify the tokens (`GET /api/voice-agent/session-keys`, a JWKS for
//! the worker: it verifies, it cannot mint).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use relay_wire::session::{
    DEFAULT_SESSION_TTL_SECS, MAX_TOKEN_TOOLS, Scopes, SessionEnded, SessionRequest,
    SessionResponse, is_session_id, session_key_digest,
};
use relay_wire::{ErrorBody, Fp, is_tool_name};

use super::principal::Principal;
use super::{key_param, parse_object, read_body};
use crate::app::{App, ServerRole};
use crate::error::{ApiError, encode, json_response};
use crate::sessions::Mint;
use crate::store::KeyStore;

/// Who may mint a session token for any key.
const MINTERS: [ServerRole; 3] = [ServerRole::Worker, ServerRole::Operator, ServerRole::Issuer];

/// A session token for one key: what an agent, a hosted platform or the worker's CLI presents
/// on every agent surface. It reaches that key's tab only, for what its scope names (never
/// revoking), and expires after `ttlSecs` (default 3600, at most the relay's limit) or with the
/// tab's own token, whichever comes first; revoking the key ends it.
#[utoipa::path(
    post,
    path = "/api/voice-agent/sessions",
    tag = "sessions",
    operation_id = "createSession",
    request_body(content = SessionRequest, content_type = "application/json"),
    security(("worker_secret" = []), ("operator_secret" = []), ("issuer_secret" = [])),
    responses(
        (status = 200, description = "The session token", body = SessionResponse,
            headers(("Cache-Control" = String, description = "`no-store`"))),
        (status = 400, description = "`invalid_request`: not a key, an unknown scope, a bad tool name, a ttlSecs of 0 or above the limit", body = ErrorBody),
        (status = 401, description = "`unauthorized`: a missing or unknown credential", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "`forbidden`: a session token (it cannot mint)", body = ErrorBody),
        (status = 404, description = "`unknown_key`: never issued, expired, revoked or removed", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over the limit", body = ErrorBody),
        (status = 503, description = "`shutting_down`: the relay is draining; `unavailable`: several nodes and Redis unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn create_session(
    State(app): State<Arc<App>>,
    principal: Principal,
    request: Request,
) -> Result<Response, ApiError> {
    if app.drain.is_draining() {
        return Err(ApiError::shutting_down());
    }
    let role = principal.require_server(&MINTERS)?;
    let body = read_body(&app, request).await?;
    let req: SessionRequest = parse_object(&body)?;
    key_param(&req.api_key)?;
    let mint = mint_request(
        &app,
        req.ttl_secs,
        req.scope,
        req.tools,
        req.room_name,
        req.identity,
    )?;
    let status = app
        .store
        .status(&req.api_key)
        .await?
        .ok_or_else(ApiError::unknown_key)?;
    let not_after = status.token_expires_ms.map_or(0, |ms| ms / 1000);
    let minted = app
        .sessions
        .mint(
            &req.api_key,
            mint,
            crate::tokens::unix_now().as_secs(),
            not_after,
        )
        .map_err(signing_failed)?;
    tracing::info!(
        key = %Fp(&req.api_key),
        session = %Fp(&minted.session_id),
        by = role.name(),
        expires_at = minted.expires_at,
        "session token minted"
    );
    let mut response = json_response(
        StatusCode::OK,
        encode(&SessionResponse {
            token: minted.token,
            session_id: minted.session_id,
            expires_at: minted.expires_at,
        }),
    );
    no_store(&mut response);
    Ok(response)
}

/// The longest lifetime a request may name (the document's maximum); the relay's own
/// `RELAY_SESSION_MAX_TTL_SECS` shortens it further.
const MAX_ASKED_TTL_SECS: u64 = 86_400;

/// Checks what a session is asked for; `None` fields take their defaults.
pub(crate) fn mint_request(
    app: &App,
    ttl_secs: Option<u64>,
    scope: Option<Vec<String>>,
    tools: Option<Vec<String>>,
    room: Option<String>,
    identity: Option<String>,
) -> Result<Mint, ApiError> {
    // Asked for longer than the deployment allows: the longest it allows (the answer's
    // expiresAt says when the token ends, as it does when the tab's token ends first).
    let max = app.config.session_max_ttl.as_secs();
    if ttl_secs.is_some_and(|t| !(1..=MAX_ASKED_TTL_SECS).contains(&t)) {
        return Err(ApiError::invalid(format!(
            "ttlSecs is from 1 to {MAX_ASKED_TTL_SECS}"
        )));
    }
    let scopes = match scope {
        None => None,
        Some(names) => Some(
            Scopes::from_names(names.iter().map(String::as_str))
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    ApiError::invalid("scope names one or more of list, call, mode and status")
                })?,
        ),
    };
    if let Some(tools) = &tools
        && (tools.len() > MAX_TOKEN_TOOLS || !tools.iter().all(|t| is_tool_name(t)))
    {
        return Err(ApiError::invalid(format!(
            "tools lists at most {MAX_TOKEN_TOOLS} tool names (^[A-Za-z][A-Za-z0-9_-]{{0,63}}$)"
        )));
    }
    let text = |field: &str, v: Option<String>, max: usize| match v {
        Some(v) if v.chars().count() > max || v.chars().any(char::is_control) => {
            Err(ApiError::invalid(format!(
                "{field} is longer than {max} characters or holds control characters"
            )))
        }
        v => Ok(v.filter(|v| !v.trim().is_empty())),
    };
    Ok(Mint {
        ttl: Some(Duration::from_secs(
            ttl_secs.unwrap_or(DEFAULT_SESSION_TTL_SECS).min(max),
        )),
        scopes,
        tools,
        room: text("roomName", room, crate::tokens::MAX_NAME_CHARS)?,
        identity: text("identity", identity, crate::tokens::MAX_IDENTITY_CHARS)?,
    })
}

/// Ends one agent session: its token is refused from now on, on every node; the key, its tab and
/// its other sessions are untouched. The session itself, or the worker, an operator or the app's
/// backend may end it.
#[utoipa::path(
    delete,
    path = "/api/voice-agent/sessions/{sessionId}",
    tag = "sessions",
    operation_id = "endSession",
    params(("sessionId" = String, Path, pattern = "^s_[0-9a-f]{48}$", description = "The session, as its token was minted with")),
    security(("session_token" = []), ("worker_secret" = []), ("operator_secret" = []), ("issuer_secret" = [])),
    responses(
        (status = 200, description = "Ended", body = SessionEnded),
        (status = 400, description = "`invalid_request`: not a session id", body = ErrorBody),
        (status = 401, description = "`unauthorized`: a missing, forged or expired credential", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "`forbidden`: another session's token", body = ErrorBody),
        (status = 503, description = "`unavailable`: several nodes and Redis unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn end_session(
    State(app): State<Arc<App>>,
    principal: Principal,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(|_| ApiError::invalid("the session id is not valid UTF-8"))?;
    let exp = match principal.session() {
        Some(grant) if grant.session_id == id => grant.exp,
        Some(_) => {
            return Err(ApiError::forbidden(
                "this session token is for another session",
            ));
        }
        None => {
            principal.require_server(&MINTERS)?;
            if !is_session_id(&id) {
                return Err(ApiError::invalid(
                    "sessionId must be s_ followed by 48 lowercase hex characters",
                ));
            }
            // Until the longest a token could live from now.
            crate::tokens::unix_now().as_secs() + app.config.session_max_ttl.as_secs()
        }
    };
    app.store.end_session(&id, exp).await?;
    tracing::info!(
        session = %Fp(&id),
        key_digest = session_key_digest(&id).map(|d| &d[..8]).unwrap_or_default(),
        "agent session ended"
    );
    Ok(json_response(
        StatusCode::OK,
        encode(&SessionEnded { ok: true }),
    ))
}

/// The public keys that verify session tokens, as a JWKS (Ed25519, by `kid`). Public: they can
/// verify a token, never make one.
#[utoipa::path(
    get,
    path = "/api/voice-agent/session-keys",
    tag = "sessions",
    operation_id = "sessionKeys",
    responses(
        (status = 200, description = "A JWKS of Ed25519 public keys (`kty` OKP)", content_type = "application/json"),
    )
)]
pub(crate) async fn session_keys(State(app): State<Arc<App>>) -> Response {
    let mut response = axum::Json(app.sessions.keys().jwks()).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("max-age=60"),
    );
    response
}

fn signing_failed(cause: String) -> ApiError {
    tracing::error!(%cause, "session token signing failed");
    ApiError::new(relay_wire::ErrorCode::Internal, "internal error")
}

fn no_store(response: &mut Response) {
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
}
