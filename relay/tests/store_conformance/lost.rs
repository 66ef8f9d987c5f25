//! What Redis may lose in a failover, and what the store does about it.

use std::time::Duration;

use relay::store::claims::Claimed;
use relay::store::redis::{Bound, Place, Revoked, rid};
use relay::store::{KeyStore, RedisStore};
use relay::tokens::unix_now_ms;
use relay_wire::RevokeReason;

use super::idempotency::outcome;
use super::{BOUND, TOKENS_PER_MIN, connect, fresh_key, in_an_hour, local_keys, start_redis};

/// An outcome recorded after its claim was lost (a primary that died before its replica had
/// it) is written with its fingerprint and an expiry: a retry replays it, other content under
/// the same Idempotency-Key is still a conflict, and the record does not stay forever.
#[tokio::test]
async fn an_outcome_recorded_after_its_claim_was_lost_replays() {
    let server = start_redis();
    let cluster = connect(server.port).await;
    let store = RedisStore::new(cluster, local_keys(), TOKENS_PER_MIN, BOUND);
    let key = fresh_key();
    let timeout = Duration::from_secs(1);
    let Claimed::Run(recorder) = store.claim(&key, "i-lost", 7, timeout).await.unwrap() else {
        panic!("the first claim runs")
    };
    let mut raw = redis::Client::open(format!("redis://127.0.0.1:{}", server.port))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let name = format!("va:idem:{}:i-lost", relay::store::redis::rid(&key));
    let removed: i64 = redis::cmd("DEL")
        .arg(&name)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(removed, 1, "the claim was stored under {name}");
    recorder
        .record(&outcome(200, b"{\"ok\":true}"))
        .await
        .unwrap();
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&name)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(ttl > 0, "the record expires (PTTL {ttl})");
    let Claimed::Replay(replayed) = store.claim(&key, "i-lost", 7, timeout).await.unwrap() else {
        panic!("a retry replays the recorded outcome")
    };
    assert_eq!(replayed.status.as_u16(), 200);
    assert!(matches!(
        store.claim(&key, "i-lost", 8, timeout).await.unwrap(),
        Claimed::Conflict
    ));
}

/// A failover lost a bind and the release before it: Redis still names the socket bound
/// before. Writing the live binding back restores it over an older socket of this node or of
/// another; a tab bound on another node after it is that node's (this one's is dismissed as
/// replaced); a revoked key stays revoked.
#[tokio::test]
async fn writing_back_replaces_what_was_bound_before_only() {
    let server = start_redis();
    let here = connect(server.port).await;
    let rid = rid(&fresh_key());
    let bound = here.bind(&rid, "sid-old", Some(in_an_hour())).await;
    assert!(matches!(bound, Ok(Ok(Bound::Bound { .. }))));
    let later = || unix_now_ms() + 1;
    let back = here.reassert(&rid, "sid-new", in_an_hour(), later()).await;
    assert!(back.unwrap().is_none(), "over an older socket of this node");
    let place = |node: &str, sid: &str| Place::Online {
        node: node.to_owned(),
        sid: sid.to_owned(),
    };
    assert_eq!(
        here.lookup(&rid).await.unwrap(),
        place(here.node(), "sid-new")
    );

    let there = connect(server.port).await;
    let before = unix_now_ms() - 1;
    let bound = there.bind(&rid, "sid-there", Some(in_an_hour())).await;
    assert!(matches!(bound, Ok(Ok(Bound::Bound { .. }))));
    assert!(matches!(
        here.reassert(&rid, "sid-new", in_an_hour(), before).await,
        Ok(Some(RevokeReason::Replaced))
    ));
    assert_eq!(
        here.lookup(&rid).await.unwrap(),
        place(there.node(), "sid-there")
    );
    let back = here.reassert(&rid, "sid-new", in_an_hour(), later()).await;
    assert!(
        back.unwrap().is_none(),
        "over an older socket of another node"
    );
    assert_eq!(
        here.lookup(&rid).await.unwrap(),
        place(here.node(), "sid-new")
    );

    assert!(matches!(there.revoke(&rid).await, Ok(Revoked::Done { .. })));
    assert!(matches!(
        here.reassert(&rid, "sid-new", in_an_hour(), later()).await,
        Ok(Some(RevokeReason::Revoked))
    ));
}
