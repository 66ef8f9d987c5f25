//! Several relay nodes on one Redis (`RELAY_REDIS_URL`).
//!
//! What every node must agree on lives in Redis: each key's state (issued, online on which node
//! and socket, offline, revoked) with a TTL matching the in-memory lifecycle, in-flight counts,
//! idempotency outcomes and the rate-limit windows. Every state change is one Lua script, so two
//! nodes never interleave halfway through a transition, and each script tells the key's change
//! to the nodes waiting for it: the key's watch (`va:w:<rid>`, [`watch`]) holds its calls in
//! flight, each with its node, and the nodes waiting for its status; a change is published on
//! the channel of each node in it (`va:n:<node>`, [`NODE_PREFIX`]), which only that node
//! subscribes. A call's slot is taken by the script that admits it and given back when it ends
//! (later, with other work: on one server this node's next admission, on a Redis Cluster the
//! other slots waiting on the same server, [`releases`]), so a node hears a key's
//! events only while it waits for the key (its waiting
//! calls also re-read the key every second, so a lost message costs at most that). The same
//! channel carries the calls other nodes send this node for its tabs and the outcomes of the
//! calls it sent ([`Cluster::take_messages`]).
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
//!
//! A node talks to Redis on three connections ([`Lane`]s): one for its membership (heartbeat,
//! reaping, writing its bindings back, leaving), one for tabs (tokens, binds, releases,
//! declarations) and one for calls and the agent API (lookups, in-flight slots, rate windows,
//! idempotency). Redis answers each connection's commands in the order they came, so on one
//! connection a heartbeat or a call's lookup would wait behind every bind queued before it
//! (thousands, when the tabs of a lost node all reconnect here), and other nodes would take
//! this busy node for lost. On its own lane each waits only for Redis itself.
//!
//! On a Redis Cluster (`redis+cluster://`) every record of a key carries the key's digest as its
//! hash tag (`va:k:{<rid>}`, `va:w:{<rid>}`, …), so each key's script runs in one slot; the
//! steps that span slots (the heartbeat hash, the nodes' key sets, the agents' rate windows) are
//! separate commands around the key's script ([`sharded`]); the key events, the calls between
//! nodes and their outcomes go on the receiving node's sharded channel on the key's server
//! ([`shards`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dashmap::DashMap;

pub use answers::{
    Acquired, Admit, Admitted, Bound, Declared, IdemClaim, Place, Revoked, SessionCall,
    StoredStatus,
};
use channel::{MESSAGES, Messages};
use conn::{Conn, Lane, Lanes, Metered, cluster_config, manager_config, single_lanes};

use crate::pubsub::PubSub;
use crate::tokens::unix_now_ms;

/// A node's channel is this and the node's name: the key events it waits for (the payload is
/// the key's Redis name), and calls between nodes ([`Cluster::take_messages`]).
pub const NODE_PREFIX: &str = "va:n:";
const KEY_PREFIX: &str = "va:k:";
/// A key's watch: its calls in flight (field `n`) and the nodes waiting for its changes.
const WATCH_PREFIX: &str = "va:w:";
const NODE_KEYS_PREFIX: &str = "va:nk:";
const NODES: &str = "va:nodes";
/// Socket.IO adapter channel prefix.
pub const ADAPTER_PREFIX: &str = "va-relay";

/// How often a node heartbeats and looks for lost nodes.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A node silent for this long is taken for lost.
pub const NODE_STALE: Duration = Duration::from_secs(3);
/// Bound on one Redis operation.
pub(crate) const OP_TIMEOUT: Duration = Duration::from_secs(1);
/// Waiting calls re-read their key at least this often, whatever the events say.
pub const RECHECK: Duration = Duration::from_secs(1);
/// How long an online key outlives its token's expiry in Redis (a live binding outlives its
/// token, as in memory; a lost node's keys are reaped long before this).
const ONLINE_EXTRA: Duration = Duration::from_secs(24 * 3600);

/// The digest a key is stored, published and roomed under.
pub fn rid(key: &str) -> String {
    relay_wire::session::key_digest(key)
}

/// A Redis operation failed or took too long.
#[derive(Debug, thiserror::Error)]
#[error("the shared state store is unreachable")]
pub struct StoreError;

/// The Redis name of the current fixed window of `bucket`, and the window's length in ms.
fn rate_window(bucket: &str, window: Duration) -> (String, u64) {
    let window_ms = ms(window).max(1);
    (
        format!("va:rl:{bucket}:{}", unix_now_ms() / window_ms),
        window_ms,
    )
}

