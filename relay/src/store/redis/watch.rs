//! Waiting on a key's published changes, a call's in-flight slot, and a node's place in a key's
//! watch (what makes the key's changes reach this node at all).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use super::{Cluster, Lane, StoreError};

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

/// One in-flight slot of a key, with this node's place in the key's watch (taken together by
/// the script that admitted the call); both given back on drop, in one round trip.
pub struct Slot {
    pub(super) cluster: Arc<Cluster>,
    pub(super) watch: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let watch = std::mem::take(&mut self.watch);
        finish(self.cluster.clone(), watch, true);
    }
}

/// This node waits for a key's changes outside a call (a key-status long-poll): its place in
/// the key's watch, left on drop.
pub struct Interest {
    cluster: Arc<Cluster>,
    watch: String,
}

impl Drop for Interest {
    fn drop(&mut self) {
        let watch = std::mem::take(&mut self.watch);
        finish(self.cluster.clone(), watch, false);
    }
}

/// Leaves the key's watch (and gives the call's slot back when `call`), in the background.
fn finish(cluster: Arc<Cluster>, watch: String, call: bool) {
    tokio::spawn(async move {
        let mut inv = cluster.scripts.finish.key(watch);
        inv.arg(&cluster.node).arg(if call { "1" } else { "0" });
        let _ = cluster
            .op(inv.invoke_async::<i64>(&mut cluster.conn_for(Lane::Calls)))
            .await;
    });
}

impl Cluster {
    /// Joins the key's watch for a wait outside a call (see [`Interest`]): from when this
    /// returns, the key's changes reach this node.
    pub async fn interest(self: &Arc<Self>, rid: &str) -> Result<Interest, StoreError> {
        let watch = self.watch_name(rid);
        let mut inv = self.scripts.interest.key(&watch);
        inv.arg(&self.node)
            .arg(super::ms(self.settings.inflight_ttl));
        self.op(inv.invoke_async::<i64>(&mut self.conn_for(Lane::Calls)))
            .await?;
        Ok(Interest {
            cluster: self.clone(),
            watch,
        })
    }
}
