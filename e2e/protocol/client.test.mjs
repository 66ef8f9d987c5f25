// The browser client library (web/client/src/client.ts, built for Node) against the real relay:
// answers in the relay's envelope, thrown errors as tool_failed, unknown tools as no_handler,
// cancel aborting the handler's signal, revoked surfaced, and re-binding after a reconnect.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { pathToFileURL } from 'node:url';
import { startRelay, within, sleep, webClientNode } from '../harness/index.mjs';

const { VoiceRelayClient, ToolError } = await import(pathToFileURL(webClientNode).href);

let relay;
before(async () => { relay = await startRelay(); });
after(async () => { await relay?.stop(); });

async function started(handlers = {}, opts = {}) {
  const client = new VoiceRelayClient({ relayUrl: relay.url, transports: ['websocket'], ...opts });
  for (const [name, h] of Object.entries(handlers)) client.handle(name, h);
  const states = [];
  client.on('state', (s) => states.push(s));
  const token = await within(5000, client.start(), 'client.start');
  relay.remember(token.token, token.apiKey);
  await relay.waitState(token.apiKey, 'online');
  return { client, token, states };
}

test('handlers answer in the envelope; thrown errors are tool_failed; unknown tools no_handler', async () => {
  const seen = [];
  const { client, token, states } = await started({
    draw_card: async (params, meta) => { seen.push(meta); return { cardId: 'the-sun', cardName: 'The Sun', reversed: false }; },
    broken: () => { throw new Error('the deck fell on the floor'); },
    coded: () => { throw new ToolError('unknown_card', 'no such card'); },
    nothing: () => undefined,
  });
  assert.deepEqual(states.slice(-1), ['bound']);
  const ok = await relay.call({ apiKey: token.apiKey, toolName: 'draw_card', params: { positionLabel: 'Past' }, awaitResult: true });
  assert.deepEqual(ok.body.result, { cardId: 'the-sun', cardName: 'The Sun', reversed: false });
  assert.equal(seen[0].callId, ok.body.callId);
  assert.equal(seen[0].expectsResult, true);
  assert.ok(seen[0].signal instanceof AbortSignal);
  const broken = await relay.call({ apiKey: token.apiKey, toolName: 'broken', awaitResult: true });
  assert.equal(broken.status, 502);
  assert.deepEqual(broken.body.error, { code: 'tool_failed', message: 'the deck fell on the floor' });
  const coded = await relay.call({ apiKey: token.apiKey, toolName: 'coded', awaitResult: true });
  assert.equal(coded.body.error.code, 'tool_failed');
  assert.equal(coded.body.error.message, 'no such card');
  const missing = await relay.call({ apiKey: token.apiKey, toolName: 'nope', awaitResult: true });
  assert.equal(missing.body.error.code, 'no_handler');
  assert.equal((await relay.call({ apiKey: token.apiKey, toolName: 'nothing', awaitResult: true })).body.result, null);
  client.stop();
});

test('cancel aborts the running handler; a late answer is not sent', async () => {
  let aborted = null;
  const cancels = [];
  const { client, token } = await started({
    draw_card: (params, meta) => new Promise((resolve, reject) => {
      meta.signal.addEventListener('abort', () => { aborted = meta.signal.reason; reject(meta.signal.reason); });
    }),
  });
  client.on('cancel', (id) => cancels.push(id));
  const r = await relay.call({ apiKey: token.apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 300 });
  assert.equal(r.status, 504);
  await within(2000, (async () => { while (!aborted) await sleep(10); })(), 'the handler to be aborted');
  assert.equal(aborted.name, 'AbortError');
  assert.deepEqual(cancels, [r.body.callId]);
  client.stop();
});

test('revoked is surfaced, running handlers are aborted, and the client does not re-bind', async () => {
  let signal;
  const revoked = [];
  const { client, token } = await started({ slow: (p, meta) => { signal = meta.signal; return new Promise(() => {}); } });
  client.on('revoked', (reason) => revoked.push(reason));
  const pending = relay.call({ apiKey: token.apiKey, toolName: 'slow', awaitResult: true, timeoutMs: 5000 });
  await within(3000, (async () => { while (!signal) await sleep(10); })(), 'the handler to start');
  assert.equal((await relay.revoke(token.apiKey)).status, 200);
  assert.equal((await pending).body.error.code, 'unknown_key');
  await within(3000, (async () => { while (!revoked.length) await sleep(10); })(), 'revoked');
  assert.deepEqual(revoked, ['revoked']);
  assert.equal(signal.aborted, true);
  assert.equal(client.state, 'revoked');
  await sleep(700);
  assert.equal(client.state, 'revoked', 'no reconnect after a revoke');
  client.stop();
});

test('a call re-delivered after a reconnect is answered by the running handler, not run twice', async () => {
  let runs = 0;
  let finish;
  const { client, token } = await started({
    draw_card: () => { runs += 1; return new Promise((resolve) => { finish = resolve; }); },
  }, { transports: ['websocket'] });
  const pending = relay.call({ apiKey: token.apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 8000 });
  await within(3000, (async () => { while (!finish) await sleep(10); })(), 'the handler to start');
  // Drop the transport under the client: socket.io-client reconnects and re-binds by itself.
  client.socket.io.engine.close();
  await relay.waitState(token.apiKey, 'offline', 5000).catch(() => {});
  await relay.waitState(token.apiKey, 'online', 8000);
  await sleep(200);
  finish({ cardId: 'the-moon', cardName: 'The Moon', reversed: true });
  const r = await pending;
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.result.cardId, 'the-moon');
  assert.equal(runs, 1);
  client.stop();
});

test('a call delivered again after its answer was lost gets the same answer, without running twice', async () => {
  let runs = 0;
  const { client, token } = await started({
    draw_card: () => { runs += 1; return { cardId: `card-${runs}` }; },
  }, { transports: ['websocket'] });
  // The first answer never leaves the tab (as when the relay node carrying it dies); the
  // transport drops right after, so the relay delivers the call again once the tab is back.
  try {
    const socket = client.socket;
    const send = socket.packet.bind(socket);
    let dropped = 0;
    socket.packet = (packet) => {
      if (packet.type === 3 && dropped === 0) {
        dropped += 1;
        setTimeout(() => socket.io.engine.close(), 10);
        return;
      }
      send(packet);
    };
    const r = await relay.call({ apiKey: token.apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 8000 });
    assert.equal(dropped, 1, 'the first answer was held back');
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(r.body.result, { cardId: 'card-1' });
    assert.equal(runs, 1, 'the handler ran once');
    // A new call with another id runs the handler again.
    const next = await relay.call({ apiKey: token.apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 8000 });
    assert.deepEqual(next.body.result, { cardId: 'card-2' });
  } finally {
    client.stop();
  }
});
