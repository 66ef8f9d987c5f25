// The agent worker against the real relay and a real tab (official socket.io-client):
// `agent-worker call`, LiveKit webhooks signed by LiveKit's own SDK, Vapi tool-calls, the demo.
// A stand-in is used for one thing only: LiveKit's media server cannot run here, so the tests
// sign and send the webhooks it would send, with its SDK.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebhookEvent } from 'livekit-server-sdk';
import { startRelay, startWorker, runWorker, sleep, eventually, participantEvent, sendWebhook, sendVapi, vapiCall } from '../harness/index.mjs';

const VAPI_SECRET = 'vapi-shared-secret-0123456789';
let relay;
let worker;
before(async () => {
  relay = await startRelay();
  worker = await startWorker(relay, { VAPI_SECRET });
});
after(async () => { await worker?.stop(); await relay?.stop(); });

const CARDS = {
  Past: { cardId: 'the-fool', cardName: 'The Fool', reversed: false },
  Present: { cardId: 'the-tower', cardName: 'The Tower', reversed: true },
  Future: { cardId: 'the-star', cardName: 'The Star', reversed: false },
};

/** A tab that answers draw_card with a fixed card per position and show_card with success. */
async function cardTab() {
  const bound = await relay.boundTab();
  bound.tab.socket.on('voice-agent:draw_card', (p, meta, ack) => ack({ ok: true, result: CARDS[p.positionLabel] ?? CARDS.Past }));
  bound.tab.socket.on('voice-agent:show_card', (p, meta, ack) => ack({ ok: true, result: { success: true, cardId: p.cardId, reversed: p.reversed } }));
  return bound;
}

test('call: fire-and-forget and awaited, outcome as JSON, exit status', async () => {
  const { tab, apiKey } = await cardTab();
  const fire = await runWorker(relay, ['call', apiKey, 'OpenPopover', '{"message":"from the CLI"}']);
  assert.equal(fire.code, 0, fire.stderr);
  assert.equal(fire.json.ok, true);
  assert.match(fire.json.callId, /^c_/);
  assert.deepEqual((await tab.next('voice-agent:OpenPopover'))[0], { message: 'from the CLI' });

  const drawn = await runWorker(relay, ['call', apiKey, 'draw_card', '{"positionLabel":"Present","promptRole":"now"}', '--await']);
  assert.equal(drawn.code, 0, drawn.stderr);
  assert.deepEqual(drawn.json.result, CARDS.Present);
  tab.close();
});

test('call: schema violations never reach the relay; failures are typed, exit non-zero', async () => {
  const { tab, apiKey } = await cardTab();
  const bad = await runWorker(relay, ['call', apiKey, 'show_card', '{"cardId":"The Fool"}', '--await']);
  assert.equal(bad.code, 1);
  assert.equal(bad.json.ok, false);
  assert.equal(bad.json.error.code, 'invalid_arguments');
  assert.match(bad.json.error.message, /reversed/);
  const notJson = await runWorker(relay, ['call', apiKey, 'OpenPopover', '{nope']);
  assert.equal(notJson.code, 1);
  assert.equal(notJson.json.error.code, 'invalid_arguments');
  await sleep(100);
  assert.equal(tab.received('voice-agent:show_card').length, 0);
  assert.equal(tab.received('voice-agent:OpenPopover').length, 0);

  tab.socket.on('voice-agent:slow', () => {});
  const timeout = await runWorker(relay, ['call', apiKey, 'slow', '{}', '--await', '--timeout-ms', '200']);
  assert.equal(timeout.code, 1);
  assert.equal(timeout.json.error.code, 'timeout');
  assert.match(timeout.json.callId, /^c_/);
  tab.close();
  await relay.waitState(apiKey, 'offline');
  const offline = await runWorker(relay, ['call', apiKey, 'OpenPopover', '{}', '--timeout-ms', '200']);
  assert.equal(offline.code, 1);
  assert.equal(offline.json.error.code, 'tab_offline');
  // The operators' credential mints a token for the key; a wrong one mints nothing.
  const wrongSecret = await runWorker(relay, ['call', apiKey, 'OpenPopover'], { RELAY_OPERATOR_SECRET: 'not-the-operator-secret-000' });
  assert.equal(wrongSecret.json.error.code, 'unauthorized');
  const noSecret = await runWorker(relay, ['call', apiKey, 'OpenPopover'], { RELAY_OPERATOR_SECRET: '' });
  assert.equal(noSecret.code, 64);
  assert.match(noSecret.stderr, /VOICE_AGENT_TOKEN or --token\) or the operators' credential/);
  // A session token given as it is: for this key it works, for another it is forbidden.
  const other = await relay.token();
  const foreign = await runWorker(relay, ['call', apiKey, 'OpenPopover'], { RELAY_OPERATOR_SECRET: '', VOICE_AGENT_TOKEN: other.agentToken });
  assert.equal(foreign.json.error.code, 'forbidden');
});

