//! What one agent session may take of its key: calls in flight and a call rate, so one
//! session cannot spend what another (of the same key or any other) needs. In memory they are
//! counted with the key ([`SessionUses`], under the key's own small lock); on Redis under the
//! key's hash tag, in the key's admission script. And the sessions ended before their tokens
//! expire ([`Ended`], in memory; on Redis, a marker under the key's tag).

use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;
use relay_wire::session::SESSION_ID_PREFIX;

/// Most sessions counted per key: beyond it, the oldest idle one is forgotten.
const MAX_USES_PER_KEY: usize = 32;

/// A session's limits.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    pub max_inflight: usize,
    pub rate_per_sec: u32,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_inflight: usize::MAX,
            rate_per_sec: u32::MAX,
        }
    }
}

/// A session's tag among its key's sessions: the 8 random bytes at the end of its id, as a
/// number (the id's first part is the key's digest, the same for all of them).
pub fn session_tag(session_id: &str) -> u64 {
    let random = session_id
        .get(SESSION_ID_PREFIX.len() + 32..)
        .unwrap_or_default();
    u64::from_str_radix(random, 16).unwrap_or(0)
}

/// Why a session may not start another call now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its calls in flight are at the limit.
    Busy,
    /// Its calls this second are at the limit.
    Rate,
}

#[derive(Debug, Clone, Copy)]
struct Use {
    tag: u64,
    inflight: u32,
    /// The second `count` counts calls in.
    second: u64,
    count: u32,
}

/// The sessions of one key that have called lately.
#[derive(Debug, Default)]
pub struct SessionUses {
    uses: Vec<Use>,
}

impl SessionUses {
    /// Counts one call of session `tag` at Unix second `now`, or says why it may not start.
    pub fn admit(&mut self, tag: u64, limits: SessionLimits, now: u64) -> Result<(), Refused> {
        let i = match self.uses.iter().position(|u| u.tag == tag) {
            Some(i) => i,
            None => {
                if self.uses.len() >= MAX_USES_PER_KEY {
                    // Forget an idle session, one from an earlier second first.
                    let idle = self
                        .uses
                        .iter()
                        .enumerate()
                        .filter(|(_, u)| u.inflight == 0)
                        .min_by_key(|(_, u)| u.second)
                        .map(|(i, _)| i);
                    match idle {
                        Some(i) => {
                            self.uses.swap_remove(i);
                        }
                        None => return Err(Refused::Busy),
                    }
                }
                self.uses.push(Use {
                    tag,
                    inflight: 0,
                    second: now,
                    count: 0,
                });
                self.uses.len() - 1
            }
        };
        let u = &mut self.uses[i];
        if u.second != now {
            u.second = now;
            u.count = 0;
        }
        if u.count >= limits.rate_per_sec {
            return Err(Refused::Rate);
        }
        if u.inflight as usize >= limits.max_inflight {
            return Err(Refused::Busy);
        }
        u.count += 1;
        u.inflight += 1;
        Ok(())
    }

    /// A call of session `tag` ended.
    pub fn leave(&mut self, tag: u64) {
        if let Some(u) = self.uses.iter_mut().find(|u| u.tag == tag) {
            u.inflight = u.inflight.saturating_sub(1);
        }
    }
}

/// The sessions ended before their tokens expire, with those expiries (Unix seconds).
#[derive(Debug, Default)]
pub struct Ended {
    map: DashMap<Box<str>, u64>,
    /// Entries in `map`: the check on a call's path costs one load while none is ended.
    count: AtomicUsize,
}

impl Ended {
    pub fn end(&self, session_id: &str, exp: u64) {
        if self.map.insert(session_id.into(), exp).is_none() {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn contains(&self, session_id: &str) -> bool {
        self.count.load(Ordering::Relaxed) > 0 && self.map.contains_key(session_id)
    }

    /// Forgets the sessions whose tokens have expired (nothing can present them any more).
    pub fn sweep(&self, now: u64) {
        let before = self.map.len();
        self.map.retain(|_, exp| *exp >= now);
        let removed = before.saturating_sub(self.map.len());
        self.count.fetch_sub(removed, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: SessionLimits = SessionLimits {
        max_inflight: 2,
        rate_per_sec: 3,
    };

    #[test]
    fn a_session_is_held_to_its_own_limits_only() {
        let mut uses = SessionUses::default();
        assert!(uses.admit(1, LIMITS, 10).is_ok());
        assert!(uses.admit(1, LIMITS, 10).is_ok());
        assert_eq!(uses.admit(1, LIMITS, 10), Err(Refused::Busy));
        // Another session of the same key is untouched.
        assert!(uses.admit(2, LIMITS, 10).is_ok());
        uses.leave(1);
        assert!(uses.admit(1, LIMITS, 10).is_ok());
        uses.leave(1);
        uses.leave(1);
        // Three calls this second: the fourth waits for the next second.
        assert_eq!(uses.admit(1, LIMITS, 10), Err(Refused::Rate));
        assert!(uses.admit(1, LIMITS, 11).is_ok());
    }

    #[test]
    fn idle_sessions_make_room_and_busy_ones_stay() {
        let mut uses = SessionUses::default();
        for tag in 0..MAX_USES_PER_KEY as u64 {
            assert!(uses.admit(tag, LIMITS, 5).is_ok());
        }
        assert_eq!(uses.admit(999, LIMITS, 5), Err(Refused::Busy));
        uses.leave(7);
        assert!(uses.admit(999, LIMITS, 6).is_ok());
        assert_eq!(uses.uses.len(), MAX_USES_PER_KEY);
    }

    #[test]
    fn ended_sessions_are_known_until_they_expire() {
        let ended = Ended::default();
        assert!(!ended.contains("s_1"));
        ended.end("s_1", 100);
        ended.end("s_1", 100);
        assert!(ended.contains("s_1") && !ended.contains("s_2"));
        ended.sweep(101);
        assert!(!ended.contains("s_1"));
        assert_eq!(ended.count.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn tags_come_from_the_random_part() {
        let digest = "0".repeat(32);
        let id = relay_wire::session::new_session_id(&digest, [0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(session_tag(&id), 0x0102);
    }
}
