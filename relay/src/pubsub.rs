//! The pub/sub driver under the Socket.IO Redis adapter, and under the relay's own key events.
//!
//! socketioxide-redis ships a driver on a plain multiplexed connection: when Redis restarts, that
//! connection is gone for good and the node stops hearing the others. This one sits on redis-rs's
//! `ConnectionManager`, which reconnects with backoff and re-subscribes every channel, so a node
//! rejoins the cluster by itself when Redis comes back.
//!
//! On a Redis Cluster it sits on the redis crate's cluster connection (which re-subscribes after
//! failovers by itself). The Socket.IO adapter's channels are then sharded (`SPUBLISH` /
//! `SSUBSCRIBE`: each message goes to the one shard owning its channel's slot, not over the whole
//! cluster bus), like socketioxide-redis's own cluster driver. The relay's own messages (key
//! events, calls between nodes) go to each node on a classic channel of its own
//! ([`PubSub::subscribe_classic`]): a key's scripts publish them from the key's slot without
//! naming the channel as a key, and the cluster forwards them to the server the node subscribed
//! on. On a cluster each node also subscribes sharded channels of its own, one on each server,
//! whose messages go to the same subscriber ([`PubSub::subscribe_beside`]): calls between nodes
//! and their outcomes, sent from the key's server without crossing the cluster bus.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncCommands, FromRedisValue, PushInfo};
use socketioxide_redis::drivers::{ChanItem, Driver, MessageStream};
use tokio::sync::mpsc;

#[derive(Debug)]
pub struct DriverError(redis::RedisError);

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for DriverError {}

impl From<redis::RedisError> for DriverError {
    fn from(e: redis::RedisError) -> Self {
        DriverError(e)
    }
}

type Handlers = Arc<RwLock<HashMap<String, mpsc::Sender<ChanItem>>>>;

/// The connection under the pub/sub: to one server, or to a cluster.
#[derive(Clone)]
enum Wire {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// Publishes and subscribes on one reconnecting connection; pushed messages are routed to the
/// subscriber of their channel. [`PubSub::switch`] moves it to another server (a new primary
/// after a failover) with every subscription.
#[derive(Clone)]
pub struct PubSub {
    conn: Arc<RwLock<Wire>>,
    handlers: Handlers,
    /// Held while subscribing and while switching, so no subscription misses the new server.
    subscribing: Arc<tokio::sync::Mutex<()>>,
    /// The classic channels among the subscribed ones (on a cluster, the others are sharded).
    broadcast: Arc<RwLock<std::collections::HashSet<String>>>,
}

fn handlers_read(
    h: &Handlers,
) -> std::sync::RwLockReadGuard<'_, HashMap<String, mpsc::Sender<ChanItem>>> {
    h.read().unwrap_or_else(|p| p.into_inner())
}

fn handlers_write(
    h: &Handlers,
) -> std::sync::RwLockWriteGuard<'_, HashMap<String, mpsc::Sender<ChanItem>>> {
    h.write().unwrap_or_else(|p| p.into_inner())
}

fn route(msg: PushInfo, handlers: &Handlers) {
    if !matches!(
        msg.kind,
        redis::PushKind::Message | redis::PushKind::SMessage
    ) || msg.data.len() < 2
    {
        return;
    }
    let mut data = msg.data.into_iter();
    let (Some(chan), Some(body)) = (data.next(), data.next()) else {
        return;
    };
    let (Ok(chan), Ok(body)) = (
        String::from_redis_value(chan),
        Vec::<u8>::from_redis_value(body),
    ) else {
        return;
    };
    if let Some(tx) = handlers_read(handlers).get(&chan)
        && tx.try_send((chan, body)).is_err()
    {
        tracing::warn!("a pub/sub subscriber is not keeping up; message dropped");
    }
}

impl PubSub {
    pub async fn connect(
        client: redis::Client,
        config: redis::aio::ConnectionManagerConfig,
    ) -> redis::RedisResult<Self> {
        let handlers: Handlers = Arc::default();
        let conn = Self::manager(client, config, &handlers).await?;
        Ok(PubSub {
            conn: Arc::new(RwLock::new(Wire::Single(conn))),
            handlers,
            subscribing: Arc::default(),
            broadcast: Arc::default(),
        })
    }

