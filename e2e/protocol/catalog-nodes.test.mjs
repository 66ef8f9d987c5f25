// An app's own catalog across several relay nodes on one real redis-server: the tab is bound on
// node A (official socket.io-client), the worker speaks to node B. What the tab declares it
// handles on A shapes what the agent is offered through B, a change wakes an agent waiting on
// B, and a mode set through B reaches the tab on A.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startRelay, startRedis, startWorker, runWorker, within, nodeSecrets } from '../harness/index.mjs';

const CATALOG = {
  initialMode: 'lobby',
  modes: [
    { id: 'lobby', instructions: 'Welcome the players.', next: ['round'] },
    { id: 'round', instructions: 'Run one round of the quiz.', next: ['lobby'] },
  ],
  tools: [
    {
      name: 'ShowQuestion',
      description: 'Show a quiz question with its choices.',
      parameters: {
        type: 'object',
        properties: { text: { type: 'string' }, choices: { type: 'array', items: { type: 'string' }, minItems: 2 } },
        required: ['text', 'choices'],
        additionalProperties: false,
      },
      awaitResult: true,
      timeoutMs: 5000,
      modes: ['round'],
    },
    { name: 'ShowScores', description: 'Show the score board.', parameters: { type: 'object' } },
    { name: 'PlayJingle', description: 'Play the lobby jingle.', parameters: { type: 'object' }, modes: ['lobby'] },
  ],
};

let redis;
let A;
let B;
let worker;
let catalogPath;
before(async () => {
  redis = await startRedis();
  const shared = {
    ...nodeSecrets(),
    RELAY_REDIS_URL: redis.url,
  };
  A = await startRelay(shared, { name: 'relay-a' });
  B = await startRelay(shared, { name: 'relay-b' });
  A.share(B);
  B.share(A);
  catalogPath = join(mkdtempSync(join(tmpdir(), 'catalog-')), 'quiz.json');
  writeFileSync(catalogPath, JSON.stringify(CATALOG));
  worker = await startWorker(B, { WORKER_CATALOG: catalogPath });
});
after(async () => {
  await worker?.stop();
  await B?.stop();
  await A?.stop();
  await redis?.stop();
});

/** What the key's agent presents: a session token for that key (minted on node A). */
const agentHeaders = async (apiKey) => ({ authorization: `Bearer ${await A.tokenFor(apiKey)}`, 'x-voice-agent-key': apiKey });
const offer = async (apiKey, query = '') => worker.fetch(`/agent/tools${query}`, { headers: await agentHeaders(apiKey) });
const callTool = async (apiKey, name, args = {}) =>
  worker.fetch(`/agent/tools/${name}`, { method: 'POST', headers: { ...await agentHeaders(apiKey), 'content-type': 'application/json' }, body: JSON.stringify(args) });
const names = (res) => res.body.tools.map((t) => t.name);

test('what a tab on node A handles shapes the offer an agent gets through node B', async () => {
  const { tab, apiKey } = await A.boundTab();
  assert.deepEqual(names(await offer(apiKey)), ['ShowScores', 'PlayJingle', 'enter_round']);
  const ack = await within(5000, tab.socket.emitWithAck('voice-agent:handles', { tools: ['ShowScores'] }), 'the handles ack');
  assert.equal(ack.ok, true);
  // Node B reads the declaration from Redis.
  const state = await B.keyState(apiKey);
  assert.deepEqual(state.body.handles, ['ShowScores']);
  const first = await offer(apiKey);
  assert.deepEqual(names(first), ['ShowScores', 'enter_round']);

  // An agent waiting on B for a change of the offer wakes when the tab on A declares.
  const waiting = offer(apiKey, `?after=${first.body.revision}&waitMs=10000`);
  const started = Date.now();
  await new Promise((r) => setTimeout(r, 300));
  await within(5000, tab.socket.emitWithAck('voice-agent:handles', { tools: ['ShowScores', 'PlayJingle'] }), 'the handles ack');
  const changed = await waiting;
  assert.ok(Date.now() - started < 5000, 'woken by the change, not by the end of the wait');
  assert.notEqual(changed.body.revision, first.body.revision);
  assert.deepEqual(names(changed), ['ShowScores', 'PlayJingle', 'enter_round']);
  tab.close();
});

test('a call that is not awaited, through node B, to a tool the tab on node A declared it does not handle, is no_handler', async () => {
  const { tab, apiKey } = await A.boundTab();
  const sent = await B.call({ apiKey, toolName: 'PlayJingle', params: {} });
  assert.equal(sent.status, 200, JSON.stringify(sent.body));
  await tab.next('voice-agent:PlayJingle');
  await within(5000, tab.socket.emitWithAck('voice-agent:handles', { tools: ['ShowScores'] }), 'the handles ack');
  const refused = await B.call({ apiKey, toolName: 'PlayJingle', params: {} });
  assert.equal(refused.status, 502, JSON.stringify(refused.body));
  assert.equal(refused.body.error.code, 'no_handler');
  const handled = await B.call({ apiKey, toolName: 'ShowScores', params: {} });
  assert.equal(handled.status, 200, JSON.stringify(handled.body));
  await tab.next('voice-agent:ShowScores');
  assert.equal(tab.received('voice-agent:PlayJingle').length, 1, 'the refused call never reached the tab');
  tab.close();
});

test('a mode moved through node B reaches the tab on node A, and the mode\'s tool reaches it too', async () => {
  const { tab, apiKey } = await A.boundTab();
  await within(5000, tab.socket.emitWithAck('voice-agent:handles', { tools: ['ShowQuestion', 'ShowScores'] }), 'the handles ack');
  await offer(apiKey);
  await tab.next('voice-agent:mode', (p) => p.mode === 'lobby');
  const moved = await callTool(apiKey, 'enter_round');
  assert.equal(moved.body.ok, true);
  assert.equal(moved.body.mode, 'round');
  await tab.next('voice-agent:mode', (p) => p.mode === 'round');
  assert.deepEqual(names(await offer(apiKey)), ['ShowQuestion', 'ShowScores', 'enter_lobby']);

  tab.socket.on('voice-agent:ShowQuestion', (params, meta, ack) => ack({ ok: true, result: { picked: params.choices[1] } }));
  const bad = await callTool(apiKey, 'ShowQuestion', { text: 'Capital of France?', choices: ['Paris'] });
  assert.equal(bad.body.ok, false);
  assert.equal(bad.body.error.code, 'invalid_arguments');
  const asked = await callTool(apiKey, 'ShowQuestion', { text: 'Capital of France?', choices: ['Lyon', 'Paris'] });
  assert.equal(asked.body.ok, true, JSON.stringify(asked.body));
  assert.deepEqual(asked.body.result, { picked: 'Paris' });
  tab.close();
});

test('agent-worker call checks a catalog tool against the catalog\'s schema', async () => {
  const { tab, apiKey } = await A.boundTab();
  const env = { WORKER_CATALOG: catalogPath };
  const bad = await runWorker(B, ['call', apiKey, 'ShowQuestion', '{"text":"?"}'], env);
  assert.equal(bad.code, 1);
  assert.equal(bad.json.error.code, 'invalid_arguments');
  tab.socket.on('voice-agent:ShowQuestion', (params, meta, ack) => ack({ ok: true, result: { picked: 'B' } }));
  const good = await runWorker(B, ['call', apiKey, 'ShowQuestion', '{"text":"?","choices":["A","B"]}'], env);
  assert.equal(good.code, 0, good.stderr);
  assert.deepEqual(good.json.result, { picked: 'B' }, 'the catalog says the tool waits for its answer');
  tab.close();
});
