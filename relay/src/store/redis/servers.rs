//! Which Socket.IO server each relay node runs, so an emit for a tab on another node goes to that
//! node alone ([`crate::targeted`]) instead of to every node.
//!
//! A node's name in Redis (in every binding) is not its Socket.IO adapter's server id; each node
//! writes the pair under `va:sio:<node>` every heartbeat with a short TTL, so the record is gone
//! soon after its node (nothing accumulates as nodes restart), comes back within a beat when
//! Redis lost it, and is one key (any slot of a Redis Cluster). A node leaving deletes it.
//!
//! Readers keep what they read: a node's name is never reused and its server id never changes,
//! so an answer holds for the node's life. A node not known yet is looked up in the background
//! and the emit meanwhile goes to every node, as when the record is missing or Redis is slow:
//! nothing waits for this lookup, and nothing is lost without it. Entries unused for
//! [`FORGET_AFTER`] are dropped, so the memory is bounded by the nodes recently delivered to.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use socketioxide_core::Uid;
use tokio::time::Instant;

use super::{Cluster, Lane, StoreError};

const SERVER_PREFIX: &str = "va:sio:";
/// How long a node's record outlives its last heartbeat.
const SERVER_TTL: Duration = Duration::from_secs(10);
/// After a lookup found nothing (or failed), the next one waits this long; emits to that node
/// go to every node meanwhile.
const RETRY_AFTER: Duration = Duration::from_secs(2);
/// A lookup still running after this long is taken for lost and may be started again.
const LOOKUP_BOUND: Duration = Duration::from_secs(3);
/// Entries not used for this long are dropped.
const FORGET_AFTER: Duration = Duration::from_secs(300);

enum Known {
    Server(Uid),
    /// No record (or Redis did not answer) at `at`.
    Missing,
    /// A lookup started at `at`.
    Looking,
}

struct Entry {
    known: Known,
    /// Last use of a known server; when the lookup started or ended otherwise.
    at: Instant,
}

/// The Socket.IO server ids of the other nodes, as read from Redis. Read on the call path of
/// every cross-node call: a `DashMap`, so calls share no lock but their shard's, held briefly.
#[derive(Default)]
pub struct Servers {
    map: DashMap<String, Entry>,
}

impl Entry {
    /// What a read finds in this entry at `now`: the server, or that a lookup is under way or
    /// failed lately (so none starts); `None` when a lookup is due.
    fn answer(&mut self, now: Instant) -> Option<Result<Uid, bool>> {
        match self.known {
            Known::Server(uid) => {
                self.at = now;
                Some(Ok(uid))
            }
            Known::Looking if now.duration_since(self.at) < LOOKUP_BOUND => Some(Err(false)),
            Known::Missing if now.duration_since(self.at) < RETRY_AFTER => Some(Err(false)),
            _ => None,
        }
    }
}

impl Servers {
    /// The server of `node` if known; otherwise whether a lookup should start now (and marks it
    /// started).
    fn get(&self, node: &str, now: Instant) -> Result<Uid, bool> {
        if let Some(answer) = self.map.get_mut(node).and_then(|mut e| e.answer(now)) {
            return answer;
        }
        self.map
            .retain(|_, e| now.duration_since(e.at) < FORGET_AFTER);
        let looking = Entry {
            known: Known::Looking,
            at: now,
        };
        match self.map.entry(node.to_owned()) {
            // Another call may have started the lookup (or finished it) meanwhile.
            dashmap::Entry::Occupied(mut held) => {
                if let Some(answer) = held.get_mut().answer(now) {
                    return answer;
                }
                held.insert(looking);
            }
            dashmap::Entry::Vacant(free) => {
                free.insert(looking);
            }
        }
        Err(true)
    }

    fn set(&self, node: &str, server: Option<Uid>, now: Instant) {
        let known = server.map_or(Known::Missing, Known::Server);
        self.map.insert(node.to_owned(), Entry { known, at: now });
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

impl Cluster {
    fn server_record(node: &str) -> String {
        format!("{SERVER_PREFIX}{node}")
    }

    /// Writes which Socket.IO server this node runs (each heartbeat).
    pub async fn announce_server(&self, server: Uid) -> Result<(), StoreError> {
        self.op(redis::cmd("SET")
            .arg(Self::server_record(&self.node))
            .arg(server.to_string())
            .arg("PX")
            .arg(SERVER_TTL.as_millis() as u64)
            .query_async::<()>(&mut self.conn_for(Lane::Membership)))
            .await
    }

    /// Deletes this node's record (when leaving).
    pub async fn withdraw_server(&self) {
        let _ = self
            .op(redis::cmd("DEL")
                .arg(Self::server_record(&self.node))
                .query_async::<i64>(&mut self.conn_for(Lane::Membership)))
            .await;
    }

    /// The Socket.IO server of `node`, when known; when not, a lookup starts in the background
    /// and the caller emits to every node this time.
    pub fn server_of(self: &Arc<Self>, node: &str) -> Option<Uid> {
        let start = match self.servers.get(node, Instant::now()) {
            Ok(uid) => return Some(uid),
            Err(start) => start,
        };
        if start {
            let cluster = Arc::downgrade(self);
            let node = node.to_owned();
            tokio::spawn(async move {
                let Some(cluster) = cluster.upgrade() else {
                    return;
                };
                let found: Result<Option<String>, StoreError> = cluster
                    .op(redis::cmd("GET")
                        .arg(Self::server_record(&node))
                        .query_async(&mut cluster.conn_for(Lane::Calls)))
                    .await;
                let server = match found {
                    Ok(Some(text)) => text.parse::<Uid>().ok(),
                    _ => None,
                };
                if server.is_none() {
                    tracing::debug!(%node, "no Socket.IO server known for a node yet; its emits go to every node");
                }
                cluster.servers.set(&node, server, Instant::now());
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_looked_up_once_then_known() {
        let s = Servers::default();
        let t = Instant::now();
        assert_eq!(s.get("a", t), Err(true));
        assert_eq!(s.get("a", t), Err(false), "one lookup at a time");
        let uid = Uid::new();
        s.set("a", Some(uid), t);
        assert_eq!(s.get("a", t + FORGET_AFTER / 2), Ok(uid));
        // Used, so kept past FORGET_AFTER from the first read.
        assert_eq!(s.get("a", t + FORGET_AFTER), Ok(uid));
    }

    #[test]
    fn a_missing_record_is_retried_later() {
        let s = Servers::default();
        let t = Instant::now();
        assert_eq!(s.get("a", t), Err(true));
        s.set("a", None, t);
        assert_eq!(s.get("a", t + RETRY_AFTER / 2), Err(false));
        assert_eq!(s.get("a", t + RETRY_AFTER), Err(true));
        // A lost lookup is started again.
        assert_eq!(s.get("a", t + RETRY_AFTER + LOOKUP_BOUND), Err(true));
    }

    #[test]
    fn unused_entries_are_dropped() {
        let s = Servers::default();
        let t = Instant::now();
        for i in 0..100 {
            s.set(&format!("n{i}"), Some(Uid::new()), t);
        }
        assert_eq!(s.len(), 100);
        assert_eq!(s.get("fresh", t + FORGET_AFTER), Err(true));
        assert_eq!(s.len(), 1);
    }
}
