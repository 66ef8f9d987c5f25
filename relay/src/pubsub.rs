//! The pub/sub driver under the Socket.IO Redis adapter, and under the relay's own key events.
//!
//! socketioxide-redis ships a driver on a plain multiplexed connection: when Redis restarts, that
//! connection is gone for good and the node stops hearing the others. This one sits on redis-rs's
//! `ConnectionManager`, which reconnects with backoff and re-subscribes every channel, so a node
//! rejoins the cluster by itself when Redis comes back.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use redis::aio::ConnectionManager;
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

/// Publishes and subscribes on one reconnecting connection; pushed messages are routed to the
/// subscriber of their channel. [`PubSub::switch`] moves it to another server (a new primary
/// after a failover) with every subscription.
#[derive(Clone)]
pub struct PubSub {
    conn: Arc<RwLock<ConnectionManager>>,
    handlers: Handlers,
    /// Held while subscribing and while switching, so no subscription misses the new server.
    subscribing: Arc<tokio::sync::Mutex<()>>,
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
    if !matches!(msg.kind, redis::PushKind::Message) || msg.data.len() < 2 {
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
            conn: Arc::new(RwLock::new(conn)),
            handlers,
            subscribing: Arc::default(),
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

    fn conn(&self) -> ConnectionManager {
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
        *self.conn.write().unwrap_or_else(|p| p.into_inner()) = conn;
        Ok(())
    }
}

impl PubSub {
    /// Checks the subscribing connection. It only receives, so without this it would notice a
    /// lost Redis (and reconnect and re-subscribe) only at its next publish.
    pub async fn ping(&self) -> redis::RedisResult<()> {
        redis::cmd("PING")
            .query_async::<redis::Value>(&mut self.conn())
            .await
            .map(drop)
    }
}

impl Driver for PubSub {
    type Error = DriverError;

    async fn publish(&self, chan: String, val: Vec<u8>) -> Result<(), DriverError> {
        self.conn().publish::<_, _, redis::Value>(chan, val).await?;
        Ok(())
    }

    async fn subscribe(
        &self,
        chan: String,
        size: usize,
    ) -> Result<MessageStream<ChanItem>, DriverError> {
        let (tx, rx) = mpsc::channel(size);
        let _held = self.subscribing.lock().await;
        handlers_write(&self.handlers).insert(chan.clone(), tx);
        self.conn().subscribe(chan.as_str()).await?;
        Ok(MessageStream::new(rx))
    }

    async fn unsubscribe(&self, chan: String) -> Result<(), DriverError> {
        let _held = self.subscribing.lock().await;
        handlers_write(&self.handlers).remove(&chan);
        self.conn().unsubscribe(chan).await?;
        Ok(())
    }

    async fn num_serv(&self, chan: &str) -> Result<u16, DriverError> {
        let (_, count): (String, u16) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(chan)
            .query_async(&mut self.conn())
            .await?;
        Ok(count)
    }
}
