#!/usr/bin/env node
// The benchmark behind `scripts/manage.sh bench`: runs the same load generator against the relay,
// against the reference server (the common Express + socket.io design) and against the floor (the
// least a server on the relay's own stack, hyper and tungstenite, does for the same round trip:
// relay/bench/src/floor.rs), each scenario on a fresh server process, server and generator pinned
// to different cores when there are two, repeated (3 times by default) and reported as medians
// with the ratios relay/reference and relay/floor.
//
//   node scripts/bench.mjs [--reps 3] [--secs 10] [--quick] [--no-50k] [--no-cluster] [--cluster-only]
//                          [--only id,id…] [--servers relay,reference,floor] [--wait-quiet SECS]
//                          [--tracing RATIO]
//   node scripts/bench.mjs --scale | --storm [options of scripts/bench/scale.mjs]
//   node scripts/bench.mjs --timeline [options of scripts/bench/timeline-memory.mjs]
//
// Figures: resident memory per idle tab (tabs send a browser's request headers) and after one
// 32 KiB emit to every tab; server CPU per awaited call (utime+stime over the run / calls) at
// 500, 2,000 and 10,000 offered calls/s and in a closed loop; round trips per server-core second;
// latency at 2,000/s; the server's context switches per call (how often it went to sleep: at low
// load each sleep and wake-up costs more CPU than the call's own work). Memory figures hold on a busy machine; CPU figures do not: the generator
// records the CPU that other processes used during each measured run (other_cpu_pct), and the
// table marks CPU figures taken while that was over a tenth of a core. --wait-quiet SECS waits (up
// to SECS) before each CPU run for two seconds in which the whole machine is under that.
//
// With redis-server installed it also measures the several-node mode: two relays on one Redis,
// tabs bound on node A, the same load posted to node A (same node) and to node B (cross node).
//
// --tracing RATIO turns the relay's span export on (OTLP/HTTP to scripts/bench/otlp-sink.mjs, which
// takes the spans without decoding them), sampling RATIO of the calls (0.01, 1): the cost of
// tracing, against runs without it.
//
// Results (every run's JSON) are written to .run/bench/<timestamp>.json.
import { spawn, execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const target = process.env.CARGO_TARGET_DIR ?? join(root, 'target');

/** Writes a run's raw results to .run/bench/<prefix><time>.json and says where. */
function saveRaw(prefix, res) {
  mkdirSync(join(root, '.run/bench'), { recursive: true });
  const file = join(root, '.run/bench', `${prefix}${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(res, null, 2));
  console.log(`\nraw results: ${file}`);
}
const argv = process.argv.slice(2);
// Several relay nodes on one Redis at 10k–100k tabs, and a lost node: scripts/bench/scale.mjs.
if (argv.includes('--scale') || argv.includes('--storm')) {
  await (await import('./bench/scale.mjs')).main(argv, { root, target });
  process.exit(0);
}
// How soon a call waiting for its tab goes out once the tab binds on another node:
// scripts/bench/wake.mjs.
if (argv.includes('--wake')) {
  saveRaw('wake-', await (await import('./bench/wake.mjs')).wake({ root, target }, argv));
  process.exit(0);
}
// The worker's memory per session with its timeline on: scripts/bench/timeline-memory.mjs.
if (argv.includes('--timeline')) {
  await (await import('./bench/timeline-memory.mjs')).main(argv, { root, target });
  process.exit(0);
}
const flag = (name) => argv.includes(name);
const opt = (name, dflt) => { const i = argv.indexOf(name); return i >= 0 ? Number(argv[i + 1]) : dflt; };
const quick = flag('--quick');
const reps = opt('--reps', quick ? 1 : 3);
const secs = opt('--secs', quick ? 3 : 10);
const clusterOnly = flag('--cluster-only');
const waitQuiet = opt('--wait-quiet', 0);
const only = (() => { const i = argv.indexOf('--only'); return i >= 0 ? new Set(argv[i + 1].split(',')) : null; })();
const with50k = !flag('--no-50k') && !quick && !clusterOnly;
const withCluster = !flag('--no-cluster');
const pin = cpus().length >= 2;
const tracing = (() => { const i = argv.indexOf('--tracing'); return i >= 0 ? argv[i + 1] : null; })();
if (tracing !== null && !(Number(tracing) >= 0 && Number(tracing) <= 1)) throw new Error('--tracing takes a ratio from 0 to 1');
const OTLP_SINK = '127.0.0.1:4199';
// What a call costs on Redis against a relay without it, by node and Redis command:
// scripts/bench/costs.mjs (also part of the full run below, on one Redis server).
if (flag('--costs')) {
  saveRaw('costs-', await (await import('./bench/costs.mjs')).costs({ root, target }, argv, { pin }));
  process.exit(0);
}
// Each tab is one descriptor in the server and one in the generator; a sandbox may cap that.
const fdLimit = Number(execFileSync('bash', ['-c', 'ulimit -n']).toString().trim()) || 1024;
const maxIdleTabs = Math.min(50000, fdLimit - 1000);
const SECRET = 'bench-worker-secret-0123456789abcdef';
// The relay's signing keys (a fixed seed: the benchmark's own, never a deployment's).
const SESSION_KEYS = 'kbench:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8';

const servers = {
  relay: {
    cmd: [join(target, 'release/relay')],
    env: {
      RELAY_ADDR: '127.0.0.1:4101', LIVEKIT_API_KEY: 'devkey', LIVEKIT_API_SECRET: 'bench-livekit-secret-0123456789ab',
      RELAY_WORKER_SECRET: SECRET, RELAY_SESSION_KEYS: SESSION_KEYS, RELAY_TOKEN_MODE: 'open', RELAY_TOKEN_RATE_PER_MIN: '100000000',
      RELAY_SESSION_RATE_PER_SEC: '100000000',
      RELAY_MAX_INFLIGHT_PER_KEY: '100000', RELAY_TOKEN_MODE: 'open', RUST_LOG: 'warn',
      ...(tracing === null ? {} : {
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://${OTLP_SINK}`, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: tracing,
      }),
    },
    url: 'http://127.0.0.1:4101',
    bind: 'token',
  },
  reference: {
    cmd: ['node', join(root, 'relay/bench/reference/server.mjs')],
    env: { REF_ADDR: '127.0.0.1:4201', REF_AGENT_SECRET: SECRET },
    url: 'http://127.0.0.1:4201',
    bind: 'register',
  },
  floor: {
    cmd: [join(target, 'release/floor')],
    env: { FLOOR_ADDR: '127.0.0.1:4301' },
    url: 'http://127.0.0.1:4301',
    bind: 'token',
  },
};

