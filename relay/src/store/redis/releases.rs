//! Slots given back late: a call's slot in its key's watch is not given back in a round trip of
//! its own when the call ends. It waits, at most [`FOLD_WITHIN`], to go back with other work:
//! - on one Redis server (and behind sentinels), with this node's next admission, whose script
//!   gives it back before counting ([`forms::ACQUIRE`](super::forms)); when no admission comes in
//!   that time, the slots still waiting go back together, in one script;
//! - on a Redis Cluster, where a script declares the keys of one hash slot only, with this
//!   node's next admission on the same server: the slots of its own key declared, those of other
//!   hash slots that server is known to serve named in its arguments; or else with the other
//!   slots waiting: one script on
//!   a server gives back every waiting slot that server serves, whatever its hash slot, and
//!   names those it does not serve, which the next script, on another server, takes
//!   ([`GIVE_BACK_SPREAD`]); once the servers are found, each is sent its own slots (and those
//!   not placed yet) at once. So a batch costs one round trip per server, not one per slot.
//!   What no server took (a hash slot being moved) goes back by a script per hash slot, which
//!   follows the cluster.
//!
//! So under a steady flow of calls a call costs one round trip (its admission), not two.
//!
//! A slot waits only while this node admits calls at least as often as [`FOLD_WITHIN`] (its last
//! two admissions that close, the last one that recent); at a lower rate it is given back at
//! once, as a wait would cost a wake-up of its own.
//!
//! A slot given back late counts a little longer among its key's calls in flight and its
//! session's (a session's calls are counted per key). This node's own admissions never see that
//! (they give back its waiting slots of their key first); another node's may, and be refused as
//! busy for a call that had already ended. So an admission refused as busy is asked again once,
//! after [`retry_busy_after`], by when every node's late slots are given back
//! ([`Cluster::acquire`](super::Cluster::acquire)); a call that is still refused then is
//! refused. A refused admission does not count against its session's call rate, so asking again
//! costs none.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::cluster_routing::Slot as HashSlot;
use tokio::sync::Notify;

use super::sharded::GIVE_BACK_SPREAD;
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
/// On a Redis Cluster, at most this many servers are asked in turn for one batch of slots; what
/// is left then goes back by hash slot.
const SPREAD_ROUNDS: usize = 16;
/// At most this many batches of waiting slots are on their way at once: a batch held up by a
/// server that does not answer (its primary lost, until a replica takes over) does not hold up
/// the next, whose slots other servers may serve.
const BATCHES_AT_ONCE: usize = 4;
/// On a Redis Cluster, at most this many servers are remembered (a server serves at least one
/// hash slot, of 16,384).
const SERVERS_MAX: usize = 64;

/// A slot waiting: its key's watch and its call's id.
pub(super) type Late = (String, String);

/// A slot waiting, and since when, in µs since the node's admissions are counted from (0: as
/// old as any, for the next batch).
struct Waiting {
    slot: Late,
    since_us: u64,
}

/// The slots given back late (see the module's text): the key's watch and the call's id; and
/// how often this node admits calls, to give slots back late only when another admission is
/// likely to come first.
pub(super) struct Releases {
    waiting: std::sync::Mutex<Vec<Waiting>>,
    wake: Notify,
    /// When this node's admissions are counted from.
    start: std::time::Instant,
    /// This node's last admission, in µs since `start` (0: none yet).
    last_us: AtomicU64,
    /// The time between its last two admissions, in µs (`u64::MAX`: fewer than two).
    gap_us: AtomicU64,
    /// On a Redis Cluster, the servers batches found.
    servers: std::sync::Mutex<Servers>,
}

/// On a Redis Cluster, the servers batches of slots found, each known by a hash slot it serves
/// (the one a batch was sent by), and for each hash slot whose server was found, that server.
#[derive(Default)]
struct Servers {
    found: Vec<HashSlot>,
    of: HashMap<HashSlot, HashSlot>,
}

impl Servers {
    /// `hash_slot` is served by the server a batch reached through `by`.
    fn learn(&mut self, hash_slot: HashSlot, by: HashSlot) {
        if !self.found.contains(&by) {
            if self.found.len() >= SERVERS_MAX {
                return;
            }
            self.found.push(by);
        }
        self.of.insert(hash_slot, by);
    }
}

