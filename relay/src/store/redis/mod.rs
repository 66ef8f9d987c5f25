//! Several relay nodes on one Redis (`RELAY_REDIS_URL`).
//!
//! What every node must agree on lives in Redis: each key's state (issued, online on which node
//! and socket, offline, revoked) with a TTL matching the in-memory lifecycle, in-flight counts,
//! idempotency outcomes and the rate-limit windows. Every state change is one Lua script, so two
//! nodes never interleave halfway through a transition, and each script publishes the key on
//! [`EVENTS`] so the nodes' waiting calls re-read it at once (they also re-read every second, so
//! a lost message costs at most that).
//!
//! Emits and acknowledgements for a tab on another node go through the Socket.IO Redis adapter
//! to the room named after the key; a tab on this node is reached directly.
//!
//! Nodes heartbeat into one hash (Redis's clock, so node clocks may differ). A node whose
//! heartbeat is older than [`NODE_STALE`] is reaped by whichever node sees it first: its online
//! keys go offline for the reconnect grace, so calls wait for their tabs to re-bind elsewhere. A
//! node that finds its own heartbeat gone (Redis restarted empty, or it was reaped while
//! unreachable) writes its live bindings back.
//!
//! Keys are stored under a digest of the key, never the key itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use redis::Value;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use relay_wire::RevokeReason;

use crate::error::ApiError;
use crate::pubsub::PubSub;
use crate::store::lifecycle::BindError;
use crate::tokens::unix_now_ms;

/// The channel every key change is published on (the payload is the key's Redis name).
pub const EVENTS: &str = "va:events";
const KEY_PREFIX: &str = "va:k:";
const NODE_KEYS_PREFIX: &str = "va:nk:";
const NODES: &str = "va:nodes";
/// Socket.IO adapter channel prefix.
pub const ADAPTER_PREFIX: &str = "va-relay";

/// How often a node heartbeats and looks for lost nodes.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A node silent for this long is taken for lost.
pub const NODE_STALE: Duration = Duration::from_secs(3);
/// Bound on one Redis operation.
const OP_TIMEOUT: Duration = Duration::from_secs(1);
/// Waiting calls re-read their key at least this often, whatever the events say.
pub const RECHECK: Duration = Duration::from_secs(1);
/// How long an online key outlives its token's expiry in Redis (a live binding outlives its
/// token, as in memory; a lost node's keys are reaped long before this).
const ONLINE_EXTRA: Duration = Duration::from_secs(24 * 3600);

/// The digest a key is stored, published and roomed under.
pub fn rid(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    hex::encode(&digest[..16])
}

/// A Redis operation failed or took too long.
#[derive(Debug, thiserror::Error)]
#[error("the shared state store is unreachable")]
pub struct StoreError;

impl From<StoreError> for ApiError {
    fn from(_: StoreError) -> ApiError {
        ApiError::unavailable()
    }
}

/// Where a key's tab is, as Redis says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Never issued, removed or revoked.
    Unknown,
    /// Issued or offline: a call waits for a tab.
    Waiting,
    Online {
        node: String,
        sid: String,
    },
}

/// The outcome of a bind in Redis.
pub enum Bound {
    /// This socket already held the key.
    Same,
    /// Bound; `replaced` names the node and socket that held it before.
    Bound {
        exp_unix: u64,
        replaced: Option<(String, String)>,
    },
}

/// A key's state for `GET /api/voice-agent/keys/{apiKey}`.
pub struct StoredStatus {
    pub state: relay_wire::KeyState,
    pub since_ms: u64,
    pub ttl_ms: Option<u64>,
}

/// What a revoke found.
pub enum Revoked {
    Unknown,
    /// Revoked; the node that held the tab, if it was online.
    Done {
        online_on: Option<String>,
    },
}

pub enum IdemClaim {
    Run,
    Conflict,
    Pending { until_ms: u64 },
    Done { status: u16, body: Vec<u8> },
}

pub enum Acquired {
    Ok,
    Unknown,
    TooMany,
    /// The agent's shared call rate is spent.
    RateLimited,
}

