//! The forms `RELAY_REDIS_URL` takes, parsed once at start so `check-config` names what is wrong.
//!
//! - `redis://[user:password@]host:port[/db]`: one Redis (plain TCP).
//! - `rediss://[user:password@]host:port[/db]`: one Redis over TLS, the certificate verified
//!   against the system's roots, or against `RELAY_REDIS_CA_FILE` when set.
//! - `redis+unix:///path/to/redis.sock` (or `unix://`): one Redis on a Unix socket.
//! - `redis+sentinel://[user:password@]host:port,host:port/primary-name[/db]` (and
//!   `rediss+sentinel://` for TLS to the sentinels and the primary): the primary named
//!   `primary-name`, found through the sentinels and followed through a failover. The
//!   credentials are the primary's; the sentinels are asked without any.
//! - `redis+cluster://[user:password@]host:port,host:port` (and `rediss+cluster://` for TLS): a
//!   Redis Cluster, found from any of the nodes listed (the others are learnt from it). The
//!   credentials are every node's.
//!
//! Error messages never quote the URL: it may hold a password.

/// Where Redis is, as `RELAY_REDIS_URL` says.
#[derive(Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One Redis: the URL as given (the redis crate reads it).
    Single { url: String, tls: bool },
    /// A primary found through sentinels.
    Sentinel(SentinelTarget),
    /// A Redis Cluster: the URLs of the nodes to start from.
    Cluster { nodes: Vec<String>, tls: bool },
}

#[derive(Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    pub sentinels: Vec<(String, u16)>,
    pub primary: String,
    pub tls: bool,
    /// `user:password` as written in the URL (percent-encoded), if any.
    userinfo: Option<String>,
    pub db: u32,
}

impl SentinelTarget {
    /// The URL of one server (a sentinel or the primary) with this target's TLS; the primary's
    /// carries the credentials and the database.
    pub fn server_url(&self, host: &str, port: u16, primary: bool) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let host = url_host(host);
        match (&self.userinfo, primary) {
            (Some(user), true) => format!("{scheme}://{user}@{host}:{port}/{}", self.db),
            (None, true) => format!("{scheme}://{host}:{port}/{}", self.db),
            (_, false) => format!("{scheme}://{host}:{port}"),
        }
    }
}

impl RedisTarget {
    pub fn tls(&self) -> bool {
        match self {
            RedisTarget::Single { tls, .. } => *tls,
            RedisTarget::Sentinel(s) => s.tls,
            RedisTarget::Cluster { tls, .. } => *tls,
        }
    }

    /// Parses `url`; the error says what is wrong without quoting it.
    pub fn parse(url: &str) -> Result<RedisTarget, String> {
        let url = url.trim();
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(FORMS.into());
        };
        match scheme {
            "redis" | "rediss" => {
                let (_, hosts, _) = split_authority(rest);
                if hosts.contains(',') {
                    return Err(format!(
                        "RELAY_REDIS_URL lists several hosts: use redis+sentinel:// for sentinels or redis+cluster:// for a cluster ({FORMS_SHORT})"
                    ));
                }
                if hosts.is_empty() {
                    return Err("RELAY_REDIS_URL has no host".into());
                }
                Ok(RedisTarget::Single {
                    url: url.to_owned(),
                    tls: scheme == "rediss",
                })
            }
            "redis+unix" | "unix" => Ok(RedisTarget::Single {
                url: url.to_owned(),
                tls: false,
            }),
            "redis+sentinel" | "rediss+sentinel" => {
                parse_sentinel(rest, scheme == "rediss+sentinel").map(RedisTarget::Sentinel)
            }
            "redis+cluster" | "rediss+cluster" => parse_cluster(rest, scheme == "rediss+cluster"),
            _ => Err(FORMS.into()),
        }
    }
}

