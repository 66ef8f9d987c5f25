//! What the store's Redis operations answer: where a key's tab is, what a bind, a declaration,
//! a revoke, an idempotency claim or a call's admission found.

/// Where a key's tab is, as Redis says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Never issued, removed or revoked.
    Unknown,
    /// Issued or offline: a call waits for a tab.
    Waiting,
    Online {
        node: String,
        sid: String,
    },
}

/// The outcome of a bind in Redis.
pub enum Bound {
    /// This socket already held the key.
    Same,
    /// Bound; `replaced` names the node and socket that held it before; `mode` is the mode
    /// the tab is to be told.
    Bound {
        exp_unix: u64,
        replaced: Option<(String, String)>,
        mode: Option<String>,
    },
}

/// A key's state for `GET /api/voice-agent/keys/{apiKey}`.
pub struct StoredStatus {
    pub state: relay_wire::KeyState,
    pub since_ms: u64,
    pub ttl_ms: Option<u64>,
    /// When the tab's token expires (Unix ms).
    pub token_exp_ms: Option<u64>,
    /// What the tab declared and the mode set for it.
    pub tab: crate::store::keys::TabInfo,
}

/// What a declaration found.
pub enum Declared {
    /// Recorded (or equal to the stored one); the key's revision.
    Revision(u64),
    /// The socket does not hold the key.
    NotBound,
}

/// What a revoke found.
pub enum Revoked {
    Unknown,
    /// Revoked; the node that held the tab, if it was online.
    Done {
        online_on: Option<String>,
    },
}

pub enum IdemClaim {
    Run,
    Conflict,
    Pending { until_ms: u64 },
    Done { status: u16, body: Vec<u8> },
}

#[derive(Debug)]
pub enum Acquired {
    Ok,
    Unknown,
    /// The key's calls in flight are at its limit.
    TooMany,
    /// The session's own calls in flight are at its limit.
    SessionBusy,
    /// The session's call rate is spent.
    RateLimited,
    /// The session was ended.
    Ended,
}

/// What a call's admission takes ([`super::Cluster::acquire`]).
pub struct Admit<'a> {
    pub session: &'a SessionCall,
    pub call_id: &'a str,
    /// How long the call may run at most: its slot is not held past it.
    pub life: std::time::Duration,
    /// Makes the message that sends the call to another node, asked for when this node guesses
    /// the tab is there (the socket's id goes before it: see [`super::forms::ACQUIRE`]).
    pub offer: Option<&'a (dyn Fn() -> Vec<u8> + Sync)>,
}

/// An admitted call: its slot, where the tab is, and, when the admission also sent the call to
/// the node holding the tab, how many subscribers received it (on a cluster, a count of one
/// server's only).
pub struct Admitted {
    pub slot: super::Slot,
    pub place: Place,
    pub sent: Option<i64>,
}

/// The session a call belongs to, with its limits: counted under the key's hash tag.
pub struct SessionCall {
    /// The session's tag among its key's sessions ([`crate::store::sessions::session_tag`]).
    pub tag: u64,
    pub max_inflight: usize,
    pub rate_per_sec: u32,
}

impl Acquired {
    /// The admission script's first word.
    pub(super) fn from_word(word: Option<&str>) -> Acquired {
        match word {
            Some("ok") => Acquired::Ok,
            Some("busy") => Acquired::TooMany,
            Some("session_busy") => Acquired::SessionBusy,
            Some("rate") => Acquired::RateLimited,
            Some("ended") => Acquired::Ended,
            _ => Acquired::Unknown,
        }
    }
}
