//! A running call's hold on its key: the in-flight slot it took, where the key's tab is, and
//! waiting for the key to change. [`KeyStore::track`](super::KeyStore::track) opens one; the call
//! path (`calls.rs`) asks it, never which store made it.
//!
//! In memory the tab's binding is read directly and a wait parks on the key's own wake-up. On
//! Redis a round trip tells where the tab is (this node, another node, or none yet), and a wait
//! ends on the key's published change or after [`RECHECK`].

use std::sync::Arc;

use tokio::time::Instant;

use super::keys::SessionSlot;
use super::keys::{Binding, InflightGuard, KeyShared, Keys, WaitError};
use super::redis::{Admitted, Cluster, Place, Slot, StoreError, Watch};

/// Waiting calls re-read their key at least this often on Redis, whatever the events say.
pub use super::redis::RECHECK;

/// What a call brings to its admission ([`KeyStore::track`](super::KeyStore::track)).
pub struct Ticket<'a> {
    pub call_id: &'a str,
    /// How long the call may run at most (on Redis its slot is not held past it).
    pub life: std::time::Duration,
    /// On Redis: makes the message that sends the call to the node holding the tab, asked for
    /// when this node guesses another node holds it (the admission then sends it too).
    pub offer: Option<&'a (dyn Fn() -> Vec<u8> + Sync)>,
}

impl<'a> Ticket<'a> {
    /// A call that sends nothing with its admission, over within `life`.
    pub fn plain(call_id: &'a str, life: std::time::Duration) -> Self {
        Ticket {
            call_id,
            life,
            offer: None,
        }
    }
}

/// Why a call could not take a slot of its key.
#[derive(Debug)]
pub enum TrackError {
    /// Never issued, removed or revoked.
    Unknown,
    /// The key's in-flight calls are at the limit.
    TooMany,
    /// The session's own calls in flight are at its limit.
    SessionBusy,
    /// The session's call rate is spent.
    RateLimited,
    /// The session was ended.
    Ended,
    Store(StoreError),
}

impl From<StoreError> for TrackError {
    fn from(e: StoreError) -> Self {
        TrackError::Store(e)
    }
}

/// Why no tab was found for the key.
#[derive(Debug)]
pub enum LocateError {
    /// The key is unknown, or was revoked or removed while waiting.
    Unknown,
    /// No tab came back before the deadline.
    Offline,
    Store(StoreError),
}

impl From<StoreError> for LocateError {
    fn from(e: StoreError) -> Self {
        LocateError::Store(e)
    }
}

/// The socket on another node that holds the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub node: String,
    pub sid: String,
}

/// Where the key's tab is now.
pub enum Located {
    /// A socket of this node.
    Here(Binding),
    /// A socket of another node, reached through the adapter.
    Elsewhere(Target),
    /// The store names a socket of this node that this node does not hold (its release was
    /// lost, or the local record lags a moment behind a bind in progress).
    Stale(String),
}

/// A call's hold on its key, released (slot given back, watch dropped) on drop.
/// What [`Track::since`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    No,
    Between,
    Elsewhere,
}

pub enum Track<'a> {
    Memory(MemoryTrack<'a>),
    Redis(Box<RedisTrack<'a>>),
}

pub struct MemoryTrack<'a> {
    keys: &'a Keys,
    key: &'a str,
    slot: InflightGuard,
    _session: SessionSlot,
}

impl<'a> MemoryTrack<'a> {
    pub(super) fn new(
        keys: &'a Keys,
        key: &'a str,
        slot: InflightGuard,
        session: SessionSlot,
    ) -> Self {
        MemoryTrack {
            keys,
            key,
            slot,
            _session: session,
        }
    }
}

pub struct RedisTrack<'a> {
    cluster: &'a Cluster,
    local: &'a Keys,
    key: &'a str,
    rid: String,
    watch: Watch<'a>,
    /// The changes seen when this round of looking began.
    mark: u64,
    /// The first round uses what the slot's script read, and the mark taken before it.
    first: bool,
    known: Option<Place>,
    /// How many received the call the admission sent to the node it named (not yet used).
    sent: Option<i64>,
    shared: Arc<KeyShared>,
    slot: Slot,
}

impl<'a> RedisTrack<'a> {
    pub(super) fn new(
        cluster: &'a Cluster,
        local: &'a Keys,
        key: &'a str,
        rid: String,
        watch: Watch<'a>,
        mark: u64,
        admitted: Admitted,
    ) -> Self {
        let Admitted { slot, place, sent } = admitted;
        RedisTrack {
            cluster,
            local,
            key,
            rid,
            watch,
            mark,
            first: true,
            known: Some(place),
            sent,
            shared: Arc::default(),
            slot,
        }
    }

