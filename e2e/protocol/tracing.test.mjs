// A call's trace context and time split, with span export off (no OTEL_* set): the relay takes a
// W3C traceparent/tracestate on the tool call (a value off the W3C grammar is ignored) and
// passes it on in the tab's meta as it came; the browser client (web/client, built for Node)
// measures its handler and answers the time with the envelope, only to a relay whose meta says
// it reads it (an older relay, played here by a plain socket.io server, gets exactly the
// envelope); the relay answers `Server-Timing: relay, delivery, tab` and writes the trace id in
// its JSON log line of the call.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { pathToFileURL } from 'node:url';
import { Server as SocketServer } from 'socket.io';
import { startRelay, within, sleep, webClientNode } from '../harness/index.mjs';

const { VoiceRelayClient } = await import(pathToFileURL(webClientNode).href);

const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const TRACESTATE = 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7';

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

let relay;
before(async () => { relay = await startRelay({ RELAY_LOG_FORMAT: 'json' }); });
after(async () => { await relay?.stop(); });

async function boundClient(handlers) {
  const client = new VoiceRelayClient({ relayUrl: relay.url, transports: ['websocket'] });
  for (const [name, h] of Object.entries(handlers)) client.handle(name, h);
  const token = await within(5000, client.start(), 'client.start');
  relay.remember(token.token, token.apiKey);
  await relay.waitState(token.apiKey, 'online');
  return { client, token };
}

test('the caller\'s trace context reaches the handler; the answer splits the time into relay, delivery and tab', async () => {
  const metas = [];
  const { client, token } = await boundClient({
    draw_card: async (params, meta) => {
      metas.push(meta);
      await sleep(80);
      return { cardId: 'the-sun', cardName: 'The Sun', reversed: false };
    },
    OpenPopover: (params, meta) => { metas.push(meta); },
  });
  const traced = await relay.call(
    { apiKey: token.apiKey, toolName: 'draw_card', params: { positionLabel: 'Past' }, awaitResult: true },
    { headers: { traceparent: TRACEPARENT, tracestate: TRACESTATE } },
  );
  assert.equal(traced.status, 200, JSON.stringify(traced.body));
  // The handler's time went back apart from the result: the agent gets the result alone.
  assert.deepEqual(traced.body.result, { cardId: 'the-sun', cardName: 'The Sun', reversed: false });
  assert.equal(metas[0].traceparent, TRACEPARENT);
  assert.equal(metas[0].tracestate, TRACESTATE);
  const t = serverTiming(traced.headers);
  assert.deepEqual(Object.keys(t).sort(), ['delivery', 'relay', 'tab']);
  assert.ok(t.tab >= 75 && t.tab < 5000, `the tab's time is the handler's 80 ms: ${t.tab}`);
  assert.ok(t.relay >= 0 && t.delivery >= 0, JSON.stringify(t));

  // A traceparent off the grammar (upper case) is ignored, its tracestate with it.
  const bad = await relay.call(
    { apiKey: token.apiKey, toolName: 'draw_card', params: { positionLabel: 'Past' }, awaitResult: true },
    { headers: { traceparent: TRACEPARENT.toUpperCase(), tracestate: TRACESTATE } },
  );
  assert.equal(bad.status, 200);
  assert.equal(metas[1].traceparent, undefined);
  assert.equal(metas[1].tracestate, undefined);

  // A tracestate off the grammar is dropped, the traceparent kept.
  const halfBad = await relay.call(
    { apiKey: token.apiKey, toolName: 'OpenPopover', params: { message: 'hi' }, awaitResult: true },
    { headers: { traceparent: TRACEPARENT, tracestate: 'Not=Valid' } },
  );
  assert.equal(halfBad.status, 200);
  assert.equal(metas[2].traceparent, TRACEPARENT);
  assert.equal(metas[2].tracestate, undefined);

  // No handler: the tab says so at once, with its (short) time.
  const missing = await relay.call({ apiKey: token.apiKey, toolName: 'nope', awaitResult: true }, { headers: { traceparent: TRACEPARENT } });
  assert.equal(missing.body.error.code, 'no_handler');
  const m = serverTiming(missing.headers);
  assert.ok(m.tab >= 0 && m.tab < 50, JSON.stringify(m));

  // Fire-and-forget: delivered, no tab time.
  const fire = await relay.call({ apiKey: token.apiKey, toolName: 'OpenPopover', params: { message: 'x' } });
  assert.equal(fire.status, 200);
  assert.deepEqual(Object.keys(serverTiming(fire.headers)).sort(), ['delivery', 'relay']);

  // Nothing delivered (a key whose tab never connects, with a session token for it): the
  // relay's time alone.
  const offline = (await relay.token()).apiKey;
  const unknown = await relay.call({ apiKey: offline, toolName: 'OpenPopover', awaitResult: true, timeoutMs: 300 });
  assert.ok(unknown.status >= 400, JSON.stringify(unknown.body));
  assert.deepEqual(Object.keys(serverTiming(unknown.headers)), ['relay']);
  client.stop();

  // The relay's JSON line of each call names its trace when it had one.
  const lines = relay.logText().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
    .filter((l) => l.message === 'tool call');
  const byCall = new Map(lines.map((l) => [l.call_id, l]));
  assert.equal(byCall.get(traced.body.callId).trace_id, '4bf92f3577b34da6a3ce929d0e0e4736');
  assert.equal(byCall.get(missing.body.callId).trace_id, '4bf92f3577b34da6a3ce929d0e0e4736');
  assert.equal(byCall.get(bad.body.callId).trace_id, undefined);
  assert.equal(byCall.get(fire.body.callId).trace_id, undefined);
});

