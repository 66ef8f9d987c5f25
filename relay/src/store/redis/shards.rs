//! On a Redis Cluster, the messages to a node (a key's change told to the nodes waiting for it, a
//! call sent to the node holding its tab, the call's outcome sent back) go on sharded channels,
//! from the server that runs the key's script straight to the node, instead of a classic publish
//! that the cluster forwards over its bus to every server.
//!
//! Each node subscribes, on every server, a channel of its own under a hash tag that server
//! serves: `va:s:{<tag>}:<node>` ([`SHARD_PREFIX`]), one per range of hash slots that
//! `CLUSTER SLOTS` lists, the tag being a name whose hash slot is the range's first. Every node
//! reads the same ranges, so a sender names the channel of the range holding the key's hash
//! slot, and the key's script publishes on it with `SPUBLISH` from the key's own server
//! ([`forms::SEND_LUA`](super::forms)). When that channel has no subscriber there (the node has
//! not subscribed yet, or reads other ranges during a resharding, or a failover moved the
//! server and the node has not subscribed on the new one yet, or the node only listens on its
//! classic channel), or the tag is not served by that server at all (the script catches the
//! error), the script publishes on the node's classic channel, as before. One publish reaches
//! the node either way: nothing is lost and nothing arrives twice.
//!
//! The ranges are read, and the channels of new ones subscribed, each heartbeat (with the other
//! subscriptions, [`super::Cluster::resubscribe`]).

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

/// A node's sharded channel is this, `{<tag>}:` and the node's name.
pub const SHARD_PREFIX: &str = "va:s:";
/// Hash slots in a Redis Cluster.
const SLOTS: u16 = 16384;
/// At most this many ranges are followed (a cluster of three primaries lists three); past it, the
/// others' messages go on the classic channel.
const RANGES_MAX: usize = 64;

/// A range of hash slots one server serves, as `CLUSTER SLOTS` lists it, and its tag.
#[derive(Clone, Debug, PartialEq)]
struct Range {
    first: u16,
    last: u16,
    tag: Arc<str>,
}

/// The ranges of hash slots last read, and the tags this node subscribed.
#[derive(Default)]
pub(super) struct Shards {
    ranges: RwLock<Vec<Range>>,
    subscribed: std::sync::Mutex<HashSet<Arc<str>>>,
}

/// The hash slot of a Redis name (CRC16 of its hash tag, or of the whole name).
pub(super) fn slot_of(name: &[u8]) -> u16 {
    let hashed = name
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &name[open + 1..];
            let close = rest.iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(name);
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS
}

/// The shortest decimal number whose hash slot is `slot` (every slot has one below 10^6).
fn tag_for(slot: u16) -> Arc<str> {
    (0u32..)
        .map(|n| n.to_string())
        .find(|n| slot_of(n.as_bytes()) == slot)
        .map(Arc::from)
        .unwrap_or_else(|| Arc::from(""))
}

/// A node's sharded channel under `tag`.
pub(super) fn channel(tag: &str, node: &str) -> String {
    format!("{SHARD_PREFIX}{{{tag}}}:{node}")
}

impl Shards {
    /// The tag of the range holding `name`'s hash slot; empty when no range is known (the
    /// message then goes on the classic channel).
    pub(super) fn tag_of(&self, name: &str) -> Arc<str> {
        let ranges = self.ranges.read().unwrap_or_else(|p| p.into_inner());
        if ranges.is_empty() {
            // One server, or no ranges read yet: no hash slot to compute.
            return Arc::from("");
        }
        let slot = slot_of(name.as_bytes());
        let at = ranges.partition_point(|r| r.last < slot);
        match ranges.get(at) {
            Some(r) if r.first <= slot => r.tag.clone(),
            _ => Arc::from(""),
        }
    }

    /// Keeps `ranges` (first and last hash slot of each) as the ones read last; answers the tags
    /// not subscribed yet, marked subscribed (given back by [`Shards::unmark`] if that fails).
    fn set(&self, mut ranges: Vec<(u16, u16)>) -> Vec<Arc<str>> {
        ranges.retain(|(first, last)| first <= last && *last < SLOTS);
        ranges.sort_unstable();
        ranges.dedup();
        ranges.truncate(RANGES_MAX);
        // The tags already known, read before the new ones are found (outside the lock).
        let known: Vec<Option<Arc<str>>> = {
            let old = self.ranges.read().unwrap_or_else(|p| p.into_inner());
            ranges
                .iter()
                .map(|(first, _)| {
                    old.iter()
                        .find(|r| r.first == *first)
                        .map(|r| r.tag.clone())
                })
                .collect()
        };
        let kept: Vec<Range> = ranges
            .into_iter()
            .zip(known)
            .map(|((first, last), tag)| Range {
                first,
                last,
                tag: tag.unwrap_or_else(|| tag_for(first)),
            })
            .collect();
        let mut subscribed = self.subscribed.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = kept
            .iter()
            .filter(|r| subscribed.len() < RANGES_MAX && subscribed.insert(r.tag.clone()))
            .map(|r| r.tag.clone())
            .collect();
        *self.ranges.write().unwrap_or_else(|p| p.into_inner()) = kept;
        fresh
    }

