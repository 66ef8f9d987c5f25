//! The key scripts that exist in two forms, written once: the one-server form (see
//! [`super::scripts`]) and the Redis Cluster form (see [`super::sharded`]), where a script may
//! touch one hash slot only.
//!
//! In a source, a line ending in `--one` belongs to the one-server form only (the steps that
//! span slots: the nodes' key sets, the heartbeat check; on a cluster they are separate commands
//! around the script) and a line ending in `--cluster` to the cluster form only. Both forms take
//! the same first keys (the key's record, then its watch: the calls in flight and the nodes
//! waiting for its changes, [`super::watch`]) and the same first arguments, in the same order, so
//! one source reads the same `KEYS[i]` and `ARGV[i]` in both; the one-server form's own follow.
//!
//! A change of the key is published with [`tell_lua`]'s `tell` to the nodes in its watch only,
//! each on its own channel (`va:n:<node>`; on a Redis Cluster its sharded channel on the key's
//! server): a node hears a key's events while it has a call waiting for the key, and never
//! otherwise. The cluster form of a script that tells takes, as its last argument, the tag of
//! the range holding the key's hash slot.

use redis::Script;

use super::{NODE_PREFIX, WATCH_PREFIX};

/// One step of a fixed window, for a session's call rate in [`ACQUIRE`] (and the token rate of
/// a client address).
pub(super) const SPEND_LUA: &str = r"
local function spend(k, limit, window)
  local n = redis.call('INCR', k)
  if n == 1 then redis.call('PEXPIRE', k, window) end
  return n <= tonumber(limit)
end
";

/// Lua shared by every script that changes a key: `tell(k, w, tag)` publishes the key's name `k`
/// to each node in the key's watch `w` (see [`super::watch`]: the node of each call in flight,
/// `c:<call id>` → `<node> <until ms>`, and each node waiting for the key's status,
/// `i:<node>`), once per node. On one server on the node's own channel; on a Redis Cluster with
/// [`SEND_LUA`]'s `send`, on the node's sharded channel under `tag` (the tag of the range holding
/// the key's hash slot, [`super::shards`]) on the key's own server, so that only that server
/// handles it, or on its classic channel when no subscriber got it there. In a source, `$TAG` is
/// that tag: `''` in the one-server form, the script's last argument in the cluster form.
pub(super) fn tell_lua(cluster: bool) -> String {
    let source = format!(
        r"
local function tell(k, w, tag)
  local all = redis.call('HGETALL', w)
  local told = {{}}
  for i = 1, #all, 2 do
    local f = all[i]
    local node = nil
    if string.sub(f, 1, 2) == 'c:' then node = string.match(all[i + 1], '^(%S+)')
    elseif string.sub(f, 1, 2) == 'i:' then node = string.sub(f, 3) end
    if node and not told[node] then
      told[node] = true
      redis.call('PUBLISH', '$NODE' .. node, k) --one
      send(node, k, tag) --cluster
    end
  end
end
local function watch_of(k)
  return '{WATCH_PREFIX}' .. string.sub(k, {skip})
end
",
        skip = super::KEY_PREFIX.len() + 1
    );
    let send: &str = if cluster { &SEND_LUA } else { "" };
    format!("{send}{}", text(&source, cluster))
}

/// The text of one form of `source`.
pub(super) fn text(source: &str, cluster: bool) -> String {
    let (mine, other) = if cluster {
        ("--cluster", "--one")
    } else {
        ("--one", "--cluster")
    };
    let mut out = String::with_capacity(source.len());
    for line in source.lines() {
        let trimmed = line.trim_end();
        if trimmed.ends_with(other) {
            continue;
        }
        out.push_str(trimmed.strip_suffix(mine).unwrap_or(trimmed).trim_end());
        out.push('\n');
    }
    out.replace("$NODE", NODE_PREFIX)
        .replace("$TAG", if cluster { "ARGV[#ARGV]" } else { "''" })
}

/// One form of `source` (after `prelude`, the Lua functions it calls, and `tell`) as a script.
pub(super) fn script(prelude: &str, source: &str, cluster: bool) -> Script {
    Script::new(&code(prelude, source, cluster))
}

