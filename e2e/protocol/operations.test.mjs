// Operations: health, readiness, metrics, and the SIGTERM drain.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { sessionKeyEntry, startRelay, sleep, within, runRelay } from '../harness/index.mjs';

test('a missing or weak secret is a clear start-up error (exit 64), never an insecure default', async () => {
  const none = await runRelay({ RELAY_ADDR: '127.0.0.1:0' });
  assert.equal(none.code, 64);
  assert.match(none.out, /LIVEKIT_API_KEY is required/);
  assert.match(none.out, /LIVEKIT_API_SECRET is required/);
  assert.match(none.out, /RELAY_WORKER_SECRET is required/);
  assert.match(none.out, /RELAY_SESSION_KEYS is required/);
  const keys = sessionKeyEntry();
  const weak = await runRelay({ LIVEKIT_API_KEY: 'devkey', LIVEKIT_API_SECRET: 'secret', RELAY_WORKER_SECRET: 'short1', RELAY_SESSION_KEYS: keys });
  assert.equal(weak.code, 64);
  assert.match(weak.out, /shorter than 16/);
  assert.doesNotMatch(weak.out, /short1/);
  // The single agent secret of earlier versions is refused, naming what replaced it.
  const old = await runRelay({ LIVEKIT_API_KEY: 'devkey', LIVEKIT_API_SECRET: 'secret', RELAY_AGENT_SECRET: 'old-agent-secret-0123456789' });
  assert.equal(old.code, 64);
  assert.match(old.out, /RELAY_AGENT_SECRET is no longer read/);
  assert.doesNotMatch(old.out, /old-agent-secret-0123456789/);
  // A signing key that is not one, without echoing it.
  const badKeys = await runRelay({ LIVEKIT_API_KEY: 'devkey', LIVEKIT_API_SECRET: 'secret', RELAY_WORKER_SECRET: 'long-enough-secret-123', RELAY_SESSION_KEYS: 'k1:not-a-seed-value' });
  assert.equal(badKeys.code, 64);
  assert.match(badKeys.out, /RELAY_SESSION_KEYS key "k1" is not 32 bytes/);
  assert.doesNotMatch(badKeys.out, /not-a-seed-value/);
  const base = {
    LIVEKIT_API_KEY: 'devkey', LIVEKIT_API_SECRET: 'secret', RELAY_WORKER_SECRET: 'long-enough-secret-123',
    RELAY_SESSION_KEYS: keys, RELAY_TOKEN_ISSUER_SECRET: 'another-long-secret-456',
  };
  const ok = await runRelay(base, ['check-config']);
  assert.equal(ok.code, 0);
  const badUrl = await runRelay({ ...base, RELAY_REDIS_URL: 'http://user:pw-in-url-1234@127.0.0.1:6379' }, ['check-config']);
  assert.equal(badUrl.code, 64);
  assert.match(badUrl.out, /RELAY_REDIS_URL must start with redis:\/\//);
  assert.doesNotMatch(badUrl.out, /pw-in-url-1234/);
  assert.equal((await runRelay({ ...base, RELAY_REDIS_URL: 'redis://127.0.0.1:6379' }, ['check-config'])).code, 0);
  // Redis unreachable at start: a clear error and a failed exit, not a relay that half works.
  const noRedis = await runRelay({ ...base, RELAY_ADDR: '127.0.0.1:0', RELAY_REDIS_URL: 'redis://:pw-in-url-5678@127.0.0.1:1' });
  assert.equal(noRedis.code, 1);
  assert.match(noRedis.out, /cannot connect to Redis/);
  assert.doesNotMatch(noRedis.out, /pw-in-url-5678/);
  assert.doesNotMatch(noRedis.out, /listening/);
});

test('the relay runs with glibc malloc\'s mmap threshold set, unless the environment sets one or turns it off', async () => {
  const tunables = (relay) => readFileSync(`/proc/${relay.proc.pid}/environ`, 'utf8').split('\0')
    .find((v) => v.startsWith('GLIBC_TUNABLES='));
  const cases = [
    [{}, 'GLIBC_TUNABLES=glibc.malloc.mmap_threshold=16384'],
    [{ GLIBC_TUNABLES: 'glibc.malloc.mmap_threshold=65536' }, 'GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536'],
    [{ RELAY_MALLOC_TUNING: 'off' }, undefined],
  ];
  for (const [env, expected] of cases) {
    const relay = await startRelay(env);
    try {
      assert.equal(tunables(relay), expected, JSON.stringify(env));
      assert.equal((await relay.fetch('/healthz')).status, 200);
    } finally {
      await relay.stop();
    }
  }
});

test('JSON logs when asked, with fingerprints only', async () => {
  const relay = await startRelay({ RELAY_LOG_FORMAT: 'json', RUST_LOG: 'info' }, { name: 'relay-json' });
  try {
    const { tab, apiKey } = await relay.boundTab();
    await relay.call({ apiKey, toolName: 'OpenPopover' });
    await tab.next('voice-agent:OpenPopover');
    tab.close();
  } finally {
    await relay.stop();
  }
  const lines = relay.logText().trim().split('\n');
  const parsed = lines.map((l) => JSON.parse(l));
  const call = parsed.find((l) => l.message === 'tool call');
  assert.ok(call, 'a tool call line');
  assert.match(call.key, /^[0-9a-f]{8}$/);
  assert.equal(call.tool, 'OpenPopover');
  assert.equal(call.status, 200);
  assert.ok(parsed.some((l) => l.message === 'tab bound'));
});

test('CORS follows RELAY_ALLOWED_ORIGINS', async () => {
  const relay = await startRelay({ RELAY_ALLOWED_ORIGINS: 'https://app.example, http://localhost:5173' }, { name: 'relay-cors' });
  try {
    const preflight = (origin) => relay.fetch('/api/voice-agent/tool-call', {
      method: 'OPTIONS',
      headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type,idempotency-key' },
    });
    const allowed = await preflight('https://app.example');
    assert.equal(allowed.headers.get('access-control-allow-origin'), 'https://app.example');
    assert.match(allowed.headers.get('access-control-allow-headers'), /idempotency-key/);
    const other = await preflight('https://evil.example');
    assert.equal(other.headers.get('access-control-allow-origin'), null);
    // Sockets follow the same list.
    const t = await relay.token();
    const evil = relay.tab({ token: t.token, autoConnect: false });
    evil.socket.io.opts.extraHeaders = { origin: 'https://evil.example' };
    evil.socket.connect();
    assert.equal((await evil.connectError()).data.code, 'unauthorized');
    evil.close();
    const good = relay.tab({ token: t.token, autoConnect: false });
    good.socket.io.opts.extraHeaders = { origin: 'http://localhost:5173' };
    good.socket.connect();
    await good.connected();
    good.close();
  } finally {
    await relay.stop();
  }
});

test('healthz, readyz and Prometheus metrics', async () => {
  const relay = await startRelay();
  try {
    assert.deepEqual((await relay.fetch('/healthz')).body, { ok: true });
    assert.deepEqual((await relay.fetch('/readyz')).body, { ok: true });
    const { tab, apiKey } = await relay.boundTab();
    tab.socket.on('voice-agent:draw_card', (p, m, ack) => ack({ ok: true, result: 1 }));
    await relay.call({ apiKey, toolName: 'draw_card', awaitResult: true });
    await relay.call({ apiKey, toolName: 'OpenPopover' });
    await relay.call({ apiKey, toolName: 'x', awaitResult: true, timeoutMs: 50 });
    const m = await relay.fetch('/metrics');
    assert.equal(m.status, 200);
    const text = m.body;
    const value = (re) => Number(text.match(re)?.[1]);
    assert.equal(value(/^relay_connected_tabs (\d+)/m), 1);
    assert.equal(value(/^relay_bound_keys (\d+)/m), 1);
    assert.equal(value(/^relay_tokens_issued_total (\d+)/m), 1);
    assert.equal(value(/^relay_tool_calls_total\{outcome="ok"\} (\d+)/m), 2);
    assert.equal(value(/^relay_tool_calls_total\{outcome="timeout"\} (\d+)/m), 1);
    assert.equal(value(/^relay_tool_call_duration_seconds_count\{kind="awaited"\} (\d+)/m), 1);
    assert.equal(value(/^relay_tool_call_duration_seconds_count\{kind="fire_and_forget"\} (\d+)/m), 1);
    tab.close();
    await relay.waitState(apiKey, 'offline');
    const after = (await relay.fetch('/metrics')).body;
    assert.match(after, /^relay_bound_keys 0/m);
  } finally {
    await relay.stop();
  }
});

test('SIGTERM drains: new work gets 503, answered calls finish, the rest are cancelled in bound', async () => {
  const relay = await startRelay({ RELAY_DRAIN_MS: '1500' }, { name: 'relay-drain' });
  const answering = await relay.boundTab();
  const silent = await relay.boundTab({ transports: ['polling'] });
  answering.tab.socket.on('voice-agent:slow', (p, m, ack) => setTimeout(() => ack({ ok: true, result: 'done' }), 600));
  silent.tab.socket.on('voice-agent:never', () => {});

  const slow = relay.call({ apiKey: answering.apiKey, toolName: 'slow', awaitResult: true, timeoutMs: 10000 });
  const never = relay.call({ apiKey: silent.apiKey, toolName: 'never', awaitResult: true, timeoutMs: 10000 });
  await answering.tab.next('voice-agent:slow');
  await silent.tab.next('voice-agent:never');

  const started = Date.now();
  relay.proc.kill('SIGTERM');
  await sleep(100);
  const ready = await relay.fetch('/readyz');
  assert.equal(ready.status, 503);
  const refused = await relay.call({ apiKey: answering.apiKey, toolName: 'OpenPopover' });
  assert.equal(refused.status, 503);
  assert.equal(refused.body.error.code, 'shutting_down');
  const noToken = await relay.fetch('/token', { method: 'POST' });
  assert.equal(noToken.status, 503);
  assert.equal(noToken.body.error.code, 'shutting_down');

  const done = await slow;
  assert.equal(done.status, 200);
  assert.equal(done.body.result, 'done');
  const cut = await never;
  assert.equal(cut.status, 503);
  assert.equal(cut.body.error.code, 'shutting_down');
  const [cancel] = await silent.tab.next('voice-agent:cancel');
  assert.deepEqual(cancel, { callId: cut.body.callId });

  // Tabs are told the server is closing; the process exits cleanly within the bound.
  await answering.tab.next('disconnect');
  await silent.tab.next('disconnect');
  const { code } = await within(8000, relay.exited, 'the relay to exit');
  assert.equal(code, 0);
  const took = Date.now() - started;
  assert.ok(took < 1500 + 2000 + 2000, `exit took ${took} ms`);
  await relay.stop();
  assert.match(relay.logText(), /draining/);
});