impl Default for Releases {
    fn default() -> Self {
        Releases {
            waiting: Default::default(),
            wake: Notify::new(),
            start: std::time::Instant::now(),
            last_us: AtomicU64::new(0),
            gap_us: AtomicU64::new(u64::MAX),
            servers: Default::default(),
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

    fn servers(&self) -> std::sync::MutexGuard<'_, Servers> {
        self.servers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Waiting>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Up to `max` waiting slots, taken.
    pub(super) fn take(&self, max: usize) -> Vec<Late> {
        self.take_older(max, Duration::ZERO)
    }

    /// Up to `max` of the slots that have waited at least `age`, taken.
    fn take_older(&self, max: usize, age: Duration) -> Vec<Late> {
        let before = self.now_us().saturating_sub(age.as_micros() as u64);
        let mut waiting = self.lock();
        let mut taken = Vec::new();
        let mut i = 0;
        while i < waiting.len() && taken.len() < max {
            if waiting[i].since_us <= before {
                taken.push(waiting.remove(i).slot);
            } else {
                i += 1;
            }
        }
        taken
    }

    /// On a Redis Cluster, the waiting slots an admission on `watch` gives back: up to `max` of
    /// the same key (declared in its script, as its own hash slot) and, once a batch found which
    /// server serves `watch`'s hash slot, up to `max` of other hash slots known to be on that
    /// server (named in its arguments, [`super::forms::ACQUIRE`]'s cluster form). The others keep
    /// their place.
    pub(super) fn take_for(&self, watch: &str, max: usize) -> (Vec<Late>, Vec<Late>) {
        let servers = self.servers();
        let server = servers.of.get(&HashSlot::for_key(watch)).copied();
        let mut waiting = self.lock();
        let (mut own, mut beside) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < waiting.len() && (own.len() < max || beside.len() < max) {
            let slot = &waiting[i].slot.0;
            let take = if slot == watch {
                own.len() < max
            } else {
                beside.len() < max
                    && server.is_some()
                    && servers.of.get(&HashSlot::for_key(slot)).copied() == server
            };
            if !take {
                i += 1;
            } else if slot == watch {
                own.push(waiting.remove(i).slot);
            } else {
                beside.push(waiting.remove(i).slot);
            }
        }
        (own, beside)
    }

    /// Slots an admission named but its server did not serve (their hash slot moved): the
    /// server known for their hash slots is forgotten, and they wait again.
    pub(super) fn not_served(&self, slots: Vec<Late>) {
        if slots.is_empty() {
            return;
        }
        {
            let mut servers = self.servers();
            for (watch, _) in &slots {
                servers.of.remove(&HashSlot::for_key(watch));
            }
        }
        self.put_back(slots);
    }

    /// Slots an admission took but may not have given back (it failed): waiting again.
    pub(super) fn put_back(&self, slots: Vec<Late>) {
        if slots.is_empty() {
            return;
        }
        self.lock()
            .extend(slots.into_iter().map(|slot| Waiting { slot, since_us: 0 }));
        self.wake.notify_one();
    }
}

impl Cluster {
    /// Whether this node gives slots back late at all: with a wait set.
    pub(super) fn gives_back_late(&self) -> bool {
        !self.settings.fold_within.is_zero()
    }

    /// Gives a call's slot back late, or at once when this node admits calls rarely.
    pub(super) fn give_back(self: &Arc<Self>, watch: String, call_id: String) {
        if !self.gives_back_late() || !self.releases.admission_likely(self.settings.fold_within) {
            let cluster = self.clone();
            tokio::spawn(async move { cluster.finish(vec![(watch, call_id)]).await });
            return;
        }
        let full = {
            let since_us = self.releases.now_us();
            let mut waiting = self.releases.lock();
            waiting.push(Waiting {
                slot: (watch, call_id),
                since_us,
            });
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
        self.give_back_older(Duration::ZERO).await
    }

    /// Gives back the slots that have waited at least `age`, in scripts of up to [`BATCH`]
    /// slots.
    async fn give_back_older(&self, age: Duration) {
        loop {
            let slots = self.releases.take_older(BATCH, age);
            if slots.is_empty() {
                return;
            }
            if self.sharded {
                self.finish_spread(slots).await;
            } else {
                self.finish(slots).await;
            }
        }
    }

    /// On a Redis Cluster, gives `slots` back a server at a time ([`GIVE_BACK_SPREAD`]). Each
    /// server found by an earlier batch is sent at once the slots known to be its own and those
    /// whose server is not known yet (each hash slot has one server: at most one takes it).
    /// What is left then goes to the server serving the first one's watch, then to the server
    /// serving the first one that server did not take, and so on. What a server did not take
    /// when it should have (its hash slot moving), what a server known did not answer for (its
    /// primary lost), and what is left after [`SPREAD_ROUNDS`] servers goes back by one script
    /// per hash slot, which the cluster connection sends wherever the slot went.
    async fn finish_spread(&self, slots: Vec<(String, String)>) {
        let hash_slots: Vec<HashSlot> = slots.iter().map(|s| HashSlot::for_key(&s.0)).collect();
        let (servers, known): (Vec<HashSlot>, Vec<Option<HashSlot>>) = {
            let servers = self.releases.servers();
            let known = hash_slots.iter().map(|h| servers.of.get(h).copied());
            (servers.found.clone(), known.collect())
        };
        let mut taken = vec![false; slots.len()];
        let slots = &slots;
        let sends = servers.iter().map(|by| {
            let these: Vec<usize> = (0..slots.len())
                .filter(|&i| known[i].is_none_or(|k| k == *by))
                .collect();
            async move {
                let answer = match these.is_empty() {
                    true => None,
                    false => {
                        self.give_back_on(*by, these.iter().map(|&i| &slots[i]))
                            .await
                    }
                };
                (*by, these, answer)
            }
        });
        let answers = futures_util::future::join_all(sends).await;
        // Slots whose known server did not answer: not searched for on other servers, but sent
        // by hash slot (the cluster connection follows a slot to the replica that takes over).
        let mut unanswered = vec![false; slots.len()];
        {
            let mut servers = self.releases.servers();
            for (by, these, answer) in answers {
                let Some(took) = answer else {
                    for &i in &these {
                        unanswered[i] = known[i] == Some(by);
                    }
                    continue;
                };
                for (&i, took) in these.iter().zip(took) {
                    if took {
                        taken[i] = true;
                        servers.learn(hash_slots[i], by);
                    } else if known[i] == Some(by) {
                        servers.of.remove(&hash_slots[i]);
                    }
                }
            }
        }
        let mut left: Vec<usize> = (0..slots.len())
            .filter(|&i| !taken[i] && !unanswered[i])
            .collect();
        for _ in 0..SPREAD_ROUNDS {
            let Some(&first) = left.first() else {
                break;
            };
            let by = hash_slots[first];
            let Some(took) = self.give_back_on(by, left.iter().map(|&i| &slots[i])).await else {
                break;
            };
            let mut servers = self.releases.servers();
            let before = left.len();
            left = left
                .into_iter()
                .zip(took)
                .filter_map(|(i, took)| {
                    if took {
                        servers.learn(hash_slots[i], by);
                    }
                    (!took).then_some(i)
                })
                .collect();
            if left.len() >= before {
                break;
            }
        }
        left.extend((0..slots.len()).filter(|&i| unanswered[i]));
        let mut by_slot: HashMap<HashSlot, Vec<(String, String)>> = HashMap::new();
        for i in left {
            by_slot
                .entry(hash_slots[i])
                .or_default()
                .push(slots[i].clone());
        }
        futures_util::future::join_all(by_slot.into_values().map(|one| self.finish(one))).await;
    }

    /// One [`GIVE_BACK_SPREAD`] on the server serving hash slot `by`: for each slot, whether
    /// that server took it (`None` when it did not answer).
    async fn give_back_on<'a>(
        &self,
        by: HashSlot,
        slots: impl Iterator<Item = &'a (String, String)>,
    ) -> Option<Vec<bool>> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(GIVE_BACK_SPREAD.as_str()).arg(0);
        let mut n = 0;
        for (watch, call_id) in slots {
            cmd.arg(watch).arg(call_id);
            n += 1;
        }
        let mut conn = self.conn_for(Lane::Calls);
        let reply = self.op(conn.send_to_slot(cmd, by)).await.ok()?;
        let left = redis::from_redis_value::<Vec<usize>>(reply).ok()?;
        let mut took = vec![true; n];
        for at in left {
            if let Some(t) = at.checked_sub(1).and_then(|i| took.get_mut(i)) {
                *t = false;
            }
        }
        Some(took)
    }

    /// One script giving `slots` back (on a Redis Cluster, slots of one hash slot). A failure
    /// leaves them to lapse at their call's deadline (their `until`), as a node lost with its
    /// calls would.
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

/// Gives back the slots no admission took within `fold_within`, until the node is gone (its drop
/// wakes this for the last time). Woken by the first slot to wait, it sleeps three quarters of
/// `fold_within`, then gives back the slots that have waited at least a quarter of it: those
/// younger are the likeliest to go with an admission, and a slot ended while it slept wakes it
/// again, so none waits longer than `fold_within` (and the batch's round trip).
pub(super) async fn give_back_late(
    releases: Arc<Releases>,
    cluster: Weak<Cluster>,
    within: Duration,
) {
    let running = Arc::new(tokio::sync::Semaphore::new(BATCHES_AT_ONCE));
    let young = within / 4;
    loop {
        releases.wake.notified().await;
        tokio::time::sleep(within - young).await;
        let Ok(batch) = running.clone().acquire_owned().await else {
            return;
        };
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            cluster.give_back_older(young).await;
            drop(batch);
        });
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The late giver-back sees the node gone and ends.
        self.releases.wake.notify_one();
    }
}
