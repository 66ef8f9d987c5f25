//! The tool-call path: find the tab bound to a key (waiting for it within the call's timeout),
//! emit `voice-agent:<toolName>` with `(params, meta)`, and for an awaited call wait for the tab's
//! acknowledgement. `params` travels as the raw JSON the agent sent.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use relay_wire::{CallMeta, ErrorCode, TOOL_EVENT_PREFIX, TabAnswer};
use serde_json::value::RawValue;
use socketioxide::{AckError, SendError, SocketError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::App;
use crate::error::{ApiError, truncate};
use crate::store::KeyStore;
use crate::store::keys::{Binding, KeyShared};
use crate::store::track::{LocateError, Located, RECHECK, Target, Track, TrackError};
use relay_wire::{ApiKey, Fp, ToolName};

/// A validated tool call.
pub struct Call {
    /// Which agent secret authorized it (for the shared call rate with several nodes).
    pub agent: usize,
    pub api_key: ApiKey,
    pub tool_name: ToolName,
    pub params: Option<Box<RawValue>>,
    pub await_result: bool,
    pub timeout: Duration,
    pub call_id: Arc<str>,
    /// Cancelled when the agent cancels the call ([`Running`]).
    pub cancel: CancellationToken,
}

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

/// Resolves when a call must end early: the drain was forced, or the agent cancelled it.
async fn stopped(app: &App, call: &Call) -> ApiError {
    tokio::select! {
        biased;
        _ = app.drain.force.cancelled() => ApiError::shutting_down(),
        _ = call.cancel.cancelled() => ApiError::new(
            ErrorCode::Timeout,
            "the agent cancelled the call before it was done",
        ),
    }
}

/// New call id: `c_` + 24 hex characters.
pub fn new_call_id() -> Arc<str> {
    let mut bytes = [0u8; 12];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
    format!("c_{}", hex::encode(bytes)).into()
}

const EMPTY_PARAMS: &str = "{}";

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

/// How one delivery attempt ended.
enum Step {
    Done(Result<Option<serde_json::Value>, ApiError>),
    /// The tab left or moved before the call was done: find it again, within the deadline.
    Again,
}

/// Runs one call to its end. `Ok(Some(result))` for an answered awaited call, `Ok(None)` for a
/// delivered fire-and-forget call.
///
/// One path whatever keeps the keys: the store's [`Track`] holds the call's in-flight slot and
/// says where the key's tab is (waiting within the deadline while none holds it); a tab on this
/// node is reached directly, one on another node through the adapter.
pub async fn run(app: &App, call: &Call) -> Result<Option<serde_json::Value>, ApiError> {
    let deadline = Instant::now() + call.timeout;
    let mut track = app
        .store
        .track(&call.api_key, call.agent)
        .await
        .map_err(|e| match e {
            TrackError::Unknown => ApiError::unknown_key(),
            TrackError::TooMany => too_many(app),
            TrackError::RateLimited => agent_rate_limited(app),
            TrackError::Store(e) => e.into(),
        })?;
    loop {
        let located = tokio::select! {
            biased;
            e = stopped(app, call) => return Err(e),
            located = track.locate(deadline) => match located {
                Ok(located) => located,
                Err(LocateError::Unknown) => return Err(ApiError::unknown_key()),
                Err(LocateError::Offline) => return Err(tab_offline()),
                Err(LocateError::Store(e)) => return Err(e.into()),
            },
        };
        let step = match located {
            Located::Here(binding) => {
                deliver_local(app, call, &binding, track.shared(), deadline).await
            }
            Located::Stale(sid) => {
                // A socket of this node that is gone: correct the store. Otherwise the local
                // record lags a moment behind a bind in progress.
                if !socket_alive(app, &sid) {
                    track.release_stale(&sid).await?;
                }
                settle(app, call, &track, deadline).await?
            }
            Located::Elsewhere(target) => {
                deliver_remote(app, &track, call, &target, deadline).await?
            }
        };
        match step {
            Step::Done(outcome) => return outcome,
            Step::Again if track.ends_at_deadline() && Instant::now() >= deadline => {
                return Err(if call.await_result {
                    tab_timeout()
                } else {
                    tab_offline()
                });
            }
            Step::Again => continue,
        }
    }
}

fn too_many(app: &App) -> ApiError {
    ApiError::new(
        ErrorCode::RateLimited,
        format!(
            "this key already has {} tool calls in flight",
            app.config.max_inflight_per_key
        ),
    )
}

pub fn agent_rate_limited(app: &App) -> ApiError {
    ApiError::new(
        ErrorCode::RateLimited,
        format!(
            "this agent started more than {} tool calls in a second",
            app.config.agent_rate_per_sec
        ),
    )
}

fn tab_offline() -> ApiError {
    ApiError::new(
        ErrorCode::TabOffline,
        "no tab is bound to this key and none came back within the call's timeout",
    )
}

fn tab_timeout() -> ApiError {
    ApiError::new(ErrorCode::Timeout, "the tab did not answer in time")
}

fn deadline_passed() -> ApiError {
    ApiError::new(ErrorCode::Timeout, "the call's timeout passed")
}

/// What one delivery attempt sends: `voice-agent:<toolName>` with `(params, meta)`, and how long
/// the tab has to answer.
struct Delivery<'a> {
    event: String,
    params: &'a RawValue,
    meta: CallMeta,
    remaining: Duration,
}

