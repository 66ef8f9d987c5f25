// How soon a call waiting for its tab goes out once the tab binds again on another node: the
// bind's key event reaching the node that holds the call, which then sends the call to the tab's
// node. Two relays, A and B, on Redis (one server, or a Redis Cluster of three primaries and
// three replicas, as the black-box suites start it), tabs of the official socket.io-client, each
// with its own key, bound on A, and their agents calling through B. Each tab, concurrently with
// the others, does rounds of: its socket closes and its key goes offline, its agent posts an
// awaited call to B, which waits for the key, and the tab connects to A again with its token.
// Timed from the tab's connection (its bind done: the handshake carries the token) to the
// call's arrival in the tab, and to the call's answer at the agent.
//
//   node scripts/bench.mjs --wake [--redis one|cluster|one,cluster] [--tabs 20] [--rounds 50]
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { eventually, nodeSecrets, startRelay, startRedis } from '../../e2e/harness/index.mjs';
import { startRedisCluster } from '../../e2e/harness/redis-cluster.mjs';

const CALL_TIMEOUT_MS = 5000;
/** How long the call has, once posted, to be admitted and waiting before the tab comes back. */
const SETTLE_MS = 40;

const log = (...a) => process.stderr.write(`${a.join(' ')}\n`);

const pct = (xs, q) => {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * q))];
};
const ms = (v) => (v === null ? '–' : `${v.toFixed(2)} ms`);

/** One tab's rounds (its own key) between A, where it binds, and B, where its calls wait. */
async function lane(io, A, B, rounds, out) {
  const minted = await A.token();
  const headers = { authorization: `Bearer ${minted.agentToken}`, 'content-type': 'application/json' };
  let arrived = null;
  const open = () => new Promise((resolve, reject) => {
    const socket = io(A.url, { transports: ['websocket'], auth: { token: minted.token }, forceNew: true, reconnection: false });
    socket.on('voice-agent:wake', (params, meta, ack) => {
      arrived?.(params);
      ack?.({ ok: true, result: { n: params.n } });
    });
    socket.once('connect', () => resolve({ socket, at: performance.now() }));
    socket.once('connect_error', (e) => reject(new Error(`the tab's connection was refused: ${e.data?.code ?? e.message}`)));
  });
  let tab = (await open()).socket;
  for (let n = 0; n < rounds; n += 1) {
    tab.close();
    await B.waitState(minted.apiKey, 'offline', 5000);
    const got = new Promise((resolve) => { arrived = resolve; });
    const call = fetch(`${B.url}/api/voice-agent/tool-call`, {
      method: 'POST', headers, signal: AbortSignal.timeout(CALL_TIMEOUT_MS + 5000),
      body: JSON.stringify({ apiKey: minted.apiKey, toolName: 'wake', params: { n }, awaitResult: true, timeoutMs: CALL_TIMEOUT_MS }),
    }).then(async (r) => ({ status: r.status, body: await r.json().catch(() => null), at: performance.now() }));
    await sleep(SETTLE_MS);
    const back = await open();
    tab = back.socket;
    const params = await Promise.race([got, sleep(CALL_TIMEOUT_MS + 1000).then(() => null)]);
    const woke = performance.now();
    const r = await call;
    if (params === null || r.status !== 200) {
      const why = params === null ? `not delivered (${r.status})` : String(r.status);
      out.failed[why] = (out.failed[why] ?? 0) + 1;
      continue;
    }
    if (params.n !== n || r.body?.result?.n !== n) out.misrouted += 1;
    out.woken_ms.push(woke - back.at);
    out.answered_ms.push(r.at - back.at);
  }
  tab.close();
}

/** One kind of Redis: `lanes` tabs of `rounds` rounds each, the latencies and what went wrong. */
async function onRedis(io, kind, lanes, rounds, bin) {
  const redis = kind === 'cluster' ? await startRedisCluster() : await startRedis();
  const nodes = [];
  const out = { redis: kind, lanes, rounds, woken_ms: [], answered_ms: [], failed: {}, misrouted: 0 };
  try {
    const env = { ...nodeSecrets(), RUST_LOG: 'info', RELAY_REDIS_URL: redis.url, RELAY_RECONNECT_GRACE_MS: '60000', RELAY_SESSION_RATE_PER_SEC: '1000', RELAY_TOKEN_RATE_PER_MIN: '100000' };
    for (const name of ['wake-a', 'wake-b']) {
      const relay = await startRelay(env, { name, bin });
      await eventually(async () => (await fetch(`${relay.url}/readyz`).catch(() => null))?.ok, `${name} to be ready`, 15000, 50);
      nodes.push(relay);
    }
    // Both nodes share the session keys and the worker's secret, so either takes the other's.
    const [A, B] = nodes;
    await Promise.all(Array.from({ length: lanes }, () => lane(io, A, B, rounds, out)));
  } finally {
    for (const node of nodes) await node.stop().catch((e) => log(`${node.name}: ${e.message}`));
    await redis.stop();
  }
  return out;
}

export async function wake(ctx, argv) {
  const opt = (name, dflt) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : dflt; };
  const kinds = opt('--redis', 'one,cluster').split(',');
  for (const k of kinds) if (!['one', 'cluster'].includes(k)) throw new Error(`--redis one|cluster|one,cluster, not ${k}`);
  const rounds = Number(opt('--rounds', '50'));
  const lanes = Number(opt('--tabs', '20'));
  const bin = process.env.BENCH_RELAY_BIN ?? join(ctx.target, 'release/relay');
  const { io } = createRequire(join(ctx.root, 'e2e/package.json'))('socket.io-client');
  const results = [];
  for (const kind of kinds) {
    log(`wake: ${lanes} tabs, ${rounds} rounds each, on ${kind === 'cluster' ? 'a Redis Cluster' : 'one Redis server'}`);
    const r = await onRedis(io, kind, lanes, rounds, bin);
    results.push(r);
    const failed = Object.entries(r.failed).map(([k, v]) => `${v} × ${k}`).join(', ') || '0';
    console.log(`${kind === 'cluster' ? 'Redis Cluster' : 'one Redis server'}: from the bind to the call in the tab p50 ${ms(pct(r.woken_ms, 0.5))}, p90 ${ms(pct(r.woken_ms, 0.9))}, max ${ms(pct(r.woken_ms, 1))}; the call answered ${ms(pct(r.answered_ms, 0.5))} (p50) after the tab came back; ${r.woken_ms.length} of ${lanes * rounds} delivered, failed ${failed}, misrouted ${r.misrouted}`);
  }
  return results;
}
