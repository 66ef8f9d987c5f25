//! Sessions: one per key while its participant is in a room (opened and closed by LiveKit
//! webhooks) or while a voice platform uses it. Each holds its mode stack and the session log's
//! figures: per tool, calls, failures and durations, and publishes its mode on a watch channel
//! (the MCP endpoint announces a changed tool list from it). Keys appear only as fingerprints.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use dashmap::DashMap;
use relay_wire::Fp;
use relay_wire::fingerprint;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::ToolError;
use crate::modes::{ModeSet, ModeStack};

#[derive(Debug, Default, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolStats {
    pub calls: u32,
    pub failures: u32,
    pub total_ms: u64,
    pub max_ms: u64,
}

struct Session {
    room: String,
    identity: String,
    source: &'static str,
    /// Whether calls are held to the current mode's tools (sessions whose pipeline drives
    /// modes); a voice platform that declares its own tools (Vapi) is not.
    enforce_modes: bool,
    opened: Instant,
    state: Mutex<SessionState>,
    /// The current mode, for whoever follows it; dropped with the session, which ends every
    /// follower.
    mode: watch::Sender<String>,
}

struct SessionState {
    stack: ModeStack,
    mode_since: Instant,
    transitions: u32,
    tools: BTreeMap<String, ToolStats>,
}

/// What `GET /sessions` shows of a session.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub key: String,
    pub room: String,
    pub identity: String,
    pub source: &'static str,
    pub mode: String,
    pub age_ms: u64,
    pub mode_transitions: u32,
    pub tools: BTreeMap<String, ToolStats>,
    /// How many followers (MCP sessions) watch this session's mode.
    pub mode_followers: usize,
}

/// The session's lock guards a few counters and is held for an update, never across an await;
/// a poisoned lock still holds consistent counters.
fn lock(m: &Mutex<SessionState>) -> std::sync::MutexGuard<'_, SessionState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a session that ended with its participant leaving is remembered: an agent that goes
/// on calling for that key meanwhile gets `unknown_key` instead of a fresh session.
const ENDED_KEEP: Duration = Duration::from_secs(10 * 60);
/// Most ended sessions remembered at once; older ones are forgotten first.
const MAX_ENDED: usize = 100_000;

pub struct Sessions {
    map: DashMap<String, Session>,
    /// Keys whose participant left (their key was revoked), with when.
    ended: DashMap<String, Instant>,
    modes: ModeSet,
}

impl Sessions {
    pub fn new(modes: ModeSet) -> Self {
        Sessions {
            map: DashMap::new(),
            ended: DashMap::new(),
            modes,
        }
    }

    /// Closes `key`'s session for good: its participant left and its key is revoked, so nothing
    /// reopens it (for [`ENDED_KEEP`]). False when no session was open.
    pub fn end(&self, key: &str, reason: &str) -> bool {
        let closed = self.close(key, reason);
        if self.ended.len() >= MAX_ENDED {
            self.ended.retain(|_, at| at.elapsed() < ENDED_KEEP);
            if self.ended.len() >= MAX_ENDED {
                self.ended.clear();
            }
        }
        self.ended.insert(key.to_owned(), Instant::now());
        closed
    }

    /// True when `key`'s session ended with its participant leaving (recently).
    pub fn has_ended(&self, key: &str) -> bool {
        self.ended
            .get(key)
            .is_some_and(|at| at.elapsed() < ENDED_KEEP)
    }

    pub fn modes(&self) -> &ModeSet {
        &self.modes
    }

    /// Opens a session for `key`; false when one is already open (it is kept as it is).
    pub fn open(
        &self,
        key: &str,
        room: &str,
        identity: &str,
        source: &'static str,
        enforce_modes: bool,
    ) -> bool {
        if self.has_ended(key) {
            return false;
        }
        let mut opened = false;
        let mut adopted = false;
        self.map
            .entry(key.to_owned())
            .and_modify(|s| {
                // A session an agent opened before LiveKit told of the participant learns where
                // it is.
                if s.room.is_empty() && !room.is_empty() {
                    s.room = room.to_owned();
                    s.identity = identity.to_owned();
                    s.source = source;
                    adopted = true;
                }
            })
            .or_insert_with(|| {
                opened = true;
                let now = Instant::now();
                Session {
                    room: room.to_owned(),
                    identity: identity.to_owned(),
                    source,
                    enforce_modes,
                    opened: now,
                    state: Mutex::new(SessionState {
                        stack: self.modes.stack(),
                        mode_since: now,
                        transitions: 0,
                        tools: BTreeMap::new(),
                    }),
                    mode: watch::Sender::new(self.modes.initial().to_owned()),
                }
            });
        if opened {
            tracing::info!(key = %Fp(key), room, identity, source, mode = self.modes.initial(), "session opened");
        } else if adopted {
            tracing::info!(key = %Fp(key), room, identity, source, "session located");
        }
        opened
    }

