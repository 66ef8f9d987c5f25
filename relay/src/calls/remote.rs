//! One delivery attempt to a key's tab on another node: the call goes to that node on its
//! channel ([`crate::delivery::hop`]; sent already by its admission when this node guessed that
//! node), which delivers it to the socket Redis named and sends the outcome back; meanwhile the
//! key is watched for a move. The call carries its delivery span's context to that node, which
//! hands it to the tab; the tab's handler time comes back with its answer.

use relay_wire::ErrorCode;
use tokio::time::Instant;

use super::{
    Call, Delivery, Route, SETTLE, Step, Timing, delivery_span, interpret, prepare, stopped,
    tab_timeout,
};
use crate::app::App;
use std::sync::{Arc, OnceLock};

use crate::delivery::hop::{Expected, Hop, Outcome, Outgoing, Reply};
use crate::error::ApiError;
use crate::store::track::{Moved, RECHECK, Target, Track};
use crate::telemetry;
use relay_wire::Fp;

/// A call's outcomes from other nodes, expected from before it is first sent (by its admission,
/// or by [`deliver`]), and the number of its next delivery.
pub(super) struct Away<'h> {
    hop: &'h Arc<Hop>,
    expected: OnceLock<Expected<'h>>,
    /// The span of the delivery its admission sent (delivery 0), until that delivery is read.
    first_span: OnceLock<tracing::Span>,
    /// 0 is the delivery its admission sent; later ones count from 1.
    next: u32,
}

impl<'h> Away<'h> {
    pub(super) fn new(hop: &'h Arc<Hop>) -> Self {
        Away {
            hop,
            expected: OnceLock::new(),
            first_span: OnceLock::new(),
            next: 1,
        }
    }

    /// The message its admission sends (delivery 0, in its own span), the outcome expected
    /// from now on. Empty if the call's deadline passed already.
    pub(super) fn first_message(&self, call: &Call, rid: &str, deadline: Instant) -> Vec<u8> {
        let span = self
            .first_span
            .get_or_init(|| delivery_span(call, Route::Remote));
        let Ok(d) = prepare(call, deadline, span.clone()) else {
            return Vec::new();
        };
        self.expected.get_or_init(|| self.hop.expect(&call.call_id));
        self.hop.message(&outgoing(call, rid, &d, 0))
    }

    fn expected(&mut self, call: &Call) -> &mut Expected<'h> {
        self.expected.get_or_init(|| self.hop.expect(&call.call_id));
        self.expected.get_mut().expect("set just above")
    }
}

/// Where one delivery goes: the socket Redis named, for the key of digest `rid`.
pub(super) struct To<'a> {
    pub target: &'a Target,
    pub rid: &'a str,
    pub deadline: Instant,
}

/// Sends the call to the node holding the key's tab (unless its admission did) and, for an
/// awaited call, waits for the answer, watching the key: if it moves (replaced, node lost and
/// re-bound elsewhere), the call is delivered again. A fire-and-forget call is done once that
/// node emitted it.
pub(super) async fn deliver(
    app: &App,
    track: &mut Track<'_>,
    call: &Call,
    to: &To<'_>,
    away: &mut Away<'_>,
    timing: &mut Timing,
) -> Result<Step, ApiError> {
    let sent = track.take_sent();
    // Delivery 0, which its admission sent, keeps the span whose context it carried (made for
    // it but not sent, it serves the first delivery sent from here).
    let span = away
        .first_span
        .take()
        .unwrap_or_else(|| delivery_span(call, Route::Remote));
    let d = match prepare(call, to.deadline, span) {
        Ok(d) => d,
        Err(e) => return Ok(Step::Done(Err(e))),
    };
    app.metrics.delivered(true);
    timing.route = Some(Route::Remote);
    let start = Instant::now();
    let step = attempt(app, track, call, to, away, &d, sent, timing).await;
    // However the attempt ends, its time is the last attempt's.
    timing.delivery = start.elapsed();
    match &step {
        Ok(Step::Done(Err(e))) | Err(e) => telemetry::fail(&d.span, e.code.as_str()),
        _ => {}
    }
    step
}

