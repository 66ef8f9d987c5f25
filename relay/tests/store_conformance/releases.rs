//! A call's slot given back is free again for the next call a moment later, even after Redis
//! lost its scripts (a restart, a failover), which are loaded again. On one server an ended
//! call's slot waits for the node's next admission, which gives it back, or for its bound; a
//! node refused as busy meanwhile asks again; a refused call costs no call rate.

use std::time::{Duration, Instant};

use relay::store::KeyStore;
use relay::store::redis::{Acquired, Admit, Admitted, Cluster, SessionCall, rid};
use relay::store::track::{Ticket, TrackError};
use relay::tokens::unix_now_ms;

use super::{MAX_INFLIGHT, SESSION, call_id, fresh_key, in_an_hour, session_of};

/// The in-flight slots in the watch of the key whose digest is `id`, on the server on `port`.
fn slots(port: u16, id: &str) -> Vec<String> {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "HKEYS", &format!("va:w:{id}")])
        .output()
        .expect("redis-cli");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("c:"))
        .map(str::to_owned)
        .collect()
}

/// Waits until `id` has no slot, or fails after 5 s; how long it took.
async fn until_no_slot(port: u16, id: &str, what: &str) -> Duration {
    let start = Instant::now();
    while !slots(port, id).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what}: {:?}",
            slots(port, id)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

/// A node with `fold_within` of its own.
async fn node(url: &str, fold_within: Duration) -> std::sync::Arc<Cluster> {
    let mut settings = super::settings();
    settings.fold_within = fold_within;
    super::connect_with(url, None, settings).await
}

/// One call of `session` admitted on `node` for the key whose digest is `id`.
async fn admit(
    node: &std::sync::Arc<Cluster>,
    id: &str,
    session: &SessionCall,
    call_id: &str,
) -> (Acquired, Option<Admitted>) {
    let admit = Admit {
        session,
        call_id,
        life: Duration::from_secs(60),
        offer: None,
    };
    node.acquire(id, &admit).await.expect("Redis answers")
}

