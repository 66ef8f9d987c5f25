// A restart of the relay and the worker, as `scripts/manage.sh restart` does it (LiveKit's rooms
// kept), with a new catalog: the page's tab (the browser client library, official
// socket.io-client underneath) binds again with its token, the worker takes its session back
// from its state file, and the tab is told the new catalog's mode instead of keeping the old
// one; the agent reaches it through the worker as before. LiveKit's server is stood in for by
// the webhook it would send (signed with its own SDK): its media cannot run here.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  startRelay, startWorker, freePort, eventually, within, participantEvent, sendWebhook, nodeSecrets, webClientNode,
} from '../harness/index.mjs';

const { VoiceRelayClient } = await import(pathToFileURL(webClientNode).href);

const DIAGRAMS = {
  initialMode: 'drafting',
  modes: [
    { id: 'drafting', instructions: 'Help the user draw.', next: ['review'] },
    { id: 'review', instructions: 'Walk through the diagram.', next: ['drafting'] },
  ],
  tools: [{
    name: 'CreateDiagram',
    description: 'Create a new diagram in the editor.',
    parameters: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'], additionalProperties: false },
    outputSchema: { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] },
    awaitResult: true,
    timeoutMs: 5000,
    modes: ['drafting'],
  }],
};

let dir;
let env;
let relay;
let worker;
let client;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'restart-'));
  env = { ...nodeSecrets(), RELAY_ADDR: `127.0.0.1:${await freePort()}` };
  relay = await startRelay(env, { name: 'relay-before' });
  worker = await startWorker(relay, { WORKER_STATE_FILE: join(dir, 'sessions.json') });
});
after(async () => {
  client?.stop();
  await worker?.stop();
  await relay?.stop();
});

const fp = (key) => createHash('sha256').update(key).digest('hex').slice(0, 8);
const sessions = async () => (await worker.fetch('/sessions', { headers: { authorization: `Bearer ${relay.operatorSecret}` } })).body.sessions;

test('after a restart with a new catalog, the tab binds again, keeps its worker session and is told the new mode', async () => {
  client = new VoiceRelayClient({ relayUrl: relay.url, transports: ['websocket'], participantName: 'Ada' });
  const modes = [];
  client.on('mode', (m) => modes.push(m));
  client.handle('CreateDiagram', ({ title }) => ({ id: `d-${title}` }));
  const token = await within(10000, client.start(), 'the tab to start');
  relay.remember(token.token, token.apiKey);
  // LiveKit says the user joined: a session in the default catalog's first mode.
  const joined = await sendWebhook(worker, participantEvent('participant_joined', { room: token.roomName, identity: token.identity, apiKey: token.apiKey }), { secret: relay.livekitSecret, relay });
  assert.equal(joined.status, 200);
  await eventually(() => client.mode === 'default', 'the tab to be told the mode', 5000);

  // The restart: the worker and the relay stop (the worker keeps its sessions in its file),
  // then start again, the worker with the app's catalog. The worker is up first here, so it
  // opens the kept session before the relay knows the key again (the tab binds only once the
  // relay is back): it has to tell the mode when the relay can take it.
  await worker.stop();
  await relay.stop();
  await eventually(() => client.state !== 'bound', 'the tab to see the relay gone', 5000);
  assert.equal(client.mode, null, 'the tab no longer shows a mode it cannot know');
  const catalog = join(dir, 'diagrams.json');
  writeFileSync(catalog, JSON.stringify(DIAGRAMS));
  worker = await startWorker(relay, { WORKER_STATE_FILE: join(dir, 'sessions.json'), WORKER_CATALOG: catalog });
  await new Promise((r) => setTimeout(r, 500));
  relay = await startRelay(env, { name: 'relay-after' });
  relay.remember(token.token, token.apiKey);
  relay.share(worker);

  await eventually(() => client.state === 'bound', 'the tab to bind again', 15000, 50);
  await eventually(() => client.mode === 'drafting', 'the tab to be told the new catalog\'s mode', 15000, 50);
  assert.equal(modes.at(-1), 'drafting');
  assert.ok(!modes.includes('default') || modes.lastIndexOf('default') < modes.indexOf(null), `no stale mode after the restart: ${modes}`);
  const session = (await sessions()).find((s) => s.key === fp(token.apiKey));
  assert.ok(session, 'the worker has the tab\'s session back');
  assert.equal(session.source, 'livekit');
  assert.equal(session.mode, 'drafting');

  // The agent reaches the tab through the restarted worker, with the new catalog's tool.
  const headers = { authorization: `Bearer ${await relay.tokenFor(token.apiKey)}`, 'x-voice-agent-key': token.apiKey, 'content-type': 'application/json' };
  const offer = await worker.fetch('/agent/tools', { headers });
  assert.equal(offer.body.mode, 'drafting');
  assert.deepEqual(offer.body.tools.map((t) => t.name), ['CreateDiagram', 'enter_review']);
  const made = await worker.fetch('/agent/tools/CreateDiagram', { method: 'POST', headers, body: JSON.stringify({ title: 'flow' }) });
  assert.equal(made.body.ok, true, JSON.stringify(made.body));
  assert.deepEqual(made.body.result, { id: 'd-flow' });
});
