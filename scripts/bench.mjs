#!/usr/bin/env node
// The benchmark behind `scripts/manage.sh bench`: runs the same load generator against the relay
// and against the reference server (the seed's Express + socket.io design), each scenario on a
// fresh server process, server and generator pinned to different cores when there are two,
// repeated (3 times by default) and reported as medians with the ratio relay/reference.
//
//   node scripts/bench.mjs [--reps 3] [--secs 10] [--quick] [--no-50k] [--no-cluster] [--cluster-only]
//
// With redis-server installed it also measures the several-node mode: two relays on one Redis,
// tabs bound on node A, the same load posted to node A (same node) and to node B (cross node).
//
// Results (every run's JSON) are written to .run/bench/<timestamp>.json.
import { spawn, execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const target = process.env.CARGO_TARGET_DIR ?? join(root, 'target');
const argv = process.argv.slice(2);
const flag = (name) => argv.includes(name);
const opt = (name, dflt) => { const i = argv.indexOf(name); return i >= 0 ? Number(argv[i + 1]) : dflt; };
const quick = flag('--quick');
const reps = opt('--reps', quick ? 1 : 3);
const secs = opt('--secs', quick ? 3 : 10);
const clusterOnly = flag('--cluster-only');
const with50k = !flag('--no-50k') && !quick && !clusterOnly;
const withCluster = !flag('--no-cluster');
const pin = cpus().length >= 2;
// Each tab is one descriptor in the server and one in the generator; a sandbox may cap that.
const fdLimit = Number(execFileSync('bash', ['-c', 'ulimit -n']).toString().trim()) || 1024;
const maxIdleTabs = Math.min(50000, fdLimit - 1000);
const SECRET = 'bench-agent-secret-0123456789abcdef';

const servers = {
  relay: {
    cmd: [join(target, 'release/relay')],
    env: {
      RELAY_ADDR: '127.0.0.1:4101', LIVEKIT_API_KEY: 'devkey', LIVEKIT_API_SECRET: 'bench-livekit-secret-0123456789ab',
      RELAY_AGENT_SECRET: SECRET, RELAY_TOKEN_MODE: 'open', RELAY_TOKEN_RATE_PER_MIN: '100000000', RELAY_AGENT_RATE_PER_SEC: '100000000',
      RELAY_MAX_INFLIGHT_PER_KEY: '100000', RUST_LOG: 'warn',
    },
    url: 'http://127.0.0.1:4101',
    bind: 'token',
  },
  reference: {
    cmd: ['node', join(root, 'relay/bench/reference/server.mjs')],
    env: { REF_ADDR: '127.0.0.1:4201', RELAY_AGENT_SECRET: SECRET },
    url: 'http://127.0.0.1:4201',
    bind: 'register',
  },
};

const scenarios = [
  { id: 'awaited_max', title: 'awaited, closed loop (64 agents, 100 tabs)', args: ['--tabs', '100', '--agents', '64', '--awaited'] },
  { id: 'fire_max', title: 'fire-and-forget, closed loop (64 agents, 100 tabs)', args: ['--tabs', '100', '--agents', '64'] },
  { id: 'awaited_2000', title: 'awaited at 2,000 calls/s (32 agents, 100 tabs)', args: ['--tabs', '100', '--agents', '32', '--awaited', '--rate', '2000'] },
  { id: 'idle_10k', title: '10,000 idle tabs', args: ['--tabs', '10000', '--agents', '0', '--settle-secs', '3'], idle: true },
  ...(with50k ? [{ id: 'idle_max', title: `${maxIdleTabs} idle tabs`, args: ['--tabs', String(maxIdleTabs), '--agents', '0', '--settle-secs', '3', '--connect-concurrency', '400'], idle: true }] : []),
];

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
  const full = [join(target, 'release/loadgen'), '--url', s.url, '--secret', SECRET, '--label', name, '--bind', s.bind,
    '--server-pid', String(pid), '--duration-secs', String(secs), ...args];
  const cmd = pin ? ['taskset', '-c', '1', ...full] : full;
  const out = execFileSync(cmd[0], cmd.slice(1), { maxBuffer: 1 << 20, timeout: 600000 }).toString();
  return JSON.parse(out.trim().split('\n').pop());
}

const median = (xs) => {
  const v = xs.filter((x) => typeof x === 'number').sort((a, b) => a - b);
  return v.length ? v[Math.floor((v.length - 1) / 2)] : null;
};