const signedWebhook = (event, { secret = relay.livekitSecret, tamper = false } = {}) =>
  sendWebhook(worker, event, { secret, relay, tamper });

async function sessions() {
  const r = await worker.fetch('/sessions', { headers: { authorization: `Bearer ${relay.operatorSecret}` } });
  assert.equal(r.status, 200);
  return r.body.sessions;
}

test('LiveKit webhooks: a signed participant_joined opens a session; a tampered one changes nothing; participant_left revokes the key', async () => {
  const { tab, apiKey, identity, roomName } = await cardTab();
  const fp = createHash('sha256').update(apiKey).digest('hex').slice(0, 8);
  const joined = participantEvent('participant_joined', { room: roomName, identity, apiKey });

  const tampered = await signedWebhook(joined, { tamper: true });
  assert.equal(tampered.status, 401);
  const foreign = await signedWebhook(joined, { secret: 'some-other-livekit-secret-000000' });
  assert.equal(foreign.status, 401);
  const unsigned = await worker.fetch('/livekit/webhook', { method: 'POST', body: joined.toJsonString() });
  assert.equal(unsigned.status, 401);
  assert.deepEqual((await sessions()).filter((s) => s.key === fp), []);

  const ok = await signedWebhook(joined);
  assert.equal(ok.status, 200);
  const open = (await sessions()).find((s) => s.key === fp);
  assert.ok(open, 'session opened');
  assert.equal(open.room, roomName);
  assert.equal(open.mode, 'default');
  assert.equal(open.source, 'livekit');
  assert.ok(!JSON.stringify(await sessions()).includes(apiKey), 'sessions list shows fingerprints only');

  // A tampered participant_left is refused and the key stays usable.
  assert.equal((await signedWebhook(participantEvent('participant_left', { room: roomName, identity, apiKey }), { tamper: true })).status, 401);
  assert.equal((await relay.keyState(apiKey)).body.state, 'online');

  // An agent's session token minted while the key lived reaches nothing once it is revoked, and
  // no new one is minted for it.
  await relay.tokenFor(apiKey);
  assert.equal((await signedWebhook(participantEvent('participant_left', { room: roomName, identity, apiKey }))).status, 200);
  assert.deepEqual((await tab.next('voice-agent:revoked'))[0], { reason: 'revoked' });
  assert.equal((await relay.requestSession(apiKey)).status, 404);
  const after = await relay.call({ apiKey, toolName: 'OpenPopover' });
  assert.equal(after.status, 404);
  assert.equal(after.body.error.code, 'unknown_key');
  assert.equal((await sessions()).find((s) => s.key === fp), undefined);
});

test('LiveKit webhooks: room_finished closes the room\'s sessions and revokes their keys', async () => {
  const a = await cardTab();
  const b = await relay.boundTab();
  const room = 'shared-room';
  await signedWebhook(participantEvent('participant_joined', { room, identity: a.identity, apiKey: a.apiKey }));
  await signedWebhook(participantEvent('participant_joined', { room, identity: b.identity, apiKey: b.apiKey }));
  assert.equal((await sessions()).filter((s) => s.room === room).length, 2);
  const finished = new WebhookEvent({ id: 'EV_end', createdAt: BigInt(1), room: { sid: 'RM_x', name: room } });
  finished.event = 'room_finished';
  assert.equal((await signedWebhook(finished)).status, 200);
  assert.equal((await sessions()).filter((s) => s.room === room).length, 0);
  assert.equal((await relay.keyState(a.apiKey)).status, 404);
  assert.equal((await relay.keyState(b.apiKey)).status, 404);
});