/// Two nodes on one server on `port` (`url`), whose ended calls' slots wait up to 1 s here, long
/// enough to be seen waiting (so a node admitting a call a second counts as admitting often).
pub async fn an_ended_calls_slot_goes_back_late(url: &str, port: u16) {
    let within = Duration::from_secs(1);
    let (a, b) = (node(url, within).await, node(url, within).await);
    let (key, other) = (rid(&fresh_key()), rid(&fresh_key()));
    // Bound, so they outlive the suite's short unbound lifetime.
    for (id, sid) in [(&key, "s_late_1"), (&other, "s_late_2")] {
        a.issue(id, in_an_hour()).await.unwrap();
        a.bind(id, sid, Some(in_an_hour())).await.unwrap().unwrap();
    }
    let session = SessionCall {
        tag: 0x51,
        max_inflight: 1,
        rate_per_sec: 1000,
    };

    // Admitting rarely (this node's first call), a node gives an ended call's slot back at once.
    let (got, held) = admit(&a, &other, &session, "c_late_0").await;
    assert!(matches!(got, Acquired::Ok), "{got:?}");
    drop(held);
    let took = until_no_slot(port, &other, "given back at once").await;
    assert!(took < within / 2, "given back without waiting: {took:?}");
    // B has admitted a call lately too.
    let (got, held) = admit(&b, &other, &session, "c_late_b").await;
    assert!(matches!(got, Acquired::Ok), "{got:?}");
    drop(held);
    until_no_slot(port, &other, "B's first call's slot").await;

    // A call ends while A admits calls often: its slot waits for A's next admission, which
    // gives it back.
    let (got, held) = admit(&a, &key, &session, "c_late_1").await;
    assert!(matches!(got, Acquired::Ok), "{got:?}");
    let ended = Instant::now();
    drop(held);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        slots(port, &key),
        ["c:c_late_1"],
        "the ended call's slot waits"
    );
    let (got, held) = admit(&a, &other, &session, "c_late_2").await;
    assert!(matches!(got, Acquired::Ok), "{got:?}");
    let folded = ended.elapsed();
    assert!(
        folded < within,
        "this check needs the admission within {within:?} of the call's end, took {folded:?}"
    );
    assert!(
        slots(port, &key).is_empty(),
        "given back by the next admission: {:?}",
        slots(port, &key)
    );

    // No admission follows: the slot goes back once its wait is over.
    drop(held);
    let took = until_no_slot(port, &other, "given back after its wait").await;
    assert!(took >= within / 2, "it waited for an admission: {took:?}");

    // B's call of the same session, at its limit of one, while A's ended call's slot waits: B
    // is refused, asks again once the slot is back, and is admitted.
    let (got, held) = admit(&a, &key, &session, "c_late_3").await;
    assert!(matches!(got, Acquired::Ok), "{got:?}");
    drop(held);
    let asked = Instant::now();
    let (got, running) = admit(&b, &key, &session, "c_late_4").await;
    assert!(
        matches!(got, Acquired::Ok),
        "admitted once the ended call's slot is back"
    );
    assert!(
        asked.elapsed() >= within,
        "refused first, asked again after A gave its slot back: {:?}",
        asked.elapsed()
    );
    // A call still running is not given back: the session's next call is refused, after
    // asking again.
    let asked = Instant::now();
    let (got, none) = admit(&a, &key, &session, "c_late_5").await;
    assert!(matches!(got, Acquired::SessionBusy) && none.is_none());
    assert!(asked.elapsed() >= 2 * within, "asked again before refusing");

    // B leaves with a slot waiting: it gives it back as it goes.
    drop(running);
    assert_eq!(slots(port, &key), ["c:c_late_4"]);
    b.leave().await;
    assert!(slots(port, &key).is_empty(), "given back when leaving");
}

/// A call refused for its session's calls in flight does not count against the session's call
/// rate (as in memory), so asking again costs none: one session of two calls a second and one in
/// flight, calls given back at once. On `url`'s Redis (one server or a Cluster).
pub async fn a_refused_call_costs_no_call_rate(url: &str) {
    let a = node(url, Duration::ZERO).await;
    let key = rid(&fresh_key());
    a.issue(&key, in_an_hour()).await.unwrap();
    a.bind(&key, "s_rate", Some(in_an_hour()))
        .await
        .unwrap()
        .unwrap();
    let session = SessionCall {
        tag: 0x52,
        max_inflight: 1,
        rate_per_sec: 2,
    };
    // All in one rate window (a second of the node's clock): start early in one.
    loop {
        if unix_now_ms() % 1000 < 300 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = unix_now_ms() / 1000;
    let (got, held) = admit(&a, &key, &session, "c_rate_1").await;
    assert!(matches!(got, Acquired::Ok), "{got:?}");
    let (got, _) = admit(&a, &key, &session, "c_rate_2").await;
    assert!(matches!(got, Acquired::SessionBusy), "one in flight");
    drop(held);
    let mut admitted = None;
    for n in 0..50 {
        let (got, held) = admit(&a, &key, &session, &format!("c_rate_3_{n}")).await;
        match got {
            Acquired::Ok => {
                admitted = held;
                break;
            }
            Acquired::SessionBusy => tokio::time::sleep(Duration::from_millis(10)).await,
            other => panic!("the refused call took the rate of the second: {other:?}"),
        }
    }
    assert!(admitted.is_some(), "the slot came back");
    drop(admitted);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (got, _) = admit(&a, &key, &session, "c_rate_4").await;
    assert_eq!(
        unix_now_ms() / 1000,
        second,
        "the case ran within one rate window"
    );
    assert!(
        matches!(got, Acquired::RateLimited),
        "two calls admitted: the third of the second is over the rate: {got:?}"
    );
}

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
