//! The session log: each tool call (tool, mode, duration, outcome, the relay's call id, the
//! trace id) as a line, in the metrics and in the session's timeline, per-tool figures kept in
//! the session, a summary when it closes, and the view `GET /sessions` shows.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use relay_wire::{Fp, fingerprint};
use serde::Serialize;
use tokio::time::Instant;

use std::collections::VecDeque;

use super::timeline::{Timeline, What};
use super::{Offer, Session, Sessions, lock};
use crate::client::Report;
use crate::error::{Code, ToolError};
use crate::metrics::OTHER_TOOL;

#[derive(Debug, Default, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolStats {
    pub calls: u32,
    pub failures: u32,
    pub total_ms: u64,
    pub max_ms: u64,
}

/// What `GET /sessions` shows of a session.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session's id (its timeline: `GET /sessions/{id}/events`).
    pub id: String,
    /// The key's fingerprint.
    pub key: String,
    pub room: String,
    pub identity: String,
    pub source: &'static str,
    pub mode: String,
    pub age_ms: u64,
    pub mode_transitions: u32,
    pub tools: BTreeMap<String, ToolStats>,
    /// How many followers (MCP sessions, agents waiting for a new offer) watch this session.
    pub followers: usize,
    /// What the tab declared it handles (`null`: it never said, so every tool).
    pub handles: Option<Vec<String>>,
}

/// Logs the summary of a session that closed.
pub(super) fn closed(key: &str, session: &Session, reason: &str) {
    let state = lock(&session.state);
    let calls: u32 = state.tools.values().map(|s| s.calls).sum();
    let failures: u32 = state.tools.values().map(|s| s.failures).sum();
    let total_ms: u64 = state.tools.values().map(|s| s.total_ms).sum();
    let per_tool = state
        .tools
        .iter()
        .map(|(name, s)| format!("{name}={}", s.calls))
        .collect::<Vec<_>>()
        .join(",");
    tracing::info!(
        key = %Fp(key),
        room = %state.room,
        reason,
        duration_ms = session.opened.elapsed().as_millis() as u64,
        mode_transitions = state.transitions,
        tool_calls = calls,
        tool_failures = failures,
        avg_tool_ms = total_ms.checked_div(u64::from(calls)).unwrap_or(0),
        per_tool = %per_tool,
        "session closed"
    );
}

/// One tool call from its start: settled once with its outcome, or recorded as cancelled when
/// it is dropped unsettled (its caller gave up).
pub struct CallRecord<'a> {
    sessions: &'a Sessions,
    key: &'a str,
    tool: &'a str,
    started: Instant,
    timeline: Option<(Arc<Timeline>, u64)>,
    trace_id: Option<String>,
    settled: bool,
}

impl CallRecord<'_> {
    /// The trace the call is in, for its log line and its timeline.
    pub fn set_trace_id(&mut self, trace_id: Option<String>) {
        self.trace_id = trace_id;
    }

    /// Records the call's outcome and what the relay reported of it.
    pub fn settle(mut self, outcome: Result<(), &ToolError>, report: Option<&Report>) {
        self.settled = true;
        self.write(outcome, report);
    }

    fn write(&self, outcome: Result<(), &ToolError>, report: Option<&Report>) {
        let code = outcome.map_err(|e| e.code);
        let call_id = report
            .and_then(|r| r.call_id.clone())
            .or_else(|| outcome.err().and_then(|e| e.call_id.clone()));
        let took = self.started.elapsed();
        self.sessions.log_call(
            self.key,
            self.tool,
            took,
            code,
            call_id.as_deref(),
            self.trace_id.as_deref(),
        );
        if let Some((timeline, call)) = &self.timeline {
            timeline.push(What::settled(
                *call,
                self.tool,
                code,
                took,
                call_id,
                self.trace_id.clone(),
                report.and_then(|r| r.timing),
            ));
        }
    }
}

impl Drop for CallRecord<'_> {
    fn drop(&mut self) {
        if !self.settled {
            let cancelled = ToolError::new(Code::Cancelled, "the caller stopped waiting");
            self.write(Err(&cancelled), None);
        }
    }
}

impl Sessions {
    /// The timeline of the session `id` (open, or closed and still kept).
    pub fn timeline(&self, id: &str) -> Option<Arc<Timeline>> {
        self.by_id.get(id).map(|t| t.clone())
    }

    /// Every timeline kept, newest first.
    pub fn timelines(&self) -> Vec<Arc<Timeline>> {
        let mut all: Vec<Arc<Timeline>> = self.by_id.iter().map(|e| e.value().clone()).collect();
        all.sort_by(|a, b| b.opened_ms.cmp(&a.opened_ms).then(a.id.cmp(&b.id)));
        all
    }

