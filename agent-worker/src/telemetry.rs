//! The worker's telemetry: its logs and, when the standard `OTEL_*` variables turn it on, its
//! spans exported over OTLP/HTTP, both set up by `relay_telemetry` (the one crate that knows
//! OpenTelemetry exists). While export is on, `serve` opens a span per surface request, the
//! worker a span per tool call and the relay client one per attempt, and the relay's call
//! becomes a child of the attempt; otherwise none is opened, and a caller's W3C context is
//! passed to the relay as it came.

pub use relay_telemetry::{Settings, Telemetry, adopt, context_of, enabled, event, fail};

/// rmcp logs every session, request and notification at `info`, some as whole Debug dumps of
/// its messages: capped at `warn` whatever `RUST_LOG` says, unless `RUST_LOG` names rmcp itself.
const RMCP_CAP: &[&str] = &["rmcp=warn"];

/// Starts the worker's logs on standard error (JSON with `json`, levels from `RUST_LOG` or
/// `default_filter`) and, when `settings` say so, the export of its spans (sent through the
/// current runtime).
pub fn init(
    json: bool,
    default_filter: &'static str,
    settings: &Settings,
) -> Result<Telemetry, String> {
    let logs = relay_telemetry::Logs {
        json,
        default_filter,
        capped: &[],
        capped_unless_named: RMCP_CAP,
        stderr: true,
    };
    relay_telemetry::init(
        "agent-worker",
        env!("CARGO_PKG_VERSION"),
        &logs,
        settings,
        relay_telemetry::Opening::Always,
        tokio::runtime::Handle::current(),
    )
}

/// The trace a call is in, for its log lines and its timeline: the span's own while spans are
/// exported, else the caller's context as it came.
pub fn trace_id(span: &tracing::Span, caller: Option<&relay_wire::TraceContext>) -> Option<String> {
    context_of(span)
        .as_ref()
        .or(caller)
        .map(|t| t.trace_id().to_owned())
}

tokio::task_local! {
    /// The W3C context the request being served came with.
    static CALLER: Option<relay_wire::TraceContext>;
}

/// Runs `work` as the serving of a request that came with `trace` ([`caller`] answers it).
pub async fn with_caller<F: std::future::Future>(
    trace: Option<relay_wire::TraceContext>,
    work: F,
) -> F::Output {
    CALLER.scope(trace, work).await
}

/// The W3C context of the request being served (`serve` sets it for every HTTP request), if it
/// came with one.
pub fn caller() -> Option<relay_wire::TraceContext> {
    CALLER.try_with(Clone::clone).ok().flatten()
}
