//! The seam between the handlers and where key state lives.
//!
//! [`KeyStore`] is what the relay asks about keys; [`MemoryStore`] answers it on one node and
//! [`RedisStore`] on several (Redis is the truth there, and this node's [`Keys`] follows it with
//! the bindings of its own sockets). [`Store`] is the one the app holds: it dispatches to its
//! backend, so a handler never asks which one it has. The in-memory path adds no allocation:
//! dispatch is a `match` on the enum and the futures are not boxed.
//!
//! The key lifecycle both follow is stated once, in [`lifecycle`].
//!
//! Behind the seam: issuing, binding and releasing, the revocation check of a handshake, the
//! agent API's key status, revoking, the token rate per client address and the agents' call
//! rate, `Idempotency-Key` claims and outcomes ([`claims`]), a call's in-flight slot, where the
//! key's tab is and waiting for it to change ([`track`]), readiness and expiry.

pub mod claims;
pub mod keys;
pub mod lifecycle;
pub mod redis;
pub mod track;

use std::future::Future;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

use relay_wire::{KeyState, KeyStatus};

use self::keys::{AcquireError, Displaced, Keys, Proof};
use self::redis as cluster;
use self::redis::{Acquired, AgentRate, Cluster, StoreError};
use self::track::{MemoryTrack, RedisTrack, Track, TrackError};
use crate::idempotency::Idempotency;
use crate::sockets::TabSocket;
use claims::{Claimed, ReplayBound};
use lifecycle::BindError;

/// What a revoke did.
pub struct Revocation {
    /// The socket of this node that held the key, to be told and closed.
    pub local: Option<Displaced>,
    /// Whether the key was online on another node (its socket is told through the adapter).
    pub remote: bool,
}

impl Revocation {
    /// Whether some tab held the key when it was revoked.
    pub fn tab_notified(&self) -> bool {
        self.local.is_some() || self.remote
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
    pub replaced_elsewhere: bool,
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

    /// Takes one call from agent `agent`'s rate budget before the call is read; false when it
    /// is spent. A store that counts the agent's calls with the key's slot (Redis, over every
    /// node: see [`KeyStore::track`]) admits every call here.
    fn admit_agent(&self, agent: usize) -> bool;

    /// Takes one of `key`'s in-flight slots for a call of agent `agent` (and, on Redis, one
    /// call from that agent's shared rate): the call's [`Track`], which finds the key's tab and
    /// waits for it, and gives the slot back when dropped.
    fn track<'a>(
        &'a self,
        key: &'a str,
        agent: usize,
    ) -> impl Future<Output = Result<Track<'a>, TrackError>> + Send + 'a;

    /// Whether the store answers (readiness): always in memory; on Redis, both connections.
    fn is_healthy(&self) -> bool;

    /// Removes what has outlived its time (an unbound key, a grace, a tombstone) from this
    /// node's records; Redis expires its own entries.
    fn expire(&self);
}

/// The agents' call rate: `per_sec` calls a second for each of `count` agents.
fn agent_limiters(count: usize, per_sec: u32) -> Vec<DefaultDirectRateLimiter> {
    let per_sec = NonZeroU32::new(per_sec).unwrap_or(NonZeroU32::MIN);
    (0..count)
        .map(|_| RateLimiter::direct(Quota::per_second(per_sec)))
        .collect()
}

/// One node: every key's state is in this process.
pub struct MemoryStore {
    keys: Arc<Keys>,
    tokens: DefaultKeyedRateLimiter<IpAddr>,
    /// Each agent's call rate (same order as the agent secrets).
    agents: Vec<DefaultDirectRateLimiter>,
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
            agents: Vec::new(),
            claims: Idempotency::default(),
            bound,
        }
    }

    /// `count` agents, each allowed `per_sec` calls a second.
    pub fn with_agents(mut self, count: usize, per_sec: u32) -> Self {
        self.agents = agent_limiters(count, per_sec);
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
            remote: false,
        }))
    }

    async fn bind(
        &self,
        key: &str,
        proof: Proof,
        socket: &TabSocket,
    ) -> Result<BindOutcome, StoreError> {
        Ok(BindOutcome {
            bound: self
                .keys
                .bind(key, proof, socket)
                .map(|displaced| Bound::Bound { displaced }),
            replaced_elsewhere: false,
        })
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

    fn admit_agent(&self, agent: usize) -> bool {
        self.agents
            .get(agent)
            .is_some_and(|limiter| limiter.check().is_ok())
    }

    async fn track<'a>(&'a self, key: &'a str, _agent: usize) -> Result<Track<'a>, TrackError> {
        let slot = self.keys.acquire(key).map_err(|e| match e {
            AcquireError::Unknown => TrackError::Unknown,
            AcquireError::TooMany => TrackError::TooMany,
        })?;
        Ok(Track::Memory(MemoryTrack::new(&self.keys, key, slot)))
    }

    fn is_healthy(&self) -> bool {
        true
    }

    fn expire(&self) {
        self.keys.sweep();
        self.tokens.retain_recent();
        self.claims.sweep();
    }
}

