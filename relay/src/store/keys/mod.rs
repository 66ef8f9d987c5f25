//! Key state and routing: the one seam between the handlers and where keys live.
//!
//! A key moves issued → online (bound to one socket) → offline (socket gone, kept for the
//! reconnect grace) → removed. Revoked keys leave a tombstone until their token expires so the
//! token cannot bind them again. Everything here is in memory, sharded by `DashMap`: no lock is
//! shared by two keys, and no shard lock is ever held across an `.await`.
//!
//! Callers waiting for an offline key park on the key's own `Notify`; binding, revoking and removal wake them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use dashmap::DashMap;
use relay_wire::{KeyState, KeyStatus, RevokeReason};
use socketioxide::socket::Sid;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod shared;
mod tab;

use shared::lock;
pub use shared::{InflightGuard, KeyShared, SessionSlot};
pub use tab::{NotBound, TabInfo};

use crate::config::fingerprint;
use crate::metrics::Metrics;
use crate::sockets::TabSocket;
pub use crate::store::lifecycle::BindError;
use crate::store::lifecycle::{self, Event, Facts, Phase, Shown, Transition};
use crate::tokens::{unix_now, unix_now_ms};
use relay_wire::Fp;

/// A key bound to a live socket. `gone` fires when that binding ends for any reason (socket
/// closed, replaced, revoked), which is how a call waiting for an answer learns its tab left.
#[derive(Clone)]
pub struct Binding {
    pub socket: TabSocket,
    pub gone: CancellationToken,
    /// When this node bound it (Unix ms): of two nodes' bindings of a key, the later one stands.
    pub bound_ms: u64,
}

impl Binding {
    pub fn sid(&self) -> Sid {
        self.socket.id()
    }
}

enum State {
    Issued,
    Online(Binding),
    Offline,
    Revoked,
}

struct Entry {
    state: State,
    /// Once bound, a bare key never binds again: later binds must show the token.
    ever_bound: bool,
    /// When the entry is removed unless something changes it (not used while online).
    remove_at: Instant,
    /// Token expiry: no state outlives it except a live binding.
    token_exp: Instant,
    /// Unix ms of the last state change.
    since_ms: u64,
    shared: Arc<KeyShared>,
    /// What the tab declared and the mode it was told; boxed, so a key whose tab never
    /// declared holds only the pointer.
    tab: Option<Box<TabInfo>>,
}

impl Entry {
    /// What the lifecycle ([`lifecycle::apply`]) knows of this entry.
    fn facts(&self) -> Facts {
        let phase = match self.state {
            State::Issued => Phase::Issued,
            State::Online(_) => Phase::Online,
            State::Offline => Phase::Offline,
            State::Revoked => Phase::Revoked,
        };
        Facts {
            phase,
            ever_bound: self.ever_bound,
        }
    }
}

/// How a bind proves the key was issued here.
#[derive(Debug, Clone, Copy)]
pub enum Proof {
    /// A verified token, expiring at this Unix second.
    Token { exp: u64 },
    /// The bare key: accepted once, for a key issued and never bound.
    BareKey,
}