/// The code of [`script`].
pub(super) fn code(prelude: &str, source: &str, cluster: bool) -> String {
    format!("{}{prelude}{}", tell_lua(cluster), text(source, cluster))
}

/// Where a key's tab is. One server: KEYS key, nodes; ARGV suspect ms (the node's heartbeat is
/// checked here). Cluster: KEYS key (the heartbeat is checked after).
pub(super) const LOOKUP: &str = r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid')
if not h[1] or h[1] == 'revoked' then return {'unknown'} end
local p = place(h, KEYS[2], ARGV[1]) --one
if p then return {'online', p[1], p[2]} end --one
if h[1] == 'online' then return {'online', h[2], h[3]} end --cluster
return {'waiting'}";

/// KEYS: key, watch, then on one server this node's key set. ARGV: now, node, sid, proof (t|b),
/// token exp ms, online extra ms, then on one server the node-keys prefix.
pub(super) const BIND: &str = r"
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
redis.call('SADD', KEYS[3], KEYS[1]) --one
tell(KEYS[1], KEYS[2], $TAG)
local mode = redis.call('HGET', KEYS[1], 'md') or ''
if st == 'online' then
  if h[2] ~= ARGV[2] then redis.call('SREM', ARGV[7] .. h[2], KEYS[1]) end --one
  return {'bound', tostring(exp), h[2], h[3], mode}
end
return {'bound', tostring(exp), '', '', mode}";

/// Needs `go_offline`. KEYS: key, watch, then on one server this node's key set. ARGV: now,
/// node, sid, grace ms.
pub(super) const RELEASE: &str = r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid', 'exp')
if h[1] ~= 'online' or h[2] ~= ARGV[2] or h[3] ~= ARGV[3] then return 0 end
redis.call('SREM', KEYS[3], KEYS[1]) --one
go_offline(KEYS[1], KEYS[2], ARGV[1], ARGV[4], h[4], $TAG)
return 1";

/// KEYS: key, watch. ARGV: now, then on one server the node-keys prefix.
pub(super) const REVOKE: &str = r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'exp')
if not h[1] or h[1] == 'revoked' then return {'unknown'} end
redis.call('HSET', KEYS[1], 'st', 'revoked', 'since', ARGV[1])
redis.call('HDEL', KEYS[1], 'node', 'sid')
local ttl = tonumber(h[3]) - tonumber(ARGV[1])
if ttl < 1 then ttl = 1 end
redis.call('PEXPIRE', KEYS[1], ttl)
tell(KEYS[1], KEYS[2], $TAG)
if h[1] == 'online' then
  redis.call('SREM', ARGV[2] .. h[2], KEYS[1]) --one
  return {'revoked', h[2]}
end
return {'revoked'}";

/// A live binding written back. Online on another node since this binding was made is that
/// node's tab, which replaced this one; online with any other socket bound before (another
/// node's, or one this node no longer holds: it holds one socket a key) is what a failover left
/// when it lost the bind of this binding and the release before it, and the binding is restored.
/// A restored binding is online since it was bound. KEYS: key, watch, then on one server this
/// node's key set. ARGV: now, node, sid, exp ms, ttl ms, bound ms (this node's clock).
pub(super) const REASSERT: &str = r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid', 'since')
if h[1] == 'revoked' then return 'revoked' end
if h[1] == 'online' and h[2] ~= ARGV[2] and tonumber(h[4] or '0') >= tonumber(ARGV[6]) then
  return 'elsewhere'
