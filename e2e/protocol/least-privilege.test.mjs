// Who may reach a tab: every agent surface (the relay's tool call, cancel, status, mode and
// revoke; the worker's list and call, MCP initialize, list, call and listen; the Vapi webhook)
// against one hostile matrix. A session token for key A aimed at key B is refused as
// `forbidden` (or the surface's form of it), alike whether B exists or was never issued, and
// tab B hears nothing; the same token for A works. Forged, expired, foreign and mis-addressed
// tokens are refused as unauthorized. A LiveKit token signed with the LiveKit secret but not
// issued by the relay binds nothing. An MCP session belongs to the token that opened it. Vapi
// messages are signed, fresh and taken once. Ending one session leaves the key's others working.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { AccessToken } from 'livekit-server-sdk';
import { LIVEKIT_KEY, secret, sendVapi, sessionKeyEntry, sleep, startRelay, startWorker, strangerKey, vapiCall } from '../harness/index.mjs';
import { publicKeyOf, sessionClaims, signToken } from '../harness/tokens.mjs';

const VAPI_SECRET = secret('vapi');
let relay;
let worker;
let A; // tab A, its key, its agent's token
let B; // tab B: must never hear anything from A's agent
const stranger = strangerKey();

const bearer = (token) => (token === undefined ? {} : { authorization: `Bearer ${token}` });
const json = { 'content-type': 'application/json' };
const INITIALIZE = {
  jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'hostile-matrix', version: '1' } },
};
const MCP_ACCEPT = { accept: 'application/json, text/event-stream' };
/** What a request of the stateless revision (2026-07-28) carries instead of a session. */
const STATELESS = {
  _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} },
};

/** A JSON-RPC message to /mcp; the answer's JSON-RPC body, read from JSON or from an SSE event. */
async function mcp(token, key, message, extra = {}) {
  // The stateless revision names the method in a header too.
  const method = extra['mcp-protocol-version'] === '2026-07-28'
    ? { 'mcp-method': message.method, ...(message.params?.name ? { 'mcp-name': message.params.name } : {}) } : {};
  const res = await fetch(`${worker.url}/mcp`, {
    method: 'POST',
    headers: { ...json, ...MCP_ACCEPT, ...bearer(token), ...(key ? { 'x-voice-agent-key': key } : {}), ...method, ...extra },
    body: JSON.stringify(message),
  });
  const text = await res.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    const data = text.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).find((l) => l.startsWith('{'));
    body = data ? JSON.parse(data) : text;
  }
  return { status: res.status, body, session: res.headers.get('mcp-session-id') };
}

/** A Vapi message signed with the worker's `VAPI_SECRET` (or `secret`) at `ts`. */
const signedVapi = (body, { key = VAPI_SECRET, ts } = {}) => sendVapi(worker, body, { secret: key, ts });

const vapiCalls = (apiKey, agentToken) => ({
  message: {
    type: 'tool-calls',
    call: vapiCall(`call-${randomBytes(4).toString('hex')}`, apiKey, agentToken),
    toolCallList: [{ id: `tc-${randomBytes(6).toString('hex')}`, function: { name: 'OpenPopover', arguments: { message: 'from vapi' } } }],
  },
});

/**
 * Each surface, as the token's agent asking to act on `key`; `refused(res)` tells the surface's
 * form of `forbidden`, `works(res)` its success.
 */
