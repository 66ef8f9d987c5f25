//! Telling the relay a session's mode (the tab shows it): in order, once per change, again
//! for a while when the relay does not know the key yet or cannot be reached.

use std::sync::Arc;

use relay_wire::Fp;
use tokio::time::Instant;

use super::{Session, Sessions, TELL_AGAIN, TELL_RETRY};
use crate::client::RelayClient;

impl Sessions {
    /// Tells the relay the session's current mode (the tab shows it), in order, once per
    /// change; a failure is logged and the next change tries again.
    pub(super) fn tell_mode(&self, session: &Arc<Session>) {
        if !session.enforce_modes {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(tell(session.clone(), self.client.clone()));
    }

    /// Tells the relay `key`'s mode now, if it was not told yet, and returns once it is (or
    /// could not be): for a script that must not end before its tab shows where it got to.
    pub async fn mode_told(&self, key: &str) {
        if let Some(session) = self.get(key).filter(|s| s.enforce_modes) {
            tell(session, self.client.clone()).await;
        }
    }
}

/// Whether telling the mode may work a moment later: the relay does not know the key yet (its
/// tab has not bound since the relay started), or the relay cannot be reached or is draining.
fn not_yet(e: &crate::error::ToolError) -> bool {
    use relay_wire::ErrorCode;
    e.is(ErrorCode::UnknownKey)
        || e.is(ErrorCode::ShuttingDown)
        || e.is(ErrorCode::Unavailable)
        || e.code == crate::error::Code::RelayUnreachable
}

/// Tells the relay the session's current mode unless it was told already. A relay that
/// restarted knows the key again only once its tab binds anew (within seconds), and may itself
/// come up after the worker: until then (unknown_key, unreachable) the mode is told again, for
/// [`TELL_RETRY`].
async fn tell(session: Arc<Session>, client: RelayClient) {
    let mut told = session.told_mode.lock().await;
    let until = Instant::now() + TELL_RETRY;
    loop {
        let mode = session.stack().active().to_owned();
        if told.as_deref() == Some(mode.as_str()) || session.closed.is_cancelled() {
            return;
        }
        match client.set_mode(&session.key, &mode).await {
            Ok(notified) => {
                tracing::debug!(key = %Fp(&session.key), mode, tab_notified = notified, "mode told to the relay");
                *told = Some(mode);
                return;
            }
            Err(e) if not_yet(&e) && Instant::now() < until => {
                tracing::debug!(key = %Fp(&session.key), cause = %e, "mode not told yet");
                tokio::select! {
                    _ = session.closed.cancelled() => return,
                    _ = tokio::time::sleep(TELL_AGAIN) => {}
                }
            }
            Err(e) if not_yet(&e) => {
                tracing::info!(key = %Fp(&session.key), mode, cause = %e, "mode not told within {} s", TELL_RETRY.as_secs());
                return;
            }
            Err(e) => {
                tracing::warn!(key = %Fp(&session.key), cause = %e, "mode not told to the relay");
                return;
            }
        }
    }
}