/** `body` as Vapi sends it, signed with the worker's VAPI_SECRET (or `secret`). */
function vapi(body, { secret = VAPI_SECRET } = {}) {
  return sendVapi(worker, body, { secret });
}

/** A Vapi call object for `apiKey`, with a session token for it as the call's variable. */
async function vapiCallFor(apiKey, id = undefined) {
  return vapiCall(id, apiKey, await relay.tokenFor(apiKey));
}

test('Vapi tool-calls: two calls, both results in order, single-line strings; errors as strings; a wrong signature 401', async () => {
  const { tab, apiKey } = await cardTab();
  const call = await vapiCallFor(apiKey, 'call_xyz');
  const message = {
    type: 'tool-calls',
    call,
    toolCallList: [
      { id: 'tc_1', type: 'function', function: { name: 'draw_card', arguments: { positionLabel: 'Future', promptRole: 'where it goes' } } },
      { id: 'tc_2', type: 'function', function: { name: 'present_to_cassette', arguments: JSON.stringify({ title: 'Code', content: 'line one\nline two' }) } },
    ],
  };
  const r = await vapi({ message });
  assert.equal(r.status, 200);
  assert.deepEqual(r.body.results.map((x) => x.toolCallId), ['tc_1', 'tc_2']);
  for (const x of r.body.results) {
    assert.equal(typeof x.result, 'string');
    assert.ok(!/[\n\r]/.test(x.result), 'single line');
  }
  assert.deepEqual(JSON.parse(r.body.results[0].result), CARDS.Future);
  assert.deepEqual(JSON.parse(r.body.results[1].result), { success: true });
  assert.deepEqual((await tab.next('voice-agent:present_to_cassette'))[0], { title: 'Code', content: 'line one\nline two' });

  // The toolCalls / parameters variant, unknown tools and invalid arguments: error strings, 200.
  const mixed = await vapi({ message: {
    type: 'tool-calls',
    call,
    toolCalls: [
      { id: 'u1', function: { name: 'no_such_tool', parameters: {} } },
      { id: 'u2', function: { name: 'show_card', parameters: { cardId: 'the-fool' } } },
      { id: 'u3', function: { name: 'show_card', parameters: { cardId: 'the-fool', reversed: true } } },
    ],
  } });
  assert.equal(mixed.status, 200);
  const [u1, u2, u3] = mixed.body.results;
  assert.match(u1.error, /^unknown_tool: /);
  assert.match(u2.error, /^invalid_arguments: /);
  assert.ok(!/[\n\r]/.test(u2.error));
  assert.deepEqual(JSON.parse(u3.result), { success: true, cardId: 'the-fool', reversed: true });
  assert.equal(tab.received('voice-agent:show_card').length, 1, 'only the valid show_card reached the tab');

  // Without the call's session token nothing is sent.
  const noToken = await vapi({ message: { type: 'tool-calls', call: vapiCall('k', apiKey), toolCallList: [{ id: 'k', function: { name: 'OpenPopover', arguments: {} } }] } });
  assert.match(noToken.body.results[0].error, /^unauthorized: /);

  // Signed with another secret, or only carrying the shared secret as earlier versions took it.
  assert.equal((await vapi({ message }, { secret: 'wrong-wrong-wrong-wrong' })).status, 401);
  const plain = { 'content-type': 'application/json' };
  assert.equal((await worker.fetch('/vapi/webhook', { method: 'POST', headers: { ...plain, 'x-vapi-secret': VAPI_SECRET }, body: JSON.stringify({ message }) })).status, 401);
  assert.equal((await worker.fetch('/vapi/webhook', { method: 'POST', headers: { ...plain, authorization: `Bearer ${VAPI_SECRET}` }, body: JSON.stringify({ message }) })).status, 401);
  assert.equal(tab.received('voice-agent:OpenPopover').length, 0);
  const other = await vapi({ message: { type: 'status-update', status: 'in-progress' } });
  assert.equal(other.status, 200);
  // The session log counted the calls; end-of-call-report closes it.
  const fp = createHash('sha256').update(apiKey).digest('hex').slice(0, 8);
  const s = (await sessions()).find((x) => x.key === fp);
  assert.equal(s.source, 'vapi');
  assert.ok(s.tools.draw_card.calls >= 1);
  await vapi({ message: { type: 'end-of-call-report', call } });
  assert.equal((await sessions()).find((x) => x.key === fp), undefined);
  tab.close();
});

