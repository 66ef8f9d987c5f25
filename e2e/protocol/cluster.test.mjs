// Several relay nodes on one real redis-server (RELAY_REDIS_URL): a tab bound on one node is
// reached from any other, answers cross back, every node reads the same key state, revokes and
// replacements cross nodes, an idempotent retry on another node emits nothing new, a node killed
// with SIGKILL loses only its tabs (which re-bind elsewhere through a balancer and get the call
// that was waiting), and losing Redis gives 503s and a false /readyz until it comes back.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { io } from 'socket.io-client';
import { pathToFileURL } from 'node:url';
import { startNode, startRelay, startRedis, startBalancer, startHaproxy, requestFrom, Tab, sleep, within, webClientNode, nodeSecrets } from '../harness/index.mjs';

const { VoiceRelayClient } = await import(pathToFileURL(webClientNode).href);

let redis;
let nodes = [];
const shared = {
  ...nodeSecrets(),
  RELAY_RECONNECT_GRACE_MS: '20000',
};

const node = (name, env = {}) => startNode(nodes, { ...shared, RELAY_REDIS_URL: redis.url, ...env }, { name });

let A;
let B;
let C;
before(async () => {
  redis = await startRedis();
  A = await node('relay-a');
  B = await node('relay-b');
  C = await node('relay-c');
});
after(async () => {
  for (const n of nodes) await n.stop();
  await redis?.stop();
});

const toolEvents = (tab) => tab.events.filter((e) => e.event.startsWith('voice-agent:') && !['voice-agent:cancel', 'voice-agent:revoked'].includes(e.event));

/** Mints on `minter`, binds on `host` through the handshake token. */
async function tabOn(host, minter = host, opts = {}) {
  const minted = await minter.token();
  const tab = host.tab({ token: minted.token, ...opts });
  await tab.connected();
  await host.waitState(minted.apiKey, 'online');
  return { tab, ...minted };
}

async function statesEverywhere(apiKey) {
  const seen = [];
  for (const n of nodes.filter((x) => x.proc.exitCode === null && x.proc.signalCode === null)) {
    const r = await n.keyState(apiKey);
    seen.push(r.status === 200 ? r.body.state : r.status);
  }
  return seen;
}

test('a tab bound on node A gets a call posted to node B, and its answer crosses back', async () => {
  const { tab, apiKey } = await tabOn(A, C);
  tab.socket.on('voice-agent:draw_card', (params, meta, ack) => {
    ack({ ok: true, result: { cardId: 'the-star', cardName: 'The Star', reversed: false, position: params.position, callId: meta.callId } });
  });
  const fire = await B.call({ apiKey, toolName: 'OpenPopover', params: { message: 'from B' } });
  assert.equal(fire.status, 200, JSON.stringify(fire.body));
  const [params, meta] = await tab.next('voice-agent:OpenPopover');
  assert.deepEqual(params, { message: 'from B' });
  assert.equal(meta.callId, fire.body.callId);

  const awaited = await B.call({ apiKey, toolName: 'draw_card', params: { position: 'Past' }, awaitResult: true, timeoutMs: 5000 });
  assert.equal(awaited.status, 200, JSON.stringify(awaited.body));
  assert.deepEqual(awaited.body.result, { cardId: 'the-star', cardName: 'The Star', reversed: false, position: 'Past', callId: awaited.body.callId });

  // A tab's error answer crosses back as 502 with its code, from the third node too.
  tab.socket.on('voice-agent:broken', (p, m, ack) => ack({ ok: false, error: { code: 'card_missing', message: 'no such card' } }));
  const failed = await C.call({ apiKey, toolName: 'broken', awaitResult: true, timeoutMs: 3000 });
  assert.equal(failed.status, 502);
  assert.equal(failed.body.error.code, 'tool_failed');
  assert.equal(failed.body.error.message, 'no such card');

  // A tab that never answers: 504 from the remote node, and the tab is told to cancel.
  tab.socket.on('voice-agent:slow', () => {});
  const slow = await B.call({ apiKey, toolName: 'slow', awaitResult: true, timeoutMs: 400 });
  assert.equal(slow.status, 504, JSON.stringify(slow.body));
  assert.equal(slow.body.error.code, 'timeout');
  await tab.next('voice-agent:cancel', (c) => c.callId === slow.body.callId);

  await sleep(100);
  assert.equal(toolEvents(tab).length, 4, JSON.stringify(toolEvents(tab)));
  tab.close();
});

