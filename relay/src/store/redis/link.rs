//! How the relay reaches Redis: one server as `RELAY_REDIS_URL` names it (plain, TLS, Unix
//! socket), or the primary the sentinels name, asked again while the relay runs so that a
//! failover moves every connection to the new primary (see [`super::Cluster::follow`]), or a
//! Redis Cluster from the nodes the URL lists.

use std::time::Duration;

use redis::io::tcp::TcpSettings;
use redis::{Client, IntoConnectionInfo};

use super::conn::Conn;
use crate::config::{RedisTarget, SentinelTarget};

/// Bound on asking one sentinel.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(500);

pub struct Link {
    target: RedisTarget,
    /// PEM roots for TLS (`RELAY_REDIS_CA_FILE`); `None`: the system's.
    ca: Option<Vec<u8>>,
}

/// Every TCP connection to Redis sends its writes at once (`TCP_NODELAY`). The redis crate leaves
/// Nagle's algorithm on by default: a small write that follows one not yet acknowledged waits for
/// that acknowledgement, and a server that delays its acknowledgement holds it up to 40 ms.
fn tcp_settings() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

/// Adds `protocol=resp3` (pushed pub/sub messages need it) unless the URL says otherwise.
pub(super) fn with_resp3(url: &str) -> String {
    if url.contains("protocol=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&protocol=resp3")
    } else {
        format!("{url}?protocol=resp3")
    }
}

impl Link {
    pub fn new(target: RedisTarget, ca: Option<Vec<u8>>) -> Link {
        Link { target, ca }
    }

    pub fn sentinel(&self) -> Option<&SentinelTarget> {
        match &self.target {
            RedisTarget::Sentinel(s) => Some(s),
            RedisTarget::Single { .. } | RedisTarget::Cluster { .. } => None,
        }
    }

    /// A client for the Redis Cluster, when the URL names one: RESP3, the configured CA for TLS.
    pub fn cluster_client(&self) -> Option<anyhow::Result<redis::cluster::ClusterClient>> {
        let RedisTarget::Cluster { nodes, tls } = &self.target else {
            return None;
        };
        let mut builder = redis::cluster::ClusterClientBuilder::new(
            nodes.iter().map(|n| with_resp3(n)).collect::<Vec<_>>(),
        )
        .use_protocol(redis::ProtocolVersion::RESP3)
        .connection_timeout(super::OP_TIMEOUT)
        .response_timeout(super::OP_TIMEOUT)
        .retries(2)
        .min_retry_wait(50)
        .max_retry_wait(500)
        .tcp_settings(tcp_settings());
        if let (Some(ca), true) = (&self.ca, tls) {
            builder = builder.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.clone()),
            });
        }
        Some(
            builder
                .build()
                .map_err(|e| anyhow::anyhow!("RELAY_REDIS_URL is not usable: {e}")),
        )
    }

    /// A client for `url`, trusting the configured CA for TLS. Its errors never quote the URL.
    pub(super) fn client(&self, url: &str) -> anyhow::Result<Client> {
        let url = with_resp3(url);
        let info = url
            .as_str()
            .into_connection_info()
            .map(|info| info.set_tcp_settings(tcp_settings()));
        let client = info.and_then(|info| match &self.ca {
            Some(ca) if self.target.tls() => Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.clone()),
                },
            ),
            _ => Client::open(info),
        });
        // The redis crate's parse errors name the problem, never the URL's password.
        client.map_err(|e| anyhow::anyhow!("RELAY_REDIS_URL is not usable: {e}"))
    }

    /// A client for the primary, and where it is when sentinels named it.
    pub async fn primary(&self) -> anyhow::Result<(Client, Option<(String, u16)>)> {
        match &self.target {
            RedisTarget::Single { url, .. } => Ok((self.client(url)?, None)),
            RedisTarget::Cluster { .. } => {
                anyhow::bail!("a Redis Cluster has no one primary to connect to")
            }
            RedisTarget::Sentinel(s) => {
                let (host, port) = self.ask_sentinels(s).await?;
                let client = self.client(&s.server_url(&host, port, true))?;
                Ok((client, Some((host, port))))
            }
        }
    }

    /// Where the sentinels say the primary is: the first sentinel that answers is believed.
    pub async fn ask_sentinels(&self, s: &SentinelTarget) -> anyhow::Result<(String, u16)> {
        let mut last = String::from("no sentinel answered");
        for (host, port) in &s.sentinels {
            let asked = async {
                let client = self.client(&s.server_url(host, *port, false))?;
                let mut conn = client.get_multiplexed_async_connection().await?;
                let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&s.primary)
                    .query_async(&mut conn)
                    .await?;
                anyhow::Ok(addr)
            };
            match tokio::time::timeout(SENTINEL_TIMEOUT, asked).await {
                Ok(Ok(Some(addr))) => return Ok(addr),
                Ok(Ok(None)) => {
                    last = format!(
                        "sentinel {host}:{port} knows no primary named {:?}",
                        s.primary
                    );
                }
                Ok(Err(e)) => last = format!("sentinel {host}:{port}: {e}"),
                Err(_) => last = format!("sentinel {host}:{port} did not answer in time"),
            }
        }
        anyhow::bail!("cannot find the Redis primary through the sentinels ({last})")
    }
}