impl Delivery<'_> {
    fn args(&self) -> (&RawValue, &CallMeta) {
        (self.params, &self.meta)
    }
}

fn prepare(call: &Call, deadline: Instant) -> Result<Delivery<'_>, ApiError> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Err(deadline_passed());
    }
    let params: &RawValue = match &call.params {
        Some(p) => p,
        None => serde_json::from_str(EMPTY_PARAMS).map_err(|_| ApiError::invalid("params"))?,
    };
    Ok(Delivery {
        event: format!("{TOOL_EVENT_PREFIX}{}", call.tool_name),
        params,
        meta: CallMeta {
            call_id: call.call_id.to_string(),
            expects_result: call.await_result,
            deadline_ms: call
                .await_result
                .then(|| remaining.as_millis().max(1) as u64),
        },
        remaining,
    })
}

/// Delivers to a socket of this node and, for an awaited call, waits for its answer.
async fn deliver_local(
    app: &App,
    call: &Call,
    binding: &Binding,
    shared: &KeyShared,
    deadline: Instant,
) -> Step {
    let d = match prepare(call, deadline) {
        Ok(d) => d,
        Err(e) => return Step::Done(Err(e)),
    };
    let key_fp = Fp(&call.api_key);

    if !call.await_result {
        return match binding.socket.emit(&d.event, &d.args()) {
            Ok(()) => {
                tracing::debug!(key = %key_fp, call_id = %call.call_id, tool = %call.tool_name, "delivered");
                Step::Done(Ok(None))
            }
            Err(err) => send_failure(binding, err, deadline).await,
        };
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
            Err(err) => return send_failure(binding, err, deadline).await,
        };
    tracing::debug!(key = %key_fp, call_id = %call.call_id, tool = %call.tool_name, "delivered, awaiting answer");
    tokio::select! {
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
            Ok(value) => Step::Done(interpret(value)),
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
    }
}

/// Whether this node has a connected socket with this id.
fn socket_alive(app: &App, sid: &str) -> bool {
    app.io.get().is_some_and(|io| io.socket_alive(sid))
}

/// A short pause before looking again: until the key changes, or a few milliseconds.
async fn settle(
    app: &App,
    call: &Call,
    track: &Track<'_>,
    deadline: Instant,
) -> Result<Step, ApiError> {
    let wake = deadline.min(Instant::now() + SETTLE);
    tokio::select! {
        biased;
        e = stopped(app, call) => Err(e),
        _ = tokio::time::timeout_at(wake, track.changed()) => Ok(Step::Again),
    }
}