/// Several nodes: Redis holds every key's state; `local` keeps this node's live bindings and
/// follows what Redis accepted.
pub struct RedisStore {
    cluster: Arc<Cluster>,
    local: Arc<Keys>,
    tokens_per_min: u32,
    /// Each agent's shared call-rate window (a digest prefix of its secret, never the secret).
    agent_buckets: Vec<String>,
    agent_rate: u32,
    bound: ReplayBound,
}

impl RedisStore {
    /// `tokens_per_min`: tokens one client address may get per minute, over all nodes.
    pub fn new(
        cluster: Arc<Cluster>,
        local: Arc<Keys>,
        tokens_per_min: u32,
        bound: ReplayBound,
    ) -> Self {
        RedisStore {
            cluster,
            local,
            tokens_per_min,
            agent_buckets: Vec::new(),
            agent_rate: 0,
            bound,
        }
    }

    /// The agents, by the SHA-256 of their secrets, each allowed `per_sec` calls a second over
    /// every node.
    pub fn with_agents(mut self, digests: &[[u8; 32]], per_sec: u32) -> Self {
        self.agent_buckets = digests.iter().map(agent_bucket).collect();
        self.agent_rate = per_sec;
        self
    }

    /// The cluster client this store runs on.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }
}

/// The name of an agent's shared rate window: a digest prefix, never the secret.
fn agent_bucket(digest: &[u8; 32]) -> String {
    format!("a:{}", hex::encode(&digest[..8]))
}

impl KeyStore for RedisStore {
    async fn issue(&self, key: &str, exp_unix: u64) -> Result<(), StoreError> {
        self.cluster.issue(&cluster::rid(key), exp_unix).await?;
        self.local.issue(key, exp_unix);
        Ok(())
    }

    async fn is_revoked(&self, key: &str) -> Result<bool, StoreError> {
        self.cluster.is_revoked(&cluster::rid(key)).await
    }

    async fn status(&self, key: &str) -> Result<Option<KeyStatus>, StoreError> {
        let stored = self.cluster.status(&cluster::rid(key)).await?;
        Ok(stored.map(|s| {
            let now_ms = crate::tokens::unix_now_ms();
            KeyStatus {
                ok: true,
                state: s.state,
                fingerprint: crate::config::fingerprint(key),
                since_ms: s.since_ms,
                grace_ends_ms: (s.state == KeyState::Offline)
                    .then(|| now_ms + s.ttl_ms.unwrap_or(0)),
            }
        }))
    }

    async fn revoke(&self, key: &str) -> Result<Option<Revocation>, StoreError> {
        match self.cluster.revoke(&cluster::rid(key)).await? {
            cluster::Revoked::Unknown => Ok(None),
            cluster::Revoked::Done { online_on } => {
                // The local record follows Redis (a tombstone here too).
                let local = self.local.revoke(key).flatten();
                let remote = online_on
                    .as_deref()
                    .is_some_and(|n| n != self.cluster.node());
                Ok(Some(Revocation { local, remote }))
            }
        }
    }

