// deploy/compose.cluster.yaml (two relays on Redis behind HAProxy, LiveKit's server, the worker)
// brought up by podman-compose from the local images, used through its published ports only.
// HAProxy's RELAY_NODE cookie pins a request to one relay: a tab is bound on relay-a, a call
// through the balancer pinned to relay-b reaches it (each relay's own log says which took
// what), and so does an agent's call through the worker. Then relay-a's container is stopped:
// the tab re-binds through the balancer on relay-b and a call still reaches it. No container's
// log holds a secret, key or token; `down` leaves nothing behind.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildImage, eventually, podmanOk, startComposeStack } from '../harness/index.mjs';
import { CARD, drawThroughWorker, issue, keyState, logLines, openTab, relayCall, waitOnline } from './smoke.mjs';

let stack;
let downed = false;
let tab;
let apiKey;
let fingerprint;
before(async () => {
  await buildImage();
  stack = await startComposeStack('compose.cluster.yaml', 'two');
  console.log(`# deploy/compose.cluster.yaml: every service ready ${stack.readySeconds.toFixed(1)} s after podman-compose up`);
});
after(async () => {
  tab?.close();
  if (stack && !downed) await stack.down();
});

test('every container runs; both relays and the worker pass their health checks, Redis its own', async () => {
  const states = await stack.states();
  const services = ['livekit', 'redis', 'relay-a', 'relay-b', 'balancer', 'worker'];
  assert.deepEqual(states.map((c) => c.name).sort(), services.map((s) => stack.container(s)).sort());
  for (const c of states) assert.equal(c.state, 'running', `${c.name} is ${c.state}`);
  for (const s of ['relay-a', 'relay-b', 'worker', 'redis']) assert.equal(await stack.healthy(stack.container(s)), true);
  // HAProxy found both relays by name through the engine's DNS and passed their /readyz.
  const nodes = new Set();
  await eventually(async () => {
    const res = await fetch(`${stack.relayUrl}/readyz`);
    nodes.add(res.headers.get('set-cookie')?.match(/RELAY_NODE=(\w)/)?.[1]);
    return nodes.has('a') && nodes.has('b');
  }, 'the balancer to send requests to both relays', 30000, 200);
});

test('a tab bound on relay-a through the balancer is reached by a call the balancer gives relay-b', async () => {
  const minted = await issue(stack);
  apiKey = minted.apiKey;
  tab = await openTab(stack.relayUrl, minted.token, { cookie: 'RELAY_NODE=a' });
  await waitOnline(stack, apiKey);
  fingerprint = (await keyState(stack, apiKey)).body.fingerprint;
  assert.equal((await logLines(stack, stack.container('relay-a'), 'tab bound', { key: fingerprint })).length, 1, 'relay-a bound the tab');
  assert.equal((await logLines(stack, stack.container('relay-b'), 'tab bound', { key: fingerprint })).length, 0);

  const call = await relayCall(stack, stack.relayUrl,
    { apiKey, toolName: 'draw_card', params: { positionLabel: 'Present', promptRole: 'Where things stand' }, awaitResult: true, timeoutMs: 10000 },
    { cookie: 'RELAY_NODE=b' });
  assert.equal(call.status, 200, JSON.stringify(call.body));
  assert.deepEqual(call.body.result, CARD);
  const onB = await eventually(() => logLines(stack, stack.container('relay-b'), 'tool call', { call_id: call.body.callId }), 'relay-b to log the call', 5000, 200);
  assert.equal(onB[0].status, 200);
  assert.deepEqual((await logLines(stack, stack.container('relay-a'), 'tool call', { call_id: call.body.callId })), []);

  // An agent through the worker, which reaches the relays through the balancer.
  await drawThroughWorker(stack, apiKey);
});

test('relay-a\'s container stopped: the tab re-binds on relay-b through the balancer and a call still reaches it', async () => {
  const drawsBefore = tab.received('voice-agent:draw_card').length;
  const stopped = Date.now();
  await podmanOk(['stop', '-t', '25', stack.container('relay-a')], { ms: 60000 });
  const exited = Date.now();
  const states = await stack.states();
  assert.equal(states.find((c) => c.name === stack.container('relay-a')).state, 'exited');
  await eventually(() => logLines(stack, stack.container('relay-b'), 'tab bound', { key: fingerprint }), 'the tab to bind on relay-b', 30000, 250);
  await waitOnline(stack, apiKey);
  console.log(`# relay-a took ${((exited - stopped) / 1000).toFixed(1)} s to stop; the tab was bound again on relay-b ${((Date.now() - exited) / 1000).toFixed(1)} s later`);
  await drawThroughWorker(stack, apiKey);
  assert.equal(tab.received('voice-agent:draw_card').length, drawsBefore + 1);
});

test('no container\'s log holds a secret, key or token whole', async () => {
  tab.close();
  const { logs, leaks } = await stack.collectLogs();
  assert.ok(Object.values(logs).every((l) => l.length > 0), 'every container wrote a log');
  assert.deepEqual(leaks, []);
});

test('podman-compose down leaves no container, pod, network or volume', async () => {
  const { code, out, left } = await stack.down();
  downed = true;
  assert.equal(code, 0, out);
  assert.deepEqual(left, { containers: [], pods: [], networks: [], volumes: [] });
});
