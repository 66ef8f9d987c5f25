//! The agent's tool calls and their cancellation.

use std::sync::Arc;

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use relay_wire::{
    ErrorBody, ErrorCode, ServerTiming, ToolCallRequest, ToolCallResponse, TraceContext, headers,
};
use tracing::{Instrument, Span, field};

use super::principal::Principal;
use super::{key_param, parse_object, read_body};
use crate::app::App;
use crate::calls::{self, Call, Timing};
use crate::error::{ApiError, encode, json_response, truncate};
use crate::idempotency::{self, Outcome};
use crate::store::KeyStore;
use crate::store::claims::Claimed;
use crate::telemetry;
use relay_wire::session::Scope;
use relay_wire::{ApiKey, CallTimeout, Fp, ToolName};

/// Sends one tool call to the tab bound to `apiKey`: fire-and-forget, or awaited
/// (`awaitResult`) with the tab's answer as `result`. A call to an offline key waits, within its
/// timeout, for the tab to come back. A call that ran answers with `Server-Timing` (`relay`,
/// `delivery`, `tab`: where its time went, in milliseconds).
#[utoipa::path(
    post,
    path = "/api/voice-agent/tool-call",
    tag = "agent",
    operation_id = "toolCall",
    params(
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[\\x21-\\x7E]{1,255}$",
            description = "Retry key: a repeat for the same key within 5 minutes gets the first call's outcome and emits nothing new; a different request under the same Idempotency-Key is refused (400)"),
        ("traceparent" = Option<String>, Header,
            description = "W3C Trace Context: the caller's span. Passed to the tab in the call's meta; a value that does not match the W3C grammar is ignored"),
        ("tracestate" = Option<String>, Header,
            description = "W3C Trace Context: vendors' trace state, passed on with a valid traceparent"),
    ),
    request_body(content = ToolCallRequest, content_type = "application/json"),
    security(("session_token" = [])),
    responses(
        (status = 200, description = "Delivered (and answered, when awaited)", body = ToolCallResponse),
        (status = 400, description = "`invalid_request`: malformed JSON, a missing field, a bad `apiKey`, `toolName` or `timeoutMs`, a bad or reused Idempotency-Key", body = ErrorBody),
        (status = 401, description = "`unauthorized`: a missing, forged, expired or foreign session token, or one whose session was ended", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "`forbidden`: a session token for another key, without the `call` scope or for other tools; a server's credential", body = ErrorBody),
        (status = 404, description = "`unknown_key`: never issued, expired, revoked or removed", body = ErrorBody),
        (status = 409, description = "`tab_offline`: no tab came back within the call's timeout", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over the limit (default 64 KiB)", body = ErrorBody),
        (status = 429, description = "`rate_limited`: the key's or the session's in-flight calls, or the session's call rate, are spent", body = ErrorBody),
        (status = 500, description = "`internal`: the first call with this Idempotency-Key was lost", body = ErrorBody),
        (status = 502, description = "`tool_failed`: the tab answered with an error; `no_handler`: the tab has no handler for the tool", body = ErrorBody),
        (status = 503, description = "`shutting_down`: the relay is draining; `unavailable`: several nodes and Redis unreachable", body = ErrorBody),
        (status = 504, description = "`timeout`: the tab did not answer in time", body = ErrorBody),
    )
)]
pub(crate) async fn tool_call(
    State(app): State<Arc<App>>,
    principal: Principal,
    request: Request<Body>,
) -> Result<Response, ApiError> {
    if app.drain.is_draining() {
        return Err(ApiError::shutting_down());
    }
    let session = principal.require_session()?.clone();
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
    let trace = trace_context(request.headers()).map(Box::new);
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
    // Before anything is looked up: the same answer whether the key exists or not.
    principal.require(&api_key, Scope::Call, &[])?;
    if !session.allows_tool(tool_name.as_str()) {
        return Err(ApiError::forbidden(
            "this session token may not call this tool",
        ));
    }
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
        session,
        call_id: calls::new_call_id(),
        api_key,
        tool_name,
        params: req.params,
        await_result: req.await_result,
        timeout,
        cancel: tokio_util::sync::CancellationToken::new(),
        trace,
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
    let span = call_span(&call, app.config.trace_payloads);
    let task_span = span.clone();
    let handle = tokio::spawn(
        async move {
            let span = task_span;
            let _inflight = task_app.drain.enter();
            let _registered = registered;
            let started = tokio::time::Instant::now();
            let mut timing = Timing::default();
            let result = calls::run(&task_app, &call, &mut timing).await;
            let took = started.elapsed();
            let (outcome, code) = match result {
                Ok(result) => {
                    if task_app.config.trace_payloads {
                        record_payload(&span, "relay.result", result.as_ref());
                    }
                    (
                        Outcome {
                            status: StatusCode::OK,
                            body: encode(&ToolCallResponse {
                                ok: true,
                                call_id: call.call_id.to_string(),
                                result,
                            }),
                        },
                        Ok(()),
                    )
                }
                Err(err) => {
                    let err = err.with_call_id(&call.call_id);
                    telemetry::fail(&span, err.code.as_str());
                    let outcome = Outcome {
                        status: err.status(),
                        body: encode(&err.body()),
                    };
                    (outcome, Err(err.code))
                }
            };
            task_app
                .metrics
                .call_finished(code, call.await_result, took, timing.tab);
            span.record("http.response.status_code", i64::from(outcome.status.as_u16()));
            // The trace this call is in: the relay's own span's when spans are exported, else the
            // caller's, passed on as it came.
            let own = telemetry::context_of(&span);
            let trace_id = own.as_ref().or(call.trace.as_deref()).map(TraceContext::trace_id);
            tracing::info!(
                key = %Fp(&call.api_key),
                call_id = %call.call_id,
                tool = %call.tool_name,
                awaited = call.await_result,
                status = outcome.status.as_u16(),
                took_us = took.as_micros() as u64,
                trace_id,
                "tool call"
            );
            if let Some(recorder) = recorder
                && recorder.record(&outcome).await.is_err()
            {
                tracing::warn!(call_id = %call.call_id, "outcome not recorded for retries: Redis unreachable");
            }
            (outcome, server_timing(took, &timing))
        }
        .instrument(span),
    );
    match handle.await {
        Ok((o, timing)) => {
            let mut response = json_response(o.status, o.body);
            if let Some(timing) = timing {
                response.headers_mut().insert(SERVER_TIMING, timing);
            }
            Ok(response)
        }
        Err(err) => {
            tracing::error!(cause = %err, "tool call task failed");
            Err(ApiError::new(ErrorCode::Internal, "internal error"))
        }
    }
}

