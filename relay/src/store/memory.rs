//! The in-memory store: every key's state in this process ([`Keys`]), the token rate per
//! client address in a governor limiter, each session's calls with its key and the sessions
//! ended early ([`super::sessions`]), `Idempotency-Key` outcomes in a map. Nothing on its path
//! is boxed.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use relay_wire::{Declaration, KeyStatus};
use tokio::time::Instant;

use super::claims::{self, Claimed, ReplayBound};
use super::keys::SessionSlot;
use super::keys::{AcquireError, Keys, NotBound, Proof};
use super::redis::StoreError;
use super::sessions::{Ended, Refused, SessionLimits, session_tag};
use super::track::{MemoryTrack, Ticket, Track, TrackError};
use super::{BindOutcome, Bound, KeyStore, Revocation, TabAt};
use crate::idempotency::Idempotency;
use crate::sockets::TabSocket;

/// One node: every key's state is in this process.
pub struct MemoryStore {
    keys: Arc<Keys>,
    tokens: DefaultKeyedRateLimiter<IpAddr>,
    /// What one agent session may take of its key.
    limits: SessionLimits,
    ended: Ended,
    claims: Idempotency,
    bound: ReplayBound,
}

impl MemoryStore {
    /// `tokens_per_min`: tokens one client address may get per minute.
    pub fn new(keys: Arc<Keys>, tokens_per_min: u32, bound: ReplayBound) -> Self {
        let per_min = NonZeroU32::new(tokens_per_min).unwrap_or(NonZeroU32::MIN);
        MemoryStore {
            keys,
            tokens: RateLimiter::keyed(Quota::per_minute(per_min)),
            limits: SessionLimits::default(),
            ended: Ended::default(),
            claims: Idempotency::new(bound.window),
            bound,
        }
    }

    /// Each agent session held to `limits`.
    pub fn with_sessions(mut self, limits: SessionLimits) -> Self {
        self.limits = limits;
        self
    }
}

impl KeyStore for MemoryStore {
    async fn issue(&self, key: &str, exp_unix: u64) -> Result<(), StoreError> {
        self.keys.issue(key, exp_unix);
        Ok(())
    }

    async fn is_revoked(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.keys.is_revoked(key))
    }

    async fn status(&self, key: &str) -> Result<Option<KeyStatus>, StoreError> {
        Ok(self.keys.status(key))
    }

    async fn revoke(&self, key: &str) -> Result<Option<Revocation>, StoreError> {
        Ok(self.keys.revoke(key).map(|local| Revocation {
            local,
            remote: None,
        }))
    }

    async fn bind(
        &self,
        key: &str,
        proof: Proof,
        socket: &TabSocket,
    ) -> Result<BindOutcome, StoreError> {
        let (bound, mode) = match self.keys.bind_with_mode(key, proof, socket) {
            Ok((displaced, mode)) => (Ok(Bound::Bound { displaced }), mode),
            Err(err) => (Err(err), None),
        };
        Ok(BindOutcome {
            bound,
            replaced_on: None,
            mode,
        })
    }

    async fn declare(
        &self,
        key: &str,
        socket: &TabSocket,
        declared: Declaration,
    ) -> Result<Result<u64, NotBound>, StoreError> {
        Ok(self.keys.declare(key, socket.id(), declared))
    }

    async fn set_mode(&self, key: &str, mode: &str) -> Result<Option<TabAt>, StoreError> {
        Ok(self.keys.set_mode(key, mode).map(|binding| match binding {
            Some(binding) => TabAt::Here(binding),
            None => TabAt::Nowhere,
        }))
    }

    async fn wait_status(
        &self,
        key: &str,
        after: u64,
        deadline: Instant,
    ) -> Result<Option<KeyStatus>, StoreError> {
        Ok(self.keys.wait_change(key, after, deadline).await)
    }

    async fn release(&self, key: &str, socket: &TabSocket) {
        self.keys.release(key, socket.id());
    }

    async fn take_token(&self, ip: IpAddr) -> Result<bool, StoreError> {
        Ok(self.tokens.check_key(&ip).is_ok())
    }

    async fn claim(
        &self,
        key: &str,
        idem: &str,
        fingerprint: u64,
        _timeout: Duration,
    ) -> Result<Claimed, StoreError> {
        Ok(claims::claim_memory(&self.claims, self.bound, key, idem, fingerprint).await)
    }

    async fn track<'a, 't>(
        &'a self,
        key: &'a str,
        session: &'t str,
        _ticket: &'t Ticket<'t>,
    ) -> Result<Track<'a>, TrackError> {
        if self.ended.contains(session) {
            return Err(TrackError::Ended);
        }
        let slot = self.keys.acquire(key).map_err(|e| match e {
            AcquireError::Unknown => TrackError::Unknown,
            AcquireError::TooMany => TrackError::TooMany,
        })?;
        let now = crate::tokens::unix_now().as_secs();
        let session = SessionSlot::take(slot.shared(), session_tag(session), self.limits, now)
            .map_err(|e| match e {
                Refused::Busy => TrackError::SessionBusy,
                Refused::Rate => TrackError::RateLimited,
            })?;
        Ok(Track::Memory(MemoryTrack::new(
            &self.keys, key, slot, session,
        )))
    }

    async fn end_session(&self, session: &str, exp: u64) -> Result<(), StoreError> {
        self.ended.end(session, exp);
        Ok(())
    }

    async fn session_ended(&self, session: &str) -> Result<bool, StoreError> {
        Ok(self.ended.contains(session))
    }

    fn is_healthy(&self) -> bool {
        true
    }

    fn expire(&self) {
        self.keys.sweep();
        self.ended.sweep(crate::tokens::unix_now().as_secs());
        self.tokens.retain_recent();
        self.claims.sweep();
    }
}
