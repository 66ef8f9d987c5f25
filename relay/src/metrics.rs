//! Prometheus metrics. Every handle on the call path is created at start-up, so recording is an
//! atomic add (and one short histogram lock), never a lookup in a labelled family. Every metric
//! and its labels are described in `docs/operations.md`; no label holds a key, a call id or a
//! room.

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
struct CallLabels {
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LaneLabels {
    lane: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// One outcome's latency histograms, awaited and fire-and-forget.
struct Latency {
    awaited: Histogram,
    fire: Histogram,
    calls: Counter,
}

/// What one Redis connection's operations took, and how many failed ([`Metrics::redis_lane`]).
#[derive(Clone)]
pub struct LaneMeter {
    pub latency: Histogram,
    pub errors: Counter,
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
    /// 1 when `/readyz` would answer ready; set when scraped.
    pub ready: Gauge,
    /// How late the runtime woke a sleeping task, probed every 50 ms ([`crate::admission`]).
    pub runtime_lateness: Histogram,
    ok: Latency,
    failed: Vec<(ErrorCode, Latency)>,
    tab_handler: Histogram,
    local_deliveries: Counter,
    remote_deliveries: Counter,
    lanes: Family<LaneLabels, Histogram>,
    lane_errors: Family<LaneLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// 100 µs … ~3.3 s.
fn call_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// 100 µs … ~1.6 s: Redis answers in well under a millisecond when it is near and well.
fn short_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 15))
}

/// 1 ms … ~2 min: a tab's handler may wait for its user.
fn handler_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("relay");
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let c = Counter::default();
            registry.register(name, help, c.clone());
            c
        };
        let connected_tabs = gauge(
            &mut registry,
            "connected_tabs",
            "Sockets connected to the relay",
        );
        let bound_keys = gauge(&mut registry, "bound_keys", "Keys bound to a live tab");
        let known_keys = gauge(
            &mut registry,
            "known_keys",
            "Keys issued, online or offline",
        );
        let calls_in_flight = gauge(
            &mut registry,
            "calls_in_flight",
            "Calls holding a per-key in-flight slot on this node",
        );
        let acks_pending = gauge(
            &mut registry,
            "acks_pending",
            "Awaited calls delivered and waiting for the tab's answer",
        );
        let calls_cancellable = gauge(
            &mut registry,
            "calls_cancellable",
            "Calls with an Idempotency-Key that can still be cancelled",
        );
        let tokens_issued = counter(
            &mut registry,
            "tokens_issued",
            "Tokens minted by the token service",
        );
        let bind_limit = gauge(
            &mut registry,
            "bind_limit",
            "Binds this node runs at once at most, now (lower while it is saturated)",
        );
        let binds_waiting = gauge(
            &mut registry,
            "binds_waiting",
            "Binds waiting for their turn",
        );
        let binds_refused_busy = counter(
            &mut registry,
            "binds_refused_busy",
            "Binds refused as unavailable because no turn came in time",
        );
        let ready = gauge(
            &mut registry,
            "ready",
            "1 when the relay is ready to serve (as /readyz), 0 while draining or Redis is unreachable",
        );
        let build = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "build_info",
            "The relay's version (always 1)",
            build.clone(),
        );
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);

        let calls = Family::<OutcomeLabels, Counter>::default();
        registry.register("tool_calls", "Tool calls by outcome", calls.clone());
        let latency = Family::<CallLabels, Histogram>::new_with_constructor(call_buckets);
        registry.register(
            "tool_call_duration_seconds",
            "Time from a tool call's arrival to its answer, by kind and outcome; awaited calls include the tab's round trip",
            latency.clone(),
        );
        // Each handle is taken in a statement of its own: a family's read guard lives to the end
        // of its statement, and creating the next entry needs the write lock.
        let of = |outcome: &'static str| {
            let awaited = latency
                .get_or_create(&CallLabels {
                    kind: "awaited",
                    outcome,
                })
                .clone();
            let fire = latency
                .get_or_create(&CallLabels {
                    kind: "fire_and_forget",
                    outcome,
                })
                .clone();
            let calls = calls.get_or_create(&OutcomeLabels { outcome }).clone();
            Latency {
                awaited,
                fire,
                calls,
            }
        };
        let ok = of("ok");
        let failed = ErrorCode::ALL
            .iter()
            .map(|code| (*code, of(code.as_str())))
            .collect();

        let tab_handler = handler_buckets();
        registry.register(
            "tab_handler_duration_seconds",
            "The tab's handler time of awaited calls, as the tab reported it",
            tab_handler.clone(),
        );
        let deliveries = Family::<RouteLabels, Counter>::default();
        registry.register(
            "deliveries",
            "Delivery attempts by route: to a socket of this node, or through the adapter to another node",
            deliveries.clone(),
        );
        let local_deliveries = deliveries
            .get_or_create(&RouteLabels { route: "local" })
            .clone();
        let remote_deliveries = deliveries
            .get_or_create(&RouteLabels { route: "remote" })
            .clone();

        let lanes = Family::<LaneLabels, Histogram>::new_with_constructor(short_buckets);
        registry.register(
            "redis_operation_duration_seconds",
            "Redis operations by connection (lane), from sending to the answer",
            lanes.clone(),
        );
        let lane_errors = Family::<LaneLabels, Counter>::default();
        registry.register(
            "redis_operation_errors",
            "Redis operations that failed or got no answer in time, by connection (lane)",
            lane_errors.clone(),
        );
        let runtime_lateness = short_buckets();
        registry.register(
            "runtime_lateness_seconds",
            "How late the runtime woke a task sleeping 50 ms (probed every 50 ms): high when the node is saturated",
            runtime_lateness.clone(),
        );

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
            ready,
            runtime_lateness,
            ok,
            failed,
            tab_handler,
            local_deliveries,
            remote_deliveries,
            lanes,
            lane_errors,
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

    /// Records one finished tool call, and the tab's handler time when it reported one.
    pub fn call_finished(
        &self,
        outcome: Result<(), ErrorCode>,
        awaited: bool,
        took: Duration,
        tab: Option<Duration>,
    ) {
        let latency = match outcome {
            Ok(()) => &self.ok,
            Err(code) => match self.failed.iter().find(|(c, _)| *c == code) {
                Some((_, latency)) => latency,
                None => return,
            },
        };
        latency.calls.inc();
        let histogram = if awaited {
            &latency.awaited
        } else {
            &latency.fire
        };
        histogram.observe(took.as_secs_f64());
        if let Some(tab) = tab {
            self.tab_handler.observe(tab.as_secs_f64());
        }
    }

    /// Counts one delivery attempt, to another node (`remote`) or to a socket of this one.
    pub fn delivered(&self, remote: bool) {
        if remote {
            self.remote_deliveries.inc();
        } else {
            self.local_deliveries.inc();
        }
    }

    /// The meter of the Redis connection `lane` (its operations' latency and failures).
    pub fn redis_lane(&self, lane: &'static str) -> LaneMeter {
        let latency = self.lanes.get_or_create(&LaneLabels { lane }).clone();
        let errors = self.lane_errors.get_or_create(&LaneLabels { lane }).clone();
        LaneMeter { latency, errors }
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
