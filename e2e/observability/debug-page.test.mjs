// The worker's /debug page in Chromium: off by default; on, it asks for the operators'
// credential, lists the sessions, draws one session's calls as bars coloured by outcome with its
// modes as bands, shows a call's ids and its trace link on hover, follows the session live, passes
// an axe-core scan, and its HTML never holds a key. Screenshots in test-logs/screenshots/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { startStack, startWorker, sleep, webClientNode, within, eventually } from '../harness/index.mjs';
import { accessibilityProblems, launch, shot } from '../browser/browser.mjs';

const { VoiceRelayClient } = await import(pathToFileURL(webClientNode).href);

const TRACE_LINK = 'https://traces.example.test/trace/{traceId}';

let stack;
let worker;
let browser;
before(async () => {
  stack = await startStack({ relayEnv: { RELAY_DEFAULT_TIMEOUT_MS: '400' } });
  worker = await startWorker(stack.relay, { WORKER_DEBUG_PAGE: 'true', WORKER_TRACE_LINK: TRACE_LINK });
  browser = await launch({ bypassCSP: true });
});
after(async () => {
  await browser?.close();
  await worker?.stop();
  await stack?.stop();
});

test('off by default: /debug answers not_configured', async () => {
  const res = await stack.worker.fetch('/debug');
  assert.equal(res.status, 503);
  assert.equal(res.body.error.code, 'not_configured');
});

test('the page lists the sessions, draws a session\'s calls and modes, links its traces, and passes axe-core', async () => {
  const client = new VoiceRelayClient({ relayUrl: stack.relay.url, transports: ['websocket'] });
  client.handle('OpenPopover', () => undefined);
  client.handle('draw_card', async (params) => {
    await sleep(60);
    if (params.positionLabel === 'Broken') throw new Error('the deck fell on the floor');
    return { cardId: 'the-sun', cardName: 'The Sun', reversed: false };
  });
  const token = await within(5000, client.start(), 'client.start');
  stack.remember(token.token, token.apiKey);
  worker.remember(token.token, token.apiKey);
  const headers = { authorization: `Bearer ${await stack.tokenFor(token.apiKey)}`, 'x-voice-agent-key': token.apiKey, 'content-type': 'application/json' };
  const traceId = randomBytes(16).toString('hex');
  const call = (tool, args, extra = {}) => worker.fetch(`/agent/tools/${tool}`, { method: 'POST', headers: { ...headers, ...extra }, body: JSON.stringify(args) });
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  try {
    assert.equal((await call('OpenPopover', { message: 'hello' })).status, 200);
    assert.equal((await call('enter_spread', {})).status, 200);
    const drawn = await call('draw_card', { positionLabel: 'Past', promptRole: 'What led here' }, { traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01` });
    assert.equal(drawn.body.ok, true, JSON.stringify(drawn.body));
    const failed = await call('draw_card', { positionLabel: 'Broken', promptRole: 'A card that will not come' });
    assert.equal(failed.body.error.code, 'tool_failed');
    const refused = await call('show_card', { cardId: 'the-sun', reversed: false, positionLabel: 'Past' });
    assert.equal(refused.body.error.code, 'tool_not_allowed', 'show_card is not offered in the spread mode');

    const res = await page.goto(`${worker.url}/debug`, { waitUntil: 'load' });
    assert.equal(res.status(), 200);
    assert.match(res.headers()['content-security-policy'], /script-src 'self'/);
    await page.getByLabel(/Credential/).fill(stack.relay.operatorSecret);
    await page.getByRole('button', { name: 'Show the sessions' }).click();
    await page.getByRole('button', { name: /Show the timeline of session s_/ }).first().waitFor({ timeout: 10000 });
    await shot(page, 'debug-sessions');
    assert.deepEqual(await accessibilityProblems(page, 'debug-sessions'), []);

    await page.getByRole('button', { name: /Show the timeline of session s_/ }).first().click();
    const bars = page.locator('#chart .bar');
    await eventually(async () => (await bars.count()) === 5, 'five calls drawn');
    const kinds = await bars.evaluateAll((nodes) => nodes.map((n) => n.className));
    assert.deepEqual(kinds, ['bar ok', 'bar ok', 'bar ok', 'bar failed', 'bar refused']);
    const bands = await page.locator('#chart .band-label').allTextContents();
    assert.deepEqual(bands, ['default', 'spread']);
    // Hovering the traced call shows its ids, its split and its trace, linked.
    await bars.nth(2).hover();
    const details = await page.locator('#details').textContent();
    assert.match(details, /#3 draw_card/);
    assert.match(details, /c_[0-9a-f]{24}/);
    assert.match(details, new RegExp(traceId));
    assert.equal(await page.locator('#details a').getAttribute('href'), TRACE_LINK.replace('{traceId}', traceId));
    await shot(page, 'debug-timeline');
    assert.deepEqual(await accessibilityProblems(page, 'debug-timeline'), []);

    // Followed live: a new call appears without reloading.
    assert.equal((await call('draw_card', { positionLabel: 'Future', promptRole: 'Where it goes' })).status, 200);
    await eventually(async () => (await bars.count()) === 6, 'the new call drawn');

    // No key anywhere in what the page shows or holds.
    const html = await page.content();
    assert.ok(!html.includes(token.apiKey) && !html.includes(token.apiKey.slice(3)), 'no key in the page');
    assert.ok(!html.includes(token.token), 'no token in the page');
    assert.ok(!html.includes(await stack.tokenFor(token.apiKey)), 'no session token in the page');
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
    client.stop();
  }
});

test('a wrong credential, or an agent\'s session token, shows nothing', async () => {
  const key = (await stack.issueKey()).apiKey;
  for (const credential of ['not-the-operators-credential', await stack.tokenFor(key)]) {
    const page = await browser.newPage();
    try {
      await page.goto(`${worker.url}/debug`, { waitUntil: 'load' });
      await page.getByLabel(/Credential/).fill(credential);
      await page.getByRole('button', { name: 'Show the sessions' }).click();
      await eventually(async () => /refused/.test(await page.locator('#status').textContent()), 'the refusal said');
      assert.equal(await page.locator('#sessions-section').isHidden(), true);
    } finally {
      await page.close();
    }
  }
});
