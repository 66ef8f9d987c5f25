//! Prometheus metrics. Every handle on the call path is created at start-up, so recording is an
//! atomic add (and one short histogram lock), never a lookup in a labelled family.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use relay_wire::ErrorCode;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

pub struct Metrics {
    registry: Registry,
    /// Sockets connected to the default namespace (bound or not); set when scraped.
    pub connected_tabs: Gauge,
    /// Keys currently bound to a live tab.
    pub bound_keys: Gauge,
    /// Keys the relay knows (issued, online or offline).
    pub known_keys: Gauge,
    /// Calls holding a per-key in-flight slot on this node; set when scraped.
    pub calls_in_flight: Gauge,
    /// Awaited calls delivered and waiting for the tab's answer; set when scraped.
    pub acks_pending: Gauge,
    /// Calls with an Idempotency-Key that can still be cancelled; set when scraped.
    pub calls_cancellable: Gauge,
    pub tokens_issued: Counter,
    /// Binds this node runs at once at most, now ([`crate::admission`]); set when scraped.
    pub bind_limit: Gauge,
    /// Binds waiting for their turn; set when scraped.
    pub binds_waiting: Gauge,
    /// Handshakes and registrations refused because no turn came in time.
    pub binds_refused_busy: Counter,
    ok_calls: Counter,
    failed_calls: Vec<(ErrorCode, Counter)>,
    awaited_latency: Histogram,
    fire_latency: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("relay");
        let connected_tabs = Gauge::default();
        let bound_keys = Gauge::default();
        let known_keys = Gauge::default();
        let calls_in_flight = Gauge::default();
        let acks_pending = Gauge::default();
        let calls_cancellable = Gauge::default();
        let tokens_issued = Counter::default();
        registry.register(
            "connected_tabs",
            "Sockets connected to the relay",
            connected_tabs.clone(),
        );
        registry.register("bound_keys", "Keys bound to a live tab", bound_keys.clone());
        registry.register(
            "known_keys",
            "Keys issued, online or offline",
            known_keys.clone(),
        );
        registry.register(
            "calls_in_flight",
            "Calls holding a per-key in-flight slot on this node",
            calls_in_flight.clone(),
        );
        registry.register(
            "acks_pending",
            "Awaited calls delivered and waiting for the tab's answer",
            acks_pending.clone(),
        );
        registry.register(
            "calls_cancellable",
            "Calls with an Idempotency-Key that can still be cancelled",
            calls_cancellable.clone(),
        );
        registry.register(
            "tokens_issued",
            "Tokens minted by the token service",
            tokens_issued.clone(),
        );

        let bind_limit = Gauge::default();
        registry.register(
            "bind_limit",
            "Binds this node runs at once at most, now (lower while it is saturated)",
            bind_limit.clone(),
        );
        let binds_waiting = Gauge::default();
        registry.register(
            "binds_waiting",
            "Binds waiting for their turn",
            binds_waiting.clone(),
        );
        let binds_refused_busy = Counter::default();
        registry.register(
            "binds_refused_busy",
            "Binds refused as unavailable because no turn came in time",
            binds_refused_busy.clone(),
        );

        let calls = Family::<OutcomeLabels, Counter>::default();
        registry.register("tool_calls", "Tool calls by outcome", calls.clone());
        let ok_calls = calls
            .get_or_create(&OutcomeLabels { outcome: "ok" })
            .clone();
        let failed_calls = ErrorCode::ALL
            .iter()
            .map(|code| {
                let counter = calls
                    .get_or_create(&OutcomeLabels {
                        outcome: code.as_str(),
                    })
                    .clone();
                (*code, counter)
            })
            .collect();

        let latency = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            // 100 µs … ~3.3 s.
            Histogram::new(exponential_buckets(0.0001, 2.0, 16))
        });
        registry.register(
            "tool_call_duration_seconds",
            "Time from a tool call's arrival to its answer; awaited calls include the tab's round trip",
            latency.clone(),
        );
        let awaited_latency = latency
            .get_or_create(&KindLabels { kind: "awaited" })
            .clone();
        let fire_latency = latency
            .get_or_create(&KindLabels {
                kind: "fire_and_forget",
            })
            .clone();

        Metrics {
            registry,
            connected_tabs,
            bound_keys,
            known_keys,
            calls_in_flight,
            acks_pending,
            calls_cancellable,
            tokens_issued,
            bind_limit,
            binds_waiting,
            binds_refused_busy,
            ok_calls,
            failed_calls,
            awaited_latency,
            fire_latency,
        }
    }

    /// With several nodes: also reports the key events this node heard (`counter`, kept by the
    /// Redis client), which a node hears only for the keys it waits for.
    pub fn with_key_events(
        mut self,
        counter: prometheus_client::metrics::counter::Counter,
    ) -> Self {
        self.registry.register(
            "key_events_heard",
            "Key changes this node heard from Redis (only those of keys it waited for)",
            counter,
        );
        self
    }

    /// Records one finished tool call.
    pub fn call_finished(&self, outcome: Result<(), ErrorCode>, awaited: bool, took: Duration) {
        match outcome {
            Ok(()) => {
                self.ok_calls.inc();
                let histogram = if awaited {
                    &self.awaited_latency
                } else {
                    &self.fire_latency
                };
                histogram.observe(took.as_secs_f64());
            }
            Err(code) => {
                if let Some((_, counter)) = self.failed_calls.iter().find(|(c, _)| *c == code) {
                    counter.inc();
                }
            }
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
