//! The cases of agent sessions: one session's calls in flight stop at its own limit while
//! another session of the same key goes on, and an ended session starts no call while the
//! key's other sessions do.

use std::time::Duration;

use relay::store::KeyStore;
use relay::store::track::TrackError;

use super::{LIMITS, fresh_key, in_an_hour, session_of, track};

pub async fn cases(store: &impl KeyStore) {
    a_session_stops_at_its_own_limit(store).await;
    an_ended_session_starts_nothing(store).await;
}

async fn a_session_stops_at_its_own_limit(store: &impl KeyStore) {
    let key = fresh_key();
    store.issue(&key, in_an_hour()).await.unwrap();
    let (a, b) = (session_of(&key, 1), session_of(&key, 2));
    let mut held = Vec::new();
    for _ in 0..LIMITS.max_inflight {
        held.push(track(store, &key, &a).await.expect("a slot of session a"));
    }
    assert!(
        matches!(track(store, &key, &a).await, Err(TrackError::SessionBusy)),
        "session a is at its own limit"
    );
    let other = track(store, &key, &b).await;
    assert!(other.is_ok(), "session b of the same key still calls");
    drop(other);
    held.pop();
    // Given back (on Redis a moment later).
    let mut again = None;
    for _ in 0..50 {
        if let Ok(track) = track(store, &key, &a).await {
            again = Some(track);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        again.is_some(),
        "a session's slot given back is taken again"
    );
}

async fn an_ended_session_starts_nothing(store: &impl KeyStore) {
    let key = fresh_key();
    store.issue(&key, in_an_hour()).await.unwrap();
    let (a, b) = (session_of(&key, 3), session_of(&key, 4));
    assert!(!store.session_ended(&a).await.unwrap());
    store.end_session(&a, in_an_hour()).await.unwrap();
    assert!(store.session_ended(&a).await.unwrap());
    assert!(!store.session_ended(&b).await.unwrap());
    assert!(
        matches!(track(store, &key, &a).await, Err(TrackError::Ended)),
        "an ended session starts no call"
    );
    assert!(track(store, &key, &b).await.is_ok(), "another session does");
    // Its key is untouched: still issued.
    assert!(store.status(&key).await.unwrap().is_some());
}
