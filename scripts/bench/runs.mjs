// Runs of the several-node scale scenarios (see scale.mjs): a cluster of relay nodes on one
// Redis, generators each with its own loopback source address, the cold start, the call phase
// and the lost node.
import { loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { storePublishLatency } from './bus.mjs';
import { monitor } from './monitor.mjs';
import { cpuTicks, kill, listenOverflows, percentiles, redisCli, redisInfo, rssKib, startLoadgen, startRedis, startRedisCluster, startRelay, sumErrors } from './procs.mjs';

const TABS_PER_GENERATOR = 16000; // each process may hold 20,000 open files
const REDIS_PORT = 4290;
const CLUSTER_PORTS = [4291, 4292, 4293];
const FIRST_PORT = 4121;
const load1 = () => Math.round(loadavg()[0] * 100) / 100;
const log = (...a) => process.stderr.write(`${a.join(' ')}\n`);

// Splits `n` into `parts` near-equal integers.
const split = (n, parts) => Array.from({ length: parts }, (_, i) => Math.floor(n / parts) + (i < n % parts ? 1 : 0));

/**
 * The Redis the nodes share, one server or a Redis Cluster of three primaries (`kind`), read as
 * one: its commands (`INFO stats`, summed), memory, CPU and commands by name.
 */
async function startStore(ctx, kind) {
  const set = kind === 'cluster'
    ? await startRedisCluster(ctx.root, CLUSTER_PORTS)
    : { procs: [await startRedis(ctx.root, REDIS_PORT)], ports: [REDIS_PORT], url: `redis://127.0.0.1:${REDIS_PORT}` };
  if (kind !== 'cluster') redisCli(REDIS_PORT, 'flushall');
  const sum = (section, field) => set.ports.reduce((s, p) => s + (redisInfo(p, section)[field] ?? 0), 0);
  return {
    kind, url: set.url, ports: set.ports, pids: set.procs.map((p) => p.pid),
    commands: () => sum('stats', 'total_commands_processed'),
    usedMemory: () => sum('memory', 'used_memory'),
    opsPerSec: () => sum('stats', 'instantaneous_ops_per_sec'),
    cpu: () => set.procs.reduce((s, p) => s + (cpuTicks(p.pid) ?? 0), 0),
    commandCalls: () => { const out = {}; for (const p of set.ports) for (const [k, v] of Object.entries(commandCalls(p))) out[k] = (out[k] ?? 0) + v; return out; },
    stop: async () => { for (const p of set.procs) await kill(p); },
  };
}

async function cluster(ctx, nodes, kind = 'one') {
  const redis = await startStore(ctx, kind);
  const relays = [];
  try {
    for (let i = 0; i < nodes; i++) relays.push({ port: FIRST_PORT + i, url: `http://127.0.0.1:${FIRST_PORT + i}`, proc: await startRelay(ctx.root, ctx.target, FIRST_PORT + i, redis.url) });
  } catch (e) {
    for (const r of relays) await kill(r.proc);
    await redis.stop();
    throw e;
  }
  return { redis, relays, stop: async () => { for (const r of relays) await kill(r.proc); await redis.stop(); } };
}

// Loopback source addresses handed out so far, over all runs of this process. A run's tabs come
// from addresses no earlier run used: the last run's connections stay in TIME_WAIT for a minute
// after it, and a run that reused their addresses bound its tabs about 14 times slower (10,000
// tabs on two nodes: 502 a second and 547 ms each at the median, against 7,189 and 26 ms).
let sourcesUsed = 0;

// Generators for `perNode[i]` tabs on `relays[i]`, each up to TABS_PER_GENERATOR and from a
// loopback source address of its own (127.0.0.2 to 127.0.0.251, in turn).
async function generators(ctx, relays, perNode, extra = [], first = 0) {
  const total = perNode.reduce((a, b) => a + b, 0);
  const k = Math.ceil(total / TABS_PER_GENERATOR);
  const shares = perNode.map((n) => split(n, k));
  const gens = [];
  for (let g = 0; g < k; g++) {
    const nodes = relays.map((r, i) => `${r.url}=${shares[i][g]}`).filter((s) => !s.endsWith('=0'));
    gens.push(startLoadgen(ctx.root, ctx.target, `loadgen-${first + g}`, ['--nodes', nodes.join(','), '--source-ip', `127.0.0.${2 + (sourcesUsed++ % 250)}`, '--connect-concurrency', '200', ...extra]));
  }
  const minted = await Promise.allSettled(gens.map((g) => g.next('minted')));
  const failed = minted.find((m) => m.status === 'rejected');
  if (failed) { for (const g of gens) await g.stop(); throw failed.reason; }
  return gens;
}

/**
 * Key events heard by all the nodes so far: the nodes' own count (`relay_key_events_heard_total`)
 * where they report it; else every message on the one events channel reaches every node, and
 * what scripts published (`publish` calls) is multiplied by the nodes.
 */
async function eventsSoFar(relays, redis, fallback = true) {
  let sum = 0;
  for (const r of relays) {
    let text = '';
    try { text = await (await fetch(`${r.url}/metrics`, { signal: AbortSignal.timeout(5000) })).text(); } catch { /* gone */ }
    const line = text.split('\n').find((l) => l.startsWith('relay_key_events_heard_total'));
    if (!line) return fallback ? (redis.commandCalls().publish ?? 0) * relays.length : null;
    sum += Number(line.split(' ').pop());
  }
  return sum;
}

async function bindAll(gens, redis, relays) {
  const overflows = listenOverflows();
  const events = await eventsSoFar(relays, redis);
  const cmds = redis.commands();
  for (const g of gens) g.send('bind');
  const bound = await Promise.all(gens.map((g) => g.next('bound')));
  const started = Math.min(...bound.map((b) => b.started_unix_ms));
  const ended = Math.max(...bound.map((b) => b.ended_unix_ms));
  const n = bound.reduce((s, b) => s + b.bound, 0);
  return { bound: n, failures: bound.reduce((s, b) => s + b.failures, 0), first_failure: bound.find((b) => b.first_failure)?.first_failure ?? null, ms: ended - started, per_s: Math.round(n / ((ended - started) / 1000)), listen_overflows: listenOverflows() - overflows, tab_bind_ms: { p50: Math.max(...bound.map((b) => b.tab_bind_ms.p50)), p99: Math.max(...bound.map((b) => b.tab_bind_ms.p99)), max: Math.max(...bound.map((b) => b.tab_bind_ms.max)), over_1s: bound.reduce((s, b) => s + b.tab_bind_ms.over_1s, 0) }, redis_commands_per_bind: Math.round(((redis.commands() - cmds) / n) * 10) / 10, key_events_heard_per_node: Math.round((await eventsSoFar(relays, redis) - events) / relays.length), generator_rss_kib: gens.map((g) => rssKib(g.proc.pid)) };
}

// Calls at `rate` (split over the generators) for `secs`, with the relays' and Redis's CPU and
// Redis's commands over the same time; `during(startedAt)` runs alongside (the storm's kill).
async function callPhase(gens, relays, redis, secs, rate, during, stormAfter) {
  const pids = relays.map((r) => r.proc.pid);
  const before = { relay: pids.map(cpuTicks), redis: redis.cpu(), cmds: redis.commands(), at: Date.now() };
  for (const g of gens) g.send(`calls ${secs} ${rate / gens.length}${stormAfter ? ` ${stormAfter}` : ''}`);
  const side = during ? during(before.at) : null;
  const out = await Promise.all(gens.map((g) => g.next('calls', (secs + 200) * 1000)));
  const sideOut = side ? await side : null;
  const after = { relay: pids.map(cpuTicks), redis: redis.cpu(), cmds: redis.commands(), at: Date.now() };
  const group = (name) => {
    const gs = out.map((o) => o.calls[name]);
    return { ok: gs.reduce((s, x) => s + x.ok, 0), wrong_answer: gs.reduce((s, x) => s + x.wrong_answer, 0), errors: sumErrors(gs.map((x) => x.errors)), latency_us: percentiles(gs.map((x) => x.hist)), hist: gs.flatMap((x) => x.hist) };
  };
  const relayTicks = after.relay.reduce((s, t, i) => s + ((t ?? 0) - (before.relay[i] ?? 0)), 0);
  const res = {
    secs, rate, sent: out.reduce((s, o) => s + o.calls.sent, 0), skipped: out.reduce((s, o) => s + o.calls.skipped, 0),
    quiet: group('quiet'), others: group('others'), caught: group('caught'), back: group('back'),
    misrouted: out.reduce((s, o) => s + o.misrouted, 0) + ['quiet', 'others', 'caught', 'back'].reduce((s, k) => s + out.reduce((a, o) => a + o.calls[k].wrong_answer, 0), 0),
    duplicated: out.reduce((s, o) => s + o.duplicated, 0),
    relay_cpu_ms: relayTicks * 10, redis_cpu_ms: ((after.redis ?? 0) - (before.redis ?? 0)) * 10,
    redis_commands: after.cmds - before.cmds, wall_ms: after.at - before.at, loadavg_1m: load1(),
    roam: out.map((o) => o.roam), side: sideOut,
  };
  const ok = res.quiet.ok + res.others.ok + res.caught.ok + res.back.ok;
  res.relay_cpu_us_per_call = ok ? Math.round((relayTicks * 10000) / ok) : null;
  res.redis_commands_per_call = ok ? Math.round((res.redis_commands / ok) * 10) / 10 : null;
  return res;
}

// What the nodes and Redis spend with every tab held and no calls (pings, heartbeats).
async function idlePhase(relays, redis, secs) {
  const pids = relays.map((r) => r.proc.pid);
  const t0 = { relay: pids.map(cpuTicks), redis: redis.cpu(), cmds: redis.commands(), at: Date.now() };
  await sleep(secs * 1000);
  const t1 = { relay: pids.map(cpuTicks), redis: redis.cpu(), cmds: redis.commands(), at: Date.now() };
  const dt = (t1.at - t0.at) / 1000;
  const relayMs = t1.relay.reduce((s, t, i) => s + (t - t0.relay[i]), 0) * 10;
  return { secs: dt, relay_cpu_ms_per_s: Math.round(relayMs / dt), relay_cpu_ms_per_node: t1.relay.map((t, i) => Math.round(((t - t0.relay[i]) * 10) / dt)), redis_cpu_ms_per_s: Math.round(((t1.redis - t0.redis) * 10) / dt), redis_commands_per_s: Math.round((t1.cmds - t0.cmds) / dt), loadavg_1m: load1() };
}

/**
 * Key events each node hears, from the key events scripts published: one on a node's own channel
 * (`va:n:<node>`) reaches that node only; one on the channel every node subscribed (`va:events`,
 * as relays before the nodes' own channels did) reaches every node.
 */
export function eventsHeard(published, nodes) {
  let heard = 0;
  for (const [chan, n] of Object.entries(published)) {
    if (chan === 'va:events') heard += n * nodes;
    else if (chan.startsWith('va:n:')) heard += n;
  }
  return heard;
}

/** Per node and per second (or per call): the Redis commands each relay node sent, by shape. */
function sentBy(counts, labels, per) {
  const out = {};
  for (const label of labels) out[label] = Object.values(counts[label] ?? {}).reduce((a, b) => a + b, 0) / per;
  return out;
}

export async function scaleRun(ctx, tabs, nodes, callSecs, callRate, kind = 'one') {
  const c = await cluster(ctx, nodes, kind);
  let mon = null;
  let gens = [];
  try {
    const redisBefore = c.redis.usedMemory();
    const perNode = split(tabs, nodes);
    log(`scale ${tabs}: minting on ${nodes} nodes…`);
    gens = await generators(ctx, c.relays, perNode);
    const rssBefore = c.relays.map((r) => rssKib(r.proc.pid));
    const redisMinted = c.redis.usedMemory();
    log(`scale ${tabs}: binding (${gens.length} generators)…`);
    const bind = await bindAll(gens, c.redis, c.relays);
    const loadAtBind = load1();
    await sleep(3000);
    const rssAfter = c.relays.map((r) => rssKib(r.proc.pid));
    const redisAfter = c.redis.usedMemory();
    const nodesOut = c.relays.map((r, i) => ({ port: r.port, tabs: perNode[i], rss_kib_before: rssBefore[i], rss_kib_with_tabs: rssAfter[i], rss_bytes_per_tab: Math.round(((rssAfter[i] - rssBefore[i]) * 1024) / perNode[i]) }));
    log(`scale ${tabs}: bound ${bind.bound} in ${bind.ms} ms; idle…`);
    const labels = c.relays.map((_, i) => `n${i}`);
    mon = await monitor(c.redis.ports, Object.fromEntries(c.relays.map((r, i) => [r.proc.pid, labels[i]])));
    mon.start();
    const idle = await idlePhase(c.relays, c.redis, 10);
    const idleSeen = mon.take();
    idle.per_node = c.relays.map((r, i) => ({ node: labels[i], relay_cpu_ms_per_s: idle.relay_cpu_ms_per_node[i], redis_commands_per_s: Math.round((sentBy(idleSeen.counts, [labels[i]], idle.secs)[labels[i]]) * 10) / 10 }));
    idle.key_events_heard_per_node_per_s = Math.round((eventsHeard(idleSeen.published, nodes) / nodes / idle.secs) * 10) / 10;
    log(`scale ${tabs}: calls…`);
    const calls = await callPhase(gens, c.relays, c.redis, callSecs, callRate);
    // The same calls again for a few seconds with Redis's MONITOR feed on: round trips (commands
    // the nodes sent) and key events heard, per call. Apart, as the feed costs Redis time.
    const monSecs = 5;
    mon.start();
    const watched = await callPhase(gens, c.relays, c.redis, monSecs, callRate);
    const seen = mon.take();
    const watchedOk = watched.quiet.ok;
    calls.round_trips_per_call = watchedOk ? Math.round(((Object.values(sentBy(seen.counts, labels, 1)).reduce((a, b) => a + b, 0) - idleSeenTotal(idleSeen, labels, idle.secs) * (watched.wall_ms / 1000)) / watchedOk) * 100) / 100 : null;
    calls.key_events_heard_per_node_per_call = watchedOk ? Math.round((eventsHeard(seen.published, nodes) / nodes / watchedOk) * 1000) / 1000 : null;
    calls.watched = { ok: watchedOk, errors: watched.quiet.errors, misrouted: watched.misrouted, duplicated: watched.duplicated, by_shape: seen.counts };
    // The store's own publish latency, tabs still held: the floor under the calls' latency.
    const storePublish = await storePublishLatency(c.redis.ports);
    const ok = calls.quiet.ok;
    calls.relay_cpu_us_per_call_above_idle = ok ? Math.round(((calls.relay_cpu_ms - idle.relay_cpu_ms_per_s * (calls.wall_ms / 1000)) * 1000) / ok) : null;
    calls.redis_commands_per_call_above_idle = ok ? Math.round(((calls.redis_commands - idle.redis_commands_per_s * (calls.wall_ms / 1000)) / ok) * 10) / 10 : null;
    const res = {
      tabs, nodes, generators: gens.length, bind, idle, loadavg_1m_at_bind: loadAtBind, nodes_rss: nodesOut,
      redis_used_memory: { before: redisBefore, minted: redisMinted, bound: redisAfter, bytes_per_tab: Math.round((redisAfter - redisBefore) / tabs) },
      calls: { ...calls, roam: undefined },
      store_publish: storePublish,
      tabs_lost_meanwhile: calls.roam.reduce((a, r) => a + r.drops, 0), tabs_bound_again: calls.roam.reduce((a, r) => a + r.rebinds, 0),
    };
    return res;
  } finally {
    mon?.stop();
    for (const g of gens) await g.stop();
    await c.stop();
  }
}

/** Commands per second all nodes sent while idle. */
function idleSeenTotal(seen, labels, secs) {
  return Object.values(sentBy(seen.counts, labels, secs)).reduce((a, b) => a + b, 0);
}

/** Calls of each Redis command since the server started (`INFO commandstats`). */
function commandCalls(port) {
  const out = {};
  for (const [k, v] of Object.entries(redisInfo(port, 'commandstats'))) {
    const calls = /calls=(\d+)/.exec(String(v));
    if (k.startsWith('cmdstat_') && calls) out[k.slice('cmdstat_'.length)] = Number(calls[1]);
  }
  return out;
}

export async function stormRun(ctx, stormTabs, others, nodes, secs, rate, kind = 'one') {
  const c = await cluster(ctx, nodes, kind);
  let gens = [];
  try {
    const perNode = [stormTabs, ...split(others, nodes - 1)];
    const survivors = c.relays.slice(1).map((r) => r.url).join(',');
    log(`storm: ${stormTabs} tabs on node ${c.relays[0].port}, ${others} on ${nodes - 1} others; minting…`);
    // The lost node's tabs and the others are held by generators of their own, as they are
    // different browsers: a generator runs on one thread, and one that re-connected thousands
    // of tabs would answer (and time) its other tabs' calls late, which would count against the
    // relay.
    const extra = ['--call-nodes', survivors, '--reconnect-nodes', survivors];
    gens = await generators(ctx, c.relays, perNode.map((n, i) => (i === 0 ? n : 0)), extra);
    gens.push(...(await generators(ctx, c.relays, perNode.map((n, i) => (i === 0 ? 0 : n)), extra, gens.length)));
    const bind = await bindAll(gens, c.redis, c.relays);
    log(`storm: bound ${bind.bound} in ${bind.ms} ms; quiet calls…`);
    await sleep(3000);
    const quiet = await callPhase(gens, c.relays, c.redis, 15, rate);
    log(`storm: quiet p99 ${quiet.quiet.latency_us?.p99} µs; calls with a kill…`);
    const killAfter = Math.round(secs / 4);
    const samples = [];
    let commandsAtKill = null;
    const during = async (t0) => {
      let killedAt = null;
      let last = { relay: c.relays.map((r) => cpuTicks(r.proc.pid)), cmds: c.redis.commands(), redis: c.redis.cpu(), at: Date.now() };
      while (Date.now() - t0 < secs * 1000 + 2000) {
        await sleep(1000);
        if (killedAt === null && Date.now() - t0 >= killAfter * 1000) {
          commandsAtKill = c.redis.commandCalls();
          c.relays[0].proc.kill('SIGKILL');
          killedAt = Date.now();
          log('storm: node killed');
        }
        const now = { relay: c.relays.map((r) => cpuTicks(r.proc.pid)), cmds: c.redis.commands(), ops: c.redis.opsPerSec(), redis: c.redis.cpu(), at: Date.now() };
        const dt = (now.at - last.at) / 1000;
        samples.push({
          t_ms: now.at - t0,
          dt_ms: now.at - last.at,
          survivors_cpu_ms: now.relay.slice(1).reduce((s, t, i) => s + (t != null && last.relay[i + 1] != null ? t - last.relay[i + 1] : 0), 0) * 10,
          redis_commands: now.cmds - last.cmds,
          relay_cpu_pct: Math.round(now.relay.reduce((s, t, i) => s + (t != null && last.relay[i] != null ? t - last.relay[i] : 0), 0) / dt),
          redis_cpu_pct: Math.round((now.redis - last.redis) / dt),
          redis_ops_per_s: Math.round((now.cmds - last.cmds) / dt),
          redis_instantaneous_ops_per_sec: now.ops,
          loadavg_1m: load1(),
        });
        last = now;
      }
      return { killed_at: killedAt, samples, t0 };
    };
    // Key events the surviving nodes hear through the storm, where they count them (the
    // adapter's own publishes would blur a count read from Redis while calls run).
    const heard0 = await eventsSoFar(c.relays.slice(1), c.redis, false);
    const storm = await callPhase(gens, c.relays.slice(1), c.redis, secs, rate, during, killAfter);
    const heard1 = await eventsSoFar(c.relays.slice(1), c.redis, false);
    const commandsAfter = c.redis.commandCalls();
    // Which Redis commands the storm ran, from the kill to the end of the calls, most first.
    const stormCommands = Object.entries(commandsAfter)
      .map(([cmd, n]) => [cmd, n - (commandsAtKill?.[cmd] ?? 0)])
      .filter(([, n]) => n > 0)
      .sort((a, b) => b[1] - a[1])
      .slice(0, 8);
    const killedAt = storm.side.killed_at;
    for (const g of gens) g.send('roam 120');
    const roams = (await Promise.all(gens.map((g) => g.next('roam', 130000)))).map((r) => r.roam);
    const lastRebind = Math.max(...roams.map((r) => r.last_rebind_unix_ms ?? 0));
    const per100 = [];
    for (const r of roams) {
      const offset = Math.round(((r.first_drop_unix_ms ?? killedAt) - killedAt) / 100);
      r.rebinds_per_100ms.forEach((n, i) => { per100[offset + i] = (per100[offset + i] ?? 0) + n; });
    }
    const perSecond = [];
    per100.forEach((n, i) => { perSecond[Math.floor(i / 10)] = (perSecond[Math.floor(i / 10)] ?? 0) + (n ?? 0); });
    // Per re-bind: what the surviving nodes and Redis spent from the kill until the last tab was
    // bound again (a second added), above what they spent on the same calls before the kill.
    const samplesOut = storm.side.samples;
    const killT = killedAt - storm.side.t0;
    const before = samplesOut.filter((x) => x.t_ms <= killT);
    const perSec = (f) => before.reduce((a, x) => a + f(x), 0) / Math.max(1e-9, before.reduce((a, x) => a + x.dt_ms, 0) / 1000);
    const untilT = killT + (lastRebind ? lastRebind - killedAt : 0) + 1000;
    const window = samplesOut.filter((x) => x.t_ms > killT && x.t_ms - x.dt_ms < untilT);
    const windowSecs = window.reduce((a, x) => a + x.dt_ms, 0) / 1000;
    const rebinds = roams.reduce((s, r) => s + r.rebinds, 0);
    const perRebind = rebinds ? {
      window_s: Math.round(windowSecs * 10) / 10,
      relay_cpu_us: Math.round(((window.reduce((a, x) => a + x.survivors_cpu_ms, 0) - perSec((x) => x.survivors_cpu_ms) * windowSecs) * 1000) / rebinds),
      redis_commands: Math.round(((window.reduce((a, x) => a + x.redis_commands, 0) - perSec((x) => x.redis_commands) * windowSecs) / rebinds) * 10) / 10,
      other_tabs_failed_calls: Object.values(storm.others.errors ?? {}).reduce((a, b) => a + b, 0),
      key_events_heard_per_node: heard0 != null && heard1 != null ? Math.round((heard1 - heard0) / (nodes - 1)) : null,
    } : null;
    return {
      per_rebind: perRebind,
      storm_tabs: stormTabs, other_tabs: others, nodes, generators: gens.length, bind,
      quiet: { ...quiet, roam: undefined },
      storm: { ...storm, roam: undefined, side: undefined },
      killed_at_unix_ms: killedAt,
      all_bound_again_ms: lastRebind ? lastRebind - killedAt : null,
      drops: roams.reduce((s, r) => s + r.drops, 0), rebinds: roams.reduce((s, r) => s + r.rebinds, 0), still_away: roams.reduce((s, r) => s + r.away, 0),
      attempts: roams.reduce((s, r) => s + r.attempts, 0), failed_attempts: sumErrors(roams.map((r) => r.failed_attempts)),
      away_ms_p50_max: Math.max(...roams.map((r) => r.away_ms_p50 ?? 0)), away_ms_p99_max: Math.max(...roams.map((r) => r.away_ms_p99 ?? 0)), away_ms_max: Math.max(...roams.map((r) => r.away_ms_max ?? 0)),
      rebinds_per_s_after_kill: perSecond.map((x) => x ?? 0),
      samples: storm.side.samples,
      redis_commands_after_kill: Object.fromEntries(stormCommands),
    };
  } finally {
    for (const g of gens) await g.stop();
    await c.stop();
  }
}
