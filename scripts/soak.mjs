#!/usr/bin/env node
// The soak behind `scripts/manage.sh bench --soak MINUTES`: tabs (the official socket.io-client)
// connect, bind, drop and reconnect within the reconnect grace and beyond it, are replaced by a
// second tab with the same token and revoked by the agent side, while agents make calls of every
// outcome (answered, tab error, never answered, fire-and-forget, unknown key) with idempotent
// retries. On one relay and on three relays sharing one Redis (when redis-server is installed).
//
//   node scripts/soak.mjs [--minutes 1] [--tabs 24] [--agents 6] [--nodes 1|3|both] [--bin PATH]
//                         [--failover-every S] [--redis one|cluster]
//
// With --redis cluster, the three nodes share a Redis Cluster of three primaries and three
// replicas (redis+cluster://) instead of one server.
//
// With --failover-every S, the three nodes share a primary + replica watched by three sentinels
// (redis+sentinel://), and every S seconds the primary fails over, by turns with SENTINEL
// FAILOVER and with SIGKILL (the killed server then comes back as a replica). Calls, token
// requests and churn that fail with 503 `unavailable` (or time out) around a failover are
// counted per failover, with how long calls failed, instead of as unexpected.
//
// At the end it checks: 0 misrouted, 0 lost, 0 duplicated; every answer from the error table
// (never a 500 or a hang); the relay's resident memory within 5% of its value after the warm-up
// (the first third of the run, and at least the idempotency window: until then the relay's
// replay outcomes grow by design, so short runs shorten the window, RELAY_IDEMPOTENCY_WINDOW_SECS,
// to a sixth of the run; runs of 30 minutes and more keep the default 5 minutes); and, once
// every tab is closed and the grace is over, no bound
// key, no connected socket, no call in flight and no acknowledgement pending, with the keys it
// still knows being only the revoked tombstones it must keep until their tokens expire.
// Exit status 1 when a check fails. Raw figures go to .run/bench/soak-<time>.json.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createHash, randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
// Relays and Redis come from the black-box suites' harness (e2e/harness), like every test's.
import { startRelay as launchRelay, startRedis, startSentinels } from '../e2e/harness/index.mjs';
import { startRedisCluster } from '../e2e/harness/redis-cluster.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { io } = createRequire(join(root, 'e2e/package.json'))('socket.io-client');
const argv = process.argv.slice(2);
const opt = (name, dflt) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : dflt; };
const minutes = Number(opt('--minutes', '1'));
const tabCount = Number(opt('--tabs', '24'));
const agentCount = Number(opt('--agents', '6'));
const nodesOpt = opt('--nodes', 'both');
const failoverEvery = Number(opt('--failover-every', '0'));
const redisKind = opt('--redis', 'one');
if (!['one', 'cluster'].includes(redisKind)) throw new Error(`--redis one|cluster, not ${redisKind}`);
if (redisKind === 'cluster' && failoverEvery > 0) throw new Error('--failover-every runs on sentinels, not with --redis cluster');
const bin = opt('--bin', join(process.env.CARGO_TARGET_DIR ?? join(root, 'target'), 'release/relay'));
const GRACE_MS = 1500;
const CALL_TIMEOUT_MS = 800;
// Replay outcomes are kept this long; the RSS check starts once the window is full.
const IDEM_WINDOW_S = Math.min(300, Math.max(5, Math.floor(minutes * 60 / 6)));
const WARMUP_MS = Math.max(minutes * 60000 / 3, (IDEM_WINDOW_S + 10) * 1000);
const SECRET = `soak-${randomBytes(16).toString('hex')}`;
// The nodes' signing keys (each node verifies the tokens the others mint).
const SESSION_KEYS = `k1:${randomBytes(32).toString('base64url')}`;
const reportDir = join(root, '.run/bench');
mkdirSync(reportDir, { recursive: true });

