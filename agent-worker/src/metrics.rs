//! The worker's Prometheus metrics (`GET /metrics` of `agent-worker serve`). One set per relay
//! client, shared by everything built on it (the worker, its sessions, the server's surfaces).
//! Labels are bounded: the tool label holds a catalog tool or mode move (anything else counts as
//! `other`, chosen by the caller), outcomes come from the closed list of codes, sources and
//! results are fixed names. No key, call id or room is ever a label. Each metric is described in
//! `docs/operations.md`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::error::Code;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// The tool label of a name that is no catalog tool or mode move.
pub const OTHER_TOOL: &str = "other";
/// The sessions' sources, each a series of `worker_sessions_open` even at 0.
pub const SOURCES: [&str; 4] = ["livekit", "agent", "vapi", "demo"];

/// How one HTTP attempt of a tool call to the relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// The relay answered (success or a decided failure).
    Answered,
    /// It answered 503 (draining, or its Redis unreachable): tried again.
    Unavailable,
    /// No answer: connection refused, reset, or no answer in time.
    Unreachable,
}

impl Attempt {
    fn as_str(self) -> &'static str {
        match self {
            Attempt::Answered => "answered",
            Attempt::Unavailable => "unavailable",
            Attempt::Unreachable => "unreachable",
        }
    }
}

pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    latency: Family<OutcomeLabels, Histogram>,
    attempts: Family<ResultLabels, Counter>,
    retries: Counter,
    transitions: Counter,
    webhook_failures: Family<WebhookLabels, Counter>,
    sessions: Family<SourceLabels, Gauge>,
    mcp_sessions: Gauge,
    timelines: Gauge,
    relay_reachable: Gauge,
    /// Whether the relay was reached last time: 1, 0, or -1 before any request.
    reached: AtomicI64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("worker");
        let build = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "build_info",
            "The worker's version (always 1)",
            build.clone(),
        );
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "tool_calls",
            "Tool calls the worker ran for agents, by tool (catalog tools and mode moves; other names count as other) and outcome",
            calls.clone(),
        );
        // 1 ms … ~2 min: awaited calls wait for the user.
        let latency = Family::<OutcomeLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 18))
        });
        registry.register(
            "tool_call_duration_seconds",
            "Time the worker took for a tool call, by outcome (checks, mode, the relay's round trip)",
            latency.clone(),
        );
        for outcome in std::iter::once("ok").chain(Code::all().map(Code::as_str)) {
            let _ = latency.get_or_create(&OutcomeLabels { outcome });
        }
        let attempts = Family::<ResultLabels, Counter>::default();
        registry.register(
            "relay_attempts",
            "HTTP attempts of tool calls to the relay, by result: answered, unavailable (503, tried again), unreachable",
            attempts.clone(),
        );
        for a in [
            Attempt::Answered,
            Attempt::Unavailable,
            Attempt::Unreachable,
        ] {
            let _ = attempts.get_or_create(&ResultLabels { result: a.as_str() });
        }
        let retries = Counter::default();
        registry.register(
            "relay_retries",
            "Attempts after a call's first (same Idempotency-Key)",
            retries.clone(),
        );
        let transitions = Counter::default();
        registry.register(
            "mode_transitions",
            "Sessions' changes of mode",
            transitions.clone(),
        );
        let webhook_failures = Family::<WebhookLabels, Counter>::default();
        registry.register(
            "webhook_verification_failures",
            "Webhooks refused because their signature or secret did not verify, by webhook (livekit, vapi)",
            webhook_failures.clone(),
        );
        for webhook in ["livekit", "vapi"] {
            let _ = webhook_failures.get_or_create(&WebhookLabels { webhook });
        }
        let sessions = Family::<SourceLabels, Gauge>::default();
        registry.register(
            "sessions_open",
            "Sessions open now, by source (livekit, agent, vapi, demo)",
            sessions.clone(),
        );
        let mcp_sessions = Gauge::default();
        registry.register(
            "mcp_sessions",
            "MCP sessions open now",
            mcp_sessions.clone(),
        );
        let timelines = Gauge::default();
        registry.register(
            "timelines",
            "Session timelines kept (open sessions, and closed ones for a while)",
            timelines.clone(),
        );
        let relay_reachable = Gauge::default();
        registry.register(
            "relay_reachable",
            "1 when the worker's last request reached the relay (as its /readyz), 0 when it failed to connect",
            relay_reachable.clone(),
        );
        Metrics {
            registry,
            calls,
            latency,
            attempts,
            retries,
            transitions,
            webhook_failures,
            sessions,
            mcp_sessions,
            timelines,
            relay_reachable,
            reached: AtomicI64::new(-1),
        }
    }

    /// One tool call an agent made: `tool` already bounded by the caller (a catalog tool, a mode
    /// move, or [`OTHER_TOOL`]).
    pub fn tool_call(&self, tool: &str, outcome: Result<(), Code>, took: Duration) {
        let outcome = match outcome {
            Ok(()) => "ok",
            Err(code) => code.as_str(),
        };
        self.calls
            .get_or_create(&CallLabels {
                tool: tool.to_owned(),
                outcome,
            })
            .inc();
        self.latency
            .get_or_create(&OutcomeLabels { outcome })
            .observe(took.as_secs_f64());
    }

    /// One HTTP attempt of a tool call to the relay; `retry` when it is not the call's first.
    pub fn relay_attempt(&self, attempt: Attempt, retry: bool) {
        self.attempts
            .get_or_create(&ResultLabels {
                result: attempt.as_str(),
            })
            .inc();
        if retry {
            self.retries.inc();
        }
        self.relay_reached(attempt != Attempt::Unreachable);
    }

    /// Whether the last request to the relay (any request) reached it.
    pub fn relay_reached(&self, reached: bool) {
        self.reached.store(i64::from(reached), Ordering::Release);
    }

    /// Whether the relay was reached last time; `None` before any request.
    pub fn relay_was_reached(&self) -> Option<bool> {
        match self.reached.load(Ordering::Acquire) {
            -1 => None,
            n => Some(n == 1),
        }
    }

    pub fn mode_transition(&self) {
        self.transitions.inc();
    }

    /// A webhook (`livekit`, `vapi`) refused because it did not verify.
    pub fn webhook_refused(&self, webhook: &'static str) {
        self.webhook_failures
            .get_or_create(&WebhookLabels { webhook })
            .inc();
    }

    /// The gauges read when scraped: open sessions by source, MCP sessions, timelines kept.
    pub fn set_gauges(&self, sessions: &[(&'static str, usize)], mcp: usize, timelines: usize) {
        for source in SOURCES {
            let open = sessions
                .iter()
                .filter(|(s, _)| *s == source)
                .map(|(_, n)| *n)
                .sum::<usize>();
            self.sessions
                .get_or_create(&SourceLabels { source })
                .set(open as i64);
        }
        self.mcp_sessions.set(mcp as i64);
        self.timelines.set(timelines as i64);
        if let Some(reached) = self.relay_was_reached() {
            self.relay_reachable.set(i64::from(reached));
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(cause = %err, "metrics encoding failed");
        }
        out
    }
}
