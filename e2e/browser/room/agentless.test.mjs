// The demo page in a real LiveKit room where no agent ever comes (scripts/manage.sh start without
// --agent): LiveKit's own server, the relay, Chromium with a fake microphone, and no agent. The
// page says that no agent is in the room yet, refuses a typed message with that reason, and after
// its wait says that none may be running; text only shows no push-to-talk and no microphone
// meter. Each state is screenshotted (test-logs/screenshots/) and scanned with axe-core, as in
// the browser suite.
//
// Chromium reaches LiveKit's media on an address of its own, so this file runs inside the network
// namespace `scripts/manage.sh test` makes for the voice-room tests (scripts/netns.sh), where
// nothing is routed out.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { startRelay, startLivekit, livekitBin, freePort, secret, logDir } from '../../harness/index.mjs';
import { launch, journey } from '../browser.mjs';

/** The namespace's address (scripts/netns.sh): LiveKit's ICE candidates are on it. */
const NODE_IP = '10.213.0.1';
/** How long the page waits for an agent (web/demo/src/voice.ts, AGENT_WAIT_MS), and a margin. */
const AGENT_WAIT_MS = 10_000;

let dir;
let relay;
let livekit;
let context;
let page;
const pageErrors = [];
const { shot, scanned, a11y } = journey();

before(async () => {
  const inNamespace = Object.values(networkInterfaces()).flat().some((a) => a?.address === NODE_IP);
  assert.ok(inNamespace, `no interface holds ${NODE_IP}: run this through scripts/manage.sh test, which makes the network namespace`);
  assert.ok(livekitBin(), 'no LiveKit server: scripts/manage.sh test installs it into .tools/bin');
  dir = mkdtempSync(join(tmpdir(), 'relay-agentless-'));
  const livekitSecret = secret('lk');
  const port = await freePort();
  livekit = await startLivekit({ dir, secret: livekitSecret, port, udpPort: await freePort(), nodeIp: NODE_IP, logPath: join(logDir, 'agentless-livekit.log') });
  relay = await startRelay({ LIVEKIT_URL: `ws://127.0.0.1:${port}`, LIVEKIT_API_SECRET: livekitSecret }, { name: 'relay-agentless' });
  context = await launch();
  page = await context.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  // No STUN servers: this closed network cannot reach the ones LiveKit names.
  await page.goto(`${relay.url}/?ice=none`, { waitUntil: 'load', timeout: 15000 });
});

after(async () => {
  await context?.close().catch(() => {});
  await relay?.stop();
  await livekit?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('text chat in a room no agent joins: text only (no push-to-talk, no microphone meter), "no agent yet", a message refused with that reason', async () => {
  await page.click('#start-text');
  await page.waitForSelector('#connection[data-state="bound"]', { timeout: 10000 });
  relay.remember((await page.textContent('#dev-key')).trim());
  await page.waitForSelector('#voice[data-state="connected"]', { timeout: 20000 });
  assert.equal(await page.textContent('#voice'), 'Voice: text only (no microphone)');
  assert.equal(await page.isVisible('#talk'), false, 'no push-to-talk in text only');
  assert.equal(await page.isVisible('#mic-level'), false, 'no microphone meter in text only');
  assert.equal(await page.isVisible('#agent-level'), true);
  assert.equal(await page.getAttribute('#participants-empty', 'data-agent'), 'waiting');
  assert.equal(await page.textContent('#participants-empty'), 'No agent in the room yet: waiting for one to join.');
  await shot(page, 'room-01-text-only-no-agent-yet');

  await page.fill('#chat-input', 'Is anyone there?');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#chat-status[data-state="failed"]', { timeout: 5000 });
  assert.equal(await page.textContent('#chat-status'), 'Not sent: no agent is in the room yet, so nobody would read the message');
  assert.equal(await page.inputValue('#chat-input'), 'Is anyone there?', 'the message stays in the field');
  await shot(page, 'room-02-message-with-no-agent');
});

test('after its wait, the page says that no agent has joined and that none may be running', async () => {
  await page.waitForSelector('#participants-empty[data-agent="overdue"]', { timeout: AGENT_WAIT_MS + 5000 });
  assert.match(await page.textContent('#participants-empty'),
    /^No agent has joined in 10 s: none may be running for this LiveKit server \(scripts\/manage\.sh start --agent runs the reference agent\)\. The on-screen tools still work/);
  await page.waitForFunction(() => document.getElementById('announcer').textContent.startsWith('No agent has joined the room'));
  // The page's tools still work without an agent.
  const apiKey = (await page.textContent('#dev-key')).trim();
  const r = await relay.call({ apiKey, toolName: 'OpenPopover', params: { message: 'From the shell, no agent needed' } });
  assert.equal(r.status, 200);
  await page.waitForSelector('#popover:not([hidden])');
  await shot(page, 'room-03-no-agent-joined');
});

test('voice in the same room: push-to-talk and the microphone meter are back, and leaving ends the room', async () => {
  await page.click('#headset'); // ends the text chat
  await page.waitForSelector('#connection[data-state="stopped"]');
  assert.equal(await page.textContent('#participants-empty'), 'Not in a voice room.');
  assert.equal(await page.textContent('#mode'), 'Phase: —');
  await page.click('#headset'); // a voice session
  await page.waitForSelector('#connection[data-state="bound"]', { timeout: 10000 });
  relay.remember((await page.textContent('#dev-key')).trim());
  await page.waitForSelector('#voice[data-state="connected"]', { timeout: 20000 });
  assert.equal(await page.isVisible('#talk'), true);
  assert.equal(await page.isVisible('#mic-level'), true);
  assert.equal(await page.getAttribute('#participants-empty', 'data-agent'), 'waiting', 'the wait starts over in a new room');
  await shot(page, 'room-04-voice-no-agent-yet');
  await page.click('#headset');
  await page.waitForSelector('#connection[data-state="stopped"]');
  assert.equal(await page.getAttribute('#voice', 'data-state'), 'off');
  assert.deepEqual(pageErrors, []);
});

test('axe-core: no serious or critical accessibility violation in these states', () => {
  assert.ok(scanned.length >= 4, `states scanned: ${scanned.join(', ')}`);
  assert.deepEqual(a11y, [], JSON.stringify(a11y, null, 2));
});
