//! The relay's telemetry: its logs and, when the standard `OTEL_*` variables turn it on, its
//! spans exported over OTLP/HTTP, both set up by `relay_telemetry` (the one crate that knows
//! OpenTelemetry exists). The call path opens its spans (a server span per tool call, a span per
//! delivery attempt) only for a call whose trace is kept ([`sampled`]); otherwise it opens none
//! and allocates nothing for them.

pub use relay_telemetry::{Settings, Telemetry, adopt, context_of, enabled, event, fail, sampled};

use crate::config::LogFormat;

/// Socket.IO and Engine.IO log whole packets below `info`, handshake tokens included, so they are
/// capped at `info` whatever `RUST_LOG` asks for: no log line may hold a whole token.
const CAPPED_TARGETS: &[&str] = &["socketioxide=info", "engineioxide=info"];

/// Starts the relay's logs and, when `settings` say so, the export of its spans (sent through
/// `runtime`).
pub fn init(
    format: LogFormat,
    settings: &Settings,
    runtime: tokio::runtime::Handle,
) -> Result<Telemetry, String> {
    let logs = relay_telemetry::Logs {
        json: matches!(format, LogFormat::Json),
        default_filter: "info",
        capped: CAPPED_TARGETS,
        capped_unless_named: &[],
        stderr: false,
    };
    relay_telemetry::init(
        "voice-relay",
        env!("CARGO_PKG_VERSION"),
        &logs,
        settings,
        // The call path opens its spans only for a trace that is kept.
        relay_telemetry::Opening::WhenSampled,
        runtime,
    )
}