    /// `tag` was not subscribed after all: tried again at the next read.
    fn unmark(&self, tag: &str) {
        self.subscribed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tag);
    }
}

/// The ranges of hash slots in a `CLUSTER SLOTS` reply: first and last slot of each.
fn ranges_in(reply: &redis::Value) -> Vec<(u16, u16)> {
    let redis::Value::Array(entries) = reply else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| match entry {
            redis::Value::Array(fields) => match (fields.first(), fields.get(1)) {
                (Some(redis::Value::Int(first)), Some(redis::Value::Int(last))) => {
                    Some((u16::try_from(*first).ok()?, u16::try_from(*last).ok()?))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

impl super::Cluster {
    /// On a Redis Cluster, reads the ranges of hash slots and subscribes this node's sharded
    /// channels of those it did not subscribe yet (see the module's text).
    pub(super) async fn follow_shards(&self) -> Result<(), super::StoreError> {
        if !self.sharded {
            return Ok(());
        }
        let reply: redis::Value = self
            .op(redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async(&mut self.conn_for(super::Lane::Membership)))
            .await?;
        let classic = format!("{}{}", super::NODE_PREFIX, self.node);
        for tag in self.shards.set(ranges_in(&reply)) {
            let chan = channel(&tag, &self.node);
            if let Err(e) = self.pubsub.subscribe_beside(chan, &classic).await {
                self.shards.unmark(&tag);
                tracing::warn!(cause = %e, "cannot subscribe a sharded channel of this node yet");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_slots_are_redis_own() {
        // As `CLUSTER KEYSLOT` answers.
        assert_eq!(slot_of(b"a"), 15495);
        assert_eq!(slot_of(b"b"), 3300);
        assert_eq!(slot_of(b"x{b}y"), 3300);
        assert_eq!(slot_of(b"va:w:{x}"), 16287);
        assert_eq!(slot_of(b"foo{bar}{zap}"), 5061, "the first tag");
        // An empty tag, or none closed: the whole name.
        assert_eq!(slot_of(b"{}a"), 10875);
        assert_eq!(slot_of(b"foo{}{bar}"), 8363);
        assert_eq!(slot_of(b"{b"), 6215);
    }

    #[test]
    fn every_tag_hashes_to_its_slot() {
        for slot in [0, 1, 5460, 5461, 10922, 10923, 16383] {
            let tag = tag_for(slot);
            assert!(!tag.is_empty());
            assert_eq!(slot_of(channel(&tag, "n1").as_bytes()), slot, "{tag}");
        }
    }

    #[test]
    fn a_name_finds_its_range_tag() {
        let s = Shards::default();
        assert_eq!(&*s.tag_of("va:w:{x}"), "", "nothing read yet");
        let fresh = s.set(vec![(10923, 16383), (0, 5460), (5461, 10922)]);
        assert_eq!(fresh.len(), 3);
        for name in ["va:w:{x}", "va:w:{y}", "a", "b", "c"] {
            let tag = s.tag_of(name);
            let slot = slot_of(name.as_bytes());
            let first = [0, 5461, 10923]
                .into_iter()
                .rev()
                .find(|f| *f <= slot)
                .unwrap();
            assert_eq!(slot_of(tag.as_bytes()), first, "{name}");
        }
        assert!(
            s.set(vec![(0, 5460), (5461, 10922), (10923, 16383)])
                .is_empty(),
            "the same ranges: nothing more to subscribe"
        );
        // A range split by a resharding: one more channel; a slot outside every range has none.
        let fresh = s.set(vec![(0, 99), (200, 5460)]);
        assert_eq!(fresh.len(), 1);
        assert_eq!(slot_of(fresh[0].as_bytes()), 200);
        let outside = (0u32..)
            .map(|n| format!("k{n}"))
            .find(|k| (100..200).contains(&slot_of(k.as_bytes())))
            .unwrap();
        assert_eq!(&*s.tag_of(&outside), "");
    }

    #[test]
    fn the_ranges_followed_are_bounded() {
        let s = Shards::default();
        let many: Vec<(u16, u16)> = (0..200).map(|i| (i * 10, i * 10 + 9)).collect();
        assert_eq!(s.set(many).len(), RANGES_MAX);
        assert!(s.set(vec![(5000, 6000)]).is_empty(), "no more than that");
        s.unmark(&tag_for(0));
        assert_eq!(
            s.set(vec![(0, 9)]).len(),
            1,
            "one given back is taken again"
        );
    }

    #[test]
    fn a_cluster_slots_reply_is_read() {
        use redis::Value::{Array, BulkString, Int};
        let node = |port| Array(vec![BulkString(b"127.0.0.1".to_vec()), Int(port)]);
        let reply = Array(vec![
            Array(vec![Int(0), Int(5460), node(7000), node(7003)]),
            Array(vec![Int(5461), Int(10922), node(7001)]),
            Array(vec![Int(70000), Int(1), node(7002)]),
            Int(3),
        ]);
        assert_eq!(ranges_in(&reply), vec![(0, 5460), (5461, 10922)]);
        assert!(ranges_in(&Int(1)).is_empty());
    }
}