/// A connection error in words an operator acts on (the password is never part of it).
pub(crate) fn explain(e: &redis::RedisError) -> String {
    let text = e.to_string();
    if text.contains("WRONGPASS") || text.contains("invalid password") || text.contains("NOAUTH") {
        format!("Redis refused the credentials in RELAY_REDIS_URL (user or password wrong): {text}")
    } else if text.contains("certificate") || text.contains("InvalidCertificate") {
        format!("Redis's TLS certificate is not trusted (see RELAY_REDIS_CA_FILE): {text}")
    } else {
        text
    }
}

/// The major version of Redis (of one node of a cluster).
pub(super) async fn redis_version(conn: &mut Conn) -> Option<u32> {
    let info = match conn {
        Conn::Single(c) => server_info(c).await?,
        Conn::Cluster(c) => {
            super::sharded::one_node(c, redis::cmd("INFO").arg("server").to_owned())
                .await
                .ok()?
        }
    };
    version_of(&info)
}

pub(super) async fn server_info(conn: &mut impl redis::aio::ConnectionLike) -> Option<String> {
    redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .ok()
}

pub(super) fn version_of(info: &str) -> Option<u32> {
    let line = info.lines().find(|l| l.starts_with("redis_version:"))?;
    line["redis_version:".len()..]
        .split('.')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_resp3_unless_they_choose() {
        assert_eq!(
            with_resp3("redis://h:6379"),
            "redis://h:6379?protocol=resp3"
        );
        assert_eq!(
            with_resp3("redis://h:6379/2?x=1"),
            "redis://h:6379/2?x=1&protocol=resp3"
        );
        assert_eq!(
            with_resp3("redis://h?protocol=resp2"),
            "redis://h?protocol=resp2"
        );
    }

    #[test]
    fn every_client_turns_nagle_off() {
        for (url, ca) in [
            ("redis://127.0.0.1:6379", None),
            ("redis://:secret@127.0.0.1:6379/2", None),
            ("rediss://127.0.0.1:6380", None),
            ("rediss://127.0.0.1:6380", Some(self_signed_pem())),
        ] {
            let link = Link::new(RedisTarget::parse(url).unwrap(), ca);
            let client = link.client(url).unwrap();
            assert!(
                client.get_connection_info().tcp_settings().nodelay(),
                "{url}: TCP_NODELAY"
            );
        }
    }

    #[test]
    fn the_cluster_client_turns_nagle_off() {
        let url = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001";
        let link = Link::new(RedisTarget::parse(url).unwrap(), None);
        let client = link.cluster_client().expect("a cluster URL").unwrap();
        // The crate offers no getter; its Debug form shows the settings its connections use.
        let shown = format!("{client:?}");
        let params = shown
            .split_once("cluster_params")
            .expect("the client's parameters in its Debug form")
            .1;
        let tcp = params
            .split_once("tcp_settings")
            .expect("the TCP settings among them")
            .1;
        assert!(
            tcp.trim_start_matches(": ")
                .starts_with("TcpSettings { nodelay: true"),
            "{tcp}"
        );
    }

    /// A throwaway self-signed certificate in PEM, to stand for `RELAY_REDIS_CA_FILE`.
    fn self_signed_pem() -> Vec<u8> {
        let out = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args([
                "-nodes",
                "-keyout",
                "/dev/null",
                "-subj",
                "/CN=ca",
                "-days",
                "1",
            ])
            .output()
            .expect("openssl must be installed for this test");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }
}