test('calls reach exactly their own tab among tabs spread over three nodes', async () => {
  const tabs = [];
  for (const [i, host] of [A, B, C, A, B, C].entries()) {
    const t = await tabOn(host, [C, A, B][i % 3]);
    t.tab.socket.on('voice-agent:whoami', (p, m, ack) => ack({ i }));
    tabs.push(t);
  }
  for (const [i, t] of tabs.entries()) {
    for (const via of [A, B, C]) {
      const r = await via.call({ apiKey: t.apiKey, toolName: 'whoami', awaitResult: true, timeoutMs: 3000 });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.deepEqual(r.body.result, { i });
    }
  }
  await sleep(100);
  for (const t of tabs) {
    assert.equal(toolEvents(t.tab).length, 3);
    t.tab.close();
  }
});

test('every node reads the same state for a key: issued, online, offline with its grace, gone', async () => {
  const minted = await A.token();
  assert.deepEqual(await statesEverywhere(minted.apiKey), ['issued', 'issued', 'issued']);
  const tab = B.tab({ token: minted.token });
  await tab.connected();
  await C.waitState(minted.apiKey, 'online');
  assert.deepEqual(await statesEverywhere(minted.apiKey), ['online', 'online', 'online']);
  tab.close();
  const off = await A.waitState(minted.apiKey, 'offline');
  assert.ok(off.body.graceEndsMs > Date.now() + 10000, JSON.stringify(off.body));
  assert.deepEqual(await statesEverywhere(minted.apiKey), ['offline', 'offline', 'offline']);
  const [a, c] = [await A.keyState(minted.apiKey), await C.keyState(minted.apiKey)];
  assert.equal(a.body.sinceMs, c.body.sinceMs);
  assert.ok(Math.abs(a.body.graceEndsMs - c.body.graceEndsMs) < 1000);

  // A bare key binds once, on any node; later binds need the token, on every node.
  const bare = await C.token();
  const t1 = A.tab();
  await t1.connected();
  assert.deepEqual(await t1.register(bare.apiKey), { ok: true });
  await B.waitState(bare.apiKey, 'online');
  t1.close();
  await B.waitState(bare.apiKey, 'offline');
  const t2 = B.tab();
  await t2.connected();
  const again = await t2.register(bare.apiKey);
  assert.equal(again.ok, false);
  assert.equal(again.error.code, 'unauthorized');
  assert.deepEqual(await t2.register(bare.token), { ok: true });
  await A.waitState(bare.apiKey, 'online');
  t2.close();
});

test('a revoke on node C unbinds the tab on node A; no node binds the key again', async () => {
  const { tab, apiKey, token } = await tabOn(A, B);
  // The key's agent, minted on B before the revoke: its token dies with the key on every node.
  const agentToken = await B.tokenFor(apiKey);
  const r = await C.revoke(apiKey);
  assert.equal(r.status, 200);
  assert.equal(r.body.tabNotified, true);
  assert.deepEqual((await tab.next('voice-agent:revoked'))[0], { reason: 'revoked' });
  assert.deepEqual(await tab.next('disconnect'), ['io server disconnect']);
  assert.deepEqual(await statesEverywhere(apiKey), [404, 404, 404]);
  for (const n of [A, B, C]) {
    const call = await n.call({ apiKey, toolName: 'OpenPopover' }, { token: agentToken });
    assert.equal(call.status, 404);
    const again = n.tab({ token });
    const err = await again.connectError();
    assert.equal(err.data.code, 'unknown_key');
    again.close();
  }
  assert.equal((await B.revoke(apiKey)).status, 404);
});

