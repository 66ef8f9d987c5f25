//! The HTTP side: token service, agent API, operations endpoints. Handlers validate and translate;
//! the work lives in `tokens`, `calls` and `keys`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use bytes::Bytes;
use relay_wire::{
    ErrorBody, ErrorCode, KeyStatus, RevokeReason, RevokeResponse, TokenRequest, TokenResponse,
    ToolCallRequest, ToolCallResponse, headers, is_api_key,
};

use crate::App;
use crate::calls::{self, Call};
use crate::error::{ApiError, encode, json_response, truncate};
use crate::idempotency::{self, Outcome};
use crate::store::KeyStore;
use crate::store::claims::Claimed;
use crate::tabs;
use relay_wire::{ApiKey, CallTimeout, Fp, ToolName};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/token", post(token_post).get(token_get))
        .route("/api/voice-agent/tool-call", post(tool_call))
        .route("/api/voice-agent/tool-call/cancel", post(tool_call_cancel))
        .route(
            "/api/voice-agent/keys/{api_key}",
            get(key_status).delete(key_revoke),
        )
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(Extension(Arc::new(calls::Running::default())))
}

// ---- token service -------------------------------------------------------------------------

use crate::config::TokenMode;
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
async fn token_post(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let result = async {
        let (caller, client) = token_caller(&app, peer, request.headers()).await?;
        let body = read_body(&app, request).await?;
        let req = if body.iter().all(u8::is_ascii_whitespace) {
            TokenRequest::default()
        } else {
            parse_object::<TokenRequest>(&body)?
        };
        issue_token(&app, caller, client, &req).await
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// [`token_post`] for the seed's frontend: the same fields as query parameters.
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
async fn token_get(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    query: Result<Query<TokenRequest>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let result = async {
        let (caller, client) = token_caller(&app, peer, &headers).await?;
        let Query(req) =
            query.map_err(|e| ApiError::invalid(format!("invalid query: {}", e.body_text())))?;
        issue_token(&app, caller, client, &req).await
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
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
async fn token_caller(
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
async fn issue_token(
    app: &App,
    caller: Caller,
    client: std::net::IpAddr,
    req: &TokenRequest,
) -> Result<Response, ApiError> {
    let subject = Subject::for_request(&caller, req)?;
    if !matches!(caller, Caller::Issuer) && !app.may_issue_token(client).await? {
        return Err(too_many_tokens());
    }
    let r = app.tokens.mint(&subject)?;
    app.store.issue(&r.api_key, r.expires_at).await?;
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

// ---- agent API -------------------------------------------------------------------------------

/// Checks `Authorization: Bearer <secret>` against the configured agent secrets; returns which
/// agent it is.
fn authorize(app: &App, headers: &HeaderMap) -> Result<usize, ApiError> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(relay_wire::headers::bearer)
        .and_then(|presented| app.agent_index(presented))
        .ok_or_else(ApiError::unauthorized)
}

/// Most of an oversized body that is read and discarded before answering 413: closing a
/// connection with unread data makes the client see a reset instead of the 413.
const OVERSIZE_DRAIN_BYTES: usize = 1 << 20;
/// Bound on receiving a whole request body.
const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads a request body up to the configured limit (413 beyond it).
async fn read_body(app: &App, request: Request) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt;

    let limit = app.config.max_body_bytes;
    let too_large = || {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("request body is larger than {limit} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > OVERSIZE_DRAIN_BYTES as u64) {
        return Err(too_large());
    }
    let mut body = request.into_body();
    let mut buf = bytes::BytesMut::new();
    let mut seen = 0usize;
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| ApiError::invalid("could not read the request body"))?;
            if let Ok(data) = frame.into_data() {
                seen += data.len();
                if seen > OVERSIZE_DRAIN_BYTES {
                    break;
                }
                if seen <= limit {
                    buf.extend_from_slice(&data);
                }
            }
        }
        Ok::<(), ApiError>(())
    };
    tokio::time::timeout(BODY_READ_TIMEOUT, read)
        .await
        .map_err(|_| ApiError::invalid("the request body did not arrive in time"))??;
    if seen > limit {
        return Err(too_large());
    }
    Ok(buf.freeze())
}

/// Parses a JSON object body. Arrays are refused even where serde would map them onto a struct's
/// fields by position.
fn parse_object<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(ApiError::invalid("the body must be a JSON object"));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("invalid JSON body: {}", short(&e))))
}

/// A serde error, cut short: enough to fix the request, never a whole echoed value.
fn short(err: &serde_json::Error) -> String {
    let mut text = err.to_string();
    truncate(&mut text, 200);
    text
}

