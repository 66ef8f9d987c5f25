// Token service: shape of the answer, LiveKit's own verifier accepts the token, bad input, the
// per-address rate limit, and who may ask in the issuer and open modes (app-jwt mode has its own
// file, app-jwt.test.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { TokenVerifier } from 'livekit-server-sdk';
import { startRelay, issuerSecret, LIVEKIT_KEY } from '../harness/index.mjs';

// The app's backend, server to server: it names the room and the identity.
let issuer;
// Development and demos: anyone, always in a fresh room.
let open;
const secrets = [issuerSecret(), issuerSecret()];
before(async () => {
  [issuer, open] = await Promise.all([
    startRelay({ RELAY_TOKEN_MODE: 'issuer', RELAY_TOKEN_ISSUER_SECRET: secrets.join(','), RELAY_TOKEN_RATE_PER_MIN: '8' }, { name: 'relay-issuer' }),
    startRelay({ RELAY_TOKEN_RATE_PER_MIN: '1000' }, { name: 'relay-open' }),
  ]);
});
after(async () => {
  await issuer?.stop();
  await open?.stop();
});

const verify = (relay, token) => new TokenVerifier(LIVEKIT_KEY, relay.livekitSecret).verify(token);

test('POST /token answers in the documented shape (TokenResponse) and LiveKit\'s verifier accepts the token; the issuer names room and identity', async () => {
  const t = await issuer.token({ participantName: 'Ada', roomName: 'tarot-1', identity: 'user-1234' });
  assert.deepEqual(Object.keys(t).sort(), ['agentSessionId', 'agentToken', 'agentTokenExpiresAt', 'apiKey', 'expiresAt', 'identity', 'roomName', 'token', 'url']);
  // The tab's own agent's session token: for this key, never outliving the tab's token.
  const [, payload] = t.agentToken.split('.');
  const agent = JSON.parse(Buffer.from(payload, 'base64url').toString());
  assert.equal(agent.sid, t.agentSessionId);
  assert.equal(agent.exp, t.agentTokenExpiresAt);
  assert.ok(agent.exp <= t.expiresAt);
  assert.equal(agent.room, 'tarot-1');
  assert.equal(agent.identity, 'user-1234');
  assert.match(t.apiKey, /^va_[0-9a-f]{64}$/);
  assert.equal(t.roomName, 'tarot-1');
  assert.equal(t.identity, 'user-1234');
  assert.equal(t.url, 'ws://127.0.0.1:7880');
  const now = Math.floor(Date.now() / 1000);
  assert.ok(t.expiresAt > now + 3600 && t.expiresAt <= now + 6 * 3600 + 5, `expiresAt ${t.expiresAt}`);

  const claims = await verify(issuer, t.token);
  assert.equal(claims.iss, LIVEKIT_KEY);
  assert.equal(claims.sub, 'user-1234');
  assert.equal(claims.name, 'Ada');
  assert.equal(claims.exp, t.expiresAt);
  assert.deepEqual(JSON.parse(claims.metadata), { apiKey: t.apiKey });
  assert.equal(claims.video.roomJoin, true);
  assert.equal(claims.video.room, 'tarot-1');
  assert.equal(claims.video.canPublish, true);
  assert.equal(claims.video.canSubscribe, true);
  assert.equal(claims.video.canPublishData, true);
  // The key lives in the metadata: the participant may never rewrite it.
  assert.notEqual(claims.video.canUpdateOwnMetadata, true);

  // Someone else's secret does not verify it.
  await assert.rejects(new TokenVerifier(LIVEKIT_KEY, 'another-secret-entirely-000000000').verify(t.token));
});

test('issuer mode: a missing or wrong issuer secret gets 401 with the error body; every secret of the list works', async () => {
  for (const [what, bearer] of [['no credential', null], ['wrong secret', issuerSecret()], ['the worker\'s secret', issuer.workerSecret], ['the operators\' secret', issuer.operatorSecret]]) {
    const r = await issuer.requestToken({ roomName: 'tarot-1' }, { bearer });
    assert.equal(r.status, 401, what);
    assert.deepEqual(Object.keys(r.body).sort(), ['error', 'ok'], what);
    assert.equal(r.body.ok, false);
    assert.equal(r.body.error.code, 'unauthorized', what);
    assert.match(r.body.error.message, /backend/, what);
    assert.equal(r.headers.get('www-authenticate'), 'Bearer');
  }
  const basic = await issuer.fetch('/token', { method: 'POST', headers: { authorization: `Basic ${secrets[0]}` } });
  assert.equal(basic.status, 401);
  for (const secret of secrets) {
    const t = await issuer.token({}, { bearer: secret });
    assert.match(t.roomName, /^voice-[0-9a-f]{32}$/, 'no roomName: a fresh room');
    assert.match(t.identity, /^tab-/, 'no identity: a fresh one');
  }
  // GET with the credential works too (older frontends use GET).
  const g = await issuer.fetch('/token?participantName=Bob&identity=user-9', { headers: { authorization: `Bearer ${secrets[1]}` } });
  assert.equal(g.status, 200, JSON.stringify(g.body));
  issuer.remember(g.body.token, g.body.apiKey);
  assert.equal((await verify(issuer, g.body.token)).sub, 'user-9');
  assert.equal((await issuer.fetch('/token?participantName=Bob')).status, 401);
});