    /// Closes `key`'s session and logs its summary; false when none was open.
    pub fn close(&self, key: &str, reason: &str) -> bool {
        let Some((_, session)) = self.map.remove(key) else {
            return false;
        };
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
            room = %session.room,
            reason,
            duration_ms = session.opened.elapsed().as_millis() as u64,
            mode_transitions = state.transitions,
            tool_calls = calls,
            tool_failures = failures,
            avg_tool_ms = total_ms.checked_div(u64::from(calls)).unwrap_or(0),
            per_tool = %per_tool,
            "session closed"
        );
        true
    }

    /// Closes every session in `room`; returns their keys.
    pub fn close_room(&self, room: &str, reason: &str) -> Vec<String> {
        let keys: Vec<String> = self
            .map
            .iter()
            .filter(|e| e.room == room)
            .map(|e| e.key().clone())
            .collect();
        for key in &keys {
            self.end(key, reason);
        }
        keys
    }

    /// The keys of the open sessions that came from `source`, with their rooms and identities.
    pub fn from_source(&self, source: &str) -> Vec<(String, String, String)> {
        self.map
            .iter()
            .filter(|e| e.source == source)
            .map(|e| (e.key().clone(), e.room.clone(), e.identity.clone()))
            .collect()
    }

    pub fn is_open(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// The session's current mode, when a session is open for `key`.
    pub fn mode(&self, key: &str) -> Option<String> {
        self.map
            .get(key)
            .map(|s| lock(&s.state).stack.active().to_owned())
    }

    /// A receiver of the session's mode: it sees every mode change, and its `changed()` fails
    /// once the session is closed. `None` when no session is open for `key`.
    pub fn follow_mode(&self, key: &str) -> Option<watch::Receiver<String>> {
        self.map.get(key).map(|s| s.mode.subscribe())
    }

    /// Refuses an unknown tool, and a tool the session's current mode does not offer when the
    /// session enforces modes.
    pub fn check(
        &self,
        key: &str,
        registry: &crate::tools::Registry,
        tool: &str,
    ) -> Result<(), ToolError> {
        match self.map.get(key) {
            Some(s) if s.enforce_modes => lock(&s.state).stack.check(registry, tool),
            _ => registry.get(tool).map(|_| ()).ok_or_else(|| {
                ToolError::new("unknown_tool", format!("there is no tool named {tool}"))
            }),
        }
    }

    /// Moves the session to `mode` (see [`ModeStack::enter`]) and logs the transition.
    pub fn enter_mode(&self, key: &str, mode: &str, save_previous: bool) -> Result<(), String> {
        let session = self.map.get(key).ok_or("no session for this key")?;
        let mut state = lock(&session.state);
        let from = state.stack.active().to_owned();
        state.stack.enter(&self.modes, mode, save_previous)?;
        Self::transitioned(key, &session, &mut state, &from);
        Ok(())
    }

    /// Applies the mode change that the tool `tool` names when the session's mode allows it;
    /// returns the new mode.
    pub fn change_by_tool(&self, key: &str, tool: &str) -> Option<String> {
        let session = self.map.get(key)?;
        let mut state = lock(&session.state);
        let target = state.stack.change_for(&self.modes, tool)?.id.clone();
        let from = state.stack.active().to_owned();
        state.stack.enter(&self.modes, &target, false).ok()?;
        Self::transitioned(key, &session, &mut state, &from);
        Some(target)
    }

    /// Returns the session to its saved mode.
    pub fn exit_mode(&self, key: &str) -> Result<(), String> {
        let session = self.map.get(key).ok_or("no session for this key")?;
        let mut state = lock(&session.state);
        let from = state.stack.active().to_owned();
        state.stack.exit(&self.modes);
        Self::transitioned(key, &session, &mut state, &from);
        Ok(())
    }

    fn transitioned(key: &str, session: &Session, state: &mut SessionState, from: &str) {
        session.mode.send_replace(state.stack.active().to_owned());
        let now = Instant::now();
        tracing::info!(
            key = %Fp(key),
            from,
            to = state.stack.active(),
            in_previous_ms = now.duration_since(state.mode_since).as_millis() as u64,
            "mode changed"
        );
        state.mode_since = now;
        state.transitions += 1;
    }

    /// Records one tool call in the session log (and the session's figures, if one is open).
    pub fn record(&self, key: &str, tool: &str, took: Duration, outcome: &Result<(), ToolError>) {
        let ms = took.as_millis() as u64;
        let mode = self.mode(key);
        match outcome {
            Ok(()) => {
                tracing::info!(key = %Fp(key), tool, mode = mode.as_deref().unwrap_or("-"), duration_ms = ms, outcome = "ok", "tool call")
            }
            Err(e) => {
                tracing::info!(key = %Fp(key), tool, mode = mode.as_deref().unwrap_or("-"), duration_ms = ms, outcome = %e.code, "tool call")
            }
        }
        if let Some(session) = self.map.get(key) {
            let mut state = lock(&session.state);
            let stats = state.tools.entry(tool.to_owned()).or_default();
            stats.calls += 1;
            stats.failures += u32::from(outcome.is_err());
            stats.total_ms += ms;
            stats.max_ms = stats.max_ms.max(ms);
        }
    }

    pub fn snapshot(&self) -> Vec<SessionInfo> {
        let mut all: Vec<SessionInfo> = self
            .map
            .iter()
            .map(|e| {
                let state = lock(&e.state);
                SessionInfo {
                    key: fingerprint(e.key()),
                    room: e.room.clone(),
                    identity: e.identity.clone(),
                    source: e.source,
                    mode: state.stack.active().to_owned(),
                    age_ms: e.opened.elapsed().as_millis() as u64,
                    mode_transitions: state.transitions,
                    tools: state.tools.clone(),
                    mode_followers: e.mode.receiver_count(),
                }
            })
            .collect();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolsets;

    #[test]
    fn lifecycle_modes_and_figures() {
        let sessions = Sessions::new(toolsets::modes());
        let registry = toolsets::registry();
        let key = "va_1111111111111111111111111111111111111111111111111111111111111111";
        assert!(
            sessions.check(key, &registry, "draw_card").is_ok(),
            "no session, no restriction"
        );
        assert_eq!(
            sessions.check(key, &registry, "nope").unwrap_err().code,
            "unknown_tool"
        );
        assert!(sessions.open(key, "room-1", "tab-1", "livekit", true));
        assert!(!sessions.open(key, "room-1", "tab-1", "livekit", true));
        assert_eq!(
            sessions
                .check(key, &registry, "draw_card")
                .unwrap_err()
                .code,
            "tool_not_allowed"
        );
        let mut follower = sessions.follow_mode(key).unwrap();
        assert_eq!(*follower.borrow_and_update(), "default");
        sessions.enter_mode(key, "spread", false).unwrap();
        assert!(follower.has_changed().unwrap());
        assert_eq!(*follower.borrow_and_update(), "spread");
        assert!(sessions.check(key, &registry, "draw_card").is_ok());
        sessions.record(key, "draw_card", Duration::from_millis(30), &Ok(()));
        sessions.record(
            key,
            "draw_card",
            Duration::from_millis(10),
            &Err(ToolError::new("timeout", "late")),
        );
        let snap = sessions.snapshot();
        assert_eq!(snap.len(), 1);
        assert_eq!(snap[0].mode, "spread");
        assert_eq!(snap[0].key, fingerprint(key));
        assert_eq!(snap[0].mode_followers, 1);
        let s = &snap[0].tools["draw_card"];
        assert_eq!((s.calls, s.failures, s.total_ms, s.max_ms), (2, 1, 40, 30));
        assert_eq!(
            sessions.close_room("room-1", "room_finished"),
            vec![key.to_owned()]
        );
        assert!(!sessions.is_open(key));
        assert!(
            follower.has_changed().is_err(),
            "closing the session ends its followers"
        );
        assert!(sessions.follow_mode(key).is_none());
        assert!(!sessions.close(key, "again"));
    }
}
