//! Sessions: one per key while its participant is in a room (opened and closed by LiveKit
//! webhooks), while a voice platform uses it, or once an agent asks for it. Each holds where it
//! is among the catalog's modes, what the relay last said of its tab, the session log's figures,
//! and a counter of changes that followers (MCP sessions, agents waiting for a new offer) watch.
//! Keys appear in logs only as fingerprints.

mod log;
pub mod modes;
pub mod offer;
pub mod page;
mod tab;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use relay_wire::Fp;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::catalog::{self, Catalog};
use crate::client::RelayClient;

pub use log::{SessionInfo, ToolStats};
pub use modes::ModeStack;
pub use offer::{Offer, OfferedTool};
pub use tab::TabView;

/// One session.
pub(crate) struct Session {
    key: String,
    /// Whether calls are held to the current mode's tools (sessions whose pipeline drives
    /// modes); a voice platform that declares its own tools (Vapi) is not.
    enforce_modes: bool,
    opened: Instant,
    state: Mutex<SessionState>,
    /// Counts the changes of what the session's agent is offered (its mode, its tab, the
    /// catalog); taken away when the session closes, which ends every follower (tasks that
    /// still hold the session cannot keep them waiting).
    changes: Mutex<Option<watch::Sender<u64>>>,
    tab: Mutex<tab::TabCache>,
    /// True while a task keeps `tab` current by waiting on the relay.
    watching: AtomicBool,
    /// Fired when the session closes.
    closed: CancellationToken,
    /// The mode the relay was last told, behind the lock that orders the telling.
    told_mode: tokio::sync::Mutex<Option<String>>,
}

struct SessionState {
    room: String,
    identity: String,
    source: &'static str,
    stack: ModeStack,
    mode_since: Instant,
    transitions: u32,
    tools: std::collections::BTreeMap<String, ToolStats>,
}

