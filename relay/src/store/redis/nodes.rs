//! This node among the others: its heartbeat, reaping lost nodes, writing its live bindings
//! back, and leaving.

use relay_wire::RevokeReason;

use super::{Cluster, Lane, NODE_KEYS_PREFIX, NODE_STALE, NODES, ONLINE_EXTRA, StoreError, ms};
use crate::tokens::unix_now_ms;

impl Cluster {
    /// Heartbeats; true when this node's entry was missing before (first beat, Redis lost its
    /// data, or other nodes took this one for lost).
    pub async fn heartbeat(&self) -> Result<bool, StoreError> {
        let mut inv = self.scripts.heartbeat.key(NODES);
        inv.arg(&self.node);
        let created: i64 = self
            .op(inv.invoke_async(&mut self.conn_for(Lane::Membership)))
            .await?;
        Ok(created == 1)
    }

    /// Marks the keys of lost nodes offline; returns how many.
    pub async fn reap(&self) -> Result<u64, StoreError> {
        if self.sharded {
            return self.sharded_reap().await;
        }
        let mut inv = self.scripts.reap.key(NODES);
        inv.arg(ms(NODE_STALE))
            .arg(ms(self.settings.grace))
            .arg(NODE_KEYS_PREFIX)
            .arg(unix_now_ms());
        self.op(inv.invoke_async(&mut self.conn_for(Lane::Membership)))
            .await
    }

    /// Writes a live local binding back into Redis, made at `bound_ms` (Unix ms). Returns why
    /// the binding cannot stand, if Redis had the key revoked, or bound on another node since.
    pub async fn reassert(
        &self,
        rid: &str,
        sid: &str,
        token_exp_unix: u64,
        bound_ms: u64,
    ) -> Result<Option<RevokeReason>, StoreError> {
        let now = unix_now_ms();
        let exp = token_exp_unix * 1000;
        let ttl = exp.saturating_sub(now) + ms(ONLINE_EXTRA);
        let reply: String = if self.sharded {
            let mut inv = self.sharded_scripts.reassert.key(self.key_name(rid));
            inv.key(self.watch_name(rid));
            inv.arg(now)
                .arg(&self.node)
                .arg(sid)
                .arg(exp)
                .arg(ttl)
                .arg(bound_ms)
                .arg(&*self.told_under(rid));
            let reply: String = self
                .op(inv.invoke_async(&mut self.conn_for(Lane::Membership)))
                .await?;
            if reply == "kept" || reply == "restored" {
                self.node_set(Lane::Membership, true, &self.node, &self.key_name(rid))
                    .await?;
            }
            reply
        } else {
            let mut inv = self.scripts.reassert.key(self.key_name(rid));
            inv.key(self.watch_name(rid))
                .key(self.node_keys(&self.node));
            inv.arg(now)
                .arg(&self.node)
                .arg(sid)
                .arg(exp)
                .arg(ttl)
                .arg(bound_ms);
            self.op(inv.invoke_async(&mut self.conn_for(Lane::Membership)))
                .await?
        };
        Ok(match reply.as_str() {
            "revoked" => Some(RevokeReason::Revoked),
            "elsewhere" => Some(RevokeReason::Replaced),
            _ => None,
        })
    }

    /// Pings the tabs' and the calls' lanes, answers ignored. A lane's connection reconnects
    /// when a command on it fails: after Redis was away, a lane idle since would fail the first
    /// command that comes, though the heartbeat (and `/readyz`) says Redis answers. Pinged each
    /// heartbeat, every lane is back within one of Redis.
    pub async fn ping_lanes(&self) {
        let ping = |lane: Lane| async move {
            let mut conn = self.conn_for(lane);
            let _ = tokio::time::timeout(
                super::OP_TIMEOUT,
                redis::cmd("PING").query_async::<redis::Value>(&mut conn),
            )
            .await;
        };
        tokio::join!(ping(Lane::Tabs), ping(Lane::Calls));
    }

    /// On a Redis Cluster, reads the ranges of hash slots (subscribing this node's sharded
    /// channels of new ones, [`super::shards`]) and subscribes the pub/sub channels again (see
    /// [`crate::pubsub::PubSub::resubscribe`]); true when done (always on one server, whose
    /// connection re-subscribes by itself).
    pub async fn resubscribe(&self) -> bool {
        if !self.sharded {
            return true;
        }
        // The ranges of hash slots first: a new one's channel is subscribed with the others.
        let _ = tokio::time::timeout(super::OP_TIMEOUT * 2, self.follow_shards()).await;
        match tokio::time::timeout(super::OP_TIMEOUT * 2, self.pubsub.resubscribe()).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::warn!(cause = %e, "cannot subscribe the pub/sub channels again yet");
                false
            }
            Err(_) => false,
        }
    }

    /// Leaves the cluster: the slots of its ended calls still waiting are given back, and this
    /// node's entry is marked stale and reaped at once, so keys whose release did not reach
    /// Redis go offline now rather than when their TTL ends.
    pub async fn leave(&self) {
        self.give_back_waiting().await;
        let marked = self
            .op(redis::cmd("HSET")
                .arg(NODES)
                .arg(&self.node)
                .arg(0)
                .query_async::<i64>(&mut self.conn_for(Lane::Membership)))
            .await;
        if marked.is_ok() {
            let _ = self.reap().await;
        }
    }
}
