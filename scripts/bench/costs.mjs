// What one call costs on Redis against one relay without it, in the same run: two relays on
// Redis (nodes A and B) and a third without Redis (C), one sequential client (one agent, the
// next call when the last is answered), 100 tabs. Three cases: no Redis (tabs and calls on C),
// the tab on the calling node (tabs and calls on A), the tab on another node (tabs on A, calls
// to B). Each case runs twice per repetition: once for CPU (relay CPU per call, both Redis nodes
// together, less what they use idle), once with Redis's MONITOR feed on for the commands each
// node sends per call (by shape; commands run inside scripts are not round trips and are counted
// apart), idle traffic subtracted. Ratios are taken within a repetition; the table shows medians
// and the spread over repetitions.
//
//   node scripts/bench.mjs --costs [--redis one|cluster|one,cluster] [--reps 3] [--secs 10]
import { spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { monitor } from './monitor.mjs';
import { cpuTicks, kill, loadgenBin, sleeps, startRedis, startRedisCluster, startRelay } from './procs.mjs';

const REDIS_PORT = 4390;
const CLUSTER_PORTS = [4391, 4392, 4393];
const PORTS = { A: 4131, B: 4132, C: 4133 };
const IDLE_SECS = 5;
const CASES = [
  { id: 'none', title: 'no Redis', tabs: 'C', calls: 'C', nodes: ['C'] },
  { id: 'here', title: 'tab on the calling node', tabs: 'A', calls: 'A', nodes: ['A', 'B'] },
  { id: 'elsewhere', title: 'tab on another node', tabs: 'A', calls: 'B', nodes: ['A', 'B'] },
];
const log = (...a) => process.stderr.write(`${a.join(' ')}\n`);
const url = (node) => `http://127.0.0.1:${PORTS[node]}`;

/** Calls a node finished so far, whatever their outcome (`relay_tool_calls_total`). */
async function callsDone(node) {
  const text = await (await fetch(`${url(node)}/metrics`)).text();
  return text.split('\n').filter((l) => l.startsWith('relay_tool_calls_total{')).reduce((s, l) => s + Number(l.split(' ').pop()), 0);
}

/**
 * One generator run for `c`: tabs on its tabs node, one sequential agent on its calls node.
 * `onWindow(begin)` is called with true when the measured calls begin and false when they end.
 */
function loadgen(ctx, c, secs, onWindow, pin) {
  const args = ['--url', url(c.tabs), '--call-url', url(c.calls), '--label', c.id,
    '--tabs', '100', '--agents', '1', '--awaited', '--warmup-secs', '1', '--duration-secs', String(secs), '--marks'];
  const cmd = pin ? ['taskset', '-c', '1', loadgenBin(ctx.target), ...args] : [loadgenBin(ctx.target), ...args];
  const proc = spawn(cmd[0], cmd.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d) => { out += d; });
  const marks = [];
  createInterface({ input: proc.stderr }).on('line', (line) => {
    if (line === 'loadgen: measuring') marks.push(onWindow(true));
    else if (line === 'loadgen: measured') marks.push(onWindow(false));
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => proc.kill('SIGKILL'), (secs + 120) * 1000);
    proc.once('exit', async (code) => {
      clearTimeout(timer);
      await Promise.all(marks);
      if (code !== 0) return reject(new Error(`loadgen for ${c.id} exited ${code}`));
      resolve(JSON.parse(out.trim().split('\n').pop()));
    });
  });
}

const ticks = (pids) => Object.fromEntries(Object.entries(pids).map(([n, p]) => [n, cpuTicks(p)]));

/** Adds up counts by shape, less `idle` (per second) × `secs`, per call. */
function perCall(counts, idle, secs, calls) {
  const out = {};
  for (const [shape, n] of Object.entries(counts ?? {})) out[shape] = n;
  for (const [shape, rate] of Object.entries(idle ?? {})) out[shape] = (out[shape] ?? 0) - rate * secs;
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, v / calls]).filter(([, v]) => Math.abs(v) >= 0.005).sort((a, b) => b[1] - a[1]));
}

