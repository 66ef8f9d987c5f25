//! Telemetry of both servers (the relay and the agent worker), set up in one place: the
//! `tracing` subscriber that writes the logs (text or JSON, levels from `RUST_LOG`) and, when
//! the standard `OTEL_*` variables ask for it, an OpenTelemetry layer that exports spans over
//! OTLP/HTTP (protobuf). Off by default.
//!
//! The servers' spans are `tracing` spans. Only this crate knows OpenTelemetry exists: a server
//! asks [`enabled`] before it opens its spans (no span, and no allocation for one, while export
//! is off), hands a request's W3C context to [`adopt`], takes a span's context for the next hop
//! from [`context_of`], and marks failures with [`fail`]. A server on a hot path asks
//! [`sampled`] instead ([`Opening::WhenSampled`]): it opens no span for a trace the sampler
//! drops, so an unsampled call costs what a call costs with export off.

mod export;
mod settings;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Status, TraceContextExt};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use relay_wire::{TraceContext, headers};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

pub use settings::{Export, Root, Sampling, Settings};

/// Set once export is on: the servers open their spans only then.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// The sampler read from the `OTEL_*` variables, once export is on ([`sampled`]).
static SAMPLING: OnceLock<Sampling> = OnceLock::new();

/// How a server opens the spans that start its traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// It opens every span while export is on, and the SDK's sampler decides which traces are
    /// kept.
    Always,
    /// It asks [`sampled`] before it opens a trace's first span, and opens none for a trace the
    /// sampler drops: the SDK then keeps every span it is given.
    WhenSampled,
}

/// How a server logs: its default filter when `RUST_LOG` is unset, the targets capped whatever
/// `RUST_LOG` says (libraries that log secrets below some level), JSON or text, to standard
/// output or error.
pub struct Logs {
    pub json: bool,
    pub default_filter: &'static str,
    pub capped: &'static [&'static str],
    /// Capped like `capped` unless `RUST_LOG` names their target itself (libraries that are
    /// only noisy: asking for them by name shows them).
    pub capped_unless_named: &'static [&'static str],
    pub stderr: bool,
}

impl Logs {
    /// Colours only on a terminal: a log file (scripts/manage.sh's `.run/`) stays plain text
    /// that grep finds fields in.
    fn ansi(&self) -> bool {
        use std::io::IsTerminal;
        if self.stderr {
            std::io::stderr().is_terminal()
        } else {
            std::io::stdout().is_terminal()
        }
    }

    fn filter(&self) -> EnvFilter {
        let asked = std::env::var(EnvFilter::DEFAULT_ENV).ok();
        let asked = asked.as_deref().map(str::trim).filter(|a| !a.is_empty());
        // Unset, blank or not a filter: the default.
        let mut filter = asked
            .and_then(|a| EnvFilter::try_new(a).ok())
            .unwrap_or_else(|| EnvFilter::new(self.default_filter));
        let named = |directive: &str| {
            let target = directive.split('=').next().unwrap_or(directive);
            asked.is_some_and(|a| a.contains(target))
        };
        let soft = self.capped_unless_named.iter().filter(|d| !named(d));
        for directive in self.capped.iter().chain(soft) {
            if let Ok(d) = directive.parse() {
                filter = filter.add_directive(d);
            }
        }
        filter
    }
}

/// What [`init`] started; [`Telemetry::shutdown`] sends the spans still queued.
pub struct Telemetry {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

/// Starts the logs and, when `settings` say so, the export of spans, for the process named
/// `service` at `version` (its `service.name` unless `OTEL_SERVICE_NAME` names it), which opens
/// its spans as `opening` says. Spans are sent from the SDK's own thread through `runtime`.
pub fn init(
    service: &'static str,
    version: &'static str,
    logs: &Logs,
    settings: &Settings,
    opening: Opening,
    runtime: tokio::runtime::Handle,
) -> Result<Telemetry, String> {
    let Some(export) = &settings.export else {
        init_logs(logs);
        return Ok(Telemetry { provider: None });
    };
    let provider = export::provider(service, version, export, opening, runtime)?;
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, service);
    // Only the servers' own spans (each names its `otel.kind`) go out: log lines stay logs, so
    // nothing a log line holds reaches a span.
    // They are all `info` spans: with that hint, the `debug` and `trace` lines of the libraries
    // stay cut off by the level check alone, as they are while export is off.
    let spans_only = tracing_subscriber::filter::filter_fn(|meta| {
        meta.is_span() && meta.fields().field("otel.kind").is_some()
    })
    .with_max_level_hint(tracing::level_filters::LevelFilter::INFO);
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_filter(spans_only);
    let fmt = fmt_layer(logs).with_filter(logs.filter());
    tracing_subscriber::registry().with(fmt).with(otel).init();
    let _ = SAMPLING.set(export.sampling);
    ENABLED.store(true, Ordering::Release);
    tracing::info!(
        endpoint = %export.endpoint,
        sampler = %export.sampler,
        "OpenTelemetry: spans exported over OTLP/HTTP"
    );
    Ok(Telemetry {
        provider: Some(provider),
    })
}

