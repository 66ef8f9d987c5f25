//! A call's slot given back is free again for the next call a moment later, even after Redis
//! lost its scripts (a restart, a failover), which are loaded again. On one server an ended
//! call's slot waits for the node's next admission, which gives it back, or for its bound; on a
//! Redis Cluster it goes back with the other slots waiting, by one script per server; a node
//! refused as busy meanwhile asks again; a refused call costs no call rate.

use std::time::{Duration, Instant};

use relay::store::KeyStore;
use relay::store::redis::{Acquired, Admit, Admitted, Cluster, SessionCall, rid};
use relay::store::track::{Ticket, TrackError};
use relay::tokens::unix_now_ms;

use super::{MAX_INFLIGHT, SESSION, call_id, fresh_key, in_an_hour, session_of};

/// The in-flight slots in the watch of the key whose digest is `id`, on the server on `port`.
fn slots(port: u16, id: &str) -> Vec<String> {
    hkeys(port, &format!("va:w:{id}"), false)
}

/// The same on a Redis Cluster, one of whose servers is on `port`.
fn cluster_slots(port: u16, id: &str) -> Vec<String> {
    hkeys(port, &format!("va:w:{{{id}}}"), true)
}

/// `redis-cli` against the server on `port`: its output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn hkeys(port: u16, watch: &str, cluster: bool) -> Vec<String> {
    let args = if cluster {
        vec!["-c", "HKEYS", watch]
    } else {
        vec!["HKEYS", watch]
    };
    redis_cli(port, &args)
        .lines()
        .filter(|l| l.starts_with("c:"))
        .map(str::to_owned)
        .collect()
}

/// Waits until `slots()` is empty, or fails after 5 s; how long it took.
async fn until_none(slots: impl Fn() -> Vec<String>, what: &str) -> Duration {
    let start = Instant::now();
    while !slots().is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what}: {:?}",
            slots()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

/// Waits until `id` has no slot, or fails after 5 s; how long it took.
async fn until_no_slot(port: u16, id: &str, what: &str) -> Duration {
    until_none(|| slots(port, id), what).await
}

/// A node with `fold_within` of its own.
async fn node(url: &str, fold_within: Duration) -> std::sync::Arc<Cluster> {
    let mut settings = super::settings();
    settings.fold_within = fold_within;
    super::connect_with(url, None, settings).await
}

/// One call of `session` on `node`, while another node's ended call's slot of the same key waits
/// (up to `within`): refused first, asked again once the slot is back, and admitted.
async fn admitted_after_asking_again(
    node: &std::sync::Arc<Cluster>,
    id: &str,
    session: &SessionCall,
    call_id: &str,
    within: Duration,
) -> Option<Admitted> {
    let asked = Instant::now();
    let (got, held) = admit(node, id, session, call_id).await;
    assert!(
        matches!(got, Acquired::Ok),
        "admitted once the ended call's slot is back: {got:?}"
    );
    assert!(
        asked.elapsed() >= within,
        "refused first, asked again after the other node gave its slot back: {:?}",
        asked.elapsed()
    );
    held
}

