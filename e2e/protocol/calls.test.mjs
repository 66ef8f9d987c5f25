// Tool calls: exact routing among several tabs, (params, meta), awaited answers and their
// envelopes, tab errors, timeouts with cancel, waiting for a tab that comes back, idempotent
// retries and the per-key in-flight limit.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startRelay, sleep } from '../harness/index.mjs';

let relay;
before(async () => { relay = await startRelay({ RELAY_RECONNECT_GRACE_MS: '5000', RELAY_MAX_INFLIGHT_PER_KEY: '3' }); });
after(async () => { await relay?.stop(); });

const toolEvents = (tab) => tab.events.filter((e) => e.event.startsWith('voice-agent:') && !['voice-agent:cancel', 'voice-agent:revoked'].includes(e.event));

test('a fire-and-forget call reaches exactly the right tab among several, on both transports', async () => {
  const tabs = [];
  for (const transports of [['websocket'], ['polling'], ['websocket'], ['polling'], ['polling', 'websocket']]) {
    tabs.push(await relay.boundTab({ transports }));
  }
  for (const [i, target] of tabs.entries()) {
    const r = await relay.call({ apiKey: target.apiKey, toolName: 'OpenPopover', params: { message: `for ${i}` } });
    assert.equal(r.status, 200);
    assert.equal(r.body.ok, true);
    assert.match(r.body.callId, /^c_[0-9a-f]{24}$/);
    assert.equal('result' in r.body, false);
    const [params, meta] = await target.tab.next('voice-agent:OpenPopover', (p) => p.message === `for ${i}`);
    assert.deepEqual(params, { message: `for ${i}` });
    assert.deepEqual(meta, { callId: r.body.callId, expectsResult: false, deadlineMs: null });
  }
  await sleep(100);
  for (const [i, t] of tabs.entries()) {
    const got = toolEvents(t.tab);
    assert.equal(got.length, 1, `tab ${i} got ${JSON.stringify(got)}`);
    assert.equal(got[0].args[0].message, `for ${i}`);
  }
  for (const t of tabs) t.tab.close();
});

test('params pass through as sent; absent params arrive as {}', async () => {
  const { tab, apiKey } = await relay.boundTab();
  const params = { title: 'Code', content: 'fn main() { println!("<b>hi</b>"); }', nested: [1, 2.5, null, { ü: 'ß' }] };
  await relay.call({ apiKey, toolName: 'present_to_cassette', params });
  assert.deepEqual((await tab.next('voice-agent:present_to_cassette'))[0], params);
  await relay.call({ apiKey, toolName: 'loading_status' });
  assert.deepEqual((await tab.next('voice-agent:loading_status'))[0], {});
  await relay.call({ apiKey, toolName: 'scalar', params: 'just a string' });
  assert.deepEqual((await tab.next('voice-agent:scalar'))[0], 'just a string');
  tab.close();
});

