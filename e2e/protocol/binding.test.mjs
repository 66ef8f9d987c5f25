// Binding a tab: handshake token (WebSocket and polling), the bare-key register event, refusals
// with codes, one key one tab, revoke, and the key lifecycle.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { AccessToken } from 'livekit-server-sdk';
import { SignJWT } from 'jose';
import { startRelay, strangerKey, sleep, LIVEKIT_KEY } from '../harness/index.mjs';

let relay;
before(async () => {
  relay = await startRelay({ RELAY_RECONNECT_GRACE_MS: '800', RELAY_UNBOUND_KEY_TTL_SECS: '2' });
});
after(async () => { await relay?.stop(); });

for (const transports of [['websocket'], ['polling']]) {
  test(`handshake token binds over ${transports[0]}`, async () => {
    const t = await relay.token();
    const tab = relay.tab({ token: t.token, transports });
    await tab.connected();
    const s = await relay.waitState(t.apiKey, 'online');
    assert.match(s.body.fingerprint, /^[0-9a-f]{8}$/);
    assert.ok(!JSON.stringify(s.body).includes(t.apiKey.slice(3)), 'status does not echo the key');
    tab.close();
    await relay.waitState(t.apiKey, 'offline');
  });
}

async function signedElsewhere(apiKey, secret = 'a-completely-different-secret-000') {
  const at = new AccessToken(LIVEKIT_KEY, secret, { identity: 'mallory', metadata: JSON.stringify({ apiKey }) });
  at.addGrant({ roomJoin: true, room: 'r' });
  return at.toJwt();
}

test('bad handshake tokens fail with connect_error carrying a code', async () => {
  const victim = await relay.token();
  const expired = await new SignJWT({ metadata: JSON.stringify({ apiKey: victim.apiKey }), video: { roomJoin: true, room: 'r' } })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuer(LIVEKIT_KEY)
    .setSubject('late')
    .setNotBefore(Math.floor(Date.now() / 1000) - 7200)
    .setExpirationTime(Math.floor(Date.now() / 1000) - 600)
    .sign(new TextEncoder().encode(relay.livekitSecret));
  const noKey = await new AccessToken(LIVEKIT_KEY, relay.livekitSecret, { identity: 'nokey' }).toJwt();
  const wrongIssuer = await new AccessToken('otherkey', relay.livekitSecret, {
    identity: 'x', metadata: JSON.stringify({ apiKey: victim.apiKey }),
  }).toJwt();
  const cases = {
    forged: await signedElsewhere(victim.apiKey),
    expired,
    'no key in metadata': noKey,
    'wrong issuer': wrongIssuer,
    garbage: 'not.a.jwt',
    empty: '',
  };
  for (const [what, token] of Object.entries(cases)) {
    relay.remember(token);
    const tab = relay.tab({ auth: { token } });
    const err = await tab.connectError();
    assert.equal(err.data?.code, 'unauthorized', `${what}: ${JSON.stringify(err.data)}`);
    assert.equal(typeof err.data.message, 'string');
    assert.equal(err.message, err.data.message);
    tab.close();
  }
  const typed = relay.tab({ auth: { token: 42 } });
  assert.equal((await typed.connectError()).data.code, 'unauthorized');
  typed.close();
  // None of them bound the victim's key.
  assert.equal((await relay.keyState(victim.apiKey)).body.state, 'issued');
});

test('register: a bare key binds once; later binds need the token', async () => {
  const t = await relay.token();
  const first = relay.tab();
  await first.connected();
  assert.deepEqual(await first.register(t.apiKey), { ok: true });
  await relay.waitState(t.apiKey, 'online');
  first.close();
  await relay.waitState(t.apiKey, 'offline');

  const second = relay.tab();
  await second.connected();
  const refused = await second.register(t.apiKey);
  assert.equal(refused.ok, false);
  assert.equal(refused.error.code, 'unauthorized');
  assert.equal((await relay.keyState(t.apiKey)).body.state, 'offline');
  assert.deepEqual(await second.register(t.token), { ok: true });
  await relay.waitState(t.apiKey, 'online');
  second.close();
});

