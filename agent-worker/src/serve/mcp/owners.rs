//! Which agent session opened each MCP session: an MCP session belongs to the credential that
//! opened it, and a request on it with another session token (or for another key) is answered
//! as if the session did not exist. Entries go with the session's close, rmcp's `404` for it,
//! or the token's expiry.

use dashmap::DashMap;
use relay_wire::session::LEEWAY_SECS;

use crate::serve::auth::Agent;

/// Most MCP sessions remembered; past it the expired ones are dropped first, and a new
/// session is still served (its owner unrecorded, so no later request can use it).
const MAX_OWNED: usize = 100_000;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    /// The agent session (from its token) and the key.
    session: String,
    key: String,
    /// The token's expiry, Unix seconds.
    exp: u64,
}

#[derive(Default)]
pub struct Owners {
    by_session: DashMap<String, Owner>,
}

impl Owners {
    /// Records that `agent` opened the MCP session `id`.
    pub fn record(&self, id: &str, agent: &Agent) {
        if self.by_session.len() >= MAX_OWNED {
            self.sweep(crate::unix_now());
            if self.by_session.len() >= MAX_OWNED {
                tracing::warn!(
                    "too many MCP sessions: a new one is not recorded and cannot be used"
                );
                return;
            }
        }
        self.by_session.insert(
            id.to_owned(),
            Owner {
                session: agent.grant.session_id.clone(),
                key: agent.key.clone(),
                exp: agent.grant.exp,
            },
        );
    }

    /// True when `agent` (its token's session, its key) opened the MCP session `id`.
    pub fn owns(&self, id: &str, agent: &Agent) -> bool {
        self.by_session
            .get(id)
            .is_some_and(|o| o.session == agent.grant.session_id && o.key == agent.key)
    }

    pub fn forget(&self, id: &str) {
        self.by_session.remove(id);
    }

    /// Drops the sessions whose tokens expired (no request can be made on them any more).
    pub fn sweep(&self, now: u64) {
        self.by_session
            .retain(|_, o| now <= o.exp.saturating_add(LEEWAY_SECS));
    }
}
