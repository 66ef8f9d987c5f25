//! This node's own channel (`va:n:<node>`, [`NODE_PREFIX`]): the key events it waits for, told
//! by the keys' scripts, and the messages other nodes send it (calls for its tabs, outcomes of
//! the calls it sent), kept apart for whoever takes them ([`Cluster::take_messages`]).

use std::sync::Arc;

use super::{Cluster, KEY_PREFIX, NODE_PREFIX, StoreError};

/// Messages for this node other than key events, held until taken; past this many, dropped (and
/// logged), as a subscriber that does not keep up drops them anyway.
pub(super) const MESSAGES: usize = 4096;

/// Both ends of the queue of this node's messages other than key events, until the listener
/// and the taker take theirs.
pub(super) type Messages = (
    Option<tokio::sync::mpsc::Sender<Vec<u8>>>,
    Option<tokio::sync::mpsc::Receiver<Vec<u8>>>,
);

impl Cluster {
    /// Key events this node heard: those of the keys it waited for, never others.
    pub fn events_heard(&self) -> &prometheus_client::metrics::counter::Counter {
        &self.events_heard
    }

    /// The messages other nodes send this node (calls for its tabs, outcomes of its calls); the
    /// first caller gets them, later ones `None`.
    pub fn take_messages(&self) -> Option<tokio::sync::mpsc::Receiver<Vec<u8>>> {
        self.messages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .take()
    }

    /// Publishes `body` on `node`'s channel: how many subscribers received it. On a Redis
    /// Cluster, first on its sharded channel on the server that serves the hash slot of the
    /// node's name ([`super::shards`]), and on its classic channel when no subscriber got it
    /// there (then a count of the server it was published on only).
    pub async fn publish_to(&self, node: &str, body: Vec<u8>) -> Result<i64, StoreError> {
        let tag = self.shards.tag_of(node);
        if !tag.is_empty() {
            let chan = super::shards::channel(&tag, node);
            let got = self
                .op(self.pubsub.publish_sharded(chan, body.clone()))
                .await?;
            if got > 0 {
                return Ok(got);
            }
        }
        self.op(self
            .pubsub
            .publish_classic(format!("{NODE_PREFIX}{node}"), body))
            .await
    }

    pub(super) async fn listen(self: Arc<Self>) -> anyhow::Result<()> {
        use futures_util::StreamExt;
        let mut events = self
            .pubsub
            .subscribe_classic(format!("{NODE_PREFIX}{}", self.node), MESSAGES)
            .await
            .map_err(|e| anyhow::anyhow!("cannot subscribe to this node's channel: {e}"))?;
        let weak = Arc::downgrade(&self);
        let others = self
            .messages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .take();
        tokio::spawn(async move {
            while let Some((_, body)) = events.next().await {
                let Some(cluster) = weak.upgrade() else { break };
                let Some(rid) = body
                    .strip_prefix(KEY_PREFIX.as_bytes())
                    .and_then(|k| std::str::from_utf8(k).ok())
                    .map(|k| k.trim_start_matches('{').trim_end_matches('}'))
                else {
                    if let Some(others) = &others
                        && others.try_send(body).is_err()
                    {
                        tracing::warn!(
                            "messages from other nodes are not taken fast enough; one dropped"
                        );
                    }
                    continue;
                };
                cluster.events_heard.inc();
                if let Some(events) = cluster.waiters.get(rid) {
                    events.changed();
                }
            }
        });
        Ok(())
    }
}
