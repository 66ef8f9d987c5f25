// The worker's session timeline (GET /sessions/{id}/events): after a scripted session (an agent
// on the worker's HTTP API, the browser client built for Node as the tab), its events in order
// with the right outcomes, the relay's call ids and time split; a reader waiting for the next
// event gets it as it happens; a tab killed mid-call shows as a timed-out call and the tab
// offline; the session's close ends it, and the closed session is still listed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { AccessToken, WebhookEvent } from 'livekit-server-sdk';
import { LIVEKIT_KEY, e2eDir, eventually, sleep, startStack, webClientNode, within } from '../harness/index.mjs';

const { VoiceRelayClient } = await import(pathToFileURL(webClientNode).href);

const object = (properties, required = []) => ({ type: 'object', properties, required, additionalProperties: false });
const CATALOG = {
  initialMode: 'default',
  modes: [
    { id: 'default', instructions: 'Show things.', next: ['spread'] },
    { id: 'spread', instructions: 'Pick cards.', next: ['default'] },
  ],
  tools: [
    { name: 'OpenPopover', description: 'Show a short message.', parameters: object({ message: { type: 'string' } }, ['message']), modes: ['default'] },
    { name: 'draw_card', description: 'Ask the user for a card.', parameters: object({ positionLabel: { type: 'string' } }, ['positionLabel']), awaitResult: true, timeoutMs: 1500, modes: ['spread'] },
    { name: 'flip', description: 'Flip the card.', parameters: object({}), awaitResult: true, timeoutMs: 1500, modes: ['spread'] },
  ],
};

let stack;
before(async () => { stack = await startStack({ catalog: CATALOG }); });
after(async () => { await stack?.stop(); });

const fp = (key) => createHash('sha256').update(key).digest('hex').slice(0, 8);
const operator = () => ({ authorization: `Bearer ${stack.relay.operatorSecret}` });

/** An agent of `key` on the worker's HTTP API, with a session token for that key alone. */
function agent(key) {
  const headers = async () => ({ authorization: `Bearer ${await stack.tokenFor(key)}`, 'x-voice-agent-key': key, 'content-type': 'application/json' });
  return {
    tools: async () => stack.worker.fetch('/agent/tools', { headers: await headers() }),
    async call(tool, args = {}) {
      const res = await stack.worker.fetch(`/agent/tools/${tool}`, { method: 'POST', headers: await headers(), body: JSON.stringify(args) });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      return res.body;
    },
  };
}

async function sessionId(key) {
  const res = await stack.worker.fetch('/sessions', { headers: operator() });
  assert.equal(res.status, 200);
  const found = [...res.body.sessions, ...res.body.closed].find((s) => s.key === fp(key));
  assert.ok(found, 'the session is listed by its key\'s fingerprint');
  assert.match(found.id, /^s_[0-9a-f]{16}$/);
  return found.id;
}

