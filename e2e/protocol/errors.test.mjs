// Every row of the error table (docs/api.md, relay_wire::ErrorCode), produced by a real request, each with the one error body
// shape; bad requests deliver nothing to any tab and never get a 500.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { sessionKeyEntry, startRelay, strangerKey, sleep, within } from '../harness/index.mjs';
import { sessionClaims, signToken } from '../harness/tokens.mjs';

// Sends a body with node:http and reads the answer even when the server answers before it has
// read the whole body (as it should for an oversized one) and closes the connection.
function rawPost(url, headers, chunks) {
  return within(10000, new Promise((resolveR, reject) => {
    let answered = false;
    const req = http.request(url, { method: 'POST', headers }, (res) => {
      answered = true;
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolveR({ status: res.statusCode, body: JSON.parse(text), headers: new Headers(res.headers) }));
    });
    req.on('error', (err) => { if (!answered) setTimeout(() => answered || reject(err), 1000); });
    (async () => {
      for (const c of chunks) {
        if (answered || req.destroyed) break;
        if (!req.write(c)) await new Promise((r) => { req.once('drain', r); req.once('close', r); });
      }
      req.end();
    })().catch(() => {});
  }), 'an answer to a raw POST');
}

let relay;
let watcher; // a bound tab that must never receive anything from a bad request
let watcherToken; // its agent's session token
// Signing keys in rotation: the new one signs, the old one still verifies.
const NEW_KEY = sessionKeyEntry();
const OLD_KEY = sessionKeyEntry();
before(async () => {
  relay = await startRelay({ RELAY_SESSION_KEYS: `${NEW_KEY},${OLD_KEY}`, RELAY_MAX_INFLIGHT_PER_KEY: '1' });
  relay.remember(NEW_KEY.split(':')[1], OLD_KEY.split(':')[1]);
  watcher = await relay.boundTab();
  watcherToken = await relay.tokenFor(watcher.apiKey);
});
after(async () => { await relay?.stop(); });

function assertError(res, status, code, what = '') {
  assert.equal(res.status, status, `${what}: ${JSON.stringify(res.body)}`);
  assert.equal(typeof res.body, 'object', `${what}: JSON body`);
  assert.equal(res.body.ok, false, what);
  assert.equal(res.body.error.code, code, what);
  assert.equal(typeof res.body.error.message, 'string', what);
  assert.ok(res.body.error.message.length > 0, what);
  assert.match(res.headers.get('content-type'), /application\/json/, what);
}

test('400 invalid_request: malformed JSON, missing fields, wrong types, bad toolName, bad timeoutMs', async () => {
  const k = watcher.apiKey;
  const raws = {
    'malformed JSON': '{"apiKey":',
    'not JSON': 'hello',
    'empty body': '',
    'array body': JSON.stringify([k, 'OpenPopover']),
    'missing apiKey': JSON.stringify({ toolName: 'OpenPopover' }),
    'missing toolName': JSON.stringify({ apiKey: k }),
    'apiKey not a string': JSON.stringify({ apiKey: 42, toolName: 'OpenPopover' }),
    'malformed apiKey': JSON.stringify({ apiKey: 'va_123', toolName: 'OpenPopover' }),
    'uppercase apiKey': JSON.stringify({ apiKey: k.toUpperCase(), toolName: 'OpenPopover' }),
    'toolName not a string': JSON.stringify({ apiKey: k, toolName: ['x'] }),
    'awaitResult not a bool': JSON.stringify({ apiKey: k, toolName: 'OpenPopover', awaitResult: 'yes' }),
    'timeoutMs zero': JSON.stringify({ apiKey: k, toolName: 'OpenPopover', timeoutMs: 0 }),
    'timeoutMs negative': JSON.stringify({ apiKey: k, toolName: 'OpenPopover', timeoutMs: -5 }),
    'timeoutMs fractional': JSON.stringify({ apiKey: k, toolName: 'OpenPopover', timeoutMs: 1.5 }),
    'timeoutMs string': JSON.stringify({ apiKey: k, toolName: 'OpenPopover', timeoutMs: '100' }),
    'timeoutMs too large': JSON.stringify({ apiKey: k, toolName: 'OpenPopover', timeoutMs: 120001 }),
  };
  for (const name of ['', '1abc', 'has space', 'a:b', 'x'.repeat(65), 'ü', 'register', 'cancel', 'revoked', '__proto__', 'a\nb']) {
    raws[`toolName ${JSON.stringify(name)}`] = JSON.stringify({ apiKey: k, toolName: name });
  }
  for (const [what, raw] of Object.entries(raws)) {
    const res = await relay.call(null, { raw, token: watcherToken });
    assertError(res, 400, 'invalid_request', what);
  }
});