test('an answer without the shape of the tool\'s outputSchema fails on every surface (agent API, agent-worker call, Vapi) and is logged as bad_response', async () => {
  const { tab, apiKey } = await relay.boundTab();
  // show_card promises {success, cardId, reversed}; this tab answers with less.
  tab.socket.on('voice-agent:show_card', (p, meta, ack) => ack({ ok: true, result: { success: true } }));
  const args = { cardId: 'the-fool', reversed: false };
  const headers = { authorization: `Bearer ${await relay.tokenFor(apiKey)}`, 'x-voice-agent-key': apiKey, 'content-type': 'application/json' };
  // The agent API: a session in its reading mode (show_card's), as an agent moves there.
  for (const move of ['enter_spread', 'enter_reading']) {
    const moved = await worker.fetch(`/agent/tools/${move}`, { method: 'POST', headers, body: '{}' });
    assert.equal(moved.body.ok, true, JSON.stringify(moved.body));
  }
  const viaApi = await worker.fetch('/agent/tools/show_card', { method: 'POST', headers, body: JSON.stringify(args) });
  assert.equal(viaApi.body.ok, false, JSON.stringify(viaApi.body));
  assert.equal(viaApi.body.error.code, 'bad_response');
  assert.match(viaApi.body.error.message, /show_card does not have the declared shape: .*cardId/);

  const viaCli = await runWorker(relay, ['call', apiKey, 'show_card', JSON.stringify(args)]);
  assert.equal(viaCli.code, 1, viaCli.stdout + viaCli.stderr);
  assert.equal(viaCli.json.ok, false);
  assert.equal(viaCli.json.error.code, 'bad_response');
  assert.match(viaCli.json.callId, /^c_/);

  const viaVapi = await vapi({ message: {
    type: 'tool-calls',
    call: await vapiCallFor(apiKey),
    toolCallList: [{ id: 'shape-1', function: { name: 'show_card', arguments: args } }],
  } });
  assert.match(viaVapi.body.results[0].error, /^bad_response: /);
  assert.equal(tab.received('voice-agent:show_card').length, 3, 'each surface reached the tab, and read its answer');

  // The worker's log counts them as failures, never as ok.
  const fp = createHash('sha256').update(apiKey).digest('hex').slice(0, 8);
  const lines = () => worker.logText().split('\n').filter((l) => /tool call/.test(l) && l.includes(`key=${fp}`) && /tool=show_card/.test(l));
  // The log reaches its file a moment after the answers.
  await eventually(() => lines().length === 2, 'two show_card lines in the worker log', 5000);
  assert.equal(lines().length, 2, lines().join('\n'));
  for (const line of lines()) assert.match(line, /outcome=bad_response/);
  tab.close();
});