const pick = (xs) => xs[Math.floor(Math.random() * xs.length)];
const fp = (key) => createHash('sha256').update(key).digest('hex').slice(0, 8);
/** Times this process stood still for a second or more (a 100 ms timer that fired that late). */
const stalls = {
  seen: [],
  start() {
    this.seen = [];
    let last = Date.now();
    this.timer = setInterval(() => {
      const now = Date.now();
      if (now - last >= 1100) this.seen.push({ from: last, to: now });
      last = now;
    }, 100);
  },
  stop() { clearInterval(this.timer); },
  /** Whether a stall overlapped [from, to]. */
  during(from, to) { return this.seen.some((x) => x.from <= to && x.to >= from); },
};
/** A tab's recent steps (time, what, node), for the report of a step that went wrong. */
const note = (slot, what, node) => { slot.history.push([Date.now(), what, node?.name ?? '']); if (slot.history.length > 12) slot.history.shift(); };
const rssKb = (pid) => Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);

async function until(what, ms, check) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await sleep(50);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

/** A relay node for the soak: the harness's launch (its log is searched for the soak's secrets
 * when it stops), with the soak's short timeouts and windows. */
async function startRelay(name, extra) {
  const relay = await launchRelay({
    RUST_LOG: 'info', LIVEKIT_API_SECRET: 'soak-livekit-secret-0123456789abcdef',
    RELAY_WORKER_SECRET: SECRET, RELAY_SESSION_KEYS: SESSION_KEYS, RELAY_TOKEN_MODE: 'open', RELAY_ALLOW_BARE_KEYS: 'false',
    RELAY_TOKEN_RATE_PER_MIN: '1000000', RELAY_SESSION_RATE_PER_SEC: '1000000', RELAY_SESSION_MAX_INFLIGHT: '15',
    RELAY_RECONNECT_GRACE_MS: String(GRACE_MS), RELAY_UNBOUND_KEY_TTL_SECS: '2', RELAY_TOKEN_TTL_SECS: '3600',
    RELAY_DEFAULT_TIMEOUT_MS: '2000', RELAY_MAX_TIMEOUT_MS: '2000', RELAY_IDEMPOTENCY_WINDOW_SECS: String(IDEM_WINDOW_S),
    ...extra,
  }, { name: `soak-${name}`, bin });
  await until(`${name} to be ready`, 15000, async () => (await fetch(`${relay.url}/readyz`).catch(() => null))?.ok);
  return relay;
}

async function api(url, path, init = {}, ms = CALL_TIMEOUT_MS + 10000) {
  const res = await fetch(url + path, { ...init, signal: AbortSignal.timeout(ms) });
  const text = await res.text();
  let body;
  try { body = JSON.parse(text); } catch { body = text; }
  return { status: res.status, body, text };
}

async function metrics(url) {
  const text = (await api(url, '/metrics')).text;
  const get = (name) => Number(text.match(new RegExp(`^relay_${name}(?:_total)? (\\d+)`, 'm'))?.[1] ?? NaN);
  return {
    known: get('known_keys'), bound: get('bound_keys'), tabs: get('connected_tabs'),
    inflight: get('calls_in_flight'), pending: get('acks_pending'), cancellable: get('calls_cancellable'),
  };
}

