//! A tab that comes back: when its connection ends it reconnects, as the browser client does
//! (the [`Backoff`] of socket.io-client with the client's options), each attempt to a node the
//! balancer picks at random from the reconnect targets, and binds its key again with its token.
//! What the tabs went through is counted in [`Roam`].

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::backoff::Backoff;
use crate::tab::{self, Bind, TabSetup, TabStats};

/// Milliseconds since the Unix epoch (what several generator processes can compare).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The tabs' losses and returns, shared by all tabs of the generator.
pub struct Roam {
    /// Where a tab reconnects (empty: it does not).
    pub targets: Vec<SocketAddr>,
    /// Per tab: it lost its connection at least once.
    pub moved: Vec<AtomicBool>,
    /// Per tab: lost and not bound again yet.
    pub away_now: Vec<AtomicBool>,
    pub drops: AtomicU64,
    pub rebinds: AtomicU64,
    /// Tabs lost and not bound again yet.
    pub away: AtomicI64,
    pub attempts: AtomicU64,
    /// Failed attempts by what failed.
    pub failures: Mutex<BTreeMap<String, u64>>,
    /// (lost at, bound again at), Unix ms; `None` while away.
    pub trips: Mutex<Vec<(u64, Option<u64>)>>,
    /// When the first tab was lost, Unix ms (0: none yet).
    pub first_drop: AtomicU64,
}

impl Roam {
    pub fn new(tabs: usize, targets: Vec<SocketAddr>) -> Self {
        Roam {
            targets,
            moved: (0..tabs).map(|_| AtomicBool::new(false)).collect(),
            away_now: (0..tabs).map(|_| AtomicBool::new(false)).collect(),
            drops: AtomicU64::new(0),
            rebinds: AtomicU64::new(0),
            away: AtomicI64::new(0),
            attempts: AtomicU64::new(0),
            failures: Mutex::new(BTreeMap::new()),
            trips: Mutex::new(Vec::new()),
            first_drop: AtomicU64::new(0),
        }
    }

    fn dropped(&self, index: usize) -> usize {
        let now = unix_ms();
        let _ = self
            .first_drop
            .compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst);
        if let Some(m) = self.moved.get(index) {
            m.store(true, Ordering::SeqCst);
        }
        if let Some(a) = self.away_now.get(index) {
            a.store(true, Ordering::SeqCst);
        }
        self.drops.fetch_add(1, Ordering::Relaxed);
        self.away.fetch_add(1, Ordering::SeqCst);
        let mut trips = self.trips.lock().unwrap_or_else(|e| e.into_inner());
        trips.push((now, None));
        trips.len() - 1
    }

    fn rebound(&self, index: usize, trip: usize) {
        let now = unix_ms();
        if let Some(a) = self.away_now.get(index) {
            a.store(false, Ordering::SeqCst);
        }
        if let Some(t) = self
            .trips
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(trip)
        {
            t.1 = Some(now);
        }
        self.rebinds.fetch_add(1, Ordering::Relaxed);
        self.away.fetch_sub(1, Ordering::SeqCst);
    }

    fn failed(&self, why: &str) {
        // "refused: 44{...}" and "connect: Connection refused (os error 111)" keep their kind.
        let kind: String = why.chars().take(48).collect();
        *self
            .failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(kind)
            .or_insert(0) += 1;
    }

    /// What the tabs went through so far.
    pub fn report(&self) -> RoamReport {
        let trips = self.trips.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let first = self.first_drop.load(Ordering::SeqCst);
        let last_rebind = trips.iter().filter_map(|t| t.1).max();
        let mut away_ms: Vec<u64> = trips.iter().filter_map(|(d, r)| r.map(|r| r - d)).collect();
        away_ms.sort_unstable();
        let q = |p: f64| {
            away_ms
                .get(((away_ms.len() as f64 * p) as usize).min(away_ms.len().saturating_sub(1)))
                .copied()
        };
        // Binds again per 100 ms after the first loss.
        let mut per_100ms = Vec::new();
        for r in trips.iter().filter_map(|t| t.1) {
            let slot = (r.saturating_sub(first) / 100) as usize;
            if per_100ms.len() <= slot {
                per_100ms.resize(slot + 1, 0u32);
            }
            per_100ms[slot] += 1;
        }
        RoamReport {
            drops: self.drops.load(Ordering::Relaxed),
            rebinds: self.rebinds.load(Ordering::Relaxed),
            away: self.away.load(Ordering::SeqCst),
            attempts: self.attempts.load(Ordering::Relaxed),
            failed_attempts: self
                .failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            first_drop_unix_ms: (first > 0).then_some(first),
            last_rebind_unix_ms: last_rebind,
            away_ms_p50: q(0.5),
            away_ms_p99: q(0.99),
            away_ms_max: away_ms.last().copied(),
            rebinds_per_100ms: per_100ms,
        }
    }
}