const status = (code) => (res) => res.status === code;
const surfaces = {
  'relay tool call': {
    send: (token, key) => relay.call({ apiKey: key, toolName: 'OpenPopover', params: { message: 'x' } }, { token }),
    refused: status(403), works: status(200),
  },
  'relay cancel': {
    send: (token, key) => relay.fetch('/api/voice-agent/tool-call/cancel', {
      method: 'POST', headers: { ...json, ...bearer(token), 'idempotency-key': 'hostile-1' }, body: JSON.stringify({ apiKey: key }),
    }),
    refused: status(403), works: status(200),
  },
  'relay status': { send: (token, key) => relay.keyState(key, token), refused: status(403), works: status(200) },
  'relay mode': {
    send: (token, key) => relay.fetch(`/api/voice-agent/keys/${key}/mode`, {
      method: 'PUT', headers: { ...json, ...bearer(token) }, body: JSON.stringify({ mode: 'default' }),
    }),
    refused: status(403), works: status(200),
  },
  'worker list': {
    send: (token, key) => worker.fetch('/agent/tools', { headers: { ...bearer(token), 'x-voice-agent-key': key } }),
    refused: status(403), works: status(200),
  },
  'worker call': {
    send: (token, key) => worker.fetch('/agent/tools/OpenPopover', {
      method: 'POST', headers: { ...json, ...bearer(token), 'x-voice-agent-key': key }, body: JSON.stringify({ message: 'x' }),
    }),
    refused: status(403), works: (res) => res.status === 200 && res.body.ok === true,
  },
  'MCP initialize': { send: (token, key) => mcp(token, key, INITIALIZE), refused: status(403), works: status(200) },
  'MCP list': {
    send: (token, key) => mcp(token, key, { jsonrpc: '2.0', id: 2, method: 'tools/list', params: STATELESS }, { 'mcp-protocol-version': '2026-07-28' }),
    refused: status(403), works: status(200),
  },
  'MCP call': {
    send: (token, key) => mcp(token, key, { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'OpenPopover', arguments: { message: 'x' }, ...STATELESS } },
      { 'mcp-protocol-version': '2026-07-28' }),
    refused: status(403), works: status(200),
  },
  'MCP listen': {
    send: (token, key) => mcp(token, key, { jsonrpc: '2.0', id: 4, method: 'subscriptions/listen', params: STATELESS }, { 'mcp-protocol-version': '2026-07-28' }),
    refused: status(403),
  },
  'Vapi webhook': {
    send: (token, key) => signedVapi(vapiCalls(key, token)),
    refused: (res) => res.status === 200 && /^forbidden/.test(res.body.results?.[0]?.error ?? ''),
    works: (res) => res.status === 200 && res.body.results?.[0]?.result !== undefined,
  },
};

const toolEvents = (tab) => tab.events.filter((e) => e.event.startsWith('voice-agent:')
  && !['voice-agent:mode', 'voice-agent:revoked', 'voice-agent:cancel'].includes(e.event));

before(async () => {
  relay = await startRelay({ RELAY_ALLOW_BARE_KEYS: 'false' });
  worker = await startWorker(relay, { VAPI_SECRET });
  for (const name of ['A', 'B']) {
    const bound = await relay.boundTab();
    bound.tab.socket.on('voice-agent:OpenPopover', () => {});
    const token = await relay.tokenFor(bound.apiKey);
    if (name === 'A') A = { ...bound, token };
    else B = { ...bound, token };
  }
  relay.remember(stranger, VAPI_SECRET);
});
after(async () => {
  await worker?.stop();
  await relay?.stop();
});

for (const [name, surface] of Object.entries(surfaces)) {
  test(`${name}: a token for key A aimed at key B is refused alike whether B exists or not; for A it works`, async () => {
    for (const target of [B.apiKey, stranger]) {
      const res = await surface.send(A.token, target);
      assert.ok(surface.refused(res), `${name} → ${target === stranger ? 'a key never issued' : 'key B'}: ${res.status} ${JSON.stringify(res.body)}`);
    }
    if (surface.works) {
      const res = await surface.send(A.token, A.apiKey);
      assert.ok(surface.works(res), `${name} → its own key: ${res.status} ${JSON.stringify(res.body)}`);
    }
  });
}

test('revoke: a session token never revokes, its own key or another', async () => {
  for (const key of [A.apiKey, B.apiKey, stranger]) {
    const res = await relay.revoke(key, A.token);
    assert.equal(res.status, 403, JSON.stringify(res.body));
    assert.equal(res.body.error.code, 'forbidden');
  }
  assert.equal((await relay.keyState(A.apiKey)).body.state, 'online');
});

test('tab B heard nothing from A\'s agent (after a second)', async () => {
  await sleep(1000);
  assert.deepEqual(toolEvents(B.tab), []);
  assert.ok(toolEvents(A.tab).length > 0, 'tab A did get its own calls');
});

test('forged, expired, early, foreign and mis-addressed tokens: 401 at the relay and at the worker, never 200', async () => {
  const entry = relay.sessionKeys;
  const kid = entry.split(':')[0];
  const t = Math.floor(Date.now() / 1000);
  const good = sessionClaims(A.apiKey);
  const hostile = {
    'expired beyond the leeway': signToken({ ...good, exp: t - 120 }, { entry }),
    'not valid yet': signToken({ ...good, nbf: t + 600 }, { entry }),
    'another Ed25519 key under its kid': signToken(good, { entry: sessionKeyEntry(), kid }),
    'alg none': signToken(good, { alg: 'none', kid }),
    'HS256 keyed with the public key': signToken(good, { alg: 'HS256', kid, hmacKey: publicKeyOf(entry) }),
    'HS256 keyed with the public key, base64url': signToken(good, { alg: 'HS256', kid, hmacKey: publicKeyOf(entry).toString('base64url') }),
    'wrong audience': signToken({ ...good, aud: 'someone-else' }, { entry }),
    'wrong issuer': signToken({ ...good, iss: 'another-relay' }, { entry }),
    'unknown kid': signToken(good, { entry, kid: 'k-unknown' }),
    'no kid': signToken(good, { entry, kid: null }),
  };
  // A control: the same claims, signed right, work.
  const control = signToken(good, { entry });
  relay.remember(control, ...Object.values(hostile));
  assert.equal((await relay.keyState(A.apiKey, control)).status, 200);
  for (const [what, token] of Object.entries(hostile)) {
    for (const [where, res] of [
      ['relay', await relay.call({ apiKey: A.apiKey, toolName: 'OpenPopover' }, { token })],
      ['worker', await surfaces['worker list'].send(token, A.apiKey)],
    ]) {
      assert.equal(res.status, 401, `${what} at the ${where}: ${JSON.stringify(res.body)}`);
      assert.equal(res.body.error.code, 'unauthorized', `${what} at the ${where}`);
    }
  }
});

