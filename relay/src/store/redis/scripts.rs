//! The Lua scripts of the Redis store: every key transition is one script, so two nodes never
//! interleave halfway through it, and each publishes the key's event. The lifecycle part (issue,
//! bind, release, revoke) follows `store::lifecycle::apply`; `relay/tests/store_conformance.rs`
//! walks them through that table.

use redis::Script;

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
/// past its token's expiry) and its change is published.
pub(super) const OFFLINE_LUA: &str = r"
local function go_offline(k, now, grace, exp, events)
  redis.call('HSET', k, 'st', 'offline', 'since', now)
  redis.call('HDEL', k, 'node', 'sid')
  local ttl = tonumber(grace)
  local left = tonumber(exp) - tonumber(now)
  if left < ttl then ttl = left end
  if ttl <= 0 then redis.call('DEL', k) else redis.call('PEXPIRE', k, ttl) end
  redis.call('PUBLISH', events, k)
end
";

/// Lua shared by the rate limits: one step of a fixed window; false when `limit` is spent.
const SPEND_LUA: &str = r"
local function spend(k, limit, window)
  local n = redis.call('INCR', k)
  if n == 1 then redis.call('PEXPIRE', k, window) end
  return n <= tonumber(limit)
end
";

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
    pub(super) idem_claim: Script,
    pub(super) idem_record: Script,
    pub(super) rate: Script,
    pub(super) declare: Script,
    pub(super) set_mode: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Scripts {
            // KEYS: key, nodes; ARGV: suspect ms
            lookup: Script::new(&format!(
                r"{CLOCK_LUA}{PLACE_LUA}
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid')
if not h[1] or h[1] == 'revoked' then return {{'unknown'}} end
local p = place(h, KEYS[2], ARGV[1])
if p then return {{'online', p[1], p[2]}} end
return {{'waiting'}}"
            )),
            issue: Script::new(
                r"
redis.call('HSET', KEYS[1], 'st', 'issued', 'since', ARGV[1], 'exp', ARGV[2], 'eb', '0')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1",
            ),
            // ARGV: now, node, sid, proof (t|b), token exp ms, online extra ms, node-keys prefix
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
redis.call('SADD', KEYS[2], KEYS[1])
redis.call('PUBLISH', KEYS[3], KEYS[1])
local mode = redis.call('HGET', KEYS[1], 'md') or ''
if st == 'online' then
  if h[2] ~= ARGV[2] then redis.call('SREM', ARGV[7] .. h[2], KEYS[1]) end
  return {'bound', tostring(exp), h[2], h[3], mode}
end
return {'bound', tostring(exp), '', '', mode}",
            ),
            // ARGV: now, node, sid, grace ms
            release: Script::new(&format!(
                r"{OFFLINE_LUA}
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid', 'exp')
if h[1] ~= 'online' or h[2] ~= ARGV[2] or h[3] ~= ARGV[3] then return 0 end
redis.call('SREM', KEYS[2], KEYS[1])
go_offline(KEYS[1], ARGV[1], ARGV[4], h[4], KEYS[3])
return 1"
            )),
            // ARGV: now, node-keys prefix
            revoke: Script::new(
                r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'exp')
if not h[1] or h[1] == 'revoked' then return {'unknown'} end
redis.call('HSET', KEYS[1], 'st', 'revoked', 'since', ARGV[1])
redis.call('HDEL', KEYS[1], 'node', 'sid')
local ttl = tonumber(h[3]) - tonumber(ARGV[1])
if ttl < 1 then ttl = 1 end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PUBLISH', KEYS[2], KEYS[1])
if h[1] == 'online' then
  redis.call('SREM', ARGV[2] .. h[2], KEYS[1])
  return {'revoked', h[2]}
end
return {'revoked'}",
            ),
            // KEYS: key, in-flight counter, nodes, agent rate window
            // ARGV: max in flight, counter ttl ms, suspect ms, agent rate limit, window ms
            acquire: Script::new(&format!(
                r"{CLOCK_LUA}{PLACE_LUA}{SPEND_LUA}
if not spend(KEYS[4], ARGV[4], ARGV[5]) then return {{'rate'}} end
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid')
if not h[1] or h[1] == 'revoked' then return {{'unknown'}} end
local n = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if n > tonumber(ARGV[1]) then
  redis.call('DECR', KEYS[2])
  return {{'busy'}}
end
local p = place(h, KEYS[3], ARGV[3])
if p then return {{'ok', p[1], p[2]}} end
return {{'ok'}}"
            )),
            // Returns 1 when this node's entry was missing (first beat, Redis emptied, or reaped).
            heartbeat: Script::new(&format!(
                r"{CLOCK_LUA}
return redis.call('HSET', KEYS[1], ARGV[1], clock_ms())"
            )),
            // ARGV: stale ms, grace ms, node-keys prefix, now (node clock, for `since`)
            reap: Script::new(&format!(
                r"{CLOCK_LUA}{OFFLINE_LUA}
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
        go_offline(k, ARGV[4], ARGV[2], h[3], KEYS[2])
        reaped = reaped + 1
      end
    end
    redis.call('DEL', set)
    redis.call('HDEL', KEYS[1], node)
  end
end
return reaped"
            )),
            // ARGV: now, node, sid, exp ms, ttl ms
            reassert: Script::new(
                r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid')
if h[1] == 'revoked' then return 'revoked' end
if h[1] == 'online' and (h[2] ~= ARGV[2] or h[3] ~= ARGV[3]) then return 'elsewhere' end
redis.call('SADD', KEYS[2], KEYS[1])
if h[1] == 'online' then return 'kept' end
redis.call('HSET', KEYS[1], 'st', 'online', 'node', ARGV[2], 'sid', ARGV[3], 'since', ARGV[1], 'eb', '1', 'exp', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PUBLISH', KEYS[3], KEYS[1])
return 'restored'",
            ),
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
            // What a tab declared: only from the socket that holds the key; an equal declaration
            // changes nothing. ARGV: node, sid, handles (joined), page tools ('' for none)
            // KEYS: key, events
            declare: Script::new(
                r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid', 'hd', 'pt', 'rv')
if h[1] ~= 'online' or h[2] ~= ARGV[1] or h[3] ~= ARGV[2] then return {'not_bound'} end
if h[4] == ARGV[3] and (h[5] or '') == ARGV[4] then return {'same', h[6] or '0'} end
redis.call('HSET', KEYS[1], 'hd', ARGV[3])
if ARGV[4] == '' then redis.call('HDEL', KEYS[1], 'pt') else redis.call('HSET', KEYS[1], 'pt', ARGV[4]) end
local rv = redis.call('HINCRBY', KEYS[1], 'rv', 1)
redis.call('PUBLISH', KEYS[2], KEYS[1])
return {'ok', tostring(rv)}",
            ),
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
