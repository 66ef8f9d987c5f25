//! This node's membership in a cluster on Redis: the once-a-second duty of heartbeating,
//! reaping lost nodes, and writing this node's live bindings back when its entry was lost.

use std::sync::Arc;

use crate::app::App;
use crate::delivery;
use crate::store::keys::Displaced;
use crate::store::redis::{Cluster, HEARTBEAT, NODE_STALE, StoreError, rid};

/// The node's background duty while it runs: heartbeat, reap lost nodes, and write the live
/// bindings back whenever this node finds its own entry gone.
pub async fn maintain(app: Arc<App>, cluster: Arc<Cluster>) {
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first = true;
    // Set while heartbeats fail. A heartbeat that timed out here may still reach Redis later (a
    // partition that heals delivers what waited), and its answer, "the entry was gone", is then
    // lost: so after any failed heartbeat the bindings are written back once Redis answers
    // again, whatever the next heartbeat says (writing back a binding that stood is a no-op).
    let mut unsure = false;
    // No other node is reaped before this instant. After this node could not heartbeat (Redis
    // away, or a failover: the new primary holds every node's heartbeat as of the moment the old
    // one stopped replicating), the others could not either; they get `NODE_STALE` on the
    // server this node now reaches to heartbeat there, rather than be reaped the moment this
    // node comes back first (their keys would go offline until they write them back).
    let mut reap_from = tokio::time::Instant::now();
    let mut away = false;
    loop {
        tick.tick().await;
        cluster.ping_listener().await;
        // Detached: a lane busy with a storm of binds must not delay the heartbeat.
        tokio::spawn({
            let cluster = cluster.clone();
            async move { cluster.ping_lanes().await }
        });
        // On a Redis Cluster, every channel is subscribed again each beat: after a primary died,
        // the redis crate's connection does not always move the sharded subscriptions that were
        // on it to its replica (a no-op on one server).
        cluster.resubscribe().await;
        // Moved to a new primary (sentinels): it may lack what the old one took last.
        let moved = cluster.take_moved();
        unsure |= moved;
        away |= moved;
        match cluster.heartbeat().await {
            Ok(missing) => {
                // Which Socket.IO server this node runs, for the others to aim emits at.
                if let Some(server) = app.io.get().and_then(|io| io.server_id()) {
                    let _ = cluster.announce_server(server).await;
                }
                if std::mem::take(&mut away) {
                    reap_from = tokio::time::Instant::now() + NODE_STALE;
                }
                if (missing || unsure) && !first {
                    if missing {
                        tracing::warn!(
                            "this node's entry was gone from Redis; writing its bindings back"
                        );
                    } else {
                        tracing::info!(
                            "Redis answers again; writing this node's bindings back in case they were reaped meanwhile"
                        );
                    }
                    unsure = !reassert_all(&app, &cluster).await;
                } else {
                    unsure = false;
                }
                first = false;
            }
            Err(StoreError) => {
                unsure = true;
                away = true;
                continue;
            }
        }
        if tokio::time::Instant::now() < reap_from {
            continue;
        }
        match cluster.reap().await {
            Ok(0) | Err(_) => {}
            Ok(n) => tracing::info!(keys = n, "keys of a lost node marked offline"),
        }
    }
}

/// Writes every live local binding back; false when Redis failed before all were written.
async fn reassert_all(app: &App, cluster: &Cluster) -> bool {
    for (key, mut binding, exp) in app.keys.bound() {
        let reason = loop {
            let sid = binding.sid().to_string();
            // Written back, a binding replaces one of this node's older sockets in Redis: one
            // that a bind on this node replaced meanwhile is not written, and if such a bind
            // came while it was, the newer socket is written back after it.
            let held = |b: &crate::store::keys::Binding| b.sid().to_string() == sid;
            if !app.keys.local_binding(&key).is_some_and(|(b, _)| held(&b)) {
                break None;
            }
            match cluster
                .reassert(&rid(&key), &sid, exp, binding.bound_ms)
                .await
            {
                Ok(None) => match app.keys.local_binding(&key) {
                    Some((newer, _)) if !held(&newer) => binding = newer,
                    _ => break None,
                },
                Ok(Some(reason)) => break Some(reason),
                Err(StoreError) => return false,
            }
        };
        let Some(reason) = reason else { continue };
        tracing::info!(key = %relay_wire::Fp(&key), "binding lost while Redis was away; tab dismissed");
        app.keys.release(&key, binding.sid());
        delivery::dismiss(Displaced {
            binding,
            pending: Vec::new(),
            reason,
        });
    }
    true
}
