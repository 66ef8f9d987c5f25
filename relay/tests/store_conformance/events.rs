//! Key events reach only the nodes waiting for the key: three nodes on one Redis, A holding a
//! key's tab, B with a call waiting for it (its in-flight slot), C doing nothing with it. B hears
//! every change while its call runs and none after; A and C hear none. A key-status wait
//! (`Cluster::interest`) makes C hear the key too, while it lasts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use relay::store::redis::{Acquired, Admit, Cluster, Place, SessionCall, rid};

use super::{fresh_key, in_an_hour};

/// How long a message published in Redis takes to reach a node here, at most.
const DELIVERY: Duration = Duration::from_millis(300);

fn heard(c: &Cluster) -> u64 {
    c.events_heard().get()
}

/// Waits until `node` heard `want` events in all, or fails.
async fn until_heard(node: &Cluster, want: u64, what: &str) {
    let end = Instant::now() + Duration::from_secs(5);
    while heard(node) < want {
        assert!(
            Instant::now() < end,
            "{what}: heard {} events, expected {want}",
            heard(node)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `a` and two more nodes on `url`.
pub async fn only_waiting_nodes_hear_a_key(a: &Arc<Cluster>, url: &str) {
    let (b, c) = (
        &super::connect_to(url, None).await,
        &super::connect_to(url, None).await,
    );
    let key = fresh_key();
    let id = rid(&key);
    a.issue(&id, in_an_hour()).await.unwrap();
    let (a0, b0, c0) = (heard(a), heard(b), heard(c));

    // B's call waits for the key (no tab yet).
    let session = SessionCall {
        tag: 7,
        max_inflight: 4,
        rate_per_sec: 1000,
    };
    let admit = Admit {
        session: &session,
        call_id: "c_events",
        life: Duration::from_secs(60),
        offer: None,
    };
    let (acquired, held) = b.acquire(&id, &admit).await.unwrap();
    assert!(matches!(acquired, Acquired::Ok));
    let admitted = held.expect("a slot");
    assert_eq!(admitted.place, Place::Waiting);
    let slot = admitted.slot;

    // A's tab binds, leaves, binds again: B hears each change.
    a.bind(&id, "s1", Some(in_an_hour()))
        .await
        .unwrap()
        .unwrap();
    a.release(&id, "s1").await.unwrap();
    a.bind(&id, "s2", Some(in_an_hour()))
        .await
        .unwrap()
        .unwrap();
    until_heard(b, b0 + 3, "the waiting node").await;
    tokio::time::sleep(DELIVERY).await;
    assert_eq!(heard(b), b0 + 3, "one event per change");
    assert_eq!(
        heard(a),
        a0,
        "the holding node waits for nothing: it hears nothing"
    );
    assert_eq!(
        heard(c),
        c0,
        "a node neither holding nor waiting hears nothing"
    );

    // B's call ends: B leaves the key's watch, and hears no more of it.
    drop(slot);
    tokio::time::sleep(DELIVERY).await;
    a.release(&id, "s2").await.unwrap();
    a.bind(&id, "s3", Some(in_an_hour()))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(DELIVERY).await;
    assert_eq!(heard(b), b0 + 3, "nothing once its call ended");

    // C waits for the key's status: it hears the key while it waits, and no longer after.
    let interest = c.interest(&id).await.unwrap();
    a.revoke(&id).await.unwrap();
    until_heard(c, c0 + 1, "a node waiting for the key's status").await;
    drop(interest);
    tokio::time::sleep(DELIVERY).await;
    let other = fresh_key();
    let other_id = rid(&other);
    a.issue(&other_id, in_an_hour()).await.unwrap();
    a.bind(&other_id, "s4", Some(in_an_hour()))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(DELIVERY).await;
    assert_eq!(
        heard(c),
        c0 + 1,
        "nothing once its wait ended, nor of other keys"
    );
    assert_eq!(heard(b), b0 + 3);
    assert_eq!(heard(a), a0);
}