test('register refuses unknown keys, forged tokens and malformed arguments', async () => {
  const tab = relay.tab({ transports: ['polling'] });
  await tab.connected();
  assert.equal((await tab.register(strangerKey())).error.code, 'unknown_key');
  const t = await relay.token();
  const forged = await signedElsewhere(t.apiKey);
  relay.remember(forged);
  assert.equal((await tab.register(forged)).error.code, 'unauthorized');
  for (const bad of [42, null, { apiKey: t.apiKey }, ['x'], 'va_short']) {
    const r = await tab.register(bad);
    assert.equal(r.ok, false, JSON.stringify(bad));
    assert.equal(r.error.code, 'invalid_request', JSON.stringify(bad));
  }
  assert.equal((await relay.keyState(t.apiKey)).body.state, 'issued');
  tab.close();
});

test('one key, one tab: a newer bind replaces the older socket', async () => {
  const t = await relay.token();
  const a = relay.tab({ token: t.token });
  await a.connected();
  await relay.waitState(t.apiKey, 'online');
  const b = relay.tab({ token: t.token, transports: ['polling'] });
  await b.connected();
  const [revoked] = await a.next('voice-agent:revoked');
  assert.deepEqual(revoked, { reason: 'replaced' });
  // A server-side disconnect: socket.io-client does not reconnect (and steal the key back).
  assert.deepEqual(await a.next('disconnect'), ['io server disconnect']);
  assert.equal(a.socket.connected, false);
  await relay.call({ apiKey: t.apiKey, toolName: 'OpenPopover', params: { message: 'to b' } });
  const [params] = await b.next('voice-agent:OpenPopover');
  assert.deepEqual(params, { message: 'to b' });
  assert.equal(a.received('voice-agent:OpenPopover').length, 0);
  b.close();
});

test('revoke unbinds the tab, forgets the key and keeps its token from binding again', async () => {
  const { tab, apiKey, token } = await relay.boundTab();
  // The key's agent holds a session token from before the revoke: it dies with the key.
  await relay.tokenFor(apiKey);
  const r = await relay.revoke(apiKey);
  assert.equal(r.status, 200);
  assert.deepEqual(r.body, { ok: true, tabNotified: true });
  assert.deepEqual((await tab.next('voice-agent:revoked'))[0], { reason: 'revoked' });
  assert.deepEqual(await tab.next('disconnect'), ['io server disconnect']);
  assert.equal((await relay.keyState(apiKey)).status, 404);
  const call = await relay.call({ apiKey, toolName: 'OpenPopover' });
  assert.equal(call.status, 404);
  assert.equal(call.body.error.code, 'unknown_key');
  assert.equal((await relay.revoke(apiKey)).status, 404);
  const again = relay.tab({ token });
  assert.equal((await again.connectError()).data.code, 'unknown_key');
  again.close();
  const viaRegister = relay.tab();
  await viaRegister.connected();
  assert.equal((await viaRegister.register(token)).error.code, 'unknown_key');
  viaRegister.close();
});

test('lifecycle: offline for the grace, then removed; a live token can bind again', async () => {
  const { tab, apiKey, token } = await relay.boundTab();
  const online = await relay.keyState(apiKey);
  assert.equal(online.body.state, 'online');
  tab.close();
  const offline = await relay.waitState(apiKey, 'offline');
  assert.ok(offline.body.graceEndsMs > Date.now() - 50 && offline.body.graceEndsMs <= Date.now() + 900, JSON.stringify(offline.body));
  await relay.waitState(apiKey, null, 3000);
  // The token still proves issuance: the tab can come back after the grace.
  const back = relay.tab({ token });
  await back.connected();
  await relay.waitState(apiKey, 'online');
  back.close();
});

test('a key never bound expires', async () => {
  const t = await relay.token();
  assert.equal((await relay.keyState(t.apiKey)).body.state, 'issued');
  await relay.waitState(t.apiKey, null, 5000);
  const tab = relay.tab();
  await tab.connected();
  assert.equal((await tab.register(t.apiKey)).error.code, 'unknown_key');
  tab.close();
});

test('sockets from a foreign browser origin are refused', async () => {
  const t = await relay.token();
  const evil = relay.tab({ token: t.token });
  evil.socket.io.opts.extraHeaders = { origin: 'http://evil.example' };
  evil.socket.disconnect().connect();
  const err = await evil.connectError();
  assert.equal(err.data.code, 'unauthorized');
  evil.close();
  const own = relay.tab({ token: t.token });
  own.socket.io.opts.extraHeaders = { origin: relay.url };
  own.socket.disconnect().connect();
  await own.connected();
  own.close();
});

