//! The Lua scripts of the Redis store: every key transition is one script, so two nodes never
//! interleave halfway through it, and each tells the key's change to the nodes waiting for it
//! ([`forms::tell_lua`]). The lifecycle part (issue, bind, release, revoke) follows
//! `store::lifecycle::apply`; `relay/tests/store_conformance.rs` walks them through that table.

use redis::Script;

use super::forms::{self, SPEND_LUA};

/// Lua shared by the scripts that say where a tab is: an online key counts as waiting when its
/// node has missed heartbeats (lost, or left), so no call is handed to a node that is gone.
/// Needs [`CLOCK_LUA`] before it.
const PLACE_LUA: &str = r"
local function place(h, nodes, suspect)
  if h[1] ~= 'online' then return nil end
  local seen = redis.call('HGET', nodes, h[2])
  if not seen then return nil end
  if clock_ms() - tonumber(seen) > tonumber(suspect) then return nil end
  return {h[2], h[3]}
end
";

/// Lua shared by everything that reads node heartbeats: Redis's own clock in milliseconds, so
/// node clocks may differ.
pub(super) const CLOCK_LUA: &str = r"
local function clock_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
";

/// Lua shared by release and reap: an online key goes offline for the reconnect grace (never
/// past its token's expiry) and its change is told to its watch `w` (on a Redis Cluster under
/// `tag`, [`forms::tell_lua`]). Needs `tell`.
pub(super) const OFFLINE_LUA: &str = r"
local function go_offline(k, w, now, grace, exp, tag)
  redis.call('HSET', k, 'st', 'offline', 'since', now)
  redis.call('HDEL', k, 'node', 'sid')
  local ttl = tonumber(grace)
  local left = tonumber(exp) - tonumber(now)
  if left < ttl then ttl = left end
  if ttl <= 0 then redis.call('DEL', k) else redis.call('PEXPIRE', k, ttl) end
  tell(k, w, tag)
end
";

/// Calls ended: each one's slot `c:<call id>` leaves its key's watch (a slot already gone, given
/// back by the holding node with the call's outcome, or dropped, is not touched). KEYS: the
/// watches. ARGV: the call ids, in the same order. On a Redis Cluster, one slot each time.
pub(super) const FINISH_LUA: &str = r"
local n = 0
for i = 1, #KEYS do n = n + redis.call('HDEL', KEYS[i], 'c:' .. ARGV[i]) end
return n";

/// This node starts (ARGV[2] `1`) or stops (`-1`) waiting for the key's status outside a call (a
/// key-status long-poll): its count in the key's watch (`i:<node>`), the watch living at least
/// `ttl` once joined. KEYS: watch. ARGV: node, `1` or `-1`, ttl ms.
pub(super) const INTEREST_LUA: &str = r"
local f = 'i:' .. ARGV[1]
if ARGV[2] == '1' then
  redis.call('HINCRBY', KEYS[1], f, 1)
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HINCRBY', KEYS[1], f, -1) <= 0 then redis.call('HDEL', KEYS[1], f) end
end
return 1";

/// The holding node's outcome of a call from another node: sent to the calling node
/// ([`forms::SEND_LUA`]: on a Redis Cluster on its sharded channel on the key's server, else on
/// its classic channel), the call's slot given back first when the caller asked for it (a final
/// outcome of a call with no outcome of its own to record): one round trip for both, none for
/// the caller. KEYS: watch. ARGV: the calling node, call id ('' to keep the slot), message, the
/// tag of the calling node's sharded channel on this server ('' on one server).
pub(super) static REPLY_LUA: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        r"{}
if ARGV[2] ~= '' then redis.call('HDEL', KEYS[1], 'c:' .. ARGV[2]) end
return send(ARGV[1], ARGV[3], ARGV[4])",
        *forms::SEND_LUA
    )
});

