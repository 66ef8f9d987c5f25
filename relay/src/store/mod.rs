//! The seam between the handlers and where key state lives.
//!
//! [`KeyStore`] is what the relay asks about keys; [`MemoryStore`] answers it on one node and
//! [`RedisStore`] on several (Redis is the truth there, and this node's [`Keys`](keys::Keys) follows it with
//! the bindings of its own sockets). [`Store`] is the one the app holds: it dispatches to its
//! backend, so a handler never asks which one it has. The in-memory path adds no allocation:
//! dispatch is a `match` on the enum and the futures are not boxed.
//!
//! The key lifecycle both follow is stated once, in [`lifecycle`].
//!
//! Behind the seam: issuing, binding and releasing, the revocation check of a handshake, the
//! agent API's key status, revoking, the token rate per client address, each agent session's
//! calls in flight and call rate and the sessions ended early ([`sessions`]), `Idempotency-Key`
//! claims and outcomes ([`claims`]), a call's in-flight slot, where the key's tab is and waiting
//! for it to change ([`track`]), readiness and expiry.

pub mod claims;
pub mod keys;
pub mod lifecycle;
mod memory;
pub mod redis;
mod redis_store;
pub mod sessions;
pub mod track;

pub use memory::MemoryStore;
pub use redis_store::RedisStore;
pub use sessions::SessionLimits;

use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use relay_wire::{Declaration, KeyStatus};
use tokio::time::Instant;

use self::keys::{Binding, Displaced, NotBound, Proof};
use self::redis::StoreError;
use self::track::{Ticket, Track, TrackError};
use crate::sockets::TabSocket;
use claims::Claimed;
use lifecycle::BindError;

/// What a revoke did.
pub struct Revocation {
    /// The socket of this node that held the key, to be told and closed.
    pub local: Option<Displaced>,
    /// The other node the key was online on, if any (its socket is told through the adapter).
    pub remote: Option<String>,
}

impl Revocation {
    /// Whether some tab held the key when it was revoked.
    pub fn tab_notified(&self) -> bool {
        self.local.is_some() || self.remote.is_some()
    }
}

/// What a bind did.
pub enum Bound {
    /// This socket already held the key: nothing changed.
    Same,
    /// The key is bound to the socket; `displaced` is the socket of this node that held it.
    Bound { displaced: Option<Displaced> },
}

/// A bind's outcome, and whether a socket on another node lost the key to it (that socket is
/// told through the adapter, whatever this node's record then said).
pub struct BindOutcome {
    pub bound: Result<Bound, BindError>,
    /// The other node whose socket held the key until this bind, if any (told through the
    /// adapter that it lost the key).
    pub replaced_on: Option<String>,
    /// The key's session mode, which the newly bound tab is told.
    pub mode: Option<Box<str>>,
}

/// Where the tab of a key whose mode was set is, to tell it.
pub enum TabAt {
    /// No tab holds the key now: it is told when it binds.
    Nowhere,
    /// A socket of this node.
    Here(Binding),
    /// A socket of another node (reached through the adapter).
    Elsewhere,
}