async function run(mode) {
  const nodes = [];
  let redis;
  let failover;
  if (mode === 3 && failoverEvery > 0) {
    failover = await startFailovers();
    redis = failover.redis;
    for (const n of ['a', 'b', 'c']) nodes.push(await startRelay(`relay-${n}`, { RELAY_REDIS_URL: redis.url }));
  } else if (mode === 3) {
    redis = redisKind === 'cluster' ? await startRedisCluster() : await startRedis();
    for (const n of ['a', 'b', 'c']) nodes.push(await startRelay(`relay-${n}`, { RELAY_REDIS_URL: redis.url }));
  } else {
    nodes.push(await startRelay('relay', {}));
  }
  const stats = {
    mode: mode === 3 ? `three nodes on ${redisKind === 'cluster' ? 'a Redis Cluster' : 'Redis'}` : 'one node', calls: 0, byOutcome: {}, retries: 0, retryMismatch: 0,
    churn: { within: 0, beyond: 0, replace: 0, revoke: 0 }, misrouted: 0, lost: 0, duplicated: 0, unexpected: [],
  };
  const deliveries = new Map(); // seq → [{sid, answered}]
  const fired = []; // fire-and-forget calls that got 200: {seq, slot, at}
  let seq = 0;
  let stopping = false;
  // The worker's credential revokes; each call carries the agent's token of its slot's key.
  const workerHeaders = { authorization: `Bearer ${SECRET}`, 'content-type': 'application/json' };

  // ---- tabs ----
  const slots = [];
  function attach(slot, socket) {
    const sid = () => socket.id;
    socket.on('connect', () => note(slot, `connected ${socket.id}`));
    socket.on('connect_error', (e) => {
      note(slot, `connect_error ${e.data?.code ?? e.message}`);
      // As the browser client (web/client/src/client.ts) does: a refused handshake is not
      // retried by socket.io-client itself; unless the key is gone or the token refused, the
      // tab tries again a second later (a store briefly unavailable in a failover, say).
      if (!e.data) return;
      if (['unknown_key', 'unauthorized'].includes(e.data.code)) { socket.hungUp = true; return; }
      setTimeout(() => {
        if (!stopping && slot.socket === socket && !socket.hungUp && !socket.connected) socket.connect();
      }, 1000);
    });
    socket.on('disconnect', (reason) => note(slot, `disconnect ${reason}`));
    socket.on('voice-agent:soak', (params, meta, ack) => {
      const list = deliveries.get(params.seq) ?? [];
      deliveries.set(params.seq, list);
      const answered = params.outcome === 'ok' || params.outcome === 'error';
      list.push({ sid: sid(), answered, slot, at: Date.now() });
      if (params.key !== slot.apiKey) stats.misrouted++;
      if (params.outcome === 'ok') ack?.({ ok: true, result: { seq: params.seq, key: slot.apiKey } });
      else if (params.outcome === 'error') ack?.({ ok: false, error: { code: 'soak_error', message: `seq ${params.seq}` } });
      // 'slow': never answered; the relay times out and sends cancel.
    });
    socket.on('voice-agent:soakf', (params) => {
      const list = deliveries.get(params.seq) ?? [];
      deliveries.set(params.seq, list);
      list.push({ sid: sid(), answered: true, slot, at: Date.now() });
      if (params.key !== slot.apiKey) stats.misrouted++;
    });
  }
  async function freshToken(slot) {
    const node = pick(nodes);
    const t = await api(node.url, '/token', { method: 'POST' });
    if (t.status !== 200) throw new Error(`token: ${t.status} ${t.text}`);
    slot.token = t.body.token;
    slot.apiKey = t.body.apiKey;
    slot.agentToken = t.body.agentToken;
    note(slot, `token ${fp(slot.apiKey)}`, node);
  }
  /** The soak drops a tab's socket for good (it is never retried). */
  const hangUp = (socket) => { socket.hungUp = true; socket.close(); };
  /** What went wrong for a tab, with its recent steps and the failovers' times. */
  const story = (slot, what) => `${what} (key ${fp(slot.apiKey)}; ${failover?.when(Date.now()) ?? ''}; steps ${JSON.stringify(slot.history.map(([t, w, n]) => [new Date(t).toISOString().slice(11, 23), w, n]))})`;
  async function connect(slot, node = pick(nodes)) {
    note(slot, 'connect', node);
    const socket = io(node.url, {
      transports: ['websocket'], auth: { token: slot.token }, forceNew: true,
      reconnection: true, reconnectionDelay: 100, reconnectionDelayMax: 300, timeout: 5000,
    });
    attach(slot, socket);
    await new Promise((resolveC, reject) => {
      socket.once('connect', resolveC);
      socket.once('connect_error', (e) => {
        hangUp(socket);
        reject(new Error(`connect_error ${e.data?.code ?? e.message}`));
      });
    });
    return socket;
  }
  for (let i = 0; i < tabCount; i++) {
    const slot = { i, churnAt: [], busy: false, history: [] };
    await freshToken(slot);
    slot.socket = await connect(slot);
    slots.push(slot);
  }

  // ---- churn ----
  const churn = async () => {
    while (!stopping) {
      await sleep(150 + Math.random() * 150);
      const slot = pick(slots.filter((s) => !s.busy));
      if (!slot) continue;
      slot.busy = true;
      slot.churnAt.push(Date.now());
      try {
        if (slot.socket.hungUp) {
          // A step that failed in a failover left this tab without a socket: it starts again,
          // as a page whose connection gave up would be reloaded.
          await freshToken(slot);
          slot.socket = await connect(slot);
        }
        const action = pick(['within', 'within', 'beyond', 'replace', 'revoke']);
        stats.churn[action]++;
        note(slot, action);
        if (action === 'within') {
          // The transport drops; socket.io-client reconnects and re-binds with its token.
          slot.socket.io.engine.close();
          await until('a reconnect', 5000, () => slot.socket.connected);
        } else if (action === 'beyond') {
          hangUp(slot.socket);
          await sleep(GRACE_MS + 600);
          await freshToken(slot);
          slot.socket = await connect(slot);
        } else if (action === 'replace') {
          const old = slot.socket;
          slot.socket = await connect(slot);
          await until('the replaced tab to be dropped', 5000, () => !old.connected);
          hangUp(old);
        } else {
          const via = pick(nodes);
          const r = await api(via.url, `/api/voice-agent/keys/${slot.apiKey}`, { method: 'DELETE', headers: workerHeaders });
          note(slot, `revoke ${r.status}`, via);
          if (r.status !== 200 && failover?.near(Date.now())) throw new Error(`revoke ${r.status} in a failover`);
          if (r.status !== 200) stats.unexpected.push(story(slot, `revoke ${r.status}`));
          await until('the revoked tab to be dropped', 5000, () => !slot.socket.connected);
          hangUp(slot.socket);
          await freshToken(slot);
          slot.socket = await connect(slot);
        }
        slot.churnAt.push(Date.now());
      } catch (e) {
        // A step fails in a failover when it began or failed in one (a step waits up to 5 s).
        if (failover?.near(slot.churnAt.at(-1)) || failover?.near(Date.now())) failover.churnFailed++;
        else stats.unexpected.push(story(slot, `churn: ${e.message}`));
      } finally {
        slot.busy = false;
      }
    }
  };

  // ---- agents ----
  const expected = {
    ok: [200, 409, 404], error: [502, 409, 404], slow: [504, 409, 404], fire: [200, 409, 404], stranger: [403],
  };
  const agent = async () => {
    while (!stopping) {
      const slot = pick(slots);
      const outcome = pick(['ok', 'ok', 'ok', 'error', 'slow', 'fire', 'fire', 'stranger']);
      const n = ++seq;
      const apiKey = outcome === 'stranger' ? `va_${randomBytes(32).toString('hex')}` : slot.apiKey;
      const awaited = outcome !== 'fire';
      const body = JSON.stringify({
        apiKey, toolName: awaited ? 'soak' : 'soakf', params: { seq: n, key: apiKey, outcome },
        awaitResult: awaited, timeoutMs: CALL_TIMEOUT_MS,
      });
      // A quarter of the calls carry an Idempotency-Key and are retried; the relay keeps their
      // outcomes for its 5-minute window, which a short run sees as growth.
      const retry = Math.random() < 0.25;
      // A call to another key (a stranger's) with this slot's token: refused before any lookup.
      const agentHeaders = { authorization: `Bearer ${slot.agentToken}`, 'content-type': 'application/json' };
      const headers = retry ? { ...agentHeaders, 'idempotency-key': `soak-${n}` } : agentHeaders;
      const via = pick(nodes);
      const at = Date.now();
      let r;
      try {
        r = await api(via.url, '/api/voice-agent/tool-call', { method: 'POST', headers, body });
      } catch (e) {
        stats.unexpected.push(`call ${outcome}: ${e.message}`);
        continue;
      }
      stats.calls++;
      if (failover?.count(outcome, r, at)) continue;
      const key = `${outcome}:${r.status}`;
      stats.byOutcome[key] = (stats.byOutcome[key] ?? 0) + 1;
      // A tab dropped, replaced or revoked while it held an awaited call may leave the call to
      // time out (the redelivery to its next socket can come too late for a short timeout).
      const churned = () => slot.churnAt.some((t) => t >= at - 2000 && t <= Date.now() + 2000) || slot.busy;
      if (!expected[outcome].includes(r.status)) {
        if (r.status === 504 && awaited && churned()) stats.timedOutInChurn = (stats.timedOutInChurn ?? 0) + 1;
        // The tabs answer from this process: when it (or the whole machine) stood still for a
        // second or more, a call's timeout may pass for that alone.
        else if (r.status === 504 && stalls.during(at, Date.now())) stats.timedOutInStall = (stats.timedOutInStall ?? 0) + 1;
        else stats.unexpected.push(`${outcome} → ${r.status} ${r.text.slice(0, 120)}`);
      }
      if (outcome === 'ok' && r.status === 200 && (r.body.result?.seq !== n || r.body.result?.key !== apiKey)) stats.misrouted++;
      if (outcome === 'fire' && r.status === 200) fired.push({ seq: n, slot, at });
      // An idempotent retry, on any node: the same outcome byte for byte, nothing emitted again.
      if (retry) {
        stats.retries++;
        const again = await api(pick(nodes).url, '/api/voice-agent/tool-call', { method: 'POST', headers, body }).catch((e) => ({ status: 0, text: e.message }));
        if (again.status === 503 && failover?.near(at)) continue;
        if ((again.status !== r.status || again.text !== r.text) && failover?.near(at)) {
          // The first call's outcome went to the old primary in its last moment (see
          // startFailovers): the retry ran the call again. Counted apart, as duplicates are.
          failover.ranAgain.push({ at, first: r.status, again: again.status });
          continue;
        }
        if (again.status !== r.status || again.text !== r.text) {
          stats.retryMismatch++;
          stats.unexpected.push(`retry of ${outcome}: ${r.status} then ${again.status} ${String(again.text).slice(0, 160)}`);
        }
      }
    }
  };

  // ---- the run ----
  const pid = nodes[0].proc.pid;
  const durationMs = minutes * 60000;
  const rss = [];
  const started = Date.now();
  const sampler = setInterval(() => rss.push({ t: Date.now() - started, kb: rssKb(pid) }), 1000);
  stalls.start();
  const tasks = [churn(), ...Array.from({ length: agentCount }, agent)];
  if (failover) tasks.push(failover.loop(() => stopping));
  let afterWarmup;
  await sleep(WARMUP_MS);
  afterWarmup = rssKb(pid);
  await sleep(durationMs - WARMUP_MS);
  const atEnd = rssKb(pid);
  stopping = true;
  await Promise.all(tasks);
  clearInterval(sampler);
  stalls.stop();
  await sleep(500);

  // ---- bookkeeping ----
  for (const [, list] of deliveries) {
    const sids = list.map((d) => d.sid);
    if (new Set(sids).size !== sids.length) {
      // The same call sent twice to one socket: a duplicate, answered or not. Around a failover
      // it is counted apart (a write the old primary took and the new one never got).
      if (failover?.sawDuplicate(list)) continue;
      stats.duplicated++;
      stats.dupDetails = [...(stats.dupDetails ?? []), `same socket: ${JSON.stringify(list.map((d) => ({ sid: d.sid, at: d.at, answered: d.answered })))}`];
      continue;
    }
    // Delivered again to a new socket of the same key is right when the relay never got the first
    // answer: the tab's socket dropped (or was replaced) right after it answered, before the
    // acknowledgement arrived. That is redelivery after a drop, counted apart; anywhere else a
    // second delivery of an answered call is a duplicate.
    if (list.length > 1 && list.slice(0, -1).some((d) => d.answered)) {
      const first = list[0];
      const dropped = first.slot.churnAt.some((t) => Math.abs(t - first.at) < 2000);
      if (dropped) stats.redeliveredAfterDrop = (stats.redeliveredAfterDrop ?? 0) + 1;
      else { stats.duplicated++; stats.dupDetails = [...(stats.dupDetails ?? []), `two sockets: ${JSON.stringify(list.map((d) => ({ sid: d.sid, at: d.at, answered: d.answered, churn: d.slot.churnAt.filter((t) => Math.abs(t - d.at) < 10000) })))}`]; }
    }
  }
  for (const f of fired) {
    if (deliveries.has(f.seq)) continue;
    // A fire-and-forget call handed over in the moment its tab dropped may be lost (said in
    // docs/several-nodes.md); one that no churn came near is a loss.
    const near = f.slot.churnAt.some((t) => Math.abs(t - f.at) < 2000);
    if (!near && failover?.near(f.at)) failover.lost++;
    else if (!near) stats.lost++;
  }
  const revoked = stats.churn.revoke;
  for (const s of slots) hangUp(s.socket);
  // Once the grace is over, nothing is left but tombstones of revoked keys.
  let final = [];
  await until('the relay maps back to their baseline', GRACE_MS + 15000, async () => {
    final = await Promise.all(nodes.map((n) => metrics(n.url)));
    return final.every((m) => m.bound === 0 && m.tabs === 0 && m.inflight === 0 && m.pending === 0 && m.cancellable === 0 && m.known <= revoked);
  }).catch((e) => stats.unexpected.push(`${e.message}: ${JSON.stringify(final)}`));

  // Stopping a node searches its log for the soak's secrets (the harness's check).
  await Promise.all(nodes.map((n) => n.stop().catch((e) => stats.unexpected.push(`${n.name}: ${e.message}`))));
  if (!failover) await redis?.stop();
  if (failover) stats.failovers = await failover.finish();

  const drift = (atEnd - afterWarmup) / afterWarmup;
  const report = {
    ...stats, minutes, tabs: tabCount, agents: agentCount, stalls: stalls.seen,
    rssKb: { start: rss[0]?.kb, afterWarmup, end: atEnd, driftPct: Number((drift * 100).toFixed(2)), curve: rss.filter((_, i) => i % 5 === 0) },
    finalMaps: final,
  };
  const churnEvents = Object.values(stats.churn).reduce((a, b) => a + b, 0);
  const ok = stats.misrouted === 0 && stats.lost === 0 && stats.duplicated === 0 && stats.unexpected.length === 0 && Math.abs(drift) <= 0.05;
  console.log(`soak, ${report.mode}: ${minutes} min, ${tabCount} tabs, ${agentCount} agents: ${stats.calls} calls (${stats.retries} idempotent retries), ${churnEvents} churn events ${JSON.stringify(stats.churn)}`);
  console.log(`  misrouted ${stats.misrouted}, lost ${stats.lost}, duplicated ${stats.duplicated}, unexpected answers ${stats.unexpected.length}, answered calls timed out while their tab was churned ${stats.timedOutInChurn ?? 0}, answered calls delivered again after their tab dropped before the answer arrived ${stats.redeliveredAfterDrop ?? 0}`);
  console.log(`  RSS: ${report.rssKb.start} KB at start, ${afterWarmup} KB after warm-up (${(WARMUP_MS / 1000).toFixed(0)} s; idempotency window ${IDEM_WINDOW_S} s), ${atEnd} KB at the end (${report.rssKb.driftPct}%)`);
  console.log(`  maps after the grace: ${JSON.stringify(final)} (revoked tombstones allowed: ${revoked})`);
  if (stalls.seen.length) console.log(`  this process stood still ${stalls.seen.length} times for 1 s or more (${JSON.stringify(stalls.seen.map((x) => x.to - x.from))} ms); awaited calls timed out then: ${stats.timedOutInStall ?? 0}`);
  if (stats.failovers) console.log(`  failovers: ${JSON.stringify(stats.failovers)}`);
  for (const u of stats.unexpected.slice(0, 10)) console.log(`  unexpected: ${u}`);
  for (const d of (stats.dupDetails ?? []).slice(0, 10)) console.log(`  duplicated: ${d}`);
  return { ok, report };
}

