//! The cases with tabs: binding, the same socket again, a bare key's one bind, replacing,
//! releasing and the grace's expiry, revoking an online key, a call's in-flight slots, and
//! finding the key's tab (at once, or waiting for a bind or a revoke within a deadline).

use std::time::Duration;

use relay::sockets::TabSocket;
use relay::store::keys::{BindError, Proof};
use relay::store::track::{LocateError, Located, TrackError};
use relay::store::{Bound, KeyStore};
use relay_wire::{KeyState, RevokeReason};
use tokio::time::Instant;

use super::tabs::Tabs;
use super::{GRACE, MAX_INFLIGHT, SESSION, fresh_key, in_an_hour, session_of, track};

pub async fn cases(store: &impl KeyStore, tabs: &Tabs) {
    bind_then_bind_again(store, tabs).await;
    a_bare_key_binds_once(store, tabs).await;
    a_second_socket_replaces_the_first(store, tabs).await;
    release_then_the_grace_expires(store, tabs).await;
    a_tab_comes_back_within_the_grace(store, tabs).await;
    revoking_an_online_key_displaces_its_tab(store, tabs).await;
    in_flight_slots_are_limited(store).await;
    locate_finds_the_tab_or_none(store, tabs).await;
    locate_waits_for_a_bind(store, tabs).await;
    a_revoke_ends_a_wait(store).await;
}

fn token() -> Proof {
    Proof::Token { exp: in_an_hour() }
}

async fn bind(
    store: &impl KeyStore,
    key: &str,
    proof: Proof,
    socket: &TabSocket,
) -> Result<Bound, BindError> {
    let outcome = store.bind(key, proof, socket).await.expect("store answers");
    assert!(outcome.replaced_on.is_none(), "one node: nothing elsewhere");
    outcome.bound
}

async fn state(store: &impl KeyStore, key: &str) -> Option<KeyState> {
    store.status(key).await.unwrap().map(|s| s.state)
}

async fn bind_then_bind_again(store: &impl KeyStore, tabs: &Tabs) {
    let key = fresh_key();
    let a = tabs.socket();
    store.issue(&key, in_an_hour()).await.unwrap();
    assert!(matches!(
        bind(store, &key, token(), &a).await,
        Ok(Bound::Bound { displaced: None })
    ));
    assert_eq!(state(store, &key).await, Some(KeyState::Online));
    // The same socket again displaces nothing (a store may say so outright).
    assert!(matches!(
        bind(store, &key, token(), &a).await,
        Ok(Bound::Same | Bound::Bound { displaced: None })
    ));
    assert_eq!(state(store, &key).await, Some(KeyState::Online));
}

async fn a_bare_key_binds_once(store: &impl KeyStore, tabs: &Tabs) {
    let never_issued = fresh_key();
    let a = tabs.socket();
    assert_eq!(
        bind(store, &never_issued, Proof::BareKey, &a).await.err(),
        Some(BindError::Unknown),
        "a bare key proves nothing by itself"
    );
    let key = fresh_key();
    store.issue(&key, in_an_hour()).await.unwrap();
    assert!(bind(store, &key, Proof::BareKey, &a).await.is_ok());
    store.release(&key, &a).await;
    let b = tabs.socket();
    assert_eq!(
        bind(store, &key, Proof::BareKey, &b).await.err(),
        Some(BindError::TokenRequired),
        "once bound, a bare key binds no more"
    );
    assert!(bind(store, &key, token(), &b).await.is_ok());
}

async fn a_second_socket_replaces_the_first(store: &impl KeyStore, tabs: &Tabs) {
    let key = fresh_key();
    let (a, b) = (tabs.socket(), tabs.socket());
    store.issue(&key, in_an_hour()).await.unwrap();
    bind(store, &key, token(), &a).await.unwrap();
    let Ok(Bound::Bound {
        displaced: Some(old),
    }) = bind(store, &key, token(), &b).await
    else {
        panic!("the second socket displaces the first");
    };
    assert_eq!(old.binding.sid(), a.id());
    assert_eq!(old.reason, RevokeReason::Replaced);
    assert!(old.binding.gone.is_cancelled(), "the old binding is over");
    // The displaced socket's disconnect releases nothing: the key is the new socket's.
    store.release(&key, &a).await;
    assert_eq!(state(store, &key).await, Some(KeyState::Online));
}

async fn release_then_the_grace_expires(store: &impl KeyStore, tabs: &Tabs) {
    let key = fresh_key();
    let a = tabs.socket();
    store.issue(&key, in_an_hour()).await.unwrap();
    bind(store, &key, token(), &a).await.unwrap();
    store.release(&key, &a).await;
    let status = store.status(&key).await.unwrap().expect("offline key");
    assert_eq!(status.state, KeyState::Offline);
    assert!(status.grace_ends_ms.is_some(), "offline: the grace's end");
    tokio::time::sleep(GRACE + Duration::from_millis(200)).await;
    store.expire();
    assert!(state(store, &key).await.is_none(), "the grace expired");
    assert!(!store.is_revoked(&key).await.unwrap());
}

