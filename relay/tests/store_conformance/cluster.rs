//! A Redis Cluster of the test's own: six `redis-server --cluster-enabled yes` on free ports
//! (three primaries, a replica each), joined with `redis-cli --cluster create`. The store suite
//! runs on it unchanged through `redis+cluster://`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::tls::Scratch;

/// The cluster's servers, killed (and their files removed) when dropped.
pub struct RedisCluster {
    children: Vec<Child>,
    pub ports: Vec<u16>,
    _dir: Scratch,
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl RedisCluster {
    /// `redis+cluster://` naming every node.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Waits (bounded) until `check` holds.
fn wait_for(what: &str, bound: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < bound, "{what} within {bound:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts six servers, makes them a cluster, and waits until every node serves every slot.
pub fn start_cluster() -> RedisCluster {
    let scratch = Scratch::new("relay-cluster");
    let dir = scratch.0.clone();
    let ports: Vec<u16> = (0..6).map(|_| free_port()).collect();
    let children = ports
        .iter()
        .map(|port| {
            let conf = dir.join(format!("nodes-{port}.conf"));
            Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(&conf)
                .args(["--cluster-node-timeout", "2000"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed for the store suite")
        })
        .collect();
    let cluster = RedisCluster {
        children,
        ports,
        _dir: scratch,
    };
    for port in &cluster.ports {
        wait_for("redis-server answers", Duration::from_secs(10), || {
            cli(*port, &["PING"]).is_some_and(|o| o.contains("PONG"))
        });
    }
    let nodes: Vec<String> = cluster
        .ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let out = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&nodes)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .output()
        .expect("redis-cli must be installed for the cluster suite");
    assert!(
        out.status.success(),
        "redis-cli --cluster create: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for port in &cluster.ports {
        wait_for("cluster_state:ok", Duration::from_secs(20), || {
            cli(*port, &["CLUSTER", "INFO"]).is_some_and(|o| o.contains("cluster_state:ok"))
        });
    }
    cluster
}

/// `relay check-config` on a cluster URL: `--connect` says the cluster serves every slot; a
/// cluster URL with a path is named as wrong without being connected to.
pub fn check_config(cluster: &RedisCluster) {
    let run = |url: &str, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_relay"))
            .args(args)
            .env_clear()
            .env("LIVEKIT_API_KEY", "devkey")
            .env("LIVEKIT_API_SECRET", "test-livekit-secret-0123456789abcdef")
            .env("RELAY_AGENT_SECRET", "test-agent-secret-0123456789")
            .env("RELAY_TOKEN_ISSUER_SECRET", "test-issuer-secret-0123456789")
            .env("RELAY_ADDR", "127.0.0.1:0")
            .env("RELAY_REDIS_URL", url)
            .output()
            .expect("the relay runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let (code, text) = run(&cluster.url(), &["check-config", "--connect"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("Redis Cluster answers (3 primaries"),
        "{text}"
    );
    let (code, text) = run(&format!("{}/0", cluster.url()), &["check-config"]);
    assert_eq!(code, Some(64), "{text}");
    assert!(text.contains("(cluster) takes no path"), "{text}");
}
