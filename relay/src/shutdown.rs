//! The one shutdown path: SIGINT or SIGTERM → draining (new work gets 503, `/readyz` turns false)
//! → in-flight calls get until the drain bound to finish → whatever is left is cancelled (the
//! tab gets `voice-agent:cancel`, the agent a 503) → `io.close()` tells every tab the server is
//! closing → the HTTP server stops.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::delivery::Io;

/// Tracks in-flight calls and the draining state.
#[derive(Default)]
pub struct Drain {
    draining: AtomicBool,
    inflight: AtomicUsize,
    idle: Notify,
    /// Fired when the drain bound is reached: calls still running end at once.
    pub force: CancellationToken,
}

/// One in-flight call; the drain waits for all of these to drop.
pub struct InflightCall<'a>(&'a Drain);

impl Drop for InflightCall<'_> {
    fn drop(&mut self) {
        if self.0.inflight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Drain {
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn enter(&self) -> InflightCall<'_> {
        self.inflight.fetch_add(1, Ordering::AcqRel);
        InflightCall(self)
    }

    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Acquire)
    }

    /// Waits until no call is in flight, or `bound` passes. Returns true when idle.
    async fn wait_idle(&self, bound: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.inflight() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.inflight() == 0;
            }
        }
    }
}

/// How long forced-out calls get to answer their agents after the drain bound.
const FORCE_GRACE: Duration = Duration::from_secs(2);

/// Drains the relay, giving calls in flight `bound` (`RELAY_DRAIN`); returns when it is safe
/// to stop serving.
pub async fn drain(drain: &Drain, bound: Duration, io: &Io) {
    drain.draining.store(true, Ordering::Release);
    let inflight = drain.inflight();
    tracing::info!(inflight, bound_ms = bound.as_millis() as u64, "draining");
    if !drain.wait_idle(bound).await {
        tracing::warn!(
            left = drain.inflight(),
            "drain bound reached; cancelling calls still in flight"
        );
        drain.force.cancel();
        drain.wait_idle(FORCE_GRACE).await;
    }
    io.close().await;
    tracing::info!("tabs told the server is closing");
}

/// Resolves on SIGINT or SIGTERM.
pub async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(err) => {
                tracing::error!(cause = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("SIGINT received"),
        _ = term => tracing::info!("SIGTERM received"),
    }
}