/// Pause when the tab is between places (its room is empty for a moment).
const SETTLE: Duration = Duration::from_millis(25);

/// Delivers through the Redis adapter to the room of a key bound on another node and, for an
/// awaited call, waits for the answer, watching the key: if it moves (replaced, node lost and
/// re-bound elsewhere), the call is delivered again.
async fn deliver_remote(
    app: &App,
    track: &Track<'_>,
    call: &Call,
    target: &Target,
    deadline: Instant,
) -> Result<Step, ApiError> {
    use futures_util::StreamExt;
    let Some(io) = app.io.get() else {
        return Err(ApiError::unavailable());
    };
    let d = match prepare(call, deadline) {
        Ok(d) => d,
        Err(e) => return Ok(Step::Done(Err(e))),
    };
    let room = crate::delivery::room(&call.api_key);
    let key_fp = Fp(&call.api_key);

    if !call.await_result {
        io.emit_to_room(&room, &d.event, &d.args())
            .await
            .map_err(|_| ApiError::unavailable())?;
        tracing::debug!(key = %key_fp, call_id = %call.call_id, tool = %call.tool_name, node = %target.node, "delivered through another node");
        return Ok(Step::Done(Ok(None)));
    }
    let acks = io
        .emit_to_room_with_ack(&room, d.remaining, &d.event, &d.args())
        .await
        .map_err(|_| ApiError::unavailable())?;
    tokio::pin!(acks);
    tracing::debug!(key = %key_fp, call_id = %call.call_id, tool = %call.tool_name, node = %target.node, "delivered through another node, awaiting answer");
    loop {
        let mark = track.mark();
        let recheck = Instant::now() + RECHECK;
        tokio::select! {
            biased;
            e = stopped(app, call) => {
                io.cancel_in_room(&room, &call.call_id);
                return Ok(Step::Done(Err(e)));
            }
            answer = acks.next() => return Ok(match answer {
                // The room may still hold the key's previous socket, closing on its node while
                // the tab moves: its failure says nothing of the socket Redis named, which may
                // have the call already. Only that socket's failure sends the call again.
                Some((sid, Err(_))) if !is_target(&sid, &target.sid) => {
                    tracing::debug!(key = %key_fp, call_id = %call.call_id, "a leaving socket of the key failed the call; waiting for the tab's answer");
                    continue;
                }
                Some((_, Ok(value))) => Step::Done(interpret(value)),
                Some((_, Err(AckError::Timeout))) => {
                    io.cancel_in_room(&room, &call.call_id);
                    Step::Done(Err(tab_timeout()))
                }
                Some((_, Err(AckError::Decode(_)))) => Step::Done(Ok(Some(serde_json::Value::Null))),
                // The socket closed, or no node had it in its room (it is moving): find it again.
                Some((_, Err(AckError::Socket(_)))) | None => {
                    tokio::time::sleep_until(deadline.min(Instant::now() + SETTLE)).await;
                    Step::Again
                }
            }),
            _ = tokio::time::sleep_until(deadline) => {
                io.cancel_in_room(&room, &call.call_id);
                return Ok(Step::Done(Err(tab_timeout())));
            }
            _ = tokio::time::timeout_at(recheck, track.changed_since(mark)) => {
                // The key changed (or a second passed): still the same socket?
                if !track.still_at(target).await? {
                    tracing::debug!(key = %key_fp, call_id = %call.call_id, "tab moved before answering; delivering again");
                    return Ok(Step::Again);
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

/// Reads the tab's acknowledgement.
fn interpret(value: serde_json::Value) -> Result<Option<serde_json::Value>, ApiError> {
    match TabAnswer::from_ack(value) {
        TabAnswer::Result(result) => Ok(Some(result)),
        TabAnswer::Error(err) => {
            let code = if err.code == ErrorCode::NoHandler.as_str() {
                ErrorCode::NoHandler
            } else {
                ErrorCode::ToolFailed
            };
            let mut message = err.message;
            truncate(&mut message, 1000);
            Err(ApiError::new(code, message))
        }
    }
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
