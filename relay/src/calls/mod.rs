//! The tool-call path: find the tab bound to a key (waiting for it within the call's timeout),
//! emit `voice-agent:<toolName>` with `(params, meta)`, and for an awaited call wait for the tab's
//! acknowledgement. `params` travels as the raw JSON the agent sent.
//!
//! One loop ([`run`]) whatever keeps the keys: the store's `Track` says where the tab is, and
//! one delivery attempt goes to a socket of this node (`local.rs`) or to the node that holds
//! the tab (`remote.rs`), which delivers it as its own (`held.rs`). Each call keeps its
//! [`Timing`] (the delivery's time and the handler's, which the tab reports when the meta says
//! the relay reads it), and, while spans are exported, a span per delivery attempt whose context
//! the tab receives (through the holding node for a tab on another node).

mod held;
mod local;
mod remote;
mod running;

pub use held::serve_held;
pub use running::{Running, RunningGuard};

use std::sync::Arc;
use std::time::Duration;

use relay_wire::{CallMeta, ErrorCode, TOOL_EVENT_PREFIX, TabAnswer, TraceContext};
use serde_json::value::RawValue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Span;

use crate::app::App;
use crate::error::{ApiError, truncate};
use crate::store::KeyStore;
use crate::store::track::{LocateError, Located, Ticket, Track, TrackError};
use crate::telemetry;
use relay_wire::session::SessionGrant;
use relay_wire::{ApiKey, ToolName};

/// A validated tool call.
pub struct Call {
    /// The agent session that sent it (its calls in flight and rate are its own).
    pub session: Arc<SessionGrant>,
    pub api_key: ApiKey,
    pub tool_name: ToolName,
    pub params: Option<Box<RawValue>>,
    pub await_result: bool,
    pub timeout: Duration,
    pub call_id: Arc<str>,
    /// Cancelled when the agent cancels the call ([`Running`]).
    pub cancel: CancellationToken,
    /// The caller's W3C trace context, when the request carried a valid one (boxed: a call
    /// without one stays as small as before, and allocates nothing for it).
    pub trace: Option<Box<TraceContext>>,
}

/// Where a call's time went: its last delivery attempt (from the emit to the answer, or to the
/// attempt's end without one) and, within it, the tab's handler as the tab reported it.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Timing {
    pub delivery: Duration,
    pub tab: Option<Duration>,
    /// Where the last attempt went: a socket of this node, or another node's.
    pub route: Option<Route>,
}

/// Where a delivery attempt went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Local,
    Remote,
}