const awaitedAt = (rate) => ({ id: `awaited_${rate}`, title: `awaited at ${rate} calls/s (32 agents, 100 tabs)`, args: ['--tabs', '100', '--agents', '32', '--awaited', '--rate', String(rate)] });
const scenarios = [
  { id: 'awaited_max', title: 'awaited, closed loop (64 agents, 100 tabs)', args: ['--tabs', '100', '--agents', '64', '--awaited'] },
  { id: 'fire_max', title: 'fire-and-forget, closed loop (64 agents, 100 tabs)', args: ['--tabs', '100', '--agents', '64'] },
  awaitedAt(500),
  awaitedAt(2000),
  awaitedAt(10000),
  { id: 'idle_10k', title: '10,000 idle tabs, then one 32 KiB emit to each', args: ['--tabs', '10000', '--agents', '0', '--settle-secs', '3', '--big-emit-bytes', '32768'], idle: true },
  // Memory after a burst: 5,000 idle tabs, then 100 agents at once send one 32 KiB call to every
  // tab; memory 3 s and 10 s after the last arrived.
  { id: 'burst_5k', title: '5,000 idle tabs, then a burst of 100 agents × one 32 KiB call per tab', args: ['--tabs', '5000', '--agents', '0', '--settle-secs', '3', '--big-emit-bytes', '32768', '--big-emit-agents', '100', '--after-emit-secs', '7'], idle: true, servers: ['relay'] },
  // The relay only: the reference design has no declaration of a tab's tools.
  { id: 'idle_10k_handles', title: '10,000 idle tabs, each declaring 8 tools', args: ['--tabs', '10000', '--agents', '0', '--settle-secs', '3', '--handles', '8'], idle: true, servers: ['relay'] },
  ...(with50k ? [{ id: 'idle_max', title: `${maxIdleTabs} idle tabs`, args: ['--tabs', String(maxIdleTabs), '--agents', '0', '--settle-secs', '3', '--connect-concurrency', '400'], idle: true }] : []),
].filter((sc) => !only || only.has(sc.id));