/// Sends one tool call to the tab bound to `apiKey`: fire-and-forget, or awaited
/// (`awaitResult`) with the tab's answer as `result`. A call to an offline key waits, within its
/// timeout, for the tab to come back.
#[utoipa::path(
    post,
    path = "/api/voice-agent/tool-call",
    tag = "agent",
    operation_id = "toolCall",
    params(
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[\\x21-\\x7E]{1,255}$",
            description = "Retry key: a repeat for the same key within 5 minutes gets the first call's outcome and emits nothing new; a different request under the same Idempotency-Key is refused (400)"),
    ),
    request_body(content = ToolCallRequest, content_type = "application/json"),
    security(("agent_secret" = [])),
    responses(
        (status = 200, description = "Delivered (and answered, when awaited)", body = ToolCallResponse),
        (status = 400, description = "`invalid_request`: malformed JSON, a missing field, a bad `apiKey`, `toolName` or `timeoutMs`, a bad or reused Idempotency-Key", body = ErrorBody),
        (status = 401, description = "`unauthorized`: missing or wrong agent secret", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 404, description = "`unknown_key`: never issued, expired, revoked or removed", body = ErrorBody),
        (status = 409, description = "`tab_offline`: no tab came back within the call's timeout", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over the limit (default 64 KiB)", body = ErrorBody),
        (status = 429, description = "`rate_limited`: the key's in-flight calls or the agent's call rate are spent", body = ErrorBody),
        (status = 500, description = "`internal`: the first call with this Idempotency-Key was lost", body = ErrorBody),
        (status = 502, description = "`tool_failed`: the tab answered with an error; `no_handler`: the tab has no handler for the tool", body = ErrorBody),
        (status = 503, description = "`shutting_down`: the relay is draining; `unavailable`: several nodes and Redis unreachable", body = ErrorBody),
        (status = 504, description = "`timeout`: the tab did not answer in time", body = ErrorBody),
    )
)]
async fn tool_call(State(app): State<Arc<App>>, request: Request<Body>) -> Response {
    match tool_call_inner(app, request).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn tool_call_inner(app: Arc<App>, request: Request) -> Result<Response, ApiError> {
    if app.drain.is_draining() {
        return Err(ApiError::shutting_down());
    }
    let agent = authorize(&app, request.headers())?;
    // A store that shares the rate over several nodes takes it with the call's slot instead.
    if !app.store.admit_agent(agent) {
        return Err(calls::agent_rate_limited(&app));
    }
    let idem_key = match request.headers().get(headers::IDEMPOTENCY_KEY) {
        None => None,
        Some(v) => match v.to_str() {
            Ok(s) if idempotency::valid_key(s) => Some(s.to_owned()),
            _ => {
                return Err(ApiError::invalid(
                    "Idempotency-Key must be 1 to 255 visible ASCII characters",
                ));
            }
        },
    };
    let running = request.extensions().get::<Arc<calls::Running>>().cloned();
    let body = read_body(&app, request).await?;
    let req: ToolCallRequest = parse_object(&body)?;
    // Read once here: what runs the call holds a key, a tool name and a timeout known to be valid.
    let api_key = ApiKey::parse(req.api_key).ok_or_else(|| {
        ApiError::invalid("apiKey must be va_ followed by 64 lowercase hex characters")
    })?;
    let tool_name = ToolName::parse(req.tool_name).ok_or_else(|| {
        ApiError::invalid(
            "toolName must match ^[A-Za-z][A-Za-z0-9_-]{0,63}$ and not be register, revoked or cancel",
        )
    })?;
    let max = app.config.max_timeout;
    let timeout = CallTimeout::parse(req.timeout_ms, app.config.default_timeout, max)
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "timeoutMs must be between 1 and {}",
                max.as_millis()
            ))
        })?
        .get();
    let call = Call {
        agent,
        call_id: calls::new_call_id(),
        api_key,
        tool_name,
        params: req.params,
        await_result: req.await_result,
        timeout,
        cancel: tokio_util::sync::CancellationToken::new(),
    };

    let cancellable = idem_key.clone();
    let recorder = match idem_key {
        None => None,
        Some(idem) => {
            let fp = idempotency::request_fingerprint(
                &call.tool_name,
                call.params.as_deref().map(|p| p.get()),
                call.await_result,
            );
            match app
                .store
                .claim(&call.api_key, &idem, fp, call.timeout)
                .await?
            {
                Claimed::Run(recorder) => Some(recorder),
                Claimed::Conflict => return Err(idempotency_conflict()),
                Claimed::Replay(o) => return Ok(json_response(o.status, o.body)),
            }
        }
    };

    // A call with an Idempotency-Key can be cancelled by the agent while it runs.
    let registered = match (running, cancellable) {
        (Some(running), Some(idem)) => {
            Some(running.register(&call.api_key, &idem, call.cancel.clone()))
        }
        _ => None,
    };
    // The call runs in its own task: it reaches its end (and records its outcome for retries)
    // even if the agent's connection drops mid-call.
    let task_app = app.clone();
    let handle = tokio::spawn(async move {
        let _inflight = task_app.drain.enter();
        let _registered = registered;
        let started = tokio::time::Instant::now();
        let result = calls::run(&task_app, &call).await;
        let (outcome, code) = match result {
            Ok(result) => (
                Outcome {
                    status: StatusCode::OK,
                    body: encode(&ToolCallResponse {
                        ok: true,
                        call_id: call.call_id.to_string(),
                        result,
                    }),
                },
                Ok(()),
            ),
            Err(err) => {
                let err = err.with_call_id(&call.call_id);
                let outcome = Outcome {
                    status: err.status(),
                    body: encode(&err.body()),
                };
                (outcome, Err(err.code))
            }
        };
        task_app
            .metrics
            .call_finished(code, call.await_result, started.elapsed());
        tracing::info!(
            key = %Fp(&call.api_key),
            call_id = %call.call_id,
            tool = %call.tool_name,
            awaited = call.await_result,
            status = outcome.status.as_u16(),
            took_us = started.elapsed().as_micros() as u64,
            "tool call"
        );
        if let Some(recorder) = recorder
            && recorder.record(&outcome).await.is_err()
        {
            tracing::warn!(call_id = %call.call_id, "outcome not recorded for retries: Redis unreachable");
        }
        outcome
    });
    match handle.await {
        Ok(o) => Ok(json_response(o.status, o.body)),
        Err(err) => {
            tracing::error!(cause = %err, "tool call task failed");
            Err(ApiError::new(ErrorCode::Internal, "internal error"))
        }
    }
}

