//! A session's timeline: what happened in it, in order, bounded. The session opened; its mode
//! changed; the offer an agent sees and what the tab declared took new revisions; the tab went
//! online or offline; each tool call started and settled (outcome, the relay's call id, the
//! trace id, the relay's time split); the session closed. Each session keeps at most
//! `max_events` (the oldest go first, counted in `dropped`), and a closed session's timeline is
//! kept `keep` long, at most `max_closed` of them. Readers can wait for the next event
//! ([`Timeline::wait_after`]). No key is ever held here, only its fingerprint.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use relay_wire::{KeyState, ServerTiming};
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Code;

/// How much history is kept (`WORKER_TIMELINE_EVENTS`, `WORKER_TIMELINE_KEEP_SECS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineConfig {
    /// Events kept per session; 0 keeps no timeline at all.
    pub max_events: usize,
    /// How long a closed session's timeline is kept.
    pub keep: Duration,
    /// Most closed sessions' timelines kept at once (the oldest go first).
    pub max_closed: usize,
}

impl Default for TimelineConfig {
    fn default() -> Self {
        TimelineConfig {
            max_events: 256,
            keep: Duration::from_secs(15 * 60),
            max_closed: 1000,
        }
    }
}

/// One thing that happened, with its place in the timeline (`seq`, from 1) and its time (Unix
/// milliseconds).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub seq: u64,
    pub at_ms: u64,
    #[serde(flatten)]
    pub what: What,
}

