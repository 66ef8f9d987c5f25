//! One handle for commands whether the relay runs on one Redis server (a reconnecting
//! connection to it, moved after a sentinel failover) or on a Redis Cluster (the redis crate's
//! cluster connection, which routes each command to its key's slot and follows the cluster
//! through failovers and slot moves by itself), and the node's three such handles, one per
//! [`Lane`], each metered ([`Metered`]: every operation's time and failure, by lane).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Cmd, ErrorKind, Pipeline, RedisFuture, RedisResult, ServerErrorKind, Value};
use tokio::time::Instant;

use super::OP_TIMEOUT;
use crate::metrics::LaneMeter;

#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Which of a node's connections an operation goes on. Redis answers each connection's
/// commands in the order they came, so operations queued on one lane never delay another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// This node among the others: heartbeat, reaping, writing bindings back, leaving, and the
    /// check that the connection still reaches the primary.
    Membership,
    /// Tabs arriving and leaving: token minting and its rate window, the handshake's revocation
    /// check, binds, releases, declarations.
    Tabs,
    /// What calls and the agent API read and write: lookups, admissions (in-flight slots with
    /// the sessions' rate windows), idempotency records, key status, modes, revocations.
    Calls,
}

impl Lane {
    pub const ALL: [Lane; 3] = [Lane::Membership, Lane::Tabs, Lane::Calls];

    /// The lane's name in the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Membership => "membership",
            Lane::Tabs => "tabs",
            Lane::Calls => "calls",
        }
    }
}

/// A lane's connection and its meter, when one is set: each request's time from sending to
/// the answer is recorded, and a request that fails (or is given up, its bound passed) counts as
/// an error. A script the server does not hold yet (`NOSCRIPT`, loaded and run again at once)
/// is no error.
pub struct Metered<'a> {
    pub conn: Conn,
    pub meter: Option<&'a LaneMeter>,
}

/// Records one request when it ends, or as an error when it is dropped unanswered.
struct Timed<'a> {
    meter: &'a LaneMeter,
    started: Instant,
    done: bool,
}

impl Timed<'_> {
    fn finish<T>(mut self, result: &RedisResult<T>) {
        self.done = true;
        self.meter
            .latency
            .observe(self.started.elapsed().as_secs_f64());
        if let Err(e) = result
            && e.kind() != ErrorKind::Server(ServerErrorKind::NoScript)
        {
            self.meter.errors.inc();
        }
    }
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.meter.errors.inc();
        }
    }
}

/// `sent` as it is without a meter; with one, timed from now to its answer ([`Timed`]).
fn metered<'a, T: Send + 'a>(
    meter: Option<&'a LaneMeter>,
    sent: RedisFuture<'a, T>,
) -> RedisFuture<'a, T> {
    let Some(meter) = meter else {
        return sent;
    };
    Box::pin(async move {
        let timed = Timed {
            meter,
            started: Instant::now(),
            done: false,
        };
        let answer = sent.await;
        timed.finish(&answer);
        answer
    })
}

impl ConnectionLike for Metered<'_> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let sent = self.conn.req_packed_command(cmd);
        metered(self.meter, sent)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let sent = self.conn.req_packed_commands(pipeline, offset, count);
        metered(self.meter, sent)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

impl Metered<'_> {
    /// `cmd` sent, on a Redis Cluster, to the primary serving `slot` whatever keys it names (a
    /// script reaching keys it does not declare); on one server, as any command.
    pub fn send_to_slot(&mut self, cmd: Cmd, slot: Slot) -> RedisFuture<'_, Value> {
        let sent: RedisFuture<'_, Value> = match &self.conn {
            Conn::Single(c) => {
                let mut c = c.clone();
                Box::pin(async move { c.req_packed_command(&cmd).await })
            }
            Conn::Cluster(c) => {
                let mut c = c.clone();
                let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::with_slot(slot, SlotAddr::Master),
                ));
                Box::pin(async move { c.route_command(cmd, to).await })
            }
        };
        metered(self.meter, sent)
    }
}

/// One connection per [`Lane`], all to the same server (or cluster).
#[derive(Clone)]
pub struct Lanes {
    membership: Conn,
    tabs: Conn,
    calls: Conn,
}

impl Lanes {
    /// Opens the three connections with `open`, at once.
    pub async fn open<F, Fut>(open: F) -> redis::RedisResult<Lanes>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<Conn>>,
    {
        let (membership, tabs, calls) = futures_util::try_join!(open(), open(), open())?;
        Ok(Lanes {
            membership,
            tabs,
            calls,
        })
    }

    pub fn get(&self, lane: Lane) -> Conn {
        match lane {
            Lane::Membership => self.membership.clone(),
            Lane::Tabs => self.tabs.clone(),
            Lane::Calls => self.calls.clone(),
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self.membership, Conn::Cluster(_))
    }
}

/// The three lanes to one server, each a reconnecting connection.
pub async fn single_lanes(client: &redis::Client) -> redis::RedisResult<Lanes> {
    Lanes::open(|| async {
        let conn = ConnectionManager::new_with_config(client.clone(), manager_config()).await?;
        Ok(Conn::Single(conn))
    })
    .await
}

/// A reconnecting connection's bounds: connecting and each answer within [`OP_TIMEOUT`].
pub fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(OP_TIMEOUT))
        .set_response_timeout(Some(OP_TIMEOUT))
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500))
        .set_number_of_retries(2)
}

/// The same bounds for a cluster connection.
pub fn cluster_config() -> redis::cluster::ClusterConfig {
    redis::cluster::ClusterConfig::new()
        .set_connection_timeout(OP_TIMEOUT)
        .set_response_timeout(OP_TIMEOUT)
}