#[allow(clippy::too_many_arguments)]
async fn attempt(
    app: &App,
    track: &mut Track<'_>,
    call: &Call,
    to: &To<'_>,
    away: &mut Away<'_>,
    d: &Delivery<'_>,
    sent: Option<i64>,
    timing: &mut Timing,
) -> Result<Step, ApiError> {
    let (target, deadline, hop) = (to.target, to.deadline, away.hop);
    let key_fp = Fp(&call.api_key);
    let (attempt, receivers) = match sent {
        Some(receivers) => (0, receivers),
        None => {
            // Expected before it is sent, so the outcome cannot come first.
            away.expected(call);
            let attempt = away.next;
            away.next += 1;
            let message = hop.message(&outgoing(call, to.rid, d, attempt));
            let sent = hop.send(&target.node, &target.sid, &message).await;
            (attempt, sent.map_err(|_| ApiError::unavailable())?)
        }
    };
    // On one server Redis counts who received it: nobody means the node Redis names listens no
    // more (it stopped, and is not reaped yet). Wait for the key to change, at most a recheck,
    // and look again. (On a cluster the count is one server's: not a sign.)
    if receivers == 0 && hop.counts_receivers() {
        tracing::debug!(key = %key_fp, call_id = %call.call_id, node = %target.node, "the node holding the tab does not listen; waiting for the key to change");
        let wake = deadline.min(Instant::now() + RECHECK);
        tokio::select! {
            biased;
            e = stopped(app, call) => return Ok(Step::Done(Err(e))),
            _ = tokio::time::timeout_at(wake, track.changed()) => return Ok(Step::Again),
        }
    }
    tracing::debug!(key = %key_fp, call_id = %call.call_id, tool = %call.tool_name, node = %target.node, "sent to the node holding the tab");
    // Changes are watched from the read that named the target on, so a move while the call was
    // being sent is seen at once, not at the next recheck.
    let mut mark = track.round_mark();
    loop {
        let recheck = Instant::now() + RECHECK;
        tokio::select! {
            biased;
            e = stopped(app, call) => {
                hop.cancel(&target.node, &call.call_id);
                return Ok(Step::Done(Err(e)));
            }
            reply = away.expected(call).reply(attempt) => {
                if reply.given_back {
                    track.given_back();
                }
                return Ok(outcome(reply, call, deadline, &d.span, timing).await);
            }
            _ = tokio::time::sleep_until(deadline) => {
                hop.cancel(&target.node, &call.call_id);
                return Ok(Step::Done(Err(tab_timeout())));
            }
            _ = tokio::time::timeout_at(recheck, track.changed_since(mark)) => {
                // The key changed (or a second passed): still the same socket? The next wait
                // counts changes from before this read.
                let next = track.mark();
                match track.since(target).await {
                    Ok(Moved::No) => mark = next,
                    // Offline, or its node late with a heartbeat: the socket the call went to
                    // may still answer, and is not sent the call again. If its node died, no
                    // answer comes; a tab that re-binds elsewhere is a move, delivered again at
                    // once, and none coming back ends the call at its deadline.
                    Ok(Moved::Between) => {
                        tracing::debug!(key = %key_fp, call_id = %call.call_id, "tab between places; still awaiting the socket the call went to");
                        mark = next;
                    }
                    Ok(Moved::Elsewhere) => {
                        tracing::debug!(key = %key_fp, call_id = %call.call_id, "tab moved before answering; delivering again");
                        return Ok(Step::Again);
                    }
                    Err(e) => {
                        // Nobody will read the answer: the tab stops the call.
                        hop.cancel(&target.node, &call.call_id);
                        return Err(e.into());
                    }
                }
            }
        }
    }
}

/// What a call sent to another node carries. The holding node gives the call's slot back with
/// its final outcome: the call has no outcome of its own to record then.
pub(super) fn outgoing<'a>(
    call: &'a Call,
    rid: &'a str,
    d: &'a Delivery<'a>,
    attempt: u32,
) -> Outgoing<'a> {
    Outgoing {
        id: &call.call_id,
        rid,
        event: &d.event,
        params: d.params,
        awaited: call.await_result,
        timeout: d.remaining,
        give_back: true,
        attempt,
        traceparent: d.meta.traceparent.as_deref(),
        tracestate: d.meta.tracestate.as_deref(),
    }
}

/// What the holding node's reply means for the call.
async fn outcome(
    reply: Reply,
    call: &Call,
    deadline: Instant,
    span: &tracing::Span,
    timing: &mut Timing,
) -> Step {
    match reply.outcome {
        Outcome::Answered => Step::Done(match reply.answer {
            Some(raw) => match serde_json::from_str(raw.get()) {
                Ok(value) => interpret(value, span, timing),
                Err(_) => Ok(Some(serde_json::Value::Null)),
            },
            None => Ok(Some(serde_json::Value::Null)),
        }),
        Outcome::Delivered if !call.await_result => Step::Done(Ok(None)),
        Outcome::Delivered => Step::Done(Ok(Some(serde_json::Value::Null))),
        // The socket left or lost the key there: a moment for the key to settle, then find it.
        Outcome::Gone => {
            tokio::time::sleep_until(deadline.min(Instant::now() + SETTLE)).await;
            Step::Again
        }
        Outcome::Failed => {
            let (code, message) = reply.failure.unwrap_or_default();
            let code = ErrorCode::ALL
                .into_iter()
                .find(|c| c.as_str() == code)
                .unwrap_or(ErrorCode::Internal);
            Step::Done(Err(ApiError::new(code, message)))
        }
    }
}