test('an awaited call returns the tab\'s answer; envelopes and plain values', async () => {
  const { tab, apiKey } = await relay.boundTab({ transports: ['polling'] });
  const metas = [];
  tab.socket.on('voice-agent:draw_card', (params, meta, ack) => {
    metas.push(meta);
    ack({ ok: true, result: { cardId: 'the-fool', cardName: 'The Fool', reversed: params.position === 'Past' } });
  });
  tab.socket.on('voice-agent:plain', (params, meta, ack) => ack({ success: true, cardId: 'the-star', reversed: false }));
  tab.socket.on('voice-agent:number', (params, meta, ack) => ack(7));
  const r = await relay.call({ apiKey, toolName: 'draw_card', params: { position: 'Past' }, awaitResult: true, timeoutMs: 4000 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body, { ok: true, callId: r.body.callId, result: { cardId: 'the-fool', cardName: 'The Fool', reversed: true } });
  assert.equal(metas[0].callId, r.body.callId);
  assert.equal(metas[0].expectsResult, true);
  assert.ok(metas[0].deadlineMs > 3000 && metas[0].deadlineMs <= 4000, `deadlineMs ${metas[0].deadlineMs}`);
  const plain = await relay.call({ apiKey, toolName: 'plain', awaitResult: true });
  assert.deepEqual(plain.body.result, { success: true, cardId: 'the-star', reversed: false });
  assert.equal((await relay.call({ apiKey, toolName: 'number', awaitResult: true })).body.result, 7);
  tab.close();
});

test('an older-style handler (params only) still receives fire-and-forget calls', async () => {
  const { tab, apiKey } = await relay.boundTab();
  const got = [];
  tab.socket.on('voice-agent:OpenPopover', (params) => got.push(params));
  await relay.call({ apiKey, toolName: 'OpenPopover', params: { message: 'seed' } });
  await tab.next('voice-agent:OpenPopover');
  assert.deepEqual(got, [{ message: 'seed' }]);
  tab.close();
});

test('tab errors come back as 502 tool_failed / no_handler', async () => {
  const { tab, apiKey } = await relay.boundTab();
  tab.socket.on('voice-agent:show_card', (p, m, ack) => ack({ ok: false, error: { code: 'unknown_card', message: 'no card named x' } }));
  tab.socket.on('voice-agent:missing', (p, m, ack) => ack({ ok: false, error: { code: 'no_handler', message: 'no handler for missing' } }));
  const failed = await relay.call({ apiKey, toolName: 'show_card', params: { cardId: 'x' }, awaitResult: true });
  assert.equal(failed.status, 502);
  assert.equal(failed.body.ok, false);
  assert.match(failed.body.callId, /^c_/);
  assert.deepEqual(failed.body.error, { code: 'tool_failed', message: 'no card named x' });
  const missing = await relay.call({ apiKey, toolName: 'missing', awaitResult: true });
  assert.equal(missing.status, 502);
  assert.equal(missing.body.error.code, 'no_handler');
  tab.close();
});

test('timeout: 504, the tab gets cancel, and a late answer is dropped', async () => {
  const { tab, apiKey } = await relay.boundTab();
  let lateAck;
  tab.socket.on('voice-agent:draw_card', (p, meta, ack) => { lateAck = ack; });
  const started = Date.now();
  const r = await relay.call({ apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 300 });
  const took = Date.now() - started;
  assert.equal(r.status, 504);
  assert.equal(r.body.error.code, 'timeout');
  assert.ok(took >= 280 && took < 3000, `took ${took} ms`);
  const [cancel] = await tab.next('voice-agent:cancel');
  assert.deepEqual(cancel, { callId: r.body.callId });
  lateAck({ ok: true, result: 'too late' });
  // The relay and the tab keep working: the next call is answered normally.
  tab.socket.off('voice-agent:draw_card');
  tab.socket.on('voice-agent:draw_card', (p, meta, ack) => ack({ ok: true, result: 'on time' }));
  const next = await relay.call({ apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 2000 });
  assert.equal(next.body.result, 'on time');
  tab.close();
});

test('a tab that reconnects inside the grace gets the call that was waiting for it', async () => {
  const { tab, apiKey, token } = await relay.boundTab();
  tab.close();
  await relay.waitState(apiKey, 'offline');
  const pending = relay.call({ apiKey, toolName: 'draw_card', params: { position: 'Future' }, awaitResult: true, timeoutMs: 5000 });
  await sleep(300);
  const back = relay.tab({ token, transports: ['polling'] });
  back.socket.on('voice-agent:draw_card', (p, meta, ack) => ack({ ok: true, result: { cardId: 'the-sun', position: p.position } }));
  await back.connected();
  const r = await pending;
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body.result, { cardId: 'the-sun', position: 'Future' });
  // Fire-and-forget calls wait the same way.
  back.close();
  await relay.waitState(apiKey, 'offline');
  const fire = relay.call({ apiKey, toolName: 'OpenPopover', params: { message: 'later' }, timeoutMs: 5000 });
  await sleep(200);
  const again = relay.tab({ token });
  await again.connected();
  assert.equal((await fire).status, 200);
  assert.deepEqual((await again.next('voice-agent:OpenPopover'))[0], { message: 'later' });
  again.close();
});

