// Operations: health, readiness, metrics, and the SIGTERM drain.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startRelay, sleep, within } from './harness.mjs';

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
