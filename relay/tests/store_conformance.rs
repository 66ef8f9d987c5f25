//! One suite for every key store: the same cases run unchanged against the in-memory store and
//! against the Redis store on a real `redis-server` (started here on a free port), over TLS, and
//! on a Redis Cluster of six servers; and the Redis scripts walked through the lifecycle table
//! (`relay::store::lifecycle`); a key's changes reach only the nodes waiting for it (`events.rs`);
//! on a Cluster, calls between nodes go on the receiving node's sharded channel (`hops.rs`).
//! The cases with tabs
//! (binding, replacing, the grace, in-flight slots, finding the tab) are in `binding.rs`, what a
//! tab declares and the session mode in `declare.rs`, on real sockets (`tabs.rs`).

#[path = "store_conformance/binding.rs"]
mod binding;
#[path = "store_conformance/cluster.rs"]
mod cluster;
#[path = "store_conformance/declare.rs"]
mod declare;
#[path = "store_conformance/events.rs"]
mod events;
#[path = "store_conformance/hops.rs"]
mod hops;
#[path = "store_conformance/idempotency.rs"]
mod idempotency;
#[path = "store_conformance/lanes.rs"]
mod lanes;
#[path = "store_conformance/lost.rs"]
mod lost;
#[path = "store_conformance/releases.rs"]
mod releases;
#[path = "store_conformance/sessions.rs"]
mod sessions;
#[path = "store_conformance/tabs.rs"]
mod tabs;
#[path = "store_conformance/tls.rs"]
mod tls;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use relay::metrics::Metrics;
use relay::store::claims::ReplayBound;
use relay::store::keys::{Keys, LifecycleConfig};
use relay::store::lifecycle::{self, BindError, Event, Facts, Phase, Shown, Transition};
use relay::store::redis::{Bound, Cluster, Revoked, Settings};
use relay::store::track::{Ticket, Track, TrackError};
use relay::store::{KeyStore, MemoryStore, RedisStore, SessionLimits};
use relay::tokens::unix_now;
use relay_wire::KeyState;

const UNBOUND_TTL: Duration = Duration::from_millis(300);
const GRACE: Duration = Duration::from_millis(300);
/// A key's in-flight calls, on both stores.
const MAX_INFLIGHT: usize = 4;
/// What one agent session may take: fewer slots than its key has; many calls a second (the
/// rate is counted in the same script as the slots, and tested end to end).
const LIMITS: SessionLimits = SessionLimits {
    max_inflight: 2,
    rate_per_sec: 100_000,
};
/// A session for the cases that are not about sessions.
const SESSION: &str = "s_00000000000000000000000000000000aaaaaaaaaaaaaaaa";

/// A call id of its own (as every call has).
fn call_id() -> String {
    format!("c_{}", hex::encode(rand::random::<[u8; 12]>()))
}

/// A call's hold on `key` for agent session `session`, under a call id of its own.
async fn track<'a>(
    store: &'a impl KeyStore,
    key: &'a str,
    session: &'a str,
) -> Result<Track<'a>, TrackError> {
    let id = call_id();
    store
        .track(key, session, &Ticket::plain(&id, Duration::from_secs(60)))
        .await
}

/// Session `n` of `key` (its id names the key, as a minted one does).
fn session_of(key: &str, n: u8) -> String {
    relay_wire::session::new_session_id(&relay_wire::session::key_digest(key), [n; 8])
}

