//! The Redis store: Redis holds every key's state for all nodes ([`Cluster`]); this node's
//! [`Keys`] follows what Redis accepted with the bindings of its own sockets.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use relay_wire::{Declaration, KeyState, KeyStatus};
use tokio::time::Instant;

use super::claims::{self, Claimed, ReplayBound};
use super::keys::{Keys, NotBound, Proof};
use super::redis::{self as cluster, Acquired, Admit, Cluster, SessionCall, StoreError};
use super::sessions::{SessionLimits, session_tag};
use super::track::{RedisTrack, Ticket, Track, TrackError};
use super::{BindOutcome, Bound, KeyStore, Revocation, TabAt};
use crate::sockets::TabSocket;

/// Several nodes: Redis holds every key's state; `local` keeps this node's live bindings and
/// follows what Redis accepted.
pub struct RedisStore {
    cluster: Arc<Cluster>,
    local: Arc<Keys>,
    tokens_per_min: u32,
    /// What one agent session may take of its key, over every node.
    limits: SessionLimits,
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
            limits: SessionLimits::default(),
            bound,
        }
    }

    /// Each agent session held to `limits`, over every node.
    pub fn with_sessions(mut self, limits: SessionLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The cluster client this store runs on.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }
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
            let mut status = KeyStatus {
                ok: true,
                state: s.state,
                fingerprint: crate::config::fingerprint(key),
                since_ms: s.since_ms,
                grace_ends_ms: (s.state == KeyState::Offline)
                    .then(|| now_ms + s.ttl_ms.unwrap_or(0)),
                token_expires_ms: s.token_exp_ms,
                revision: 0,
                handles: None,
                page_tools: None,
                mode: None,
            };
            s.tab.describe(&mut status);
            status
        }))
    }

    async fn revoke(&self, key: &str) -> Result<Option<Revocation>, StoreError> {
        match self.cluster.revoke(&cluster::rid(key)).await? {
            cluster::Revoked::Unknown => Ok(None),
            cluster::Revoked::Done { online_on } => {
                // The local record follows Redis (a tombstone here too).
                let local = self.local.revoke(key).flatten();
                let remote = online_on.filter(|n| n != self.cluster.node());
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
        let (exp_unix, replaced, mode) = match self
            .cluster
            .bind(&cluster::rid(key), &sid, token_exp)
            .await?
        {
            Err(refused) => {
                return Ok(BindOutcome {
                    bound: Err(refused),
                    replaced_on: None,
                    mode: None,
                });
            }
            Ok(cluster::Bound::Same) => {
                return Ok(BindOutcome {
                    bound: Ok(Bound::Same),
                    replaced_on: None,
                    mode: None,
                });
            }
            Ok(cluster::Bound::Bound {
                exp_unix,
                replaced,
                mode,
            }) => (exp_unix, replaced, mode),
        };
        let replaced_on = replaced
            .map(|(node, _)| node)
            .filter(|node| node != self.cluster.node());
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
            replaced_on,
            mode: mode.map(Into::into),
        })
    }

    async fn declare(
        &self,
        key: &str,
        socket: &TabSocket,
        declared: Declaration,
    ) -> Result<Result<u64, NotBound>, StoreError> {
        let sid = socket.id().to_string();
        Ok(
            match self
                .cluster
                .declare(&cluster::rid(key), &sid, &declared)
                .await?
            {
                cluster::Declared::Revision(revision) => Ok(revision),
                cluster::Declared::NotBound => Err(NotBound),
            },
        )
    }

    async fn set_mode(&self, key: &str, mode: &str) -> Result<Option<TabAt>, StoreError> {
        Ok(
            match self.cluster.set_mode(&cluster::rid(key), mode).await? {
                cluster::Place::Unknown => None,
                cluster::Place::Waiting => Some(TabAt::Nowhere),
                cluster::Place::Online { node, .. } if node == self.cluster.node() => {
                    Some(match self.local.local_binding(key) {
                        Some((binding, _)) => TabAt::Here(binding),
                        // Redis names this node, but the socket is gone: it re-binds somewhere and
                        // is told the mode then.
                        None => TabAt::Nowhere,
                    })
                }
                cluster::Place::Online { .. } => Some(TabAt::Elsewhere),
            },
        )
    }

    async fn wait_status(
        &self,
        key: &str,
        after: u64,
        deadline: Instant,
    ) -> Result<Option<KeyStatus>, StoreError> {
        let rid = cluster::rid(key);
        // Watching before each read, so no change between the read and the wait is missed; in
        // the key's watch in Redis before the first read, so its changes reach this node.
        let watch = self.cluster.watch(&rid);
        let _interest = self.cluster.interest(&rid).await?;
        loop {
            let mark = watch.mark();
            let Some(status) = self.status(key).await? else {
                return Ok(None);
            };
            if status.revision != after || Instant::now() >= deadline {
                return Ok(Some(status));
            }
            tokio::select! {
                _ = watch.changed_since(mark) => {}
                _ = tokio::time::sleep(cluster::RECHECK) => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
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

    async fn track<'a, 't>(
        &'a self,
        key: &'a str,
        session: &'t str,
        ticket: &'t Ticket<'t>,
    ) -> Result<Track<'a>, TrackError> {
        let rid = cluster::rid(key);
        // Watching before the first read, so no change between the read and the wait is missed.
        let watch = self.cluster.watch(&rid);
        let mark = watch.mark();
        let call = SessionCall {
            tag: session_tag(session),
            max_inflight: self.limits.max_inflight,
            rate_per_sec: self.limits.rate_per_sec,
        };
        let admit = Admit {
            session: &call,
            call_id: ticket.call_id,
            life: ticket.life,
            offer: ticket.offer,
        };
        let admitted = match self.cluster.acquire(&rid, &admit).await? {
            (Acquired::Ok, Some(admitted)) => admitted,
            (Acquired::TooMany, _) => return Err(TrackError::TooMany),
            (Acquired::SessionBusy, _) => return Err(TrackError::SessionBusy),
            (Acquired::RateLimited, _) => return Err(TrackError::RateLimited),
            (Acquired::Ended, _) => return Err(TrackError::Ended),
            (Acquired::Ok | Acquired::Unknown, _) => return Err(TrackError::Unknown),
        };
        let track = RedisTrack::new(&self.cluster, &self.local, key, rid, watch, mark, admitted);
        Ok(Track::Redis(Box::new(track)))
    }

    async fn end_session(&self, session: &str, exp: u64) -> Result<(), StoreError> {
        let Some(rid) = relay_wire::session::session_key_digest(session) else {
            return Ok(());
        };
        self.cluster
            .end_session(rid, session_tag(session), exp)
            .await
    }

    async fn session_ended(&self, session: &str) -> Result<bool, StoreError> {
        let Some(rid) = relay_wire::session::session_key_digest(session) else {
            return Ok(false);
        };
        self.cluster.session_ended(rid, session_tag(session)).await
    }

    fn is_healthy(&self) -> bool {
        self.cluster.is_healthy()
    }

    fn expire(&self) {
        self.local.sweep();
    }
}