/// The session's lock guards a few fields and is held for an update, never across an await; a
/// poisoned lock still holds consistent fields.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Session {
    fn bump(&self) {
        if let Some(changes) = lock(&self.changes).as_ref() {
            changes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    fn subscribe(&self) -> Option<watch::Receiver<u64>> {
        lock(&self.changes).as_ref().map(watch::Sender::subscribe)
    }

    /// How many follow the session (0 once it closed).
    fn followers(&self) -> usize {
        lock(&self.changes)
            .as_ref()
            .map_or(0, watch::Sender::receiver_count)
    }

    fn stack(&self) -> ModeStack {
        lock(&self.state).stack.clone()
    }
}

/// How long the relay is told a session's mode again while it does not know the key (its tab
/// binds again after the relay restarted), and how often.
const TELL_RETRY: Duration = Duration::from_secs(30);
const TELL_AGAIN: Duration = Duration::from_millis(500);

/// How long a session that ended with its participant leaving is remembered: an agent that goes
/// on calling for that key meanwhile gets `unknown_key` instead of a fresh session.
const ENDED_KEEP: Duration = Duration::from_secs(10 * 60);
/// Most ended sessions remembered at once; older ones are forgotten first.
const MAX_ENDED: usize = 100_000;

pub struct Sessions {
    map: DashMap<String, Arc<Session>>,
    /// The open sessions' keys by their digest (how a session token names a key).
    digests: DashMap<String, String>,
    /// Keys whose participant left (their key was revoked), with when.
    ended: DashMap<String, Instant>,
    catalog: catalog::Shared,
    client: RelayClient,
    page_tools: bool,
}

impl Sessions {
    /// Sessions over `catalog`'s modes; the relay is asked about tabs and told modes through
    /// `client`; `page_tools` allows the tools pages define.
    pub fn new(catalog: catalog::Shared, client: RelayClient, page_tools: bool) -> Self {
        Sessions {
            map: DashMap::new(),
            digests: DashMap::new(),
            ended: DashMap::new(),
            catalog,
            client,
            page_tools,
        }
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.current()
    }

    /// Whether the tools a page defines are offered.
    pub fn page_tools(&self) -> bool {
        self.page_tools
    }

    pub(crate) fn get(&self, key: &str) -> Option<Arc<Session>> {
        self.map.get(key).map(|s| s.clone())
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
        let catalog = self.catalog.current();
        let mut opened = None;
        let mut adopted = false;
        self.map
            .entry(key.to_owned())
            .and_modify(|s| {
                // A session an agent opened before LiveKit told of the participant learns where
                // it is.
                let mut state = lock(&s.state);
                if state.room.is_empty() && !room.is_empty() {
                    state.room = room.to_owned();
                    state.identity = identity.to_owned();
                    state.source = source;
                    adopted = true;
                }
            })
            .or_insert_with(|| {
                let now = Instant::now();
                let session = Arc::new(Session {
                    key: key.to_owned(),
                    enforce_modes,
                    opened: now,
                    state: Mutex::new(SessionState {
                        room: room.to_owned(),
                        identity: identity.to_owned(),
                        source,
                        stack: ModeStack::new(&catalog),
                        mode_since: now,
                        transitions: 0,
                        tools: Default::default(),
                    }),
                    changes: Mutex::new(Some(watch::Sender::new(0))),
                    tab: Mutex::new(tab::TabCache::default()),
                    watching: AtomicBool::new(false),
                    closed: CancellationToken::new(),
                    told_mode: tokio::sync::Mutex::new(None),
                });
                opened = Some(session.clone());
                session
            });
        if let Some(session) = &opened {
            self.digests
                .insert(relay_wire::session::key_digest(key), key.to_owned());
            tracing::info!(key = %Fp(key), room, identity, source, mode = catalog.initial_mode(), "session opened");
            self.tell_mode(session);
        } else if adopted {
            tracing::info!(key = %Fp(key), room, identity, source, "session located");
        }
        opened.is_some()
    }

    /// Closes `key`'s session and logs its summary; false when none was open.
    pub fn close(&self, key: &str, reason: &str) -> bool {
        let Some((_, session)) = self.map.remove(key) else {
            return false;
        };
        self.digests.remove(&relay_wire::session::key_digest(key));
        session.closed.cancel();
        lock(&session.changes).take();
        log::closed(key, &session, reason);
        true
    }

    /// Closes every session in `room`; returns their keys.
    pub fn close_room(&self, room: &str, reason: &str) -> Vec<String> {
        let keys: Vec<String> = self
            .map
            .iter()
            .filter(|e| lock(&e.state).room == room)
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
            .filter_map(|e| {
                let state = lock(&e.state);
                (state.source == source)
                    .then(|| (e.key().clone(), state.room.clone(), state.identity.clone()))
            })
            .collect()
    }

    /// Where the open session of `key` came from (`livekit`, `vapi`, `agent`, …).
    pub fn source(&self, key: &str) -> Option<&'static str> {
        self.get(key).map(|s| lock(&s.state).source)
    }

    /// The key of the open session whose key has `digest` (a session token names its key so).
    pub fn key_of_digest(&self, digest: &str) -> Option<String> {
        self.digests.get(digest).map(|k| k.clone())
    }

    pub fn is_open(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// The session's current mode, when a session is open for `key`.
    pub fn mode(&self, key: &str) -> Option<String> {
        self.get(key)
            .map(|s| lock(&s.state).stack.active().to_owned())
    }

    /// The session's place among the modes, when one is open.
    pub fn stack(&self, key: &str) -> Option<ModeStack> {
        self.get(key).map(|s| s.stack())
    }

    /// True when `key`'s session holds calls to its mode's tools.
    pub fn enforces_modes(&self, key: &str) -> bool {
        self.get(key).is_some_and(|s| s.enforce_modes)
    }

    /// A receiver of the session's changes (its mode, what its tab handles, the catalog): each
    /// change bumps it, and its `changed()` fails once the session is closed. While anyone
    /// follows, the relay is watched for the tab's changes. `None` when no session is open.
    pub fn follow(&self, key: &str) -> Option<watch::Receiver<u64>> {
        let session = self.get(key)?;
        let receiver = session.subscribe()?;
        tab::watch(&session, &self.client, self.page_tools);
        Some(receiver)
    }

    /// Moves the session to `mode` (a nested mode keeps the one it came from, see
    /// [`ModeStack::enter`]) and logs the transition. For pipelines that drive modes
    /// themselves; agents move with the `enter_<mode>` tools.
    pub fn enter_mode(&self, key: &str, mode: &str) -> Result<(), String> {
        let session = self.get(key).ok_or("no session for this key")?;
        let catalog = self.catalog.current();
        let nested = catalog
            .mode(mode)
            .ok_or_else(|| format!("unknown mode {mode}"))?
            .nested;
        self.transition(&session, |stack| {
            stack.enter(mode.to_owned(), nested);
            true
        });
        Ok(())
    }

    /// Returns the session to the mode saved when it entered a nested one (or to the initial
    /// mode when none was saved).
    pub fn exit_mode(&self, key: &str) -> Result<(), String> {
        let session = self.get(key).ok_or("no session for this key")?;
        let initial = self.catalog.current().initial_mode().to_owned();
        self.transition(&session, |stack| {
            let back = stack.previous().unwrap_or(&initial).to_owned();
            stack.enter(back, false);
            true
        });
        Ok(())
    }

    /// Applies the mode move `tool` names when the session's mode offers it; the new mode.
    pub fn change_by_tool(&self, key: &str, tool: &str) -> Option<String> {
        let session = self.get(key)?;
        let catalog = self.catalog.current();
        let mut moved = None;
        self.transition(&session, |stack| {
            moved = stack.apply(&catalog, tool);
            moved.is_some()
        });
        moved
    }

    /// Runs `change` on the session's stack; when it reports a change, logs the transition,
    /// tells followers and the relay.
    fn transition(&self, session: &Arc<Session>, change: impl FnOnce(&mut ModeStack) -> bool) {
        {
            let mut state = lock(&session.state);
            let from = state.stack.active().to_owned();
            if !change(&mut state.stack) {
                return;
            }
            let now = Instant::now();
            tracing::info!(
                key = %Fp(&session.key),
                from,
                to = state.stack.active(),
                in_previous_ms = now.duration_since(state.mode_since).as_millis() as u64,
                "mode changed"
            );
            state.mode_since = now;
            state.transitions += 1;
        }
        session.bump();
        self.tell_mode(session);
    }

    /// The catalog was replaced: sessions in a mode it no longer has go to its initial mode,
    /// and every follower hears of the change.
    pub fn catalog_replaced(&self) {
        let catalog = self.catalog.current();
        let sessions: Vec<Arc<Session>> = self.map.iter().map(|e| e.value().clone()).collect();
        for session in sessions {
            let moved = {
                let mut state = lock(&session.state);
                let from = state.stack.active().to_owned();
                let moved = state.stack.fit(&catalog);
                if moved {
                    tracing::info!(key = %Fp(&session.key), from, to = state.stack.active(), "mode changed: the reloaded catalog has no such mode");
                }
                moved
            };
            session.bump();
            if moved {
                self.tell_mode(&session);
            }
        }
    }

    /// Tells the relay the session's current mode (the tab shows it), in order, once per
    /// change; a failure is logged and the next change tries again.
    fn tell_mode(&self, session: &Arc<Session>) {
        if !session.enforce_modes {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(tell(session.clone(), self.client.clone()));
    }

    /// Tells the relay `key`'s mode now, if it was not told yet, and returns once it is (or
    /// could not be): for a script that must not end before its tab shows where it got to.
    pub async fn mode_told(&self, key: &str) {
        if let Some(session) = self.get(key).filter(|s| s.enforce_modes) {
            tell(session, self.client.clone()).await;
        }
    }
}

/// Whether telling the mode may work a moment later: the relay does not know the key yet (its
/// tab has not bound since the relay started), or the relay cannot be reached or is draining.
fn not_yet(e: &crate::error::ToolError) -> bool {
    use relay_wire::ErrorCode;
    e.is(ErrorCode::UnknownKey)
        || e.is(ErrorCode::ShuttingDown)
        || e.is(ErrorCode::Unavailable)
        || e.code == crate::error::Code::RelayUnreachable
}

/// Tells the relay the session's current mode unless it was told already. A relay that
/// restarted knows the key again only once its tab binds anew (within seconds), and may itself
/// come up after the worker: until then (unknown_key, unreachable) the mode is told again, for
/// [`TELL_RETRY`].
async fn tell(session: Arc<Session>, client: RelayClient) {
    let mut told = session.told_mode.lock().await;
    let until = Instant::now() + TELL_RETRY;
    loop {
        let mode = session.stack().active().to_owned();
        if told.as_deref() == Some(mode.as_str()) || session.closed.is_cancelled() {
            return;
        }
        match client.set_mode(&session.key, &mode).await {
            Ok(notified) => {
                tracing::debug!(key = %Fp(&session.key), mode, tab_notified = notified, "mode told to the relay");
                *told = Some(mode);
                return;
            }
            Err(e) if not_yet(&e) && Instant::now() < until => {
                tracing::debug!(key = %Fp(&session.key), cause = %e, "mode not told yet");
                tokio::select! {
                    _ = session.closed.cancelled() => return,
                    _ = tokio::time::sleep(TELL_AGAIN) => {}
                }
            }
            Err(e) if not_yet(&e) => {
                tracing::info!(key = %Fp(&session.key), mode, cause = %e, "mode not told within {} s", TELL_RETRY.as_secs());
                return;
            }
            Err(e) => {
                tracing::warn!(key = %Fp(&session.key), cause = %e, "mode not told to the relay");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
