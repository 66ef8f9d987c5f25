//! Calls between nodes on a Redis Cluster: the call a node sends with its admission to the node
//! holding the tab, and the outcome sent back, each go from the key's server on the receiving
//! node's sharded channel there (`SPUBLISH`), not as a classic message that the cluster forwards
//! to every server; a node listening on its classic channel only (one that does not follow the
//! hash slots yet) still receives them, once. A key's changes go to the nodes waiting for it the
//! same way.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use relay::store::redis::{Acquired, Admit, Place, SessionCall, rid};

use super::releases::{redis_cli, runs};
use super::{fresh_key, in_an_hour};

/// How long a message takes to reach a node here, at most.
const DELIVERY: Duration = Duration::from_secs(3);

/// The sharded channels of `node` that the servers on `ports` have subscribers for.
fn sharded_channels(ports: &[u16], node: &str) -> Vec<String> {
    let mut found: Vec<String> = ports
        .iter()
        .flat_map(|port| {
            redis_cli(*port, &["PUBSUB", "SHARDCHANNELS", "va:s:*"])
                .lines()
                .filter(|c| c.ends_with(&format!("}}:{node}")))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    found.sort();
    found
}

async fn next(messages: &mut tokio::sync::mpsc::Receiver<Vec<u8>>, what: &str) -> Vec<u8> {
    tokio::time::timeout(DELIVERY, messages.recv())
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing received"))
        .expect("the node's messages")
}

/// Two nodes on the Redis Cluster at `url` (its servers on `ports`, three primaries).
pub async fn calls_between_nodes_go_on_sharded_channels(url: &str, ports: &[u16]) {
    let (a, b) = (
        super::connect_to(url, None).await,
        super::connect_to(url, None).await,
    );
    let mut to_a = a.take_messages().expect("a's messages");
    let mut to_b = b.take_messages().expect("b's messages");

    // Each node has subscribed a channel on each of the three primaries.
    let end = Instant::now() + DELIVERY;
    while sharded_channels(ports, b.node()).len() < 3 || sharded_channels(ports, a.node()).len() < 3
    {
        assert!(
            Instant::now() < end,
            "each node subscribes a sharded channel per range of hash slots: {:?} {:?}",
            sharded_channels(ports, a.node()),
            sharded_channels(ports, b.node())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(sharded_channels(ports, b.node()).len(), 3);

    // B holds the key's tab; A's first call finds it there (and sends nothing: no guess yet).
    let key = fresh_key();
    let id = rid(&key);
    a.issue(&id, in_an_hour()).await.unwrap();
    b.bind(&id, "s1", Some(in_an_hour()))
        .await
        .unwrap()
        .unwrap();
    let session = SessionCall {
        tag: 9,
        max_inflight: 4,
        rate_per_sec: 1000,
    };
    let offer = || b"the call".to_vec();
    let admit = |call_id| Admit {
        session: &session,
        call_id,
        life: Duration::from_secs(60),
        offer: Some(&offer),
    };
    let (acquired, held) = a.acquire(&id, &admit("c_first")).await.unwrap();
    assert!(matches!(acquired, Acquired::Ok));
    let first = held.expect("a slot");
    assert_eq!(
        first.place,
        Place::Online {
            node: b.node().to_owned(),
            sid: "s1".into()
        }
    );
    assert_eq!(first.sent, None);
    drop(first);

    // The next call goes with its admission, on B's channel on the key's server (A guesses B
    // once it read the heartbeats lately, as it does each beat when it looks for lost nodes).
    a.reap().await.unwrap();
    for port in ports {
        redis_cli(*port, &["CONFIG", "RESETSTAT"]);
    }
    let (acquired, held) = a.acquire(&id, &admit("c_hop")).await.unwrap();
    assert!(matches!(acquired, Acquired::Ok));
    let admitted = held.expect("a slot");
    assert_eq!(admitted.sent, Some(1), "one subscriber: B");
    let got = next(&mut to_b, "the call at B").await;
    assert!(
        got.ends_with(b"\nthe call"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(got.starts_with(b"cs1\n"), "the tab's socket first");

    // Its outcome goes back to A on A's channel on the same server, the slot given back first.
    b.reply(&id, a.node(), Some("c_hop"), b"the outcome".to_vec())
        .await
        .unwrap();
    assert_eq!(next(&mut to_a, "the outcome at A").await, b"the outcome");
    assert_eq!(runs(ports, "spublish"), 2, "both on sharded channels");
    assert_eq!(
        runs(ports, "publish"),
        0,
        "no classic message crossed the cluster"
    );
    drop(admitted);

    // A message a node publishes itself (a call whose tab it did not know where to find, a
    // cancel) goes on a sharded channel too.
    assert_eq!(a.publish_to(b.node(), b"direct".to_vec()).await.unwrap(), 1);
    assert_eq!(next(&mut to_b, "the message at B").await, b"direct");
    assert_eq!(runs(ports, "spublish"), 3);
    assert_eq!(runs(ports, "publish"), 0);

    // A node that listens on its classic channel only still receives its messages, once.
    let old = "0ld0ld0ld0ld0ld0";
    let mut listener = Command::new("redis-cli")
        .args(["-p", &ports[0].to_string(), "SUBSCRIBE"])
        .arg(format!("va:n:{old}"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli");
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let out = listener.stdout.take().expect("its output");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    // Subscribed once its confirmation is out (`subscribe`, the channel, the count).
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l == "1") {
        let line = tokio::time::timeout(DELIVERY, lines.recv())
            .await
            .expect("the listener subscribes")
            .expect("a line");
        seen.push(line);
    }
    b.reply(&id, old, None, b"to a classic listener".to_vec())
        .await
        .unwrap();
    assert_eq!(
        a.publish_to(old, b"to a classic listener".to_vec())
            .await
            .unwrap(),
        1
    );
    let mut received = 0;
    let until = Instant::now() + Duration::from_millis(700);
    while let Ok(Some(line)) = tokio::time::timeout_at(until.into(), lines.recv()).await {
        if line == "to a classic listener" {
            received += 1;
        }
    }
    let _ = listener.kill();
    let _ = listener.wait();
    assert_eq!(received, 2, "each received once, on the classic channel");
    assert_eq!(runs(ports, "publish"), 2);
    assert_eq!(
        runs(ports, "spublish"),
        5,
        "each tried on a sharded channel first"
    );

    // A key's changes reach the nodes waiting for it the same way: A, with a call in flight for
    // the key, hears B's tab replaced and then gone, each told by the key's script on A's sharded
    // channel on the key's server.
    let (acquired, held) = a.acquire(&id, &admit("c_watch")).await.unwrap();
    assert!(matches!(acquired, Acquired::Ok));
    let watching = held.expect("a slot");
    for port in ports {
        redis_cli(*port, &["CONFIG", "RESETSTAT"]);
    }
    let heard = a.events_heard().get();
    b.bind(&id, "s2", Some(in_an_hour()))
        .await
        .unwrap()
        .unwrap();
    b.release(&id, "s2").await.unwrap();
    let end = Instant::now() + DELIVERY;
    while a.events_heard().get() < heard + 2 {
        assert!(Instant::now() < end, "A hears both changes of the key");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        runs(ports, "spublish"),
        2,
        "each change told on a sharded channel"
    );
    assert_eq!(
        runs(ports, "publish"),
        0,
        "no key event crossed the cluster"
    );
    drop(watching);
}
