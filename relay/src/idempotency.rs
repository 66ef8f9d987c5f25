//! `Idempotency-Key` outcomes: the first call with a given (key, Idempotency-Key) runs; a retry
//! within the window waits for and replays that first outcome, emitting nothing new.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use bytes::Bytes;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long an outcome is kept for retries by default (`RELAY_IDEMPOTENCY_WINDOW_SECS`).
pub const WINDOW: Duration = Duration::from_secs(5 * 60);
/// Longest accepted `Idempotency-Key` header value.
pub const MAX_KEY_LEN: usize = 255;

/// A finished call's HTTP answer, replayed to retries byte for byte.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub status: StatusCode,
    pub body: Bytes,
}

struct Slot {
    request: u64,
    created: Instant,
    outcome: watch::Receiver<Option<Outcome>>,
}

/// What a call holding an `Idempotency-Key` should do.
pub enum Claim {
    /// First of its kind: run the call and record its outcome here.
    Run(watch::Sender<Option<Outcome>>),
    /// A retry: wait for the first call's outcome.
    Replay(watch::Receiver<Option<Outcome>>),
    /// The same Idempotency-Key was used for a different request.
    Conflict,
}

pub struct Idempotency {
    slots: DashMap<(Arc<str>, Box<str>), Slot>,
    window: Duration,
}

impl Default for Idempotency {
    fn default() -> Self {
        Idempotency::new(WINDOW)
    }
}

/// Identifies a request's content, so a reused Idempotency-Key with other content is caught.
pub fn request_fingerprint(tool_name: &str, params: Option<&str>, awaited: bool) -> u64 {
    let mut h = DefaultHasher::new();
    (tool_name, params, awaited).hash(&mut h);
    h.finish()
}

/// True for an acceptable header value: 1–255 visible ASCII characters.
pub fn valid_key(value: &str) -> bool {
    !value.is_empty() && value.len() <= MAX_KEY_LEN && value.bytes().all(|b| b.is_ascii_graphic())
}

impl Idempotency {
    /// Outcomes kept for `window`.
    pub fn new(window: Duration) -> Self {
        Idempotency {
            slots: DashMap::new(),
            window,
        }
    }

    pub fn claim(&self, api_key: &str, idem_key: &str, request: u64) -> Claim {
        let now = Instant::now();
        match self.slots.entry((api_key.into(), idem_key.into())) {
            Entry::Occupied(mut occupied) => {
                let slot = occupied.get();
                if now.duration_since(slot.created) >= self.window {
                    let (tx, rx) = watch::channel(None);
                    occupied.insert(Slot {
                        request,
                        created: now,
                        outcome: rx,
                    });
                    Claim::Run(tx)
                } else if slot.request != request {
                    Claim::Conflict
                } else {
                    Claim::Replay(slot.outcome.clone())
                }
            }
            Entry::Vacant(vacant) => {
                let (tx, rx) = watch::channel(None);
                vacant.insert(Slot {
                    request,
                    created: now,
                    outcome: rx,
                });
                Claim::Run(tx)
            }
        }
    }

    /// Drops outcomes older than the window.
    pub fn sweep(&self) {
        let now = Instant::now();
        self.slots
            .retain(|_, slot| now.duration_since(slot.created) < self.window);
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn retry_replays_and_window_expires() {
        let idem = Idempotency::default();
        let fp = request_fingerprint("t", Some("{}"), true);
        let Claim::Run(tx) = idem.claim("k", "i", fp) else {
            panic!("first claim must run")
        };
        let Claim::Replay(mut rx) = idem.claim("k", "i", fp) else {
            panic!("retry must replay")
        };
        assert!(matches!(
            idem.claim("k", "i", request_fingerprint("t", Some("{\"a\":1}"), true)),
            Claim::Conflict
        ));
        // Same Idempotency-Key for another tab is a different call.
        assert!(matches!(idem.claim("k2", "i", fp), Claim::Run(_)));
        tx.send_replace(Some(Outcome {
            status: StatusCode::OK,
            body: Bytes::from_static(b"{}"),
        }));
        let got = rx.wait_for(Option::is_some).await.unwrap().clone().unwrap();
        assert_eq!(got.status, StatusCode::OK);

        tokio::time::advance(WINDOW).await;
        idem.sweep();
        assert!(idem.is_empty());
        assert!(matches!(idem.claim("k", "i", fp), Claim::Run(_)));
    }

    #[test]
    fn header_values() {
        assert!(valid_key("abc-123"));
        assert!(!valid_key(""));
        assert!(!valid_key("a b"));
        assert!(!valid_key(&"x".repeat(256)));
    }
}