/// How a settled call is drawn: `ok`, `timed_out` (the deadline passed without an answer:
/// `timeout`, `tab_offline`), `failed` (the tab or the relay answered with an error), or
/// `refused` (the worker or the relay would not send it: arguments, mode, key, limits).
pub fn category(outcome: Result<(), Code>) -> &'static str {
    use relay_wire::ErrorCode as E;
    match outcome {
        Ok(()) => "ok",
        Err(Code::Relay(E::Timeout | E::TabOffline)) => "timed_out",
        Err(
            Code::Relay(
                E::ToolFailed | E::NoHandler | E::Unavailable | E::ShuttingDown | E::Internal,
            )
            | Code::RelayUnreachable
            | Code::BadResponse
            | Code::Cancelled,
        ) => "failed",
        Err(_) => "refused",
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum What {
    /// The session opened (its source: livekit, agent, vapi, demo) in its first mode.
    #[serde(rename_all = "camelCase")]
    Opened { source: &'static str, mode: String },
    #[serde(rename_all = "camelCase")]
    ModeChanged { from: String, to: String },
    /// The offer an agent sees took a new revision (its mode, instructions or tools changed).
    #[serde(rename_all = "camelCase")]
    Offer { revision: String, tools: usize },
    /// The tab declared what it handles anew (`handles`: how many tools; absent: every tool).
    #[serde(rename_all = "camelCase")]
    Declared {
        revision: u64,
        handles: Option<usize>,
    },
    /// The relay's state of the key changed: `online`, `offline`, `issued`, or `gone` (unknown
    /// to the relay: revoked or expired).
    #[serde(rename_all = "camelCase")]
    Tab { state: &'static str },
    /// A tool call started (`call` numbers the session's calls).
    #[serde(rename_all = "camelCase")]
    ToolStarted {
        call: u64,
        tool: String,
        mode: String,
    },
    /// A tool call settled: its outcome (`ok` or a code) and [`category`], how long it took at
    /// the worker, the relay's call id and time split when it reached the relay, the trace id
    /// when it had one.
    #[serde(rename_all = "camelCase")]
    ToolSettled {
        call: u64,
        tool: String,
        outcome: &'static str,
        category: &'static str,
        took_ms: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        trace_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        relay_ms: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        delivery_ms: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tab_ms: Option<f64>,
    },
    #[serde(rename_all = "camelCase")]
    Closed { reason: String },
}

impl What {
    /// A settled call, from its outcome and what the relay client reported.
    pub fn settled(
        call: u64,
        tool: &str,
        outcome: Result<(), Code>,
        took: Duration,
        call_id: Option<String>,
        trace_id: Option<String>,
        timing: Option<ServerTiming>,
    ) -> What {
        What::ToolSettled {
            call,
            tool: tool.to_owned(),
            outcome: outcome.err().map_or("ok", Code::as_str),
            category: category(outcome),
            took_ms: (took.as_secs_f64() * 1000.0 * 100.0).round() / 100.0,
            call_id,
            trace_id,
            relay_ms: timing.map(|t| t.relay_ms),
            delivery_ms: timing.and_then(|t| t.delivery_ms),
            tab_ms: timing.and_then(|t| t.tab_ms),
        }
    }
}

/// A key's state at the relay, as a timeline names it.
pub fn tab_state(state: Option<KeyState>) -> &'static str {
    match state {
        Some(KeyState::Online) => "online",
        Some(KeyState::Offline) => "offline",
        Some(KeyState::Issued) => "issued",
        None => "gone",
    }
}

/// The events and what the next ones are compared with.
struct Events {
    list: VecDeque<Event>,
    next: u64,
    dropped: u64,
    calls: u64,
    tab: Option<&'static str>,
    declared: Option<u64>,
    offer: Option<String>,
    closed: Option<(Instant, u64)>,
}

/// One session's timeline.
pub struct Timeline {
    pub id: String,
    /// The key's fingerprint.
    pub key: String,
    pub source: &'static str,
    pub room: String,
    pub opened_ms: u64,
    max: usize,
    events: Mutex<Events>,
    /// The last event's `seq`, for readers waiting for the next.
    last: watch::Sender<u64>,
}

/// A timeline as `GET /sessions/{id}/events` answers it: the events after the one asked for.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    pub id: String,
    /// The key's fingerprint.
    pub key: String,
    pub source: &'static str,
    pub room: String,
    pub opened_ms: u64,
    /// When the session closed (Unix ms); absent while it is open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_ms: Option<u64>,
    /// Events forgotten to keep the timeline bounded (the oldest first).
    pub dropped: u64,
    /// The `seq` to ask after next.
    pub last: u64,
    pub events: Vec<Event>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Timeline {
    pub fn new(id: String, key: String, source: &'static str, room: &str, max: usize) -> Self {
        Timeline {
            id,
            key,
            source,
            room: room.to_owned(),
            opened_ms: unix_ms(),
            max: max.max(1),
            events: Mutex::new(Events {
                list: VecDeque::new(),
                next: 1,
                dropped: 0,
                calls: 0,
                tab: None,
                declared: None,
                offer: None,
                closed: None,
            }),
            last: watch::Sender::new(0),
        }
    }

    /// Adds an event.
    pub fn push(&self, what: What) {
        let seq = {
            let mut e = lock(&self.events);
            let seq = e.next;
            e.next += 1;
            if e.list.len() >= self.max {
                e.list.pop_front();
                e.dropped += 1;
            }
            e.list.push_back(Event {
                seq,
                at_ms: unix_ms(),
                what,
            });
            seq
        };
        self.last.send_replace(seq);
    }

    /// Numbers a new call of the session and records that it started.
    pub fn call_started(&self, tool: &str, mode: String) -> u64 {
        let call = {
            let mut e = lock(&self.events);
            e.calls += 1;
            e.calls
        };
        self.push(What::ToolStarted {
            call,
            tool: tool.to_owned(),
            mode,
        });
        call
    }

    /// Records the tab's state when it differs from the last one recorded.
    pub fn tab(&self, state: &'static str) {
        let changed = {
            let mut e = lock(&self.events);
            let changed = e.tab != Some(state);
            e.tab = Some(state);
            changed
        };
        if changed {
            self.push(What::Tab { state });
        }
    }

    /// Records a declaration when its revision is new.
    pub fn declared(&self, revision: u64, handles: Option<usize>) {
        let changed = {
            let mut e = lock(&self.events);
            let changed = e.declared != Some(revision);
            e.declared = Some(revision);
            changed
        };
        if changed {
            self.push(What::Declared { revision, handles });
        }
    }

    /// Records an offer when its revision is new.
    pub fn offer(&self, revision: &str, tools: usize) {
        let changed = {
            let mut e = lock(&self.events);
            let changed = e.offer.as_deref() != Some(revision);
            if changed {
                e.offer = Some(revision.to_owned());
            }
            changed
        };
        if changed {
            self.push(What::Offer {
                revision: revision.to_owned(),
                tools,
            });
        }
    }

    /// Records the close; the timeline is kept a while after.
    pub fn close(&self, reason: &str) {
        self.push(What::Closed {
            reason: reason.to_owned(),
        });
        lock(&self.events).closed = Some((Instant::now(), unix_ms()));
    }

    /// When it closed, if it did.
    pub fn closed_at(&self) -> Option<Instant> {
        lock(&self.events).closed.map(|(at, _)| at)
    }

    /// The events after `after`.
    pub fn page(&self, after: u64) -> Page {
        let e = lock(&self.events);
        Page {
            id: self.id.clone(),
            key: self.key.clone(),
            source: self.source,
            room: self.room.clone(),
            opened_ms: self.opened_ms,
            closed_ms: e.closed.map(|(_, ms)| ms),
            dropped: e.dropped,
            last: e.next - 1,
            events: e.list.iter().filter(|ev| ev.seq > after).cloned().collect(),
        }
    }

    /// The events after `after`, waiting at most `wait` for one when there is none yet (or
    /// until `stop` resolves).
    pub async fn wait_after(
        &self,
        after: u64,
        wait: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) -> Page {
        let mut last = self.last.subscribe();
        if *last.borrow_and_update() <= after && !wait.is_zero() {
            let deadline = Instant::now() + wait;
            tokio::select! {
                _ = last.wait_for(|seq| *seq > after) => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = stop => {}
            }
        }
        self.page(after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_in_order_and_changes_only() {
        let t = Timeline::new("s_1".into(), "abcd1234".into(), "agent", "r", 4);
        t.push(What::Opened {
            source: "agent",
            mode: "default".into(),
        });
        t.tab("online");
        t.tab("online");
        t.declared(1, Some(3));
        t.declared(1, Some(3));
        t.offer("rev-a", 5);
        t.offer("rev-a", 5);
        let page = t.page(0);
        assert_eq!(page.events.len(), 4);
        assert_eq!(page.dropped, 0);
        assert_eq!(
            page.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        let call = t.call_started("draw_card", "spread".into());
        assert_eq!(call, 1);
        let page = t.page(0);
        assert_eq!(page.events.len(), 4, "bounded");
        assert_eq!(page.dropped, 1);
        assert_eq!(page.events[0].seq, 2);
        assert_eq!(t.page(4).events.len(), 1);
        assert_eq!(page.last, 5);
    }

    #[test]
    fn categories() {
        use relay_wire::ErrorCode as E;
        assert_eq!(category(Ok(())), "ok");
        assert_eq!(category(Err(Code::Relay(E::Timeout))), "timed_out");
        assert_eq!(category(Err(Code::Relay(E::TabOffline))), "timed_out");
        assert_eq!(category(Err(Code::Relay(E::NoHandler))), "failed");
        assert_eq!(category(Err(Code::InvalidArguments)), "refused");
        assert_eq!(category(Err(Code::Relay(E::UnknownKey))), "refused");
    }

    #[tokio::test(start_paused = true)]
    async fn readers_wait_for_the_next_event() {
        let t = std::sync::Arc::new(Timeline::new("s_1".into(), "k".into(), "agent", "", 8));
        t.push(What::Closed { reason: "x".into() });
        // Something after 0 already: at once.
        assert_eq!(
            t.wait_after(0, Duration::from_secs(5), std::future::pending())
                .await
                .events
                .len(),
            1
        );
        // Nothing after 1: waits until the next event.
        let reader = {
            let t = t.clone();
            tokio::spawn(async move {
                t.wait_after(1, Duration::from_secs(30), std::future::pending())
                    .await
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        t.tab("offline");
        let page = reader.await.unwrap();
        assert_eq!(page.events.len(), 1);
        assert_eq!(page.events[0].what, What::Tab { state: "offline" });
        // Nothing comes: the wait ends at its bound with no event.
        let started = Instant::now();
        let page = t
            .wait_after(2, Duration::from_secs(3), std::future::pending())
            .await;
        assert!(page.events.is_empty());
        assert_eq!(started.elapsed(), Duration::from_secs(3));
    }
}