/// Every key transition and shared check, one Lua script each (atomic on Redis).
pub(super) struct Scripts {
    pub(super) lookup: Script,
    pub(super) issue: Script,
    pub(super) bind: Script,
    pub(super) release: Script,
    pub(super) revoke: Script,
    pub(super) acquire: Script,
    pub(super) heartbeat: Script,
    pub(super) reap: Script,
    pub(super) reassert: Script,
    pub(super) finish: Script,
    pub(super) interest: Script,
    pub(super) reply: Script,
    pub(super) idem_claim: Script,
    pub(super) idem_record: Script,
    pub(super) rate: Script,
    pub(super) declare: Script,
    pub(super) set_mode: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Scripts {
            // Lookup, bind, release, revoke, acquire, reassert and declare are written once for
            // both forms ([`forms`]); here with the one-server steps.
            lookup: forms::script(&format!("{CLOCK_LUA}{PLACE_LUA}"), forms::LOOKUP, false),
            issue: Script::new(
                r"
redis.call('HSET', KEYS[1], 'st', 'issued', 'since', ARGV[1], 'exp', ARGV[2], 'eb', '0')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1",
            ),
            bind: forms::script("", forms::BIND, false),
            release: forms::script(OFFLINE_LUA, forms::RELEASE, false),
            revoke: forms::script("", forms::REVOKE, false),
            acquire: forms::script(
                &format!("{CLOCK_LUA}{PLACE_LUA}{SPEND_LUA}"),
                forms::ACQUIRE,
                false,
            ),
            // Returns 1 when this node's entry was missing (first beat, Redis emptied, or reaped).
            heartbeat: Script::new(&format!(
                r"{CLOCK_LUA}
return redis.call('HSET', KEYS[1], ARGV[1], clock_ms())"
            )),
            // ARGV: stale ms, grace ms, node-keys prefix, now (node clock, for `since`)
            reap: Script::new(&format!(
                r"{tell}{CLOCK_LUA}{OFFLINE_LUA}
local ms = clock_ms()
local all = redis.call('HGETALL', KEYS[1])
local reaped = 0
for i = 1, #all, 2 do
  local node = all[i]
  if ms - tonumber(all[i + 1]) > tonumber(ARGV[1]) then
    local set = ARGV[3] .. node
    for _, k in ipairs(redis.call('SMEMBERS', set)) do
      local h = redis.call('HMGET', k, 'st', 'node', 'exp')
      if h[1] == 'online' and h[2] == node then
        go_offline(k, watch_of(k), ARGV[4], ARGV[2], h[3], '')
        reaped = reaped + 1
      end
    end
    redis.call('DEL', set)
    redis.call('HDEL', KEYS[1], node)
  end
end
return reaped",
                tell = forms::tell_lua(false)
            )),
            reassert: forms::script("", forms::REASSERT, false),
            finish: Script::new(FINISH_LUA),
            interest: Script::new(INTEREST_LUA),
            reply: Script::new(&REPLY_LUA),
            // ARGV: request fingerprint, until ms, window ms
            idem_claim: Script::new(
                r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'until', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'run'}
end
local h = redis.call('HMGET', KEYS[1], 'fp', 'status', 'body', 'until')
if h[1] ~= ARGV[1] then return {'conflict'} end
if h[2] then return {'done', h[2], h[3]} end
return {'pending', h[4]}",
            ),
            // ARGV: request fingerprint, status, body, window ms. Another request's claim is
            // left alone; a lost claim is written again with its expiry.
            idem_record: Script::new(
                r"
local fp = redis.call('HGET', KEYS[1], 'fp')
if fp and fp ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'status', ARGV[2], 'body', ARGV[3])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return 1",
            ),
            declare: forms::script("", forms::DECLARE, false),
            // The mode an agent set; where the key's tab is, to tell it. ARGV: mode
            set_mode: Script::new(
                r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid')
if not h[1] or h[1] == 'revoked' then return {'unknown'} end
redis.call('HSET', KEYS[1], 'md', ARGV[1])
if h[1] == 'online' then return {'online', h[2], h[3]} end
return {'waiting'}",
            ),
            // ARGV: limit, window ms
            rate: Script::new(&format!(
                r"{SPEND_LUA}
if spend(KEYS[1], ARGV[1], ARGV[2]) then return 1 end
return 0"
            )),
        }
    }
}