    async fn bind(
        &self,
        key: &str,
        proof: Proof,
        socket: &TabSocket,
    ) -> Result<BindOutcome, StoreError> {
        let token_exp = match proof {
            Proof::Token { exp } => Some(exp),
            Proof::BareKey => None,
        };
        let sid = socket.id().to_string();
        let (exp_unix, replaced) = match self
            .cluster
            .bind(&cluster::rid(key), &sid, token_exp)
            .await?
        {
            Err(refused) => {
                return Ok(BindOutcome {
                    bound: Err(refused),
                    replaced_elsewhere: false,
                });
            }
            Ok(cluster::Bound::Same) => {
                return Ok(BindOutcome {
                    bound: Ok(Bound::Same),
                    replaced_elsewhere: false,
                });
            }
            Ok(cluster::Bound::Bound { exp_unix, replaced }) => (exp_unix, replaced),
        };
        let replaced_elsewhere = replaced.is_some_and(|(node, _)| node != self.cluster.node());
        // Redis accepted the bind: the local record follows it.
        let bound = match self.local.bind(key, Proof::Token { exp: exp_unix }, socket) {
            Ok(displaced) => Ok(Bound::Bound { displaced }),
            Err(err) => {
                // Only when this node's own record disagrees with Redis (a tombstone from
                // before Redis lost its data): undo the shared half.
                self.release(key, socket).await;
                Err(err)
            }
        };
        Ok(BindOutcome {
            bound,
            replaced_elsewhere,
        })
    }

    async fn release(&self, key: &str, socket: &TabSocket) {
        self.local.release(key, socket.id());
        let released = self
            .cluster
            .release(&cluster::rid(key), &socket.id().to_string())
            .await;
        if released.is_err() {
            tracing::debug!(key = %relay_wire::Fp(key), "release not recorded in Redis");
        }
    }

    async fn take_token(&self, ip: IpAddr) -> Result<bool, StoreError> {
        let bucket = format!("t:{ip}");
        let window = Duration::from_secs(60);
        self.cluster
            .rate(&bucket, self.tokens_per_min, window)
            .await
    }

    async fn claim(
        &self,
        key: &str,
        idem: &str,
        fingerprint: u64,
        timeout: Duration,
    ) -> Result<Claimed, StoreError> {
        // Boxed: the polling loop's state must not grow every single-node call's future.
        let claimed =
            claims::claim_redis(&self.cluster, self.bound, key, idem, fingerprint, timeout);
        Box::pin(claimed).await
    }

    fn admit_agent(&self, _agent: usize) -> bool {
        true
    }

    async fn track<'a>(&'a self, key: &'a str, agent: usize) -> Result<Track<'a>, TrackError> {
        let rid = cluster::rid(key);
        // Watching before the first read, so no change between the read and the wait is missed.
        let watch = self.cluster.watch(&rid);
        let mark = watch.mark();
        let fallback;
        let bucket = match self.agent_buckets.get(agent) {
            Some(b) => b.as_str(),
            None => {
                fallback = agent_bucket(&[0; 32]);
                fallback.as_str()
            }
        };
        let rate = AgentRate {
            bucket,
            limit: self.agent_rate,
            window: Duration::from_secs(1),
        };
        let held = match self.cluster.acquire(&rid, &rate).await? {
            (Acquired::Ok, Some(held)) => held,
            (Acquired::TooMany, _) => return Err(TrackError::TooMany),
            (Acquired::RateLimited, _) => return Err(TrackError::RateLimited),
            (Acquired::Ok | Acquired::Unknown, _) => return Err(TrackError::Unknown),
        };
        let track = RedisTrack::new(&self.cluster, &self.local, key, rid, watch, mark, held);
        Ok(Track::Redis(Box::new(track)))
    }

    fn is_healthy(&self) -> bool {
        self.cluster.is_healthy()
    }

    fn expire(&self) {
        self.local.sweep();
    }
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

    fn admit_agent(&self, agent: usize) -> bool {
        each!(self, s => s.admit_agent(agent))
    }

    async fn track<'a>(&'a self, key: &'a str, agent: usize) -> Result<Track<'a>, TrackError> {
        match self {
            Store::Memory(s) => s.track(key, agent).await,
            // Boxed: the slot's round trip must not grow every single-node call's future.
            Store::Redis(s) => Box::pin(s.track(key, agent)).await,
        }
    }

    fn is_healthy(&self) -> bool {
        each!(self, s => s.is_healthy())
    }

    fn expire(&self) {
        each!(self, s => s.expire())
    }
}