/// How long a session's call-rate window lasts.
const SESSION_WINDOW: Duration = Duration::from_secs(1);

/// The Redis names of a session's records beside its key's: its call-rate window (a bucket for
/// [`rate_window`]) and its end marker. Both carry the key's hash tag on a cluster. (Its calls in
/// flight are its slots in the key's watch.)
pub(super) struct SessionNames {
    window: String,
    ended: String,
}

/// An online key whose node has not heartbeaten for this long is treated as offline by calls.
pub const NODE_SUSPECT: Duration = Duration::from_millis(2500);

mod admit;
mod answers;
mod channel;
mod conn;
mod follow;
mod forms;
mod hints;
mod keys;
mod link;
mod nodes;
mod releases;
mod scripts;
mod servers;
mod sharded;
mod sharded_ops;
mod shards;
mod watch;

pub(crate) use link::explain;
use link::{Link, redis_version, server_info, version_of};

pub use releases::FOLD_WITHIN;
use scripts::Scripts;
pub use watch::{Interest, KeyEvents, Slot, Watch};

/// Lifecycle settings shared by every node (they should be configured alike).
#[derive(Clone)]
pub struct Settings {
    pub grace: Duration,
    pub unbound_ttl: Duration,
    pub max_inflight: usize,
    /// How long an in-flight counter survives without calls (a lost node's count fades).
    pub inflight_ttl: Duration,
    /// How long an ended call's slot may wait to be given back with other work ([`releases`];
    /// [`releases::FOLD_WITHIN`] in the relay); zero gives every slot back at once.
    pub fold_within: Duration,
}

