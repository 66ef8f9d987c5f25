//! The servers' own credentials, read as a whole: the worker's (`RELAY_WORKER_SECRET`), the
//! operators' (`RELAY_OPERATOR_SECRET`), the session signing keys (`RELAY_SESSION_KEYS`), and
//! the refusal of the single agent secret of earlier versions. No two of them may be the same
//! secret, nor the app backend's issuer secret: each reaches something else.

use std::sync::Arc;

use super::{Options, Secret, secret_list};
use crate::sessions::SigningKeys;

/// Shortest worker or operator secret accepted: either one opens every key.
pub const MIN_SERVER_SECRET_LEN: usize = 16;

pub(super) struct Credentials {
    pub worker: Vec<Secret>,
    pub operator: Vec<Secret>,
    pub session_keys: Option<Arc<SigningKeys>>,
}

pub(super) fn credentials(problems: &mut Vec<String>, o: &Options) -> Credentials {
    if o.legacy_agent_secret
        .as_deref()
        .is_some_and(|s| !s.trim().is_empty())
    {
        problems.push(
            "RELAY_AGENT_SECRET is no longer read: the agent worker now has RELAY_WORKER_SECRET, \
             operators RELAY_OPERATOR_SECRET, and agents get session tokens for one key each \
             (POST /api/voice-agent/sessions); see docs/security.md"
                .into(),
        );
    }
    let present = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let worker = match present(&o.worker_secret) {
        Some(v) => secret_list(problems, "RELAY_WORKER_SECRET", &v, MIN_SERVER_SECRET_LEN),
        None => {
            problems.push(
                "RELAY_WORKER_SECRET is required: the agent worker's credential (openssl rand \
                 -hex 32), held by the relay and the worker only"
                    .into(),
            );
            Vec::new()
        }
    };
    let operator = present(&o.operator_secret)
        .map(|v| secret_list(problems, "RELAY_OPERATOR_SECRET", &v, MIN_SERVER_SECRET_LEN))
        .unwrap_or_default();
    let session_keys = match present(&o.session_keys) {
        Some(v) => match SigningKeys::parse(&v) {
            Ok(keys) => Some(Arc::new(keys)),
            Err(problem) => {
                problems.push(problem);
                None
            }
        },
        None => {
            problems.push(
                "RELAY_SESSION_KEYS is required: the Ed25519 keys that sign agents' session \
                 tokens and the bind proofs of tab tokens (`relay session-key` prints one; \
                 every node of a deployment holds the same list)"
                    .into(),
            );
            None
        }
    };
    if worker
        .iter()
        .any(|w| operator.iter().any(|op| op.expose() == w.expose()))
    {
        problems.push(
            "RELAY_OPERATOR_SECRET must differ from every RELAY_WORKER_SECRET: each reaches \
             something the other must not"
                .into(),
        );
    }
    Credentials {
        worker,
        operator,
        session_keys,
    }
}

/// A problem when an issuer secret is also a server's secret: the app's backend would hold the
/// worker's or the operators' reach.
pub(super) fn check_issuer(problems: &mut Vec<String>, issuer: &[Secret], c: &Credentials) {
    let shared = |list: &[Secret]| {
        issuer
            .iter()
            .any(|s| list.iter().any(|a| a.expose() == s.expose()))
    };
    if shared(&c.worker) || shared(&c.operator) {
        problems.push(
            "RELAY_TOKEN_ISSUER_SECRET must differ from RELAY_WORKER_SECRET and \
             RELAY_OPERATOR_SECRET: the app's backend should hold neither"
                .into(),
        );
    }
}
