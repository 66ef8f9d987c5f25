// Processes of a several-node bench run: Redis, relay nodes on it, load generators driven line
// by line (`loadgen --control`), and what is read of them from /proc and from Redis.
import { spawn, execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';

export const SECRET = 'bench-worker-secret-0123456789abcdef';
// The nodes' signing keys, shared (a fixed seed: the benchmark's own, never a deployment's).
const SESSION_KEYS = 'kbench:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8';

export function logFile(root, name) {
  mkdirSync(join(root, '.run/bench/scale'), { recursive: true });
  return openSync(join(root, '.run/bench/scale', `${name}.log`), 'a');
}

async function exited(proc) {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  await new Promise((r) => proc.once('exit', r));
}

export async function kill(proc) {
  proc.kill('SIGKILL');
  await exited(proc);
}

// Processes of the bench run on core 0 (`pin`), the generators on core 1, when there are two.
const pinned = (pin, cmd) => (pin ? ['taskset', '-c', '0', ...cmd] : cmd);

export async function startRedis(root, port, { pin = false, name = 'redis', extra = [] } = {}) {
  const log = logFile(root, name);
  const cmd = pinned(pin, ['redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extra]);
  const proc = spawn(cmd[0], cmd.slice(1), { stdio: ['ignore', log, log] });
  closeSync(log);
  const until = Date.now() + 10000;
  while (Date.now() < until) {
    try { if (redisCli(port, 'ping').trim() === 'PONG') return proc; } catch { /* starting */ }
    await sleep(100);
  }
  await kill(proc);
  throw new Error(`redis-server did not start; see .run/bench/scale/${name}.log`);
}

/**
 * A Redis Cluster of `ports.length` primaries (no replicas) on loopback, every slot served:
 * `{ procs, ports, url, stop() }`. Its nodes' files go to .run/bench/scale/cluster-<port>/.
 */
export async function startRedisCluster(root, ports, { pin = false } = {}) {
  const procs = [];
  try {
    for (const port of ports) {
      const dir = join(root, '.run/bench/scale', `cluster-${port}`);
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(dir, { recursive: true });
      procs.push(await startRedis(root, port, { pin, name: `redis-cluster-${port}`, extra: ['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, 'nodes.conf'), '--dir', dir, '--cluster-node-timeout', '5000'] }));
    }
    execFileSync('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '0', '--cluster-yes'], { timeout: 30000, stdio: 'ignore' });
    const until = Date.now() + 30000;
    for (const port of ports) {
      while (!redisCli(port, 'cluster', 'info').includes('cluster_state:ok')) {
        if (Date.now() > until) throw new Error(`the Redis Cluster did not serve every slot (port ${port})`);
        await sleep(200);
      }
    }
  } catch (e) {
    for (const p of procs) await kill(p);
    throw e;
  }
  return { procs, ports, url: `redis+cluster://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`, stop: async () => { for (const p of procs) await kill(p); } };
}

export const redisCli = (port, ...args) => execFileSync('redis-cli', ['-p', String(port), ...args], { timeout: 10000, stdio: ['ignore', 'pipe', 'ignore'] }).toString();

// One `INFO` section as numbers where they are numbers.
export function redisInfo(port, section) {
  const out = {};
  for (const line of redisCli(port, 'info', section).split('\n')) {
    const [k, v] = line.trim().split(':');
    if (v !== undefined) out[k] = Number.isNaN(Number(v)) ? v : Number(v);
  }
  return out;
}

// `redis`: a port of one Redis server, a `RELAY_REDIS_URL`, or null for a node without Redis.
export function relayEnv(port, redis) {
  const url = typeof redis === 'number' ? `redis://127.0.0.1:${redis}` : redis;
  return {
    PATH: process.env.PATH,
    RELAY_ADDR: `127.0.0.1:${port}`, ...(url ? { RELAY_REDIS_URL: url } : {}),
    LIVEKIT_API_KEY: 'devkey', LIVEKIT_API_SECRET: 'bench-livekit-secret-0123456789ab',
    RELAY_WORKER_SECRET: SECRET, RELAY_SESSION_KEYS: SESSION_KEYS, RELAY_TOKEN_MODE: 'open', RELAY_TOKEN_RATE_PER_MIN: '100000000',
    RELAY_SESSION_RATE_PER_SEC: '100000000', RUST_LOG: process.env.BENCH_RUST_LOG ?? 'warn',
    // Tuning to compare, e.g. `BENCH_RELAY_BIND_CONCURRENCY=8` sets RELAY_BIND_CONCURRENCY.
    ...Object.fromEntries(Object.entries(process.env)
      .filter(([k]) => k.startsWith('BENCH_RELAY_') && k !== 'BENCH_RELAY_BIN')
      .map(([k, v]) => [k.slice('BENCH_'.length), v])),
  };
}

// The binaries measured: this tree's release build, or others named by `BENCH_RELAY_BIN` and
// `BENCH_LOADGEN_BIN` (to measure two builds with the same driver).
export const relayBin = (target) => process.env.BENCH_RELAY_BIN ?? join(target, 'release/relay');
export const loadgenBin = (target) => process.env.BENCH_LOADGEN_BIN ?? join(target, 'release/loadgen');

export async function startRelay(root, target, port, redis, { pin = false } = {}) {
  const log = logFile(root, `relay-${port}`);
  const cmd = pinned(pin, [relayBin(target)]);
  const proc = spawn(cmd[0], cmd.slice(1), { env: relayEnv(port, redis), stdio: ['ignore', log, log] });
  closeSync(log);
  const until = Date.now() + 20000;
  while (Date.now() < until) {
    if (proc.exitCode !== null) throw new Error(`relay on ${port} exited ${proc.exitCode}; see .run/bench/scale/relay-${port}.log`);
    try {
      const r = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(1000) });
      if (r.ok) return proc;
    } catch { /* starting */ }
    await sleep(100);
  }
  await kill(proc);
  throw new Error(`relay on ${port} did not become ready`);
}

// A generator driven by commands; `next(event)` resolves with its next JSON line of that event.
export function startLoadgen(root, target, name, args) {
  const log = logFile(root, name);
  const proc = spawn(loadgenBin(target), ['--control', ...args], { stdio: ['pipe', 'pipe', log] });
  closeSync(log);
  const queue = [];
  const waiting = [];
  let ended = null;
  createInterface({ input: proc.stdout }).on('line', (line) => {
    let msg;
    try { msg = JSON.parse(line); } catch { return; }
    const w = waiting.findIndex((x) => x.event === msg.event);
    if (w >= 0) waiting.splice(w, 1)[0].resolve(msg); else queue.push(msg);
  });
  proc.once('exit', (code, signal) => {
    ended = `${name} exited (${code ?? signal}); see .run/bench/scale/${name}.log`;
    for (const w of waiting.splice(0)) w.reject(new Error(ended));
  });
  return {
    proc,
    send: (line) => proc.stdin.write(`${line}\n`),
    next: (event, timeoutMs = 600000) => {
      const q = queue.findIndex((x) => x.event === event);
      if (q >= 0) return Promise.resolve(queue.splice(q, 1)[0]);
      if (ended) return Promise.reject(new Error(ended));
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`${name}: no ${event} within ${timeoutMs} ms`)), timeoutMs);
        waiting.push({ event, resolve: (m) => { clearTimeout(timer); resolve(m); }, reject });
      });
    },
    stop: async () => { try { proc.stdin.end('exit\n'); } catch { /* gone */ } await Promise.race([exited(proc), sleep(5000)]); await kill(proc); },
  };
}

export function rssKib(pid) {
  try {
    const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/);
    return m ? Number(m[1]) : null;
  } catch { return null; }
}