    /// How many timelines are kept, and the open sessions by source (for the metrics).
    pub fn counts(&self) -> (usize, Vec<(&'static str, usize)>) {
        let mut by_source: Vec<(&'static str, usize)> = Vec::new();
        for e in self.map.iter() {
            let source = lock(&e.state).source;
            match by_source.iter_mut().find(|(s, _)| *s == source) {
                Some((_, n)) => *n += 1,
                None => by_source.push((source, 1)),
            }
        }
        (self.by_id.len(), by_source)
    }

    /// Records in `key`'s timeline, when it has one.
    pub(super) fn note(&self, key: &str, record: impl FnOnce(&Timeline)) {
        if let Some(timeline) = self.get(key).and_then(|s| s.timeline.clone()) {
            record(&timeline);
        }
    }

    /// The offer an agent was given for `key`: recorded when its revision is new.
    pub fn offered(&self, key: &str, offer: &Offer) {
        self.note(key, |t| t.offer(&offer.revision, offer.tools.len()));
    }

    /// Forgets closed sessions' timelines past their time or beyond the bound.
    pub(super) fn forget_closed(&self, closed: &mut VecDeque<(Instant, String)>) {
        while let Some((at, id)) = closed.front() {
            if closed.len() <= self.timelines.max_closed && at.elapsed() < self.timelines.keep {
                break;
            }
            self.by_id.remove(id);
            closed.pop_front();
        }
    }

    /// Counts a change of mode and records it in the session's timeline.
    pub(super) fn mode_changed(&self, session: &Session, from: String, to: &str) {
        self.client.metrics().mode_transition();
        if let Some(timeline) = &session.timeline {
            timeline.push(What::ModeChanged {
                from,
                to: to.to_owned(),
            });
        }
    }

    /// Starts recording one tool call of `key`'s session (its timeline numbers it).
    pub fn start_call<'a>(&'a self, key: &'a str, tool: &'a str) -> CallRecord<'a> {
        let timeline = self.get(key).and_then(|s| {
            let mode = lock(&s.state).stack.active().to_owned();
            s.timeline.clone().map(|t| {
                let call = t.call_started(tool, mode);
                (t, call)
            })
        });
        CallRecord {
            sessions: self,
            key,
            tool,
            started: Instant::now(),
            timeline,
            trace_id: None,
            settled: false,
        }
    }

    /// Records one tool call in the session log (and the session's figures, if one is open).
    pub fn record(&self, key: &str, tool: &str, took: Duration, outcome: &Result<(), ToolError>) {
        let code = outcome.as_ref().map(|_| ()).map_err(|e| e.code);
        let call_id = outcome.as_ref().err().and_then(|e| e.call_id.as_deref());
        self.log_call(key, tool, took, code, call_id, None);
    }

    /// The log line, the metrics and the session's figures of one call.
    fn log_call(
        &self,
        key: &str,
        tool: &str,
        took: Duration,
        outcome: Result<(), Code>,
        call_id: Option<&str>,
        trace_id: Option<&str>,
    ) {
        let ms = took.as_millis() as u64;
        let mode = self.mode(key);
        let mode = mode.as_deref().unwrap_or("-");
        // Displayed, not quoted: `grep 'tool=CreateDiagram'` finds the line.
        let result = outcome.err().map_or("ok", Code::as_str);
        let (call_id, trace_id) = (
            call_id.map(tracing::field::display),
            trace_id.map(tracing::field::display),
        );
        tracing::info!(key = %Fp(key), tool = %tool, mode = %mode, duration_ms = ms, call_id, trace_id, outcome = %result, "tool call");
        let label = if self.catalog.current().claims(tool) {
            tool
        } else {
            OTHER_TOOL
        };
        self.client.metrics().tool_call(label, outcome, took);
        if let Some(session) = self.get(key) {
            let mut state = lock(&session.state);
            let stats = state.tools.entry(tool.to_owned()).or_default();
            stats.calls += 1;
            stats.failures += u32::from(outcome.is_err());
            stats.total_ms += ms;
            stats.max_ms = stats.max_ms.max(ms);
        }
    }

    /// Every open session, by key fingerprint.
    pub fn snapshot(&self) -> Vec<SessionInfo> {
        let mut all: Vec<SessionInfo> = self
            .map
            .iter()
            .map(|e| {
                let state = lock(&e.state);
                let handles = lock(&e.tab).state.as_ref().and_then(|t| t.handles.clone());
                SessionInfo {
                    id: e.id.clone(),
                    key: fingerprint(e.key()),
                    room: state.room.clone(),
                    identity: state.identity.clone(),
                    source: state.source,
                    mode: state.stack.active().to_owned(),
                    age_ms: e.opened.elapsed().as_millis() as u64,
                    mode_transitions: state.transitions,
                    tools: state.tools.clone(),
                    followers: e.followers(),
                    handles,
                }
            })
            .collect();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all
    }
}