/// An agent's shared call-rate window, checked with the in-flight slot.
pub struct AgentRate<'a> {
    pub bucket: &'a str,
    pub limit: u32,
    pub window: Duration,
}

/// The Redis name of the current fixed window of `bucket`, and the window's length in ms.
fn rate_window(bucket: &str, window: Duration) -> (String, u64) {
    let window_ms = ms(window).max(1);
    (
        format!("va:rl:{bucket}:{}", unix_now_ms() / window_ms),
        window_ms,
    )
}

/// An online key whose node has not heartbeaten for this long is treated as offline by calls.
pub const NODE_SUSPECT: Duration = Duration::from_millis(2500);

mod scripts;
use scripts::Scripts;

/// Lifecycle settings shared by every node (they should be configured alike).
pub struct Settings {
    pub grace: Duration,
    pub unbound_ttl: Duration,
    pub max_inflight: usize,
    /// How long an in-flight counter survives without calls (a lost node's count fades).
    pub inflight_ttl: Duration,
}

pub struct Cluster {
    node: String,
    conn: ConnectionManager,
    pubsub: PubSub,
    healthy: AtomicBool,
    /// Whether the subscribing connection answered its last ping.
    listening: AtomicBool,
    waiters: DashMap<String, Arc<KeyEvents>>,
    scripts: Scripts,
    settings: Settings,
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Adds `protocol=resp3` (pushed pub/sub messages need it) unless the URL says otherwise.
fn with_resp3(url: &str) -> String {
    if url.contains("protocol=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&protocol=resp3")
    } else {
        format!("{url}?protocol=resp3")
    }
}

fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(OP_TIMEOUT))
        .set_response_timeout(Some(OP_TIMEOUT))
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500))
        .set_number_of_retries(2)
}

impl Cluster {
    /// Connects to Redis (failing at once when it is unreachable) and starts listening for key
    /// events. Returns the cluster and the pub/sub driver the Socket.IO adapter should use.
    pub async fn connect(url: &str, settings: Settings) -> anyhow::Result<Arc<Cluster>> {
        let client = redis::Client::open(with_resp3(url))
            .map_err(|e| anyhow::anyhow!("RELAY_REDIS_URL is not a Redis URL: {e}"))?;
        let conn = tokio::time::timeout(
            OP_TIMEOUT * 5,
            ConnectionManager::new_with_config(client.clone(), manager_config()),
        )
        .await
        .map_err(|_| anyhow::anyhow!("Redis did not answer within 5 s"))?
        .map_err(|e| anyhow::anyhow!("cannot connect to Redis: {e}"))?;
        let pubsub = PubSub::connect(client, manager_config())
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to Redis for pub/sub: {e}"))?;
        let version = redis_major_version(&mut conn.clone()).await;
        if version.is_some_and(|v| v < 7) {
            anyhow::bail!("Redis 7 or newer is needed (RESP3 pub/sub); this server is older");
        }
        let mut node = [0u8; 8];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut node);
        let cluster = Arc::new(Cluster {
            node: hex::encode(node),
            conn,
            pubsub,
            healthy: AtomicBool::new(true),
            listening: AtomicBool::new(true),
            waiters: DashMap::new(),
            scripts: Scripts::new(),
            settings,
        });
        cluster.clone().listen().await?;
        // Announced before serving: a tab bound here must never look like it is on a lost node.
        cluster
            .heartbeat()
            .await
            .map_err(|_| anyhow::anyhow!("Redis did not take this node's heartbeat"))?;
        Ok(cluster)
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn pubsub(&self) -> PubSub {
        self.pubsub.clone()
    }

