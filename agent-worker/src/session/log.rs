//! The session log: each tool call (tool, mode, duration, outcome) as a line, per-tool figures
//! kept in the session, a summary when it closes, and the view `GET /sessions` shows.

use std::collections::BTreeMap;
use std::time::Duration;

use relay_wire::{Fp, fingerprint};
use serde::Serialize;

use super::{Session, Sessions, lock};
use crate::error::ToolError;

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

impl Sessions {
    /// Records one tool call in the session log (and the session's figures, if one is open).
    pub fn record(&self, key: &str, tool: &str, took: Duration, outcome: &Result<(), ToolError>) {
        let ms = took.as_millis() as u64;
        let mode = self.mode(key);
        let mode = mode.as_deref().unwrap_or("-");
        // Displayed, not quoted: `grep 'tool=CreateDiagram'` finds the line.
        let result = match outcome {
            Ok(()) => "ok",
            Err(e) => e.code.as_str(),
        };
        tracing::info!(key = %Fp(key), tool = %tool, mode = %mode, duration_ms = ms, outcome = %result, "tool call");
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
