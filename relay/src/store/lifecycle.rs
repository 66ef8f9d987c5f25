//! The key lifecycle, stated once: [`apply`] says what an event does to a key. The in-memory
//! store runs it on every bind, release, revoke and expiry; the Redis store's Lua scripts are
//! checked against it case by case (`relay/tests/store_conformance.rs`).
//!
//! ```text
//!            issue          bind             release (same socket)
//!   (none) ───────▶ issued ──────▶ online ─────────────────────▶ offline ──┐
//!     ▲  bind (token)  ──────────▶   ▲ │ bind (other socket: replace)      │ bind
//!     │                              │ └───────────────────────────────────┘
//!     │ expire (not online)          └── bind from offline ◀──────────────
//!     └──────────── issued | offline | revoked
//!   revoke: issued | online | offline ──▶ revoked (a tombstone until its token expires)
//! ```

/// Where a key is in its life. A key that is absent (never issued here, expired, removed) has
/// no phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Issued,
    Online,
    Offline,
    Revoked,
}

/// What the lifecycle knows of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    pub phase: Phase,
    /// Once bound, a bare key never binds again: later binds must show the token.
    pub ever_bound: bool,
}

/// What a bind shows to prove the key was issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// A verified token; `expired` when its expiry has passed.
    Token { expired: bool },
    /// The bare key.
    BareKey,
}

/// Something that happens to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The token service minted it.
    Issue,
    /// A socket binds it; `same_socket` when that socket already holds it.
    Bind { shown: Shown, same_socket: bool },
    /// A socket let go of it; `same_socket` when that socket held it.
    Release { same_socket: bool },
    /// The agent revoked it.
    Revoke,
    /// Its time is up (unbound lifetime, reconnect grace, or a tombstone's token expiry).
    Expire,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error("unknown key: never issued here, expired or removed")]
    Unknown,
    #[error("this key was revoked")]
    Revoked,
    #[error("a bare key binds only once; present the token to bind again")]
    TokenRequired,
    #[error("token is expired")]
    Expired,
}

/// What an event does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The key moves to these facts (`None`: it is removed).
    To(Option<Facts>),
    /// Nothing changes.
    Stays,
    /// The event is refused (for a revoke, `Unknown`: nothing to revoke).
    Refused(BindError),
}

const fn facts(phase: Phase, ever_bound: bool) -> Transition {
    Transition::To(Some(Facts { phase, ever_bound }))
}

/// The lifecycle: what `event` does to a key that is `key` now.
pub fn apply(key: Option<Facts>, event: Event) -> Transition {
    use Phase::*;
    use Transition::*;
    match (key, event) {
        (_, Event::Issue) => facts(Issued, false),

        (
            None,
            Event::Bind {
                shown: Shown::BareKey,
                ..
            },
        ) => Refused(BindError::Unknown),
        (
            None,
            Event::Bind {
                shown: Shown::Token { expired: true },
                ..
            },
        ) => Refused(BindError::Expired),
        (None, Event::Bind { .. }) => facts(Online, true),
        (Some(k), Event::Bind { .. }) if k.phase == Revoked => Refused(BindError::Revoked),
        (
            Some(k),
            Event::Bind {
                shown: Shown::BareKey,
                ..
            },
        ) if k.ever_bound => Refused(BindError::TokenRequired),
        (
            Some(k),
            Event::Bind {
                same_socket: true, ..
            },
        ) if k.phase == Online => Stays,
        (Some(_), Event::Bind { .. }) => facts(Online, true),

        (Some(k), Event::Release { same_socket: true }) if k.phase == Online => {
            facts(Offline, k.ever_bound)
        }
        (_, Event::Release { .. }) => Stays,

        (None, Event::Revoke) => Refused(BindError::Unknown),
        (Some(k), Event::Revoke) if k.phase == Revoked => Refused(BindError::Unknown),
        (Some(k), Event::Revoke) => facts(Revoked, k.ever_bound),

        (None, Event::Expire) => Stays,
        (Some(k), Event::Expire) if k.phase == Online => Stays,
        (Some(_), Event::Expire) => To(None),
    }
}

/// Every key the lifecycle can reach (absent included), for tests that walk the table.
pub const REACHABLE: [Option<Facts>; 5] = [
    None,
    Some(Facts {
        phase: Phase::Issued,
        ever_bound: false,
    }),
    Some(Facts {
        phase: Phase::Online,
        ever_bound: true,
    }),
    Some(Facts {
        phase: Phase::Offline,
        ever_bound: true,
    }),
    Some(Facts {
        phase: Phase::Revoked,
        ever_bound: false,
    }),
];

/// Every event, for tests that walk the table.
pub const EVENTS: [Event; 9] = [
    Event::Issue,
    Event::Bind {
        shown: Shown::Token { expired: false },
        same_socket: false,
    },
    Event::Bind {
        shown: Shown::Token { expired: false },
        same_socket: true,
    },
    Event::Bind {
        shown: Shown::Token { expired: true },
        same_socket: false,
    },
    Event::Bind {
        shown: Shown::BareKey,
        same_socket: false,
    },
    Event::Release { same_socket: true },
    Event::Release { same_socket: false },
    Event::Revoke,
    Event::Expire,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revoked_key_never_binds_again() {
        for event in EVENTS {
            if let Event::Bind { .. } = event {
                let revoked = Some(Facts {
                    phase: Phase::Revoked,
                    ever_bound: true,
                });
                assert_eq!(
                    apply(revoked, event),
                    Transition::Refused(BindError::Revoked)
                );
            }
        }
    }

    #[test]
    fn an_online_key_never_expires() {
        let online = REACHABLE[2];
        assert_eq!(apply(online, Event::Expire), Transition::Stays);
    }

    #[test]
    fn every_reachable_key_stays_reachable() {
        for key in REACHABLE {
            for event in EVENTS {
                if let Transition::To(next) = apply(key, event) {
                    let reachable = REACHABLE.contains(&next)
                        || next.is_some_and(|f| f.phase == Phase::Revoked);
                    assert!(reachable, "{key:?} --{event:?}--> {next:?}");
                }
            }
        }
    }
}
