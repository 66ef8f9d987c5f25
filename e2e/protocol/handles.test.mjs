// What a tab says it handles (`voice-agent:handles`) and the session mode it is told
// (`voice-agent:mode`), against the real relay with the official socket.io-client: the bounds
// of a declaration, the agent's view of it (at once and waited for), setting the mode over HTTP,
// and the browser client library declaring on bind and on every handler change.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { pathToFileURL } from 'node:url';
import { startRelay, strangerKey, within, sleep, webClientNode } from '../harness/index.mjs';

const { VoiceRelayClient } = await import(pathToFileURL(webClientNode).href);

let relay;
before(async () => { relay = await startRelay(); });
after(async () => { await relay?.stop(); });

const declare = (tab, payload) => within(5000, tab.socket.emitWithAck('voice-agent:handles', payload), 'the handles ack');
const setMode = (apiKey, body, secret = relay.workerSecret) =>
  relay.fetch(`/api/voice-agent/keys/${apiKey}/mode`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
const stateQuery = (apiKey, query) =>
  relay.fetch(`/api/voice-agent/keys/${apiKey}?${query}`, { headers: { authorization: `Bearer ${relay.workerSecret}` } });

test('a declaration is acknowledged with its revision and shown in the key state', async () => {
  const { tab, apiKey } = await relay.boundTab();
  let state = await relay.keyState(apiKey);
  assert.equal(state.body.revision, 0);
  assert.equal('handles' in state.body, false, 'never declared: no list (it handles every tool)');

  assert.deepEqual(await declare(tab, { tools: ['zoom', 'CreateDiagram', 'zoom'] }), { ok: true, revision: 1 });
  state = await relay.keyState(apiKey);
  assert.deepEqual(state.body.handles, ['CreateDiagram', 'zoom']);
  assert.equal(state.body.revision, 1);
  assert.deepEqual(await declare(tab, { tools: ['CreateDiagram', 'zoom'] }), { ok: true, revision: 1 }, 'the same set changes nothing');

  const pageTool = { name: 'zoom', description: 'Zoom the canvas.', parameters: { type: 'object' }, awaitResult: true, timeoutMs: 3000 };
  assert.deepEqual(await declare(tab, { tools: ['zoom'], pageTools: [pageTool] }), { ok: true, revision: 2 });
  state = await relay.keyState(apiKey);
  assert.deepEqual(state.body.pageTools, [pageTool]);
  tab.close();
});

test('a call that is not awaited, to a tool the tab declared it does not handle, is no_handler and never sent', async () => {
  const { tab, apiKey } = await relay.boundTab();
  // Never declared: the tab counts as handling every tool.
  const before = await relay.call({ apiKey, toolName: 'zoom', params: {} });
  assert.equal(before.status, 200, JSON.stringify(before.body));
  await tab.next('voice-agent:zoom');
  assert.deepEqual(await declare(tab, { tools: ['CreateDiagram'] }), { ok: true, revision: 1 });
  const refused = await relay.call({ apiKey, toolName: 'zoom', params: {} });
  assert.equal(refused.status, 502, JSON.stringify(refused.body));
  assert.equal(refused.body.ok, false);
  assert.equal(refused.body.error.code, 'no_handler');
  assert.match(refused.body.error.message, /zoom is not among them/);
  assert.match(refused.body.callId, /^c_/);
  const handled = await relay.call({ apiKey, toolName: 'CreateDiagram', params: { title: 't' } });
  assert.equal(handled.status, 200, JSON.stringify(handled.body));
  await tab.next('voice-agent:CreateDiagram');
  await sleep(100);
  assert.equal(tab.received('voice-agent:zoom').length, 1, 'the refused call never reached the tab');
  tab.close();
});

test('a declaration the relay refuses names what is wrong; an unbound socket may not declare', async () => {
  const unbound = relay.tab();
  await unbound.connected();
  const refused = await declare(unbound, { tools: ['a'] });
  assert.equal(refused.ok, false);
  assert.equal(refused.error.code, 'unauthorized');
  unbound.close();

  const { tab } = await relay.boundTab();
  const tool = (over) => ({ name: 'zoom', description: 'Zoom.', parameters: { type: 'object' }, ...over });
  const cases = [
    [['a'], 'payload must be an object'],
    [{ tools: 'a' }, 'tools must be an array'],
    [{ tools: ['fine', 'not fine'] }, 'tools[1]'],
    [{ tools: ['cancel'] }, 'tools[0]'],
    [{ tools: ['mode'] }, 'tools[0]'],
    [{ tools: Array.from({ length: 257 }, (_, i) => `t${i}`) }, 'more than 256'],
    [{ tools: ['a'], extra: 1 }, 'unknown field "extra"'],
    [{ tools: ['zoom'], pageTools: [tool({ name: 'other' })] }, 'must also be listed in tools'],
    [{ tools: ['zoom'], pageTools: [tool({ description: '' })] }, 'pageTools[0].description'],
    [{ tools: ['zoom'], pageTools: [tool({ timeoutMs: 10 ** 9 })] }, 'pageTools[0].timeoutMs'],
    [{ tools: ['zoom'], pageTools: [tool({ parameters: { description: 'x'.repeat(17000) } })] }, 'larger than 16384 bytes'],
  ];
  for (const [payload, expected] of cases) {
    const answer = await declare(tab, payload);
    assert.equal(answer.ok, false, JSON.stringify(payload).slice(0, 80));
    assert.equal(answer.error.code, 'invalid_request');
    assert.ok(answer.error.message.includes(expected), `${answer.error.message} should say ${expected}`);
  }
  // A refused declaration leaves the key as it was, and the socket still works.
  assert.deepEqual(await declare(tab, { tools: ['a'] }), { ok: true, revision: 1 });
  tab.close();
});

test('a declaration sent at once on connect (before the handshake bind ends) waits for the bind', async () => {
  // socket.io-client buffers an emit made before connecting and sends it right after CONNECT,
  // which the relay sends before its connect handler binds the key.
  for (let i = 0; i < 20; i++) {
    const minted = await relay.token();
    const tab = relay.tab({ token: minted.token, autoConnect: false });
    const ack = within(5000, tab.socket.emitWithAck('voice-agent:handles', { tools: [`t${i}`] }), 'the handles ack');
    tab.socket.connect();
    assert.deepEqual(await ack, { ok: true, revision: 1 }, `attempt ${i}`);
    tab.close();
  }
});

test('an agent waits for the declaration to change, within its bound', async () => {
  const { tab, apiKey } = await relay.boundTab();
  // Nothing changes: answered at the end of the wait.
  let started = Date.now();
  let waited = await stateQuery(apiKey, 'after=0&waitMs=400');
  assert.equal(waited.status, 200);
  assert.ok(Date.now() - started >= 380, 'waited');
  assert.equal(waited.body.revision, 0);

  started = Date.now();
  const pending = stateQuery(apiKey, 'after=0&waitMs=10000');
  await sleep(200);
  await declare(tab, { tools: ['x'] });
  waited = await pending;
  assert.ok(Date.now() - started < 5000, 'woken by the declaration');
  assert.equal(waited.body.revision, 1);
  assert.deepEqual(waited.body.handles, ['x']);

  started = Date.now();
  assert.equal((await stateQuery(apiKey, 'waitMs=5000')).status, 200, 'without after: at once');
  assert.ok(Date.now() - started < 2000);
  for (const query of ['after=0&waitMs=30001', 'after=-1&waitMs=10', 'after=0&waitMs=abc', 'later=1']) {
    const bad = await stateQuery(apiKey, query);
    assert.equal(bad.status, 400, query);
    assert.equal(bad.body.error.code, 'invalid_request');
  }
  const gone = await stateQuery(strangerKey(), 'after=0&waitMs=100');
  assert.equal(gone.status, 404);
  tab.close();
});

test('the mode set over HTTP reaches the bound tab now, or the next tab on bind', async () => {
  const minted = await relay.token();
  const early = await setMode(minted.apiKey, { mode: 'lobby' });
  assert.equal(early.status, 200);
  assert.deepEqual(early.body, { ok: true, tabNotified: false });

  const tab = relay.tab({ token: minted.token });
  const first = tab.next('voice-agent:mode');
  await tab.connected();
  assert.deepEqual(await first, [{ mode: 'lobby' }], 'told on bind');

  const now = await setMode(minted.apiKey, { mode: 'round-2' });
  assert.deepEqual(now.body, { ok: true, tabNotified: true });
  assert.deepEqual(await tab.next('voice-agent:mode', (p) => p.mode === 'round-2'), [{ mode: 'round-2' }]);
  assert.equal((await relay.keyState(minted.apiKey)).body.mode, 'round-2');

  for (const body of [{ mode: '' }, { mode: 'two words' }, { mode: 'm'.repeat(65) }, { mode: 3 }, { mode: 'a', x: 1 }, '[]', 'nope']) {
    const bad = await setMode(minted.apiKey, body);
    assert.equal(bad.status, 400, JSON.stringify(body));
    assert.equal(bad.body.error.code, 'invalid_request');
  }
  assert.equal((await setMode(strangerKey(), { mode: 'a' })).status, 404);
  assert.equal((await setMode(minted.apiKey, { mode: 'a' }, 'wrong-secret')).status, 401);
  await relay.revoke(minted.apiKey);
  assert.equal((await setMode(minted.apiKey, { mode: 'a' })).status, 404, 'revoked');
  tab.close();
});

test('the browser client declares on bind and on each handler change, coalesced, and follows the mode', async () => {
  const client = new VoiceRelayClient({ relayUrl: relay.url, transports: ['websocket'] });
  const answers = [];
  client.on('declared', (a) => answers.push(a));
  const modes = [];
  client.on('mode', (m) => modes.push(m));
  client.handle('draw_card', () => ({}));
  const token = await within(5000, client.start(), 'client.start');
  relay.remember(token.token, token.apiKey);
  const declared = async (names) => {
    const until = Date.now() + 5000;
    let last;
    while (Date.now() < until) {
      last = (await relay.keyState(token.apiKey)).body;
      if (JSON.stringify(last.handles) === JSON.stringify(names)) return last;
      await sleep(20);
    }
    throw new Error(`the relay never saw ${names}; last ${JSON.stringify(last)}`);
  };
  await declared(['draw_card']);
  for (let i = 0; answers.length === 0 && i < 500; i++) await sleep(10);
  assert.equal(answers.length, 1, 'the first declaration was acknowledged');

  // Three changes in one task make one declaration.
  const before = answers.length;
  const removeA = client.handle('a_tool', () => 1);
  client.handle('b_tool', () => 2);
  removeA();
  const state = await declared(['b_tool', 'draw_card']);
  await sleep(100);
  assert.equal(answers.length - before, 1, 'coalesced into one');
  assert.equal(state.revision, 2);

  // A page tool comes with its spec; a bad one or a reserved name throws at once.
  client.handle('set_theme', { description: 'Switch theme.', parameters: { type: 'object' } }, () => 'ok');
  const withSpec = await declared(['b_tool', 'draw_card', 'set_theme']);
  assert.deepEqual(withSpec.pageTools, [{ name: 'set_theme', description: 'Switch theme.', parameters: { type: 'object' } }]);
  assert.throws(() => client.handle('mode', () => 1), /protocol/);
  assert.throws(() => client.handle('bad name', () => 1), /not a tool name/);
  assert.throws(() => client.handle('x', { description: '', parameters: {} }, () => 1), /description/);

  await setMode(token.apiKey, { mode: 'reading' });
  const until = Date.now() + 5000;
  while (client.mode !== 'reading' && Date.now() < until) await sleep(20);
  assert.equal(client.mode, 'reading');
  assert.deepEqual(modes, ['reading']);

  // After a reconnect (a new socket binds), the client declares again.
  const revision = (await relay.keyState(token.apiKey)).body.revision;
  const count = answers.length;
  client.socket.disconnect();
  client.socket.connect();
  const deadline = Date.now() + 5000;
  while (answers.length === count) {
    if (Date.now() > deadline) throw new Error('no declaration after reconnect');
    await sleep(20);
  }
  assert.deepEqual(answers.at(-1), { ok: true, revision }, 'declared again; the same set keeps the revision');
  // The mode was forgotten with the connection and told again on the bind.
  while (client.mode !== 'reading' && Date.now() < deadline) await sleep(20);
  assert.deepEqual(modes, ['reading', null, 'reading']);
  client.stop();
});