/// What the relay keeps about keys, whichever backend keeps it.
pub trait KeyStore: Send + Sync {
    /// Records a key minted by the token service, its token expiring at `exp_unix` (seconds).
    fn issue(
        &self,
        key: &str,
        exp_unix: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Whether the key was revoked (its tombstone still stands).
    fn is_revoked(&self, key: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The key's state as the agent API reports it; `None` when unknown or revoked.
    fn status(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<KeyStatus>, StoreError>> + Send;

    /// Revokes the key; `None` when it is unknown or already revoked.
    fn revoke(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Revocation>, StoreError>> + Send;

    /// Binds `key` to `socket` (see [`lifecycle::apply`]).
    fn bind(
        &self,
        key: &str,
        proof: Proof,
        socket: &TabSocket,
    ) -> impl Future<Output = Result<BindOutcome, StoreError>> + Send;

    /// `socket` let go of `key`: the key goes offline for the grace if that socket held it.
    /// Never fails: with Redis unreachable, the key stays online there until this node writes
    /// its live bindings back, and that writes only live ones.
    fn release(&self, key: &str, socket: &TabSocket) -> impl Future<Output = ()> + Send;

    /// Records what `socket`, which must hold `key`, declared it handles; the key's revision
    /// after it.
    fn declare(
        &self,
        key: &str,
        socket: &TabSocket,
        declared: Declaration,
    ) -> impl Future<Output = Result<Result<u64, NotBound>, StoreError>> + Send;

    /// Sets the key's session mode; `None` when the key is unknown or revoked, else where its
    /// tab is.
    fn set_mode(
        &self,
        key: &str,
        mode: &str,
    ) -> impl Future<Output = Result<Option<TabAt>, StoreError>> + Send;

    /// The key's status once its declaration revision differs from `after`, or at `deadline`
    /// as it is; `None` when the key is unknown, removed or revoked meanwhile.
    fn wait_status(
        &self,
        key: &str,
        after: u64,
        deadline: Instant,
    ) -> impl Future<Output = Result<Option<KeyStatus>, StoreError>> + Send;

    /// Takes one token from `ip`'s issuance budget; false when it is spent (shared by every node
    /// on Redis).
    fn take_token(&self, ip: IpAddr) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Claims `(key, idem)` for a call whose content has `fingerprint` and whose timeout is
    /// `timeout`: run it, replay the first call's outcome (waited for), or a conflict.
    fn claim(
        &self,
        key: &str,
        idem: &str,
        fingerprint: u64,
        timeout: Duration,
    ) -> impl Future<Output = Result<Claimed, StoreError>> + Send;

    /// Takes one of `key`'s in-flight slots for a call of agent session `session` (with one of
    /// that session's own slots and one call of its rate, unless the session was ended): the
    /// call's [`Track`], which finds the key's tab and waits for it, and gives the slots back
    /// when dropped. On Redis the admission may also send the call to the node holding the tab
    /// ([`Ticket::offer`], [`Track::take_sent`]).
    fn track<'a, 't>(
        &'a self,
        key: &'a str,
        session: &'t str,
        ticket: &'t Ticket<'t>,
    ) -> impl Future<Output = Result<Track<'a>, TrackError>> + Send;

    /// Ends agent session `session` (its token expiring at Unix second `exp`): no call of it
    /// starts any more, on any node. The key and its other sessions are untouched.
    fn end_session(
        &self,
        session: &str,
        exp: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Whether agent session `session` was ended.
    fn session_ended(&self, session: &str)
    -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Whether the store answers (readiness): always in memory; on Redis, both connections.
    fn is_healthy(&self) -> bool;

    /// Removes what has outlived its time (an unbound key, a grace, a tombstone) from this
    /// node's records; Redis expires its own entries.
    fn expire(&self);
}

/// The store the app holds: one of the backends, chosen at start.
pub enum Store {
    Memory(MemoryStore),
    Redis(RedisStore),
}

macro_rules! each {
    ($store:expr, $s:ident => $body:expr) => {
        match $store {
            Store::Memory($s) => $body,
            Store::Redis($s) => $body,
        }
    };
}

impl KeyStore for Store {
    async fn issue(&self, key: &str, exp_unix: u64) -> Result<(), StoreError> {
        each!(self, s => s.issue(key, exp_unix).await)
    }

    async fn is_revoked(&self, key: &str) -> Result<bool, StoreError> {
        each!(self, s => s.is_revoked(key).await)
    }

    async fn status(&self, key: &str) -> Result<Option<KeyStatus>, StoreError> {
        each!(self, s => s.status(key).await)
    }

    async fn revoke(&self, key: &str) -> Result<Option<Revocation>, StoreError> {
        each!(self, s => s.revoke(key).await)
    }

    async fn bind(
        &self,
        key: &str,
        proof: Proof,
        socket: &TabSocket,
    ) -> Result<BindOutcome, StoreError> {
        each!(self, s => s.bind(key, proof, socket).await)
    }

    async fn release(&self, key: &str, socket: &TabSocket) {
        each!(self, s => s.release(key, socket).await)
    }

    async fn declare(
        &self,
        key: &str,
        socket: &TabSocket,
        declared: Declaration,
    ) -> Result<Result<u64, NotBound>, StoreError> {
        each!(self, s => s.declare(key, socket, declared).await)
    }

    async fn set_mode(&self, key: &str, mode: &str) -> Result<Option<TabAt>, StoreError> {
        each!(self, s => s.set_mode(key, mode).await)
    }

    async fn wait_status(
        &self,
        key: &str,
        after: u64,
        deadline: Instant,
    ) -> Result<Option<KeyStatus>, StoreError> {
        match self {
            Store::Memory(s) => s.wait_status(key, after, deadline).await,
            Store::Redis(s) => Box::pin(s.wait_status(key, after, deadline)).await,
        }
    }

    async fn take_token(&self, ip: IpAddr) -> Result<bool, StoreError> {
        each!(self, s => s.take_token(ip).await)
    }

    async fn claim(
        &self,
        key: &str,
        idem: &str,
        fingerprint: u64,
        timeout: Duration,
    ) -> Result<Claimed, StoreError> {
        each!(self, s => s.claim(key, idem, fingerprint, timeout).await)
    }

    async fn track<'a, 't>(
        &'a self,
        key: &'a str,
        session: &'t str,
        ticket: &'t Ticket<'t>,
    ) -> Result<Track<'a>, TrackError> {
        match self {
            Store::Memory(s) => s.track(key, session, ticket).await,
            // Boxed: the slot's round trip must not grow every single-node call's future.
            Store::Redis(s) => Box::pin(s.track(key, session, ticket)).await,
        }
    }

    async fn end_session(&self, session: &str, exp: u64) -> Result<(), StoreError> {
        each!(self, s => s.end_session(session, exp).await)
    }

    async fn session_ended(&self, session: &str) -> Result<bool, StoreError> {
        each!(self, s => s.session_ended(session).await)
    }

    fn is_healthy(&self) -> bool {
        each!(self, s => s.is_healthy())
    }

    fn expire(&self) {
        each!(self, s => s.expire())
    }
}
