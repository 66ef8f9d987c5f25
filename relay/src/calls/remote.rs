//! One delivery attempt to a key's tab on another node, through the adapter to the key's room,
//! watching the key for a move while the answer is awaited.

use tokio::time::Instant;

use super::{
    Attempt, Call, Delivery, Route, SETTLE, Step, Timing, not_declared, prepare, stopped,
    tab_timeout,
};
use crate::app::App;
use crate::delivery::Io;
use crate::error::ApiError;
use crate::store::track::{Moved, RECHECK, Target, Track};
use crate::telemetry;
use relay_wire::Fp;
use socketioxide::AckError;

/// Delivers through the Redis adapter to the room of a key bound on another node and, for an
/// awaited call, waits for the answer, watching the key: if it moves (replaced, node lost and
/// re-bound elsewhere), the call is delivered again.
pub(super) async fn deliver(
    app: &App,
    track: &Track<'_>,
    call: &Call,
    target: &Target,
    deadline: Instant,
    timing: &mut Timing,
) -> Result<Step, ApiError> {
    let Some(io) = app.io.get() else {
        return Err(ApiError::unavailable());
    };
    let d = match prepare(call, deadline, Route::Remote) {
        Ok(d) => d,
        Err(e) => return Ok(Step::Done(Err(e))),
    };
    app.metrics.delivered(true);
    timing.route = Some(Route::Remote);
    let sent = Instant::now();
    // However the attempt ends, its time is the last attempt's.
    let attempt = attempt(app, io, track, call, target, deadline, &d).await;
    timing.delivery = sent.elapsed();
    match attempt {
        Ok(attempt) => Ok(attempt.settle(&d.span, timing)),
        Err(e) => {
            telemetry::fail(&d.span, e.code.as_str());
            Err(e)
        }
    }
}

async fn attempt(
    app: &App,
    io: &Io,
    track: &Track<'_>,
    call: &Call,
    target: &Target,
    deadline: Instant,
    d: &Delivery<'_>,
) -> Result<Attempt, ApiError> {
    use futures_util::StreamExt;
    let room = crate::delivery::room(&call.api_key);
    let key_fp = Fp(&call.api_key);
    // The Socket.IO server of the node Redis names: the emit goes there alone. Not known yet
    // (looked up meanwhile), the emit goes to every node, as it would without it.
    let server = app.server_of(&target.node);

    if !call.await_result {
        // Nothing answers a call that is not awaited: what the tab declared says whether any
        // handler will run it (one read, for such calls to a tab on another node only).
        if track
            .declared()
            .await?
            .is_some_and(|joined| !crate::sockets::handles(&joined, call.tool_name.as_str()))
        {
            return Ok(Attempt::Step(Step::Done(Err(not_declared(call)))));
        }
        io.emit_to_room(&room, server, &d.event, &d.args())
            .await
            .map_err(|_| ApiError::unavailable())?;
        tracing::debug!(key = %key_fp, call_id = %call.call_id, tool = %call.tool_name, node = %target.node, aimed = server.is_some(), "delivered through another node");
        return Ok(Attempt::Step(Step::Done(Ok(None))));
    }
    let acks = io
        .emit_to_room_with_ack(&room, server, d.remaining, &d.event, &d.args())
        .await
        .map_err(|_| ApiError::unavailable())?;
    tokio::pin!(acks);
    tracing::debug!(key = %key_fp, call_id = %call.call_id, tool = %call.tool_name, node = %target.node, aimed = server.is_some(), "delivered through another node, awaiting answer");
    // Changes are watched from the read that named the target on, so a move while the call was
    // being emitted is seen at once, not at the next recheck.
    let mut mark = track.round_mark();
    loop {
        let recheck = Instant::now() + RECHECK;
        tokio::select! {
            biased;
            e = stopped(app, call) => {
                io.cancel_in_room(&room, server, &call.call_id);
                return Ok(Attempt::Step(Step::Done(Err(e))));
            }
            answer = acks.next() => return Ok(match answer {
                // The room may still hold the key's previous socket, closing on its node while
                // the tab moves: its failure says nothing of the socket Redis named, which may
                // have the call already. Only that socket's failure sends the call again.
                Some((sid, Err(_))) if !is_target(&sid, &target.sid) => {
                    tracing::debug!(key = %key_fp, call_id = %call.call_id, "a leaving socket of the key failed the call; waiting for the tab's answer");
                    continue;
                }
                Some((_, Ok(value))) => Attempt::Answered(value),
                Some((_, Err(AckError::Timeout))) => {
                    io.cancel_in_room(&room, server, &call.call_id);
                    Attempt::Step(Step::Done(Err(tab_timeout())))
                }
                Some((_, Err(AckError::Decode(_)))) => Attempt::Step(Step::Done(Ok(Some(serde_json::Value::Null)))),
                // The socket closed, or no node had it in its room (it is moving): find it again.
                Some((_, Err(AckError::Socket(_)))) | None => {
                    tokio::time::sleep_until(deadline.min(Instant::now() + SETTLE)).await;
                    Attempt::Step(Step::Again)
                }
            }),
            _ = tokio::time::sleep_until(deadline) => {
                io.cancel_in_room(&room, server, &call.call_id);
                return Ok(Attempt::Step(Step::Done(Err(tab_timeout()))));
            }
            _ = tokio::time::timeout_at(recheck, track.changed_since(mark)) => {
                // The key changed (or a second passed): still the same socket? The next wait
                // counts changes from before this read.
                let next = track.mark();
                match track.since(target).await {
                    Ok(Moved::No) => mark = next,
                    // Offline, or its node late with a heartbeat: the socket the call went to
                    // may still answer, and is not sent the call again. The answers end by
                    // themselves if it closed (if its node died before answering a call aimed
                    // at it alone, at the adapter's request timeout); a tab that re-binds
                    // elsewhere is a move, delivered again at once.
                    Ok(Moved::Between) => {
                        tracing::debug!(key = %key_fp, call_id = %call.call_id, "tab between places; still awaiting the socket the call went to");
                        mark = next;
                    }
                    Ok(Moved::Elsewhere) => {
                        tracing::debug!(key = %key_fp, call_id = %call.call_id, "tab moved before answering; delivering again");
                        return Ok(Attempt::Step(Step::Again));
                    }
                    Err(e) => {
                        // Nobody will read the answer: the tab stops the call.
                        io.cancel_in_room(&room, server, &call.call_id);
                        return Err(e.into());
                    }
                }
            }
        }
    }
}

/// Whether an acknowledgement came from the socket the call was meant for.
fn is_target(sid: &socketioxide::socket::Sid, target: &str) -> bool {
    target
        .parse::<socketioxide::socket::Sid>()
        .is_ok_and(|t| t == *sid)
}
