//! Where each key's tab was at this node's last look: a guess that lets a call's admission also
//! send the call, in the same round trip, to the node holding the tab ([`super::forms::ACQUIRE`]).
//!
//! Nothing is decided on a guess: the admission script sends the call only if Redis names that
//! very node now (on one server, a node that heartbeats; on a cluster, the caller guesses only a
//! node it heard from lately), and otherwise answers where the tab is, as without a guess. So a
//! guess needs no invalidation: a wrong one costs the round trip it would have saved, and every
//! admission and lookup corrects it. Bounded: past [`LIMIT`] keys the guesses start over.

use dashmap::DashMap;

use super::{Cluster, Place};

/// Keys whose last place is kept at most.
const LIMIT: usize = 50_000;

#[derive(Default)]
pub struct Hints {
    map: DashMap<String, String>,
}

impl Hints {
    /// The node the key's tab was on at the last look, if any.
    pub fn get(&self, rid: &str) -> Option<String> {
        self.map.get(rid).map(|n| n.clone())
    }

    /// The key's tab is on `node` (`None`: on none).
    pub fn set(&self, rid: &str, node: Option<&str>) {
        match node {
            Some(node) => {
                if self.map.get(rid).is_some_and(|n| *n == node) {
                    return;
                }
                if self.map.len() >= LIMIT {
                    self.map.clear();
                }
                self.map.insert(rid.to_owned(), node.to_owned());
            }
            None => {
                self.map.remove(rid);
            }
        }
    }
}

impl Cluster {
    /// The node this node guesses holds the key's tab, when it is another node (on a cluster,
    /// one heard from lately: the admission script cannot read the heartbeats there).
    pub(super) fn hint(&self, rid: &str) -> Option<String> {
        self.hints
            .get(rid)
            .filter(|node| *node != self.node && (!self.sharded || self.heard_lately(node)))
    }

    /// What this node saw of where the key's tab is.
    pub(super) fn set_hint(&self, rid: &str, place: &Place) {
        match place {
            Place::Online { node, .. } => self.hints.set(rid, Some(node)),
            Place::Waiting | Place::Unknown => self.hints.set(rid, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guess_is_kept_corrected_and_bounded() {
        let h = Hints::default();
        assert_eq!(h.get("k"), None);
        h.set("k", Some("a"));
        assert_eq!(h.get("k").as_deref(), Some("a"));
        h.set("k", Some("b"));
        assert_eq!(h.get("k").as_deref(), Some("b"));
        h.set("k", None);
        assert_eq!(h.get("k"), None);
        for i in 0..LIMIT + 1 {
            h.set(&i.to_string(), Some("n"));
        }
        assert!(h.map.len() <= LIMIT);
    }
}
