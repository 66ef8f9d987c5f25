//! Slots given back late, on one Redis server (and behind sentinels): a call's slot in its key's
//! watch is not given back in a round trip of its own when the call ends. It waits, at most
//! [`FOLD_WITHIN`], for this node's next admission, whose script gives it back before counting
//! ([`forms::ACQUIRE`](super::forms)); when no admission comes in that time, the slots still
//! waiting are given back together, in one script. So under a steady flow of calls a call costs
//! one round trip (its admission), not two.
//!
//! A slot waits only while this node admits calls at least as often as [`FOLD_WITHIN`] (its last
//! two admissions that close, the last one that recent); at a lower rate it is given back at
//! once, as a wait would cost a wake-up of its own.
//!
//! A slot given back late counts a little longer among its key's calls in flight and its
//! session's. This node's own admissions never see that (they give its waiting slots back
//! first); another node's may, and be refused as busy for a call that had already ended. So an
//! admission refused as busy is asked again once, after [`retry_busy_after`], by when every
//! node's late slots are given back ([`Cluster::acquire`](super::Cluster::acquire)); a call that
//! is still refused then is refused. A refused admission does not count against its session's
//! call rate, so asking again costs none.
//!
//! On a Redis Cluster a script touches one hash slot, and the slots waiting are mostly other
//! keys': there each slot is given back at once, in its own round trip.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use super::{Cluster, Lane};

/// How long an ended call's slot waits for this node's next admission, in the relay. Slots
/// are given back by one task that, while slots wait, sleeps this long at a time: each of its
/// wake-ups costs about what a round trip does, so it must come rarely against the calls (at
/// 2 ms it woke every few calls of a steady flow and cost more than the round trips it saved).
pub const FOLD_WITHIN: Duration = Duration::from_millis(20);

/// How long an admission refused as busy waits before asking once more, when slots wait up to
/// `fold_within`: every node's late slots are given back by then (their wait, and the round trip
/// that gives them back, with room for a busy server).
pub fn retry_busy_after(fold_within: Duration) -> Duration {
    fold_within * 2 + Duration::from_millis(6)
}

/// At most this many waiting slots are given back by one admission.
pub const FOLD_MAX: usize = 16;
/// At most this many slots wait at once; past it they are given back without waiting.
const WAITING_MAX: usize = 1024;
/// At most this many slots are given back by one script of their own.
const BATCH: usize = 256;

/// The slots given back late (see the module's text): the key's watch and the call's id; and
/// how often this node admits calls, to give slots back late only when another admission is
/// likely to come first.
pub(super) struct Releases {
    waiting: std::sync::Mutex<Vec<(String, String)>>,
    wake: Notify,
    /// When this node's admissions are counted from.
    start: std::time::Instant,
    /// This node's last admission, in µs since `start` (0: none yet).
    last_us: AtomicU64,
    /// The time between its last two admissions, in µs (`u64::MAX`: fewer than two).
    gap_us: AtomicU64,
}

impl Default for Releases {
    fn default() -> Self {
        Releases {
            waiting: Default::default(),
            wake: Notify::new(),
            start: std::time::Instant::now(),
            last_us: AtomicU64::new(0),
            gap_us: AtomicU64::new(u64::MAX),
        }
    }
}

impl Releases {
    fn now_us(&self) -> u64 {
        (self.start.elapsed().as_micros() as u64).max(1)
    }

    /// This node admits a call.
    pub(super) fn admitting(&self) {
        let now = self.now_us();
        let last = self.last_us.swap(now, Ordering::Relaxed);
        let gap = if last == 0 {
            u64::MAX
        } else {
            now.saturating_sub(last)
        };
        self.gap_us.store(gap, Ordering::Relaxed);
    }

    /// Whether an admission is likely within `within`: the last two came closer than that, and
    /// the last one no longer ago. At a lower rate a slot waiting would only cost a wake-up more.
    fn admission_likely(&self, within: Duration) -> bool {
        let within = within.as_micros() as u64;
        let since = self
            .now_us()
            .saturating_sub(self.last_us.load(Ordering::Relaxed));
        self.gap_us.load(Ordering::Relaxed) < within && since < within
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, String)>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Up to `max` waiting slots, taken.
    pub(super) fn take(&self, max: usize) -> Vec<(String, String)> {
        let mut waiting = self.lock();
        let n = waiting.len().min(max);
        waiting.drain(..n).collect()
    }

    /// Slots an admission took but may not have given back (it failed): waiting again.
    pub(super) fn put_back(&self, slots: Vec<(String, String)>) {
        if slots.is_empty() {
            return;
        }
        self.lock().extend(slots);
        self.wake.notify_one();
    }
}

impl Cluster {
    /// Whether this node gives slots back late at all: on one server, with a wait set.
    pub(super) fn gives_back_late(&self) -> bool {
        !self.sharded && !self.settings.fold_within.is_zero()
    }

    /// Gives a call's slot back late (one server) or at once (a Redis Cluster).
    pub(super) fn give_back(self: &Arc<Self>, watch: String, call_id: String) {
        if !self.gives_back_late() || !self.releases.admission_likely(self.settings.fold_within) {
            let cluster = self.clone();
            tokio::spawn(async move { cluster.finish(vec![(watch, call_id)]).await });
            return;
        }
        let full = {
            let mut waiting = self.releases.lock();
            waiting.push((watch, call_id));
            waiting.len() >= WAITING_MAX
        };
        if full {
            let cluster = self.clone();
            tokio::spawn(async move { cluster.give_back_waiting().await });
        } else {
            self.releases.wake.notify_one();
        }
    }

    /// Gives back every slot waiting now, in scripts of up to [`BATCH`] slots.
    pub(super) async fn give_back_waiting(&self) {
        loop {
            let slots = self.releases.take(BATCH);
            if slots.is_empty() {
                return;
            }
            self.finish(slots).await;
        }
    }

    /// One script giving `slots` back. A failure leaves them to lapse at their call's deadline
    /// (their `until`), as a node lost with its calls would.
    async fn finish(&self, slots: Vec<(String, String)>) {
        let mut inv = self.scripts.finish.prepare_invoke();
        for (watch, call_id) in &slots {
            inv.key(watch).arg(call_id);
        }
        if self
            .op(inv.invoke_async::<i64>(&mut self.conn_for(Lane::Calls)))
            .await
            .is_err()
        {
            tracing::debug!(
                slots = slots.len(),
                "in-flight slots not given back; they lapse at their calls' deadlines"
            );
        }
    }
}

/// Gives back the slots no admission took within `fold_within` of the first one's wait, until
/// the node is gone (its drop wakes this for the last time).
pub(super) async fn give_back_late(
    releases: Arc<Releases>,
    cluster: Weak<Cluster>,
    within: Duration,
) {
    loop {
        releases.wake.notified().await;
        tokio::time::sleep(within).await;
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        cluster.give_back_waiting().await;
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The late giver-back sees the node gone and ends.
        self.releases.wake.notify_one();
    }
}