const FORMS_SHORT: &str = "redis://, rediss://, redis+unix://, redis+sentinel://, redis+cluster://";
const FORMS: &str = "RELAY_REDIS_URL must start with redis://, rediss:// (TLS), redis+unix://, \
     redis+sentinel:// / rediss+sentinel:// (sentinels: host:port,host:port/primary-name) or \
     redis+cluster:// / rediss+cluster:// (cluster nodes: host:port,host:port)";

/// Splits `[userinfo@]hosts[/path][?query]`.
fn split_authority(rest: &str) -> (Option<&str>, &str, &str) {
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((user, hosts)) => (Some(user), hosts, path),
        None => (None, authority, path),
    }
}

/// `host[:port],host[:port]` (IPv6 hosts in brackets); `what` names the URL's form and `one`
/// a host of it in errors.
fn parse_hosts(
    hosts: &str,
    default_port: u16,
    what: &str,
    one: &str,
) -> Result<Vec<(String, u16)>, String> {
    let mut found = Vec::new();
    for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        let (name, port) = match host.rsplit_once(':') {
            Some((name, port)) if !name.is_empty() && !port.contains(']') => {
                let port = port.parse::<u16>().map_err(|_| {
                    format!("RELAY_REDIS_URL ({what}): {one}'s port is not a number")
                })?;
                (name, port)
            }
            _ => (host, default_port),
        };
        let name = name.trim_start_matches('[').trim_end_matches(']');
        if name.is_empty() {
            return Err(format!("RELAY_REDIS_URL ({what}): {one} has no host"));
        }
        found.push((name.to_owned(), port));
    }
    Ok(found)
}