test('issuer mode: the backend is not limited per address, but guessing the secret is', async () => {
  // The limit is 8 a minute here: the backend mints more than that from one address.
  for (let i = 0; i < 12; i += 1) await issuer.token({ identity: `user-${i}` });
  // Each wrong secret spends from the address's budget (the earlier test spent some of it).
  const statuses = [];
  while (statuses.length < 12 && statuses.at(-1) !== 429) {
    statuses.push((await issuer.requestToken({}, { bearer: issuerSecret() })).status);
  }
  assert.equal(statuses.at(-1), 429, statuses.join(','));
  assert.ok(statuses.slice(0, -1).every((s) => s === 401), statuses.join(','));
  // The backend itself still gets its tokens.
  await issuer.token();
});

test('open mode: a requested roomName or identity is refused; every token gets a fresh room and identity', async () => {
  for (const [body, field] of [[{ roomName: 'tarot-1' }, 'roomName'], [{ identity: 'admin' }, 'identity']]) {
    const r = await open.requestToken(body);
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.error.code, 'invalid_request');
    assert.match(r.body.error.message, new RegExp(`^${field} cannot be chosen`));
    assert.match(r.body.error.message, /fresh/);
  }
  const tokens = [];
  for (let i = 0; i < 8; i += 1) tokens.push(await open.token(i % 2 ? { participantName: 'Ada' } : {}));
  assert.equal(new Set(tokens.map((t) => t.roomName)).size, tokens.length, 'no two tokens share a room');
  assert.equal(new Set(tokens.map((t) => t.identity)).size, tokens.length);
  assert.equal(new Set(tokens.map((t) => t.apiKey)).size, tokens.length);
  for (const t of tokens) {
    assert.match(t.roomName, /^voice-[0-9a-f]{32}$/);
    const claims = await verify(open, t.token);
    assert.equal(claims.video.room, t.roomName);
    assert.notEqual(claims.video.canUpdateOwnMetadata, true);
  }
  assert.equal((await verify(open, tokens[1].token)).name, 'Ada');
  // A credential changes nothing in open mode.
  const withBearer = await open.requestToken({ roomName: 'tarot-1' }, { bearer: issuerSecret() });
  assert.equal(withBearer.status, 400);
});

test('every token carries a fresh key and identity; GET works too', async () => {
  const a = await open.token();
  const b = await open.token();
  assert.notEqual(a.apiKey, b.apiKey);
  assert.notEqual(a.identity, b.identity);
  assert.notEqual(a.roomName, b.roomName);
  const g = await open.fetch('/token?participantName=Bob');
  assert.equal(g.status, 200);
  open.remember(g.body.token, g.body.apiKey);
  const claims = await verify(open, g.body.token);
  assert.equal(claims.name, 'Bob');
  assert.equal(g.headers.get('cache-control'), 'no-store');
  const s = await open.keyState(g.body.apiKey);
  assert.equal(s.status, 200);
  assert.equal(s.body.state, 'issued');
});

test('bad token requests get 400 with the error body', async () => {
  const cases = [
    ['{"participantName":', 'malformed JSON'],
    [JSON.stringify({ participantName: 42 }), 'wrong type'],
    [JSON.stringify({ participantName: 'x'.repeat(65) }), 'oversized name'],
    [JSON.stringify({ roomName: 'a room with spaces' }), 'bad room name'],
    [JSON.stringify({ roomName: 'r'.repeat(65) }), 'oversized room'],
    [JSON.stringify({ identity: 'i'.repeat(129) }), 'oversized identity'],
    [JSON.stringify({ identity: 'a\u0007b' }), 'control character in identity'],
    [JSON.stringify({ participantName: 'a\u0000b' }), 'control character'],
    [JSON.stringify({ unexpected: true }), 'unknown field'],
    ['[]', 'not an object'],
    ['\n', 'white space only (an empty body is the defaults; this is no JSON)'],
  ];
  for (const [body, what] of cases) {
    const r = await issuer.fetch('/token', { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${secrets[0]}` }, body });
    assert.equal(r.status, 400, what);
    assert.equal(r.body.ok, false, what);
    assert.equal(r.body.error.code, 'invalid_request', what);
    assert.equal(typeof r.body.error.message, 'string', what);
  }
  const q = await open.fetch(`/token?participantName=${'y'.repeat(100)}`);
  assert.equal(q.status, 400);
  const big = await open.fetch('/token', { method: 'POST', body: JSON.stringify({ participantName: 'z'.repeat(70000) }) });
  assert.equal(big.status, 413);
  assert.equal(big.body.error.code, 'payload_too_large');
});

test('token issuance is rate limited per client address', async () => {
  const limited = await startRelay({ RELAY_TOKEN_RATE_PER_MIN: '3' }, { name: 'relay-ratelimit' });
  try {
    const statuses = [];
    for (let i = 0; i < 5; i++) {
      const r = await limited.fetch('/token', { method: 'POST' });
      if (r.status === 200) limited.remember(r.body.token, r.body.apiKey);
      statuses.push(r.status);
      if (r.status === 429) assert.equal(r.body.error.code, 'rate_limited');
    }
    assert.deepEqual(statuses, [200, 200, 200, 429, 429]);
    // An X-Forwarded-For from a client that is not a trusted proxy buys nothing.
    const spoofed = await limited.fetch('/token', { method: 'POST', headers: { 'x-forwarded-for': '203.0.113.9' } });
    assert.equal(spoofed.status, 429);
  } finally {
    await limited.stop();
  }
});
