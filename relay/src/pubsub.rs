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
/// subscriber of their channel.
#[derive(Clone)]
pub struct PubSub {
    conn: ConnectionManager,
    handlers: Handlers,
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
        let routed = handlers.clone();
        let config = config
            .set_push_sender(move |msg: PushInfo| {
                route(msg, &routed);
                Ok::<(), std::convert::Infallible>(())
            })
            .set_automatic_resubscription();
        let conn = ConnectionManager::new_with_config(client, config).await?;
        Ok(PubSub { conn, handlers })
    }
}

impl PubSub {
    /// Checks the subscribing connection. It only receives, so without this it would notice a
    /// lost Redis (and reconnect and re-subscribe) only at its next publish.
    pub async fn ping(&self) -> redis::RedisResult<()> {
        redis::cmd("PING")
            .query_async::<redis::Value>(&mut self.conn.clone())
            .await
            .map(drop)
    }
}

impl Driver for PubSub {
    type Error = DriverError;

    async fn publish(&self, chan: String, val: Vec<u8>) -> Result<(), DriverError> {
        self.conn
            .clone()
            .publish::<_, _, redis::Value>(chan, val)
            .await?;
        Ok(())
    }

    async fn subscribe(
        &self,
        chan: String,
        size: usize,
    ) -> Result<MessageStream<ChanItem>, DriverError> {
        let (tx, rx) = mpsc::channel(size);
        handlers_write(&self.handlers).insert(chan.clone(), tx);
        self.conn.clone().subscribe(chan.as_str()).await?;
        Ok(MessageStream::new(rx))
    }

    async fn unsubscribe(&self, chan: String) -> Result<(), DriverError> {
        handlers_write(&self.handlers).remove(&chan);
        self.conn.clone().unsubscribe(chan).await?;
        Ok(())
    }

    async fn num_serv(&self, chan: &str) -> Result<u16, DriverError> {
        let (_, count): (String, u16) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(chan)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(count)
    }
}