test('agent API: an empty body is the tool\'s empty arguments; white space alone, an array or no JSON is invalid_request and reaches no tab', async () => {
  const { tab, apiKey } = await relay.boundTab();
  const headers = { authorization: `Bearer ${await relay.tokenFor(apiKey)}`, 'x-voice-agent-key': apiKey, 'content-type': 'application/json' };
  // enter_spread takes no arguments, so only the body's form can refuse it.
  for (const body of ['\n', ' ', '[]', 'hello', '"text"']) {
    for (const tool of ['enter_spread', 'OpenPopover']) {
      const r = await worker.fetch(`/agent/tools/${tool}`, { method: 'POST', headers, body });
      assert.equal(r.status, 400, `${tool} ${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, 'invalid_request');
    }
  }
  const empty = await worker.fetch('/agent/tools/enter_spread', { method: 'POST', headers, body: '' });
  assert.equal(empty.body.ok, true, JSON.stringify(empty.body));
  await sleep(200);
  assert.equal(tab.received('voice-agent:OpenPopover').length, 0);
  tab.close();
});

test('Vapi: the exported mode moves change the session\'s mode', async () => {
  const { tab, apiKey } = await cardTab();
  const vapiCallOf = await vapiCallFor(apiKey, 'call_modes');
  const call = (name) => vapi({ message: {
    type: 'tool-calls',
    call: vapiCallOf,
    toolCallList: [{ id: `m-${name}`, function: { name, arguments: {} } }],
  } });
  const entered = await call('enter_spread');
  assert.equal(entered.status, 200);
  assert.equal(JSON.parse(entered.body.results[0].result).mode, 'spread', JSON.stringify(entered.body));
  const fp = createHash('sha256').update(apiKey).digest('hex').slice(0, 8);
  assert.equal((await sessions()).find((x) => x.key === fp).mode, 'spread');
  const wrong = await call('enter_followup');
  assert.match(wrong.body.results[0].error, /^tool_not_allowed: /);
  await vapi({ message: { type: 'end-of-call-report', call: vapiCallOf } });
  tab.close();
});

test('an environment variable set to nothing counts as unset: WORKER_CATALOG= leaves --catalog and the default working', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'empty-env-'));
  const catalog = join(dir, 'app.json');
  writeFileSync(catalog, '{"tools": [{"name": "CreateDiagram", "description": "d", "parameters": {"type": "object"}}]}');
  const given = await runWorker(relay, ['check', '--catalog', catalog], { WORKER_CATALOG: '' });
  assert.equal(given.code, 0, given.stderr);
  assert.match(given.stdout, /app\.json: 1 tools/);
  const none = await runWorker(relay, ['check'], { WORKER_CATALOG: '' });
  assert.equal(none.code, 0, none.stderr);
  assert.match(none.stdout, /the default catalog/);
});

test('catalog export: the mode moves are there, and a format that calls the worker back needs --worker-url', async () => {
  const openai = await runWorker(relay, ['catalog', 'export', '--format', 'openai']);
  assert.equal(openai.code, 0, openai.stderr);
  const names = JSON.parse(openai.stdout).map((t) => t.function.name);
  for (const move of ['enter_intent', 'enter_spread', 'enter_reading', 'enter_followup', 'enter_default']) assert.ok(names.includes(move), `${move} in ${names}`);
  const noUrl = await runWorker(relay, ['catalog', 'export', '--format', 'vapi']);
  assert.equal(noUrl.code, 64);
  assert.match(noUrl.stderr, /--format vapi needs --worker-url/);
  assert.equal(noUrl.stdout, '', 'no export with a placeholder URL');
  const eleven = await runWorker(relay, ['catalog', 'export', '--format', 'elevenlabs', '--worker-url', 'https://worker.example.com', '--mode', 'reading']);
  assert.equal(eleven.code, 0, eleven.stderr);
  const tools = JSON.parse(eleven.stdout);
  assert.deepEqual(tools.map((t) => t.name), ['show_card', 'enter_followup']);
  assert.equal(tools[1].api_schema.url, 'https://worker.example.com/agent/tools/enter_followup');
  assert.equal(tools[1].api_schema.request_headers['X-Voice-Agent-Key'], '{{apiKey}}');
  assert.equal(tools[1].api_schema.request_headers.Authorization, '{{secret__agentAuthorization}}');
});

test('demo: the scripted walk-through completes against a live tab', async () => {
  const { tab, apiKey } = await cardTab();
  const demo = await runWorker(relay, ['demo', apiKey], {}, 30000);
  assert.equal(demo.code, 0, demo.stdout + demo.stderr);
  assert.match(demo.stdout, /scripted, not an AI/);
  assert.match(demo.stdout, /demo finished/);
  assert.equal(tab.received('voice-agent:draw_card').length, 3);
  assert.deepEqual(tab.received('voice-agent:show_card').map((e) => e.args[0]), [
    { cardId: 'the-fool', reversed: false }, { cardId: 'the-tower', reversed: true }, { cardId: 'the-star', reversed: false },
  ]);
  const [cassette] = await tab.next('voice-agent:present_to_cassette');
  assert.equal(cassette.title, 'Your spread');
  assert.equal(cassette.content, 'Past: The Fool\nPresent: The Tower (reversed)\nFuture: The Star');
  // Every product tool, and the modes along the catalog's own moves (the tab is told each).
  for (const tool of ['OpenPopover', 'loading_status', 'pin_note']) assert.equal(tab.received(`voice-agent:${tool}`).length, 1, tool);
  assert.deepEqual(tab.received('voice-agent:mode').map((e) => e.args[0].mode), ['default', 'spread', 'reading', 'followup', 'default']);
  assert.match(demo.stdout, /→ enter_spread\n/);
  assert.match(demo.stdout, /→ enter_reading\n/);
  assert.match(demo.stdout, /→ enter_followup\n.*\n→ enter_default\n/);
  tab.close();
});

test('demo: a declined card leaves its position empty and the walk goes on to the cassette; set_theme is shown when the page defines it', async () => {
  const bound = await relay.boundTab();
  const { tab, apiKey } = bound;
  tab.socket.on('voice-agent:draw_card', (p, meta, ack) => (p.positionLabel === 'Present'
    ? ack({ ok: false, error: { code: 'declined', message: 'the user closed the card picker' } })
    : ack({ ok: true, result: CARDS[p.positionLabel] })));
  tab.socket.on('voice-agent:show_card', (p, meta, ack) => ack({ ok: true, result: { success: true, cardId: p.cardId, reversed: p.reversed } }));
  tab.socket.on('voice-agent:set_theme', (p, meta, ack) => ack({ ok: true, result: { theme: p.theme } }));
  const theme = { name: 'set_theme', description: 'Switch the theme.', parameters: { type: 'object', properties: { theme: { enum: ['light', 'dark'] } }, required: ['theme'] }, awaitResult: true };
  const declared = await tab.socket.emitWithAck('voice-agent:handles', {
    tools: ['OpenPopover', 'draw_card', 'loading_status', 'pin_note', 'present_to_cassette', 'set_theme', 'show_card'], pageTools: [theme],
  });
  assert.equal(declared.ok, true);
  const demo = await runWorker(relay, ['demo', apiKey], {}, 30000);
  assert.equal(demo.code, 0, demo.stdout + demo.stderr);
  assert.match(demo.stdout, /no card for Present: tool_failed: the user closed the card picker/);
  assert.match(demo.stdout, /demo finished: every tool shown, 2 of 3 cards drawn/);
  assert.deepEqual(tab.received('voice-agent:set_theme').map((e) => e.args[0].theme), ['light', 'dark']);
  assert.equal(tab.received('voice-agent:show_card').length, 2);
  const [cassette] = await tab.next('voice-agent:present_to_cassette');
  assert.equal(cassette.content, 'Past: The Fool\nFuture: The Star');
  tab.close();
});

test('demo: a catalog without the product\'s tools is refused with the reason', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'demo-catalog-'));
  const catalog = join(dir, 'app.json');
  writeFileSync(catalog, '{"tools": [{"name": "CreateDiagram", "description": "d", "parameters": {"type": "object"}}]}');
  const { tab, apiKey } = await relay.boundTab();
  const demo = await runWorker(relay, ['demo', apiKey, '--catalog', catalog]);
  assert.equal(demo.code, 1);
  assert.match(demo.stdout, /demo not started: unknown_tool: the demo walks the product's own tools, and .*app\.json has no OpenPopover/);
  assert.equal(tab.events.filter((e) => e.event.startsWith('voice-agent:')).length, 0, 'nothing reached the tab');
  tab.close();
});
