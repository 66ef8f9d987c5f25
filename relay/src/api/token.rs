//! The token service: a LiveKit token for one tab, with a fresh routing key.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use relay_wire::{ErrorBody, ErrorCode, TokenRequest, TokenResponse};

use super::{parse_object, read_body};
use crate::app::App;
use crate::error::{ApiError, encode, json_response};
use crate::store::KeyStore;
use relay_wire::Fp;

use std::time::Duration;

use relay_wire::session::DEFAULT_SESSION_TTL_SECS;

use crate::config::TokenMode;
use crate::sessions::Mint;
use crate::tokens::{Caller, Subject};

/// Mints a LiveKit token for one tab, with a fresh routing key in its metadata.
///
/// Who may ask depends on the relay's token mode (`RELAY_TOKEN_MODE`): `issuer` (the default)
/// wants an issuer secret, `app-jwt` the app's session JWT of the user, and `open` (development
/// only) nothing. `roomName` and `identity` may be chosen by the issuer only; the other modes
/// answer 400 when they are set. Issuance from browsers (app-jwt, open) is rate limited per client
/// address; a refused credential counts against that budget too.
#[utoipa::path(
    post,
    path = "/token",
    tag = "token",
    operation_id = "mintToken",
    request_body(
        content = Option<TokenRequest>,
        content_type = "application/json",
        description = "Optional; an empty body asks for a token with the defaults."
    ),
    security(("issuer_secret" = []), ("app_jwt" = []), ()),
    responses(
        (status = 200, description = "A token for one tab", body = TokenResponse,
            headers(("Cache-Control" = String, description = "`no-store`"))),
        (status = 400, description = "`invalid_request`: not a JSON object, an unknown or mistyped field, a name too long or with control characters, a room name with other characters, or a field this mode does not let the caller choose", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the mode's credential is missing or wrong", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 413, description = "`payload_too_large`: the body is over the limit", body = ErrorBody),
        (status = 429, description = "`rate_limited`: this client address asked for too many tokens", body = ErrorBody),
        (status = 503, description = "`shutting_down`: the relay is draining; `unavailable`: several nodes and Redis unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn token_post(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Result<Response, ApiError> {
    let (caller, client) = token_caller(&app, peer, request.headers()).await?;
    let body = read_body(&app, request).await?;
    let req = if body.is_empty() {
        TokenRequest::default()
    } else {
        parse_object::<TokenRequest>(&body)?
    };
    issue_token(&app, caller, client, &req).await
}

/// [`token_post`] for frontends that ask with GET: the same fields as query parameters.
#[utoipa::path(
    get,
    path = "/token",
    tag = "token",
    operation_id = "mintTokenGet",
    params(TokenRequest),
    security(("issuer_secret" = []), ("app_jwt" = []), ()),
    responses(
        (status = 200, description = "A token for one tab", body = TokenResponse,
            headers(("Cache-Control" = String, description = "`no-store`"))),
        (status = 400, description = "`invalid_request`: an unknown or mistyped parameter, a name too long or with control characters, a room name with other characters, or a field this mode does not let the caller choose", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the mode's credential is missing or wrong", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 429, description = "`rate_limited`: this client address asked for too many tokens", body = ErrorBody),
        (status = 503, description = "`shutting_down`: the relay is draining; `unavailable`: several nodes and Redis unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn token_get(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    query: Result<Query<TokenRequest>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let (caller, client) = token_caller(&app, peer, &headers).await?;
    let Query(req) =
        query.map_err(|e| ApiError::invalid(format!("invalid query: {}", e.body_text())))?;
    issue_token(&app, caller, client, &req).await
}

fn too_many_tokens() -> ApiError {
    ApiError::new(
        ErrorCode::RateLimited,
        "too many tokens requested from this address; try again in a minute",
    )
}

/// Who is asking, under the relay's token mode, and from which client address:
/// - issuer: the Bearer credential must be an issuer secret;
/// - app-jwt: the Bearer credential must be a valid session JWT of the app;
/// - open: anyone.
///
/// A refused credential is charged to the client address's token budget, so guessing is limited
/// (429 once it is spent, 401 before). The client address is the connection's, or what a
/// trusted proxy forwarded (`client_addr`).
pub(crate) async fn token_caller(
    app: &App,
    peer: SocketAddr,
    headers: &HeaderMap,
) -> Result<(Caller, std::net::IpAddr), ApiError> {
    if app.drain.is_draining() {
        return Err(ApiError::shutting_down());
    }
    let client = crate::client_addr::client_ip(
        peer.ip(),
        headers,
        &app.config.trusted_proxies,
        app.config.forwarded_header,
    );
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(relay_wire::headers::bearer);
    let refused = match app.config.token_mode {
        TokenMode::Open => return Ok((Caller::Anonymous, client)),
        TokenMode::Issuer => {
            if bearer.is_some_and(|b| app.is_token_issuer(b)) {
                return Ok((Caller::Issuer, client));
            }
            tracing::info!(%client, credential = bearer.is_some(), "token refused: not the issuer secret");
            ApiError::new(
                ErrorCode::Unauthorized,
                "this relay issues tokens to the app's backend only: \
                 Authorization: Bearer <RELAY_TOKEN_ISSUER_SECRET>",
            )
        }
        TokenMode::AppJwt => {
            let Some(verifier) = &app.config.app_jwt else {
                return Err(ApiError::new(ErrorCode::Internal, "internal error"));
            };
            let presented = bearer.unwrap_or_default();
            match verifier.verify(presented) {
                Ok(claims) => return Ok((Caller::App(claims), client)),
                Err(err) => {
                    tracing::info!(%client, token = %Fp(presented), reason = %err, "token refused: session token");
                    ApiError::new(ErrorCode::Unauthorized, err.to_string())
                }
            }
        }
    };
    if !app.may_issue_token(client).await? {
        return Err(too_many_tokens());
    }
    Err(refused)
}

/// Mints for `caller`. Browsers (open and app-jwt modes) are charged per client address once
/// their request is complete and valid; the app's backend (issuer mode) is not limited per
/// address, as all its users come from its address.
pub(crate) async fn issue_token(
    app: &App,
    caller: Caller,
    client: std::net::IpAddr,
    req: &TokenRequest,
) -> Result<Response, ApiError> {
    let subject = Subject::for_request(&caller, req)?;
    if !matches!(caller, Caller::Issuer) && !app.may_issue_token(client).await? {
        return Err(too_many_tokens());
    }
    let issued = app.tokens.mint(&subject)?;
    app.store.issue(&issued.api_key, issued.expires_at).await?;
    // The tab's own agent may act on this tab, and on nothing else: its session token rides
    // with the tab's token.
    let mint = Mint {
        room: Some(issued.room_name.clone()),
        identity: Some(issued.identity.clone()),
        ttl: Some(
            app.config
                .session_max_ttl
                .min(Duration::from_secs(DEFAULT_SESSION_TTL_SECS)),
        ),
        ..Mint::default()
    };
    let now = crate::tokens::unix_now().as_secs();
    let agent = app
        .sessions
        .mint(&issued.api_key, mint, now, issued.expires_at)
        .map_err(|cause| {
            tracing::error!(%cause, "session token signing failed");
            ApiError::new(ErrorCode::Internal, "token signing failed")
        })?;
    let r = TokenResponse {
        token: issued.token,
        url: issued.url,
        room_name: issued.room_name,
        identity: issued.identity,
        api_key: issued.api_key,
        expires_at: issued.expires_at,
        agent_token: agent.token,
        agent_session_id: agent.session_id,
        agent_token_expires_at: agent.expires_at,
    };
    app.metrics.tokens_issued.inc();
    tracing::info!(
        key = %Fp(&r.api_key),
        identity = %r.identity,
        room = %r.room_name,
        mode = app.config.token_mode.as_str(),
        "token issued"
    );
    let mut response = json_response(StatusCode::OK, encode(&r));
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    Ok(response)
}