/// The keys whose digests are `ids` issued and bound on `node` (to sockets `<sid>_<n>`) for an
/// hour, so they outlive the suite's short unbound lifetime.
async fn bind_for_an_hour<'a>(
    node: &Cluster,
    ids: impl IntoIterator<Item = &'a String>,
    sid: &str,
) {
    for (n, id) in ids.into_iter().enumerate() {
        node.issue(id, in_an_hour()).await.unwrap();
        node.bind(id, &format!("{sid}_{n}"), Some(in_an_hour()))
            .await
            .unwrap()
            .unwrap();
    }
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

/// One call of `session` admitted on `node` for the key whose digest is `id`, and ended.
async fn call_and_end(
    node: &std::sync::Arc<Cluster>,
    id: &str,
    session: &SessionCall,
    call_id: &str,
) {
    let (got, held) = admit(node, id, session, call_id).await;
    assert!(matches!(got, Acquired::Ok), "{call_id}: {got:?}");
    drop(held);
}

/// Two nodes on one server on `port` (`url`), whose ended calls' slots wait up to 1 s here, long
/// enough to be seen waiting (so a node admitting a call a second counts as admitting often).
pub async fn an_ended_calls_slot_goes_back_late(url: &str, port: u16) {
    let within = Duration::from_secs(1);
    let (a, b) = (node(url, within).await, node(url, within).await);
    let (key, other) = (rid(&fresh_key()), rid(&fresh_key()));
    bind_for_an_hour(&a, [&key, &other], "s_late").await;
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
    let running = admitted_after_asking_again(&b, &key, &session, "c_late_4", within).await;
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

/// One server on `port` (`url`), a node whose ended calls' slots wait up to 2 s: a batch leaves
/// the slots that ended shortly before it is due (under a quarter of the wait), which the next
/// admission is likeliest to take, and gives them back with the next batch, still within the
/// wait.
pub async fn a_batch_leaves_the_slots_just_ended(url: &str, port: u16) {
    let within = Duration::from_secs(2);
    let a = node(url, within).await;
    let (first, second, spare) = (rid(&fresh_key()), rid(&fresh_key()), rid(&fresh_key()));
    bind_for_an_hour(&a, [&first, &second, &spare], "s_young").await;
    let session = SessionCall {
        tag: 0x57,
        max_inflight: 4,
        rate_per_sec: 1000,
    };
    // A's first call goes back at once; its second's slot waits, and the batch is due 1.5 s
    // later.
    call_and_end(&a, &spare, &session, "c_young_0").await;
    until_no_slot(port, &spare, "given back at once").await;
    call_and_end(&a, &first, &session, "c_young_1").await;
    let woke = Instant::now();
    assert_eq!(slots(port, &first), ["c:c_young_1"], "waits");
    // 1.2 s later a call on another key: its admission gives the first slot back, and its own
    // slot waits, 0.3 s old when the batch is due.
    tokio::time::sleep(Duration::from_millis(1200).saturating_sub(woke.elapsed())).await;
    call_and_end(&a, &second, &session, "c_young_2").await;
    let ended = Instant::now();
    assert!(
        slots(port, &first).is_empty(),
        "given back by the admission"
    );
    tokio::time::sleep(Duration::from_millis(1750).saturating_sub(woke.elapsed())).await;
    assert_eq!(
        slots(port, &second),
        ["c:c_young_2"],
        "left by the batch due at 1.5 s, for an admission"
    );
    // No admission comes: the next batch gives it back, within the wait.
    until_no_slot(port, &second, "given back by the next batch").await;
    assert!(
        ended.elapsed() < within + Duration::from_millis(500),
        "within the wait: {:?}",
        ended.elapsed()
    );
}

/// How many times the servers on `ports` ran `command` (from scripts too), by their counts
/// (`INFO commandstats`, since these were last reset).
pub fn runs(ports: &[u16], command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    ports
        .iter()
        .map(|port| {
            redis_cli(*port, &["INFO", "commandstats"])
                .lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .and_then(|v| v.split(',').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// How many `EVAL` the servers on `ports` ran: on a cluster, only the script that gives slots
/// back a server at a time is sent that way (the others by their digest, `EVALSHA`).
fn evals(ports: &[u16]) -> u64 {
    runs(ports, "eval")
}

/// `n` fresh keys' digests whose hash slots each primary of a cluster of three serves (such a
/// cluster splits the slots in thirds), each with its primary (0, 1, 2); one of its servers is on
/// `port`.
fn keys_by_primary(port: u16, n: usize) -> Vec<(String, usize)> {
    let mut keys = Vec::new();
    let mut per_primary = [0; 3];
    while per_primary.iter().any(|k| *k < n) {
        let id = rid(&fresh_key());
        let slot: usize = hash_slot(port, &id).parse().expect("a slot");
        let primary = match slot {
            0..=5460 => 0,
            5461..=10922 => 1,
            _ => 2,
        };
        if per_primary[primary] < n {
            per_primary[primary] += 1;
            keys.push((id, primary));
        }
    }
    keys
}

/// On a Redis Cluster of three primaries (`url`, its servers on `ports`), two nodes whose ended
/// calls' slots wait up to 1 s: slots of keys all over the cluster wait, then go back together,
/// by one script on each server that serves some rather than one per hash slot; this node's
/// next admission on the same key gives its slot back with it; another node's admission refused
/// meanwhile asks again; a node leaving gives back what waits.
pub async fn on_a_cluster_slots_go_back_a_server_at_a_time(url: &str, ports: &[u16]) {
    let within = Duration::from_secs(1);
    let (a, b) = (node(url, within).await, node(url, within).await);
    let port = ports[0];
    let by_primary = keys_by_primary(port, 3);
    let keys: Vec<String> = by_primary.iter().map(|(id, _)| id.clone()).collect();
    let spare = rid(&fresh_key());
    bind_for_an_hour(&a, keys.iter().chain([&spare]), "s_spread").await;
    let session = SessionCall {
        tag: 0x53,
        max_inflight: 1,
        rate_per_sec: 1000,
    };

    // A's first call: admitting rarely, its slot goes back at once.
    let (got, held) = admit(&a, &keys[0], &session, "c_spread_first").await;
    assert!(matches!(got, Acquired::Ok), "{got:?}");
    drop(held);
    until_none(|| cluster_slots(port, &keys[0]), "given back at once").await;

    // Then a call on each key, each ended at once. Twice: the first time every slot waits, then
    // goes back, and that batch finds each slot's server; the second time each admission gives
    // back the slots waiting on its own server, so only the last call on each server leaves its
    // slot waiting, and the batch sends each server its own at once.
    for round in 0..2 {
        // A admits often (its call before may be a second old): a call on another key first.
        let (got, held) = admit(&a, &spare, &session, &format!("c_spread_{round}_w")).await;
        assert!(matches!(got, Acquired::Ok), "{got:?}");
        drop(held);
        let before = evals(ports);
        let started = Instant::now();
        for (n, id) in keys.iter().enumerate() {
            let (got, held) = admit(&a, id, &session, &format!("c_spread_{round}_{n}")).await;
            assert!(matches!(got, Acquired::Ok), "{got:?}");
            drop(held);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            started.elapsed() < within,
            "this check needs the calls within {within:?}"
        );
        for (n, (id, primary)) in by_primary.iter().enumerate() {
            let last_on_its_server = !by_primary[n + 1..].iter().any(|(_, p)| p == primary);
            let waits = round == 0 || last_on_its_server;
            assert_eq!(
                cluster_slots(port, id).len(),
                usize::from(waits),
                "round {round}, call {n}: {}",
                match waits {
                    true => "the ended call's slot waits",
                    false => "given back by the next admission on the same server",
                }
            );
        }
        for id in &keys {
            until_none(|| cluster_slots(port, id), "given back after the wait").await;
        }
        let sent = evals(ports) - before;
        assert!(
            (1..=3).contains(&sent),
            "one script on each server serving some of the slots, not one per slot: {sent}"
        );
    }

    // A's call ended, its slot waiting: the session's next call on the same key (at its limit
    // of one) on A itself is admitted at once (its admission gives the slot back); on B it is
    // refused first, asks again, and is admitted. (A call on another key first each time: A
    // admits often again, its call before being a second old.)
    let warm = |n: usize| {
        let a = a.clone();
        let (key, session) = (keys[3 + n].clone(), &session);
        async move {
            let (got, held) = admit(&a, &key, session, &format!("c_spread_w{n}")).await;
            assert!(matches!(got, Acquired::Ok), "{got:?}");
            drop(held);
        }
    };
    warm(0).await;
    let (got, held) = admit(&a, &keys[1], &session, "c_spread_own_1").await;
    assert!(matches!(got, Acquired::Ok), "{got:?}");
    drop(held);
    assert_eq!(cluster_slots(port, &keys[1]), ["c:c_spread_own_1"], "waits");
    let asked = Instant::now();
    let (got, held) = admit(&a, &keys[1], &session, "c_spread_own_2").await;
    assert!(matches!(got, Acquired::Ok), "admitted at once: {got:?}");
    assert!(
        asked.elapsed() < within / 2,
        "not asked again: {:?}",
        asked.elapsed()
    );
    assert_eq!(
        cluster_slots(port, &keys[1]),
        ["c:c_spread_own_2"],
        "the ended call's slot went back with the admission"
    );
    drop(held);
    until_none(|| cluster_slots(port, &keys[1]), "given back").await;

    warm(1).await;
    let (got, held) = admit(&a, &keys[1], &session, "c_spread_x").await;
    assert!(matches!(got, Acquired::Ok), "{got:?}");
    drop(held);
    drop(admitted_after_asking_again(&b, &keys[1], &session, "c_spread_y", within).await);
    until_none(|| cluster_slots(port, &keys[1]), "given back").await;

    // B leaves with a slot waiting: it gives it back as it goes.
    let (got, held) = admit(&b, &keys[2], &session, "c_spread_leave").await;
    assert!(matches!(got, Acquired::Ok), "{got:?}");
    drop(held);
    assert_eq!(cluster_slots(port, &keys[2]), ["c:c_spread_leave"]);
    b.leave().await;
    assert!(
        cluster_slots(port, &keys[2]).is_empty(),
        "given back when leaving"
    );
}

/// The hash slot of `id`'s records.
fn hash_slot(port: u16, id: &str) -> String {
    redis_cli(port, &["CLUSTER", "KEYSLOT", &format!("va:w:{{{id}}}")])
        .trim()
        .to_owned()
}

/// Moves hash slot `slot`, with its keys, from the primary on `from` to the one on `to`, and
/// tells the primaries on `ports` (as a cluster's resharding does, one slot).
fn move_hash_slot(ports: &[u16], slot: &str, from: u16, to: u16) {
    let id_of = |port: u16| redis_cli(port, &["CLUSTER", "MYID"]).trim().to_owned();
    let (from_id, to_id) = (id_of(from), id_of(to));
    let ok = |port: u16, args: &[&str]| {
        let out = redis_cli(port, args);
        assert_eq!(out.trim(), "OK", "{args:?} on {port}");
    };
    ok(to, &["CLUSTER", "SETSLOT", slot, "IMPORTING", &from_id]);
    ok(from, &["CLUSTER", "SETSLOT", slot, "MIGRATING", &to_id]);
    loop {
        let keys = redis_cli(from, &["CLUSTER", "GETKEYSINSLOT", slot, "100"]);
        let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        if keys.is_empty() {
            break;
        }
        let port = to.to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        args.extend(keys);
        ok(from, &args);
    }
    for port in ports {
        let role = redis_cli(*port, &["ROLE"]);
        if role.starts_with("master") {
            ok(*port, &["CLUSTER", "SETSLOT", slot, "NODE", &to_id]);
        }
    }
}

/// On a Redis Cluster of three primaries (`url`, its servers on `ports`), a slot that an
/// admission names as its own server's, after its hash slot was moved to another server, is not
/// lost: the admission is answered, the slot still waits, and goes back with the next batch
/// (which finds its new server), not at its call's deadline. The hash slot is moved back after.
pub async fn a_moved_hash_slots_slot_still_goes_back(url: &str, ports: &[u16]) {
    let within = Duration::from_secs(1);
    let a = node(url, within).await;
    let from = primary_serving(ports, "0-5460");
    let to = primary_serving(ports, "5461-10922");
    // Two keys on the first primary: `moved`'s hash slot moves, `stays`'s does not.
    let mut keys = keys_by_primary(from, 2)
        .into_iter()
        .filter(|(_, p)| *p == 0)
        .map(|(id, _)| id);
    let (moved, stays) = (keys.next().expect("a key"), keys.next().expect("a key"));
    let slot = hash_slot(from, &moved);
    assert_ne!(slot, hash_slot(from, &stays));
    let spare = rid(&fresh_key());
    bind_for_an_hour(&a, [&moved, &stays, &spare], "s_moved").await;
    let session = SessionCall {
        tag: 0x56,
        max_inflight: 4,
        rate_per_sec: 1000,
    };
    // A admits often; both keys' slots wait and go back by a batch, which finds their server.
    call_and_end(&a, &spare, &session, "c_moved_w0").await;
    call_and_end(&a, &moved, &session, "c_moved_f0").await;
    call_and_end(&a, &stays, &session, "c_moved_f1").await;
    until_none(|| cluster_slots(from, &moved), "the first batch").await;
    until_none(|| cluster_slots(from, &stays), "the first batch").await;

    move_hash_slot(ports, &slot, from, to);
    let result = async {
        call_and_end(&a, &spare, &session, "c_moved_w1").await;
        call_and_end(&a, &moved, &session, "c_moved_0").await;
        assert_eq!(cluster_slots(to, &moved), ["c:c_moved_0"], "waits");
        // The next admission on the first primary names it among that server's slots.
        let ended = Instant::now();
        call_and_end(&a, &stays, &session, "c_moved_1").await;
        assert_eq!(
            cluster_slots(to, &moved),
            ["c:c_moved_0"],
            "not served there, so still waiting"
        );
        let took = until_none(|| cluster_slots(to, &moved), "given back by the batch").await;
        until_none(|| cluster_slots(from, &stays), "given back").await;
        ended.elapsed().max(took)
    }
    .await;
    move_hash_slot(ports, &slot, to, from);
    assert!(
        result < within + Duration::from_millis(700),
        "with the next batch: {result:?}"
    );
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

/// The port of the primary serving hash slots `range` (`0-5460`) among the servers on `ports`.
fn primary_serving(ports: &[u16], range: &str) -> u16 {
    let nodes = redis_cli(ports[0], &["CLUSTER", "NODES"]);
    let line = nodes
        .lines()
        .find(|l| l.contains("master") && l.split(' ').any(|w| w == range))
        .unwrap_or_else(|| panic!("a primary serving {range}: {nodes}"));
    let addr = line.split(' ').nth(1).expect("an address");
    let port = addr
        .split('@')
        .next()
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .expect("a port");
    assert!(ports.contains(&port), "{port} is one of the cluster's");
    port
}

/// On a Redis Cluster of three primaries (`url`, its servers on `ports`), one primary stops
/// answering (`SIGSTOP`, for less than the cluster's node timeout, so no replica takes over) while
/// ended calls' slots wait on every server, each server known from a batch before: the other
/// servers' slots go back at their time, a call ending meanwhile is not held up behind the
/// batch waiting for that server, and that server's slots go back once it answers again. Runs last: the paused server may have been
/// found failing by the others.
pub async fn a_paused_server_holds_up_only_its_own_slots(url: &str, ports: &[u16]) {
    let within = Duration::from_secs(1);
    let a = node(url, within).await;
    let paused = primary_serving(ports, "0-5460");
    let healthy = primary_serving(ports, "5461-10922");
    let keys = keys_by_primary(healthy, 2);
    let spare = rid(&fresh_key());
    bind_for_an_hour(
        &a,
        keys.iter().map(|(id, _)| id).chain([&spare]),
        "s_paused",
    )
    .await;
    let session = SessionCall {
        tag: 0x55,
        max_inflight: 4,
        rate_per_sec: 1000,
    };
    // A batch first, which finds each slot's server.
    for (n, (id, _)) in keys.iter().enumerate() {
        let (got, held) = admit(&a, id, &session, &format!("c_paused_f{n}")).await;
        assert!(matches!(got, Acquired::Ok), "{got:?}");
        drop(held);
    }
    for (id, p) in &keys {
        let port = if *p == 0 { paused } else { healthy };
        until_none(|| cluster_slots(port, id), "the first batch").await;
    }
    // Two calls, so A admits often and the second's slot waits: the batch is due 0.75 s after
    // it ends (three quarters of the wait).
    for n in 0..2 {
        let (got, held) = admit(&a, &spare, &session, &format!("c_paused_w{n}")).await;
        assert!(matches!(got, Acquired::Ok), "{got:?}");
        drop(held);
    }
    let first_wait = Instant::now();
    for (n, (id, _)) in keys.iter().enumerate() {
        let (got, held) = admit(&a, id, &session, &format!("c_paused_{n}")).await;
        assert!(matches!(got, Acquired::Ok), "{got:?}");
        drop(held);
    }
    let pid = redis_cli(paused, &["INFO", "server"])
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .map(|p| p.trim().to_owned())
        .expect("the server's process id");
    tokio::time::sleep(Duration::from_millis(600).saturating_sub(first_wait.elapsed())).await;
    let signal = |sig: &str| {
        let sent = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill");
        assert!(sent.success());
    };
    signal("-STOP");
    let stopped = Instant::now();
    let result = async {
        // The other servers' slots go back with the batch (due 0.75 s after the first wait).
        for (id, _) in keys.iter().filter(|(_, p)| *p != 0) {
            until_none(|| cluster_slots(healthy, id), "the other servers' slots").await;
        }
        assert!(
            first_wait.elapsed() < within + Duration::from_millis(700),
            "at their time: {:?}",
            first_wait.elapsed()
        );
        // A call ending now goes back with the next batch, while the one before still waits
        // for the paused server (its script there is given up after 1 s, then sent again).
        let (id, _) = keys.iter().find(|(_, p)| *p == 1).expect("a key");
        let (got, held) = admit(&a, id, &session, "c_paused_next").await;
        assert!(matches!(got, Acquired::Ok), "{got:?}");
        drop(held);
        let ended = Instant::now();
        until_none(|| cluster_slots(healthy, id), "the next batch").await;
        ended.elapsed()
    }
    .await;
    tokio::time::sleep(Duration::from_millis(1900).saturating_sub(stopped.elapsed())).await;
    signal("-CONT");
    assert!(
        result < within + Duration::from_millis(600),
        "not held up behind the batch waiting for the paused server: {result:?}"
    );
    // The paused server's slots go back once it answers.
    for (id, _) in keys.iter().filter(|(_, p)| *p == 0) {
        until_none(|| cluster_slots(healthy, id), "the paused server's slots").await;
    }
}
