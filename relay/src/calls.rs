//! The tool-call path: find the tab bound to a key (waiting for it within the call's timeout),
//! emit `voice-agent:<toolName>` with `(params, meta)`, and for an awaited call wait for the tab's
//! acknowledgement. `params` travels as the raw JSON the agent sent.

use std::sync::Arc;
use std::time::Duration;

use relay_wire::{CallMeta, CancelEvent, ErrorCode, TOOL_EVENT_PREFIX, TabAnswer, events};
use serde_json::value::RawValue;
use socketioxide::{AckError, SendError, SocketError};
use tokio::time::Instant;

use crate::App;
use crate::error::ApiError;
use crate::keys::{AcquireError, Binding, KeyShared, WaitError};
use relay_wire::Fp;

/// A validated tool call.
pub struct Call {
    pub api_key: String,
    pub tool_name: String,
    pub params: Option<Box<RawValue>>,
    pub await_result: bool,
    pub timeout: Duration,
    pub call_id: Arc<str>,
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

/// Runs one call to its end. `Ok(Some(result))` for an answered awaited call, `Ok(None)` for a
/// delivered fire-and-forget call.
pub async fn run(app: &App, call: &Call) -> Result<Option<serde_json::Value>, ApiError> {
    let started = Instant::now();
    let deadline = started + call.timeout;
    let guard = app.keys.acquire(&call.api_key).map_err(|e| match e {
        AcquireError::Unknown => ApiError::unknown_key(),
        AcquireError::TooMany => ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "this key already has {} tool calls in flight",
                app.config.max_inflight_per_key
            ),
        ),
    })?;
    let event = format!("{TOOL_EVENT_PREFIX}{}", call.tool_name);
    let params: &RawValue = match &call.params {
        Some(p) => p,
        None => serde_json::from_str(EMPTY_PARAMS).map_err(|_| ApiError::invalid("params"))?,
    };
    let key_fp = Fp(&call.api_key);
    let _pending = call.await_result.then(|| {
        guard.shared().add_pending(&call.call_id);
        PendingGuard {
            shared: guard.shared(),
            call_id: &call.call_id,
        }
    });

    loop {
        let binding = tokio::select! {
            biased;
            _ = app.drain.force.cancelled() => return Err(ApiError::shutting_down()),
            waited = app.keys.wait_online(&call.api_key, deadline) => match waited {
                Ok(binding) => binding,
                Err(WaitError::Unknown) => return Err(ApiError::unknown_key()),
                Err(WaitError::Offline) => {
                    return Err(ApiError::new(
                        ErrorCode::TabOffline,
                        "no tab is bound to this key and none came back within the call's timeout",
                    ));
                }
            },
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(ApiError::new(
                ErrorCode::Timeout,
                "the call's timeout passed",
            ));
        }
        let meta = CallMeta {
            call_id: call.call_id.to_string(),
            expects_result: call.await_result,
            deadline_ms: call
                .await_result
                .then(|| remaining.as_millis().max(1) as u64),
        };
        let args = (params, &meta);

        if !call.await_result {
            match binding.socket.emit(&event, &args) {
                Ok(()) => {
                    tracing::debug!(key = %key_fp, call_id = %call.call_id, tool = %call.tool_name, "delivered");
                    return Ok(None);
                }
                Err(err) => {
                    send_failure(&binding, err, deadline).await?;
                    continue;
                }
            }
        }

        let ack = match binding
            .socket
            .timeout(remaining)
            .emit_with_ack::<_, serde_json::Value>(&event, &args)
        {
            Ok(ack) => ack,
            Err(err) => {
                send_failure(&binding, err, deadline).await?;
                continue;
            }
        };
        tracing::debug!(key = %key_fp, call_id = %call.call_id, tool = %call.tool_name, "delivered, awaiting answer");
        tokio::select! {
            biased;
            _ = app.drain.force.cancelled() => {
                cancel(&binding, &call.call_id);
                return Err(ApiError::shutting_down());
            }
            // The tab left, was replaced or was revoked before answering: deliver again to
            // whichever tab binds the key next, within the same deadline.
            _ = binding.gone.cancelled() => {
                tracing::debug!(key = %key_fp, call_id = %call.call_id, "tab left before answering; waiting for it");
                continue;
            }
            answer = ack => return match answer {
                Ok(value) => interpret(value),
                Err(AckError::Timeout) => {
                    cancel(&binding, &call.call_id);
                    Err(ApiError::new(ErrorCode::Timeout, "the tab did not answer in time"))
                }
                Err(AckError::Decode(_)) => Ok(Some(serde_json::Value::Null)),
                Err(AckError::Socket(_)) => {
                    wait_gone(&binding, deadline).await;
                    continue;
                }
            },
        }
    }
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

fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// An emit that could not be queued. A closed socket means the tab is leaving: wait for its
/// binding to end (the disconnect handler marks it) and then for a new one.
async fn send_failure(
    binding: &Binding,
    err: SendError,
    deadline: Instant,
) -> Result<(), ApiError> {
    match err {
        SendError::Socket(SocketError::Closed) => {
            wait_gone(binding, deadline).await;
            Ok(())
        }
        SendError::Socket(SocketError::InternalChannelFull) => Err(ApiError::new(
            ErrorCode::RateLimited,
            "the tab's send buffer is full; it is not keeping up",
        )),
        SendError::Serialize(_) => Err(ApiError::invalid("params could not be encoded")),
    }
}

async fn wait_gone(binding: &Binding, deadline: Instant) {
    let _ = tokio::time::timeout_at(deadline, binding.gone.cancelled()).await;
}

/// Tells the tab an awaited call ended without its answer. Best effort: the tab may be gone.
pub fn cancel(binding: &Binding, call_id: &str) {
    let _ = binding.socket.emit(
        events::CANCEL,
        &CancelEvent {
            call_id: call_id.to_owned(),
        },
    );
}
