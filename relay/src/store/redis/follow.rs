//! Following the primary through a failover (sentinel mode).
//!
//! Every [`ASK_EVERY`] the node asks the sentinels where the primary is. When they name another
//! server, the node connects to it and moves all its connections there together: the three
//! lanes for commands and scripts, and the pub/sub one under the Socket.IO adapter and the key events (re-subscribing
//! every channel). Until then, commands to the old primary fail (it is gone, or it refuses
//! writes as a replica), so calls get the store's "unavailable" answer rather than a stale
//! state. After the move, the membership duty writes this node's live bindings back, as after
//! any time Redis did not answer: with `SENTINEL FAILOVER` the old primary takes writes until
//! the sentinels demote it, and the new one never gets those.
//!
//! A failover makes calls fail for at most the sentinels' detection time (their
//! `down-after-milliseconds`, for a primary that died; none for `SENTINEL FAILOVER`), plus
//! their election and promotion, plus [`ASK_EVERY`] and one connection.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Cluster, Lane, OP_TIMEOUT, explain, manager_config, single_lanes};

/// How often the sentinels are asked where the primary is.
pub const ASK_EVERY: Duration = Duration::from_millis(500);

pub async fn follow(cluster: Weak<Cluster>) {
    let mut tick = tokio::time::interval(ASK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        let Some(sentinel) = cluster.link.sentinel() else {
            return;
        };
        let named = match cluster.link.ask_sentinels(sentinel).await {
            Ok(addr) => addr,
            Err(e) => {
                tracing::debug!(cause = %e, "sentinels not answering");
                continue;
            }
        };
        let current = cluster
            .primary
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if current.as_ref() == Some(&named) {
            cluster.check_role().await;
            continue;
        }
        match cluster.move_to(&named).await {
            Ok(()) => tracing::info!(
                primary = %format!("{}:{}", named.0, named.1),
                "Redis primary changed; connections moved to it"
            ),
            Err(e) => tracing::warn!(cause = %e, "cannot reach the new Redis primary yet"),
        }
    }
}

impl Cluster {
    /// Connects to the primary at `addr` and moves every connection there.
    async fn move_to(&self, addr: &(String, u16)) -> anyhow::Result<()> {
        let Some(sentinel) = self.link.sentinel() else {
            return Ok(());
        };
        let client = self
            .link
            .client(&sentinel.server_url(&addr.0, addr.1, true))?;
        let lanes = tokio::time::timeout(OP_TIMEOUT * 2, single_lanes(&client))
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {:?}", OP_TIMEOUT * 2))?
            .map_err(|e| anyhow::anyhow!(explain(&e)))?;
        let role: redis::Value = redis::cmd("ROLE")
            .query_async(&mut lanes.get(Lane::Membership))
            .await?;
        if !is_primary(&role) {
            anyhow::bail!("the server the sentinels named is not a primary yet");
        }
        tokio::time::timeout(OP_TIMEOUT * 2, self.pubsub.switch(client, manager_config()))
            .await
            .map_err(|_| anyhow::anyhow!("pub/sub: no answer within {:?}", OP_TIMEOUT * 2))?
            .map_err(|e| anyhow::anyhow!("pub/sub: {}", explain(&e)))?;
        *self.lanes.write().unwrap_or_else(|p| p.into_inner()) = lanes;
        *self.primary.lock().unwrap_or_else(|p| p.into_inner()) = Some(addr.clone());
        self.moved.store(true, Ordering::Release);
        self.off_primary.store(false, Ordering::Release);
        // The next operation says whether the store answers; until then calls may try.
        self.listening.store(true, Ordering::Release);
        Ok(())
    }
}

impl Cluster {
    /// Whether the connection still reaches a primary: after the primary died, the connection
    /// reconnects by itself to the same address, where the old server may be back as a replica
    /// (empty until it has synced) before the sentinels name the new primary.
    async fn check_role(&self) {
        let role = tokio::time::timeout(
            OP_TIMEOUT,
            redis::cmd("ROLE").query_async::<redis::Value>(&mut self.conn_for(Lane::Membership)),
        )
        .await;
        let off = match role {
            Ok(Ok(role)) => !is_primary(&role),
            // Unreachable: the operations say so themselves.
            _ => false,
        };
        if self.off_primary.swap(off, Ordering::AcqRel) != off {
            tracing::warn!(off_primary = off, "Redis connection and the primary");
        }
    }
}

/// Whether a `ROLE` reply is a primary's (`["master", offset, replicas]`).
fn is_primary(role: &redis::Value) -> bool {
    let redis::Value::Array(parts) = role else {
        return false;
    };
    matches!(parts.first(), Some(redis::Value::BulkString(b)) if b == b"master")
        || matches!(parts.first(), Some(redis::Value::SimpleString(s)) if s == "master")
}
