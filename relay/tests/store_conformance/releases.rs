//! A call's slot given back is free again for the next call a moment later, even after Redis
//! lost its scripts (a restart, a failover), which are loaded again.

use std::time::Duration;

use relay::store::KeyStore;
use relay::store::track::{Ticket, TrackError};

use super::{MAX_INFLIGHT, SESSION, call_id, fresh_key, in_an_hour, session_of};

/// Redis on `port` forgets its scripts.
fn flush_scripts(port: u16) {
    let flushed = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "SCRIPT", "FLUSH"])
        .output()
        .expect("redis-cli");
    assert!(flushed.status.success());
}

/// `store` runs on one Redis server on `port`.
pub async fn a_slot_is_given_back_after_redis_lost_its_scripts(store: &impl KeyStore, port: u16) {
    let key = fresh_key();
    store.issue(&key, in_an_hour()).await.unwrap();
    let life = Duration::from_secs(60);
    let ids: Vec<String> = (0..MAX_INFLIGHT).map(|_| call_id()).collect();
    // A session each, so the key's own limit is the one reached.
    let sessions: Vec<String> = (0..=MAX_INFLIGHT as u8)
        .map(|n| session_of(&key, n))
        .collect();
    let mut held = Vec::new();
    for (id, session) in ids.iter().zip(&sessions) {
        held.push(
            store
                .track(&key, session, &Ticket::plain(id, life))
                .await
                .expect("a free slot"),
        );
    }
    let extra = call_id();
    assert!(matches!(
        store
            .track(&key, &sessions[MAX_INFLIGHT], &Ticket::plain(&extra, life))
            .await,
        Err(TrackError::TooMany)
    ));
    // Redis forgets its scripts, then one call ends: its release loads the script again.
    flush_scripts(port);
    held.pop();
    let mut again = None;
    for _ in 0..50 {
        let next = call_id();
        if let Ok(track) = store
            .track(&key, SESSION, &Ticket::plain(&next, life))
            .await
        {
            again = Some(track);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "the slot given back is taken again");
    // And an admission after Redis forgot its scripts again loads its own.
    drop(again);
    flush_scripts(port);
    let mut more = None;
    for _ in 0..50 {
        let next = call_id();
        if let Ok(track) = store
            .track(&key, SESSION, &Ticket::plain(&next, life))
            .await
        {
            more = Some(track);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(more.is_some(), "an admission loads its script again");
    drop(held);
}