test('an awaited call survives its tab dropping mid-call: it is delivered again after the re-bind', async () => {
  const { tab, apiKey, token } = await relay.boundTab();
  tab.socket.on('voice-agent:draw_card', () => { /* the user never picks; the tab goes away */ });
  const pending = relay.call({ apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 5000 });
  const [, firstMeta] = await tab.next('voice-agent:draw_card');
  tab.close();
  await relay.waitState(apiKey, 'offline');
  const back = relay.tab({ token });
  back.socket.on('voice-agent:draw_card', (p, meta, ack) => ack({ ok: true, result: { callId: meta.callId } }));
  await back.connected();
  const r = await pending;
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.result.callId, firstMeta.callId);
  back.close();
});

test('tab_offline: 409 when no tab comes back within the call\'s timeout', async () => {
  const { tab, apiKey } = await relay.boundTab();
  tab.close();
  await relay.waitState(apiKey, 'offline');
  for (const awaitResult of [false, true]) {
    const started = Date.now();
    const r = await relay.call({ apiKey, toolName: 'OpenPopover', awaitResult, timeoutMs: 250 });
    assert.equal(r.status, 409);
    assert.equal(r.body.error.code, 'tab_offline');
    assert.ok(Date.now() - started >= 240);
  }
  // A key issued but never bound waits the same way.
  const fresh = await relay.token();
  const r = await relay.call({ apiKey: fresh.apiKey, toolName: 'OpenPopover', timeoutMs: 100 });
  assert.equal(r.body.error.code, 'tab_offline');
});

test('an idempotent retry gets the first outcome and emits nothing new', async () => {
  const { tab, apiKey } = await relay.boundTab();
  let emitted = 0;
  tab.socket.on('voice-agent:draw_card', (p, meta, ack) => {
    emitted += 1;
    setTimeout(() => ack({ ok: true, result: { n: emitted } }), 150);
  });
  const body = { apiKey, toolName: 'draw_card', params: { position: 'Past' }, awaitResult: true };
  const headers = { 'idempotency-key': 'draw-past-1' };
  // The retry arrives while the first is still waiting for the tab.
  const [a, b] = await Promise.all([relay.call(body, { headers }), sleep(30).then(() => relay.call(body, { headers }))]);
  const c = await relay.call(body, { headers });
  assert.equal(emitted, 1);
  for (const r of [a, b, c]) {
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, a.body);
  }
  // Failures replay too.
  const offline = await relay.token();
  const h2 = { 'idempotency-key': 'x-2' };
  const f1 = await relay.call({ apiKey: offline.apiKey, toolName: 'OpenPopover', timeoutMs: 50 }, { headers: h2 });
  const f2 = await relay.call({ apiKey: offline.apiKey, toolName: 'OpenPopover', timeoutMs: 50 }, { headers: h2 });
  assert.equal(f1.status, 409);
  assert.deepEqual(f2.body, f1.body);
  // The same Idempotency-Key with a different request is refused, and emits nothing.
  const other = await relay.call({ ...body, params: { position: 'Future' } }, { headers });
  assert.equal(other.status, 400);
  assert.equal(other.body.error.code, 'invalid_request');
  // A different Idempotency-Key is a new call.
  await relay.call(body, { headers: { 'idempotency-key': 'draw-past-2' } });
  assert.equal(emitted, 2);
  const bad = await relay.call(body, { headers: { 'idempotency-key': 'has space' } });
  assert.equal(bad.status, 400);
  assert.equal(emitted, 2);
  tab.close();
});