async fn a_tab_comes_back_within_the_grace(store: &impl KeyStore, tabs: &Tabs) {
    let key = fresh_key();
    let (a, b) = (tabs.socket(), tabs.socket());
    store.issue(&key, in_an_hour()).await.unwrap();
    bind(store, &key, token(), &a).await.unwrap();
    store.release(&key, &a).await;
    assert!(matches!(
        bind(store, &key, token(), &b).await,
        Ok(Bound::Bound { displaced: None })
    ));
    assert_eq!(state(store, &key).await, Some(KeyState::Online));
    tokio::time::sleep(GRACE + Duration::from_millis(200)).await;
    store.expire();
    assert_eq!(
        state(store, &key).await,
        Some(KeyState::Online),
        "a bound key outlives the grace"
    );
}

async fn revoking_an_online_key_displaces_its_tab(store: &impl KeyStore, tabs: &Tabs) {
    let key = fresh_key();
    let (a, b) = (tabs.socket(), tabs.socket());
    store.issue(&key, in_an_hour()).await.unwrap();
    bind(store, &key, token(), &a).await.unwrap();
    let revoked = store
        .revoke(&key)
        .await
        .unwrap()
        .expect("online key revokes");
    assert!(revoked.tab_notified());
    let old = revoked.local.expect("this node's socket held it");
    assert_eq!(old.binding.sid(), a.id());
    assert_eq!(old.reason, RevokeReason::Revoked);
    assert_eq!(
        bind(store, &key, token(), &b).await.err(),
        Some(BindError::Revoked),
        "a revoked key never binds again"
    );
    assert!(store.is_revoked(&key).await.unwrap());
}

async fn in_flight_slots_are_limited(store: &impl KeyStore) {
    let unknown = fresh_key();
    assert!(matches!(
        track(store, &unknown, SESSION).await,
        Err(TrackError::Unknown)
    ));
    let key = fresh_key();
    store.issue(&key, in_an_hour()).await.unwrap();
    // A session each, so the key's own limit is the one reached.
    let sessions: Vec<String> = (0..=MAX_INFLIGHT as u8)
        .map(|n| session_of(&key, n))
        .collect();
    let mut held = Vec::new();
    for session in &sessions[..MAX_INFLIGHT] {
        held.push(track(store, &key, session).await.expect("a free slot"));
    }
    assert!(matches!(
        track(store, &key, &sessions[MAX_INFLIGHT]).await,
        Err(TrackError::TooMany)
    ));
    held.pop();
    // A slot is given back when its call ends (on Redis a moment later).
    let mut again = None;
    for _ in 0..50 {
        if let Ok(track) = track(store, &key, SESSION).await {
            again = Some(track);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "a slot given back is taken again");
    drop(again);
    drop(held);
}

async fn locate_finds_the_tab_or_none(store: &impl KeyStore, tabs: &Tabs) {
    let key = fresh_key();
    store.issue(&key, in_an_hour()).await.unwrap();
    {
        let mut track = track(store, &key, SESSION).await.unwrap();
        let deadline = Instant::now() + Duration::from_millis(200);
        assert!(matches!(
            track.locate(deadline).await,
            Err(LocateError::Offline)
        ));
        assert!(Instant::now() >= deadline, "waited until the deadline");
    }
    let a = tabs.socket();
    bind(store, &key, token(), &a).await.unwrap();
    let mut track = track(store, &key, SESSION).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let Ok(Located::Here(binding)) = track.locate(deadline).await else {
        panic!("the tab of this node is found");
    };
    assert_eq!(binding.sid(), a.id());
}

async fn locate_waits_for_a_bind(store: &impl KeyStore, tabs: &Tabs) {
    let key = fresh_key();
    let a = tabs.socket();
    store.issue(&key, in_an_hour()).await.unwrap();
    let mut track = track(store, &key, SESSION).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let (found, _) = tokio::join!(
        async {
            loop {
                match track.locate(deadline).await {
                    // Redis took the bind and this node's record of it lags a moment behind (the
                    // bind's answer and the key's event come on different connections).
                    Ok(Located::Stale(_)) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    found => return found,
                }
            }
        },
        async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            bind(store, &key, token(), &a).await.unwrap();
        }
    );
    let what = match &found {
        Ok(Located::Here(_)) => "here".to_string(),
        Ok(Located::Stale(s)) => format!("stale {s}"),
        Ok(Located::Elsewhere(_)) => "elsewhere".into(),
        Err(e) => format!("{e:?}"),
    };
    let Ok(Located::Here(binding)) = found else {
        panic!("the wait ends with the bind: {what}");
    };
    assert_eq!(binding.sid(), a.id());
    assert!(Instant::now() < deadline, "well before the deadline");
}

async fn a_revoke_ends_a_wait(store: &impl KeyStore) {
    let key = fresh_key();
    store.issue(&key, in_an_hour()).await.unwrap();
    let mut track = track(store, &key, SESSION).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let (found, _) = tokio::join!(track.locate(deadline), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        store.revoke(&key).await.unwrap();
    });
    assert!(matches!(found, Err(LocateError::Unknown)));
    assert!(Instant::now() < deadline, "well before the deadline");
}