async function startServer(name, s = servers[name]) {
  const cmd = pin ? ['taskset', '-c', '0', ...s.cmd] : s.cmd;
  // Output goes to a file, never to a pipe: the generator runs synchronously, and a full pipe
  // would block a server that logs.
  mkdirSync(join(root, '.run/bench'), { recursive: true });
  const log = openSync(join(root, '.run/bench', `${name}.log`), 'a');
  const proc = spawn(cmd[0], cmd.slice(1), { env: { PATH: process.env.PATH, ...s.env }, stdio: ['ignore', log, log] });
  closeSync(log);
  let exited = null;
  proc.once('exit', (code) => { exited = code; });
  const until = Date.now() + 15000;
  while (Date.now() < until) {
    if (exited !== null) throw new Error(`${name} exited ${exited}; see .run/bench/${name}.log`);
    try {
      await fetch(`${s.url}/healthz`, { signal: AbortSignal.timeout(500) });
      return proc;
    } catch {
      await sleep(50);
    }
  }
  proc.kill('SIGKILL');
  throw new Error(`${name} did not start; see .run/bench/${name}.log`);
}

async function stopServer(proc) {
  proc.kill('SIGKILL');
  await new Promise((r) => (proc.exitCode !== null || proc.signalCode !== null ? r() : proc.once('exit', r)));
  await sleep(300);
}

function loadgen(name, args, pid, s = servers[name]) {
  const full = [join(target, 'release/loadgen'), '--url', s.url, '--label', name, '--bind', s.bind,
    '--server-pid', String(pid), '--duration-secs', String(secs), ...args];
  const cmd = pin ? ['taskset', '-c', '1', ...full] : full;
  const out = execFileSync(cmd[0], cmd.slice(1), { maxBuffer: 1 << 20, timeout: 600000 }).toString();
  const run = JSON.parse(out.trim().split('\n').pop());
  run.loadavg_1m = Math.round(loadavg()[0] * 100) / 100;
  return run;
}

// Busy clock ticks of the whole machine, from /proc/stat.
function machineBusy() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1, 9).map(Number);
  return f.reduce((a, b) => a + b, 0) - f[3] - f[4];
}

async function quietMachine() {
  const until = Date.now() + waitQuiet * 1000;
  while (Date.now() < until) {
    const before = machineBusy();
    await sleep(2000);
    if ((machineBusy() - before) / 2 < 10) return;
  }
}

const median = (xs) => {
  const v = xs.filter((x) => typeof x === 'number').sort((a, b) => a - b);
  return v.length ? v[Math.floor((v.length - 1) / 2)] : null;
};

// The sink for --tracing runs, on the generator's core.
const sink = tracing === null ? null : spawn(...(pin ? ['taskset', ['-c', '1', process.execPath, join(root, 'scripts/bench/otlp-sink.mjs'), OTLP_SINK]] : [process.execPath, [join(root, 'scripts/bench/otlp-sink.mjs'), OTLP_SINK]]), { stdio: ['ignore', 'inherit', 'inherit'] });
if (sink) await sleep(500);