/// The logs alone, as the servers wrote them before export existed: one subscriber, one filter.
fn init_logs(logs: &Logs) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(logs.filter())
        .with_ansi(logs.ansi());
    match (logs.json, logs.stderr) {
        (true, true) => builder
            .with_writer(std::io::stderr)
            .json()
            .flatten_event(true)
            .init(),
        (true, false) => builder.json().flatten_event(true).init(),
        (false, true) => builder.with_writer(std::io::stderr).init(),
        (false, false) => builder.init(),
    }
}

type Boxed = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;

fn fmt_layer(logs: &Logs) -> Boxed {
    let layer = tracing_subscriber::fmt::layer().with_ansi(logs.ansi());
    match (logs.json, logs.stderr) {
        (true, true) => layer
            .with_writer(std::io::stderr)
            .json()
            .flatten_event(true)
            .boxed(),
        (true, false) => layer.json().flatten_event(true).boxed(),
        (false, true) => layer.with_writer(std::io::stderr).boxed(),
        (false, false) => layer.boxed(),
    }
}

impl Telemetry {
    /// Sends what is queued and stops the export (bounded by the exporter's timeout). Blocks a
    /// thread of its own, never the runtime's.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(err)) = done {
            tracing::warn!(cause = %err, "OpenTelemetry: spans not all sent at shutdown");
        }
    }
}

/// Whether spans are exported: the servers open theirs only then.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// Whether a trace is kept, for a server that opens its spans [`Opening::WhenSampled`]: the
/// caller's choice (its `traceparent`'s flag) under a parent-based sampler, else the sampler's
/// own for a trace that starts here. Always false while export is off.
pub fn sampled(parent: Option<&TraceContext>) -> bool {
    if !enabled() {
        return false;
    }
    SAMPLING
        .get()
        .is_some_and(|sampling| decide(sampling, parent, rand::random::<f64>))
}

/// What `sampling` decides for a trace with `parent`; `draw` gives a number in `[0, 1)` for a
/// ratio.
fn decide(sampling: &Sampling, parent: Option<&TraceContext>, draw: impl FnOnce() -> f64) -> bool {
    match parent {
        Some(parent) if sampling.parent_based => parent.parent.sampled(),
        _ => match sampling.root {
            Root::Always => true,
            Root::Never => false,
            Root::Ratio(ratio) => draw() < ratio,
        },
    }
}

/// Makes the caller's span (from a request's `traceparent`/`tracestate`) the parent of `span`.
pub fn adopt(span: &Span, parent: &TraceContext) {
    if !enabled() {
        return;
    }
    let mut carrier = std::collections::HashMap::with_capacity(2);
    carrier.insert(
        headers::TRACEPARENT.to_owned(),
        parent.parent.as_str().to_owned(),
    );
    if let Some(state) = &parent.state {
        carrier.insert(headers::TRACESTATE.to_owned(), state.as_str().to_owned());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    // Refused only when the span is not one of ours (export off for it): then it has no parent
    // to take.
    let _ = span.set_parent(cx);
}

/// The W3C context of `span` for the next hop (a header, a tab's meta), when it is exported.
pub fn context_of(span: &Span) -> Option<TraceContext> {
    if !enabled() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = std::collections::HashMap::with_capacity(2);
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    TraceContext::from_values(
        carrier.get(headers::TRACEPARENT).map(String::as_str),
        carrier.get(headers::TRACESTATE).map(String::as_str),
    )
}

/// Marks `span` failed, with the error code as its status description.
pub fn fail(span: &Span, code: &str) {
    if enabled() && !span.is_disabled() {
        span.set_status(Status::error(code.to_owned()));
    }
}

/// Adds an event named `name` with number attributes to `span`.
pub fn event(span: &Span, name: &'static str, attributes: &[(&'static str, f64)]) {
    if enabled() && !span.is_disabled() {
        let attributes = attributes
            .iter()
            .map(|(k, v)| opentelemetry::KeyValue::new(*k, *v))
            .collect();
        span.add_event(name, attributes);
    }
}

#[cfg(test)]
mod tests;
