//! `Idempotency-Key` claims: a first claim runs, a retry replays its outcome byte for byte (or
//! waits for it), other content under the same key conflicts, and an outcome is kept for the
//! replay window only.

use std::time::Duration;

use axum::http::StatusCode;
use bytes::Bytes;
use relay::idempotency::Outcome;
use relay::store::KeyStore;
use relay::store::claims::Claimed;

use super::{BOUND, fresh_key};

pub async fn cases(store: &impl KeyStore) {
    idempotency_run_replay_conflict(store).await;
    a_retry_waits_for_the_first_outcome(store).await;
    an_outcome_is_kept_for_the_window(store).await;
}

pub fn outcome(status: u16, body: &'static [u8]) -> Outcome {
    Outcome {
        status: StatusCode::from_u16(status).unwrap(),
        body: Bytes::from_static(body),
    }
}

async fn idempotency_run_replay_conflict(store: &impl KeyStore) {
    let key = fresh_key();
    let timeout = Duration::from_secs(1);
    let Claimed::Run(recorder) = store.claim(&key, "i-1", 7, timeout).await.unwrap() else {
        panic!("the first claim runs")
    };
    recorder
        .record(&outcome(504, b"{\"ok\":false}"))
        .await
        .unwrap();
    let Claimed::Replay(replayed) = store.claim(&key, "i-1", 7, timeout).await.unwrap() else {
        panic!("a retry replays")
    };
    assert_eq!(replayed.status.as_u16(), 504);
    assert_eq!(&replayed.body[..], b"{\"ok\":false}", "byte for byte");
    assert!(
        matches!(
            store.claim(&key, "i-1", 8, timeout).await.unwrap(),
            Claimed::Conflict
        ),
        "other content under the same Idempotency-Key"
    );
    let other_key = fresh_key();
    assert!(
        matches!(
            store.claim(&other_key, "i-1", 7, timeout).await.unwrap(),
            Claimed::Run(_)
        ),
        "the same Idempotency-Key for another key is another call"
    );
}

async fn a_retry_waits_for_the_first_outcome(store: &impl KeyStore) {
    let key = fresh_key();
    let timeout = Duration::from_secs(1);
    let Claimed::Run(recorder) = store.claim(&key, "i-2", 9, timeout).await.unwrap() else {
        panic!("the first claim runs")
    };
    let retry = store.claim(&key, "i-2", 9, timeout);
    let first = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        recorder
            .record(&outcome(200, b"{\"ok\":true}"))
            .await
            .unwrap();
    };
    let (claimed, ()) = tokio::join!(retry, first);
    let Claimed::Replay(replayed) = claimed.unwrap() else {
        panic!("the retry replays once the first call recorded")
    };
    assert_eq!(replayed.status.as_u16(), 200);
    assert_eq!(&replayed.body[..], b"{\"ok\":true}");
}

async fn an_outcome_is_kept_for_the_window(store: &impl KeyStore) {
    let key = fresh_key();
    let timeout = Duration::from_secs(1);
    let Claimed::Run(recorder) = store.claim(&key, "i-3", 5, timeout).await.unwrap() else {
        panic!("the first claim runs")
    };
    recorder.record(&outcome(200, b"{}")).await.unwrap();
    tokio::time::sleep(BOUND.window - Duration::from_millis(500)).await;
    store.expire();
    assert!(
        matches!(
            store.claim(&key, "i-3", 5, timeout).await.unwrap(),
            Claimed::Replay(_)
        ),
        "within the window a retry replays"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    store.expire();
    assert!(
        matches!(
            store.claim(&key, "i-3", 6, timeout).await.unwrap(),
            Claimed::Run(_)
        ),
        "past the window the Idempotency-Key is free again, whatever the content"
    );
}