// utime + stime clock ticks (1/100 s).
export function cpuTicks(pid) {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(')').pop().trim().split(/\s+/);
    return Number(f[11]) + Number(f[12]);
  } catch { return null; }
}

// Voluntary context switches of a process's live threads (each one a sleep, woken again later).
export function sleeps(pid) {
  let n = 0;
  try {
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      try {
        const m = readFileSync(`/proc/${pid}/task/${task}/status`, 'utf8').match(/^voluntary_ctxt_switches:\s+(\d+)/m);
        if (m) n += Number(m[1]);
      } catch { /* a thread that ended meanwhile */ }
    }
  } catch { return null; }
  return n;
}

// Merges `[µs, count]` lists and reads percentiles.
export function percentiles(lists) {
  const all = lists.flat().sort((a, b) => a[0] - b[0]);
  const n = all.reduce((s, [, c]) => s + c, 0);
  if (!n) return null;
  const at = (q) => { let seen = 0; for (const [v, c] of all) { seen += c; if (seen >= q * n) return v; } return all.at(-1)[0]; };
  return { n, p50: at(0.5), p90: at(0.9), p99: at(0.99), p999: at(0.999), max: all.at(-1)[0] };
}

export const sumErrors = (maps) => {
  const out = {};
  for (const m of maps) for (const [k, v] of Object.entries(m ?? {})) out[k] = (out[k] ?? 0) + v;
  return out;
};

// The kernel's count of connections dropped because a listener's accept queue was full.
export function listenOverflows() {
  const lines = readFileSync('/proc/net/netstat', 'utf8').split('\n').filter((l) => l.startsWith('TcpExt:'));
  const [names, values] = lines.map((l) => l.trim().split(/\s+/));
  const i = names.indexOf('ListenOverflows');
  return i > 0 ? Number(values[i]) : null;
}
