//! The key transitions on a Redis Cluster, where one script may touch the keys of one hash slot
//! only.
//!
//! A key's records share its hash tag, so its state change stays one script, as on one server.
//! A call's admission (its session's rate and slots, the key's slot) is one script as well: the
//! session's records carry the key's tag. What spans slots is done around a key's script:
//! - whether the node holding a tab is alive is known from the heartbeat hash as this node read
//!   it last (every heartbeat, when it looks for lost nodes), counting the time since as silence:
//!   a node that heartbeat recently enough by that count is alive, with no round trip; otherwise
//!   (or for a node not read yet) the hash is read after the key's script, as of that moment;
//! - the nodes' key sets (which keys a lost node held) are written after the key's script: a
//!   node that dies between the two leaves that key out of its set, and the key then waits for
//!   its TTL rather than the reaping;
//! - reaping finds the stale nodes, puts each of their keys offline by the key's own script
//!   (which checks the key is still on that node, so two reaping nodes agree), then drops the
//!   node's set and heartbeat, in that order: a node that comes back in between finds its
//!   heartbeat gone and writes its bindings back.
//!
//! Key events are told by the key's script to the nodes in the key's watch, and calls between
//! nodes and their outcomes by the scripts that admit and answer them, each on the receiving
//! node's sharded channel on the key's own server ([`super::shards`]): that server hands it to
//! the node, with no copy over the cluster's bus to the other servers (a classic message, the
//! fallback, is copied to every server of the cluster).

use redis::Script;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use super::forms;
use super::scripts::{CLOCK_LUA, OFFLINE_LUA};

/// The cluster forms of the scripts that span slots on one server (most written once for both
/// forms, in [`super::forms`]), and the cluster's own steps around them.
pub(super) struct ShardedScripts {
    pub(super) bind: Script,
    pub(super) release: Script,
    pub(super) revoke: Script,
    pub(super) reassert: Script,
    pub(super) declare: Script,
    pub(super) place: Script,
    pub(super) acquire: Script,
    pub(super) seen: Script,
    pub(super) ages: Script,
    pub(super) reap_key: Script,
}

impl ShardedScripts {
    pub(super) fn new() -> Self {
        ShardedScripts {
            // Written once for both forms ([`super::forms`]).
            bind: forms::script("", forms::BIND, true),
            release: forms::script(OFFLINE_LUA, forms::RELEASE, true),
            revoke: forms::script("", forms::REVOKE, true),
            reassert: forms::script("", forms::REASSERT, true),
            declare: forms::script("", forms::DECLARE, true),
            // Where the key's tab is, before asking whether its node is alive.
            place: forms::script("", forms::LOOKUP, true),
            acquire: Script::new(&format!(
                "{}{}",
                forms::CROSS_SLOT_FLAGS,
                forms::code(
                    &format!(
                        "{CLOCK_LUA}{}{}",
                        forms::SPEND_LUA,
                        forms::GIVE_BACK_NAMED_LUA
                    ),
                    forms::ACQUIRE,
                    true
                )
            )),
            // Whether a node heartbeat recently. KEYS: nodes. ARGV: node, suspect ms
            seen: Script::new(&format!(
                r"{CLOCK_LUA}
local seen = redis.call('HGET', KEYS[1], ARGV[1])
if not seen then return 0 end
if clock_ms() - tonumber(seen) > tonumber(ARGV[2]) then return 0 end
return 1"
            )),
            // Every node with the time since its heartbeat, in ms (Redis's clock). KEYS: nodes.
            ages: Script::new(&format!(
                r"{CLOCK_LUA}
local ms = clock_ms()
local all = redis.call('HGETALL', KEYS[1])
local out = {{}}
for i = 1, #all, 2 do
  table.insert(out, all[i])
  table.insert(out, tostring(ms - tonumber(all[i + 1])))
end
return out"
            )),
            // A lost node's key goes offline, if still on it. KEYS: key, watch.
            // ARGV: node, now (node clock, for `since`), grace ms, the tag its change is told
            // under
            reap_key: Script::new(&format!(
                r"{tell}{OFFLINE_LUA}
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'exp')
if h[1] ~= 'online' or h[2] ~= ARGV[1] then return 0 end
go_offline(KEYS[1], KEYS[2], ARGV[2], ARGV[3], h[3], ARGV[4])
return 1",
                tell = forms::tell_lua(true)
            )),
        }
    }
}

/// Gives back the ended calls' slots that the server running it serves, whatever their hash
/// slots, and answers the places (from 1) of those it does not serve
/// ([`forms::GIVE_BACK_NAMED_LUA`]). ARGV: watch, call id, watch, call id, ...
pub(super) static GIVE_BACK_SPREAD: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{}{}return give_back_named(1)",
        forms::CROSS_SLOT_FLAGS,
        forms::GIVE_BACK_NAMED_LUA
    )
});

/// Runs `cmd` on one node of the cluster (any), for what every node answers alike.
pub(super) async fn one_node(
    conn: &mut ClusterConnection,
    cmd: redis::Cmd,
) -> redis::RedisResult<String> {
    let reply = conn
        .route_command(cmd, RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random))
        .await?;
    Ok(redis::from_redis_value(reply)?)
}

/// `check-config --connect` on a cluster: whether it serves every slot, and its version.
pub(super) async fn probe(conn: &mut ClusterConnection) -> anyhow::Result<String> {
    let info = one_node(conn, redis::cmd("CLUSTER").arg("INFO").to_owned())
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "the Redis Cluster does not answer CLUSTER INFO: {}",
                super::explain(&e)
            )
        })?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    if field("cluster_state").as_deref() != Some("ok") {
        anyhow::bail!(
            "the Redis Cluster is not serving every slot (cluster_state:{})",
            field("cluster_state").unwrap_or_default()
        );
    }
    let server = one_node(conn, redis::cmd("INFO").arg("server").to_owned())
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "the Redis Cluster does not answer INFO: {}",
                super::explain(&e)
            )
        })?;
    if super::version_of(&server).is_some_and(|v| v < 7) {
        anyhow::bail!("Redis 7 or newer is needed (sharded pub/sub, RESP3); this cluster is older");
    }
    Ok(format!(
        "Redis Cluster answers ({} primaries, every slot served)",
        field("cluster_size").unwrap_or_else(|| "?".into())
    ))
}