/// `host` as a URL writes it (IPv6 in brackets).
fn url_host(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

fn parse_cluster(rest: &str, tls: bool) -> Result<RedisTarget, String> {
    let (userinfo, hosts, path) = split_authority(rest);
    if path.contains('?') {
        return Err("RELAY_REDIS_URL (cluster) takes no query parameters".into());
    }
    if !path.trim_start_matches('/').is_empty() {
        return Err(
            "RELAY_REDIS_URL (cluster) takes no path: a cluster has one database (redis+cluster://host:port,host:port)"
                .into(),
        );
    }
    let found = parse_hosts(hosts, 6379, "cluster", "a node")?;
    if found.is_empty() {
        return Err(
            "RELAY_REDIS_URL (cluster) names no node: redis+cluster://host:port,host:port".into(),
        );
    }
    let scheme = if tls { "rediss" } else { "redis" };
    let user = match userinfo.filter(|u| !u.is_empty()) {
        Some(u) => format!("{u}@"),
        None => String::new(),
    };
    let nodes = found
        .iter()
        .map(|(host, port)| format!("{scheme}://{user}{}:{port}", url_host(host)))
        .collect();
    Ok(RedisTarget::Cluster { nodes, tls })
}

fn parse_sentinel(rest: &str, tls: bool) -> Result<SentinelTarget, String> {
    let (userinfo, hosts, path) = split_authority(rest);
    if path.contains('?') {
        return Err("RELAY_REDIS_URL (sentinel) takes no query parameters".into());
    }
    let sentinels = parse_hosts(hosts, 26379, "sentinel", "a sentinel")?;
    if sentinels.is_empty() {
        return Err(
            "RELAY_REDIS_URL (sentinel) names no sentinel: redis+sentinel://host:port,host:port/primary-name"
                .into(),
        );
    }
    let mut parts = path.trim_start_matches('/').split('/');
    let primary = parts.next().unwrap_or_default();
    if primary.is_empty() {
        return Err(
            "RELAY_REDIS_URL (sentinel) names no primary: redis+sentinel://host:port,host:port/primary-name"
                .into(),
        );
    }
    let db = match parts.next() {
        None | Some("") => 0,
        Some(db) => db.parse::<u32>().map_err(|_| {
            "RELAY_REDIS_URL (sentinel): the database after the primary's name is not a number"
                .to_owned()
        })?,
    };
    if parts.next().is_some() {
        return Err(
            "RELAY_REDIS_URL (sentinel) has too many path parts: .../primary-name[/db]".into(),
        );
    }
    Ok(SentinelTarget {
        sentinels,
        primary: primary.to_owned(),
        tls,
        userinfo: userinfo.filter(|u| !u.is_empty()).map(str::to_owned),
        db,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_forms_are_kept_as_written() {
        for (url, tls) in [
            ("redis://127.0.0.1:6379", false),
            ("redis://user:p%40ss@h:1/2", false),
            ("rediss://:pw@h:6380", true),
            ("redis+unix:///run/redis.sock", false),
        ] {
            assert!(
                RedisTarget::parse(url)
                    == Ok(RedisTarget::Single {
                        url: url.into(),
                        tls
                    })
            );
        }
    }

    #[test]
    fn sentinels_primary_and_db_are_read() {
        let Ok(RedisTarget::Sentinel(s)) =
            RedisTarget::parse("redis+sentinel://u:pw@a:26379,b,[::1]:5/main/3")
        else {
            panic!("a sentinel URL");
        };
        assert_eq!(
            s.sentinels,
            vec![
                ("a".to_owned(), 26379),
                ("b".to_owned(), 26379),
                ("::1".to_owned(), 5)
            ]
        );
        assert_eq!(s.primary, "main");
        assert_eq!(s.db, 3);
        assert!(!s.tls);
        assert_eq!(
            s.server_url("10.0.0.1", 6379, true),
            "redis://u:pw@10.0.0.1:6379/3"
        );
        assert_eq!(s.server_url("::1", 5, false), "redis://[::1]:5");
        let Ok(RedisTarget::Sentinel(t)) = RedisTarget::parse("rediss+sentinel://h:1/m") else {
            panic!("a TLS sentinel URL");
        };
        assert!(t.tls);
        assert_eq!(t.server_url("h", 2, true), "rediss://h:2/0");
    }

    #[test]
    fn cluster_nodes_are_read() {
        let Ok(RedisTarget::Cluster { nodes, tls }) =
            RedisTarget::parse("redis+cluster://u:pw@a:7000, b ,[::1]:7002")
        else {
            panic!("a cluster URL");
        };
        assert!(!tls);
        assert_eq!(
            nodes,
            vec![
                "redis://u:pw@a:7000".to_owned(),
                "redis://u:pw@b:6379".to_owned(),
                "redis://u:pw@[::1]:7002".to_owned()
            ]
        );
        let Ok(RedisTarget::Cluster { nodes, tls }) = RedisTarget::parse("rediss+cluster://h:1/")
        else {
            panic!("a TLS cluster URL");
        };
        assert!(tls);
        assert_eq!(nodes, vec!["rediss://h:1".to_owned()]);
    }

    #[test]
    fn mistakes_are_named_without_the_password() {
        for (url, says) in [
            ("http://u:secret-pw@h:1", "must start with"),
            ("redis://u:secret-pw@a:1,b:2", "several hosts"),
            ("redis+sentinel://u:secret-pw@a:1", "names no primary"),
            ("redis+sentinel://u:secret-pw@/m", "names no sentinel"),
            ("redis+sentinel://u:secret-pw@a:x/m", "not a number"),
            ("redis+sentinel://u:secret-pw@a:1/m/x", "not a number"),
            ("redis+sentinel://u:secret-pw@a:1/m?x=1", "no query"),
            ("redis+cluster://u:secret-pw@", "names no node"),
            ("redis+cluster://u:secret-pw@a:x", "not a number"),
            ("redis+cluster://u:secret-pw@a:1/2", "no path"),
            ("redis+cluster://u:secret-pw@a:1?x=1", "no query"),
        ] {
            let Err(err) = RedisTarget::parse(url) else {
                panic!("{says}: accepted");
            };
            assert!(err.contains(says), "{err}");
            assert!(!err.contains("secret-pw"));
        }
    }
}
