//! A Redis Cluster of the test's own: six `redis-server --cluster-enabled yes` on free ports
//! (three primaries, a replica each), joined with `redis-cli --cluster create`. The store suite
//! runs on it unchanged through `redis+cluster://`, and on a TLS-only one (the cluster bus and
//! replication on TLS too) through `rediss+cluster://`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use relay::store::RedisStore;
use relay::store::redis::Cluster;

use super::tls::Scratch;

/// The cluster's servers, killed (and their files removed) when dropped.
pub struct RedisCluster {
    children: Vec<Child>,
    pub ports: Vec<u16>,
    /// TLS only: the directory of the test's certificates.
    tls: Option<std::path::PathBuf>,
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
        let scheme = if self.tls.is_some() {
            "rediss+cluster"
        } else {
            "redis+cluster"
        };
        format!("{scheme}://{}", nodes.join(","))
    }

    /// `redis-cli`'s arguments for reaching the servers.
    fn cli_args(&self) -> Vec<String> {
        tls_cli_args(self.tls.as_deref())
    }
}

fn tls_cli_args(tls: Option<&std::path::Path>) -> Vec<String> {
    match tls {
        Some(certs) => vec![
            "--tls".into(),
            "--cacert".into(),
            certs.join("ca.crt").to_string_lossy().into_owned(),
        ],
        None => Vec::new(),
    }
}

/// `n` distinct free ports of loopback: every listener is held until all are taken, so no port
/// comes twice.
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("a bound port").port())
        .collect()
}

fn cli(cluster: &RedisCluster, port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(cluster.cli_args())
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
    start(None)
}

/// [`start_cluster`] on TLS only, with the certificates in `certs` (see
/// [`super::tls::make_certificates`]): clients, the cluster bus and replication all on TLS.
pub fn start_tls_cluster(certs: &std::path::Path) -> RedisCluster {
    start(Some(certs))
}

fn start(tls: Option<&std::path::Path>) -> RedisCluster {
    let scratch = Scratch::new("relay-cluster");
    let dir = scratch.0.clone();
    // Each server's cluster bus gets its own free port: the default, the client port plus
    // 10,000, does not exist above 55535, and Redis refuses to start there.
    let all = free_ports(12);
    let (ports, bus_ports) = (all[..6].to_vec(), all[6..].to_vec());
    let children = ports
        .iter()
        .zip(&bus_ports)
        .map(|(port, bus)| {
            let conf = dir.join(format!("nodes-{port}.conf"));
            let mut server = Command::new("redis-server");
            match tls {
                None => server.args(["--port", &port.to_string()]),
                Some(certs) => {
                    let file = |name: &str| certs.join(name).to_string_lossy().into_owned();
                    server
                        .args(["--port", "0", "--tls-port", &port.to_string()])
                        .args(["--tls-cluster", "yes", "--tls-replication", "yes"])
                        .args(["--tls-cert-file", &file("server.crt")])
                        .args(["--tls-key-file", &file("server.key")])
                        .args(["--tls-ca-cert-file", &file("ca.crt")])
                        .args(["--tls-auth-clients", "no"])
                }
            };
            server
                .args(["--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-port"])
                .arg(bus.to_string())
                .arg("--cluster-config-file")
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
        tls: tls.map(std::path::Path::to_path_buf),
        _dir: scratch,
    };
    for port in &cluster.ports {
        wait_for("redis-server answers", Duration::from_secs(10), || {
            cli(&cluster, *port, &["PING"]).is_some_and(|o| o.contains("PONG"))
        });
    }
    let nodes: Vec<String> = cluster
        .ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let out = Command::new("redis-cli")
        .args(cluster.cli_args())
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
            cli(&cluster, *port, &["CLUSTER", "INFO"])
                .is_some_and(|o| o.contains("cluster_state:ok"))
        });
    }
    cluster
}

/// `relay check-config` on a cluster URL: `--connect` says the cluster serves every slot; a
/// cluster URL with a path is named as wrong without being connected to.
pub fn check_config(cluster: &RedisCluster) {
    let run = |url: &str, args: &[&str]| super::tls::run_relay(url, None, args);
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

/// The same suite on a TLS-only Redis Cluster (the cluster bus and replication on TLS too),
/// through `rediss+cluster://`, trusting the test's own CA; without the CA it is refused.
#[tokio::test]
async fn redis_store_on_a_tls_cluster() {
    let certs = super::tls::make_certificates();
    let dir = certs.0.clone();
    let servers = tokio::task::spawn_blocking(move || start_tls_cluster(&dir))
        .await
        .expect("the TLS cluster starts");
    let url = servers.url();
    assert!(url.starts_with("rediss+cluster://"), "{url}");
    let untrusted = Cluster::connect(&url, super::settings()).await;
    let err = format!("{:#}", untrusted.err().expect("an unknown CA is refused"));
    assert!(
        err.contains("not trusted") || err.contains("certificate"),
        "{err}"
    );
    let ca = std::fs::read(certs.0.join("ca.crt")).expect("the CA");
    let cluster = super::connect_to(&url, Some(ca)).await;
    let store = RedisStore::new(
        cluster,
        super::local_keys(),
        super::TOKENS_PER_MIN,
        super::BOUND,
    )
    .with_sessions(super::LIMITS);
    super::suite(&store).await;
    drop(servers);
}