/// The headers of the trace context and the timing, named once: a `&str` name would be parsed
/// again on every call.
const TRACEPARENT: HeaderName = HeaderName::from_static(headers::TRACEPARENT);
const TRACESTATE: HeaderName = HeaderName::from_static(headers::TRACESTATE);
const SERVER_TIMING: HeaderName = HeaderName::from_static(headers::SERVER_TIMING);

/// The caller's W3C trace context; `None` (and nothing allocated) without a valid
/// `traceparent`.
fn trace_context(headers: &HeaderMap) -> Option<TraceContext> {
    let traceparent = headers.get(&TRACEPARENT)?.to_str().ok();
    let tracestate = headers.get(&TRACESTATE).and_then(|v| v.to_str().ok());
    TraceContext::from_values(traceparent, tracestate)
}

/// The call's server span, the caller's span its parent (with the params when `payloads`); none
/// while spans are not exported or the sampler drops the call's trace (the tab then gets the
/// caller's context as it came).
fn call_span(call: &Call, payloads: bool) -> Span {
    if !telemetry::sampled(call.trace.as_deref()) {
        return Span::none();
    }
    let span = tracing::info_span!(
        "tool_call",
        otel.kind = "server",
        otel.name = "tool_call",
        relay.call_id = %call.call_id,
        relay.tool = %call.tool_name,
        relay.awaited = call.await_result,
        relay.key = %Fp(&call.api_key),
        http.response.status_code = field::Empty,
        relay.params = field::Empty,
        relay.result = field::Empty,
    );
    if let Some(trace) = call.trace.as_deref() {
        telemetry::adopt(&span, trace);
    }
    if payloads {
        let mut params = call
            .params
            .as_deref()
            .map_or("null", |p| p.get())
            .to_owned();
        truncate(&mut params, PAYLOAD_ON_SPAN);
        span.record("relay.params", params.as_str());
    }
    span
}

/// Most of a payload an exported span carries (with `RELAY_TRACE_PAYLOADS`).
const PAYLOAD_ON_SPAN: usize = 1024;

/// Records a payload on a span, cut to [`PAYLOAD_ON_SPAN`] bytes.
fn record_payload(span: &Span, field: &'static str, value: Option<&serde_json::Value>) {
    if span.is_disabled() {
        return;
    }
    let mut text = value.map_or_else(|| "null".to_owned(), serde_json::Value::to_string);
    truncate(&mut text, PAYLOAD_ON_SPAN);
    span.record(field, text.as_str());
}

/// `Server-Timing` of a call that ran ([`ServerTiming`]): `relay` is its time outside its last
/// delivery, `delivery` that delivery without the tab's handler, `tab` the handler.
fn server_timing(took: Duration, timing: &Timing) -> Option<HeaderValue> {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let value = ServerTiming {
        relay_ms: ms(took.saturating_sub(timing.delivery)),
        delivery_ms: timing.route.map(|_| {
            ms(timing
                .delivery
                .saturating_sub(timing.tab.unwrap_or_default()))
        }),
        tab_ms: timing.route.and(timing.tab).map(ms),
    };
    HeaderValue::from_maybe_shared(bytes::Bytes::from(value.header_value())).ok()
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
    security(("session_token" = [])),
    responses(
        (status = 200, description = "`cancelled`: whether such a call was running on this node and is now ended", body = CancelResponse),
        (status = 400, description = "`invalid_request`: no valid Idempotency-Key, malformed JSON, a bad `apiKey`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: a missing, forged, expired or foreign session token, or one whose session was ended", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "`forbidden`: a session token for another key or without the `call` scope; a server's credential", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over the limit", body = ErrorBody),
    )
)]
pub(crate) async fn tool_call_cancel(
    State(app): State<Arc<App>>,
    principal: Principal,
    request: Request,
) -> Result<Response, ApiError> {
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
    principal.require(&req.api_key, Scope::Call, &[])?;
    principal.still_open(&app).await?;
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

pub(super) fn idempotency_conflict() -> ApiError {
    ApiError::invalid("this Idempotency-Key was already used with a different request")
}
