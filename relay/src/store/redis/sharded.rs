//! The key transitions on a Redis Cluster, where one script may touch the keys of one hash slot
//! only.
//!
//! A key's records share its hash tag, so its state change stays one script, as on one server.
//! What spans slots is done around it, in this order:
//! - the agent's rate window is spent before the key's script (as the one-server script does
//!   first);
//! - whether the node holding a tab is alive is read from the heartbeat hash after the key's
//!   script (a read, as of that moment);
//! - the nodes' key sets (which keys a lost node held) are written after the key's script: a
//!   node that dies between the two leaves that key out of its set, and the key then waits for
//!   its TTL rather than the reaping;
//! - reaping finds the stale nodes, puts each of their keys offline by the key's own script
//!   (which checks the key is still on that node, so two reaping nodes agree), then drops the
//!   node's set and heartbeat, in that order: a node that comes back in between finds its
//!   heartbeat gone and writes its bindings back.
//!
//! Key events are published by the key's script on the classic channel [`super::EVENTS`], named in
//! its arguments: a cluster forwards classic messages to every node.

use redis::Script;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use super::scripts::{CLOCK_LUA, OFFLINE_LUA};

/// The cluster variants of the scripts that span slots on one server.
pub(super) struct ShardedScripts {
    pub(super) bind: Script,
    pub(super) release: Script,
    pub(super) revoke: Script,
    pub(super) reassert: Script,
    pub(super) declare: Script,
    pub(super) place: Script,
    pub(super) acquire: Script,
    pub(super) seen: Script,
    pub(super) stale: Script,
    pub(super) reap_key: Script,
}

impl ShardedScripts {
    pub(super) fn new() -> Self {
        ShardedScripts {
            // KEYS: key. ARGV: now, node, sid, proof (t|b), token exp ms, online extra ms, events
            bind: Script::new(
                r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid', 'eb', 'exp')
local st = h[1]
local now = tonumber(ARGV[1])
if not st then
  if ARGV[4] == 'b' then return {'err', 'unknown'} end
  if tonumber(ARGV[5]) <= now then return {'err', 'expired'} end
elseif st == 'revoked' then return {'err', 'revoked'}
elseif ARGV[4] == 'b' and h[4] == '1' then return {'err', 'token_required'} end
if st == 'online' and h[2] == ARGV[2] and h[3] == ARGV[3] then return {'same'} end
local exp = tonumber(h[5] or '0')
if ARGV[4] == 't' and tonumber(ARGV[5]) > exp then exp = tonumber(ARGV[5]) end
redis.call('HSET', KEYS[1], 'st', 'online', 'node', ARGV[2], 'sid', ARGV[3], 'since', ARGV[1], 'eb', '1', 'exp', exp)
local left = exp - now
if left < 0 then left = 0 end
redis.call('PEXPIRE', KEYS[1], left + tonumber(ARGV[6]))
redis.call('PUBLISH', ARGV[7], KEYS[1])
local mode = redis.call('HGET', KEYS[1], 'md') or ''
if st == 'online' then return {'bound', tostring(exp), h[2], h[3], mode} end
return {'bound', tostring(exp), '', '', mode}",
            ),
            // KEYS: key. ARGV: now, node, sid, grace ms, events
            release: Script::new(&format!(
                r"{OFFLINE_LUA}
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid', 'exp')
if h[1] ~= 'online' or h[2] ~= ARGV[2] or h[3] ~= ARGV[3] then return 0 end
go_offline(KEYS[1], ARGV[1], ARGV[4], h[4], ARGV[5])
return 1"
            )),
            // KEYS: key. ARGV: now, events
            revoke: Script::new(
                r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'exp')
if not h[1] or h[1] == 'revoked' then return {'unknown'} end
redis.call('HSET', KEYS[1], 'st', 'revoked', 'since', ARGV[1])
redis.call('HDEL', KEYS[1], 'node', 'sid')
local ttl = tonumber(h[3]) - tonumber(ARGV[1])
if ttl < 1 then ttl = 1 end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PUBLISH', ARGV[2], KEYS[1])
if h[1] == 'online' then return {'revoked', h[2]} end
return {'revoked'}",
            ),
            // KEYS: key. ARGV: now, node, sid, exp ms, ttl ms, events
            reassert: Script::new(
                r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid')
if h[1] == 'revoked' then return 'revoked' end
if h[1] == 'online' and (h[2] ~= ARGV[2] or h[3] ~= ARGV[3]) then return 'elsewhere' end
if h[1] == 'online' then return 'kept' end
redis.call('HSET', KEYS[1], 'st', 'online', 'node', ARGV[2], 'sid', ARGV[3], 'since', ARGV[1], 'eb', '1', 'exp', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PUBLISH', ARGV[6], KEYS[1])
return 'restored'",
            ),
            // KEYS: key. ARGV: node, sid, handles (joined), page tools ('' for none), events
            declare: Script::new(
                r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid', 'hd', 'pt', 'rv')
if h[1] ~= 'online' or h[2] ~= ARGV[1] or h[3] ~= ARGV[2] then return {'not_bound'} end
if h[4] == ARGV[3] and (h[5] or '') == ARGV[4] then return {'same', h[6] or '0'} end
redis.call('HSET', KEYS[1], 'hd', ARGV[3])
if ARGV[4] == '' then redis.call('HDEL', KEYS[1], 'pt') else redis.call('HSET', KEYS[1], 'pt', ARGV[4]) end
local rv = redis.call('HINCRBY', KEYS[1], 'rv', 1)
redis.call('PUBLISH', ARGV[5], KEYS[1])
return {'ok', tostring(rv)}",
            ),
            // Where the key's tab is, before asking whether its node is alive. KEYS: key
            place: Script::new(
                r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid')
if not h[1] or h[1] == 'revoked' then return {'unknown'} end
if h[1] == 'online' then return {'online', h[2], h[3]} end
return {'waiting'}",
            ),
            // KEYS: key, in-flight counter. ARGV: max in flight, counter ttl ms
            acquire: Script::new(
                r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid')
if not h[1] or h[1] == 'revoked' then return {'unknown'} end
local n = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if n > tonumber(ARGV[1]) then
  redis.call('DECR', KEYS[2])
  return {'busy'}
end
if h[1] == 'online' then return {'ok', h[2], h[3]} end
return {'ok'}",
            ),
            // Whether a node heartbeat recently. KEYS: nodes. ARGV: node, suspect ms
            seen: Script::new(&format!(
                r"{CLOCK_LUA}
local seen = redis.call('HGET', KEYS[1], ARGV[1])
if not seen then return 0 end
if clock_ms() - tonumber(seen) > tonumber(ARGV[2]) then return 0 end
return 1"
            )),
            // The nodes silent for too long. KEYS: nodes. ARGV: stale ms
            stale: Script::new(&format!(
                r"{CLOCK_LUA}
local ms = clock_ms()
local all = redis.call('HGETALL', KEYS[1])
local stale = {{}}
for i = 1, #all, 2 do
  if ms - tonumber(all[i + 1]) > tonumber(ARGV[1]) then table.insert(stale, all[i]) end
end
return stale"
            )),
            // A lost node's key goes offline, if still on it. KEYS: key.
            // ARGV: node, now (node clock, for `since`), grace ms, events
            reap_key: Script::new(&format!(
                r"{OFFLINE_LUA}
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'exp')
if h[1] ~= 'online' or h[2] ~= ARGV[1] then return 0 end
go_offline(KEYS[1], ARGV[2], ARGV[3], h[3], ARGV[4])
return 1"
            )),
        }
    }
}

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