end
redis.call('SADD', KEYS[3], KEYS[1]) --one
if h[1] == 'online' and h[3] == ARGV[3] then return 'kept' end
redis.call('HSET', KEYS[1], 'st', 'online', 'node', ARGV[2], 'sid', ARGV[3], 'since', ARGV[6], 'eb', '1', 'exp', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
tell(KEYS[1], KEYS[2], $TAG)
return 'restored'";

/// What a tab declared: only from the socket that holds the key; an equal declaration changes
/// nothing. KEYS: key, watch. ARGV: node, sid, handles (joined), page tools ('' for none).
pub(super) const DECLARE: &str = r"
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid', 'hd', 'pt', 'rv')
if h[1] ~= 'online' or h[2] ~= ARGV[1] or h[3] ~= ARGV[2] then return {'not_bound'} end
if h[4] == ARGV[3] and (h[5] or '') == ARGV[4] then return {'same', h[6] or '0'} end
redis.call('HSET', KEYS[1], 'hd', ARGV[3])
if ARGV[4] == '' then redis.call('HDEL', KEYS[1], 'pt') else redis.call('HSET', KEYS[1], 'pt', ARGV[4]) end
local rv = redis.call('HINCRBY', KEYS[1], 'rv', 1)
tell(KEYS[1], KEYS[2], $TAG)
return {'ok', tostring(rv)}";

/// A call's admission, unless its session was ended: its session's call rate, its in-flight
/// slot (counted against the key's limit and its session's), this node's place in the key's
/// watch (so it hears the key's changes while the call runs), where the tab is, and, when the
/// caller guessed the node holding the tab right, the call itself sent there (`c<sid>` and the
/// message, on that node's channel), so a call to another node takes no round trip of its own to
/// leave. Every key but the nodes' is under the key's hash tag, so on a cluster it is one script
/// too.
///
/// A slot is the field `c:<call id>` of the watch, `<node> <until ms> <session tag>` (Redis's
/// clock): the key's calls in flight are its slots, a session's those with its tag. A slot past
/// its `until` (its call's deadline, and a margin) belonged to a node that died with its call,
/// and is dropped, so a lost node's calls never hold a key's or a session's slots for longer than
/// they could run.
///
/// An admission carrying a call runs only until `send by` (Redis's clock: the caller's bound on
/// the round trip): one that reaches Redis later (held up in a partition, say) changes nothing
/// and sends nothing, as its caller answered the agent `unavailable` already.
///
/// A refused admission does not count against the session's call rate (as in memory).
///
/// The script first gives back this node's ended calls' slots that waited for it
/// ([`super::releases`]): the watches after the fixed keys, their call ids after the fixed
/// arguments. On a cluster those are the key's own (its hash slot); the slots of other hash
/// slots on the same server follow in the arguments, each a watch and a call id, and are given
/// back by [`GIVE_BACK_NAMED_LUA`] (the script runs with `allow-cross-slot-keys`,
/// [`CROSS_SLOT_FLAGS`]): a slot the server does not serve (its hash slot moved) is an error, and its place among those
/// pairs (from 1) is answered first, before the admission's own answer, in one word separated by
/// spaces (empty when every one was given back).
///
/// KEYS: key, watch, session rate window, session's end marker, then on one server the nodes,
/// then the watches of the slots to give back. ARGV: max in flight, watch ttl ms, node, call id,
/// the call's life ms, the guessed node ('' for none), the message ('' for none), send by (Redis
/// ms), session tag, session max in flight, session rate limit, window ms, then on one server
/// suspect ms and on a cluster the tag of the node's sharded channel on this server ('' for
/// none, [`SEND_LUA`]), then the call ids of the slots to give back, then on a cluster the other
/// slots' pairs. Answers (`now` being Redis's clock) `{'ok', now}` (no tab now), `{'ok', now, node,
/// sid}`, `{'sent', now, node, sid, receivers}`, `{'ended', now}`, `{'unknown', now}`, `{'rate',
/// now}`, `{'busy', now}`, `{'session_busy', now}` or `{'late'}`; on a cluster after the word of
/// the slots not given back.
pub(super) const ACQUIRE: &str = r"
for i = 6, #KEYS do redis.call('HDEL', KEYS[i], 'c:' .. ARGV[i + 8]) end --one
for i = 5, #KEYS do redis.call('HDEL', KEYS[i], 'c:' .. ARGV[i + 9]) end --cluster
local left = give_back_named(#KEYS + 10) --cluster
local function admit() --cluster
local now = clock_ms()
if ARGV[7] ~= '' and now > tonumber(ARGV[8]) then return {'late'} end
local at = tostring(now)
if redis.call('EXISTS', KEYS[4]) == 1 then return {'ended', at} end
local h = redis.call('HMGET', KEYS[1], 'st', 'node', 'sid')
if not h[1] or h[1] == 'revoked' then return {'unknown', at} end
if not spend(KEYS[3], ARGV[11], ARGV[12]) then return {'rate', at} end
local all = redis.call('HGETALL', KEYS[2])
local n, m = 0, 0
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'c:' then
    local until_ms, tag = string.match(all[i + 1], '^%S+ (%d+) ?(%S*)$')
    if tonumber(until_ms or '0') < now then redis.call('HDEL', KEYS[2], all[i]) else
      n = n + 1
      if tag == ARGV[9] then m = m + 1 end
    end
  end
end
if n >= tonumber(ARGV[1]) then redis.call('DECR', KEYS[3]) return {'busy', at} end
if m >= tonumber(ARGV[10]) then redis.call('DECR', KEYS[3]) return {'session_busy', at} end
redis.call('HSET', KEYS[2], 'c:' .. ARGV[4], ARGV[3] .. ' ' .. tostring(now + tonumber(ARGV[5])) .. ' ' .. ARGV[9])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
local p = place(h, KEYS[5], ARGV[13]) --one
local p = (h[1] == 'online') and {h[2], h[3]} or nil --cluster
if not p then return {'ok', at} end
if ARGV[7] ~= '' and p[1] == ARGV[6] and p[1] ~= ARGV[3] then
  local got = redis.call('PUBLISH', '$NODE' .. p[1], 'c' .. p[2] .. '\n' .. ARGV[7]) --one
  local got = send(p[1], 'c' .. p[2] .. '\n' .. ARGV[7], ARGV[13]) --cluster
  return {'sent', at, p[1], p[2], tostring(got)}
end
return {'ok', at, p[1], p[2]}
end --cluster
local answer = admit() --cluster
table.insert(answer, 1, table.concat(left, ' ')) --cluster
return answer --cluster";

/// Lua for a Redis Cluster: `send(node, msg, tag)` publishes `msg` to `node` on its sharded
/// channel under `tag` on this server ([`super::shards`]), or, when no subscriber got it there
/// (or `tag` is empty, or this server does not serve it: an error `redis.pcall` hands back), on
/// the node's classic channel. Answers how many subscribers received it. The script runs with
/// [`CROSS_SLOT_FLAGS`] or has no flags line (either may reach the hash slots of its server).
pub(super) static SEND_LUA: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    r"
local function send(node, msg, tag)
  if tag ~= '' then
    local got = redis.pcall('SPUBLISH', '$SHARD{' .. tag .. '}:' .. node, msg)
    if type(got) == 'number' and got > 0 then return got end
  end
  return redis.call('PUBLISH', '$NODE' .. node, msg)
end
"
    .replace("$SHARD", super::shards::SHARD_PREFIX)
    .replace("$NODE", NODE_PREFIX)
});