test('401 unauthorized: a missing, forged or foreign credential; either rotated signing key works', async () => {
  const body = { apiKey: watcher.apiKey, toolName: 'OpenPopover' };
  assertError(await relay.call(body, { secret: null }), 401, 'unauthorized', 'missing');
  assertError(await relay.call(body, { secret: 'wrong-secret-wrong-secret' }), 401, 'unauthorized', 'wrong');
  assertError(await relay.call(body, { secret: '' }), 401, 'unauthorized', 'empty');
  assertError(await relay.call(body, { secret: `${watcherToken}x` }), 401, 'unauthorized', 'suffix');
  assertError(await relay.call(body, { secret: watcherToken.slice(0, -2) }), 401, 'unauthorized', 'cut short');
  const basic = await relay.call(body, { secret: null, headers: { authorization: `Basic ${watcherToken}` } });
  assertError(basic, 401, 'unauthorized', 'basic scheme');
  assert.equal(basic.headers.get('www-authenticate'), 'Bearer');
  // The key endpoints use the same check.
  assertError(await relay.keyState(watcher.apiKey, 'nope-nope-nope-nope'), 401, 'unauthorized', 'key state');
  assertError(await relay.revoke(watcher.apiKey, 'nope-nope-nope-nope'), 401, 'unauthorized', 'revoke');
  // Auth comes before anything else: a wrong credential with a bad body is still 401.
  assertError(await relay.call(null, { secret: 'nope', raw: '{' }), 401, 'unauthorized', 'auth first');
  // Rotation: a token signed with the older key of RELAY_SESSION_KEYS is still accepted; one
  // signed with a key the relay does not list is not.
  const older = signToken(sessionClaims(watcher.apiKey), { entry: OLD_KEY });
  relay.remember(older);
  assert.equal((await relay.call(body, { token: older })).status, 200);
  await watcher.tab.next('voice-agent:OpenPopover');
  watcher.tab.events.length = 0;
  const stranger = signToken(sessionClaims(watcher.apiKey), { entry: sessionKeyEntry(), kid: NEW_KEY.split(':')[0] });
  assertError(await relay.call(body, { token: stranger }), 401, 'unauthorized', 'another Ed25519 key');
});

test('403 forbidden and 404 unknown_key: another key is refused alike whether it exists or not; a revoked key is unknown', async () => {
  const stranger = strangerKey();
  const issued = await relay.token();
  for (const apiKey of [stranger, issued.apiKey]) {
    assertError(await relay.call({ apiKey, toolName: 'OpenPopover' }, { token: watcherToken }), 403, 'forbidden', 'another key');
  }
  // A server's credential does not call tools.
  assertError(await relay.call({ apiKey: watcher.apiKey, toolName: 'OpenPopover' }, { secret: relay.workerSecret }), 403, 'forbidden', 'worker');
  assertError(await relay.keyState(stranger), 404, 'unknown_key', 'state');
  assertError(await relay.revoke(stranger), 404, 'unknown_key', 'revoke');
  assertError(await relay.keyState('va_nope'), 400, 'invalid_request', 'malformed key in path');
  // The agent of a key revoked since its token was minted: unknown_key.
  const gone = await relay.token();
  const goneToken = await relay.tokenFor(gone.apiKey);
  assert.equal((await relay.revoke(gone.apiKey)).status, 200);
  assertError(await relay.call({ apiKey: gone.apiKey, toolName: 'OpenPopover' }, { token: goneToken }), 404, 'unknown_key', 'revoked');
  assertError(await relay.requestSession(stranger), 404, 'unknown_key', 'no session token for a key never issued');
});