pub struct Cluster {
    node: String,
    /// One connection per [`Lane`]; all three swapped together for connections to the new
    /// primary after a failover ([`follow`]).
    lanes: std::sync::RwLock<Lanes>,
    /// On a Redis Cluster: records hash-tagged by key, cross-slot steps outside the scripts.
    sharded: bool,
    link: Link,
    /// Where the primary is, when sentinels named it.
    primary: std::sync::Mutex<Option<(String, u16)>>,
    /// Set when the connections moved to a new primary, until the membership duty has written
    /// this node's bindings back there (the old primary may have taken writes the new one
    /// never got).
    moved: AtomicBool,
    /// Sentinel mode: the connection reached a server that is not the primary (the old primary
    /// back as a replica, before the sentinels' answer moved this node): every operation fails
    /// as unreachable rather than read a replica's data, until the move.
    off_primary: AtomicBool,
    pubsub: PubSub,
    healthy: AtomicBool,
    /// Whether the subscribing connection answered its last ping.
    listening: AtomicBool,
    waiters: DashMap<String, Arc<KeyEvents>>,
    /// Key events this node heard (on its own channel).
    events_heard: prometheus_client::metrics::counter::Counter,
    /// The other messages on this node's channel, until taken ([`Cluster::take_messages`]).
    messages: std::sync::Mutex<Messages>,
    /// The node each key's tab was on at this node's last look (a guess: see [`hints`]).
    hints: hints::Hints,
    /// Ended calls' slots waiting to be given back with the next admission ([`releases`]).
    releases: Arc<releases::Releases>,
    /// Redis's clock less this node's, in ms, as last seen (`i64::MIN`: not seen yet).
    clock_offset: std::sync::atomic::AtomicI64,
    scripts: Scripts,
    sharded_scripts: sharded::ShardedScripts,
    settings: Settings,
    /// The other nodes' Socket.IO server ids ([`servers`]).
    servers: servers::Servers,
    /// The lanes' meters, one per [`Lane`], set once the relay's metrics exist.
    meters: std::sync::OnceLock<[crate::metrics::LaneMeter; 3]>,
    /// On a Redis Cluster: each node's silence at the last read of the heartbeats, and when
    /// that read was (see [`sharded`]).
    beats: std::sync::RwLock<std::collections::HashMap<String, (Duration, tokio::time::Instant)>>,
    /// On a Redis Cluster: the ranges of hash slots, for the nodes' sharded channels ([`shards`]).
    shards: shards::Shards,
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl Cluster {
    /// Connects to Redis (failing at once when it is unreachable or refuses the credentials)
    /// and starts listening for key events; with sentinels, also starts following the primary.
    pub async fn connect(url: &str, settings: Settings) -> anyhow::Result<Arc<Cluster>> {
        Self::connect_trusting(url, None, settings).await
    }

    /// [`Cluster::connect`], trusting `ca` (PEM roots) for TLS instead of the system's roots.
    pub async fn connect_trusting(
        url: &str,
        ca: Option<Vec<u8>>,
        settings: Settings,
    ) -> anyhow::Result<Arc<Cluster>> {
        let target = crate::config::RedisTarget::parse(url).map_err(|e| anyhow::anyhow!(e))?;
        let link = Link::new(target, ca);
        let (lanes, pubsub, primary) = match link.cluster_client() {
            Some(client) => {
                let client = client?;
                let lanes = tokio::time::timeout(
                    OP_TIMEOUT * 5,
                    Lanes::open(|| async {
                        let conn = client
                            .get_async_connection_with_config(cluster_config())
                            .await?;
                        Ok(Conn::Cluster(conn))
                    }),
                )
                .await
                .map_err(|_| anyhow::anyhow!("the Redis Cluster did not answer within 5 s"))?
                .map_err(|e| {
                    anyhow::anyhow!("cannot connect to the Redis Cluster: {}", explain(&e))
                })?;
                let pubsub = tokio::time::timeout(
                    OP_TIMEOUT * 5,
                    PubSub::connect_cluster(&client, cluster_config()),
                )
                .await
                .map_err(|_| anyhow::anyhow!("the Redis Cluster did not answer within 5 s"))?
                .map_err(|e| {
                    anyhow::anyhow!("cannot connect to Redis for pub/sub: {}", explain(&e))
                })?;
                (lanes, pubsub, None)
            }
            None => {
                let (client, primary) = link.primary().await?;
                let lanes = tokio::time::timeout(OP_TIMEOUT * 5, single_lanes(&client))
                    .await
                    .map_err(|_| anyhow::anyhow!("Redis did not answer within 5 s"))?
                    .map_err(|e| anyhow::anyhow!("cannot connect to Redis: {}", explain(&e)))?;
                let pubsub = PubSub::connect(client, manager_config())
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!("cannot connect to Redis for pub/sub: {}", explain(&e))
                    })?;
                (lanes, pubsub, primary)
            }
        };
        let sharded = lanes.is_cluster();
        let version = redis_version(&mut lanes.get(Lane::Membership)).await;
        if version.is_some_and(|v| v < 7) {
            anyhow::bail!("Redis 7 or newer is needed (RESP3 pub/sub); this server is older");
        }
        let mut node = [0u8; 8];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut node);
        let following = link.sentinel().is_some();
        let cluster = Arc::new(Cluster {
            node: hex::encode(node),
            lanes: std::sync::RwLock::new(lanes),
            sharded,
            link,
            primary: std::sync::Mutex::new(primary),
            moved: AtomicBool::new(false),
            off_primary: AtomicBool::new(false),
            pubsub,
            healthy: AtomicBool::new(true),
            listening: AtomicBool::new(true),
            waiters: DashMap::new(),
            events_heard: Default::default(),
            messages: {
                let (tx, rx) = tokio::sync::mpsc::channel(MESSAGES);
                std::sync::Mutex::new((Some(tx), Some(rx)))
            },
            hints: Default::default(),
            releases: Default::default(),
            clock_offset: std::sync::atomic::AtomicI64::new(i64::MIN),
            scripts: Scripts::new(),
            sharded_scripts: sharded::ShardedScripts::new(),
            settings,
            servers: Default::default(),
            meters: std::sync::OnceLock::new(),
            beats: Default::default(),
            shards: Default::default(),
        });
        cluster.clone().listen().await?;
        // On a Redis Cluster, this node's sharded channels; until then (or if this fails, until
        // a heartbeat does it) messages for it go on its classic channel.
        if let Err(e) = cluster.follow_shards().await {
            tracing::warn!(cause = %e, "cannot read the Redis Cluster's hash slots yet");
        }
        // Announced before serving: a tab bound here must never look like it is on a lost node.
        cluster
            .heartbeat()
            .await
            .map_err(|_| anyhow::anyhow!("Redis did not take this node's heartbeat"))?;
        if following {
            tokio::spawn(follow::follow(Arc::downgrade(&cluster)));
        }
        if cluster.gives_back_late() {
            tokio::spawn(releases::give_back_late(
                cluster.releases.clone(),
                Arc::downgrade(&cluster),
                cluster.settings.fold_within,
            ));
        }
        Ok(cluster)
    }

    /// Connects once, as a node would, and says where Redis is; writes nothing. For
    /// `relay check-config --connect`.
    pub async fn probe(url: &str, ca: Option<Vec<u8>>) -> anyhow::Result<String> {
        let target = crate::config::RedisTarget::parse(url).map_err(|e| anyhow::anyhow!(e))?;
        let link = Link::new(target, ca);
        if let Some(client) = link.cluster_client() {
            let mut conn = tokio::time::timeout(
                OP_TIMEOUT * 5,
                client?.get_async_connection_with_config(cluster_config()),
            )
            .await
            .map_err(|_| anyhow::anyhow!("the Redis Cluster did not answer within 5 s"))?
            .map_err(|e| anyhow::anyhow!("cannot connect to the Redis Cluster: {}", explain(&e)))?;
            return sharded::probe(&mut conn).await;
        }
        let (client, primary) = link.primary().await?;
        let mut conn =
            tokio::time::timeout(OP_TIMEOUT * 5, client.get_multiplexed_async_connection())
                .await
                .map_err(|_| anyhow::anyhow!("Redis did not answer within 5 s"))?
                .map_err(|e| anyhow::anyhow!("cannot connect to Redis: {}", explain(&e)))?;
        let version = server_info(&mut conn).await.as_deref().and_then(version_of);
        if version.is_some_and(|v| v < 7) {
            anyhow::bail!("Redis 7 or newer is needed (RESP3 pub/sub); this server is older");
        }
        Ok(match primary {
            Some((host, port)) => {
                format!("Redis primary {host}:{port}, found through the sentinels")
            }
            None => "Redis answers".to_owned(),
        })
    }

    /// Whether the connections moved to a new primary since the last call (see `moved`).
    pub fn take_moved(&self) -> bool {
        self.moved.swap(false, Ordering::AcqRel)
    }

    /// A handle on the `lane` connection to the current primary (or to the cluster), metered
    /// once [`Cluster::meter`] gave the lanes their meters.
    fn conn_for(&self, lane: Lane) -> Metered<'_> {
        let conn = self
            .lanes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(lane);
        let meter = self.meters.get().map(|m| &m[lane as usize]);
        Metered { conn, meter }
    }

    /// Records every operation of the three lanes in `metrics` from now on.
    pub fn meter(&self, metrics: &crate::metrics::Metrics) {
        let _ = self
            .meters
            .set(Lane::ALL.map(|lane| metrics.redis_lane(lane.as_str())));
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// Redis's clock now, as this node last saw it against its own (within a round trip's
    /// time), once seen.
    fn redis_now_ms(&self) -> Option<u64> {
        let offset = self.clock_offset.load(Ordering::Relaxed);
        (offset != i64::MIN).then(|| (unix_now_ms() as i64 + offset).max(0) as u64)
    }

    /// Redis's clock said `now` in an answer just received.
    fn saw_redis_clock(&self, now: u64) {
        self.clock_offset
            .store(now as i64 - unix_now_ms() as i64, Ordering::Relaxed);
    }

    /// Whether this is a Redis Cluster.
    pub fn is_sharded(&self) -> bool {
        self.sharded
    }

    pub fn pubsub(&self) -> PubSub {
        self.pubsub.clone()
    }

    /// Both connections to Redis answer.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
            && self.listening.load(Ordering::Acquire)
            && !self.off_primary.load(Ordering::Acquire)
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

    /// Runs one Redis operation within [`OP_TIMEOUT`], recording whether Redis answered.
    async fn op<T>(
        &self,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        if self.off_primary.load(Ordering::Acquire) {
            self.healthy.store(false, Ordering::Release);
            return Err(StoreError);
        }
        match tokio::time::timeout(OP_TIMEOUT, fut).await {
            Ok(Ok(v)) => {
                self.healthy.store(true, Ordering::Release);
                Ok(v)
            }
            Ok(Err(err)) => {
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
                    && self.link.sentinel().is_some()
                {
                    self.off_primary.store(true, Ordering::Release);
                }
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

    /// A Redis name for one of the key's records: `prefix` then the key's digest, as the hash
    /// tag on a cluster.
    fn tagged(&self, prefix: &str, rid: &str) -> String {
        if self.sharded {
            format!("{prefix}{{{rid}}}")
        } else {
            format!("{prefix}{rid}")
        }
    }

    fn key_name(&self, rid: &str) -> String {
        self.tagged(KEY_PREFIX, rid)
    }

    pub(crate) fn watch_name(&self, rid: &str) -> String {
        self.tagged(WATCH_PREFIX, rid)
    }

    fn node_keys(&self, node: &str) -> String {
        self.tagged(NODE_KEYS_PREFIX, node)
    }
}

/// The watch of the key whose Redis name is `key` (see [`forms::tell_lua`]'s `watch_of`).
fn watch_of(key: &str) -> String {
    format!(
        "{WATCH_PREFIX}{}",
        key.strip_prefix(KEY_PREFIX).unwrap_or(key)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