    /// Pub/sub on a Redis Cluster: its own cluster connection, with pushed messages routed.
    pub async fn connect_cluster(
        client: &redis::cluster::ClusterClient,
        config: redis::cluster::ClusterConfig,
    ) -> redis::RedisResult<Self> {
        let handlers: Handlers = Arc::default();
        let routed = handlers.clone();
        let config = config.set_push_sender(move |msg: PushInfo| {
            route(msg, &routed);
            Ok::<(), std::convert::Infallible>(())
        });
        let conn = client.get_async_connection_with_config(config).await?;
        Ok(PubSub {
            conn: Arc::new(RwLock::new(Wire::Cluster(conn))),
            handlers,
            subscribing: Arc::default(),
            broadcast: Arc::default(),
        })
    }

    async fn manager(
        client: redis::Client,
        config: redis::aio::ConnectionManagerConfig,
        handlers: &Handlers,
    ) -> redis::RedisResult<ConnectionManager> {
        let routed = handlers.clone();
        let config = config
            .set_push_sender(move |msg: PushInfo| {
                route(msg, &routed);
                Ok::<(), std::convert::Infallible>(())
            })
            .set_automatic_resubscription();
        ConnectionManager::new_with_config(client, config).await
    }

    fn conn(&self) -> Wire {
        self.conn.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Moves to `client`'s server: connects, subscribes every channel there, then publishes
    /// through it. Messages published on the old server meanwhile are lost (as when Redis
    /// restarts); the old connection closes when its last user lets go.
    pub async fn switch(
        &self,
        client: redis::Client,
        config: redis::aio::ConnectionManagerConfig,
    ) -> redis::RedisResult<()> {
        let _held = self.subscribing.lock().await;
        let conn = Self::manager(client, config, &self.handlers).await?;
        let chans: Vec<String> = handlers_read(&self.handlers).keys().cloned().collect();
        for chan in chans {
            conn.clone().subscribe(chan.as_str()).await?;
        }
        *self.conn.write().unwrap_or_else(|p| p.into_inner()) = Wire::Single(conn);
        Ok(())
    }
}

impl PubSub {
    /// Checks the subscribing connection. It only receives, so without this it would notice a
    /// lost Redis (and reconnect and re-subscribe) only at its next publish.
    pub async fn ping(&self) -> redis::RedisResult<()> {
        let ping = redis::cmd("PING");
        match self.conn() {
            Wire::Single(mut c) => ping.query_async::<redis::Value>(&mut c).await.map(drop),
            Wire::Cluster(mut c) => ping.query_async::<redis::Value>(&mut c).await.map(drop),
        }
    }

    /// Subscribes to a classic channel, on a cluster too (where the cluster forwards its messages
    /// from whichever server published them), not a sharded one: the relay's key events, which
    /// a key's script publishes from the key's slot.
    pub async fn subscribe_classic(
        &self,
        chan: String,
        size: usize,
    ) -> Result<MessageStream<ChanItem>, DriverError> {
        self.subscribe_as(chan, size, false).await
    }

    /// On a cluster, subscribes the sharded channel `chan` too, its messages going to the same
    /// subscriber as those of `beside` (subscribed before): a node's channels on each server
    /// ([`crate::store::redis`]'s sharded channels). On one server, nothing.
    pub async fn subscribe_beside(&self, chan: String, beside: &str) -> Result<(), DriverError> {
        let Wire::Cluster(mut c) = self.conn() else {
            return Ok(());
        };
        let _held = self.subscribing.lock().await;
        let Some(tx) = handlers_read(&self.handlers).get(beside).cloned() else {
            return Ok(());
        };
        handlers_write(&self.handlers).insert(chan.clone(), tx);
        if let Err(e) = c.ssubscribe(chan.as_str()).await {
            handlers_write(&self.handlers).remove(&chan);
            return Err(e.into());
        }
        Ok(())
    }

