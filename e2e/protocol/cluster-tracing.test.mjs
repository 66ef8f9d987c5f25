// A call posted to one node for a tab on another goes there on that node's channel: the caller's
// W3C trace context and the handler-time offer travel with it, and the tab's handler time comes
// back with the answer into the calling node's Server-Timing. Two real relays on a real Redis,
// the tab played by the official socket.io-client.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startNode, startRedis, startOtlpReceiver, nodeSecrets } from '../harness/index.mjs';

const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const TRACESTATE = 'congo=t61rcWkgMzE';

let redis;
let receiver;
const nodes = [];
let A;
let B;
// Two more nodes, which export their spans.
const traced = [];
let C;
let D;
before(async () => {
  redis = await startRedis();
  const env = { ...nodeSecrets(), RELAY_REDIS_URL: redis.url };
  A = await startNode(nodes, env, { name: 'relay-a' });
  B = await startNode(nodes, env, { name: 'relay-b' });
  receiver = await startOtlpReceiver();
  const exported = { ...env, ...receiver.env() };
  C = await startNode(traced, { ...exported, OTEL_SERVICE_NAME: 'relay-c' }, { name: 'relay-c' });
  D = await startNode(traced, { ...exported, OTEL_SERVICE_NAME: 'relay-d' }, { name: 'relay-d' });
  for (const n of traced) n.share(receiver);
});
after(async () => {
  for (const n of [...nodes, ...traced]) await n.stop();
  await receiver?.stop();
  await redis?.stop();
});

/** `Server-Timing` as a map of metric to milliseconds. */
function serverTiming(headers) {
  const value = headers.get('server-timing');
  assert.ok(value, 'the answer has Server-Timing');
  return Object.fromEntries(value.split(',').map((m) => {
    const [name, ...params] = m.trim().split(';');
    const dur = params.find((p) => p.startsWith('dur='));
    return [name, Number(dur.slice(4))];
  }));
}

test('a call to a tab on another node carries the trace context there, and the handler time back', async () => {
  const minted = await A.token();
  const tab = A.tab({ token: minted.token });
  await tab.connected();
  await A.waitState(minted.apiKey, 'online');
  const metas = [];
  tab.socket.on('voice-agent:draw_card', (params, meta, ack) => {
    metas.push(meta);
    const envelope = { ok: true, result: { cardId: 'the-star' } };
    ack(meta.acceptsHandlerMs ? { ...envelope, handlerMs: 120 } : envelope);
  });

  const traced = await B.call(
    { apiKey: minted.apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 5000 },
    { headers: { traceparent: TRACEPARENT, tracestate: TRACESTATE } },
  );
  assert.equal(traced.status, 200, JSON.stringify(traced.body));
  assert.deepEqual(traced.body.result, { cardId: 'the-star' });
  assert.equal(metas.length, 1);
  assert.equal(metas[0].callId, traced.body.callId);
  // Spans are not exported here: the tab works in the caller's own context, as it came.
  assert.equal(metas[0].traceparent, TRACEPARENT);
  assert.equal(metas[0].tracestate, TRACESTATE);
  assert.equal(metas[0].acceptsHandlerMs, true);
  const t = serverTiming(traced.headers);
  assert.deepEqual(Object.keys(t).sort(), ['delivery', 'relay', 'tab']);
  assert.equal(t.tab, 120);
  assert.ok(t.delivery >= 0, JSON.stringify(t));

  // Without a trace context, none reaches the tab.
  const plain = await B.call({ apiKey: minted.apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 5000 });
  assert.equal(plain.status, 200, JSON.stringify(plain.body));
  assert.equal(metas[1].traceparent, undefined);
  assert.equal(metas[1].tracestate, undefined);
  tab.close();
});

test('with spans exported, the holding node\'s delivery is a child of the calling node\'s, and the tab works inside it', async () => {
  const minted = await C.token();
  const tab = C.tab({ token: minted.token });
  await tab.connected();
  await C.waitState(minted.apiKey, 'online');
  const metas = [];
  tab.socket.on('voice-agent:draw_card', (params, meta, ack) => {
    metas.push(meta);
    ack({ ok: true, result: { cardId: 'the-moon' }, handlerMs: 15 });
  });
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  const res = await D.call(
    { apiKey: minted.apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 5000 },
    { headers: { traceparent: `00-${traceId}-${spanId}-01` } },
  );
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const spans = await receiver.waitFor((all) => {
    const mine = all.filter((s) => s.traceId === traceId);
    return mine.some((s) => s.name === 'deliver_held') && mine.some((s) => s.name === 'tool_call') && mine;
  }, 'the call\'s spans on both nodes');
  const server = spans.find((s) => s.name === 'tool_call');
  const held = spans.find((s) => s.name === 'deliver_held');
  const deliver = spans.find((s) => s.name === 'deliver' && s.spanId === held.parentSpanId);
  const tree = JSON.stringify(spans.map((s) => [s.service, s.name, s.spanId, s.parentSpanId]));
  assert.equal(server.service, 'relay-d');
  assert.equal(server.parentSpanId, spanId);
  assert.ok(deliver, `the holding node's span has the calling node's delivery span as parent: ${tree}`);
  assert.equal(deliver.service, 'relay-d');
  assert.equal(deliver.parentSpanId, server.spanId);
  assert.equal(deliver.attributes['relay.route'], 'remote');
  assert.equal(held.service, 'relay-c');
  assert.equal(held.kind, 'consumer');
  assert.equal(held.attributes['relay.call_id'], res.body.callId);
  assert.equal(metas[0].traceparent, `00-${traceId}-${held.spanId}-01`, 'the tab works inside the holding node\'s span');
  const answer = deliver.events.find((e) => e.name === 'tab answered');
  assert.equal(answer?.attributes['relay.handler_ms'], 15);
  tab.close();
});
