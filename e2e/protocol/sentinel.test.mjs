// Two relay nodes on a Redis primary + replica watched by three sentinels
// (RELAY_REDIS_URL=redis+sentinel://…): tabs on both nodes get calls posted to both nodes while
// the primary fails over twice, first by `SENTINEL FAILOVER`, then by SIGKILL of the primary.
// Throughout: no call reaches a tab twice or a tab it was not for; every failed call is a clean
// 503 `unavailable` (or a 504 for an awaited call whose answer was lost with the primary), none
// later than the stated bound after the sentinels named the new primary; `/readyz` is false
// while Redis cannot be reached and true again after; and afterwards a call from every node to
// every tab succeeds, without restarting anything.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startNode, sleep, startSentinels, nodeSecrets } from '../harness/index.mjs';

/** How long after the sentinels name the new primary the nodes must serve again (ms). */
const SETTLE_BOUND = 3000;

let set;
const nodes = [];
const shared = {
  ...nodeSecrets(),
  RELAY_RECONNECT_GRACE_MS: '20000',
  // The calls below come in bursts from one agent session, faster than a voice agent would.
  RELAY_SESSION_RATE_PER_SEC: '100000',
};

before(async () => {
  set = await startSentinels({ downAfterMs: 1000 });
  for (const name of ['relay-a', 'relay-b']) {
    await startNode(nodes, { ...shared, RELAY_REDIS_URL: set.url }, { name });
  }
});
after(async () => {
  for (const n of nodes) await n.stop();
  await set?.stop();
});

/** Polls /readyz on every node every 50 ms, recording [time, node index, ready]. */
function watchReadiness() {
  const seen = [];
  let on = true;
  const loops = nodes.map(async (n, i) => {
    while (on) {
      const r = await n.fetch('/readyz').catch(() => ({ status: 0 }));
      seen.push([Date.now(), i, r.status === 200]);
      await sleep(50);
    }
  });
  return { seen, stop: async () => { on = false; await Promise.all(loops); } };
}

/** Posts awaited calls from every node to every tab, one after another, until stopped. */
function load(tabs) {
  const outcomes = [];
  let on = true;
  const loops = nodes.map(async (via, v) => {
    for (let n = 0; on; n++) {
      const t = tabs[n % tabs.length];
      const started = Date.now();
      const r = await via.call({ apiKey: t.apiKey, toolName: 'whoami', params: { for: t.i }, awaitResult: true, timeoutMs: 1500 });
      outcomes.push({ at: started, done: Date.now(), via: v, tab: t.i, status: r.status, body: r.body });
      if (r.status !== 200) await sleep(50);
    }
  });
  return { outcomes, stop: async () => { on = false; await Promise.all(loops); } };
}

async function everyCallSucceeds(tabs) {
  for (const t of tabs) {
    for (const via of nodes) {
      const r = await via.call({ apiKey: t.apiKey, toolName: 'whoami', params: { for: t.i }, awaitResult: true, timeoutMs: 3000 });
      assert.equal(r.status, 200, `tab ${t.i} via ${via.url}: ${JSON.stringify(r.body)}`);
      assert.deepEqual(r.body.result, { i: t.i, for: t.i });
    }
  }
}

/** Waits until every node is ready and serves a call to every tab (bounded). */
async function converged(tabs, ms) {
  const end = Date.now() + ms;
  for (;;) {
    const ready = await Promise.all(nodes.map((n) => n.fetch('/readyz')));
    if (ready.every((r) => r.status === 200)) {
      try { await everyCallSucceeds(tabs); return; } catch (e) { if (Date.now() > end) throw e; }
    } else if (Date.now() > end) {
      throw new Error(`not every node ready: ${JSON.stringify(ready.map((r) => r.body))}`);
    }
    await sleep(100);
  }
}

test('calls stay exact through a sentinel failover and a killed primary; readiness tells the truth', { timeout: 120000 }, async () => {
  const tabs = [];
  const seenBy = new Map();
  for (const [i, host] of [nodes[0], nodes[1], nodes[0], nodes[1]].entries()) {
    const minted = await host.token();
    const tab = host.tab({ token: minted.token });
    await tab.connected();
    await host.waitState(minted.apiKey, 'online');
    seenBy.set(i, []);
    tab.socket.on('voice-agent:whoami', (params, meta, ack) => {
      seenBy.get(i).push({ callId: meta.callId, for: params.for });
      ack({ ok: true, result: { i, for: params.for } });
    });
    tabs.push({ i, tab, apiKey: minted.apiKey });
  }
  await everyCallSucceeds(tabs);

  const readiness = watchReadiness();
  const calls = load(tabs);
  await sleep(1000);
  const events = [];
  for (const [kind, act] of [['SENTINEL FAILOVER', () => set.failover()], ['SIGKILL of the primary', () => set.killPrimary()]]) {
    const began = Date.now();
    await act();
    const named = Date.now();
    await converged(tabs, SETTLE_BOUND + 10000);
    events.push({ kind, began, named, served: Date.now() });
    await sleep(1500);
  }
  await calls.stop();
  await readiness.stop();

  // Nothing misrouted or duplicated: every answer is its own tab's, every call id reached one
  // tab once, and only the tab it was for.
  const ok = calls.outcomes.filter((o) => o.status === 200);
  for (const o of ok) assert.deepEqual(o.body.result, { i: o.tab, for: o.tab }, JSON.stringify(o));
  const ids = new Map();
  for (const [i, got] of seenBy) {
    for (const g of got) {
      assert.equal(g.for, i, `a call for tab ${g.for} reached tab ${i}`);
      assert.ok(!ids.has(g.callId), `call ${g.callId} delivered twice (tabs ${ids.get(g.callId)} and ${i})`);
      ids.set(g.callId, i);
    }
  }
  // Failures are clean: 503 unavailable, or 504 timeout for an answer lost with the primary.
  const failed = calls.outcomes.filter((o) => o.status !== 200);
  for (const o of failed) {
    const code = o.body?.error?.code;
    assert.ok((o.status === 503 && code === 'unavailable') || (o.status === 504 && code === 'timeout'), JSON.stringify(o));
  }
  // Failures happen only around a failover, ending within the bound after the sentinels named
  // the new primary.
  for (const o of failed) {
    const during = events.find((e) => o.at >= e.began - 2000 && o.done <= e.named + SETTLE_BOUND + 2000);
    assert.ok(during, `a call failed outside a failover: ${JSON.stringify(o)} ${JSON.stringify(events)}`);
  }
  // Readiness: the killed primary made every node not ready for a while, and every node was
  // ready again at the end.
  const kill = events[1];
  for (const i of nodes.keys()) {
    const mine = readiness.seen.filter(([, n]) => n === i);
    assert.ok(mine.some(([t, , r]) => !r && t >= kill.began && t <= kill.served), `node ${i} never said it was not ready after the primary died`);
    assert.ok(mine.at(-1)[2], `node ${i} is not ready at the end`);
  }
  console.log(`sentinel failovers: ${JSON.stringify(events.map((e) => ({ kind: e.kind, sentinelsMs: e.named - e.began, servingAgainMs: e.served - e.named })))}; calls ${calls.outcomes.length}, ok ${ok.length}, failed ${failed.length} (${JSON.stringify(failed.reduce((m, o) => ({ ...m, [o.status]: (m[o.status] ?? 0) + 1 }), {}))})`);
  assert.ok(ok.length > 20, `too few calls went through: ${ok.length}`);
  await everyCallSucceeds(tabs);
  for (const t of tabs) t.tab.close();
});