/// `POST /api/voice-agent/tool-call/cancel` with the call's `Idempotency-Key` and
/// `{"apiKey"}`: ends that call if it still runs on this node (the tab is told
/// `voice-agent:cancel`). `{"ok":true,"cancelled":false}` when no such call runs here.
#[utoipa::path(
    post,
    path = "/api/voice-agent/tool-call/cancel",
    tag = "agent",
    operation_id = "cancelToolCall",
    params(
        ("Idempotency-Key" = String, Header, pattern = "^[\\x21-\\x7E]{1,255}$",
            description = "The Idempotency-Key the call was sent with"),
    ),
    request_body(content = CancelRequest, content_type = "application/json"),
    security(("agent_secret" = [])),
    responses(
        (status = 200, description = "`cancelled`: whether such a call was running on this node and is now ended", body = CancelResponse),
        (status = 400, description = "`invalid_request`: no valid Idempotency-Key, malformed JSON, a bad `apiKey`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: missing or wrong agent secret", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 413, description = "`payload_too_large`: the body is over the limit", body = ErrorBody),
    )
)]
async fn tool_call_cancel(State(app): State<Arc<App>>, request: Request) -> Response {
    match tool_call_cancel_inner(app, request).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

/// `POST /api/voice-agent/tool-call/cancel` body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelRequest {
    /// The key the call was sent to.
    #[schema(pattern = "^va_[0-9a-f]{64}$")]
    api_key: String,
}

/// `POST /api/voice-agent/tool-call/cancel` answer.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct CancelResponse {
    #[schema(schema_with = relay_wire::openapi::always_true)]
    ok: bool,
    /// True when the call was running on this node and is now cancelled.
    cancelled: bool,
}

async fn tool_call_cancel_inner(app: Arc<App>, request: Request) -> Result<Response, ApiError> {
    authorize(&app, request.headers())?;
    let idem = request
        .headers()
        .get(headers::IDEMPOTENCY_KEY)
        .and_then(|v| v.to_str().ok())
        .filter(|s| idempotency::valid_key(s))
        .map(str::to_owned)
        .ok_or_else(|| {
            ApiError::invalid("a cancel names its call by the call's Idempotency-Key header")
        })?;
    let running = request.extensions().get::<Arc<calls::Running>>().cloned();
    let body = read_body(&app, request).await?;
    let req: CancelRequest = parse_object(&body)?;
    key_param(&req.api_key)?;
    let cancelled = running.is_some_and(|r| r.cancel(&req.api_key, &idem));
    tracing::info!(key = %Fp(&req.api_key), cancelled, "tool call cancel");
    Ok(json_response(
        StatusCode::OK,
        encode(&CancelResponse {
            ok: true,
            cancelled,
        }),
    ))
}

fn idempotency_conflict() -> ApiError {
    ApiError::invalid("this Idempotency-Key was already used with a different request")
}

fn key_param(api_key: &str) -> Result<(), ApiError> {
    if is_api_key(api_key) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "apiKey must be va_ followed by 64 lowercase hex characters",
        ))
    }
}

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
async fn key_status(
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
async fn key_revoke(
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
async fn revoke(app: &App, api_key: &str) -> Result<bool, ApiError> {
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

// ---- operations ------------------------------------------------------------------------------

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
async fn healthz() -> Response {
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
async fn readyz(State(app): State<Arc<App>>) -> Response {
    if app.drain.is_draining() {
        Health::response(StatusCode::SERVICE_UNAVAILABLE, Some("draining"))
    } else if !app.store.is_healthy() {
        Health::response(StatusCode::SERVICE_UNAVAILABLE, Some("redis unreachable"))
    } else {
        Health::response(StatusCode::OK, None)
    }
}

/// Prometheus metrics (OpenMetrics text): connected tabs, bound keys, tool calls by outcome,
/// round-trip latency.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    operation_id = "metrics",
    responses((status = 200, description = "OpenMetrics text", body = String,
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8")),
)]
async fn metrics(
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
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.render(),
    )
        .into_response()
}
