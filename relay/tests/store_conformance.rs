//! One suite for every key store: the same cases run unchanged against the in-memory store and
//! against the Redis store on a real `redis-server` (started here on a free port).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use relay::cluster::{Cluster, Settings};
use relay::keys::{Keys, LifecycleConfig};
use relay::metrics::Metrics;
use relay::store::{KeyStore, MemoryStore, RedisStore};
use relay::tokens::unix_now;
use relay_wire::KeyState;

const UNBOUND_TTL: Duration = Duration::from_millis(300);
const GRACE: Duration = Duration::from_millis(300);

fn lifecycle() -> LifecycleConfig {
    LifecycleConfig {
        unbound_ttl: UNBOUND_TTL,
        grace: GRACE,
        max_inflight: 4,
    }
}

fn local_keys() -> Arc<Keys> {
    Arc::new(Keys::new(lifecycle(), Arc::new(Metrics::new())))
}

fn fresh_key() -> String {
    format!("va_{}", hex::encode(rand::random::<[u8; 32]>()))
}

/// A token expiry an hour away (Unix seconds).
fn in_an_hour() -> u64 {
    unix_now().as_secs() + 3600
}

/// Every case, in order; each uses keys of its own.
async fn suite(store: &impl KeyStore) {
    unknown_key(store).await;
    issue_then_status(store).await;
    revoke_leaves_a_tombstone(store).await;
    unbound_key_expires(store).await;
}

async fn unknown_key(store: &impl KeyStore) {
    let key = fresh_key();
    assert!(
        store.status(&key).await.unwrap().is_none(),
        "unknown: no status"
    );
    assert!(
        !store.is_revoked(&key).await.unwrap(),
        "unknown: not revoked"
    );
    assert!(
        store.revoke(&key).await.unwrap().is_none(),
        "unknown: nothing to revoke"
    );
}

async fn issue_then_status(store: &impl KeyStore) {
    let key = fresh_key();
    store.issue(&key, in_an_hour()).await.unwrap();
    let status = store
        .status(&key)
        .await
        .unwrap()
        .expect("issued key has a status");
    assert_eq!(status.state, KeyState::Issued);
    assert!(status.grace_ends_ms.is_none());
    assert!(status.since_ms > 0);
    assert!(!store.is_revoked(&key).await.unwrap());
}

async fn revoke_leaves_a_tombstone(store: &impl KeyStore) {
    let key = fresh_key();
    store.issue(&key, in_an_hour()).await.unwrap();
    let revoked = store
        .revoke(&key)
        .await
        .unwrap()
        .expect("issued key revokes");
    assert!(!revoked.tab_notified(), "no tab held an issued key");
    assert!(store.is_revoked(&key).await.unwrap(), "tombstone stands");
    assert!(
        store.status(&key).await.unwrap().is_none(),
        "revoked: no status"
    );
    assert!(
        store.revoke(&key).await.unwrap().is_none(),
        "revoked twice: unknown"
    );
    store.expire();
    assert!(
        store.is_revoked(&key).await.unwrap(),
        "tombstone outlives the sweep"
    );
}

async fn unbound_key_expires(store: &impl KeyStore) {
    let key = fresh_key();
    store.issue(&key, in_an_hour()).await.unwrap();
    tokio::time::sleep(UNBOUND_TTL + Duration::from_millis(200)).await;
    store.expire();
    assert!(
        store.status(&key).await.unwrap().is_none(),
        "unbound key expired"
    );
    assert!(!store.is_revoked(&key).await.unwrap());
}

#[tokio::test]
async fn memory_store() {
    suite(&MemoryStore::new(local_keys())).await;
}

/// A `redis-server` of the test's own, killed when dropped.
struct RedisServer {
    child: Child,
    port: u16,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_redis() -> RedisServer {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed for the store suite");
    RedisServer { child, port }
}

async fn connect(port: u16) -> Arc<Cluster> {
    let url = format!("redis://127.0.0.1:{port}");
    let settings = || Settings {
        grace: GRACE,
        unbound_ttl: UNBOUND_TTL,
        max_inflight: 4,
        inflight_ttl: Duration::from_secs(60),
    };
    for _ in 0..50 {
        if let Ok(cluster) = Cluster::connect(&url, settings()).await {
            return cluster;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("redis-server did not start on port {port}");
}

#[tokio::test]
async fn redis_store() {
    let server = start_redis();
    let cluster = connect(server.port).await;
    suite(&RedisStore::new(cluster, local_keys())).await;
}
