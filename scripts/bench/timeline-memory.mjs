// The worker's memory per session with its timeline on (`scripts/manage.sh bench --timeline`):
// a release relay and worker; SESSIONS sessions opened through the agent API (one key each), each
// then given CALLS tool calls (each a started and a settled event; the relay answers unknown_key
// at once, so no tab is needed), and the worker's resident memory read from /proc before and
// after. Run with WORKER_TIMELINE_EVENTS at its default (256) and at 0 (no timelines): the
// difference is what the timelines hold.
//   node scripts/bench/timeline-memory.mjs [--sessions 1000] [--calls 128] [--concurrency 32]
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export async function main(argv, { root, target }) {
  const opt = (name, dflt) => { const i = argv.indexOf(name); return i >= 0 ? Number(argv[i + 1]) : dflt; };
  const sessions = opt('--sessions', 1000);
  const calls = opt('--calls', 128);
  const concurrency = opt('--concurrency', 32);
  const secret = 'bench-agent-secret-0123456789abcdef';
  const rss = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;

  async function start(bin, args, env, ready) {
    const proc = spawn(bin, args, { env: { PATH: process.env.PATH, ...env }, stdio: 'ignore' });
    const until = Date.now() + 15000;
    while (Date.now() < until) {
      try { if ((await fetch(ready, { signal: AbortSignal.timeout(500) })).ok) return proc; } catch { /* not yet */ }
      await sleep(50);
    }
    proc.kill('SIGKILL');
    throw new Error(`${bin} did not start`);
  }

  /** Runs `n` jobs, `concurrency` at a time. */
  async function pool(n, job) {
    let next = 0;
    await Promise.all(Array.from({ length: concurrency }, async () => {
      while (next < n) await job(next++);
    }));
  }

  const rows = [];
  for (const events of ['256', '0']) {
    const relay = await start(join(target, 'release/relay'), [], {
      RELAY_ADDR: '127.0.0.1:4121', LIVEKIT_API_KEY: 'devkey', LIVEKIT_API_SECRET: 'bench-livekit-secret-0123456789ab',
      RELAY_AGENT_SECRET: secret, RELAY_TOKEN_MODE: 'open', RELAY_AGENT_RATE_PER_SEC: '100000000', RUST_LOG: 'warn',
    }, 'http://127.0.0.1:4121/healthz');
    const worker = await start(join(target, 'release/agent-worker'), ['serve'], {
      WORKER_ADDR: '127.0.0.1:4122', RELAY_URL: 'http://127.0.0.1:4121', RELAY_AGENT_SECRET: secret,
      LIVEKIT_API_KEY: 'devkey', LIVEKIT_API_SECRET: 'bench-livekit-secret-0123456789ab', RUST_LOG: 'warn',
      WORKER_TIMELINE_EVENTS: events,
    }, 'http://127.0.0.1:4122/healthz');
    try {
      const keys = Array.from({ length: sessions }, () => `va_${randomBytes(32).toString('hex')}`);
      const headers = (key) => ({ authorization: `Bearer ${secret}`, 'x-voice-agent-key': key, 'content-type': 'application/json' });
      await sleep(500);
      const base = rss(worker.pid);
      await pool(sessions, async (i) => { await (await fetch('http://127.0.0.1:4122/agent/tools', { headers: headers(keys[i]) })).arrayBuffer(); });
      await sleep(500);
      const opened = rss(worker.pid);
      const started = Date.now();
      await pool(sessions * calls, async (j) => {
        const key = keys[j % sessions];
        const res = await fetch('http://127.0.0.1:4122/agent/tools/OpenPopover', { method: 'POST', headers: headers(key), body: '{"message":"m"}' });
        await res.arrayBuffer();
      });
      const took = Date.now() - started;
      await sleep(1000);
      const filled = rss(worker.pid);
      rows.push({ events, base, opened, filled, perSessionOpen: (opened - base) / sessions, perSessionFilled: (filled - base) / sessions, callsPerSec: Math.round((sessions * calls) / (took / 1000)) });
    } finally {
      worker.kill('SIGKILL');
      relay.kill('SIGKILL');
      await sleep(300);
    }
  }
  console.log(`\nworker memory, ${sessions} sessions, ${calls} calls each (release build, RSS from /proc):`);
  console.log('WORKER_TIMELINE_EVENTS  RSS at start   opened: per session   after the calls: per session   calls/s');
  for (const r of rows) {
    console.log(`${r.events.padStart(22)}  ${(r.base / 2 ** 20).toFixed(1).padStart(9)} MiB  ${Math.round(r.perSessionOpen).toLocaleString('en-US').padStart(16)} B  ${Math.round(r.perSessionFilled).toLocaleString('en-US').padStart(24)} B  ${String(r.callsPerSec).padStart(8)}`);
  }
  const [on, off] = rows;
  console.log(`timelines hold ${Math.round(on.perSessionFilled - off.perSessionFilled).toLocaleString('en-US')} B per session of ${calls * 2} events (capped at ${on.events}), ${Math.round((on.perSessionFilled - off.perSessionFilled) / Math.min(calls * 2 + 3, Number(on.events)))} B per event`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const root = join(import.meta.dirname, '../..');
  await main(process.argv.slice(2), { root, target: process.env.CARGO_TARGET_DIR ?? join(root, 'target') });
}
