//! Bind admission: how many tabs this node binds at once.
//!
//! When a node dies, its tabs reconnect to the others within seconds. Binding each costs CPU
//! (the handshake's token check, the bind's Redis round trips, the tab's declaration after) and
//! Redis work; taken all at once it starves the calls the node is serving for its other tabs.
//! So a bind first takes a place in the [`BindGate`]: at most `limit` binds run at once, the
//! rest wait their turn (bounded; past the bound the handshake is refused as `unavailable` and
//! the browser client retries a second later, with jitter).
//!
//! The limit adapts to what the node can sustain: a probe measures how late the runtime wakes a
//! sleeping task (when the node's threads, or the machine, are saturated, timers fire late).
//! Late by more than [`LAG_HIGH`]: the limit halves. On time ([`LAG_LOW`] or less) while binds
//! wait: it grows by a quarter. Between `min` and the configured maximum
//! (`RELAY_BIND_CONCURRENCY`). A quiet node never waits: the limit stays at the maximum.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How often the runtime's lateness is probed (and the limit adjusted).
const PROBE: Duration = Duration::from_millis(50);
/// Late by this much or more: bind fewer at once.
pub const LAG_HIGH: Duration = Duration::from_millis(20);
/// Late by this much or less: bind more at once, if binds are waiting.
pub const LAG_LOW: Duration = Duration::from_millis(5);
/// The limit never falls below this (or the configured maximum, if smaller): binds always
/// make progress.
const MIN_LIMIT: usize = 2;

pub struct BindGate {
    limit: AtomicUsize,
    min: usize,
    max: usize,
    busy: AtomicUsize,
    waiting: AtomicUsize,
    freed: Notify,
}

/// A place among the binds running now; given back when dropped.
pub struct Admission(Arc<BindGate>);

impl Drop for Admission {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
        self.0.freed.notify_one();
    }
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Admission")
    }
}

/// Counts a waiting bind for as long as it waits.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl BindGate {
    /// A gate letting at most `max` binds run at once (at least one).
    pub fn new(max: usize) -> Arc<BindGate> {
        let max = max.max(1);
        Arc::new(BindGate {
            limit: AtomicUsize::new(max),
            min: MIN_LIMIT.min(max),
            max,
            busy: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            freed: Notify::new(),
        })
    }

    /// Waits for a place, at most `bound`; `None` when none came in time.
    pub async fn admit(self: &Arc<Self>, bound: Duration) -> Option<Admission> {
        let deadline = Instant::now() + bound;
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.waiting);
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before looking, so a place freed in between is not missed.
            freed.as_mut().enable();
            if self.try_take() {
                return Some(Admission(self.clone()));
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return None;
            }
        }
    }

    fn try_take(&self) -> bool {
        let limit = self.limit.load(Ordering::Acquire);
        let mut busy = self.busy.load(Ordering::Acquire);
        while busy < limit {
            match self.busy.compare_exchange_weak(
                busy,
                busy + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(now) => busy = now,
            }
        }
        false
    }

    /// The limit after one probe that found the runtime `lag` late.
    pub fn adjust(&self, lag: Duration) {
        let limit = self.limit.load(Ordering::Acquire);
        let next = if lag >= LAG_HIGH {
            (limit / 2).max(self.min)
        } else if lag <= LAG_LOW && self.waiting.load(Ordering::Acquire) > 0 {
            (limit + limit.div_ceil(4)).min(self.max)
        } else {
            limit
        };
        if next != limit {
            self.limit.store(next, Ordering::Release);
            if next > limit {
                self.freed.notify_waiters();
            }
            tracing::debug!(
                limit = next,
                lag_ms = lag.as_millis() as u64,
                "bind admission"
            );
        }
    }

    /// Binds allowed at once now.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
    }

    /// Binds waiting for a place now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Probes the runtime's lateness (each probe recorded in `lateness`) and adjusts the limit,
    /// until the gate is dropped.
    pub fn spawn_probe(self: &Arc<Self>, lateness: Histogram) {
        let gate: Weak<BindGate> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let asked = Instant::now();
                tokio::time::sleep(PROBE).await;
                let lag = asked.elapsed().saturating_sub(PROBE);
                lateness.observe(lag.as_secs_f64());
                let Some(gate) = gate.upgrade() else { return };
                gate.adjust(lag);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_most_limit_run_and_the_rest_wait_their_turn() {
        let gate = BindGate::new(2);
        let a = gate.admit(Duration::from_millis(10)).await.expect("first");
        let _b = gate.admit(Duration::from_millis(10)).await.expect("second");
        assert!(gate.admit(Duration::from_millis(20)).await.is_none());
        let g = gate.clone();
        let third = tokio::spawn(async move { g.admit(Duration::from_secs(5)).await.is_some() });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(gate.waiting(), 1);
        drop(a);
        assert!(third.await.unwrap());
        assert_eq!(gate.waiting(), 0);
    }

    #[tokio::test]
    async fn a_late_runtime_halves_the_limit_and_an_idle_one_grows_it_back_when_binds_wait() {
        let gate = BindGate::new(64);
        gate.adjust(LAG_HIGH);
        assert_eq!(gate.limit(), 32);
        for _ in 0..10 {
            gate.adjust(Duration::from_millis(100));
        }
        assert_eq!(gate.limit(), MIN_LIMIT);
        // Nobody waits: no reason to grow.
        gate.adjust(Duration::ZERO);
        assert_eq!(gate.limit(), MIN_LIMIT);
        // A lag between the two thresholds keeps the limit.
        let _a = gate.admit(Duration::from_millis(10)).await.unwrap();
        let _b = gate.admit(Duration::from_millis(10)).await.unwrap();
        let g = gate.clone();
        let waiter = tokio::spawn(async move { g.admit(Duration::from_secs(5)).await.is_some() });
        tokio::time::sleep(Duration::from_millis(20)).await;
        gate.adjust(Duration::from_millis(10));
        assert_eq!(gate.limit(), MIN_LIMIT);
        // On time while a bind waits: the limit grows and the waiter is let in.
        gate.adjust(Duration::ZERO);
        assert_eq!(gate.limit(), 3);
        assert!(waiter.await.unwrap());
        for _ in 0..40 {
            let g = gate.clone();
            tokio::spawn(
                async move { g.admit(Duration::from_secs(5)).await.map(std::mem::forget) },
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        for _ in 0..40 {
            gate.adjust(Duration::ZERO);
        }
        assert_eq!(gate.limit(), 64, "never above the configured maximum");
    }
}
