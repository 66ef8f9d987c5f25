//! The settings of what `serve` keeps and shows for operators: session timelines, the `/debug`
//! page and its link to the team's trace viewer, payloads on spans, and the export of spans
//! (the standard `OTEL_*` variables). Validated with the rest of `serve`'s configuration.

use std::time::Duration;

use clap::Args;

use crate::session::TimelineConfig;
use crate::telemetry;

/// Most events a timeline may keep per session.
const MAX_TIMELINE_EVENTS: usize = 10_000;
/// The placeholder of the trace-link template.
pub const TRACE_ID_PLACEHOLDER: &str = "{traceId}";

#[derive(Args, Clone, Debug)]
pub struct ObserveArgs {
    /// Events kept per session in its timeline (`GET /sessions/{id}/events`, `/debug`); 0 keeps
    /// no timelines.
    #[arg(long, env = "WORKER_TIMELINE_EVENTS", default_value_t = 256)]
    pub timeline_events: usize,
    /// How long a closed session's timeline is kept, seconds.
    #[arg(long, env = "WORKER_TIMELINE_KEEP_SECS", default_value_t = 900)]
    pub timeline_keep_secs: u64,
    /// Serve the `/debug` page (the sessions and their timelines, behind the operators'
    /// credential). Off unless set to true.
    #[arg(long, env = "WORKER_DEBUG_PAGE", default_value_t = false, action = clap::ArgAction::Set)]
    pub debug_page: bool,
    /// A link to the team's trace viewer for a trace id, shown on `/debug`:
    /// `https://traces.example.com/trace/{traceId}`.
    #[arg(long, env = "WORKER_TRACE_LINK")]
    pub trace_link: Option<String>,
}

/// Validated [`ObserveArgs`], with the export's settings read from `OTEL_*`.
#[derive(Debug, Clone)]
pub struct ObserveConfig {
    pub timelines: TimelineConfig,
    pub debug_page: bool,
    pub trace_link: Option<String>,
    pub telemetry: telemetry::Settings,
}

impl ObserveConfig {
    /// The settings, or each problem found (pushed on `problems`).
    pub fn from_args(args: &ObserveArgs, problems: &mut Vec<String>) -> ObserveConfig {
        if args.timeline_events > MAX_TIMELINE_EVENTS {
            problems.push(format!(
                "WORKER_TIMELINE_EVENTS must be at most {MAX_TIMELINE_EVENTS}"
            ));
        }
        let trace_link = args
            .trace_link
            .as_deref()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned);
        if let Some(link) = &trace_link
            && (!(link.starts_with("http://") || link.starts_with("https://"))
                || !link.contains(TRACE_ID_PLACEHOLDER))
        {
            problems.push(format!(
                "WORKER_TRACE_LINK must be an http(s) URL with {TRACE_ID_PLACEHOLDER} in it, such as https://traces.example.com/trace/{TRACE_ID_PLACEHOLDER}"
            ));
        }
        let telemetry = telemetry::Settings::from_env().unwrap_or_else(|e| {
            problems.push(e);
            telemetry::Settings::default()
        });
        ObserveConfig {
            timelines: TimelineConfig {
                max_events: args.timeline_events.min(MAX_TIMELINE_EVENTS),
                keep: Duration::from_secs(args.timeline_keep_secs),
                ..TimelineConfig::default()
            },
            debug_page: args.debug_page,
            trace_link,
            telemetry,
        }
    }
}
