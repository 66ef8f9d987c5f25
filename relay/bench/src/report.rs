//! The generator's report: one JSON line, as `scripts/bench.mjs` reads it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::meters::Percentiles;

#[derive(Serialize)]
pub struct Report {
    pub label: String,
    pub tabs: usize,
    pub bind: String,
    pub bind_failures: usize,
    pub bind_ms: f64,
    pub server_rss_kib_before_tabs: Option<u64>,
    pub server_rss_kib_with_tabs: Option<u64>,
    pub rss_bytes_per_tab: Option<f64>,
    pub headers: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bind_failure: Option<String>,
    #[serde(flatten)]
    pub big_emit: Option<BigEmit>,
    #[serde(flatten)]
    pub calls: Option<Calls>,
}

/// After one large fire-and-forget call to every tab.
#[derive(Serialize)]
pub struct BigEmit {
    pub big_emit_bytes: usize,
    pub big_emit_delivered: u64,
    pub big_emit_ms: f64,
    pub server_rss_kib_after_big_emit: Option<u64>,
    pub rss_bytes_per_tab_after_big_emit: Option<f64>,
    pub big_emit_agents: usize,
    /// Measured again `after_emit_secs` later, when asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes_per_tab_later: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_emit_secs: Option<f64>,
}

/// The measured calls.
#[derive(Serialize)]
pub struct Calls {
    pub agents: usize,
    /// `awaited` or `fire_and_forget`.
    pub mode: &'static str,
    pub rate: Option<f64>,
    pub duration_s: f64,
    pub calls: u64,
    pub throughput_per_s: f64,
    pub latency_us: Percentiles,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_from_schedule_us: Option<Percentiles>,
    pub server_cpu_us_per_call: Option<f64>,
    pub calls_per_server_core_s: Option<f64>,
    pub server_ctx_switches_per_call: Option<f64>,
    pub errors: BTreeMap<String, u64>,
    pub misrouted: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub server_cpu_pct: Option<f64>,
    pub loadgen_cpu_pct: Option<f64>,
    pub other_cpu_pct: Option<f64>,
    pub server_rss_kib_end: Option<u64>,
}

/// Memory per tab in bytes, from the server's RSS before and after (KiB).
pub fn per_tab(before: Option<u64>, after: Option<u64>, tabs: usize) -> Option<f64> {
    match (before, after) {
        (Some(b), Some(a)) if tabs > 0 => Some((a.saturating_sub(b) * 1024) as f64 / tabs as f64),
        _ => None,
    }
}