/// The first line of a script that may name keys of other hash slots than its declared keys', on
/// the same server of a Redis Cluster: the cluster form of [`ACQUIRE`], and the batches of slots
/// given back ([`super::sharded::GIVE_BACK_SPREAD`]).
pub(super) const CROSS_SLOT_FLAGS: &str = "#!lua flags=allow-cross-slot-keys\n";

/// Lua for a script run with [`CROSS_SLOT_FLAGS`]: `give_back_named(first)` gives back the
/// ended calls' slots named in `ARGV` from `first` on (each a watch and a call id), those of any
/// hash slot the server serves; a slot of another server's (or of a hash slot being moved) is an
/// error that `redis.pcall` hands back, and its place among those pairs (from 1) is in the list
/// returned.
pub(super) const GIVE_BACK_NAMED_LUA: &str = r"
local function give_back_named(first)
  local left = {}
  for i = first, #ARGV, 2 do
    local r = redis.pcall('HDEL', ARGV[i], 'c:' .. ARGV[i + 1])
    if type(r) == 'table' and r.err then table.insert(left, (i - first) / 2 + 1) end
  end
  return left
end
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_keeps_its_own_lines() {
        let source = "a()\nb() --one\nc() --cluster\nd()";
        assert_eq!(text(source, false), "a()\nb()\nd()\n");
        assert_eq!(text(source, true), "a()\nc()\nd()\n");
    }

    #[test]
    fn no_marker_or_placeholder_is_left() {
        for source in [LOOKUP, BIND, RELEASE, REVOKE, REASSERT, DECLARE, ACQUIRE] {
            for cluster in [false, true] {
                let form = text(source, cluster);
                assert!(
                    !form.contains("--one")
                        && !form.contains("--cluster")
                        && !form.contains("$TAG"),
                    "{form}"
                );
                // Changes are told with tell(); the admission publishes the call it sends.
                if source != ACQUIRE {
                    assert!(!form.contains("PUBLISH"), "{form}");
                }
            }
        }
        // The cross-slot steps are the one-server form's only.
        let cluster = text(BIND, true);
        assert!(
            !cluster.contains("SADD") && !cluster.contains("SREM"),
            "{cluster}"
        );
        assert!(!text(ACQUIRE, true).contains("place("));
        assert!(
            !text(ACQUIRE, false).contains("$NODE"),
            "every placeholder filled"
        );
        assert!(!text(LOOKUP, true).contains("place("));
    }

    #[test]
    fn a_change_is_told_on_sharded_channels_on_a_cluster_only() {
        let one = tell_lua(false);
        let cluster = tell_lua(true);
        assert!(
            one.contains("redis.call('PUBLISH', 'va:n:' .. node, k)"),
            "{one}"
        );
        assert!(!one.contains("send("), "{one}");
        assert!(cluster.contains("send(node, k, tag)"), "{cluster}");
        assert!(cluster.contains("local function send("), "{cluster}");
        assert!(!cluster.contains("redis.call('PUBLISH', 'va:n:' .. node, k)"));
        // Every script that tells passes the tag: none on one server, its last argument on a
        // cluster.
        for source in [BIND, RELEASE, REVOKE, REASSERT, DECLARE] {
            assert!(text(source, false).contains(", '')"), "{source}");
            assert!(text(source, true).contains(", ARGV[#ARGV])"), "{source}");
        }
    }

    #[test]
    fn the_admission_gives_waiting_slots_back_after_its_fixed_keys() {
        // One server: key, watch, window, end marker, nodes. A cluster: the same but the nodes.
        let one = text(ACQUIRE, false);
        let cluster = text(ACQUIRE, true);
        assert!(
            one.contains("for i = 6, #KEYS do redis.call('HDEL'"),
            "{one}"
        );
        assert!(!one.contains("for i = 5,"), "{one}");
        assert!(
            cluster.contains("for i = 5, #KEYS do redis.call('HDEL'"),
            "{cluster}"
        );
        assert!(!cluster.contains("for i = 6,"), "{cluster}");
        // Both take the call ids after thirteen fixed arguments: twelve, then on one server
        // suspect ms, on a cluster the tag of the guessed node's sharded channel.
        assert!(one.contains("ARGV[i + 8]") && cluster.contains("ARGV[i + 9]"));
        assert!(one.contains("place(h, KEYS[5], ARGV[13])"), "{one}");
        assert!(cluster.contains("ARGV[7], ARGV[13])"), "{cluster}");
        assert!(!one.contains("send(") && !cluster.contains("'PUBLISH'"));
        // On a cluster only, the slots of other hash slots follow, given back by `pcall`, and the
        // places of those not served are answered before the admission's answer.
        assert!(
            cluster.contains("local left = give_back_named(#KEYS + 10)"),
            "{cluster}"
        );
        assert!(GIVE_BACK_NAMED_LUA.contains("redis.pcall('HDEL', ARGV[i]"));
        assert!(
            cluster.contains("table.insert(answer, 1, table.concat(left, ' '))"),
            "{cluster}"
        );
        assert!(
            !one.contains("give_back_named") && !one.contains("admit()"),
            "{one}"
        );
        assert!(CROSS_SLOT_FLAGS.starts_with("#!lua flags=allow-cross-slot-keys"));
    }
}