test('per-key limit on calls in flight: 429 beyond it', async () => {
  const { tab, apiKey } = await relay.boundTab();
  const acks = [];
  tab.socket.on('voice-agent:slow', (p, m, ack) => acks.push(ack));
  const inflight = [1, 2, 3].map(() => relay.call({ apiKey, toolName: 'slow', awaitResult: true, timeoutMs: 5000 }));
  while (acks.length < 3) await sleep(10);
  const over = await relay.call({ apiKey, toolName: 'slow', awaitResult: true });
  assert.equal(over.status, 429);
  assert.equal(over.body.error.code, 'rate_limited');
  assert.equal(acks.length, 3, 'the refused call was not delivered');
  acks.forEach((ack, i) => ack({ ok: true, result: i }));
  const results = await Promise.all(inflight);
  assert.deepEqual(results.map((r) => r.body.result).sort(), [0, 1, 2]);
  // Slots are released: another call goes through.
  tab.socket.off('voice-agent:slow');
  tab.socket.on('voice-agent:slow', (p, m, ack) => ack('ok'));
  assert.equal((await relay.call({ apiKey, toolName: 'slow', awaitResult: true })).status, 200);
  tab.close();
});

test('the agent cancels a running call by its Idempotency-Key: the tab gets cancel, the call ends', async () => {
  const { tab, apiKey } = await relay.boundTab();
  tab.socket.on('voice-agent:draw_card', () => {});
  const token = await relay.tokenFor(apiKey);
  const cancel = (idem, body = { apiKey }, secret = token) => relay.fetch('/api/voice-agent/tool-call/cancel', {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(secret ? { authorization: `Bearer ${secret}` } : {}),
      ...(idem ? { 'idempotency-key': idem } : {}),
    },
    body: JSON.stringify(body),
  });
  const pending = relay.call(
    { apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 20000 },
    { headers: { 'idempotency-key': 'cancel-me-1' } },
  );
  const [, meta] = await tab.next('voice-agent:draw_card');
  assert.equal((await cancel('cancel-me-1', { apiKey }, 'wrong-secret-wrong')).status, 401);
  // Another key's token, or a server's credential, cancels nothing here.
  const other = await relay.boundTab();
  assert.equal((await cancel('cancel-me-1', { apiKey }, await relay.tokenFor(other.apiKey))).status, 403);
  assert.equal((await cancel('cancel-me-1', { apiKey }, relay.workerSecret)).status, 403);
  other.tab.close();
  assert.equal((await cancel(null)).status, 400, 'the call is named by its Idempotency-Key');
  assert.equal((await cancel('cancel-me-1', { apiKey: 'va_nope' })).status, 400);
  const started = Date.now();
  const done = await cancel('cancel-me-1');
  assert.deepEqual(done.body, { ok: true, cancelled: true });
  const [cancelled] = await tab.next('voice-agent:cancel');
  assert.deepEqual(cancelled, { callId: meta.callId });
  const r = await pending;
  assert.ok(Date.now() - started < 2000, 'the call ended at once');
  assert.equal(r.status, 504);
  assert.equal(r.body.error.code, 'timeout');
  assert.match(r.body.error.message, /cancelled/);
  assert.equal(r.body.callId, meta.callId);
  // Over: nothing runs under that key any more; a retry replays the outcome.
  assert.deepEqual((await cancel('cancel-me-1')).body, { ok: true, cancelled: false });
  const replay = await relay.call(
    { apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 20000 },
    { headers: { 'idempotency-key': 'cancel-me-1' } },
  );
  assert.equal(replay.status, 504);
  assert.equal(replay.body.callId, meta.callId);
  // A call waiting for its offline tab is cancelled the same way.
  tab.close();
  await relay.waitState(apiKey, 'offline');
  const waiting = relay.call(
    { apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 20000 },
    { headers: { 'idempotency-key': 'cancel-me-2' } },
  );
  await sleep(100);
  assert.deepEqual((await cancel('cancel-me-2')).body, { ok: true, cancelled: true });
  assert.equal((await waiting).status, 504);
});
