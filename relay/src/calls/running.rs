//! The calls an agent can cancel while they run.

use std::sync::Arc;

use dashmap::DashMap;
use tokio_util::sync::CancellationToken;

/// The calls running with an `Idempotency-Key`, so that the agent can cancel one it no longer
/// waits for (its own caller went away): the call ends at once, and a tab that has it is told
/// `voice-agent:cancel` as at a timeout. One node only: a cancel reaches the calls of the node
/// that receives it.
#[derive(Default)]
pub struct Running {
    calls: DashMap<(String, String), CancellationToken>,
}

/// Removes a call from [`Running`] however it ends.
pub struct RunningGuard {
    running: Arc<Running>,
    id: (String, String),
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.running.calls.remove(&self.id);
    }
}

impl Running {
    /// How many calls can be cancelled now.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Registers the call `(api_key, idempotency_key)` with its token.
    pub fn register(
        self: &Arc<Self>,
        api_key: &str,
        idempotency_key: &str,
        token: CancellationToken,
    ) -> RunningGuard {
        let id = (api_key.to_owned(), idempotency_key.to_owned());
        self.calls.insert(id.clone(), token);
        RunningGuard {
            running: self.clone(),
            id,
        }
    }

    /// Cancels the running call; false when none runs here under that key.
    pub fn cancel(&self, api_key: &str, idempotency_key: &str) -> bool {
        let id = (api_key.to_owned(), idempotency_key.to_owned());
        match self.calls.get(&id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }
}