/// A socket that lost its key to a bind or a revoke, with the awaited calls it should drop.
pub struct Displaced {
    pub binding: Binding,
    pub pending: Vec<Arc<str>>,
    pub reason: RevokeReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitError {
    /// The key is unknown or was revoked or removed while waiting.
    Unknown,
    /// No tab came back before the deadline.
    Offline,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireError {
    Unknown,
    TooMany,
}

pub struct LifecycleConfig {
    pub unbound_ttl: Duration,
    pub grace: Duration,
    pub max_inflight: usize,
}

pub struct Keys {
    map: DashMap<Arc<str>, Entry>,
    cfg: LifecycleConfig,
    metrics: Arc<Metrics>,
}

/// Converts a Unix-seconds expiry into the monotonic clock.
fn exp_instant(exp_unix: u64) -> Instant {
    let now_unix = unix_now();
    let left = Duration::from_secs(exp_unix).saturating_sub(now_unix);
    Instant::now() + left
}

impl Keys {
    pub fn new(cfg: LifecycleConfig, metrics: Arc<Metrics>) -> Self {
        Keys {
            map: DashMap::new(),
            cfg,
            metrics,
        }
    }

    /// Records a key minted by the token service.
    pub fn issue(&self, key: &str, token_exp_unix: u64) {
        let token_exp = exp_instant(token_exp_unix);
        let entry = Entry {
            state: State::Issued,
            ever_bound: false,
            remove_at: token_exp.min(Instant::now() + self.cfg.unbound_ttl),
            token_exp,
            since_ms: unix_now_ms(),
            shared: Arc::default(),
            tab: None,
        };
        if self.map.insert(key.into(), entry).is_none() {
            self.metrics.known_keys.inc();
        }
    }

    /// Binds `key` to `socket`. Returns the socket it displaced, if another socket held it.
    pub fn bind(
        &self,
        key: &str,
        proof: Proof,
        socket: &TabSocket,
    ) -> Result<Option<Displaced>, BindError> {
        self.bind_with_mode(key, proof, socket).map(|(d, _)| d)
    }

    /// [`Keys::bind`], with the mode the key's tab is to be told (when one is set).
    pub fn bind_with_mode(
        &self,
        key: &str,
        proof: Proof,
        socket: &TabSocket,
    ) -> Result<(Option<Displaced>, Option<Box<str>>), BindError> {
        let now = Instant::now();
        let binding = Binding {
            socket: socket.clone(),
            gone: CancellationToken::new(),
            bound_ms: unix_now_ms(),
        };
        let shown = match proof {
            Proof::Token { exp } => Shown::Token {
                expired: exp_instant(exp) <= now,
            },
            Proof::BareKey => Shown::BareKey,
        };
        let mut created = false;
        let mut entry = match self.map.get_mut(key) {
            Some(entry) => entry,
            None => {
                let absent = Event::Bind {
                    shown,
                    same_socket: false,
                };
                if let Transition::Refused(err) = lifecycle::apply(None, absent) {
                    return Err(err);
                }
                // A valid token is proof of issuance even when its entry is gone (grace over,
                // or another relay process minted it with the same LiveKit secret).
                let Proof::Token { exp } = proof else {
                    return Err(BindError::Unknown);
                };
                let token_exp = exp_instant(exp);
                self.map.entry(key.into()).or_insert_with(|| {
                    created = true;
                    Entry {
                        state: State::Issued,
                        ever_bound: false,
                        remove_at: token_exp,
                        token_exp,
                        since_ms: unix_now_ms(),
                        shared: Arc::default(),
                        tab: None,
                    }
                })
            }
        };
        let same_socket = matches!(&entry.state, State::Online(b) if b.sid() == socket.id());
        match lifecycle::apply(Some(entry.facts()), Event::Bind { shown, same_socket }) {
            Transition::Refused(err) => return Err(err),
            Transition::Stays => return Ok((None, None)),
            Transition::To(_) => {}
        }
        let mode = entry.tab.as_ref().and_then(|t| t.mode.clone());
        if let Proof::Token { exp } = proof {
            entry.token_exp = entry.token_exp.max(exp_instant(exp));
        }
        let previous = std::mem::replace(&mut entry.state, State::Online(binding));
        entry.ever_bound = true;
        entry.since_ms = unix_now_ms();
        let shared = entry.shared.clone();
        drop(entry);
        if created {
            self.metrics.known_keys.inc();
        }

        let displaced = match previous {
            State::Online(old) => {
                old.gone.cancel();
                Some(Displaced {
                    binding: old,
                    pending: shared.take_pending(),
                    reason: RevokeReason::Replaced,
                })
            }
            _ => {
                self.metrics.bound_keys.inc();
                None
            }
        };
        shared.changed.notify_waiters();
        Ok((displaced, mode))
    }

    /// The socket `sid` went away: its key, if still bound to it, goes offline for the grace.
    pub fn release(&self, key: &str, sid: Sid) {
        let Some(mut entry) = self.map.get_mut(key) else {
            return;
        };
        let same_socket = matches!(&entry.state, State::Online(b) if b.sid() == sid);
        let release = Event::Release { same_socket };
        if lifecycle::apply(Some(entry.facts()), release) == Transition::Stays {
            return;
        }
        if let State::Online(binding) = &entry.state {
            binding.gone.cancel();
        }
        let now = Instant::now();
        entry.state = State::Offline;
        entry.remove_at = (now + self.cfg.grace).min(entry.token_exp.max(now));
        entry.since_ms = unix_now_ms();
        let shared = entry.shared.clone();
        drop(entry);
        self.metrics.bound_keys.dec();
        shared.changed.notify_waiters();
    }

    /// Revokes a key: it can never bind again. Returns `None` for an unknown key, otherwise the
    /// socket that held it (if any) so the caller can tell it.
    pub fn revoke(&self, key: &str) -> Option<Option<Displaced>> {
        let mut entry = self.map.get_mut(key)?;
        if let Transition::Refused(_) = lifecycle::apply(Some(entry.facts()), Event::Revoke) {
            return None;
        }
        let previous = std::mem::replace(&mut entry.state, State::Revoked);
        // The tombstone only needs to outlive the token that could bind it again.
        entry.remove_at = entry.token_exp;
        entry.since_ms = unix_now_ms();
        let shared = entry.shared.clone();
        drop(entry);
        self.metrics.known_keys.dec();
        shared.changed.notify_waiters();
        match previous {
            State::Online(binding) => {
                binding.gone.cancel();
                self.metrics.bound_keys.dec();
                Some(Some(Displaced {
                    binding,
                    pending: shared.take_pending(),
                    reason: RevokeReason::Revoked,
                }))
            }
            _ => Some(None),
        }
    }

    pub fn is_revoked(&self, key: &str) -> bool {
        self.map
            .get(key)
            .is_some_and(|e| matches!(e.state, State::Revoked))
    }

    /// The key's state as the agent API reports it; `None` when unknown.
    pub fn status(&self, key: &str) -> Option<KeyStatus> {
        let entry = self.map.get(key)?;
        let (state, grace_ends_ms) = match &entry.state {
            State::Issued => (KeyState::Issued, None),
            State::Online(_) => (KeyState::Online, None),
            State::Offline => {
                let left = entry.remove_at.saturating_duration_since(Instant::now());
                (
                    KeyState::Offline,
                    Some(unix_now_ms() + left.as_millis() as u64),
                )
            }
            State::Revoked => return None,
        };
        let mut status = KeyStatus {
            ok: true,
            state,
            fingerprint: fingerprint(key),
            since_ms: entry.since_ms,
            grace_ends_ms,
            token_expires_ms: Some(
                unix_now_ms()
                    + entry
                        .token_exp
                        .saturating_duration_since(Instant::now())
                        .as_millis() as u64,
            ),
            revision: 0,
            handles: None,
            page_tools: None,
            mode: None,
        };
        if let Some(tab) = &entry.tab {
            tab.describe(&mut status);
        }
        Some(status)
    }

    /// Takes one of the key's in-flight slots.
    pub fn acquire(&self, key: &str) -> Result<InflightGuard, AcquireError> {
        let entry = self.map.get(key).ok_or(AcquireError::Unknown)?;
        if matches!(entry.state, State::Revoked) {
            return Err(AcquireError::Unknown);
        }
        let shared = entry.shared.clone();
        drop(entry);
        let before = shared.inflight.fetch_add(1, Ordering::AcqRel);
        let guard = InflightGuard { shared };
        if before >= self.cfg.max_inflight {
            return Err(AcquireError::TooMany);
        }
        Ok(guard)
    }

    /// Waits until `key` is bound to a live tab, or the deadline passes.
    pub async fn wait_online(&self, key: &str, deadline: Instant) -> Result<Binding, WaitError> {
        loop {
            let shared = {
                let entry = self.map.get(key).ok_or(WaitError::Unknown)?;
                match &entry.state {
                    State::Online(binding) => return Ok(binding.clone()),
                    State::Revoked => return Err(WaitError::Unknown),
                    State::Issued | State::Offline => entry.shared.clone(),
                }
            };
            let changed = shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            // Re-check after registering for the wake-up, so a bind that landed in between is
            // not missed.
            {
                let entry = self.map.get(key).ok_or(WaitError::Unknown)?;
                match &entry.state {
                    State::Online(binding) => return Ok(binding.clone()),
                    State::Revoked => return Err(WaitError::Unknown),
                    _ => {}
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(WaitError::Offline);
            }
        }
    }

    /// Removes entries whose time is up; returns how many went.
    pub fn sweep(&self) -> usize {
        let now = Instant::now();
        let mut expired: Vec<(Arc<str>, bool)> = Vec::new();
        self.map.retain(|key, entry| {
            let done = entry.remove_at <= now
                && lifecycle::apply(Some(entry.facts()), Event::Expire) == Transition::To(None);
            if done {
                expired.push((key.clone(), matches!(entry.state, State::Revoked)));
                entry.shared.changed.notify_waiters();
            }
            !done
        });
        for (key, was_revoked) in &expired {
            if !was_revoked {
                self.metrics.known_keys.dec();
            }
            tracing::debug!(key = %Fp(key), "key removed");
        }
        expired.len()
    }

    /// The live binding of `key` on this node, if any.
    pub fn local_binding(&self, key: &str) -> Option<(Binding, Arc<KeyShared>)> {
        let entry = self.map.get(key)?;
        match &entry.state {
            State::Online(b) => Some((b.clone(), entry.shared.clone())),
            _ => None,
        }
    }

    /// Calls holding an in-flight slot, and awaited calls waiting for a tab's answer, over every
    /// key this node keeps: both are back to 0 when no call runs (the soak checks it).
    pub fn load(&self) -> (usize, usize) {
        self.map.iter().fold((0, 0), |(inflight, pending), e| {
            (
                inflight + e.shared.inflight.load(Ordering::Acquire),
                pending + lock(&e.shared.pending).len(),
            )
        })
    }

    /// Every live binding with its key and its token's expiry (Unix seconds).
    pub fn bound(&self) -> Vec<(Arc<str>, Binding, u64)> {
        let now = Instant::now();
        let now_unix = unix_now();
        self.map
            .iter()
            .filter_map(|e| match &e.state {
                State::Online(b) => {
                    let left = e.token_exp.saturating_duration_since(now);
                    Some((e.key().clone(), b.clone(), (now_unix + left).as_secs()))
                }
                _ => None,
            })
            .collect()
    }
}