test('a newer bind on node B replaces the tab on node A; calls then reach only the new tab', async () => {
  const { tab: old, apiKey, token } = await tabOn(A);
  const fresh = B.tab({ token });
  await fresh.connected();
  assert.deepEqual((await old.next('voice-agent:revoked'))[0], { reason: 'replaced' });
  await old.next('disconnect');
  fresh.socket.on('voice-agent:ping', (p, m, ack) => ack('fresh'));
  for (const via of [A, B, C]) {
    const r = await via.call({ apiKey, toolName: 'ping', awaitResult: true, timeoutMs: 3000 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.result, 'fresh');
  }
  assert.equal(toolEvents(old).length, 0);
  fresh.close();
});

test('an idempotent retry on another node replays the outcome and emits nothing new', async () => {
  const { tab, apiKey } = await tabOn(A);
  let answered = 0;
  tab.socket.on('voice-agent:draw_card', async (p, meta, ack) => {
    await sleep(300);
    answered += 1;
    ack({ cardId: `card-${answered}`, callId: meta.callId });
  });
  const idem = `retry-${randomBytes(6).toString('hex')}`;
  const body = { apiKey, toolName: 'draw_card', params: { position: 'Future' }, awaitResult: true, timeoutMs: 5000 };
  // The retry on C starts while the first call (on B) still waits for the tab.
  const first = B.call(body, { headers: { 'idempotency-key': idem } });
  await sleep(100);
  const retry = await C.call(body, { headers: { 'idempotency-key': idem } });
  const firstDone = await first;
  assert.equal(firstDone.status, 200, JSON.stringify(firstDone.body));
  assert.deepEqual(retry.body, firstDone.body);
  const later = await A.call(body, { headers: { 'idempotency-key': idem } });
  assert.deepEqual(later.body, firstDone.body);
  const conflict = await A.call({ ...body, params: { position: 'Past' } }, { headers: { 'idempotency-key': idem } });
  assert.equal(conflict.status, 400);
  assert.equal(conflict.body.error.code, 'invalid_request');
  await sleep(200);
  assert.equal(toolEvents(tab).length, 1);
  assert.equal(answered, 1);
  tab.close();
});

test('the per-key in-flight limit is counted across nodes', async () => {
  const { tab, apiKey } = await tabOn(A, A);
  const held = [];
  tab.socket.on('voice-agent:hold', (p, m, ack) => held.push(ack));
  const body = { apiKey, toolName: 'hold', awaitResult: true, timeoutMs: 10000 };
  // The relays run with the default limit of 16 in flight per key, spread over three nodes.
  const calls = [];
  for (let i = 0; i < 16; i += 1) calls.push([A, B, C][i % 3].call(body));
  const until = Date.now() + 8000;
  while (held.length < 16 && Date.now() < until) await sleep(20);
  assert.equal(held.length, 16, 'all 16 calls reached the tab');
  const extra = await B.call(body);
  assert.equal(extra.status, 429, JSON.stringify(extra.body));
  assert.equal(extra.body.error.code, 'rate_limited');
  for (const ack of held) ack('done');
  for (const r of await Promise.all(calls)) assert.equal(r.status, 200);
  // Slots come back when calls end: one more goes through.
  tab.socket.off('voice-agent:hold');
  tab.socket.on('voice-agent:hold', (p, m, ack) => ack('again'));
  const after = await C.call(body);
  assert.equal(after.status, 200, JSON.stringify(after.body));
  tab.close();
});

test('a session\'s call rate and the token rate are shared by the nodes', async () => {
  // Two more nodes on a Redis of their own, with small limits.
  const own = await startRedis();
  const env = { ...shared, RELAY_REDIS_URL: own.url, RELAY_SESSION_RATE_PER_SEC: '4', RELAY_TOKEN_RATE_PER_MIN: '3' };
  const X = await startRelay(env, { name: 'relay-x' });
  const Y = await startRelay(env, { name: 'relay-y' });
  X.share(Y); Y.share(X);
  try {
    const window = (ms) => Math.floor(Date.now() / ms);
    // A key and its agent's session token, before the token budget is spent.
    const { apiKey } = await X.token();
    const agentToken = await X.tokenFor(apiKey);
    // Tokens: 3 a minute from this address, whichever node mints them.
    let minuteAtStart;
    let statuses;
    for (let attempt = 0; attempt < 2; attempt += 1) {
      minuteAtStart = window(60000);
      statuses = [];
      for (const n of [X, Y, X, Y, X, Y]) statuses.push((await n.fetch('/token', { method: 'POST' })).status);
      if (window(60000) === minuteAtStart) break;
    }
    assert.equal(statuses.filter((s) => s === 200).length <= 3, true, statuses.join());
    assert.ok(statuses.includes(429), statuses.join());
    // Calls: 4 a second for one agent session, whichever node takes them. The key has no tab:
    // the calls that pass the limit wait 50 ms for one, then end as tab_offline.
    let counts;
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const second = window(1000);
      const replies = await Promise.all([X, Y, X, Y, X, Y, X, Y].map((n) => n.call({ apiKey, toolName: 'OpenPopover', timeoutMs: 50 }, { token: agentToken })));
      counts = { limited: replies.filter((r) => r.status === 429).length, other: replies.filter((r) => r.status === 409).length };
      if (window(1000) === second) break;
      await sleep(1000);
    }
    assert.deepEqual(counts, { limited: 4, other: 4 });
  } finally {
    await X.stop();
    await Y.stop();
    await own.stop();
  }
});