/**
 * The sentinel set for --failover-every, and the bookkeeping of its failovers: `near(t)` says
 * whether `t` falls in a failover (from 1.5 s before it began to WINDOW_MS after the sentinels named
 * the new primary); `count` takes a call's answer if it failed cleanly in one. Duplicates and
 * losses in a failover are counted apart and reported (they do not fail the run): Redis
 * replicates asynchronously, and what the old primary took last may never reach the new one.
 */
/** How long after the sentinels named the new primary a failure is still the failover's. */
const WINDOW_MS = 5000;

async function startFailovers() {
  const set = await startSentinels({ downAfterMs: 1000 });
  const events = [];
  const near = (t) => events.some((e) => t >= e.began - 1500 && t <= (e.named ?? Infinity) + WINDOW_MS);
  const f = {
    /** Where `t` falls against the failovers so far. */
    when(t) {
      const e = events.findLast((x) => x.began <= t);
      return e ? `${((t - (e.named ?? e.began)) / 1000).toFixed(1)} s after ${e.kind} #${events.indexOf(e) + 1} began at ${new Date(e.began).toISOString().slice(11, 23)} (sentinels named the new primary ${e.named ? e.named - e.began : '?'} ms later)` : 'before any failover';
    },
    redis: { url: set.url },
    churnFailed: 0,
    lost: 0,
    ranAgain: [],
    duplicates: [],
    near,
    sawDuplicate(list) {
      if (!near(list[0].at)) return false;
      f.duplicates.push(list.map((d) => ({ sid: d.sid, at: d.at, answered: d.answered })));
      return true;
    },
    count(outcome, r, at) {
      if (!near(at) || !(r.status === 503 || (r.status === 504 && outcome !== 'slow'))) return false;
      const e = events.find((x) => at >= x.began - 1500 && at <= (x.named ?? Infinity) + WINDOW_MS);
      e.failed.push({ at, done: Date.now(), status: r.status, code: r.body?.error?.code });
      return true;
    },
    async loop(stopped) {
      for (let n = 0; ; n++) {
        const end = Date.now() + failoverEvery * 1000;
        while (!stopped() && Date.now() < end) await sleep(200);
        if (stopped()) return;
        const kind = n % 2 === 0 ? 'SENTINEL FAILOVER' : 'SIGKILL';
        const e = { kind, began: Date.now(), failed: [] };
        events.push(e);
        const old = await set.primary();
        if (kind === 'SIGKILL') await set.killPrimary(); else await set.failover();
        e.named = Date.now();
        if (kind === 'SIGKILL') await set.restart(old);
      }
    },
    async finish() {
      await set.stop();
      return events.map((e) => {
        const byStatus = {};
        for (const x of e.failed) byStatus[`${x.status} ${x.code}`] = (byStatus[`${x.status} ${x.code}`] ?? 0) + 1;
        const span = e.failed.length ? Math.max(...e.failed.map((x) => x.done)) - Math.min(...e.failed.map((x) => x.at)) : 0;
        return { kind: e.kind, sentinelsMs: (e.named ?? NaN) - e.began, failedCalls: e.failed.length, byStatus, callsFailedForMs: span };
      }).concat([{ churnActionsFailed: f.churnFailed, firedLost: f.lost, duplicated: f.duplicates.length, duplicates: f.duplicates.slice(0, 5), retriesRanAgain: f.ranAgain.length }]);
    },
  };
  return f;
}

const modes = nodesOpt === 'both' ? [1, 3] : [Number(nodesOpt)];
const haveRedis = (() => { try { execFileSync('bash', ['-c', 'command -v redis-server']); return true; } catch { return false; } })();
const results = [];
let allOk = true;
for (const mode of modes) {
  if (mode === 3 && !haveRedis) { console.log('soak: no redis-server, three-node run skipped'); allOk = false; continue; }
  const { ok, report } = await run(mode);
  results.push(report);
  allOk &&= ok;
}
writeFileSync(join(reportDir, `soak-${new Date().toISOString().replace(/[:.]/g, '-')}.json`), JSON.stringify(results, null, 2));
console.log(allOk ? 'soak: passed' : 'soak: FAILED');
process.exit(allOk ? 0 : 1);
