// Token service: shape of the answer, LiveKit's own verifier accepts the token, bad input and the
// per-address rate limit.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { TokenVerifier } from 'livekit-server-sdk';
import { startRelay, LIVEKIT_KEY } from './harness.mjs';

let relay;
before(async () => { relay = await startRelay({ RELAY_TOKEN_RATE_PER_MIN: '1000' }); });
after(async () => { await relay?.stop(); });

test('POST /token answers the SPEC shape and LiveKit\'s verifier accepts the token', async () => {
  const t = await relay.token({ participantName: 'Ada', roomName: 'tarot-1' });
  assert.deepEqual(Object.keys(t).sort(), ['apiKey', 'expiresAt', 'identity', 'roomName', 'token', 'url']);
  assert.match(t.apiKey, /^va_[0-9a-f]{64}$/);
  assert.equal(t.roomName, 'tarot-1');
  assert.equal(t.url, 'ws://127.0.0.1:7880');
  const now = Math.floor(Date.now() / 1000);
  assert.ok(t.expiresAt > now + 3600 && t.expiresAt <= now + 6 * 3600 + 5, `expiresAt ${t.expiresAt}`);

  const claims = await new TokenVerifier(LIVEKIT_KEY, relay.livekitSecret).verify(t.token);
  assert.equal(claims.iss, LIVEKIT_KEY);
  assert.equal(claims.sub, t.identity);
  assert.equal(claims.name, 'Ada');
  assert.equal(claims.exp, t.expiresAt);
  assert.deepEqual(JSON.parse(claims.metadata), { apiKey: t.apiKey });
  assert.equal(claims.video.roomJoin, true);
  assert.equal(claims.video.room, 'tarot-1');
  assert.equal(claims.video.canPublish, true);
  assert.equal(claims.video.canSubscribe, true);
  assert.equal(claims.video.canPublishData, true);

  // Someone else's secret does not verify it.
  await assert.rejects(new TokenVerifier(LIVEKIT_KEY, 'another-secret-entirely-000000000').verify(t.token));
});

test('every token carries a fresh key and identity; GET works too', async () => {
  const a = await relay.token();
  const b = await relay.token();
  assert.notEqual(a.apiKey, b.apiKey);
  assert.notEqual(a.identity, b.identity);
  assert.notEqual(a.roomName, b.roomName);
  const g = await relay.fetch('/token?participantName=Bob');
  assert.equal(g.status, 200);
  relay.remember(g.body.token, g.body.apiKey);
  const claims = await new TokenVerifier(LIVEKIT_KEY, relay.livekitSecret).verify(g.body.token);
  assert.equal(claims.name, 'Bob');
  assert.equal(g.headers.get('cache-control'), 'no-store');
  const s = await relay.keyState(g.body.apiKey);
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
    [JSON.stringify({ participantName: 'a\u0000b' }), 'control character'],
    [JSON.stringify({ unexpected: true }), 'unknown field'],
    ['[]', 'not an object'],
  ];
  for (const [body, what] of cases) {
    const r = await relay.fetch('/token', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    assert.equal(r.status, 400, what);
    assert.equal(r.body.ok, false, what);
    assert.equal(r.body.error.code, 'invalid_request', what);
    assert.equal(typeof r.body.error.message, 'string', what);
  }
  const q = await relay.fetch(`/token?participantName=${'y'.repeat(100)}`);
  assert.equal(q.status, 400);
  const big = await relay.fetch('/token', { method: 'POST', body: JSON.stringify({ participantName: 'z'.repeat(70000) }) });
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
  } finally {
    await limited.stop();
  }
});