    /// Both connections to Redis answer.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire) && self.listening.load(Ordering::Acquire)
    }

    pub async fn ping_listener(&self) {
        let ok = matches!(
            tokio::time::timeout(OP_TIMEOUT, self.pubsub.ping()).await,
            Ok(Ok(()))
        );
        if self.listening.swap(ok, Ordering::AcqRel) != ok {
            tracing::info!(ok, "Redis pub/sub connection");
        }
    }

    async fn listen(self: Arc<Self>) -> anyhow::Result<()> {
        use futures_util::StreamExt;
        use socketioxide_redis::drivers::Driver;
        let mut events = self
            .pubsub
            .subscribe(EVENTS.to_owned(), 4096)
            .await
            .map_err(|e| anyhow::anyhow!("cannot subscribe to key events: {e}"))?;
        let weak = Arc::downgrade(&self);
        tokio::spawn(async move {
            while let Some((_, body)) = events.next().await {
                let Some(cluster) = weak.upgrade() else { break };
                let Some(rid) = std::str::from_utf8(&body)
                    .ok()
                    .and_then(|k| k.strip_prefix(KEY_PREFIX))
                else {
                    continue;
                };
                if let Some(events) = cluster.waiters.get(rid) {
                    events.changed();
                }
            }
        });
        Ok(())
    }

    /// Runs one Redis operation within [`OP_TIMEOUT`], recording whether Redis answered.
    async fn op<T>(
        &self,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(OP_TIMEOUT, fut).await {
            Ok(Ok(v)) => {
                self.healthy.store(true, Ordering::Release);
                Ok(v)
            }
            Ok(Err(err)) => {
                if self.healthy.swap(false, Ordering::AcqRel) {
                    tracing::warn!(cause = %err, "Redis unreachable");
                }
                Err(StoreError)
            }
            Err(_) => {
                if self.healthy.swap(false, Ordering::AcqRel) {
                    tracing::warn!("Redis did not answer in time");
                }
                Err(StoreError)
            }
        }
    }

    fn key_name(rid: &str) -> String {
        format!("{KEY_PREFIX}{rid}")
    }

    fn node_keys(node: &str) -> String {
        format!("{NODE_KEYS_PREFIX}{node}")
    }

    pub async fn issue(&self, rid: &str, exp_unix: u64) -> Result<(), StoreError> {
        let now = unix_now_ms();
        let exp = exp_unix * 1000;
        let ttl = exp
            .saturating_sub(now)
            .min(ms(self.settings.unbound_ttl))
            .max(1);
        let mut inv = self.scripts.issue.key(Self::key_name(rid));
        inv.arg(now).arg(exp).arg(ttl);
        self.op(inv.invoke_async::<i64>(&mut self.conn.clone()))
            .await
            .map(drop)
    }

    /// Binds the key to `sid` on this node. `token_exp_unix` is `None` for a bare key.
    pub async fn bind(
        &self,
        rid: &str,
        sid: &str,
        token_exp_unix: Option<u64>,
    ) -> Result<Result<Bound, BindError>, StoreError> {
        let now = unix_now_ms();
        let mut inv = self.scripts.bind.key(Self::key_name(rid));
        inv.key(Self::node_keys(&self.node)).key(EVENTS);
        inv.arg(now)
            .arg(&self.node)
            .arg(sid)
            .arg(if token_exp_unix.is_some() { "t" } else { "b" })
            .arg(token_exp_unix.unwrap_or(0) * 1000)
            .arg(ms(ONLINE_EXTRA))
            .arg(NODE_KEYS_PREFIX);
        let reply: Vec<String> = self.op(inv.invoke_async(&mut self.conn.clone())).await?;
        let word = |i: usize| reply.get(i).map(String::as_str);
        Ok(match (word(0), word(1)) {
            (Some("same"), _) => Ok(Bound::Same),
            (Some("bound"), Some(exp)) => Ok(Bound::Bound {
                exp_unix: exp.parse::<u64>().unwrap_or(0) / 1000,
                replaced: match (word(2), word(3)) {
                    (Some(node), Some(sid)) => Some((node.to_owned(), sid.to_owned())),
                    _ => None,
                },
            }),
            (Some("err"), Some("revoked")) => Err(BindError::Revoked),
            (Some("err"), Some("token_required")) => Err(BindError::TokenRequired),
            (Some("err"), Some("expired")) => Err(BindError::Expired),
            _ => Err(BindError::Unknown),
        })
    }

    /// The socket `sid` of this node left: its key goes offline for the grace (if still its).
    pub async fn release(&self, rid: &str, sid: &str) -> Result<(), StoreError> {
        let mut inv = self.scripts.release.key(Self::key_name(rid));
        inv.key(Self::node_keys(&self.node)).key(EVENTS);
        inv.arg(unix_now_ms())
            .arg(&self.node)
            .arg(sid)
            .arg(ms(self.settings.grace));
        self.op(inv.invoke_async::<i64>(&mut self.conn.clone()))
            .await
            .map(drop)
    }

    pub async fn revoke(&self, rid: &str) -> Result<Revoked, StoreError> {
        let mut inv = self.scripts.revoke.key(Self::key_name(rid));
        inv.key(EVENTS);
        inv.arg(unix_now_ms()).arg(NODE_KEYS_PREFIX);
        let reply: Vec<String> = self.op(inv.invoke_async(&mut self.conn.clone())).await?;
        Ok(match reply.first().map(String::as_str) {
            Some("revoked") => Revoked::Done {
                online_on: reply.get(1).cloned(),
            },
            _ => Revoked::Unknown,
        })
    }

    pub async fn is_revoked(&self, rid: &str) -> Result<bool, StoreError> {
        let st: Option<String> = self
            .op(redis::cmd("HGET")
                .arg(Self::key_name(rid))
                .arg("st")
                .query_async(&mut self.conn.clone()))
            .await?;
        Ok(st.as_deref() == Some("revoked"))
    }

    pub async fn status(&self, rid: &str) -> Result<Option<StoredStatus>, StoreError> {
        let name = Self::key_name(rid);
        let ((st, since), ttl): ((Option<String>, Option<u64>), i64) = self
            .op(redis::pipe()
                .cmd("HMGET")
                .arg(&name)
                .arg("st")
                .arg("since")
                .cmd("PTTL")
                .arg(&name)
                .query_async(&mut self.conn.clone()))
            .await?;
        use relay_wire::KeyState;
        let state = match st.as_deref() {
            Some("issued") => KeyState::Issued,
            Some("online") => KeyState::Online,
            Some("offline") => KeyState::Offline,
            _ => return Ok(None),
        };
        Ok(Some(StoredStatus {
            state,
            since_ms: since.unwrap_or(0),
            ttl_ms: u64::try_from(ttl).ok(),
        }))
    }

    pub async fn lookup(&self, rid: &str) -> Result<Place, StoreError> {
        let mut inv = self.scripts.lookup.key(Self::key_name(rid));
        inv.key(NODES);
        inv.arg(ms(NODE_SUSPECT));
        let reply: Vec<String> = self.op(inv.invoke_async(&mut self.conn.clone())).await?;
        let mut words = reply.into_iter();
        Ok(
            match (words.next().as_deref(), words.next(), words.next()) {
                (Some("online"), Some(node), Some(sid)) => Place::Online { node, sid },
                (Some("waiting"), _, _) => Place::Waiting,
                _ => Place::Unknown,
            },
        )
    }

    /// Takes one call from the agent's rate window and one of the key's in-flight slots, both
    /// counted across nodes, and tells where the key's tab is: one round trip for all three.
    pub async fn acquire(
        self: &Arc<Self>,
        rid: &str,
        agent: &AgentRate<'_>,
    ) -> Result<(Acquired, Option<(Slot, Place)>), StoreError> {
        let counter = format!("va:if:{rid}");
        let (window_key, window_ms) = rate_window(agent.bucket, agent.window);
        let mut inv = self.scripts.acquire.key(Self::key_name(rid));
        inv.key(&counter).key(NODES).key(window_key);
        inv.arg(self.settings.max_inflight)
            .arg(ms(self.settings.inflight_ttl))
            .arg(ms(NODE_SUSPECT))
            .arg(agent.limit)
            .arg(window_ms);
        let reply: Vec<String> = self.op(inv.invoke_async(&mut self.conn.clone())).await?;
        let mut words = reply.into_iter();
        Ok(match words.next().as_deref() {
            Some("ok") => {
                let place = match (words.next(), words.next()) {
                    (Some(node), Some(sid)) => Place::Online { node, sid },
                    _ => Place::Waiting,
                };
                let slot = Slot {
                    cluster: self.clone(),
                    counter,
                };
                (Acquired::Ok, Some((slot, place)))
            }
            Some("busy") => (Acquired::TooMany, None),
            Some("rate") => (Acquired::RateLimited, None),
            _ => (Acquired::Unknown, None),
        })
    }

    /// One step of a fixed-window limit shared by every node: false when `limit` is spent.
    pub async fn rate(
        &self,
        bucket: &str,
        limit: u32,
        window: Duration,
    ) -> Result<bool, StoreError> {
        let (name, window_ms) = rate_window(bucket, window);
        let mut inv = self.scripts.rate.key(name);
        inv.arg(limit).arg(window_ms);
        let ok: i64 = self.op(inv.invoke_async(&mut self.conn.clone())).await?;
        Ok(ok == 1)
    }

    fn idem_name(rid: &str, idem: &str) -> String {
        format!("va:idem:{rid}:{idem}")
    }

    pub async fn idem_claim(
        &self,
        rid: &str,
        idem: &str,
        fingerprint: u64,
        until_ms: u64,
        window: Duration,
    ) -> Result<IdemClaim, StoreError> {
        let mut inv = self.scripts.idem_claim.key(Self::idem_name(rid, idem));
        inv.arg(fingerprint.to_string())
            .arg(until_ms)
            .arg(ms(window));
        let reply: Vec<Value> = self.op(inv.invoke_async(&mut self.conn.clone())).await?;
        let text = |i: usize| -> Option<String> {
            reply
                .get(i)
                .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
        };
        Ok(match text(0).as_deref() {
            Some("run") => IdemClaim::Run,
            Some("done") => IdemClaim::Done {
                status: text(1).and_then(|s| s.parse().ok()).unwrap_or(500),
                body: reply
                    .get(2)
                    .and_then(|v| redis::from_redis_value_ref::<Vec<u8>>(v).ok())
                    .unwrap_or_default(),
            },
            Some("pending") => IdemClaim::Pending {
                until_ms: text(1).and_then(|s| s.parse().ok()).unwrap_or(0),
            },
            _ => IdemClaim::Conflict,
        })
    }

    pub async fn idem_record(
        &self,
        rid: &str,
        idem: &str,
        status: u16,
        body: &[u8],
    ) -> Result<(), StoreError> {
        self.op(redis::cmd("HSET")
            .arg(Self::idem_name(rid, idem))
            .arg("status")
            .arg(status)
            .arg("body")
            .arg(body)
            .query_async::<i64>(&mut self.conn.clone()))
            .await
            .map(drop)
    }

    /// Registers interest in a key's changes (see [`Watch`]).
    pub fn watch(&self, rid: &str) -> Watch<'_> {
        let events = self.waiters.entry(rid.to_owned()).or_default().clone();
        Watch {
            cluster: self,
            rid: rid.to_owned(),
            events,
        }
    }

    /// Heartbeats; true when this node's entry was missing before (first beat, Redis lost its
    /// data, or other nodes took this one for lost).
    pub async fn heartbeat(&self) -> Result<bool, StoreError> {
        let mut inv = self.scripts.heartbeat.key(NODES);
        inv.arg(&self.node);
        let created: i64 = self.op(inv.invoke_async(&mut self.conn.clone())).await?;
        Ok(created == 1)
    }

    /// Marks the keys of lost nodes offline; returns how many.
    pub async fn reap(&self) -> Result<u64, StoreError> {
        let mut inv = self.scripts.reap.key(NODES);
        inv.key(EVENTS);
        inv.arg(ms(NODE_STALE))
            .arg(ms(self.settings.grace))
            .arg(NODE_KEYS_PREFIX)
            .arg(unix_now_ms());
        self.op(inv.invoke_async(&mut self.conn.clone())).await
    }

    /// Writes a live local binding back into Redis. Returns why the binding cannot stand, if
    /// Redis had the key revoked or bound to another socket meanwhile.
    pub async fn reassert(
        &self,
        rid: &str,
        sid: &str,
        token_exp_unix: u64,
    ) -> Result<Option<RevokeReason>, StoreError> {
        let now = unix_now_ms();
        let exp = token_exp_unix * 1000;
        let ttl = exp.saturating_sub(now) + ms(ONLINE_EXTRA);
        let mut inv = self.scripts.reassert.key(Self::key_name(rid));
        inv.key(Self::node_keys(&self.node)).key(EVENTS);
        inv.arg(now).arg(&self.node).arg(sid).arg(exp).arg(ttl);
        let reply: String = self.op(inv.invoke_async(&mut self.conn.clone())).await?;
        Ok(match reply.as_str() {
            "revoked" => Some(RevokeReason::Revoked),
            "elsewhere" => Some(RevokeReason::Replaced),
            _ => None,
        })
    }

    /// Leaves the cluster: this node's entry is marked stale and reaped at once, so keys whose
    /// release did not reach Redis go offline now rather than when their TTL ends.
    pub async fn leave(&self) {
        let marked = self
            .op(redis::cmd("HSET")
                .arg(NODES)
                .arg(&self.node)
                .arg(0)
                .query_async::<i64>(&mut self.conn.clone()))
            .await;
        if marked.is_ok() {
            let _ = self.reap().await;
        }
    }
}

