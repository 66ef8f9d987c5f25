//! The trace of each request of the HTTP surfaces (agent API, Vapi, LiveKit webhooks,
//! operations): its W3C `traceparent`/`tracestate` are read once here and kept for the request
//! (`telemetry::caller`, which the worker passes on to the relay when it exports no span of its
//! own), and while spans are exported the request gets a server span, the caller's span its
//! parent. `/mcp` is left to its handler: rmcp serves MCP requests in tasks of its own, and an
//! MCP call carries its context in `params._meta` too.

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use relay_wire::{TraceContext, headers};
use tracing::{Instrument, Span, field};

use crate::telemetry;

/// A request's W3C context; `None` without a valid `traceparent`.
pub fn trace_context(headers: &HeaderMap) -> Option<TraceContext> {
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    TraceContext::from_values(value(headers::TRACEPARENT), value(headers::TRACESTATE))
}

/// The server span of a request (none while spans are not exported), `trace` its parent.
pub fn server_span(name: &str, trace: Option<&TraceContext>) -> Span {
    if !telemetry::enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        "request",
        otel.kind = "server",
        otel.name = name,
        http.response.status_code = field::Empty,
    );
    if let Some(trace) = trace {
        telemetry::adopt(&span, trace);
    }
    span
}

/// The layer around every route but `/mcp`.
pub async fn traced(request: Request, next: Next) -> Response {
    let trace = trace_context(request.headers());
    if request.uri().path().starts_with("/mcp") {
        return next.run(request).await;
    }
    let span = if telemetry::enabled() {
        let route = request.extensions().get::<MatchedPath>().map_or_else(
            || request.uri().path().to_owned(),
            |p| p.as_str().to_owned(),
        );
        server_span(&format!("{} {route}", request.method()), trace.as_ref())
    } else {
        Span::none()
    };
    let response = telemetry::with_caller(trace, next.run(request))
        .instrument(span.clone())
        .await;
    let status = response.status().as_u16();
    span.record("http.response.status_code", i64::from(status));
    if status >= 500 {
        telemetry::fail(&span, &status.to_string());
    }
    response
}