fn lifecycle() -> LifecycleConfig {
    LifecycleConfig {
        unbound_ttl: UNBOUND_TTL,
        grace: GRACE,
        max_inflight: MAX_INFLIGHT,
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
    let tabs = tabs::Tabs::start();
    binding::cases(store, &tabs).await;
    sessions::cases(store).await;
    declare::cases(store, &tabs).await;
    unknown_key(store).await;
    issue_then_status(store).await;
    revoke_leaves_a_tombstone(store).await;
    unbound_key_expires(store).await;
    token_rate_per_address(store).await;
    idempotency::cases(store).await;
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

/// Tokens one address may get per minute in the suite.
const TOKENS_PER_MIN: u32 = 2;

async fn token_rate_per_address(store: &impl KeyStore) {
    let [a, b, c, d] = rand::random::<[u8; 4]>();
    let ip = std::net::IpAddr::from([10, a, b, c]);
    let other = std::net::IpAddr::from([10, a, b, c.wrapping_add(1 + d % 200)]);
    for _ in 0..TOKENS_PER_MIN {
        assert!(store.take_token(ip).await.unwrap(), "within the budget");
    }
    assert!(!store.take_token(ip).await.unwrap(), "budget spent");
    assert!(
        store.take_token(other).await.unwrap(),
        "another address has its own"
    );
}

const BOUND: ReplayBound = ReplayBound {
    max_timeout: Duration::from_secs(2),
    drain: Duration::from_millis(100),
    window: Duration::from_secs(2),
};

/// The in-memory store on tokio's paused clock: its waits (expiry, a retry waiting for the first
/// outcome) take no real time. Redis keeps its own clock, so its run sleeps for real.
#[tokio::test(start_paused = true)]
async fn memory_store() {
    suite(&MemoryStore::new(local_keys(), TOKENS_PER_MIN, BOUND).with_sessions(LIMITS)).await;
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

fn settings() -> Settings {
    Settings {
        grace: GRACE,
        unbound_ttl: UNBOUND_TTL,
        max_inflight: MAX_INFLIGHT,
        inflight_ttl: Duration::from_secs(60),
        fold_within: relay::store::redis::FOLD_WITHIN,
    }
}

async fn connect(port: u16) -> Arc<Cluster> {
    connect_to(&format!("redis://127.0.0.1:{port}"), None).await
}

/// Connects to `url` (trusting `ca` for TLS), waiting for the server to start; the node
/// heartbeats while it lives ([`lanes::heartbeat`]).
async fn connect_to(url: &str, ca: Option<Vec<u8>>) -> Arc<Cluster> {
    connect_with(url, ca, settings()).await
}

/// [`connect_to`] with `settings` of the case's own.
async fn connect_with(url: &str, ca: Option<Vec<u8>>, settings: Settings) -> Arc<Cluster> {
    let mut last = None;
    for _ in 0..50 {
        match Cluster::connect_trusting(url, ca.clone(), settings.clone()).await {
            Ok(cluster) => {
                tokio::spawn(lanes::heartbeat(Arc::downgrade(&cluster)));
                return cluster;
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("redis-server did not start: {last:?}");
}

#[tokio::test]
async fn redis_store() {
    let server = start_redis();
    let cluster = connect(server.port).await;
    let store =
        RedisStore::new(cluster.clone(), local_keys(), TOKENS_PER_MIN, BOUND).with_sessions(LIMITS);
    suite(&store).await;
    lanes::a_bind_storm_delays_neither_heartbeat_nor_lookup(&cluster).await;
    events::only_waiting_nodes_hear_a_key(&cluster, &format!("redis://127.0.0.1:{}", server.port))
        .await;
    releases::a_slot_is_given_back_after_redis_lost_its_scripts(&store, server.port).await;
    let url = format!("redis://127.0.0.1:{}", server.port);
    releases::an_ended_calls_slot_goes_back_late(&url, server.port).await;
    releases::a_batch_leaves_the_slots_just_ended(&url, server.port).await;
    releases::a_refused_call_costs_no_call_rate(&url).await;
}

/// The same suite through `rediss://` with an ACL user, trusting the test's own CA.
#[tokio::test]
async fn redis_store_over_tls_with_an_acl_user() {
    let certs = tls::make_certificates();
    let server = tls::start_tls_redis(&certs.0);
    let ca = std::fs::read(certs.0.join("ca.crt")).expect("the CA");
    let url = |password: &str| {
        format!(
            "rediss://{}:{password}@127.0.0.1:{}",
            tls::USER,
            server.port
        )
    };
    let cluster = connect_to(&url(tls::PASSWORD), Some(ca.clone())).await;
    let untrusted = Cluster::connect(&url(tls::PASSWORD), settings()).await;
    let err = format!("{:#}", untrusted.err().expect("an unknown CA is refused"));
    assert!(err.contains("not trusted"), "{err}");
    let wrong = Cluster::connect_trusting(&url("not-the-password-42"), Some(ca), settings()).await;
    let err = format!("{:#}", wrong.err().expect("a wrong password is refused"));
    assert!(err.contains("refused the credentials"), "{err}");
    assert!(!err.contains("not-the-password-42"), "{err}");
    let plain = Cluster::connect(&format!("redis://127.0.0.1:{}", server.port), settings()).await;
    assert!(
        plain.is_err(),
        "a TLS-only server refuses plain connections"
    );
    let store = RedisStore::new(cluster, local_keys(), TOKENS_PER_MIN, BOUND).with_sessions(LIMITS);
    suite(&store).await;
}

/// The same suite on a Redis Cluster of six servers, through `redis+cluster://`.
#[tokio::test]
async fn redis_store_on_a_cluster() {
    let servers = tokio::task::spawn_blocking(cluster::start_cluster)
        .await
        .expect("the cluster starts");
    let cluster = connect_to(&servers.url(), None).await;
    let store =
        RedisStore::new(cluster.clone(), local_keys(), TOKENS_PER_MIN, BOUND).with_sessions(LIMITS);
    suite(&store).await;
    lanes::a_bind_storm_delays_neither_heartbeat_nor_lookup(&cluster).await;
    events::only_waiting_nodes_hear_a_key(&cluster, &servers.url()).await;
    hops::calls_between_nodes_go_on_sharded_channels(&servers.url(), &servers.ports).await;
    releases::a_refused_call_costs_no_call_rate(&servers.url()).await;
    releases::on_a_cluster_slots_go_back_a_server_at_a_time(&servers.url(), &servers.ports).await;
    releases::a_moved_hash_slots_slot_still_goes_back(&servers.url(), &servers.ports).await;
    let servers = tokio::task::spawn_blocking(move || {
        cluster::check_config(&servers);
        servers
    })
    .await
    .expect("check-config on the cluster");
    releases::a_paused_server_holds_up_only_its_own_slots(&servers.url(), &servers.ports).await;
}

/// The Redis scripts follow the lifecycle table: every reachable key, every event that a script
/// carries out (bind, release, revoke; issue and expiry are plain writes and TTLs, covered
/// above), the same outcome and the same next phase as [`lifecycle::apply`].
#[tokio::test]
async fn redis_scripts_follow_the_lifecycle_table() {
    let server = start_redis();
    let cluster = connect(server.port).await;
    let held_by = "sid-holder";
    let mut checked = 0;
    for start in lifecycle::REACHABLE {
        for event in lifecycle::EVENTS {
            if matches!(event, Event::Issue | Event::Expire) {
                continue;
            }
            let rid = relay::store::redis::rid(&fresh_key());
            reach(&cluster, &rid, start, held_by).await;
            let expected = lifecycle::apply(start, event);
            let outcome = match event {
                Event::Bind { shown, same_socket } => {
                    let sid = if same_socket { held_by } else { "sid-other" };
                    let exp = match shown {
                        Shown::Token { expired: false } => Some(in_an_hour()),
                        Shown::Token { expired: true } => Some(unix_now().as_secs() - 10),
                        Shown::BareKey => None,
                    };
                    match cluster.bind(&rid, sid, exp).await.unwrap() {
                        Err(e) => Transition::Refused(e),
                        Ok(Bound::Same) => Transition::Stays,
                        Ok(Bound::Bound { .. }) => observed(&cluster, &rid).await,
                    }
                }
                Event::Release { same_socket } => {
                    let sid = if same_socket { held_by } else { "sid-other" };
                    let before = observed(&cluster, &rid).await;
                    cluster.release(&rid, sid).await.unwrap();
                    let after = observed(&cluster, &rid).await;
                    if after == before {
                        Transition::Stays
                    } else {
                        after
                    }
                }
                Event::Revoke => match cluster.revoke(&rid).await.unwrap() {
                    Revoked::Unknown => Transition::Refused(BindError::Unknown),
                    Revoked::Done { .. } => observed(&cluster, &rid).await,
                },
                Event::Issue | Event::Expire => unreachable!(),
            };
            assert_eq!(
                norm(outcome),
                norm(expected),
                "{start:?} --{event:?}--> Lua gave {outcome:?}, the table {expected:?}"
            );
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        5 * 7,
        "every reachable key with every scripted event"
    );
}

/// Puts `rid` into `start` through the scripts.
async fn reach(cluster: &Cluster, rid: &str, start: Option<Facts>, sid: &str) {
    let Some(facts) = start else { return };
    cluster.issue(rid, in_an_hour()).await.unwrap();
    match facts.phase {
        Phase::Issued => {}
        Phase::Online => drop(cluster.bind(rid, sid, Some(in_an_hour())).await.unwrap()),
        Phase::Offline => {
            drop(cluster.bind(rid, sid, Some(in_an_hour())).await.unwrap());
            cluster.release(rid, sid).await.unwrap();
        }
        Phase::Revoked => drop(cluster.revoke(rid).await.unwrap()),
    }
    assert_eq!(
        phase_of(observed(cluster, rid).await),
        Some(start.map(|f| f.phase))
    );
}

/// The phase Redis holds for `rid`, as a transition to it.
async fn observed(cluster: &Cluster, rid: &str) -> Transition {
    if cluster.is_revoked(rid).await.unwrap() {
        return Transition::To(Some(Facts {
            phase: Phase::Revoked,
            ever_bound: false,
        }));
    }
    let phase = cluster.status(rid).await.unwrap().map(|s| match s.state {
        KeyState::Issued => Phase::Issued,
        KeyState::Online => Phase::Online,
        KeyState::Offline => Phase::Offline,
    });
    Transition::To(phase.map(|phase| Facts {
        phase,
        ever_bound: false,
    }))
}

/// What a transition says about the key's phase (`ever_bound` is not stored by phase alone).
fn phase_of(t: Transition) -> Option<Option<Phase>> {
    match t {
        Transition::To(facts) => Some(facts.map(|f| f.phase)),
        _ => None,
    }
}

/// A transition with `ever_bound` left out, which Redis does not report.
fn norm(t: Transition) -> Transition {
    match t {
        Transition::To(facts) => Transition::To(facts.map(|f| Facts {
            ever_bound: false,
            ..f
        })),
        other => other,
    }
}
