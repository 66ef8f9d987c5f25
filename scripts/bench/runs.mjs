// Runs of the several-node scale scenarios (see scale.mjs): a cluster of relay nodes on one
// Redis, generators each with its own loopback source address, the cold start, the call phase
// and the lost node.
import { loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { cpuTicks, kill, listenOverflows, percentiles, redisCli, redisInfo, rssKib, startLoadgen, startRedis, startRelay, sumErrors } from './procs.mjs';

const TABS_PER_GENERATOR = 16000; // each process may hold 20,000 open files
const REDIS_PORT = 4290;
const FIRST_PORT = 4121;
const load1 = () => Math.round(loadavg()[0] * 100) / 100;
const log = (...a) => process.stderr.write(`${a.join(' ')}\n`);

// Splits `n` into `parts` near-equal integers.
const split = (n, parts) => Array.from({ length: parts }, (_, i) => Math.floor(n / parts) + (i < n % parts ? 1 : 0));

async function cluster(ctx, nodes) {
  const redis = await startRedis(ctx.root, REDIS_PORT);
  redisCli(REDIS_PORT, 'flushall');
  const relays = [];
  try {
    for (let i = 0; i < nodes; i++) relays.push({ port: FIRST_PORT + i, url: `http://127.0.0.1:${FIRST_PORT + i}`, proc: await startRelay(ctx.root, ctx.target, FIRST_PORT + i, REDIS_PORT) });
  } catch (e) {
    for (const r of relays) await kill(r.proc);
    await kill(redis);
    throw e;
  }
  return { redis, relays, stop: async () => { for (const r of relays) await kill(r.proc); await kill(redis); } };
}

// Generators for `perNode[i]` tabs on node i, each up to TABS_PER_GENERATOR, from its own source address.
// Generators for `perNode[i]` tabs on `relays[i]`, each with its own loopback source address
// (the first being 127.0.0.<2 + first>).
async function generators(ctx, relays, perNode, extra = [], first = 0) {
  const total = perNode.reduce((a, b) => a + b, 0);
  const k = Math.ceil(total / TABS_PER_GENERATOR);
  const shares = perNode.map((n) => split(n, k));
  const gens = [];
  for (let g = 0; g < k; g++) {
    const nodes = relays.map((r, i) => `${r.url}=${shares[i][g]}`).filter((s) => !s.endsWith('=0'));
    gens.push(startLoadgen(ctx.root, ctx.target, `loadgen-${first + g}`, ['--nodes', nodes.join(','), '--source-ip', `127.0.0.${2 + first + g}`, '--connect-concurrency', '200', ...extra]));
  }
  const minted = await Promise.allSettled(gens.map((g) => g.next('minted')));
  const failed = minted.find((m) => m.status === 'rejected');
  if (failed) { for (const g of gens) await g.stop(); throw failed.reason; }
  return gens;
}

async function bindAll(gens) {
  const overflows = listenOverflows();
  const cmds = redisInfo(REDIS_PORT, 'stats').total_commands_processed;
  for (const g of gens) g.send('bind');
  const bound = await Promise.all(gens.map((g) => g.next('bound')));
  const started = Math.min(...bound.map((b) => b.started_unix_ms));
  const ended = Math.max(...bound.map((b) => b.ended_unix_ms));
  const n = bound.reduce((s, b) => s + b.bound, 0);
  return { bound: n, failures: bound.reduce((s, b) => s + b.failures, 0), first_failure: bound.find((b) => b.first_failure)?.first_failure ?? null, ms: ended - started, per_s: Math.round(n / ((ended - started) / 1000)), listen_overflows: listenOverflows() - overflows, tab_bind_ms: { p50: Math.max(...bound.map((b) => b.tab_bind_ms.p50)), p99: Math.max(...bound.map((b) => b.tab_bind_ms.p99)), max: Math.max(...bound.map((b) => b.tab_bind_ms.max)), over_1s: bound.reduce((s, b) => s + b.tab_bind_ms.over_1s, 0) }, redis_commands_per_bind: Math.round(((redisInfo(REDIS_PORT, 'stats').total_commands_processed - cmds) / n) * 10) / 10, generator_rss_kib: gens.map((g) => rssKib(g.proc.pid)) };
}

// Calls at `rate` (split over the generators) for `secs`, with the relays' and Redis's CPU and
// Redis's commands over the same time; `during(startedAt)` runs alongside (the storm's kill).
async function callPhase(gens, relays, redis, secs, rate, during, stormAfter) {
  const pids = relays.map((r) => r.proc.pid);
  const before = { relay: pids.map(cpuTicks), redis: cpuTicks(redis.pid), cmds: redisInfo(REDIS_PORT, 'stats').total_commands_processed, at: Date.now() };
  for (const g of gens) g.send(`calls ${secs} ${rate / gens.length}${stormAfter ? ` ${stormAfter}` : ''}`);
  const side = during ? during(before.at) : null;
  const out = await Promise.all(gens.map((g) => g.next('calls', (secs + 200) * 1000)));
  const sideOut = side ? await side : null;
  const after = { relay: pids.map(cpuTicks), redis: cpuTicks(redis.pid), cmds: redisInfo(REDIS_PORT, 'stats').total_commands_processed, at: Date.now() };
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
  const t0 = { relay: pids.map(cpuTicks), redis: cpuTicks(redis.pid), cmds: redisInfo(REDIS_PORT, 'stats').total_commands_processed, at: Date.now() };
  await sleep(secs * 1000);
  const t1 = { relay: pids.map(cpuTicks), redis: cpuTicks(redis.pid), cmds: redisInfo(REDIS_PORT, 'stats').total_commands_processed, at: Date.now() };
  const dt = (t1.at - t0.at) / 1000;
  const relayMs = t1.relay.reduce((s, t, i) => s + (t - t0.relay[i]), 0) * 10;
  return { secs: dt, relay_cpu_ms_per_s: Math.round(relayMs / dt), redis_cpu_ms_per_s: Math.round(((t1.redis - t0.redis) * 10) / dt), redis_commands_per_s: Math.round((t1.cmds - t0.cmds) / dt), loadavg_1m: load1() };
}

export async function scaleRun(ctx, tabs, nodes, callSecs, callRate) {
  const c = await cluster(ctx, nodes);
  let gens = [];
  try {
    const redisBefore = redisInfo(REDIS_PORT, 'memory').used_memory;
    const perNode = split(tabs, nodes);
    log(`scale ${tabs}: minting on ${nodes} nodes…`);
    gens = await generators(ctx, c.relays, perNode);
    const rssBefore = c.relays.map((r) => rssKib(r.proc.pid));
    const redisMinted = redisInfo(REDIS_PORT, 'memory').used_memory;
    log(`scale ${tabs}: binding (${gens.length} generators)…`);
    const bind = await bindAll(gens);
    const loadAtBind = load1();
    await sleep(3000);
    const rssAfter = c.relays.map((r) => rssKib(r.proc.pid));
    const redisAfter = redisInfo(REDIS_PORT, 'memory').used_memory;
    const nodesOut = c.relays.map((r, i) => ({ port: r.port, tabs: perNode[i], rss_kib_before: rssBefore[i], rss_kib_with_tabs: rssAfter[i], rss_bytes_per_tab: Math.round(((rssAfter[i] - rssBefore[i]) * 1024) / perNode[i]) }));
    log(`scale ${tabs}: bound ${bind.bound} in ${bind.ms} ms; idle…`);
    const idle = await idlePhase(c.relays, c.redis, 10);
    log(`scale ${tabs}: calls…`);
    const calls = await callPhase(gens, c.relays, c.redis, callSecs, callRate);
    const ok = calls.quiet.ok;
    calls.relay_cpu_us_per_call_above_idle = ok ? Math.round(((calls.relay_cpu_ms - idle.relay_cpu_ms_per_s * (calls.wall_ms / 1000)) * 1000) / ok) : null;
    calls.redis_commands_per_call_above_idle = ok ? Math.round(((calls.redis_commands - idle.redis_commands_per_s * (calls.wall_ms / 1000)) / ok) * 10) / 10 : null;
    const res = {
      tabs, nodes, generators: gens.length, bind, idle, loadavg_1m_at_bind: loadAtBind, nodes_rss: nodesOut,
      redis_used_memory: { before: redisBefore, minted: redisMinted, bound: redisAfter, bytes_per_tab: Math.round((redisAfter - redisBefore) / tabs) },
      calls: { ...calls, roam: undefined },
      tabs_lost_meanwhile: calls.roam.reduce((a, r) => a + r.drops, 0), tabs_bound_again: calls.roam.reduce((a, r) => a + r.rebinds, 0),
    };
    return res;
  } finally {
    for (const g of gens) await g.stop();
    await c.stop();
  }
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

export async function stormRun(ctx, stormTabs, others, nodes, secs, rate) {
  const c = await cluster(ctx, nodes);
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
    const bind = await bindAll(gens);
    log(`storm: bound ${bind.bound} in ${bind.ms} ms; quiet calls…`);
    await sleep(3000);
    const quiet = await callPhase(gens, c.relays, c.redis, 15, rate);
    log(`storm: quiet p99 ${quiet.quiet.latency_us?.p99} µs; calls with a kill…`);
    const killAfter = Math.round(secs / 4);
    const samples = [];
    let commandsAtKill = null;
    const during = async (t0) => {
      let killedAt = null;
      let last = { relay: c.relays.map((r) => cpuTicks(r.proc.pid)), cmds: redisInfo(REDIS_PORT, 'stats').total_commands_processed, redis: cpuTicks(c.redis.pid), at: Date.now() };
      while (Date.now() - t0 < secs * 1000 + 2000) {
        await sleep(1000);
        if (killedAt === null && Date.now() - t0 >= killAfter * 1000) {
          commandsAtKill = commandCalls(REDIS_PORT);
          c.relays[0].proc.kill('SIGKILL');
          killedAt = Date.now();
          log('storm: node killed');
        }
        const now = { relay: c.relays.map((r) => cpuTicks(r.proc.pid)), cmds: redisInfo(REDIS_PORT, 'stats'), redis: cpuTicks(c.redis.pid), at: Date.now() };
        const dt = (now.at - last.at) / 1000;
        samples.push({
          t_ms: now.at - t0,
          relay_cpu_pct: Math.round(now.relay.reduce((s, t, i) => s + (t != null && last.relay[i] != null ? t - last.relay[i] : 0), 0) / dt),
          redis_cpu_pct: Math.round((now.redis - last.redis) / dt),
          redis_ops_per_s: Math.round((now.cmds.total_commands_processed - last.cmds) / dt),
          redis_instantaneous_ops_per_sec: now.cmds.instantaneous_ops_per_sec,
          loadavg_1m: load1(),
        });
        last = { ...now, cmds: now.cmds.total_commands_processed };
      }
      return { killed_at: killedAt, samples };
    };
    const storm = await callPhase(gens, c.relays.slice(1), c.redis, secs, rate, during, killAfter);
    const commandsAfter = commandCalls(REDIS_PORT);
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
    return {
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
