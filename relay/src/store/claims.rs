//! `Idempotency-Key` claims and outcomes behind the key store: the first call with a given
//! (key, Idempotency-Key) runs and records its outcome; a retry within the window waits for that
//! outcome and replays it; the same Idempotency-Key with other content is a conflict.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use bytes::Bytes;
use relay_wire::{ErrorBody, ErrorCode};
use tokio::sync::watch;

use super::redis::{self as cluster, Cluster, StoreError};
use crate::idempotency::{Claim, Idempotency, Outcome};

/// How long a retry may wait for the first call: its longest timeout plus a forced drain.
#[derive(Debug, Clone, Copy)]
pub struct ReplayBound {
    pub max_timeout: Duration,
    pub drain: Duration,
    /// How long an outcome is kept for retries.
    pub window: Duration,
}

/// What a call holding an `Idempotency-Key` does.
pub enum Claimed {
    /// The first of its kind: run the call, then hand its outcome to the recorder.
    Run(Recorder),
    /// A retry: answer with the first call's outcome.
    Replay(Outcome),
    /// The same Idempotency-Key was used for a different request.
    Conflict,
}

/// Where a first call records its outcome for retries.
pub struct Recorder(Records);

enum Records {
    Memory(watch::Sender<Option<Outcome>>),
    Redis {
        cluster: Arc<Cluster>,
        rid: String,
        idem: String,
        fingerprint: u64,
        window: Duration,
    },
}

impl Recorder {
    /// Records the outcome; an error means retries will not see it (Redis unreachable).
    pub async fn record(self, outcome: &Outcome) -> Result<(), StoreError> {
        match self.0 {
            Records::Memory(tx) => {
                tx.send_replace(Some(outcome.clone()));
                Ok(())
            }
            Records::Redis {
                cluster,
                rid,
                idem,
                fingerprint,
                window,
            } => {
                let status = outcome.status.as_u16();
                let record =
                    cluster.idem_record(&rid, &idem, fingerprint, window, status, &outcome.body);
                Box::pin(record).await
            }
        }
    }
}

/// The outcome replayed when the first call vanished without recording one.
pub fn lost_outcome() -> Outcome {
    let code = ErrorCode::Internal;
    let body = ErrorBody::new(
        code,
        "the first call with this Idempotency-Key was lost",
        None,
    );
    Outcome {
        status: StatusCode::from_u16(code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        body: serde_json::to_vec(&body)
            .map(Bytes::from)
            .unwrap_or_default(),
    }
}

/// One node: claims in this process's map.
pub async fn claim_memory(
    map: &Idempotency,
    bound: ReplayBound,
    key: &str,
    idem: &str,
    fingerprint: u64,
) -> Claimed {
    match map.claim(key, idem, fingerprint) {
        Claim::Run(tx) => Claimed::Run(Recorder(Records::Memory(tx))),
        Claim::Conflict => Claimed::Conflict,
        Claim::Replay(mut rx) => {
            // The first call is bounded by its own timeout; this bound only guards against a
            // first call that vanished without recording.
            let wait = bound.max_timeout + bound.drain;
            let outcome = tokio::time::timeout(wait, rx.wait_for(Option::is_some)).await;
            Claimed::Replay(match outcome {
                Ok(Ok(o)) => o.clone().unwrap_or_else(lost_outcome),
                _ => lost_outcome(),
            })
        }
    }
}

/// How often a retry on any node looks for the first call's outcome in Redis.
const REPLAY_POLL: Duration = Duration::from_millis(20);

/// Several nodes: claims in Redis; a retry waits for the first call's outcome on whichever node
/// it runs.
pub async fn claim_redis(
    cluster: &Arc<Cluster>,
    bound: ReplayBound,
    key: &str,
    idem: &str,
    fingerprint: u64,
    timeout: Duration,
) -> Result<Claimed, StoreError> {
    let rid = cluster::rid(key);
    let now_ms = crate::tokens::unix_now_ms();
    // The first call ends by its own deadline (plus a forced drain); past that it was lost.
    let until_ms = now_ms + (timeout + bound.drain).as_millis() as u64 + 2000;
    let hard_stop =
        tokio::time::Instant::now() + bound.max_timeout + bound.drain + REPLAY_POLL * 100;
    let mut first = true;
    loop {
        let claim = cluster
            .idem_claim(&rid, idem, fingerprint, until_ms, bound.window)
            .await?;
        match claim {
            cluster::IdemClaim::Run if first => {
                return Ok(Claimed::Run(Recorder(Records::Redis {
                    cluster: cluster.clone(),
                    rid,
                    idem: idem.to_owned(),
                    fingerprint,
                    window: bound.window,
                })));
            }
            cluster::IdemClaim::Run => return Ok(Claimed::Replay(lost_outcome())),
            cluster::IdemClaim::Conflict => return Ok(Claimed::Conflict),
            cluster::IdemClaim::Done { status, body } => {
                let status =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                return Ok(Claimed::Replay(Outcome {
                    status,
                    body: Bytes::from(body),
                }));
            }
            cluster::IdemClaim::Pending { until_ms } => {
                let now_ms = crate::tokens::unix_now_ms();
                if now_ms > until_ms || tokio::time::Instant::now() > hard_stop {
                    return Ok(Claimed::Replay(lost_outcome()));
                }
            }
        }
        first = false;
        tokio::time::sleep(REPLAY_POLL).await;
    }
}