async fn redis_major_version(conn: &mut ConnectionManager) -> Option<u32> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .ok()?;
    let line = info.lines().find(|l| l.starts_with("redis_version:"))?;
    line["redis_version:".len()..]
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// The changes published for one key that calls of this node wait on: a counter of changes
/// seen, and a wake-up for its waiters.
#[derive(Default)]
pub struct KeyEvents {
    seen: AtomicU64,
    notify: Notify,
}

impl KeyEvents {
    fn changed(&self) {
        self.seen.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }
}

/// Interest in one key's changes; dropped when the call stops waiting.
pub struct Watch<'a> {
    cluster: &'a Cluster,
    rid: String,
    events: Arc<KeyEvents>,
}

impl Watch<'_> {
    /// A mark of the changes seen so far: read it before reading the key, then wait with
    /// [`Watch::changed_since`], and no change between the read and the wait is missed.
    pub fn mark(&self) -> u64 {
        self.events.seen.load(Ordering::Acquire)
    }

    /// Resolves once the key changed after `mark` was taken.
    pub async fn changed_since(&self, mark: u64) {
        loop {
            let notified = self.events.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.mark() != mark {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        // The map holds one reference and this watch another: when no one else waits, remove.
        self.cluster
            .waiters
            .remove_if(&self.rid, |_, n| Arc::strong_count(n) <= 2);
    }
}

/// One in-flight slot of a key; given back on drop.
pub struct Slot {
    cluster: Arc<Cluster>,
    counter: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let cluster = self.cluster.clone();
        let counter = std::mem::take(&mut self.counter);
        tokio::spawn(async move {
            let _ = cluster
                .op(redis::cmd("DECR")
                    .arg(counter)
                    .query_async::<i64>(&mut cluster.conn.clone()))
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_resp3_unless_they_choose() {
        assert_eq!(
            with_resp3("redis://h:6379"),
            "redis://h:6379?protocol=resp3"
        );
        assert_eq!(
            with_resp3("redis://h:6379/2?x=1"),
            "redis://h:6379/2?x=1&protocol=resp3"
        );
        assert_eq!(
            with_resp3("redis://h?protocol=resp2"),
            "redis://h?protocol=resp2"
        );
    }

    #[test]
    fn stored_names_never_hold_the_key() {
        let key = format!("va_{}", "ab".repeat(32));
        let id = rid(&key);
        assert_eq!(id.len(), 32);
        assert!(!id.contains(&key[3..19]));
        assert_eq!(id, rid(&key));
        assert_ne!(id, rid(&format!("va_{}", "cd".repeat(32))));
    }
}