test('revoking a key with an awaited call in flight: the tab gets cancel, then revoked; the agent gets 404', async () => {
  const { tab, apiKey } = await relay.boundTab();
  tab.socket.on('voice-agent:draw_card', () => {});
  const pending = relay.call({ apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 5000 });
  const [, meta] = await tab.next('voice-agent:draw_card');
  assert.equal((await relay.revoke(apiKey)).status, 200);
  await tab.next('voice-agent:revoked');
  const order = tab.events.map((e) => e.event).filter((e) => e === 'voice-agent:cancel' || e === 'voice-agent:revoked');
  assert.deepEqual(order, ['voice-agent:cancel', 'voice-agent:revoked']);
  assert.deepEqual(tab.received('voice-agent:cancel')[0].args[0], { callId: meta.callId });
  const r = await pending;
  assert.equal(r.status, 404);
  assert.equal(r.body.error.code, 'unknown_key');
  assert.equal(r.body.callId, meta.callId);
});

test('replacing a tab with an awaited call in flight: the old tab gets cancel, the new tab answers', async () => {
  const t = await relay.token();
  const old = relay.tab({ token: t.token });
  old.socket.on('voice-agent:draw_card', () => {});
  await old.connected();
  await relay.waitState(t.apiKey, 'online');
  const pending = relay.call({ apiKey: t.apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 5000 });
  const [, meta] = await old.next('voice-agent:draw_card');
  const fresh = relay.tab({ token: t.token });
  fresh.socket.on('voice-agent:draw_card', (p, m, ack) => ack({ ok: true, result: { by: 'new tab', callId: m.callId } }));
  await fresh.connected();
  const r = await pending;
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body.result, { by: 'new tab', callId: meta.callId });
  assert.deepEqual((await old.next('voice-agent:cancel'))[0], { callId: meta.callId });
  assert.deepEqual((await old.next('voice-agent:revoked'))[0], { reason: 'replaced' });
  fresh.close();
});

test('a register emitted at once (buffered before connect, the older frontends\' way) is never lost', async () => {
  for (let i = 0; i < 25; i++) {
    const t = await relay.token();
    const tab = relay.tab({ transports: i % 2 ? ['polling'] : ['websocket'] });
    const ack = await tab.register(t.apiKey, 3000);
    assert.deepEqual(ack, { ok: true }, `attempt ${i}`);
    tab.close();
  }
});

test('a socket that connects without a token and never registers is closed after the bound', async () => {
  const short = await startRelay({ RELAY_UNBOUND_SOCKET_SECS: '1' }, { name: 'relay-unbound' });
  try {
    const idle = short.tab();
    await idle.connected();
    const t = await short.token();
    const registered = short.tab();
    await registered.connected();
    assert.deepEqual(await registered.register(t.apiKey), { ok: true });
    assert.deepEqual(await idle.next('disconnect', () => true, 4000), ['io server disconnect']);
    await sleep(300);
    assert.equal(registered.socket.connected, true, 'a socket that bound stays');
    registered.close();
  } finally {
    await short.stop();
  }
});

test('with bare keys off (RELAY_ALLOW_BARE_KEYS=false, the default) register refuses a bare key; the token binds', async () => {
  const strict = await startRelay({ RELAY_ALLOW_BARE_KEYS: 'false' }, { name: 'relay-no-bare-keys' });
  try {
    const t = await strict.token();
    // A participant who read the key from the room's metadata races the tab: refused.
    const racer = strict.tab();
    await racer.connected();
    const refused = await racer.register(t.apiKey);
    assert.equal(refused.ok, false);
    assert.equal(refused.error.code, 'unauthorized');
    assert.match(refused.error.message, /does not bind bare keys; present the token/);
    assert.equal((await strict.keyState(t.apiKey)).body.state, 'issued', 'the key stays unbound');
    racer.close();
    // The tab's own ways: the handshake token, and register with the token.
    const viaHandshake = strict.tab({ token: t.token });
    await viaHandshake.connected();
    await strict.waitState(t.apiKey, 'online');
    viaHandshake.close();
    await strict.waitState(t.apiKey, 'offline');
    const viaRegister = strict.tab({ transports: ['polling'] });
    await viaRegister.connected();
    assert.deepEqual(await viaRegister.register(t.token), { ok: true });
    await strict.waitState(t.apiKey, 'online');
    viaRegister.close();
    // A well-formed key never issued here gets the same answer: the refusal comes before any
    // lookup, so it tells nobody which keys exist.
    const prober = strict.tab();
    await prober.connected();
    assert.equal((await prober.register(strangerKey())).error.code, 'unauthorized');
    prober.close();
  } finally {
    await strict.stop();
  }
});