// Tracing runs measure the relay alone (the other servers export nothing).
const measured = (() => { const i = argv.indexOf('--servers'); return i >= 0 ? argv[i + 1].split(',') : tracing !== null ? ['relay'] : Object.keys(servers); })();
const results = {};
for (const sc of clusterOnly ? [] : scenarios) {
  for (const name of measured.filter((n) => !sc.servers || sc.servers.includes(n))) {
    const runs = [];
    for (let r = 0; r < (sc.once ? 1 : reps); r++) {
      if (!sc.idle) await quietMachine();
      const proc = await startServer(name);
      try {
        runs.push(loadgen(name, sc.args, proc.pid));
      } finally {
        await stopServer(proc);
      }
      process.stderr.write(`${sc.id} ${name} run ${r + 1}: ${JSON.stringify(runs.at(-1))}\n`);
    }
    results[`${sc.id}/${name}`] = runs;
  }
}

// ---- several nodes: same-node against cross-node awaited calls --------------------------------
const clusterRows = [];
const haveRedis = (() => { try { execFileSync('bash', ['-c', 'command -v redis-server']); return true; } catch { return false; } })();
if (withCluster && haveRedis) {
  const redisPort = 4190;
  const redisLog = openSync(join(root, '.run/bench', 'redis.log'), 'a');
  const redisCmd = ['redis-server', '--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  const redis = spawn(...(pin ? ['taskset', ['-c', '0', ...redisCmd]] : [redisCmd[0], redisCmd.slice(1)]), { stdio: ['ignore', redisLog, redisLog] });
  closeSync(redisLog);
  await sleep(500);
  const node = (port) => ({
    ...servers.relay,
    env: { ...servers.relay.env, RELAY_ADDR: `127.0.0.1:${port}`, RELAY_REDIS_URL: `redis://127.0.0.1:${redisPort}` },
    url: `http://127.0.0.1:${port}`,
  });
  const [a, b] = [node(4111), node(4112)];
  const runs = { same: [], cross: [] };
  try {
    for (let r = 0; r < reps; r++) {
      for (const [kind, callUrl] of [['same', a.url], ['cross', b.url]]) {
        execFileSync('redis-cli', ['-p', String(redisPort), 'flushall']);
        const pa = await startServer('relay-node-a', a);
        const pb = await startServer('relay-node-b', b);
        try {
          runs[kind].push(loadgen('relay', ['--tabs', '100', '--agents', '32', '--awaited', '--rate', '1000', '--call-url', callUrl], pa.pid, a));
        } finally {
          await stopServer(pa);
          await stopServer(pb);
        }
        process.stderr.write(`cluster ${kind} run ${r + 1}: ${JSON.stringify(runs[kind].at(-1))}\n`);
      }
    }
  } finally {
    redis.kill('SIGKILL');
  }
  results['cluster_same/relay'] = runs.same;
  results['cluster_cross/relay'] = runs.cross;
  const both = (label, f, unit = '') => clusterRows.push({ label, same: median(runs.same.map(f)), cross: median(runs.cross.map(f)), unit });
  both('awaited at 1,000/s: achieved calls/s', (x) => x.throughput_per_s);
  both('  p50 latency', (x) => x.latency_us.p50, 'µs');
  both('  p90 latency', (x) => x.latency_us.p90, 'µs');
  both('  p99 latency', (x) => x.latency_us.p99, 'µs');
  both('  max latency', (x) => x.latency_us.max, 'µs');
}

sink?.kill('SIGTERM');

// ---- the table -------------------------------------------------------------------------------
const names = Object.keys(servers);
const pick = (id, name, f) => median((results[`${id}/${name}`] ?? []).map(f));
// CPU figures of a scenario are marked when any of its runs shared the machine with more than a
// tenth of a core of other work.
const busyRuns = new Set(Object.entries(results).filter(([, runs]) => runs.some((r) => (r.other_cpu_pct ?? 0) > 10)).map(([k]) => k));
const rows = [];
const row = (label, id, f, unit = '', cpu = false) => {
  const v = Object.fromEntries(names.map((n) => [n, pick(id, n, f)]));
  const noisy = cpu && names.some((n) => busyRuns.has(`${id}/${n}`));
  rows.push({ label: noisy ? `${label} (*)` : label, ...v, unit });
};
row('awaited round trips/s (closed loop)', 'awaited_max', (x) => x.throughput_per_s);
row('  round trips per server-core second', 'awaited_max', (x) => x.calls_per_server_core_s, '', true);
row('  server CPU per call', 'awaited_max', (x) => x.server_cpu_us_per_call, 'µs', true);
row('  server context switches per call', 'awaited_max', (x) => x.server_ctx_switches_per_call);
row('  p50 latency', 'awaited_max', (x) => x.latency_us.p50, 'µs');
row('  p99 latency', 'awaited_max', (x) => x.latency_us.p99, 'µs');
row('  generator CPU', 'awaited_max', (x) => x.loadgen_cpu_pct, '%');
row('fire-and-forget calls/s (closed loop)', 'fire_max', (x) => x.throughput_per_s);
row('  server CPU per call', 'fire_max', (x) => x.server_cpu_us_per_call, 'µs', true);
for (const rate of [500, 2000, 10000]) {
  const id = `awaited_${rate}`;
  row(`awaited at ${rate.toLocaleString('en-US')}/s: achieved calls/s`, id, (x) => x.throughput_per_s);
  row('  server CPU per call', id, (x) => x.server_cpu_us_per_call, 'µs', true);
  row('  server context switches per call', id, (x) => x.server_ctx_switches_per_call);
  row('  ÷ CPU per call at saturation', id, (x) => x.server_cpu_us_per_call, '', true);
  const last = rows.at(-1);
  last.noRatio = true;
  for (const n of names) {
    const sat = pick('awaited_max', n, (x) => x.server_cpu_us_per_call);
    last[n] = last[n] != null && sat ? last[n] / sat : null;
  }
  if (rate === 2000) {
    row('  p50 latency', id, (x) => x.latency_us.p50, 'µs');
    row('  p99 latency', id, (x) => x.latency_us.p99, 'µs');
    row('  p99.9 latency', id, (x) => x.latency_us.p999, 'µs');
    row('  p99 from schedule (incl. generator timer lag)', id, (x) => x.latency_from_schedule_us?.p99, 'µs');
  }
}
row('time to bind 10,000 tabs', 'idle_10k', (x) => x.bind_ms, 'ms');
row('RSS per idle tab (10k, browser headers)', 'idle_10k', (x) => x.rss_bytes_per_tab, 'B');
row('RSS per tab after a 32 KiB emit to each', 'idle_10k', (x) => x.rss_bytes_per_tab_after_big_emit, 'B');
row('RSS with 10k tabs', 'idle_10k', (x) => x.server_rss_kib_with_tabs, 'KiB');
row('RSS per idle tab (5k)', 'burst_5k', (x) => x.rss_bytes_per_tab, 'B');
row('  3 s after a burst of 100 agents × 32 KiB to every tab', 'burst_5k', (x) => x.rss_bytes_per_tab_after_big_emit, 'B');
row('  10 s after it', 'burst_5k', (x) => x.rss_bytes_per_tab_later, 'B');
row('RSS per idle tab declaring 8 tools (10k)', 'idle_10k_handles', (x) => x.rss_bytes_per_tab, 'B');
row('time to bind and declare 10,000 tabs', 'idle_10k_handles', (x) => x.bind_ms, 'ms');
if (with50k) {
  row(`RSS per idle tab (${maxIdleTabs})`, 'idle_max', (x) => x.rss_bytes_per_tab, 'B');
  row(`RSS with ${maxIdleTabs} tabs`, 'idle_max', (x) => x.server_rss_kib_with_tabs, 'KiB');
  row(`time to bind ${maxIdleTabs} tabs`, 'idle_max', (x) => x.bind_ms, 'ms');
  const est = (name) => {
    const base = pick('idle_max', name, (x) => x.server_rss_kib_before_tabs);
    const per = pick('idle_max', name, (x) => x.rss_bytes_per_tab);
    return base != null && per != null ? (base * 1024 + per * 50000) / 2 ** 20 : null;
  };
  rows.push({ label: '50k tabs, RSS extrapolated (MiB)', ...Object.fromEntries(names.map((n) => [n, est(n)])), unit: '' });
}
const integrity = Object.entries(results).map(([k, runs]) => [k, runs.reduce((s, x) => s + (x.misrouted ?? 0), 0), runs.reduce((s, x) => s + (x.lost ?? 0), 0), runs.reduce((s, x) => s + Object.values(x.errors ?? {}).reduce((a, b) => a + b, 0), 0), runs.reduce((s, x) => s + (x.bind_failures ?? 0), 0)]);

const fmt = (v) => (v == null ? 'n/a' : Math.abs(v) >= 100 ? Math.round(v).toLocaleString('en-US') : (Math.round(v * 10) / 10).toString());
const cpu = cpus()[0]?.model ?? 'unknown CPU';
console.log(`\nMachine: ${cpus().length} × ${cpu}; pinned: ${pin ? 'server on core 0, generator on core 1' : 'no'}; ${reps} run(s) per scenario, ${secs} s measured each; medians.`);
if (tracing !== null) console.log(`Tracing on: the relay exports spans over OTLP/HTTP, sampling ${tracing} of the calls.`);
if (maxIdleTabs < 50000) console.log(`Open-file limit here: ${fdLimit}, so the idle test stops at ${maxIdleTabs} tabs; the 50k figure is extrapolated from it.`);
console.log(`Reference: Express ${'5'} + socket.io 4 on Node ${process.version}, binding by register (the common design); relay binds by handshake token.`);
console.log('Floor: hyper + tungstenite, no Socket.IO, no auth, no JSON library (relay/bench/src/floor.rs). Tabs send a browser\'s request headers.\n');
const w = Math.max(...rows.map((r) => r.label.length)) + 2;
const ratio = (a, b) => (a != null && b != null && b !== 0 ? `${(a / b).toFixed(2)}×` : '');
console.log(`${'figure'.padEnd(w)}${'relay'.padStart(14)}${'reference'.padStart(14)}${'floor'.padStart(14)}${'relay/ref'.padStart(12)}${'relay/floor'.padStart(13)}`);
for (const r of clusterOnly ? [] : rows.filter((x) => names.some((n) => x[n] != null))) {
  const unit = r.unit ? ` ${r.unit}` : '';
  const cell = (n) => (fmt(r[n]) + (r[n] == null ? '' : unit)).padStart(14);
  const ratios = r.noRatio ? '' : `${ratio(r.relay, r.reference).padStart(12)}${ratio(r.relay, r.floor).padStart(13)}`;
  console.log(`${r.label.padEnd(w)}${cell('relay')}${cell('reference')}${cell('floor')}${ratios}`);
}
if (!clusterOnly && rows.some((r) => r.label.endsWith('(*)'))) {
  console.log('(*) taken while other processes used more than a tenth of a core (other_cpu_pct in the raw results): CPU figures are not comparable; rerun on a quiet machine.');
}
if (clusterRows.length) {
  console.log('\nseveral nodes (two relays on one Redis, tabs on node A; awaited calls, 32 agents, 100 tabs):');
  console.log(`${'figure'.padEnd(w)}${'same node'.padStart(14)}${'cross node'.padStart(14)}${'extra'.padStart(12)}`);
  for (const r of clusterRows) {
    const extra = r.same != null && r.cross != null ? `${r.cross - r.same >= 0 ? '+' : ''}${fmt(r.cross - r.same)}` : '';
    console.log(`${r.label.padEnd(w)}${(fmt(r.same) + (r.unit ? ` ${r.unit}` : '')).padStart(14)}${(fmt(r.cross) + (r.unit ? ` ${r.unit}` : '')).padStart(14)}${extra.padStart(12)}`);
  }
} else {
  console.log(`\nseveral nodes: not measured (${withCluster ? 'redis-server is not installed' : '--no-cluster'})`);
}
console.log('\nintegrity (all runs): scenario/server  misrouted  lost  errors  bind-failures');
for (const [k, m, l, e, b] of integrity) console.log(`  ${k.padEnd(28)} ${String(m).padStart(6)} ${String(l).padStart(5)} ${String(e).padStart(7)} ${String(b).padStart(8)}`);

saveRaw('', { machine: { cpus: cpus().length, model: cpu }, reps, secs, results, rows });