async function oneRedis(ctx, kind, reps, secs, countSecs, pin) {
  const redis = kind === 'cluster'
    ? await startRedisCluster(ctx.root, CLUSTER_PORTS, { pin })
    : { procs: [await startRedis(ctx.root, REDIS_PORT, { pin })], ports: [REDIS_PORT], url: `redis://127.0.0.1:${REDIS_PORT}` };
  const relays = {};
  let mon = null;
  try {
    relays.A = await startRelay(ctx.root, ctx.target, PORTS.A, redis.url, { pin });
    relays.B = await startRelay(ctx.root, ctx.target, PORTS.B, redis.url, { pin });
    relays.C = await startRelay(ctx.root, ctx.target, PORTS.C, null, { pin });
    const pids = Object.fromEntries(Object.entries(relays).map(([n, p]) => [n, p.pid]));
    const redisPids = redis.procs.map((p) => p.pid);
    mon = await monitor(redis.ports, { [pids.A]: 'A', [pids.B]: 'B' });
    await sleep(2000);

    // Idle: what each node spends and sends with no calls (heartbeats, pings).
    const t0 = ticks(pids);
    mon.start();
    const at0 = Date.now();
    await sleep(IDLE_SECS * 1000);
    const idleCounts = mon.take().counts;
    const idleSecs = (Date.now() - at0) / 1000;
    const t1 = ticks(pids);
    const idle = {
      cpu_ms_per_s: Object.fromEntries(Object.keys(pids).map((n) => [n, ((t1[n] - t0[n]) * 10) / idleSecs])),
      commands_per_s: Object.fromEntries(Object.entries(idleCounts).map(([n, c]) => [n, Object.fromEntries(Object.entries(c).map(([k, v]) => [k, v / idleSecs]))])),
    };

    const runs = [];
    for (let r = 0; r < reps; r++) {
      const rep = {};
      for (const c of CASES) {
        // CPU: relay CPU of the case's nodes over the measured calls, less their idle use.
        let before = null;
        let cpu = null;
        const run = await loadgen(ctx, c, secs, async (begin) => {
          const snap = { ticks: ticks(pids), sleeps: Object.fromEntries(Object.entries(pids).map(([n, p]) => [n, sleeps(p)])), redis: redisPids.map(cpuTicks), calls: await callsDone(c.calls), at: Date.now() };
          if (begin) before = snap;
          else cpu = { before, after: snap };
        }, pin);
        const windowSecs = (cpu.after.at - cpu.before.at) / 1000;
        const calls = cpu.after.calls - cpu.before.calls;
        const nodeMs = Object.fromEntries(c.nodes.map((n) => [n, (cpu.after.ticks[n] - cpu.before.ticks[n]) * 10 - idle.cpu_ms_per_s[n] * windowSecs]));
        const relayMs = Object.values(nodeMs).reduce((a, b) => a + b, 0);
        const redisMs = cpu.after.redis.reduce((s, t, i) => s + (t - cpu.before.redis[i]) * 10, 0);
        const res = {
          calls, calls_per_s: Math.round(calls / windowSecs), relay_cpu_us_per_call: (relayMs * 1000) / calls,
          // By role: the node the calls are posted to, and the node holding the tabs.
          calling_cpu_us_per_call: (nodeMs[c.calls] * 1000) / calls,
          holding_cpu_us_per_call: c.tabs === c.calls ? null : (nodeMs[c.tabs] * 1000) / calls,
          // How often the relays went to sleep per call (each sleep a wake-up later): at one call
          // at a time, what a call costs most.
          sleeps_per_call: c.nodes.reduce((a, n) => a + (cpu.after.sleeps[n] - cpu.before.sleeps[n]), 0) / calls,
          redis_cpu_us_per_call: c.id === 'none' ? null : (redisMs * 1000) / calls,
          latency_us: run.latency_us, errors: run.errors, misrouted: run.misrouted, lost: run.lost, duplicated: run.duplicated,
          other_cpu_pct: run.other_cpu_pct, loadavg_1m: Math.round(loadavg()[0] * 100) / 100,
        };
        // Commands: the same calls with MONITOR on, counted by node.
        if (c.id !== 'none') {
          let calls0 = 0;
          let took = null;
          let at = 0;
          const counted = await loadgen(ctx, c, countSecs, async (begin) => {
            if (begin) { calls0 = await callsDone(c.calls); at = Date.now(); mon.start(); } else { took = { ...mon.take(), calls: (await callsDone(c.calls)) - calls0, secs: (Date.now() - at) / 1000 }; }
          }, pin);
          const roles = c.tabs === c.calls ? { calling: c.calls } : { calling: c.calls, holding: c.tabs };
          res.commands = Object.fromEntries(Object.entries(roles).map(([role, n]) => [role, perCall(took.counts[n], idle.commands_per_s[n], took.secs, took.calls)]));
          res.round_trips_per_call = Object.values(res.commands).reduce((s, m) => s + Object.values(m).reduce((a, b) => a + b, 0), 0);
          res.inside_scripts_per_call = took.inside / took.calls;
          res.other_per_call = perCall(took.counts.other, idle.commands_per_s.other, took.secs, took.calls);
          for (const k of ['errors', 'misrouted', 'lost', 'duplicated']) res[`count_run_${k}`] = counted[k];
        }
        rep[c.id] = res;
        log(`costs ${kind} run ${r + 1} ${c.id}: ${Math.round(res.relay_cpu_us_per_call)} µs/call, ${res.calls_per_s} calls/s${res.round_trips_per_call != null ? `, ${res.round_trips_per_call.toFixed(2)} round trips/call` : ''}`);
      }
      for (const c of CASES) rep[c.id].vs_none = rep[c.id].relay_cpu_us_per_call / rep.none.relay_cpu_us_per_call;
      runs.push(rep);
    }
    return { redis: kind, reps, secs, idle, runs };
  } finally {
    mon?.stop();
    for (const p of Object.values(relays)) await kill(p);
    for (const p of redis.procs) await kill(p);
  }
}