test('the handler\'s time goes only to a relay that says it reads it: an older relay gets exactly the envelope', async () => {
  // An older relay, as the browser sees one: the same events and acknowledgements, a meta
  // without acceptsHandlerMs.
  const http = createServer((req, res) => {
    if (req.url === '/token') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ token: 'older-relay-token', url: 'ws://127.0.0.1:1', roomName: 'r', identity: 'i', apiKey: `va_${'1'.repeat(64)}`, expiresAt: 0 }));
    } else {
      res.writeHead(404).end();
    }
  });
  const io = new SocketServer(http, { transports: ['websocket'] });
  const answers = [];
  const connected = new Promise((resolve) => io.on('connection', (socket) => {
    socket.on('voice-agent:handles', (_payload, ack) => ack({ ok: true, revision: 1 }));
    resolve(socket);
  }));
  await new Promise((r) => http.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${http.address().port}`;
  const client = new VoiceRelayClient({ relayUrl: url, transports: ['websocket'] });
  client.handle('draw_card', async () => { await sleep(5); return { cardId: 'the-moon' }; });
  try {
    await within(5000, client.start(), 'client.start against the older relay');
    const socket = await within(5000, connected, 'the connection');
    for (const meta of [
      { callId: 'c_old1', expectsResult: true, deadlineMs: 5000 },
      { callId: 'c_old2', expectsResult: true, deadlineMs: 5000, acceptsHandlerMs: false },
    ]) {
      answers.push(await within(5000, socket.timeout(5000).emitWithAck('voice-agent:draw_card', {}, meta), 'the answer'));
    }
    answers.push(await within(5000, socket.timeout(5000).emitWithAck('voice-agent:nope', {}, { callId: 'c_old3', expectsResult: true, deadlineMs: 5000 }), 'no_handler'));
    assert.deepEqual(answers[0], { ok: true, result: { cardId: 'the-moon' } });
    assert.deepEqual(answers[1], { ok: true, result: { cardId: 'the-moon' } });
    assert.deepEqual(Object.keys(answers[2]).sort(), ['error', 'ok']);
    // The same client to a relay that reads it: the time comes with the envelope.
    const timed = await within(5000, socket.timeout(5000).emitWithAck('voice-agent:draw_card', {}, { callId: 'c_new', expectsResult: true, deadlineMs: 5000, acceptsHandlerMs: true }), 'the timed answer');
    assert.deepEqual(Object.keys(timed).sort(), ['handlerMs', 'ok', 'result']);
    assert.ok(timed.handlerMs >= 4 && timed.handlerMs < 5000, String(timed.handlerMs));
  } finally {
    client.stop();
    io.close();
    await new Promise((r) => http.close(r));
  }
});
