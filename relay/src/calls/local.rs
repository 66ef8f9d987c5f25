//! One delivery attempt to a socket of this node: emit, and for an awaited call wait for the
//! answer, the binding's end or the caller's stop. The same attempt serves a call of this node
//! ([`deliver`]) and one another node sent here for its tab (`held.rs`).

use std::future::Future;
use std::sync::Arc;

use socketioxide::{AckError, SendError, SocketError};
use tokio::time::Instant;

use super::{
    Call, Delivery, Route, Step, Timing, delivery_span, interpret, not_declared, prepare, stopped,
    tab_timeout,
};
use crate::app::App;
use crate::error::ApiError;
use crate::sockets::DeclaredTools;
use crate::store::keys::{Binding, KeyShared};
use crate::telemetry;
use relay_wire::{ErrorCode, TOOL_EVENT_PREFIX};

/// Removes the call from its key's pending list however the call ends.
struct PendingGuard<'a> {
    shared: &'a KeyShared,
    call_id: &'a str,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.shared.remove_pending(self.call_id);
    }
}

/// How an attempt on a socket of this node ended.
pub(super) enum Attempt {
    /// The tab answered (its acknowledgement, not yet read).
    Answered(serde_json::Value),
    /// Emitted; the call expects no answer.
    Delivered,
    /// The tab left, was replaced or was revoked first: find it again.
    Again,
    Failed(ApiError),
}

/// Delivers a call of this node to a socket of this node and, for an awaited call, waits for
/// its answer.
pub(super) async fn deliver(
    app: &App,
    call: &Call,
    binding: &Binding,
    shared: &KeyShared,
    deadline: Instant,
    timing: &mut Timing,
) -> Step {
    let d = match prepare(call, deadline, delivery_span(call, Route::Local)) {
        Ok(d) => d,
        Err(e) => return Step::Done(Err(e)),
    };
    app.metrics.delivered(false);
    timing.route = Some(Route::Local);
    let sent = Instant::now();
    let tried = attempt(
        binding,
        shared,
        &d,
        &call.call_id,
        deadline,
        stopped(app, call),
    )
    .await;
    // However the attempt ends, its time is the last attempt's.
    timing.delivery = sent.elapsed();
    match tried {
        Attempt::Answered(value) => Step::Done(interpret(value, &d.span, timing)),
        Attempt::Delivered => Step::Done(Ok(None)),
        Attempt::Again => Step::Again,
        Attempt::Failed(e) => {
            telemetry::fail(&d.span, e.code.as_str());
            Step::Done(Err(e))
        }
    }
}

/// Emits `d` to the socket of `binding` and, for an awaited call, waits for its answer until
/// `deadline`, the binding's end or `stop` (after which the tab is told the call ended).
pub(super) async fn attempt(
    binding: &Binding,
    shared: &KeyShared,
    d: &Delivery<'_>,
    call_id: &Arc<str>,
    deadline: Instant,
    stop: impl Future<Output = ApiError>,
) -> Attempt {
    if !d.meta.expects_result {
        // Nothing answers a call that is not awaited: what the tab declared says whether any
        // handler will run it.
        let tool = d.event.strip_prefix(TOOL_EVENT_PREFIX).unwrap_or(&d.event);
        if binding
            .socket
            .extensions()
            .get::<DeclaredTools>()
            .is_some_and(|declared| !declared.handles(tool))
        {
            return Attempt::Failed(not_declared(tool));
        }
        return match binding.socket.emit(&d.event, &d.args()) {
            Ok(()) => {
                tracing::debug!(call_id = %call_id, event = %d.event, "delivered");
                Attempt::Delivered
            }
            Err(err) => send_failure(binding, err, deadline).await,
        };
    }
    shared.add_pending(call_id);
    let _pending = PendingGuard { shared, call_id };
    let ack =
        match binding
            .socket
            .emit_with_ack::<_, serde_json::Value>(d.remaining, &d.event, &d.args())
        {
            Ok(ack) => ack,
            Err(err) => return send_failure(binding, err, deadline).await,
        };
    tracing::debug!(call_id = %call_id, event = %d.event, "delivered, awaiting answer");
    tokio::select! {
        biased;
        e = stop => {
            cancel(binding, call_id);
            Attempt::Failed(e)
        }
        // The tab left, was replaced or was revoked before answering: deliver again to
        // whichever tab binds the key next, within the same deadline.
        _ = binding.gone.cancelled() => {
            tracing::debug!(call_id = %call_id, "tab left before answering; waiting for it");
            Attempt::Again
        }
        answer = ack => match answer {
            Ok(value) => Attempt::Answered(value),
            Err(AckError::Timeout) => {
                cancel(binding, call_id);
                Attempt::Failed(tab_timeout())
            }
            Err(AckError::Decode(_)) => Attempt::Answered(serde_json::Value::Null),
            Err(AckError::Socket(_)) => {
                wait_gone(binding, deadline).await;
                Attempt::Again
            }
        },
    }
}

/// An emit that could not be queued. A closed socket means the tab is leaving: wait for its
/// binding to end (the disconnect handler marks it) and then for a new one.
async fn send_failure(binding: &Binding, err: SendError, deadline: Instant) -> Attempt {
    match err {
        SendError::Socket(SocketError::Closed) => {
            wait_gone(binding, deadline).await;
            Attempt::Again
        }
        SendError::Socket(SocketError::InternalChannelFull) => Attempt::Failed(ApiError::new(
            ErrorCode::RateLimited,
            "the tab's send buffer is full; it is not keeping up",
        )),
        SendError::Serialize(_) => {
            Attempt::Failed(ApiError::invalid("params could not be encoded"))
        }
    }
}

async fn wait_gone(binding: &Binding, deadline: Instant) {
    let _ = tokio::time::timeout_at(deadline, binding.gone.cancelled()).await;
}

/// Tells the tab an awaited call ended without its answer. Best effort: the tab may be gone.
pub(super) fn cancel(binding: &Binding, call_id: &str) {
    binding.socket.cancel_call(call_id);
}