impl Route {
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Local => "local",
            Route::Remote => "remote",
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

/// How long a call's slot outlives the call's own deadline (and a forced drain) on Redis: past
/// it, the slot of a call whose node died with it no longer counts.
const SLOT_MARGIN: Duration = Duration::from_secs(10);

/// New call id: `c_` + 24 hex characters.
pub fn new_call_id() -> Arc<str> {
    let mut bytes = [0u8; 12];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
    format!("c_{}", hex::encode(bytes)).into()
}

const EMPTY_PARAMS: &str = "{}";

/// How one delivery attempt ended.
enum Step {
    Done(Result<Option<serde_json::Value>, ApiError>),
    /// The tab left or moved before the call was done: find it again, within the deadline.
    Again,
}

/// Runs one call to its end. `Ok(Some(result))` for an answered awaited call, `Ok(None)` for a
/// delivered fire-and-forget call; `timing` holds where the time went.
///
/// One path whatever keeps the keys: the store's [`Track`] holds the call's in-flight slot and
/// says where the key's tab is (waiting within the deadline while none holds it); a tab on this
/// node is reached directly, one on another node through the adapter.
pub async fn run(
    app: &App,
    call: &Call,
    timing: &mut Timing,
) -> Result<Option<serde_json::Value>, ApiError> {
    let deadline = Instant::now() + call.timeout;
    // On Redis, the admission sends the call to the node holding the tab when this node guesses
    // which one that is: the message it sends, made only then, and its outcome expected from
    // then on.
    let hop = app.io.get().and_then(|io| io.hop());
    let rid = hop.map(|_| crate::delivery::room(&call.api_key));
    let mut away = hop.map(remote::Away::new);
    let offer = |away: &remote::Away<'_>, rid: &str| away.first_message(call, rid, deadline);
    let offer = away
        .as_ref()
        .zip(rid.as_deref())
        .map(|(away, rid)| move || offer(away, rid));
    let ticket = Ticket {
        call_id: &call.call_id,
        life: call.timeout + app.config.drain + SLOT_MARGIN,
        offer: offer.as_ref().map(|f| f as &(dyn Fn() -> Vec<u8> + Sync)),
    };
    let mut track = app
        .store
        .track(&call.api_key, &call.session.session_id, &ticket)
        .await
        .map_err(|e| match e {
            TrackError::Unknown => ApiError::unknown_key(),
            TrackError::TooMany => too_many(app),
            TrackError::SessionBusy => session_busy(app),
            TrackError::RateLimited => session_rate_limited(app),
            TrackError::Ended => ApiError::session_ended(),
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
                local::deliver(app, call, &binding, track.shared(), deadline, timing).await
            }
            Located::Stale(sid) => {
                // A socket of this node that is gone: correct the store. Otherwise the local
                // record lags a moment behind a bind in progress.
                if !socket_alive(app, &sid) {
                    track.release_stale(&sid).await?;
                }
                settle(app, call, &track, deadline).await?
            }
            // Boxed: the adapter's emit and acknowledgement state must not grow every
            // single-node call's future.
            Located::Elsewhere(target) => match (away.as_mut(), rid.as_deref()) {
                (Some(away), Some(rid)) => {
                    let to = remote::To {
                        target: &target,
                        rid,
                        deadline,
                    };
                    Box::pin(remote::deliver(app, &mut track, call, &to, away, timing)).await?
                }
                _ => return Err(ApiError::unavailable()),
            },
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

fn session_busy(app: &App) -> ApiError {
    ApiError::new(
        ErrorCode::RateLimited,
        format!(
            "this agent session already has {} tool calls in flight",
            app.config.session_max_inflight
        ),
    )
}

fn session_rate_limited(app: &App) -> ApiError {
    ApiError::new(
        ErrorCode::RateLimited,
        format!(
            "this agent session started {} tool calls in this second; try again in a moment",
            app.config.session_rate_per_sec
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

/// A call that is not awaited, to a tool the tab declared it does not handle: nothing would
/// run it, and nothing would say so.
fn not_declared(tool: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NoHandler,
        format!("the tab declared the tools it handles, and {tool} is not among them"),
    )
}

fn deadline_passed() -> ApiError {
    ApiError::new(ErrorCode::Timeout, "the call's timeout passed")
}

/// What one delivery attempt sends: `voice-agent:<toolName>` with `(params, meta)`, and how long
/// the tab has to answer; its span while spans are exported (else none).
struct Delivery<'a> {
    event: String,
    params: &'a RawValue,
    meta: CallMeta,
    remaining: Duration,
    span: Span,
}

impl Delivery<'_> {
    fn args(&self) -> (&RawValue, &CallMeta) {
        (self.params, &self.meta)
    }
}

/// The span of one delivery attempt inside the call's span; none when the call has none (spans
/// not exported, or its trace not kept).
fn delivery_span(call: &Call, route: Route) -> Span {
    if telemetry::enabled() && !Span::current().is_none() {
        tracing::info_span!(
            "deliver",
            otel.kind = "producer",
            otel.name = "deliver",
            relay.route = route.as_str(),
            relay.call_id = %call.call_id,
        )
    } else {
        Span::none()
    }
}

fn prepare(call: &Call, deadline: Instant, span: Span) -> Result<Delivery<'_>, ApiError> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Err(deadline_passed());
    }
    let params: &RawValue = match &call.params {
        Some(p) => p,
        None => serde_json::from_str(EMPTY_PARAMS).map_err(|_| ApiError::invalid("params"))?,
    };
    // The tab works inside this attempt's span when spans are exported; otherwise inside the
    // caller's context, passed on as it came.
    let trace = telemetry::context_of(&span);
    let trace = trace.as_ref().or(call.trace.as_deref());
    Ok(Delivery {
        event: format!("{TOOL_EVENT_PREFIX}{}", call.tool_name),
        params,
        meta: CallMeta {
            call_id: call.call_id.to_string(),
            expects_result: call.await_result,
            deadline_ms: call
                .await_result
                .then(|| remaining.as_millis().max(1) as u64),
            traceparent: trace.map(|t| t.parent.as_str().to_owned()),
            tracestate: trace
                .and_then(|t| t.state.as_ref())
                .map(|s| s.as_str().to_owned()),
            accepts_handler_ms: call.await_result,
        },
        remaining,
        span,
    })
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

/// Reads the tab's acknowledgement, and the handler's time it reports.
fn interpret(
    value: serde_json::Value,
    span: &Span,
    timing: &mut Timing,
) -> Result<Option<serde_json::Value>, ApiError> {
    let (answer, handler_ms) = TabAnswer::from_timed_ack(value);
    if let Some(ms) = handler_ms {
        timing.tab = Some(Duration::from_secs_f64(ms / 1000.0));
        telemetry::event(span, "tab answered", &[("relay.handler_ms", ms)]);
    }
    match answer {
        TabAnswer::Result(result) => Ok(Some(result)),
        TabAnswer::Error(err) => {
            let code = if err.code == ErrorCode::NoHandler.as_str() {
                ErrorCode::NoHandler
            } else {
                ErrorCode::ToolFailed
            };
            let mut message = err.message;
            truncate(&mut message, 1000);
            telemetry::fail(span, code.as_str());
            Err(ApiError::new(code, message))
        }
    }
}