const median = (xs) => { const v = xs.filter((x) => typeof x === 'number').sort((a, b) => a - b); return v.length ? v[Math.floor((v.length - 1) / 2)] : null; };
const spread = (xs, f) => { const v = xs.filter((x) => typeof x === 'number'); return v.length > 1 ? ` (${f(Math.min(...v))}–${f(Math.max(...v))})` : ''; };
const us = (v) => (v == null ? 'n/a' : `${Math.round(v)} µs`);
const x = (v) => (v == null ? 'n/a' : `${v.toFixed(2)}×`);
const n2 = (v) => (v == null ? 'n/a' : v.toFixed(2));

/** The table of one Redis kind's result. */
export function print(res) {
  const cell = (id, f, fmt) => { const xs = res.runs.map((r) => f(r[id])); return `${fmt(median(xs))}${spread(xs, fmt)}`; };
  console.log(`\none call on ${res.redis === 'cluster' ? 'a Redis Cluster (3 primaries)' : 'one Redis server'} against a relay without Redis, same run (one sequential client, 100 tabs; medians of ${res.reps} runs of ${res.secs} s, min–max in brackets; relay CPU of both Redis nodes, less idle):`);
  const w = 34;
  console.log(`${''.padEnd(w)}${CASES.map((c) => c.title.padStart(30)).join('')}`);
  const line = (label, f, fmt, skipNone = false) => console.log(`${label.padEnd(w)}${CASES.map((c) => (skipNone && c.id === 'none' ? '—' : cell(c.id, f, fmt)).padStart(30)).join('')}`);
  line('calls/s', (r) => r.calls_per_s, (v) => String(Math.round(v)));
  line('relay CPU per call, all nodes', (r) => r.relay_cpu_us_per_call, us);
  line('  ÷ no Redis (same run)', (r) => r.vs_none, x);
  line('  calling node', (r) => r.calling_cpu_us_per_call, us, true);
  line('  holding node', (r) => r.holding_cpu_us_per_call, us, true);
  line('relay sleeps per call, all nodes', (r) => r.sleeps_per_call, n2);
  line('Redis round trips per call', (r) => r.round_trips_per_call, n2, true);
  line('  commands run inside scripts', (r) => r.inside_scripts_per_call, n2, true);
  line('Redis CPU per call', (r) => r.redis_cpu_us_per_call, us, true);
  line('p50 latency', (r) => r.latency_us.p50, us);
  line('p99 latency', (r) => r.latency_us.p99, us);
  for (const c of CASES.filter((k) => k.id !== 'none')) {
    // The breakdown of the median run (by round trips) of the case.
    const sorted = [...res.runs].sort((a, b) => a[c.id].round_trips_per_call - b[c.id].round_trips_per_call);
    const mid = sorted[Math.floor((sorted.length - 1) / 2)][c.id];
    console.log(`  ${c.title}, per call, by node (median run):`);
    for (const [role, m] of Object.entries(mid.commands)) {
      const total = Object.values(m).reduce((a, b) => a + b, 0);
      console.log(`    ${role === 'calling' ? (c.tabs === c.calls ? 'calling = holding node' : 'calling node') : 'holding node'}: ${total.toFixed(2)} — ${Object.entries(m).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', ') || 'none'}`);
    }
  }
  const bad = res.runs.flatMap((r) => CASES.map((c) => [c.id, r[c.id]])).filter(([, v]) => v.misrouted || v.lost || v.duplicated || Object.keys(v.errors ?? {}).length || v.count_run_misrouted || v.count_run_lost || Object.keys(v.count_run_errors ?? {}).length);
  console.log(bad.length ? `  integrity: ${bad.map(([id, v]) => `${id} ${JSON.stringify({ errors: v.errors, misrouted: v.misrouted, lost: v.lost, count_run_errors: v.count_run_errors })}`).join('; ')}` : '  integrity: 0 misrouted, 0 lost, 0 failed in every run');
  console.log(`  idle, per node: relay CPU ${Object.entries(res.idle.cpu_ms_per_s).map(([n, v]) => `${n} ${v.toFixed(1)}`).join(', ')} ms/s; Redis commands ${Object.entries(res.idle.commands_per_s).filter(([n]) => n !== 'other').map(([n, m]) => `${n} ${Object.values(m).reduce((a, b) => a + b, 0).toFixed(1)}`).join(', ')} /s`);
}

export async function costs(ctx, argv, { pin }) {
  const opt = (name, dflt) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : dflt; };
  const kinds = opt('--redis', 'one').split(',');
  const reps = Number(opt('--reps', 3));
  const secs = Number(opt('--secs', 10));
  const out = [];
  for (const kind of kinds) {
    const res = await oneRedis(ctx, kind, reps, secs, Math.min(secs, 3), pin);
    print(res);
    out.push(res);
  }
  return out;
}