    async fn locate(&mut self, deadline: Instant) -> Result<Located, LocateError> {
        loop {
            if !std::mem::take(&mut self.first) {
                // Marked before the read, so no change between the read and a wait is missed.
                self.mark = self.watch.mark();
            }
            let place = match self.known.take() {
                Some(place) => place,
                None => self.cluster.lookup(&self.rid).await?,
            };
            match place {
                Place::Unknown => return Err(LocateError::Unknown),
                Place::Waiting => {
                    if Instant::now() >= deadline {
                        return Err(LocateError::Offline);
                    }
                    let wake = deadline.min(Instant::now() + RECHECK);
                    let changed = self.watch.changed_since(self.mark);
                    let _ = tokio::time::timeout_at(wake, changed).await;
                }
                Place::Online { node, sid } if node == self.cluster.node() => {
                    return Ok(match self.local.local_binding(self.key) {
                        Some((binding, shared)) if binding.sid().to_string() == sid => {
                            self.shared = shared;
                            Located::Here(binding)
                        }
                        _ => Located::Stale(sid),
                    });
                }
                Place::Online { node, sid } => {
                    return Ok(Located::Elsewhere(Target { node, sid }));
                }
            }
        }
    }
}

impl Track<'_> {
    /// Where the key's tab is, waiting within the deadline while none holds it.
    pub async fn locate(&mut self, deadline: Instant) -> Result<Located, LocateError> {
        match self {
            Track::Memory(t) => match t.keys.wait_online(t.key, deadline).await {
                Ok(binding) => Ok(Located::Here(binding)),
                Err(WaitError::Unknown) => Err(LocateError::Unknown),
                Err(WaitError::Offline) => Err(LocateError::Offline),
            },
            // Boxed: the Redis round's state must not grow every single-node call's future.
            Track::Redis(t) => Box::pin(t.locate(deadline)).await,
        }
    }

    /// The per-key record of this node that the tab [`Located::Here`] belongs to (its awaited
    /// calls are listed there, to be told `cancel` when the tab is replaced or revoked).
    pub fn shared(&self) -> &KeyShared {
        match self {
            Track::Memory(t) => t.slot.shared(),
            Track::Redis(t) => &t.shared,
        }
    }

    /// A mark of the key's changes so far (see [`Track::changed_since`]).
    pub fn mark(&self) -> u64 {
        match self {
            Track::Memory(_) => 0,
            Track::Redis(t) => t.watch.mark(),
        }
    }

    /// Resolves once the key changed after `mark`. In memory a call never waits this way (it
    /// waits on its binding), so this never resolves there.
    pub async fn changed_since(&self, mark: u64) {
        match self {
            Track::Memory(_) => std::future::pending().await,
            Track::Redis(t) => t.watch.changed_since(mark).await,
        }
    }

    /// The mark this round of [`Track::locate`] took before reading where the tab is.
    pub fn round_mark(&self) -> u64 {
        match self {
            Track::Memory(_) => 0,
            Track::Redis(t) => t.mark,
        }
    }

    /// Resolves once the key changed since this round of [`Track::locate`] began.
    pub async fn changed(&self) {
        match self {
            Track::Memory(_) => std::future::pending().await,
            Track::Redis(t) => t.watch.changed_since(t.mark).await,
        }
    }

    /// Where the key is against `target`: still there, between sockets (offline, or its node
    /// late with its heartbeat), or somewhere else (another socket, or gone).
    pub async fn since(&self, target: &Target) -> Result<Moved, StoreError> {
        match self {
            Track::Memory(_) => Ok(Moved::Elsewhere),
            Track::Redis(t) => Ok(match t.cluster.lookup(&t.rid).await? {
                Place::Online { node, sid } if node == target.node && sid == target.sid => {
                    Moved::No
                }
                Place::Waiting => Moved::Between,
                _ => Moved::Elsewhere,
            }),
        }
    }

    /// The store named socket `sid` of this node and this node has no such socket: the key
    /// goes offline for the grace (see [`Located::Stale`]).
    pub async fn release_stale(&self, sid: &str) -> Result<(), StoreError> {
        match self {
            Track::Memory(_) => Ok(()),
            // Boxed, like every Redis round trip on the call path.
            Track::Redis(t) => Box::pin(t.cluster.release(&t.rid, sid)).await,
        }
    }

    /// When the admission also sent the call to the node it found the tab on (the first
    /// [`Located::Elsewhere`]): how many received it. Asked once; `None` afterwards and in
    /// memory.
    pub fn take_sent(&mut self) -> Option<i64> {
        match self {
            Track::Memory(_) => None,
            Track::Redis(t) => t.sent.take(),
        }
    }

    /// The node holding the tab gave the call's slot back with its outcome: not again on drop.
    pub fn given_back(&self) {
        if let Track::Redis(t) = self {
            t.slot.given_back();
        }
    }

    /// Whether a call whose tab left once its deadline passed ends at once. In memory the next
    /// [`Track::locate`] answers at once past the deadline; on Redis a round trip is spared.
    pub fn ends_at_deadline(&self) -> bool {
        matches!(self, Track::Redis(_))
    }
}
