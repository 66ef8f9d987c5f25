// deploy/compose.yaml (LiveKit's server, Redis, the relay, the worker) brought up by
// podman-compose from the local images, then used through its published ports only: /token in
// the stack's issuer mode (and LiveKit accepts the token), a tab from the official
// socket.io-client binds, an agent's call through the worker reaches it and the tab's answer
// comes back; no container's log holds a secret, key or token; `down` leaves nothing behind. A
// stack whose relay refuses its configuration fails to come up with the relay's own words.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildImage, podmanOk, stackSecrets, startComposeStack } from '../harness/index.mjs';
import { drawThroughWorker, issue, openTab, waitOnline } from './smoke.mjs';

let stack;
let downed = false;
before(async () => {
  await buildImage();
  stack = await startComposeStack('compose.yaml', 'one');
  console.log(`# deploy/compose.yaml: every service ready ${stack.readySeconds.toFixed(1)} s after podman-compose up`);
});
after(async () => {
  if (stack && !downed) await stack.down();
});

test('every container runs; the relay passes the image\'s health check, the worker its compose one', async () => {
  const states = await stack.states();
  assert.deepEqual(states.map((c) => c.name).sort(), ['livekit', 'redis', 'relay', 'worker'].map((s) => stack.container(s)).sort());
  for (const c of states) assert.equal(c.state, 'running', `${c.name} is ${c.state}`);
  assert.equal(await stack.healthy(stack.container('relay')), true);
  assert.equal(await stack.healthy(stack.container('worker')), true);
});

test('/token answers only the app\'s backend (issuer mode), and the stack\'s LiveKit server accepts the token', async () => {
  const refused = await fetch(`${stack.relayUrl}/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  assert.equal(refused.status, 401);
  assert.equal((await refused.json()).error.code, 'unauthorized');
  const minted = await issue(stack);
  assert.match(minted.apiKey, /^va_[0-9a-f]{64}$/);
  assert.equal(minted.url, stack.env.LIVEKIT_PUBLIC_URL);
  const valid = await fetch(`${stack.livekitUrl}/rtc/validate?access_token=${encodeURIComponent(minted.token)}`);
  assert.equal(valid.status, 200, await valid.text());
  // Another signature (LiveKit logs a token it refuses, so not the real one with a suffix).
  const [head, claims] = minted.token.split('.');
  const forged = await fetch(`${stack.livekitUrl}/rtc/validate?access_token=${head}.${claims}.${'A'.repeat(43)}`);
  assert.equal(forged.status, 401);
});

test('a tab binds with its token; an agent\'s call through the worker reaches it and the answer comes back', async () => {
  const minted = await issue(stack);
  const tab = await openTab(stack.relayUrl, minted.token);
  try {
    await waitOnline(stack, minted.apiKey);
    await drawThroughWorker(stack, minted.apiKey);
    const [params] = await tab.next('voice-agent:draw_card');
    assert.deepEqual(params, { positionLabel: 'Past', promptRole: 'What led here' });
  } finally {
    tab.close();
  }
});

test('no container\'s log holds a secret, key or token whole', async () => {
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

test('a stack whose relay exits fails to come up, with the relay\'s last log lines, and leaves nothing behind', async () => {
  // One secret for two credentials: the relay refuses it at start (exit 64).
  const secret = stackSecrets().RELAY_WORKER_SECRET;
  const failed = await startComposeStack('compose.yaml', 'bad', { RELAY_WORKER_SECRET: secret, RELAY_TOKEN_ISSUER_SECRET: secret })
    .then(() => null, (e) => e);
  assert.ok(failed, 'the stack came up with a configuration the relay refuses');
  // Whether podman-compose or the readiness poll saw it first, every container's state is told.
  assert.match(failed.message, /_relay_1: exited \(exit 64\)/);
  assert.match(failed.message, /configuration error/);
  assert.ok(!failed.message.includes(secret), 'the failure does not print the secret');
  const left = await podmanOk(['ps', '-a', '--format', '{{.Names}}']);
  assert.ok(!left.includes('vae2ebad'), left);
});