test('409 tab_offline, 504 timeout, 502 tool_failed and no_handler, 429 rate_limited', async () => {
  const offline = await relay.token();
  const r409 = await relay.call({ apiKey: offline.apiKey, toolName: 'OpenPopover', timeoutMs: 50 });
  assertError(r409, 409, 'tab_offline', '409');
  assert.match(r409.body.callId, /^c_/);

  const { tab, apiKey } = await relay.boundTab();
  tab.socket.on('voice-agent:never', () => {});
  tab.socket.on('voice-agent:fails', (p, m, ack) => ack({ ok: false, error: { code: 'boom', message: 'it broke' } }));
  tab.socket.on('voice-agent:nohandler', (p, m, ack) => ack({ ok: false, error: { code: 'no_handler', message: 'no handler' } }));
  assertError(await relay.call({ apiKey, toolName: 'never', awaitResult: true, timeoutMs: 100 }), 504, 'timeout', '504');
  assertError(await relay.call({ apiKey, toolName: 'fails', awaitResult: true }), 502, 'tool_failed', '502');
  assertError(await relay.call({ apiKey, toolName: 'nohandler', awaitResult: true }), 502, 'no_handler', '502b');
  // This relay allows one call in flight per key.
  const hold = relay.call({ apiKey, toolName: 'never', awaitResult: true, timeoutMs: 1500 });
  await tab.next('voice-agent:never', (p, m) => m.deadlineMs > 1000);
  assertError(await relay.call({ apiKey, toolName: 'OpenPopover' }), 429, 'rate_limited', '429');
  assertError(await hold, 504, 'timeout', 'held call');
  tab.close();
});

test('413 payload_too_large, with and without a Content-Length', async () => {
  const url = `${relay.url}/api/voice-agent/tool-call`;
  const auth = { authorization: `Bearer ${watcherToken}`, 'content-type': 'application/json' };
  const big = JSON.stringify({ apiKey: watcher.apiKey, toolName: 'OpenPopover', params: { blob: 'x'.repeat(70 * 1024) } });
  assertError(await rawPost(url, { ...auth, 'content-length': Buffer.byteLength(big) }, [big]), 413, 'payload_too_large', 'content-length');
  // Chunked: no Content-Length, the limit applies while reading.
  const chunks = Array.from({ length: 20 }, () => 'x'.repeat(8 * 1024));
  assertError(await rawPost(url, { ...auth, 'transfer-encoding': 'chunked' }, chunks), 413, 'payload_too_large', 'chunked');
  // Just under the limit is fine.
  const fits = JSON.stringify({ apiKey: watcher.apiKey, toolName: 'fits', params: { blob: 'y'.repeat(60 * 1024) } });
  assert.equal((await relay.call(null, { raw: fits, token: watcherToken })).status, 200);
  assert.equal((await watcher.tab.next('voice-agent:fits'))[0].blob.length, 60 * 1024);
  watcher.tab.events.length = 0;
});

test('nothing from a bad request reached any tab, and the relay never answered 500', async () => {
  await sleep(100);
  const delivered = watcher.tab.events.filter((e) => e.event.startsWith('voice-agent:'));
  assert.deepEqual(delivered, []);
  const metrics = await relay.fetch('/metrics');
  assert.doesNotMatch(metrics.body, /relay_tool_calls_total\{outcome="internal"\} [1-9]/);
});

test('429 rate_limited per session: one session spent leaves the key\'s other sessions and other keys their own budget', async () => {
  const limited = await startRelay({ RELAY_SESSION_RATE_PER_SEC: '5' }, { name: 'relay-session-rate' });
  try {
    const { tab, apiKey } = await limited.boundTab();
    const other = await limited.boundTab();
    const a = (await limited.requestSession(apiKey)).body.token;
    const b = (await limited.requestSession(apiKey)).body.token;
    const statuses = [];
    // The session's rate is counted per second of the clock: the calls start early in one, so
    // they all fall in it.
    await sleep(1000 - (Date.now() % 1000) + 10);
    for (let i = 0; i < 8; i++) {
      const r = await limited.call({ apiKey, toolName: 'OpenPopover', params: { i } }, { token: a });
      statuses.push(r.status);
      if (r.status === 429) assertError(r, 429, 'rate_limited', 'session a');
    }
    assert.ok(statuses.filter((s) => s === 429).length >= 2, JSON.stringify(statuses));
    assert.equal((await limited.call({ apiKey, toolName: 'OpenPopover', params: { i: 'b' } }, { token: b })).status, 200);
    assert.equal((await limited.call({ apiKey: other.apiKey, toolName: 'OpenPopover' })).status, 200);
    await sleep(100);
    // Only the accepted calls reached the tab.
    const delivered = tab.received('voice-agent:OpenPopover').length;
    assert.equal(delivered, statuses.filter((s) => s === 200).length + 1);
    tab.close();
    other.tab.close();
  } finally {
    await limited.stop();
  }
});
