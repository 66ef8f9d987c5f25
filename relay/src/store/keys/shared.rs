//! What a key's calls share while they run: the in-flight count, the awaited calls to cancel
//! when the tab goes, and the counts of the agent sessions calling it; and the guards that
//! give a call's place back when it ends.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::store::sessions::{Refused, SessionLimits, SessionUses};

/// Per-key data shared with the calls in flight for that key.
#[derive(Default)]
pub struct KeyShared {
    pub(super) changed: Notify,
    pub(super) inflight: AtomicUsize,
    /// Awaited calls delivered and not yet answered; told `cancel` when their tab is replaced or
    /// revoked.
    pub(super) pending: Mutex<Vec<Arc<str>>>,
    /// The agent sessions calling this key lately ([`SessionUses`]).
    sessions: Mutex<SessionUses>,
}

impl KeyShared {
    pub fn add_pending(&self, call_id: &Arc<str>) {
        lock(&self.pending).push(call_id.clone());
    }

    pub fn remove_pending(&self, call_id: &str) {
        lock(&self.pending).retain(|c| &**c != call_id);
    }

    pub(super) fn take_pending(&self) -> Vec<Arc<str>> {
        std::mem::take(&mut *lock(&self.pending))
    }

    /// The key's session counts, locked for one count or one release.
    pub fn sessions(&self) -> std::sync::MutexGuard<'_, SessionUses> {
        lock(&self.sessions)
    }
}

/// The pending list's lock is held for a push or a scan, never across an await; a panic while
/// holding it cannot leave the `Vec` inconsistent, so a poisoned lock is simply reused.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Holds one of the key's in-flight slots; released on drop.
pub struct InflightGuard {
    pub(super) shared: Arc<KeyShared>,
}

impl InflightGuard {
    pub fn shared(&self) -> &Arc<KeyShared> {
        &self.shared
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.shared.inflight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A call's hold on its session's count; given back on drop.
pub struct SessionSlot {
    shared: Arc<KeyShared>,
    tag: u64,
}

impl SessionSlot {
    /// Counts a call of session `tag` against `shared`'s key.
    pub fn take(
        shared: &Arc<KeyShared>,
        tag: u64,
        limits: SessionLimits,
        now: u64,
    ) -> Result<SessionSlot, Refused> {
        shared.sessions().admit(tag, limits, now)?;
        Ok(SessionSlot {
            shared: shared.clone(),
            tag,
        })
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        self.shared.sessions().leave(self.tag);
    }
}