async function events(id, query = '') {
  const res = await stack.worker.fetch(`/sessions/${id}/events${query}`, { headers: operator() });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

test('a scripted session\'s events, in order, with outcomes, call ids and the relay\'s split', async () => {
  const client = new VoiceRelayClient({ relayUrl: stack.relay.url, transports: ['websocket'] });
  client.handle('OpenPopover', () => undefined);
  client.handle('draw_card', async () => { await sleep(40); return { cardId: 'the-sun' }; });
  const token = await within(5000, client.start(), 'client.start');
  stack.remember(token.token, token.apiKey);
  await eventually(async () => (await stack.keyState(token.apiKey)).body?.revision >= 1, 'the tab\'s declaration');
  const a = agent(token.apiKey);
  try {
    assert.equal((await a.tools()).status, 200);
    assert.equal((await a.call('OpenPopover', { message: 'hello' })).ok, true);
    const refused = await a.call('draw_card', { positionLabel: 'Past' });
    assert.equal(refused.error.code, 'tool_not_allowed');
    assert.equal((await a.call('enter_spread')).mode, 'spread');
    const drawn = await a.call('draw_card', { positionLabel: 'Past' });
    assert.deepEqual(drawn.result, { cardId: 'the-sun' });
    const missing = await a.call('flip');
    assert.equal(missing.error.code, 'no_handler');

    const id = await sessionId(token.apiKey);
    const page = await events(id);
    assert.equal(page.key, fp(token.apiKey));
    assert.equal(page.source, 'agent');
    assert.equal(page.dropped, 0);
    const seqs = page.events.map((e) => e.seq);
    assert.deepEqual(seqs, [...seqs].sort((x, y) => x - y), 'in order');
    assert.equal(page.last, seqs.at(-1));
    const types = page.events.map((e) => e.type);
    assert.equal(types[0], 'opened');
    assert.equal(page.events[0].mode, 'default');
    const firstCall = types.indexOf('tool_started');
    assert.ok(page.events.slice(0, firstCall).some((e) => e.type === 'tab' && e.state === 'online'), 'the tab online before the first call');
    assert.ok(page.events.slice(0, firstCall).some((e) => e.type === 'declared' && e.handles === 2), 'its declaration');
    assert.ok(page.events.slice(0, firstCall).some((e) => e.type === 'offer'), 'the offer the agent saw');

    const settled = page.events.filter((e) => e.type === 'tool_settled');
    assert.deepEqual(settled.map((e) => [e.tool, e.outcome, e.category]), [
      ['OpenPopover', 'ok', 'ok'],
      ['draw_card', 'tool_not_allowed', 'refused'],
      ['enter_spread', 'ok', 'ok'],
      ['draw_card', 'ok', 'ok'],
      ['flip', 'no_handler', 'failed'],
    ]);
    const started = page.events.filter((e) => e.type === 'tool_started');
    assert.deepEqual(started.map((e) => [e.call, e.tool, e.mode]), [
      [1, 'OpenPopover', 'default'], [2, 'draw_card', 'default'], [3, 'enter_spread', 'default'], [4, 'draw_card', 'spread'], [5, 'flip', 'spread'],
    ]);
    assert.deepEqual(settled.map((e) => e.call), [1, 2, 3, 4, 5]);
    // What reached the relay has its call id and the relay's split; what did not, none.
    const [popover, notAllowed, move, card, flip] = settled;
    for (const e of [popover, card, flip]) {
      assert.match(e.callId, /^c_[0-9a-f]{24}$/);
      assert.ok(e.relayMs >= 0 && e.deliveryMs >= 0, JSON.stringify(e));
    }
    assert.equal(notAllowed.callId, undefined);
    assert.equal(move.callId, undefined);
    assert.ok(card.tabMs >= 35, `the handler's 40 ms: ${JSON.stringify(card)}`);
    assert.equal(popover.tabMs, undefined, 'fire-and-forget: no tab time');
    assert.ok(card.tookMs >= card.tabMs);
    const moved = page.events.find((e) => e.type === 'mode_changed');
    assert.deepEqual([moved.from, moved.to], ['default', 'spread']);
    assert.ok(moved.seq > move.seq - 2 && moved.seq < card.seq);
    // Both servers' log lines name the same call.
    const plain = (text) => text.replace(/\x1b\[[0-9;]*m/g, '');
    assert.match(plain(stack.relay.logText()), new RegExp(`tool call .*call_id=${card.callId}`));
    assert.match(plain(stack.worker.logText()), new RegExp(`tool call .*call_id="?${card.callId}`));

    // A reader waiting after the last event gets the next one as it happens.
    const waited = events(id, `?after=${page.last}&waitMs=10000`);
    await sleep(200);
    const t0 = Date.now();
    await a.call('draw_card', { positionLabel: 'Future' });
    const next = await waited;
    assert.ok(Date.now() - t0 < 5000, 'answered as the event came, not at the end of the wait');
    assert.ok(next.events.length >= 1 && next.events.every((e) => e.seq > page.last));
    assert.equal(next.events[0].type, 'tool_started');
    // Nothing new: the wait ends at its bound with no event.
    const latest = (await events(id)).last;
    const quiet = Date.now();
    assert.deepEqual((await events(id, `?after=${latest}&waitMs=300`)).events, []);
    assert.ok(Date.now() - quiet >= 280);

    // The session closes (its participant left): the timeline says so and is still kept.
    const left = new WebhookEvent({
      id: 'EV_timeline', createdAt: BigInt(Math.floor(Date.now() / 1000)),
      room: { sid: 'RM_t', name: 'room-t' }, participant: { sid: 'PA_t', identity: 'tab-t', metadata: JSON.stringify({ apiKey: token.apiKey }) },
    });
    left.event = 'participant_left';
    const body = left.toJsonString();
    const at = new AccessToken(LIVEKIT_KEY, stack.livekitSecret);
    at.sha256 = createHash('sha256').update(body).digest('base64');
    const jwt = await at.toJwt();
    stack.remember(jwt);
    const hook = await stack.worker.fetch('/livekit/webhook', { method: 'POST', headers: { 'content-type': 'application/webhook+json', authorization: jwt }, body });
    assert.equal(hook.status, 200, JSON.stringify(hook.body));
    const closed = await events(id);
    assert.deepEqual([closed.events.at(-1).type, closed.events.at(-1).reason], ['closed', 'participant_left']);
    assert.ok(closed.closedMs >= closed.openedMs);
    const listing = (await stack.worker.fetch('/sessions', { headers: operator() })).body;
    assert.ok(listing.closed.some((s) => s.id === id));
    assert.ok(!listing.sessions.some((s) => s.id === id));
  } finally {
    client.stop();
  }
});

test('a tab killed mid-call: the call times out and the tab shows offline', async () => {
  // The tab in a process of its own (the official socket.io-client), killed while it holds the
  // call: draw_card with positionLabel "Hold" is left unanswered.
  const proc = spawn(process.execPath, [join(e2eDir, 'harness/tab-process.mjs'), stack.relay.url], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: proc.stdout });
  const seen = [];
  const waiters = [];
  lines.on('line', (l) => {
    const ev = JSON.parse(l);
    seen.push(ev);
    for (const w of waiters.splice(0)) w();
  });
  const waitFor = (pred, what) => within(10000, new Promise((resolve) => {
    const look = () => { const hit = seen.find(pred); if (hit) resolve(hit); else waiters.push(look); };
    look();
  }), what);
  try {
    const { apiKey } = await waitFor((e) => e.apiKey, 'the tab\'s key');
    stack.remember(apiKey);
    await waitFor((e) => e.event === 'connect', 'the tab to connect');
    await eventually(async () => (await stack.keyState(apiKey)).body?.state === 'online', 'the key online');
    const a = agent(apiKey);
    assert.equal((await a.tools()).status, 200);
    assert.equal((await a.call('enter_spread')).mode, 'spread');
    const call = a.call('draw_card', { positionLabel: 'Hold' });
    await waitFor((e) => e.event === 'voice-agent:draw_card', 'the call in the tab');
    proc.kill('SIGKILL');
    const outcome = await call;
    assert.equal(outcome.ok, false);
    assert.ok(['tab_offline', 'timeout'].includes(outcome.error.code), outcome.error.code);

    const id = await sessionId(apiKey);
    const page = await eventually(async () => {
      const p = await events(id);
      return p.events.some((e) => e.type === 'tab' && e.state === 'offline') && p;
    }, 'the tab offline in the timeline');
    const settled = page.events.filter((e) => e.type === 'tool_settled' && e.tool === 'draw_card');
    assert.equal(settled.length, 1);
    assert.equal(settled[0].category, 'timed_out');
    assert.equal(settled[0].outcome, outcome.error.code);
    assert.match(settled[0].callId, /^c_/);
    const online = page.events.findIndex((e) => e.type === 'tab' && e.state === 'online');
    const offline = page.events.findIndex((e) => e.type === 'tab' && e.state === 'offline');
    assert.ok(online >= 0 && online < offline, 'online, then offline');
  } finally {
    proc.kill('SIGKILL');
  }
});

test('timelines take the operators\' credential (never a session token); an unknown id is unknown_key; bad waits are refused', async () => {
  const none = await stack.worker.fetch('/sessions/s_0000000000000000/events');
  assert.equal(none.status, 401);
  // An agent's session token is no operator's credential: it reads no timeline.
  const key = (await stack.issueKey()).apiKey;
  const agentToken = { authorization: `Bearer ${await stack.tokenFor(key)}`, 'x-voice-agent-key': key };
  for (const path of ['/sessions', '/sessions/s_0000000000000000/events']) {
    const refused = await stack.worker.fetch(path, { headers: agentToken });
    assert.equal(refused.status, 401, path);
    assert.equal(refused.body.error.code, 'unauthorized', path);
  }
  const unknown = await stack.worker.fetch('/sessions/s_0000000000000000/events', { headers: operator() });
  assert.equal(unknown.status, 404);
  assert.equal(unknown.body.error.code, 'unknown_key');
  for (const q of ['?waitMs=30001', '?after=-1', '?after=x', '?other=1']) {
    const bad = await stack.worker.fetch(`/sessions/s_0000000000000000/events${q}`, { headers: operator() });
    assert.equal(bad.status, 400, q);
    assert.equal(bad.body.error.code, 'invalid_request', q);
  }
});