test('SIGKILL of a node: its keys go offline, the tab re-binds on another node, the waiting call completes', async () => {
  const doomed = await node('relay-doomed');
  const lb = await startBalancer(doomed.url);
  try {
    const minted = await B.token();
    const socket = io(lb.url, {
      transports: ['websocket'], auth: { token: minted.token }, forceNew: true,
      reconnection: true, reconnectionDelay: 100, reconnectionDelayMax: 300, timeout: 3000,
    });
    const tab = new Tab(socket);
    let deliveries = 0;
    socket.on('voice-agent:draw_card', (params, meta, ack) => {
      deliveries += 1;
      // The first delivery reaches the node that dies before the user picks; the second one
      // (after the re-bind) is answered.
      if (deliveries >= 2) ack({ ok: true, result: { cardId: 'the-tower', callId: meta.callId } });
    });
    await tab.connected();
    await C.waitState(minted.apiKey, 'online');

    const pending = C.call({ apiKey: minted.apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 20000 });
    await tab.next('voice-agent:draw_card');
    lb.target = null; // the balancer has no healthy backend for a moment
    doomed.proc.kill('SIGKILL');
    await tab.next('disconnect');
    // Within the node-loss bound (3 s heartbeat + 1 s sweep), every node sees the key offline.
    const off = await A.waitState(minted.apiKey, 'offline', 8000);
    assert.ok(off.body.graceEndsMs > Date.now());
    assert.deepEqual(await statesEverywhere(minted.apiKey), ['offline', 'offline', 'offline']);

    lb.target = B.url; // the balancer now sends the tab to node B
    await tab.connected(10000);
    await A.waitState(minted.apiKey, 'online');
    const done = await within(15000, pending, 'the waiting call');
    assert.equal(done.status, 200, JSON.stringify(done.body));
    assert.equal(done.body.result.cardId, 'the-tower');
    assert.equal(done.body.result.callId, done.body.callId);
    assert.equal(deliveries, 2);
    socket.close();
  } finally {
    await lb.close();
  }
});

