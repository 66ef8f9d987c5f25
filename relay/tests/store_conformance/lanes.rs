//! A node's connections to Redis are lanes: binds queued by a storm of reconnecting tabs delay
//! neither the node's heartbeat nor a call's lookup.
//!
//! Redis answers one connection's commands in the order they came. The binds are all sent
//! before the heartbeat and the lookup; on one shared connection neither could be answered
//! before every one of those binds was, whatever the machine's speed. So the check is on order,
//! not on time: when the heartbeat and the lookup are answered, most binds must still be
//! waiting for theirs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use relay::store::redis::{Cluster, Place, rid};

use super::{fresh_key, in_an_hour};

/// Binds queued at once: as many reconnecting tabs as a busy node sees after another died.
const BINDS: usize = 4000;

pub async fn a_bind_storm_delays_neither_heartbeat_nor_lookup(cluster: &Arc<Cluster>) {
    // Bound, not only issued: an issued key lasts the suite's short unbound TTL, which a slow
    // machine can spend before the lookup is sent.
    let looked_up = rid(&fresh_key());
    drop(
        cluster
            .bind(&looked_up, "sid-looked-up", Some(in_an_hour()))
            .await,
    );
    // Every script is loaded before the storm, so no reply waits for a script load.
    let warm = rid(&fresh_key());
    drop(cluster.bind(&warm, "sid-warm", Some(in_an_hour())).await);
    cluster.lookup(&warm).await.unwrap();

    let started = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    let storm: Vec<_> = (0..BINDS)
        .map(|i| {
            let (cluster, started, answered) = (cluster.clone(), started.clone(), answered.clone());
            tokio::spawn(async move {
                let key = rid(&fresh_key());
                started.fetch_add(1, Ordering::AcqRel);
                // Its first poll sends the bind, before this task yields.
                let _ = cluster
                    .bind(&key, &format!("sid-{i}"), Some(in_an_hour()))
                    .await;
                answered.fetch_add(1, Ordering::AcqRel);
            })
        })
        .collect();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while started.load(Ordering::Acquire) < BINDS {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the binds start within 10 s"
        );
        tokio::task::yield_now().await;
    }

    let sent = Instant::now();
    let (beat, place) = tokio::join!(
        async {
            let beat = cluster.heartbeat().await;
            (beat, sent.elapsed())
        },
        async {
            let place = cluster.lookup(&looked_up).await;
            (place, sent.elapsed())
        },
    );
    for bind in storm {
        bind.await.expect("a bind task ends");
    }
    let storm = sent.elapsed();
    eprintln!(
        "LANES beat {:?} lookup {:?} storm {:?} answered-at-beat",
        beat.1, place.1, storm
    );

    assert!(beat.0.is_ok(), "the heartbeat is taken during the storm");
    assert!(
        matches!(&place.0, Ok(Place::Online { sid, .. }) if sid == "sid-looked-up"),
        "the lookup answers during the storm: {:?}",
        place.0
    );
    for (what, took) in [("heartbeat", beat.1), ("lookup", place.1)] {
        assert!(
            took < storm / 2,
            "the {what} took {took:?} while the {BINDS} binds sent before it took {storm:?}: it \
             waited behind them"
        );
    }
}

/// Heartbeats while the node lives, as a relay's membership duty does: a node silent for
/// `NODE_SUSPECT` has its tabs taken for gone.
pub async fn heartbeat(cluster: std::sync::Weak<Cluster>) {
    let mut tick = tokio::time::interval(relay::store::redis::HEARTBEAT);
    loop {
        tick.tick().await;
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        let _ = cluster.heartbeat().await;
    }
}