    async fn subscribe_as(
        &self,
        chan: String,
        size: usize,
        sharded: bool,
    ) -> Result<MessageStream<ChanItem>, DriverError> {
        let (tx, rx) = mpsc::channel(size);
        let _held = self.subscribing.lock().await;
        handlers_write(&self.handlers).insert(chan.clone(), tx);
        if !sharded {
            self.broadcast
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(chan.clone());
        }
        match self.conn() {
            Wire::Single(mut c) => c.subscribe(chan.as_str()).await?,
            Wire::Cluster(mut c) if sharded => c.ssubscribe(chan.as_str()).await?,
            Wire::Cluster(mut c) => c.subscribe(chan.as_str()).await?,
        }
        Ok(MessageStream::new(rx))
    }
}

impl PubSub {
    /// On a cluster, subscribes every channel again. The cluster connection re-subscribes after
    /// a node's connection drops, but a subscription it retried while the cluster could not
    /// serve every slot (all its servers restarting, or a primary's replica not promoted yet)
    /// may be lost: the relay calls this every heartbeat. Subscribing twice to a channel is
    /// harmless (a node subscribes a handful).
    pub async fn resubscribe(&self) -> redis::RedisResult<()> {
        let Wire::Cluster(mut c) = self.conn() else {
            return Ok(());
        };
        let _held = self.subscribing.lock().await;
        let chans: Vec<String> = handlers_read(&self.handlers).keys().cloned().collect();
        let broadcast = self
            .broadcast
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for chan in chans {
            if broadcast.contains(&chan) {
                c.subscribe(chan.as_str()).await?;
            } else {
                c.ssubscribe(chan.as_str()).await?;
            }
        }
        Ok(())
    }
}

impl PubSub {
    /// Publishes on a classic channel (on a cluster too, where the cluster forwards it to every
    /// server): how many subscribers received it (on a cluster, those of the server it reached).
    pub async fn publish_classic(&self, chan: String, body: Vec<u8>) -> redis::RedisResult<i64> {
        match self.conn() {
            Wire::Single(mut c) => c.publish(chan, body).await,
            Wire::Cluster(mut c) => c.publish(chan, body).await,
        }
    }
}

impl PubSub {
    /// On a cluster, publishes on a sharded channel (reaching the one server that serves its hash
    /// slot): how many subscribers received it there. On one server, a classic publish.
    pub async fn publish_sharded(&self, chan: String, body: Vec<u8>) -> redis::RedisResult<i64> {
        match self.conn() {
            Wire::Single(mut c) => c.publish(chan, body).await,
            Wire::Cluster(mut c) => c.spublish(chan, body).await,
        }
    }
}

/// The subscriber count in a `PUBSUB NUMSUB`-like reply (`[channel, count]`, summed over the
/// cluster's nodes by the redis crate).
fn count_subscribers(reply: &redis::Value) -> u16 {
    let items = match reply {
        redis::Value::Array(items) => items.iter().collect::<Vec<_>>(),
        redis::Value::Map(pairs) => pairs.iter().flat_map(|(k, v)| [k, v]).collect(),
        _ => return 0,
    };
    items
        .iter()
        .filter_map(|v| match v {
            redis::Value::Int(n) => u16::try_from(*n).ok(),
            _ => None,
        })
        .sum()
}

impl Driver for PubSub {
    type Error = DriverError;

    async fn publish(&self, chan: String, val: Vec<u8>) -> Result<(), DriverError> {
        match self.conn() {
            Wire::Single(mut c) => c.publish::<_, _, redis::Value>(chan, val).await?,
            Wire::Cluster(mut c) => c.spublish::<_, _, redis::Value>(chan, val).await?,
        };
        Ok(())
    }

    async fn subscribe(
        &self,
        chan: String,
        size: usize,
    ) -> Result<MessageStream<ChanItem>, DriverError> {
        self.subscribe_as(chan, size, true).await
    }

    async fn unsubscribe(&self, chan: String) -> Result<(), DriverError> {
        let _held = self.subscribing.lock().await;
        handlers_write(&self.handlers).remove(&chan);
        match self.conn() {
            Wire::Single(mut c) => c.unsubscribe(chan).await?,
            Wire::Cluster(mut c) => c.sunsubscribe(chan).await?,
        }
        Ok(())
    }

    async fn num_serv(&self, chan: &str) -> Result<u16, DriverError> {
        match self.conn() {
            Wire::Single(mut c) => {
                let (_, count): (String, u16) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(chan)
                    .query_async(&mut c)
                    .await?;
                Ok(count)
            }
            Wire::Cluster(mut c) => {
                let reply: redis::Value = redis::cmd("PUBSUB")
                    .arg("SHARDNUMSUB")
                    .arg(chan)
                    .query_async(&mut c)
                    .await?;
                Ok(count_subscribers(&reply))
            }
        }
    }
}