test('the browser client library re-binds on another node after its node is killed, behind a balancer', async () => {
  const doomed = await node('relay-doomed-client');
  const lb = await startBalancer(doomed.url);
  const client = new VoiceRelayClient({ relayUrl: lb.url, transports: ['websocket'] });
  try {
    let runs = 0;
    client.handle('draw_card', async () => { runs += 1; return { cardId: 'the-moon', reversed: true }; });
    const token = await within(5000, client.start(), 'client.start');
    doomed.remember(token.token, token.apiKey);
    await A.waitState(token.apiKey, 'online');
    lb.target = B.url;
    doomed.proc.kill('SIGKILL');
    // Posted while the tab is between nodes: the call waits for it and is answered once.
    const r = await C.call({ apiKey: token.apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 15000 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(r.body.result, { cardId: 'the-moon', reversed: true });
    assert.equal(runs, 1);
    assert.equal(client.state, 'bound');
  } finally {
    client.stop();
    await lb.close();
  }
});

test('SIGTERM of a node: its tabs are closed, its keys go offline on every node', async () => {
  const leaving = await node('relay-leaving', { RELAY_DRAIN_MS: '500' });
  const { tab, apiKey } = await tabOn(leaving, A);
  leaving.proc.kill('SIGTERM');
  await tab.next('disconnect', () => true, 8000);
  const off = await B.waitState(apiKey, 'offline', 5000);
  assert.ok(off.body.graceEndsMs > Date.now());
  assert.equal((await within(10000, leaving.exited, 'the node to exit')).code, 0);
  // The key still works once its tab comes back, on another node.
  const back = C.tab({ token: tab.socket.auth.token });
  back.socket.on('voice-agent:ping', (p, m, ack) => ack('back'));
  await back.connected();
  const r = await A.call({ apiKey, toolName: 'ping', awaitResult: true, timeoutMs: 3000 });
  assert.equal(r.body.result, 'back');
  back.close();
});

/** Polls a node's /readyz until it answers `status` (bounded), and returns that answer. */
async function readiness(n, status, ms = 10000) {
  const until = Date.now() + ms;
  let ready;
  while (Date.now() < until) {
    ready = await n.fetch('/readyz');
    if (ready.status === status) return ready;
    await sleep(100);
  }
  assert.equal(ready.status, status, JSON.stringify(ready.body));
  return ready;
}

test('losing Redis: 503 and /readyz false on every node, nothing panics; all recovers when it returns', async () => {
  const { tab, apiKey } = await tabOn(A, C);
  tab.socket.on('voice-agent:ping', (p, m, ack) => ack('pong'));
  // The agent's token, minted while Redis answers (it is verified by each node on its own).
  await B.tokenFor(apiKey);
  await redis.stop();
  for (const n of [A, B, C]) {
    const ready = await readiness(n, 503);
    assert.equal(ready.body.reason, 'redis unreachable');
    assert.equal((await n.fetch('/healthz')).status, 200);
  }
  const call = await B.call({ apiKey, toolName: 'ping', awaitResult: true, timeoutMs: 2000 });
  assert.equal(call.status, 503, JSON.stringify(call.body));
  assert.equal(call.body.error.code, 'unavailable');
  const token = await C.fetch('/token', { method: 'POST' });
  assert.equal(token.status, 503);
  assert.equal(token.body.error.code, 'unavailable');
  const state = await A.keyState(apiKey);
  assert.equal(state.status, 503);

  await redis.start(); // empty: nothing was persisted
  for (const n of [A, B, C]) await readiness(n, 200);
  // Node A writes its live binding back; the tab is reached from the other nodes again.
  await B.waitState(apiKey, 'online', 8000);
  for (const via of [B, C, A]) {
    const r = await via.call({ apiKey, toolName: 'ping', awaitResult: true, timeoutMs: 3000 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.result, 'pong');
  }
  const fresh = await tabOn(B, C);
  fresh.tab.socket.on('voice-agent:ping', (p, m, ack) => ack('new'));
  const r = await A.call({ apiKey: fresh.apiKey, toolName: 'ping', awaitResult: true, timeoutMs: 3000 });
  assert.equal(r.body.result, 'new');
  for (const n of [A, B, C]) assert.equal(n.proc.exitCode, null, 'the node is still running');
  fresh.tab.close();
  tab.close();
});

test('through the deploy balancer (HAProxy, deploy/haproxy.cfg): polling tabs stick to a node, calls reach them from any node', async () => {
  // The shipped config, with the compose service names pointed at two nodes on loopback; ready
  // once both nodes pass its /readyz check.
  const haproxy = await startHaproxy(A, B);
  const { url } = haproxy;
  try {
    const tabs = [];
    for (let i = 0; i < 4; i += 1) {
      const minted = await A.token();
      const socket = io(url, { transports: ['polling'], withCredentials: true, auth: { token: minted.token }, forceNew: true, reconnection: false, timeout: 5000 });
      const tab = new Tab(socket);
      socket.on('voice-agent:whoami', (p, m, ack) => ack({ i }));
      await tab.connected();
      await C.waitState(minted.apiKey, 'online');
      tabs.push({ tab, apiKey: minted.apiKey });
    }
    // Long enough for many polls: a poll sent to the wrong node would end the session.
    for (let round = 0; round < 3; round += 1) {
      for (const [i, t] of tabs.entries()) {
        const token = await A.tokenFor(t.apiKey);
        const r = await (round === 2 ? { call: (b) => fetch(`${url}/api/voice-agent/tool-call`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify(b) }).then(async (res) => ({ status: res.status, body: await res.json() })) } : [A, B, C][(i + round) % 3])
          .call({ apiKey: t.apiKey, toolName: 'whoami', awaitResult: true, timeoutMs: 3000 });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.deepEqual(r.body.result, { i });
      }
      await sleep(300);
    }
    for (const t of tabs) {
      assert.equal(t.tab.received('disconnect').length, 0, 'no polling session was lost');
      assert.equal(t.tab.socket.io.engine.transport.name, 'polling');
      t.tab.close();
    }
  } finally {
    await haproxy.stop();
  }
});

test('behind the deploy balancer (deploy/haproxy.cfg, option forwardfor): each client has its own token budget, and a forged X-Forwarded-For buys nothing', async () => {
  // Two nodes sharing the budget in Redis, trusting the balancer (which connects from 127.0.0.1).
  const env = { ...shared, RELAY_REDIS_URL: redis.url, RELAY_TRUSTED_PROXIES: '127.0.0.1/32', RELAY_TOKEN_RATE_PER_MIN: '3' };
  const X = await startRelay(env, { name: 'relay-budget-x' });
  const Y = await startRelay(env, { name: 'relay-budget-y' });
  X.share(Y);
  Y.share(X);
  const balancer = await startHaproxy(X, Y);
  try {
    const mint = async (url, localAddress, headers = {}) => {
      const r = await requestFrom(`${url}/token`, { localAddress, headers, body: '{}' });
      if (r.status === 200) X.remember(r.body.token, r.body.apiKey);
      else assert.equal(r.body.error.code, 'rate_limited', JSON.stringify(r.body));
      return r.status;
    };
    // Two clients on different source addresses, through the balancer (round robin over both
    // nodes): three tokens each, then 429 — one client spending its budget leaves the other's.
    const first = [];
    for (let i = 0; i < 4; i += 1) first.push(await mint(balancer.url, '127.0.0.2'));
    assert.deepEqual(first, [200, 200, 200, 429]);
    const second = [];
    for (let i = 0; i < 4; i += 1) second.push(await mint(balancer.url, '127.0.0.3'));
    assert.deepEqual(second, [200, 200, 200, 429]);
    // The first client writes its own X-Forwarded-For (or Forwarded): the balancer appends the
    // address it saw, and that is what the relays charge.
    for (const headers of [{ 'x-forwarded-for': '198.51.100.1' }, { 'x-forwarded-for': '198.51.100.2, 198.51.100.3' }, { forwarded: 'for=198.51.100.4' }]) {
      assert.equal(await mint(balancer.url, '127.0.0.2', headers), 429, JSON.stringify(headers));
    }
    // Straight to a node, not through the trusted balancer: the header is not believed at all.
    const direct = [];
    for (let i = 0; i < 5; i += 1) direct.push(await mint(X.url, '127.0.0.4', { 'x-forwarded-for': `198.51.100.${10 + i}` }));
    assert.deepEqual(direct, [200, 200, 200, 429, 429]);
    assert.equal(await mint(Y.url, '127.0.0.4', { 'x-forwarded-for': '127.0.0.9' }), 429, 'the budget is shared by the nodes');
  } finally {
    await balancer.stop();
    await X.stop();
    await Y.stop();
  }
});