test('scopes and tools narrow a token: another tool or scope is forbidden', async () => {
  const res = await relay.requestSession(A.apiKey, { scope: ['list', 'status'], tools: ['show_card'] });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const narrow = res.body.token;
  assert.equal((await surfaces['relay status'].send(narrow, A.apiKey)).status, 200);
  assert.equal((await surfaces['worker list'].send(narrow, A.apiKey)).status, 200);
  for (const name of ['relay tool call', 'relay mode', 'worker call']) {
    const refused = await surfaces[name].send(narrow, A.apiKey);
    assert.equal(refused.status, 403, `${name}: ${JSON.stringify(refused.body)}`);
  }
  const listed = await surfaces['worker list'].send(narrow, A.apiKey);
  assert.deepEqual(listed.body.tools, [], 'a token without the call and mode scopes is offered nothing to run');
  const callOnly = (await relay.requestSession(A.apiKey, { tools: ['show_card'] })).body.token;
  assert.equal((await surfaces['relay tool call'].send(callOnly, A.apiKey)).status, 403, 'a tool it does not list');
  const offered = (await surfaces['worker list'].send(callOnly, A.apiKey)).body.tools.map((t) => t.name);
  assert.ok(!offered.includes('OpenPopover'), offered.join());
  // Bad asks of the minting route itself.
  for (const bad of [{ scope: ['revoke'] }, { tools: ['bad name'] }, { ttlSecs: 0 }, { ttlSecs: 10 ** 9 }]) {
    assert.equal((await relay.requestSession(A.apiKey, bad)).status, 400, JSON.stringify(bad));
  }
  // Longer than the relay allows (an hour here): the longest it allows.
  const long = await relay.requestSession(A.apiKey, { ttlSecs: 7200 });
  assert.equal(long.status, 200, JSON.stringify(long.body));
  assert.ok(long.body.expiresAt <= Math.floor(Date.now() / 1000) + 3600 + 1, `expiresAt ${long.body.expiresAt}`);
  assert.equal((await relay.requestSession(A.apiKey, {}, { bearer: A.token })).status, 403, 'a session token mints nothing');
  assert.equal((await relay.requestSession(A.apiKey, {}, { bearer: 'not-a-secret-at-all' })).status, 401);
});

test('ending one session leaves another session of the same key working; the tab stays bound', async () => {
  const one = (await relay.requestSession(A.apiKey)).body;
  const two = (await relay.requestSession(A.apiKey)).body;
  const call = (token) => relay.call({ apiKey: A.apiKey, toolName: 'OpenPopover', params: { message: 'y' } }, { token });
  assert.equal((await call(one.token)).status, 200);
  // Another session cannot end it; it ends itself.
  const del = (id, token) => relay.fetch(`/api/voice-agent/sessions/${id}`, { method: 'DELETE', headers: bearer(token) });
  assert.equal((await del(one.sessionId, two.token)).status, 403);
  assert.equal((await del(one.sessionId, one.token)).status, 200);
  const ended = await call(one.token);
  assert.equal(ended.status, 401, JSON.stringify(ended.body));
  assert.match(ended.body.error.message, /ended/);
  assert.equal((await relay.keyState(A.apiKey, one.token)).status, 401);
  assert.equal((await call(two.token)).status, 200);
  // The worker's credential ends a session by its id.
  assert.equal((await del(two.sessionId, relay.workerSecret)).status, 200);
  assert.equal((await call(two.token)).status, 401);
  assert.equal((await relay.keyState(A.apiKey)).body.state, 'online');
  assert.equal((await call(A.token)).status, 200);
});