const results = {};
for (const sc of clusterOnly ? [] : scenarios) {
  for (const name of Object.keys(servers)) {
    const runs = [];
    for (let r = 0; r < (sc.once ? 1 : reps); r++) {
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

// ---- the table -------------------------------------------------------------------------------
const pick = (id, name, f) => median((results[`${id}/${name}`] ?? []).map(f));
const rows = [];
const row = (label, id, f, better, unit = '') => {
  const a = pick(id, 'relay', f);
  const b = pick(id, 'reference', f);
  const ratio = a != null && b != null && b !== 0 ? a / b : null;
  rows.push({ label, relay: a, reference: b, ratio, better, unit });
};
row('awaited round trips/s (closed loop)', 'awaited_max', (x) => x.throughput_per_s, 'higher');
row('  p50 latency', 'awaited_max', (x) => x.latency_us.p50, 'lower', 'µs');
row('  p99 latency', 'awaited_max', (x) => x.latency_us.p99, 'lower', 'µs');
row('  server CPU (one core = 100)', 'awaited_max', (x) => x.server_cpu_pct, 'lower', '%');
row('  round trips per server-core second', 'awaited_max', (x) => x.calls_per_server_core_s, 'higher');
row('  generator CPU', 'awaited_max', (x) => x.loadgen_cpu_pct, '', '%');
row('fire-and-forget calls/s (closed loop)', 'fire_max', (x) => x.throughput_per_s, 'higher');
row('  p99 latency', 'fire_max', (x) => x.latency_us.p99, 'lower', 'µs');
row('  server CPU', 'fire_max', (x) => x.server_cpu_pct, 'lower', '%');
row('awaited at 2,000/s: achieved calls/s', 'awaited_2000', (x) => x.throughput_per_s, '');
row('  p50 latency', 'awaited_2000', (x) => x.latency_us.p50, 'lower', 'µs');
row('  p90 latency', 'awaited_2000', (x) => x.latency_us.p90, 'lower', 'µs');
row('  p99 latency', 'awaited_2000', (x) => x.latency_us.p99, 'lower', 'µs');
row('  p99.9 latency', 'awaited_2000', (x) => x.latency_us.p999, 'lower', 'µs');
row('  max latency', 'awaited_2000', (x) => x.latency_us.max, 'lower', 'µs');
row('  p99 from schedule (incl. generator timer lag)', 'awaited_2000', (x) => x.latency_from_schedule_us?.p99, 'lower', 'µs');
row('  server CPU', 'awaited_2000', (x) => x.server_cpu_pct, 'lower', '%');
row('time to bind 10,000 tabs', 'idle_10k', (x) => x.bind_ms, 'lower', 'ms');
row('RSS per idle tab (10k)', 'idle_10k', (x) => x.rss_bytes_per_tab, 'lower', 'B');
row('RSS with 10k tabs', 'idle_10k', (x) => x.server_rss_kib_with_tabs, 'lower', 'KiB');
if (with50k) {
  row(`RSS per idle tab (${maxIdleTabs})`, 'idle_max', (x) => x.rss_bytes_per_tab, 'lower', 'B');
  row(`RSS with ${maxIdleTabs} tabs`, 'idle_max', (x) => x.server_rss_kib_with_tabs, 'lower', 'KiB');
  row(`time to bind ${maxIdleTabs} tabs`, 'idle_max', (x) => x.bind_ms, 'lower', 'ms');
  const est = (name) => {
    const base = pick('idle_max', name, (x) => x.server_rss_kib_before_tabs);
    const per = pick('idle_max', name, (x) => x.rss_bytes_per_tab);
    return base != null && per != null ? (base * 1024 + per * 50000) / 2 ** 20 : null;
  };
  rows.push({ label: '50k tabs, RSS extrapolated (MiB)', relay: est('relay'), reference: est('reference'), ratio: est('relay') / est('reference'), unit: '' });
}
const integrity = Object.entries(results).map(([k, runs]) => [k, runs.reduce((s, x) => s + (x.misrouted ?? 0), 0), runs.reduce((s, x) => s + (x.lost ?? 0), 0), runs.reduce((s, x) => s + Object.values(x.errors ?? {}).reduce((a, b) => a + b, 0), 0), runs.reduce((s, x) => s + (x.bind_failures ?? 0), 0)]);

const fmt = (v) => (v == null ? 'n/a' : Math.abs(v) >= 100 ? Math.round(v).toLocaleString('en-US') : (Math.round(v * 10) / 10).toString());
const cpu = cpus()[0]?.model ?? 'unknown CPU';
console.log(`\nMachine: ${cpus().length} × ${cpu}; pinned: ${pin ? 'server on core 0, generator on core 1' : 'no'}; ${reps} run(s) per scenario, ${secs} s measured each; medians.`);
if (maxIdleTabs < 50000) console.log(`Open-file limit here: ${fdLimit}, so the idle test stops at ${maxIdleTabs} tabs; the 50k figure is extrapolated from it.`);
console.log(`Reference: Express ${'5'} + socket.io 4 on Node ${process.version}, binding by register (the seed's design); relay binds by handshake token.\n`);
const w = Math.max(...rows.map((r) => r.label.length)) + 2;
console.log(`${'figure'.padEnd(w)}${'relay'.padStart(14)}${'reference'.padStart(14)}${'relay/ref'.padStart(12)}`);
for (const r of clusterOnly ? [] : rows) {
  const unit = r.unit ? ` ${r.unit}` : '';
  console.log(`${r.label.padEnd(w)}${(fmt(r.relay) + unit).padStart(14)}${(fmt(r.reference) + unit).padStart(14)}${(r.ratio == null ? '' : `${r.ratio.toFixed(2)}×`).padStart(12)}`);
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

mkdirSync(join(root, '.run/bench'), { recursive: true });
const file = join(root, '.run/bench', `${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
writeFileSync(file, JSON.stringify({ machine: { cpus: cpus().length, model: cpu }, reps, secs, results, rows }, null, 2));
console.log(`\nraw results: ${file}`);
