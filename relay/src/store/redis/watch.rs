//! Waiting on a key's published changes, a call's in-flight slot, and a node's place in a key's
//! watch (what makes the key's changes reach this node at all).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

/// A call's slot in the key's watch (`c:<call id>`, taken by the script that admitted it):
/// it counts among the key's calls in flight and its session's, and makes the key's changes
/// reach this node. Given back on drop, in the background and late, with other work
/// ([`super::releases`]), unless the node holding the tab gave it back already with the
/// call's outcome ([`Slot::given_back`]).
pub struct Slot {
    cluster: Arc<Cluster>,
    watch: String,
    call_id: String,
    given_back: AtomicBool,
}

impl Slot {
    pub(super) fn new(cluster: Arc<Cluster>, watch: String, call_id: &str) -> Self {
        Slot {
            cluster,
            watch,
            call_id: call_id.to_owned(),
            given_back: AtomicBool::new(false),
        }
    }

    /// The holding node gave the slot back with the call's outcome: nothing to do on drop.
    pub fn given_back(&self) {
        self.given_back.store(true, Ordering::Release);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.given_back.load(Ordering::Acquire) {
            return;
        }
        self.cluster.give_back(
            std::mem::take(&mut self.watch),
            std::mem::take(&mut self.call_id),
        );
    }
}

/// This node waits for a key's changes outside a call (a key-status long-poll): its count in the
/// key's watch, taken back on drop.
pub struct Interest {
    cluster: Arc<Cluster>,
    watch: String,
}

impl Drop for Interest {
    fn drop(&mut self) {
        let (cluster, watch) = (self.cluster.clone(), std::mem::take(&mut self.watch));
        tokio::spawn(async move {
            let _ = cluster.interested(&watch, false).await;
        });
    }
}

impl Cluster {
    /// Joins the key's watch for a wait outside a call (see [`Interest`]): from when this
    /// returns, the key's changes reach this node.
    pub async fn interest(self: &Arc<Self>, rid: &str) -> Result<Interest, StoreError> {
        let watch = self.watch_name(rid);
        self.interested(&watch, true).await?;
        Ok(Interest {
            cluster: self.clone(),
            watch,
        })
    }

    async fn interested(&self, watch: &str, join: bool) -> Result<(), StoreError> {
        let mut inv = self.scripts.interest.key(watch);
        inv.arg(&self.node)
            .arg(if join { "1" } else { "-1" })
            .arg(super::ms(self.settings.inflight_ttl));
        self.op(inv.invoke_async::<i64>(&mut self.conn_for(Lane::Calls)))
            .await
            .map(drop)
    }

    /// The outcome of a call another node sent this node (see [`super::scripts::REPLY_LUA`]):
    /// sent to `caller` (on a Redis Cluster on its sharded channel on the key's server,
    /// [`super::shards`]), the call's slot in the key's watch given back first when `give_back`
    /// names the call.
    pub async fn reply(
        &self,
        rid: &str,
        caller: &str,
        give_back: Option<&str>,
        message: Vec<u8>,
    ) -> Result<(), StoreError> {
        let watch = self.watch_name(rid);
        let mut inv = self.scripts.reply.key(&watch);
        inv.arg(caller)
            .arg(give_back.unwrap_or(""))
            .arg(message)
            .arg(&*self.shards.tag_of(&watch));
        self.op(inv.invoke_async::<i64>(&mut self.conn_for(Lane::Calls)))
            .await
            .map(drop)
    }
}