test('binding needs the relay\'s proof: a LiveKit-signed token naming a bound or revoked key binds nothing', async () => {
  const forge = (apiKey, identity = 'mallory') => {
    const at = new AccessToken(LIVEKIT_KEY, relay.livekitSecret, { identity, metadata: JSON.stringify({ apiKey }) });
    at.addGrant({ roomJoin: true, room: 'r' });
    return at.toJwt();
  };
  const forged = await forge(A.apiKey);
  relay.remember(forged);
  const intruder = relay.tab({ token: forged });
  const refused = await intruder.connectError();
  assert.equal(refused.data.code, 'unauthorized');
  assert.match(refused.message, /not issued by this relay/);
  intruder.close();
  // The same through voice-agent:register.
  const registering = relay.tab();
  await registering.connected();
  assert.equal((await registering.register(forged)).error.code, 'unauthorized');
  registering.close();
  // The real tab is still bound and heard nothing of it.
  assert.equal((await relay.keyState(A.apiKey)).body.state, 'online');
  assert.equal(A.tab.received('voice-agent:revoked').length, 0);
  // A revoked key is not revived by a forged token either.
  const gone = await relay.boundTab();
  assert.equal((await relay.revoke(gone.apiKey)).status, 200);
  const revived = relay.tab({ token: await forge(gone.apiKey) });
  assert.equal((await revived.connectError()).data.code, 'unauthorized');
  revived.close();
  assert.equal((await relay.keyState(gone.apiKey)).status, 404);
});

test('an MCP session belongs to the token that opened it: another token on its id gets 404', async () => {
  const opened = await mcp(A.token, A.apiKey, INITIALIZE);
  assert.equal(opened.status, 200, JSON.stringify(opened.body));
  const id = opened.session;
  assert.ok(id, 'initialize opens a session');
  const list = { jsonrpc: '2.0', id: 5, method: 'tools/list', params: {} };
  const onSession = (token, key) => mcp(token, key, list, { 'mcp-session-id': id, 'mcp-protocol-version': '2025-11-25' });
  await mcp(A.token, A.apiKey, { jsonrpc: '2.0', method: 'notifications/initialized' }, { 'mcp-session-id': id, 'mcp-protocol-version': '2025-11-25' });
  assert.equal((await onSession(A.token, A.apiKey)).status, 200, 'its own token');
  const another = (await relay.requestSession(A.apiKey)).body.token;
  assert.equal((await onSession(another, A.apiKey)).status, 404, 'another session token of the same key');
  assert.equal((await onSession(B.token, B.apiKey)).status, 404, 'another key\'s token');
  assert.equal((await onSession(A.token, A.apiKey)).status, 200, 'still its own');
});

test('Vapi: a bad signature, a stale timestamp and a replay are refused; a signed fresh message with a session token works', async () => {
  const body = vapiCalls(A.apiKey, A.token);
  const wrongKey = await signedVapi(body, { key: secret('other') });
  assert.equal(wrongKey.status, 401);
  const stale = await signedVapi(body, { ts: Math.floor(Date.now() / 1000) - 600 });
  assert.equal(stale.status, 401);
  assert.match(stale.body.error.message, /five minutes/);
  const unsigned = await worker.fetch('/vapi/webhook', { method: 'POST', headers: json, body: JSON.stringify(body) });
  assert.equal(unsigned.status, 401);
  // A good one, then the very same message again.
  const ts = Math.floor(Date.now() / 1000);
  const first = await signedVapi(body, { ts });
  assert.equal(first.status, 200);
  assert.ok(first.body.results[0].result, JSON.stringify(first.body));
  const replay = await signedVapi(body, { ts });
  assert.equal(replay.status, 401);
  assert.match(replay.body.error.message, /already taken/);
  // Without a session token a call is refused (and with a server's secret in its place too).
  const bare = await signedVapi(vapiCalls(A.apiKey, undefined));
  assert.match(bare.body.results[0].error, /^unauthorized/);
  const server = await signedVapi(vapiCalls(A.apiKey, relay.workerSecret));
  assert.match(server.body.results[0].error, /^unauthorized/);
});

test('Vapi: an end-of-call report ends that call\'s session and no other', async () => {
  const vapiSession = (await relay.requestSession(A.apiKey)).body;
  const other = (await relay.requestSession(A.apiKey)).body;
  const report = { message: { type: 'end-of-call-report', call: vapiCall('c-end', A.apiKey, vapiSession.token) } };
  assert.equal((await signedVapi(report)).status, 200);
  const call = (token) => relay.call({ apiKey: A.apiKey, toolName: 'OpenPopover', params: { message: 'z' } }, { token });
  assert.equal((await call(vapiSession.token)).status, 401, 'its session ended');
  assert.equal((await call(other.token)).status, 200, 'another session of the key goes on');
  assert.equal((await relay.keyState(A.apiKey)).body.state, 'online', 'the key and its tab stay');
});
