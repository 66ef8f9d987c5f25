// Spans exported over OTLP/HTTP to a real receiver (e2e/worker/otlp_receiver.py, decoding with
// opentelemetry-proto): the relay's span of a tool call is a child of the caller's span (the
// test plays the agent, with a traceparent of its own), its delivery span a child of it, and the
// tab (the browser client built for Node) works inside the delivery span and answers with its
// handler time, which the relay adds as an event; timeouts and no_handler end in error spans.
// Every payload is searched for the keys, tokens and secrets the test saw.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { startRelay, startOtlpReceiver, within, sleep, webClientNode } from '../harness/index.mjs';

const { VoiceRelayClient } = await import(pathToFileURL(webClientNode).href);

/** A span of the test's own: what an agent's tool span would send. */
function callerSpan() {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

let receiver;
let relay;
before(async () => {
  receiver = await startOtlpReceiver();
  relay = await startRelay({ ...receiver.env(), RELAY_LOG_FORMAT: 'json', RELAY_DEFAULT_TIMEOUT_MS: '1000' });
  relay.share(receiver);
});
after(async () => {
  await relay?.stop();
  await receiver?.stop();
});

test('the relay\'s spans continue the caller\'s trace; the tab works in the delivery span and its time is an event', async () => {
  const metas = [];
  const client = new VoiceRelayClient({ relayUrl: relay.url, transports: ['websocket'] });
  client.handle('draw_card', async (params, meta) => { metas.push(meta); await sleep(40); return { cardId: 'the-sun' }; });
  client.handle('slow', async (params, meta) => { metas.push(meta); await sleep(3000); return 1; });
  const token = await within(5000, client.start(), 'client.start');
  relay.remember(token.token, token.apiKey);
  await relay.waitState(token.apiKey, 'online');
  try {
    const ok = callerSpan();
    const answered = await relay.call(
      { apiKey: token.apiKey, toolName: 'draw_card', params: { positionLabel: 'Past' }, awaitResult: true },
      { headers: { traceparent: ok.traceparent, tracestate: 'vendor=v1' } },
    );
    assert.equal(answered.status, 200);
    const missing = callerSpan();
    const noHandler = await relay.call({ apiKey: token.apiKey, toolName: 'nope', awaitResult: true }, { headers: { traceparent: missing.traceparent } });
    assert.equal(noHandler.body.error.code, 'no_handler');
    const late = callerSpan();
    const timedOut = await relay.call({ apiKey: token.apiKey, toolName: 'slow', awaitResult: true, timeoutMs: 300 }, { headers: { traceparent: late.traceparent } });
    assert.equal(timedOut.body.error.code, 'timeout');

    const inTrace = (traceId) => (spans) => {
      const mine = spans.filter((s) => s.traceId === traceId);
      return mine.length >= 2 && mine;
    };
    // The answered call: tool_call (server) → deliver (producer); the tab saw the deliver span.
    const spans = await receiver.waitFor(inTrace(ok.traceId), 'the answered call\'s spans');
    const server = spans.find((s) => s.name === 'tool_call');
    const deliver = spans.find((s) => s.name === 'deliver');
    assert.ok(server && deliver, JSON.stringify(spans.map((s) => s.name)));
    assert.equal(server.service, 'voice-relay');
    assert.equal(server.kind, 'server');
    assert.equal(server.parentSpanId, ok.spanId, 'the relay\'s span is a child of the caller\'s');
    assert.equal(server.traceState, 'vendor=v1');
    assert.equal(deliver.parentSpanId, server.spanId);
    assert.equal(deliver.attributes['relay.route'], 'local');
    assert.equal(server.attributes['relay.call_id'], answered.body.callId);
    assert.equal(server.attributes['relay.tool'], 'draw_card');
    assert.equal(server.attributes['http.response.status_code'], 200);
    assert.match(server.attributes['relay.key'], /^[0-9a-f]{8}$/, 'the key only as its fingerprint');
    assert.equal(server.status.code, 'unset');
    assert.equal(metas[0].traceparent, `00-${ok.traceId}-${deliver.spanId}-01`, 'the tab works inside the delivery span');
    assert.equal(metas[0].tracestate, 'vendor=v1');
    const answer = deliver.events.find((e) => e.name === 'tab answered');
    assert.ok(answer, 'the tab\'s answer is an event of the delivery span');
    assert.ok(answer.attributes['relay.handler_ms'] >= 35, JSON.stringify(answer));
    // Payloads stay off spans unless an operator turns them on.
    assert.equal(server.attributes['relay.params'], undefined);

    // no_handler and timeout: error spans, the code as their description.
    const failed = await receiver.waitFor(inTrace(missing.traceId), 'the no_handler call\'s spans');
    for (const s of failed) assert.equal(s.status.code, 'error', s.name);
    assert.equal(failed.find((s) => s.name === 'tool_call').status.message, 'no_handler');
    const slow = await receiver.waitFor(inTrace(late.traceId), 'the timed-out call\'s spans');
    const slowServer = slow.find((s) => s.name === 'tool_call');
    assert.equal(slowServer.status.code, 'error');
    assert.equal(slowServer.status.message, 'timeout');
    assert.equal(slowServer.attributes['http.response.status_code'], 504);

    // The relay's JSON log names the same trace.
    const line = relay.logText().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
      .find((l) => l.message === 'tool call' && l.call_id === answered.body.callId);
    assert.equal(line.trace_id, ok.traceId);
  } finally {
    client.stop();
  }
});

test('without a caller\'s context the relay starts a trace of its own', async () => {
  const client = new VoiceRelayClient({ relayUrl: relay.url, transports: ['websocket'] });
  const metas = [];
  client.handle('OpenPopover', (params, meta) => { metas.push(meta); });
  const token = await within(5000, client.start(), 'client.start');
  relay.remember(token.token, token.apiKey);
  await relay.waitState(token.apiKey, 'online');
  try {
    const res = await relay.call({ apiKey: token.apiKey, toolName: 'OpenPopover', params: { message: 'hi' }, awaitResult: true });
    assert.equal(res.status, 200);
    const spans = await receiver.waitFor((all) => {
      const server = all.find((s) => s.name === 'tool_call' && s.attributes['relay.call_id'] === res.body.callId);
      return server && all.filter((s) => s.traceId === server.traceId);
    }, 'the call\'s spans');
    const server = spans.find((s) => s.name === 'tool_call');
    assert.equal(server.parentSpanId, '', 'a root span');
    assert.match(metas[0].traceparent, new RegExp(`^00-${server.traceId}-[0-9a-f]{16}-01$`));
  } finally {
    client.stop();
  }
});

test('under a parent-based sampler the relay follows the caller: no span for a dropped trace, whose context the tab gets as it came', async () => {
  // Keeps a caller's sampled trace, drops its unsampled one, and starts none of its own.
  const node = await startRelay({
    ...receiver.env(),
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: '0',
  });
  node.share(receiver);
  const client = new VoiceRelayClient({ relayUrl: node.url, transports: ['websocket'] });
  const metas = [];
  client.handle('OpenPopover', (params, meta) => { metas.push(meta); });
  const token = await within(5000, client.start(), 'client.start');
  node.remember(token.token, token.apiKey);
  await node.waitState(token.apiKey, 'online');
  try {
    const call = (headers) => node.call(
      { apiKey: token.apiKey, toolName: 'OpenPopover', params: { message: 'hi' }, awaitResult: true },
      { headers },
    );
    const dropped = callerSpan();
    const droppedParent = dropped.traceparent.replace(/-01$/, '-00');
    const first = await call({ traceparent: droppedParent });
    assert.equal(first.status, 200);
    const none = await call({});
    assert.equal(none.status, 200);
    const kept = callerSpan();
    const third = await call({ traceparent: kept.traceparent });
    assert.equal(third.status, 200);

    assert.equal(metas[0].traceparent, droppedParent, 'the caller\'s context, as it came');
    assert.equal(metas[1].traceparent, undefined);
    const spans = await receiver.waitFor((all) => {
      const mine = all.filter((s) => s.traceId === kept.traceId);
      return mine.length >= 2 && mine;
    }, 'the kept trace\'s spans');
    assert.equal(spans.find((s) => s.name === 'tool_call').parentSpanId, kept.spanId);
    // Spans go out in batches: one more batch later, the dropped calls still have none.
    await sleep(600);
    const all = await receiver.spans();
    const ids = [first.body.callId, none.body.callId];
    assert.deepEqual(all.filter((s) => ids.includes(s.attributes['relay.call_id'])), []);
    assert.deepEqual(all.filter((s) => s.traceId === dropped.traceId), []);
  } finally {
    client.stop();
    await node.stop();
  }
});
