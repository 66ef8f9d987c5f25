//! One delivery attempt to a socket of this node: emit, and for an awaited call wait for the
//! answer, the binding's end, a forced drain or the agent's cancel.

use socketioxide::{AckError, SendError, SocketError};
use tokio::time::Instant;

use super::{
    Attempt, Call, Delivery, Route, Step, Timing, not_declared, prepare, stopped, tab_timeout,
};
use crate::app::App;
use crate::error::ApiError;
use crate::sockets::DeclaredTools;
use crate::store::keys::{Binding, KeyShared};
use relay_wire::{ErrorCode, Fp};

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

/// Delivers to a socket of this node and, for an awaited call, waits for its answer.
pub(super) async fn deliver(
    app: &App,
    call: &Call,
    binding: &Binding,
    shared: &KeyShared,
    deadline: Instant,
    timing: &mut Timing,
) -> Step {
    let d = match prepare(call, deadline, Route::Local) {
        Ok(d) => d,
        Err(e) => return Step::Done(Err(e)),
    };
    app.metrics.delivered(false);
    timing.route = Some(Route::Local);
    let sent = Instant::now();
    // However the attempt ends, its time is the last attempt's.
    let step = attempt(app, call, binding, shared, deadline, &d).await;
    timing.delivery = sent.elapsed();
    step.settle(&d.span, timing)
}

async fn attempt(
    app: &App,
    call: &Call,
    binding: &Binding,
    shared: &KeyShared,
    deadline: Instant,
    d: &Delivery<'_>,
) -> Attempt {
    let key_fp = Fp(&call.api_key);
    if !call.await_result {
        if binding
            .socket
            .extensions()
            .get::<DeclaredTools>()
            .is_some_and(|declared| !declared.handles(call.tool_name.as_str()))
        {
            return Attempt::Step(Step::Done(Err(not_declared(call))));
        }
        return Attempt::Step(match binding.socket.emit(&d.event, &d.args()) {
            Ok(()) => {
                tracing::debug!(key = %key_fp, call_id = %call.call_id, tool = %call.tool_name, "delivered");
                Step::Done(Ok(None))
            }
            Err(err) => send_failure(binding, err, deadline).await,
        });
    }
    shared.add_pending(&call.call_id);
    let _pending = PendingGuard {
        shared,
        call_id: &call.call_id,
    };
    let ack =
        match binding
            .socket
            .emit_with_ack::<_, serde_json::Value>(d.remaining, &d.event, &d.args())
        {
            Ok(ack) => ack,
            Err(err) => return Attempt::Step(send_failure(binding, err, deadline).await),
        };
    tracing::debug!(key = %key_fp, call_id = %call.call_id, tool = %call.tool_name, "delivered, awaiting answer");
    Attempt::Step(tokio::select! {
        biased;
        e = stopped(app, call) => {
            cancel(binding, &call.call_id);
            Step::Done(Err(e))
        }
        // The tab left, was replaced or was revoked before answering: deliver again to
        // whichever tab binds the key next, within the same deadline.
        _ = binding.gone.cancelled() => {
            tracing::debug!(key = %key_fp, call_id = %call.call_id, "tab left before answering; waiting for it");
            Step::Again
        }
        answer = ack => match answer {
            Ok(value) => return Attempt::Answered(value),
            Err(AckError::Timeout) => {
                cancel(binding, &call.call_id);
                Step::Done(Err(tab_timeout()))
            }
            Err(AckError::Decode(_)) => Step::Done(Ok(Some(serde_json::Value::Null))),
            Err(AckError::Socket(_)) => {
                wait_gone(binding, deadline).await;
                Step::Again
            }
        },
    })
}

/// An emit that could not be queued. A closed socket means the tab is leaving: wait for its
/// binding to end (the disconnect handler marks it) and then for a new one.
async fn send_failure(binding: &Binding, err: SendError, deadline: Instant) -> Step {
    match err {
        SendError::Socket(SocketError::Closed) => {
            wait_gone(binding, deadline).await;
            Step::Again
        }
        SendError::Socket(SocketError::InternalChannelFull) => Step::Done(Err(ApiError::new(
            ErrorCode::RateLimited,
            "the tab's send buffer is full; it is not keeping up",
        ))),
        SendError::Serialize(_) => {
            Step::Done(Err(ApiError::invalid("params could not be encoded")))
        }
    }
}

async fn wait_gone(binding: &Binding, deadline: Instant) {
    let _ = tokio::time::timeout_at(deadline, binding.gone.cancelled()).await;
}

/// Tells the tab an awaited call ended without its answer. Best effort: the tab may be gone.
fn cancel(binding: &Binding, call_id: &str) {
    binding.socket.cancel_call(call_id);
}