#[derive(Serialize)]
pub struct RoamReport {
    pub drops: u64,
    pub rebinds: u64,
    pub away: i64,
    pub attempts: u64,
    pub failed_attempts: BTreeMap<String, u64>,
    pub first_drop_unix_ms: Option<u64>,
    pub last_rebind_unix_ms: Option<u64>,
    pub away_ms_p50: Option<u64>,
    pub away_ms_p99: Option<u64>,
    pub away_ms_max: Option<u64>,
    /// Tabs bound again in each 100 ms after the first loss (of this generator).
    pub rebinds_per_100ms: Vec<u32>,
}

/// One tab: binds on `first`, reports the first bind through `bound`, and from then on comes
/// back whenever its connection ends (when there are reconnect targets). A tab whose first bind
/// fails reports it and ends, so a cold start counts its failures.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    first: SocketAddr,
    source: Option<IpAddr>,
    index: usize,
    bind: Bind,
    setup: TabSetup,
    stats: Arc<TabStats>,
    roam: Arc<Roam>,
    bound: tokio::sync::oneshot::Sender<Result<(), String>>,
) {
    let mut first_bound = Some(bound);
    let mut backoff = Backoff::new(index as u64 + 1);
    let mut target = first;
    // The trip of a lost tab that has not bound again.
    let mut trip: Option<usize> = None;
    loop {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut slot = Some(tx);
        let mut rx = Some(rx);
        let mut was_bound = false;
        let session = tab::session(
            target,
            source,
            index,
            bind.clone(),
            &setup,
            &stats,
            &mut slot,
        );
        tokio::pin!(session);
        let result = loop {
            tokio::select! {
                r = &mut session => break r,
                got = async { rx.as_mut().expect("guarded").await }, if rx.is_some() => {
                    rx = None;
                    if let Ok(Ok(())) = got {
                        was_bound = true;
                        backoff.reset();
                        if let Some(b) = first_bound.take() {
                            let _ = b.send(Ok(()));
                        } else if let Some(t) = trip.take() {
                            roam.rebound(index, t);
                        }
                    }
                }
            }
        };
        if let Some(b) = first_bound.take() {
            let _ = b.send(Err(result.err().unwrap_or_else(|| "closed".into())));
            return;
        }
        if roam.targets.is_empty() {
            return;
        }
        let wait = if was_bound {
            trip = Some(roam.dropped(index));
            backoff.next_ms()
        } else {
            let why = result
                .err()
                .unwrap_or_else(|| "closed before binding".into());
            roam.failed(&why);
            // A refusal by the relay's middleware is retried after about a second by the
            // browser client, a transport failure by the backoff.
            if why.starts_with("refused") {
                backoff.refused_ms()
            } else {
                backoff.next_ms()
            }
        };
        tokio::time::sleep(Duration::from_millis(wait)).await;
        roam.attempts.fetch_add(1, Ordering::Relaxed);
        target = roam.targets[backoff.pick(roam.targets.len())];
    }
}
