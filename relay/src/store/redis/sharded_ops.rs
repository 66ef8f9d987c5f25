//! The operations that differ on a Redis Cluster (see [`super::sharded`] for the order of their
//! steps): the same answers as the one-server scripts, with the cross-slot steps around the
//! key's script.

use std::time::Duration;

use super::{Cluster, Lane, NODE_SUSPECT, NODES, Place, StoreError, ms};
use crate::tokens::unix_now_ms;

impl Cluster {
    /// Adds (or removes) the key to a node's set of keys, for reaping; on `lane`, the lane of
    /// the operation it is part of.
    pub(super) async fn node_set(
        &self,
        lane: Lane,
        add: bool,
        node: &str,
        key: &str,
    ) -> Result<(), StoreError> {
        let cmd = if add { "SADD" } else { "SREM" };
        self.op(redis::cmd(cmd)
            .arg(self.node_keys(node))
            .arg(key)
            .query_async::<i64>(&mut self.conn_for(lane)))
            .await
            .map(drop)
    }

    /// The tag the cluster form of a key's script tells the key's change under, its last argument
    /// (the tag of the range holding the key's hash slot, [`super::forms::tell_lua`]).
    pub(super) fn told_under(&self, rid: &str) -> std::sync::Arc<str> {
        self.shards.tag_of(&self.key_name(rid))
    }

    /// Whether `node` heartbeat within [`NODE_SUSPECT`].
    async fn alive(&self, node: &str) -> Result<bool, StoreError> {
        let mut inv = self.sharded_scripts.seen.key(super::NODES);
        inv.arg(node).arg(ms(NODE_SUSPECT));
        let seen: i64 = self
            .op(inv.invoke_async(&mut self.conn_for(Lane::Calls)))
            .await?;
        Ok(seen == 1)
    }

    /// A tab's place once its node's heartbeat is checked: known alive from the heartbeats this
    /// node read last, or else read now.
    pub(super) async fn checked(&self, node: String, sid: String) -> Result<Place, StoreError> {
        let alive = node == self.node || self.heard_lately(&node) || self.alive(&node).await?;
        Ok(if alive {
            Place::Online { node, sid }
        } else {
            Place::Waiting
        })
    }

    /// Whether `node` heartbeat within [`NODE_SUSPECT`] by the heartbeats this node read last:
    /// its silence then, plus the time since, is at least its silence now, so a yes holds.
    pub(super) fn heard_lately(&self, node: &str) -> bool {
        let beats = self.beats.read().unwrap_or_else(|p| p.into_inner());
        beats
            .get(node)
            .is_some_and(|(silent, read)| *silent + read.elapsed() <= NODE_SUSPECT)
    }

    /// The key script of a bind ran: records the key in this node's set, and out of the set of
    /// the node that held it before.
    pub(super) async fn sharded_bound(&self, rid: &str, before: Option<&str>) {
        let key = self.key_name(rid);
        let _ = self.node_set(Lane::Tabs, true, &self.node, &key).await;
        if let Some(before) = before.filter(|n| !n.is_empty() && *n != self.node) {
            let _ = self.node_set(Lane::Tabs, false, before, &key).await;
        }
    }

    pub(super) async fn sharded_release(&self, rid: &str, sid: &str) -> Result<(), StoreError> {
        let key = self.key_name(rid);
        let mut inv = self.sharded_scripts.release.key(&key);
        inv.key(self.watch_name(rid));
        inv.arg(unix_now_ms())
            .arg(&self.node)
            .arg(sid)
            .arg(ms(self.settings.grace))
            .arg(&*self.told_under(rid));
        let released: i64 = self
            .op(inv.invoke_async(&mut self.conn_for(Lane::Tabs)))
            .await?;
        if released == 1 {
            self.node_set(Lane::Tabs, false, &self.node, &key).await?;
        }
        Ok(())
    }

    pub(super) async fn sharded_lookup(&self, rid: &str) -> Result<Place, StoreError> {
        let inv = self.sharded_scripts.place.key(self.key_name(rid));
        let reply: Vec<String> = self
            .op(inv.invoke_async(&mut self.conn_for(Lane::Calls)))
            .await?;
        let mut words = reply.into_iter();
        match (words.next().as_deref(), words.next(), words.next()) {
            (Some("online"), Some(node), Some(sid)) => self.checked(node, sid).await,
            (Some("waiting"), _, _) => Ok(Place::Waiting),
            _ => Ok(Place::Unknown),
        }
    }

    /// The acquire script of this store's form.
    pub(super) fn scripts_acquire(&self) -> &redis::Script {
        if self.sharded {
            &self.sharded_scripts.acquire
        } else {
            &self.scripts.acquire
        }
    }

    pub(super) async fn sharded_reap(&self) -> Result<u64, StoreError> {
        let inv = self.sharded_scripts.ages.key(NODES);
        let ages: Vec<String> = self
            .op(inv.invoke_async(&mut self.conn_for(Lane::Membership)))
            .await?;
        let read = tokio::time::Instant::now();
        let mut beats = std::collections::HashMap::new();
        let mut stale = Vec::new();
        for pair in ages.chunks(2) {
            let [node, age] = pair else { continue };
            let Ok(age) = age.parse::<u64>() else {
                continue;
            };
            let silent = Duration::from_millis(age);
            if silent > super::NODE_STALE {
                stale.push(node.clone());
            }
            beats.insert(node.clone(), (silent, read));
        }
        *self.beats.write().unwrap_or_else(|p| p.into_inner()) = beats;
        let mut reaped = 0;
        for node in stale {
            let set = self.node_keys(&node);
            let keys: Vec<String> = self
                .op(redis::cmd("SMEMBERS")
                    .arg(&set)
                    .query_async(&mut self.conn_for(Lane::Membership)))
                .await?;
            for key in keys {
                let mut inv = self.sharded_scripts.reap_key.key(&key);
                inv.key(super::watch_of(&key));
                inv.arg(&node)
                    .arg(unix_now_ms())
                    .arg(ms(self.settings.grace))
                    .arg(&*self.shards.tag_of(&key));
                let n: u64 = self
                    .op(inv.invoke_async(&mut self.conn_for(Lane::Membership)))
                    .await?;
                reaped += n;
            }
            self.op(redis::cmd("DEL")
                .arg(&set)
                .query_async::<i64>(&mut self.conn_for(Lane::Membership)))
                .await?;
            self.op(redis::cmd("HDEL")
                .arg(NODES)
                .arg(&node)
                .query_async::<i64>(&mut self.conn_for(Lane::Membership)))
                .await?;
        }
        Ok(reaped)
    }
}
