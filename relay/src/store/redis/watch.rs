//! Waiting on a key's published changes, and a call's in-flight slot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use super::{Cluster, Lane};

impl Cluster {
    /// Registers interest in a key's changes (see [`Watch`]).
    pub fn watch(&self, rid: &str) -> Watch<'_> {
        let events = self.waiters.entry(rid.to_owned()).or_default().clone();
        Watch {
            cluster: self,
            rid: rid.to_owned(),
            events,
        }
    }
}

/// The changes published for one key that calls of this node wait on: a counter of changes
/// seen, and a wake-up for its waiters.
#[derive(Default)]
pub struct KeyEvents {
    seen: AtomicU64,
    notify: Notify,
}

impl KeyEvents {
    pub(super) fn changed(&self) {
        self.seen.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }
}

/// Interest in one key's changes; dropped when the call stops waiting.
pub struct Watch<'a> {
    cluster: &'a Cluster,
    rid: String,
    events: Arc<KeyEvents>,
}

impl Watch<'_> {
    /// A mark of the changes seen so far: read it before reading the key, then wait with
    /// [`Watch::changed_since`], and no change between the read and the wait is missed.
    pub fn mark(&self) -> u64 {
        self.events.seen.load(Ordering::Acquire)
    }

    /// Resolves once the key changed after `mark` was taken.
    pub async fn changed_since(&self, mark: u64) {
        loop {
            let notified = self.events.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.mark() != mark {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        // The map holds one reference and this watch another: when no one else waits, remove.
        self.cluster
            .waiters
            .remove_if(&self.rid, |_, n| Arc::strong_count(n) <= 2);
    }
}

/// One in-flight slot of a key; given back on drop.
pub struct Slot {
    pub(super) cluster: Arc<Cluster>,
    /// The key's and the session's in-flight counters (one hash slot on a cluster).
    pub(super) counters: [String; 2],
}

impl Drop for Slot {
    fn drop(&mut self) {
        let cluster = self.cluster.clone();
        let [key, session] = std::mem::take(&mut self.counters);
        tokio::spawn(async move {
            let mut pipe = redis::pipe();
            pipe.decr(key, 1).ignore().decr(session, 1).ignore();
            let _ = cluster
                .op(pipe.query_async::<()>(&mut cluster.conn_for(Lane::Calls)))
                .await;
        });
    }
}
