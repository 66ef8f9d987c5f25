//! Calls another node sent this node for a tab bound here ([`crate::delivery::hop`]): each is
//! delivered as a call of this node would be (`local.rs`), to the socket the caller named if it
//! still holds the key here, and its outcome goes back to the caller. A cancel from the caller
//! ends the wait and tells the tab. When the caller's trace is kept, the delivery here has a span
//! of its own (`deliver_held`, the caller's delivery span its parent), and the tab works inside
//! it.

use std::sync::Arc;

use dashmap::DashMap;
use relay_wire::{CallMeta, TraceContext};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Span;

use super::Delivery;
use super::local::{Attempt, attempt, cancel};
use crate::app::App;
use crate::delivery::hop::{Held, Hop, Incoming, Outcome};
use crate::sockets::BIND_WAIT;
use crate::store::keys::{Binding, KeyShared};
use crate::store::redis::rid;
use crate::telemetry;

/// Serves the calls other nodes send this node until the node stops.
pub async fn serve_held(app: Arc<App>, hop: Arc<Hop>) {
    let Some(mut incoming) = hop.take_incoming() else {
        return;
    };
    // The calls running here for other nodes, by call id, to end on their caller's cancel.
    let running: Arc<DashMap<Arc<str>, CancellationToken>> = Arc::default();
    while let Some(item) = incoming.recv().await {
        match item {
            Incoming::Call(held) => {
                // Registered before the task runs: a cancel right behind the call finds it.
                let stop = CancellationToken::new();
                if held.awaited {
                    running.insert(held.id.clone(), stop.clone());
                }
                let (app, hop, running) = (app.clone(), hop.clone(), running.clone());
                tokio::spawn(async move {
                    let id = held.id.clone();
                    run(&app, &hop, held, stop).await;
                    running.remove(&id);
                });
            }
            Incoming::Cancel(id) => {
                if let Some((_, stop)) = running.remove(&id) {
                    stop.cancel();
                }
            }
        }
    }
}

/// The socket `sid` of this node, if it holds the key of digest `rid` here. A socket whose
/// handshake bind is still running is waited for, at most `wait`: the bind is told to the other
/// nodes (whose calls waiting for the key then come here) before it is recorded on this node.
async fn holder(
    app: &App,
    rid_wanted: &str,
    sid: &str,
    wait: std::time::Duration,
) -> Option<(Binding, Arc<KeyShared>)> {
    let key = app.io.get()?.settled_key(sid, wait).await?;
    if rid(&key) != rid_wanted {
        return None;
    }
    let (binding, shared) = app.keys.local_binding(&key)?;
    (binding.sid().to_string() == sid).then_some((binding, shared))
}

/// The span of a delivery on this node for a call from another, when the caller's trace is kept:
/// the caller's delivery span is its parent. None otherwise (no span of a trace the caller
/// dropped, and no trace started here).
fn held_span(held: &Held) -> Span {
    if !telemetry::enabled() {
        return Span::none();
    }
    let parent = TraceContext::from_values(held.traceparent.as_deref(), held.tracestate.as_deref());
    let Some(parent) = parent.filter(|p| p.parent.sampled()) else {
        return Span::none();
    };
    let span = tracing::info_span!(
        "deliver_held",
        otel.kind = "consumer",
        otel.name = "deliver_held",
        relay.call_id = %held.id,
        relay.attempt = i64::from(held.attempt),
    );
    telemetry::adopt(&span, &parent);
    span
}

async fn run(app: &App, hop: &Hop, mut held: Held, stop: CancellationToken) {
    let deadline = Instant::now() + held.timeout;
    let span = held_span(&held);
    // The tab works inside this node's span when there is one.
    if let Some(own) = telemetry::context_of(&span) {
        held.traceparent = Some(own.parent.as_str().to_owned());
        held.tracestate = own.state.as_ref().map(|s| s.as_str().to_owned());
    }
    let (outcome, answer, failure) = match holder(
        app,
        &held.rid,
        &held.sid,
        held.timeout.min(BIND_WAIT),
    )
    .await
    {
        None => (Outcome::Gone, None, None),
        Some((binding, shared)) => {
            let d = Delivery {
                event: std::mem::take(&mut held.event),
                params: &held.params,
                meta: CallMeta {
                    call_id: held.id.to_string(),
                    expects_result: held.awaited,
                    deadline_ms: held.awaited.then(|| held.timeout.as_millis().max(1) as u64),
                    // This node's span, else the caller's delivery span (or its caller's
                    // context): the tab works inside it, and the handler's time goes back with
                    // the answer.
                    traceparent: held.traceparent.take(),
                    tracestate: held.tracestate.take(),
                    accepts_handler_ms: held.awaited,
                },
                remaining: held.timeout,
                span: tracing::Span::none(),
            };
            let tried = attempt(
                &binding,
                &shared,
                &d,
                &held.id,
                deadline,
                std::future::pending(),
            );
            tokio::select! {
                biased;
                // The caller stopped waiting: nobody reads an outcome any more.
                _ = stop.cancelled() => {
                    cancel(&binding, &held.id);
                    return;
                }
                // This node is closing: its tabs re-bind elsewhere, where the caller finds them.
                _ = app.drain.force.cancelled() => {
                    cancel(&binding, &held.id);
                    (Outcome::Gone, None, None)
                }
                tried = tried => match tried {
                    Attempt::Answered(value) => match serde_json::value::to_raw_value(&value) {
                        Ok(raw) => (Outcome::Answered, Some(raw), None),
                        Err(_) => (Outcome::Answered, None, None),
                    },
                    Attempt::Delivered => (Outcome::Delivered, None, None),
                    Attempt::Again => (Outcome::Gone, None, None),
                    Attempt::Failed(e) => (Outcome::Failed, None, Some((e.code.as_str(), e.message))),
                },
            }
        }
    };
    let failure = failure
        .as_ref()
        .map(|(code, message)| (*code, message.as_str()));
    if let Some((code, _)) = failure {
        telemetry::fail(&span, code);
    }
    if hop
        .reply(&held, outcome, answer.as_deref(), failure)
        .await
        .is_err()
    {
        tracing::debug!(call_id = %held.id, "the outcome of a call from another node could not be sent back");
    }
}
