// End-to-end: the demo page in Debian's Chromium (playwright-core) against the real relay.
// One journey, step by step, with a screenshot of each state in test-logs/screenshots/.
// LIVEKIT_URL points at a port where nothing listens, so the page must say that voice failed
// because the LiveKit server cannot be reached, while every tool keeps working.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startRelay, within, sleep } from '../harness/index.mjs';
import { launch, journey, pageWithoutMicrophoneApi } from './browser.mjs';

let relay;
let context;
let page;
let apiKey;
const pageErrors = [];
// Every state the journey screenshots is also scanned with axe-core (reports in test-logs/axe/).
const { shot, scanned, a11y } = journey();

before(async () => {
  relay = await startRelay({ LIVEKIT_URL: 'ws://127.0.0.1:9' }, { name: 'relay-browser' });
  context = await launch();
  page = await context.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(relay.url, { waitUntil: 'load', timeout: 15000 });
});
after(async () => {
  await context?.close();
  await relay?.stop();
});

const slug = (name) => name.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '');
const call = (toolName, params, extra = {}) => relay.call({ apiKey, toolName, params, ...extra });
const announced = () => page.textContent('#announcer');

test('the page starts a session with Ctrl+K: bound to the relay, voice reported failed with its reason', async () => {
  assert.equal(await page.getAttribute('#headset', 'aria-pressed'), 'false');
  // The first screen: voice or text chat, nothing of a session yet.
  assert.equal(await page.textContent('#start-title'), 'How would you like to talk to the agent?');
  assert.equal(await page.isVisible('#start-text'), true);
  assert.equal(await page.isVisible('#back'), false);
  assert.equal(await page.isVisible('#session'), false);
  assert.equal(await page.isVisible('#voice-choice-reason'), false, 'voice works here: no reason shown');
  await shot(page, '00-page-loaded');
  await page.keyboard.press('Control+k');
  await page.waitForSelector('#connection[data-state="bound"]', { timeout: 10000 });
  assert.equal(await page.getAttribute('#headset', 'aria-pressed'), 'true');
  assert.equal(await page.isVisible('#start-text'), false);
  assert.equal(await page.isVisible('#back'), true);
  assert.equal(await page.textContent('#start-title'), 'Voice session');
  apiKey = (await page.textContent('#dev-key')).trim();
  assert.match(apiKey, /^va_[0-9a-f]{64}$/);
  relay.remember(apiKey);
  // What the logs print for this key, and the commands that drive the tab, runnable as shown.
  await page.waitForFunction(() => document.getElementById('dev-key-fp').textContent.startsWith('key='));
  assert.equal(await page.textContent('#dev-key-fp'), `key=${createHash('sha256').update(apiKey).digest('hex').slice(0, 8)}`);
  assert.equal(await page.textContent('#dev-try-call'), `scripts/manage.sh call ${apiKey} OpenPopover '{"message":"Hello"}'`);
  assert.equal(await page.textContent('#dev-try-demo'), `scripts/manage.sh demo ${apiKey}`);
  assert.equal((await relay.keyState(apiKey)).body.state, 'online');
  // The attempt is bounded (10 s), and a refused port fails well before that.
  await page.waitForSelector('#voice[data-state="failed"]', { timeout: 15000 });
  const pill = await page.textContent('#voice');
  assert.match(pill, /^Voice failed: could not reach the LiveKit server at ws:\/\/127\.0\.0\.1:9; tools still work$/);
  await page.waitForFunction(() => document.getElementById('announcer').textContent.startsWith('Voice failed:'));
  assert.match(await announced(), /on-screen tools still work/);
  assert.equal(await page.isVisible('#voice-retry'), true, 'a failed attempt can be retried');
  assert.equal(await page.isVisible('#start-audio'), false);
  // Not in a room: no quality, nobody listed, meters at zero and labelled.
  assert.equal(await page.getAttribute('#quality', 'data-quality'), 'unknown');
  assert.equal(await page.$$eval('#participants li', (li) => li.length), 0);
  for (const id of ['mic-level', 'agent-level']) {
    const m = await page.$eval(`#${id}`, (el) => ({
      role: el.getAttribute('role'), level: el.dataset.level, peak: el.dataset.peak,
      now: el.getAttribute('aria-valuenow'), label: el.getAttribute('aria-labelledby'),
    }));
    assert.equal(m.role, 'meter');
    assert.equal(Number(m.level), 0);
    assert.equal(Number(m.peak), 0);
    assert.equal(Number(m.now), 0);
    assert.ok((await page.textContent(`#${m.label}`)).trim().length > 0, `${id} has a visible label`);
  }
  await shot(page, '01-session-started');
  // The retry button, by keyboard: a new attempt (connecting), which fails the same way.
  await page.evaluate(() => {
    const pill = document.getElementById('voice');
    window.__voiceStates = [];
    new MutationObserver(() => {
      if (window.__voiceStates.at(-1) !== pill.dataset.state) window.__voiceStates.push(pill.dataset.state);
    }).observe(pill, { attributes: true, attributeFilter: ['data-state'] });
  });
  await page.focus('#voice-retry');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => window.__voiceStates.at(-1) === 'failed', null, { timeout: 15000 });
  assert.deepEqual(await page.evaluate(() => window.__voiceStates), ['connecting', 'failed']);
  assert.match(await page.textContent('#voice'), /could not reach the LiveKit server/);
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'voice-retry', 'the focus stays on the retry button');
});

test('push-to-talk: switched on by keyboard; Space held presses the talk button (aria-pressed), except in a text field', async () => {
  assert.equal(await page.isVisible('#ptt'), false, 'the talk button shows only in push-to-talk mode');
  await page.focus('#ptt-mode');
  await page.keyboard.press('Space'); // Space on the checkbox is the checkbox's
  assert.equal(await page.isChecked('#ptt-mode'), true);
  assert.equal(await page.getAttribute('#ptt', 'aria-pressed'), 'false');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'ptt');
  await page.keyboard.down('Space');
  assert.equal(await page.getAttribute('#ptt', 'aria-pressed'), 'true');
  assert.equal(await page.textContent('#ptt'), 'Hold to talk (Space)', 'the name stays; aria-pressed says held');
  await shot(page, '01c-push-to-talk-held');
  await page.keyboard.up('Space');
  assert.equal(await page.getAttribute('#ptt', 'aria-pressed'), 'false', 'released, and not toggled by the button\'s own Space click');
  // Enter toggles (for those who cannot hold a key).
  await page.keyboard.press('Enter');
  assert.equal(await page.getAttribute('#ptt', 'aria-pressed'), 'true');
  await page.keyboard.press('Enter');
  assert.equal(await page.getAttribute('#ptt', 'aria-pressed'), 'false');
  // With the focus on the page itself, Space held talks too.
  await page.evaluate(() => document.activeElement?.blur());
  await page.keyboard.down('Space');
  assert.equal(await page.getAttribute('#ptt', 'aria-pressed'), 'true');
  await page.keyboard.up('Space');
  assert.equal(await page.getAttribute('#ptt', 'aria-pressed'), 'false');
  // In the message field Space is a space.
  await page.focus('#chat-input');
  await page.keyboard.down('Space');
  assert.equal(await page.getAttribute('#ptt', 'aria-pressed'), 'false');
  await page.keyboard.up('Space');
  assert.equal(await page.inputValue('#chat-input'), ' ');
  await page.fill('#chat-input', '');
  // Off again: the button hides and Space no longer talks.
  await page.click('#ptt-mode');
  assert.equal(await page.isVisible('#ptt'), false);
  await page.evaluate(() => document.activeElement?.blur());
  await page.keyboard.down('Space');
  assert.equal(await page.getAttribute('#ptt', 'aria-pressed'), 'false');
  await page.keyboard.up('Space');
});

test('voice failed: the page offers text with the reason; the chat says why nothing was sent without a room', async () => {
  await page.waitForSelector('#voice-unavailable:not([hidden])', { timeout: 5000 });
  assert.match(await page.textContent('#voice-unavailable-reason'), /^Voice failed: Could not reach the LiveKit server at ws:\/\/127\.0\.0\.1:9\. You can type to the agent instead\.$/);
  assert.equal(await page.getAttribute('#voice-unavailable', 'role'), 'status');
  await page.focus('#switch-to-text');
  await page.keyboard.press('Enter');
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'chat-input', 'switching to text puts the focus in the message field');
  // Text only from now on: no push-to-talk, no microphone meter.
  assert.equal(await page.isVisible('#talk'), false);
  assert.equal(await page.isVisible('#mic-level'), false);
  assert.equal(await page.getAttribute('#transcript-toggle', 'aria-expanded'), 'true');
  await page.keyboard.type('Hello <b>agent</b>');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#chat-status[data-state="failed"]', { timeout: 3000 });
  assert.equal(await page.textContent('#chat-status'), 'Not sent: voice is not connected, so there is no room to send the message to');
  assert.equal(await page.inputValue('#chat-input'), 'Hello <b>agent</b>', 'the unsent message stays in the field');
  assert.equal(await page.getAttribute('#chat-input', 'maxlength'), '2000');
  await page.fill('#chat-input', '');
  assert.equal(await page.textContent('#chat-status'), '', 'editing clears the failure');
  await shot(page, '01a-text-offered');
});

test('the transcript toggle shows and hides the transcript, by keyboard; the list is a polite live region', async () => {
  // Start from closed (the step before opened it).
  if ((await page.getAttribute('#transcript-toggle', 'aria-expanded')) === 'true') await page.click('#transcript-toggle');
  assert.equal(await page.getAttribute('#transcript-toggle', 'aria-expanded'), 'false');
  assert.equal(await page.getAttribute('#transcript-toggle', 'aria-controls'), 'transcript');
  assert.equal(await page.isVisible('#transcript'), false);
  await page.focus('#transcript-toggle');
  await page.keyboard.press('Enter');
  assert.equal(await page.getAttribute('#transcript-toggle', 'aria-expanded'), 'true');
  assert.equal(await page.isVisible('#transcript'), true);
  assert.equal(await page.textContent('#transcript-toggle'), 'Transcript', 'the name stays; aria-expanded says open or closed');
  assert.equal(await page.getAttribute('#transcript-list', 'aria-live'), 'polite');
  assert.equal(await page.getAttribute('#transcript-list', 'role'), 'log');
  assert.equal(await page.textContent('#transcript-empty'), 'Nothing said yet.');
  await shot(page, '01b-transcript-open');
  await page.keyboard.press('Space');
  assert.equal(await page.getAttribute('#transcript-toggle', 'aria-expanded'), 'false');
  assert.equal(await page.isVisible('#transcript'), false);
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'transcript-toggle');
});

test('without getUserMedia (a fresh page), the first screen says why voice is unavailable and offers text chat', async () => {
  const { page: bare, errors } = await pageWithoutMicrophoneApi(context, relay.url);
  try {
    assert.equal(await bare.evaluate(() => typeof navigator.mediaDevices?.getUserMedia), 'undefined');
    await bare.waitForSelector('#voice-choice-reason:not([hidden])', { timeout: 5000 });
    assert.equal(
      await bare.textContent('#voice-choice-reason'),
      'This browser does not let the page use a microphone, so voice is not available. Choose text chat to type to the agent.',
    );
    assert.equal(await bare.getAttribute('#headset', 'aria-disabled'), 'true');
    assert.equal(await bare.getAttribute('#headset', 'aria-describedby'), 'voice-choice-reason');
    await shot(bare, '01d-no-microphone-api');
    // The voice button, by keyboard: no session; the reason is announced and the focus moves to text chat.
    await bare.focus('#headset');
    await bare.keyboard.press('Enter');
    assert.equal(await bare.evaluate(() => document.activeElement?.id), 'start-text');
    await bare.waitForFunction(() => document.getElementById('announcer').textContent.includes('Choose text chat instead'));
    assert.equal(await bare.isVisible('#session'), false);
    await bare.keyboard.press('Enter');
    await bare.waitForSelector('#connection[data-state="bound"]', { timeout: 10000 });
    relay.remember((await bare.textContent('#dev-key')).trim());
    assert.equal(await bare.evaluate(() => document.activeElement?.id), 'chat-input');
    assert.equal(await bare.isVisible('#transcript'), true);
    assert.equal(await bare.textContent('#start-title'), 'Text chat');
    assert.deepEqual(errors, []);
  } finally {
    await bare.close();
  }
});

test('first screen, text chat by keyboard; Back asks in a modal dialog: Escape and Stay keep the session, Leave ends it', async () => {
  const other = await context.newPage();
  const errors = [];
  other.on('pageerror', (e) => errors.push(e.message));
  try {
    await other.goto(relay.url, { waitUntil: 'load', timeout: 15000 });
    // Keyboard only: Tab from the top of the page reaches the voice choice, then text chat.
    await other.keyboard.press('Tab');
    assert.equal(await other.evaluate(() => document.activeElement?.id), 'headset');
    await other.keyboard.press('Tab');
    assert.equal(await other.evaluate(() => document.activeElement?.id), 'start-text');
    await other.keyboard.press('Enter');
    await other.waitForSelector('#connection[data-state="bound"]', { timeout: 10000 });
    const key = (await other.textContent('#dev-key')).trim();
    relay.remember(key);
    assert.equal(await other.evaluate(() => document.activeElement?.id), 'chat-input', 'text chat puts the focus in the message field');
    assert.equal(await other.isVisible('#transcript'), true);
    assert.equal(await other.isVisible('#chat-form'), true);
    assert.equal(await other.textContent('#start-title'), 'Text chat');
    // Text chat joins the room without a microphone; LiveKit is unreachable here, so it says so.
    await other.waitForSelector('#voice[data-state="failed"]', { timeout: 15000 });
    assert.match(await other.textContent('#voice'), /could not reach the LiveKit server/);
    // Text only: no push-to-talk and no microphone meter (nothing is published).
    assert.equal(await other.isVisible('#talk'), false);
    assert.equal(await other.isVisible('#ptt-mode'), false);
    assert.equal(await other.isVisible('#mic-level'), false);
    assert.equal(await other.isVisible('#mic-level-label'), false);
    assert.equal(await other.isVisible('#agent-level'), true, 'the agent is still heard');
    await shot(other, '01e-text-chat-chosen');

    const ask = async () => {
      await other.focus('#back');
      await other.keyboard.press('Enter');
      await other.waitForSelector('dialog.voice-relay-leave[open]', { timeout: 3000 });
    };
    await ask();
    assert.equal(await other.getAttribute('dialog.voice-relay-leave', 'role'), 'alertdialog');
    assert.equal(await other.textContent('dialog.voice-relay-leave p'), 'A text chat with the agent is running. Leave and end it?');
    assert.equal(await other.evaluate(() => document.activeElement?.dataset.answer), 'stay', 'the focus starts on Stay');
    await shot(other, '01f-confirm-leave');
    await other.keyboard.press('Escape');
    await other.waitForSelector('dialog.voice-relay-leave', { state: 'detached', timeout: 3000 });
    assert.equal(await other.evaluate(() => document.activeElement?.id), 'back', 'Escape stays; the focus is back on Back');
    assert.equal(await other.getAttribute('#connection', 'data-state'), 'bound');
    assert.equal((await relay.keyState(key)).body.state, 'online');
    await ask();
    await other.keyboard.press('Enter'); // on Stay
    await other.waitForSelector('dialog.voice-relay-leave', { state: 'detached', timeout: 3000 });
    assert.equal(await other.getAttribute('#connection', 'data-state'), 'bound', 'Stay keeps the session');
    assert.equal(await other.isVisible('#session'), true);
    await ask();
    await other.click('dialog.voice-relay-leave button[data-answer="leave"]');
    await other.waitForSelector('#connection[data-state="stopped"]', { timeout: 5000 });
    await relay.waitState(key, 'offline', 5000);
    // Back on the first screen, the focus on its heading, the end announced.
    assert.equal(await other.isVisible('#session'), false);
    assert.equal(await other.isVisible('#start-text'), true);
    assert.equal(await other.isVisible('#back'), false);
    assert.equal(await other.textContent('#start-title'), 'How would you like to talk to the agent?');
    assert.equal(await other.evaluate(() => document.activeElement?.id), 'start-title');
    assert.equal(await other.getAttribute('#voice', 'data-state'), 'off', 'the room is left');
    await other.waitForFunction(() => document.getElementById('announcer').textContent.startsWith('Session ended'));
    await shot(other, '01g-back-on-first-screen');
    // Voice from the first screen again, by keyboard: the microphone's controls are back.
    await other.focus('#headset');
    await other.keyboard.press('Enter');
    await other.waitForSelector('#connection[data-state="bound"]', { timeout: 10000 });
    relay.remember((await other.textContent('#dev-key')).trim());
    assert.equal(await other.textContent('#start-title'), 'Voice session');
    assert.equal(await other.isVisible('#talk'), true);
    assert.equal(await other.isVisible('#mic-level'), true);
    assert.deepEqual(errors, []);
  } finally {
    await other.close();
  }
});

test('OpenPopover shows the green popover with the message as text, then hides it', async () => {
  const message = 'Hello <img src=x onerror="window.__pwned=1"> <b>there</b>';
  const r = await call('OpenPopover', { message });
  assert.equal(r.status, 200);
  await page.waitForSelector('#popover:not([hidden])', { timeout: 3000 });
  assert.equal(await page.textContent('#popover'), message);
  assert.equal(await page.$$eval('#popover *', (els) => els.length), 0, 'no HTML was injected');
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  assert.match(await page.getAttribute('#popover', 'class'), /bounce/);
  // It covers no heading: it sits in the page's flow, between the header and the panels.
  const overlaps = await page.evaluate(() => {
    const box = document.getElementById('popover').getBoundingClientRect();
    return [...document.querySelectorAll('h1, h2, h3')].filter((h) => {
      const r = h.getBoundingClientRect();
      return r.width > 0 && r.height > 0 && r.left < box.right && box.left < r.right && r.top < box.bottom && box.top < r.bottom;
    }).map((h) => h.textContent);
  });
  assert.deepEqual(overlaps, []);
  await shot(page, '02-popover');
  await page.waitForSelector('#popover[hidden]', { state: 'attached', timeout: 7000 });
});

test('the page tells the relay its tools, with set_theme defined by the page', async () => {
  // The page declares right after it binds: wait (bounded) for the relay to have it.
  let state;
  for (let i = 0; i < 100; i++) {
    state = (await relay.keyState(apiKey)).body;
    if (state.handles) break;
    await sleep(50);
  }
  assert.deepEqual(state.handles, ['OpenPopover', 'draw_card', 'loading_status', 'pin_note', 'present_to_cassette', 'set_theme', 'show_card']);
  assert.deepEqual(state.pageTools.map((t) => t.name), ['set_theme']);
  const themed = await call('set_theme', { theme: 'light' }, { awaitResult: true });
  assert.deepEqual(themed.body.result, { theme: 'light' });
  assert.equal(await page.getAttribute('body', 'data-theme'), 'light');
  await shot(page, '02a-light-theme');
  await call('set_theme', { theme: 'dark' }, { awaitResult: true });
  assert.equal(await page.getAttribute('body', 'data-theme'), 'dark');
});

test('pin_note (an app tool from the catalog) pins notes as text until dismissed', async () => {
  const pinned = await call('pin_note', { text: '<b>Buy milk</b>', tone: 'warning' }, { awaitResult: true });
  assert.deepEqual(pinned.body.result, { pinned: true, notes: 1 });
  assert.equal(await page.textContent('#notes-list .note p'), '<b>Buy milk</b>', 'as text, never HTML');
  assert.equal(await page.getAttribute('#notes-list .note', 'data-tone'), 'warning');
  assert.equal(await page.isVisible('#notes-empty'), false);
  const bad = await call('pin_note', { text: 'x', tone: 'loud' }, { awaitResult: true });
  assert.equal(bad.body.error.code, 'tool_failed');
  await shot(page, '02b-note-pinned');
  await page.focus('#notes-list .note button');
  await page.keyboard.press('Enter');
  assert.equal(await page.$$eval('#notes-list .note', (n) => n.length), 0);
  assert.equal(await page.isVisible('#notes-empty'), true);
});

test('the phase indicator follows the mode the agent side sets', async () => {
  const set = await relay.fetch(`/api/voice-agent/keys/${apiKey}/mode`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${relay.workerSecret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ mode: 'reading' }),
  });
  assert.deepEqual(set.body, { ok: true, tabNotified: true });
  await page.waitForSelector('#mode[data-mode="reading"]', { timeout: 5000 });
  assert.equal(await page.textContent('#mode'), 'Phase: reading');
  assert.equal(await page.getAttribute('#mode', 'aria-live'), 'polite');
});

test('loading_status and the cassette: inserted, opened in a modal, replaced', async () => {
  await call('loading_status', { text: 'Digging through memory files…' });
  await page.waitForSelector('#loading:not([hidden])');
  assert.equal(await page.textContent('#loading'), 'Digging through memory files…');
  await shot(page, '03-loading-status');
  // The agent's next action replaces its status line.

  await call('present_to_cassette', { title: 'Wi-Fi', content: 'network: attic\npassword: <b>hunter2</b>' });
  await page.waitForSelector('#cassette:not([hidden])');
  assert.equal(await page.isVisible('#loading'), false, 'the status line cleared');
  assert.equal(await page.textContent('#cassette-label'), 'Wi-Fi');
  assert.equal(await page.getAttribute('#cassette', 'aria-label'), 'Open cassette: Wi-Fi');
  await page.waitForFunction(() => document.getElementById('announcer').textContent.includes('Cassette inserted: Wi-Fi'));
  await shot(page, '04-cassette');
  // Keyboard: focus the cassette and press Enter.
  await page.focus('#cassette');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#cassette-modal[open]');
  assert.equal(await page.textContent('#cassette-title'), 'Wi-Fi');
  assert.equal(await page.textContent('#cassette-content'), 'network: attic\npassword: <b>hunter2</b>');
  assert.equal(await page.$$eval('#cassette-content *', (els) => els.length), 0);
  await shot(page, '05-cassette-modal');
  await page.keyboard.press('Escape');
  await page.waitForSelector('#cassette-modal:not([open])', { state: 'attached' });

  await call('present_to_cassette', { title: 'Order', content: 'A-1234-5678' });
  await page.waitForFunction(() => document.getElementById('cassette-label').textContent === 'Order');
  await page.click('#cassette');
  assert.equal(await page.textContent('#cassette-content'), 'A-1234-5678');
  await page.keyboard.press('Escape');
});

let firstCard;

test('draw_card waits for the user: a click on a card returns it to the agent', async () => {
  const pending = call('draw_card', { positionLabel: 'Past', promptRole: 'What led here' }, { awaitResult: true, timeoutMs: 20000 });
  await page.waitForSelector('#picker[open]', { timeout: 5000 });
  assert.equal(await page.textContent('#picker-title'), 'Draw a card for Past');
  assert.equal(await page.textContent('#picker-role'), 'What led here');
  assert.equal(await page.$$eval('#picker-deck button', (b) => b.length), 78);
  await page.waitForFunction(() => document.getElementById('announcer').textContent.startsWith('Drawing card for Past position'));
  await shot(page, '06-card-picker');
  await page.click('#picker-deck button:nth-child(7)');
  await page.waitForSelector('#picker-reveal:not([hidden])');
  await shot(page, '07-card-revealed');
  const r = await within(10000, pending, 'the draw_card answer');
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const card = r.body.result;
  assert.deepEqual(Object.keys(card).sort(), ['cardId', 'cardName', 'reversed']);
  assert.equal(card.cardId, slug(card.cardName));
  assert.equal(typeof card.reversed, 'boolean');
  await page.waitForSelector('#picker:not([open])', { state: 'attached' });
  assert.match(await page.textContent('#spread-list'), new RegExp(`Past: ${card.cardName}`));
  firstCard = card;
});

test('draw_card by keyboard only; drawn cards leave the deck', async () => {
  const pending = call('draw_card', { positionLabel: 'Present', promptRole: 'Where things stand' }, { awaitResult: true, timeoutMs: 20000 });
  await page.waitForSelector('#picker[open]');
  assert.equal(await page.$$eval('#picker-deck button', (b) => b.length), 77);
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Enter');
  const r = await within(10000, pending, 'the keyboard draw');
  assert.equal(r.status, 200);
  assert.notEqual(r.body.result.cardId, firstCard.cardId);
  assert.match(await page.textContent('#spread-list'), /Present: /);
});

test('show_card displays the card and answers {success, cardId, reversed}; an unknown card is an error', async () => {
  const r = await call('show_card', { cardId: firstCard.cardId, reversed: true }, { awaitResult: true });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body.result, { success: true, cardId: firstCard.cardId, reversed: true });
  assert.equal(await page.textContent('#display-caption'), `${firstCard.cardName} — reversed`);
  assert.equal(await page.getAttribute('#display-card .card-face', 'aria-label'), `${firstCard.cardName}, reversed`);
  assert.match(await announced(), new RegExp(`Showing ${firstCard.cardName}, reversed`));
  await shot(page, '08-show-card');
  const bad = await call('show_card', { cardId: 'the-spoon', reversed: false }, { awaitResult: true });
  assert.equal(bad.status, 502);
  assert.equal(bad.body.error.code, 'tool_failed');
  assert.match(bad.body.error.message, /no card with id the-spoon/);
  const none = await call('make_coffee', {}, { awaitResult: true });
  assert.equal(none.status, 502);
  assert.equal(none.body.error.code, 'no_handler');
});

test('minor arcana: each suit is drawn as an SVG symbol that renders on a stock browser', async () => {
  const cards = { wands: 'ace-of-wands', cups: 'three-of-cups', swords: 'knight-of-swords', pentacles: 'queen-of-pentacles' };
  for (const [suit, cardId] of Object.entries(cards)) {
    const r = await call('show_card', { cardId, reversed: false }, { awaitResult: true });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    await page.waitForFunction((s) => document.querySelector(`#display-card svg.card-symbol[data-suit="${s}"]`), suit);
    const symbol = await page.$eval('#display-card svg.card-symbol', (svg) => {
      const box = svg.getBoundingClientRect();
      const drawn = [...svg.querySelectorAll('path, circle')].map((el) => el.getBBox());
      return {
        width: box.width, height: box.height, shapes: drawn.length,
        drawnArea: drawn.reduce((a, b) => a + b.width * b.height, 0),
        stroke: getComputedStyle(svg).stroke,
        text: svg.closest('.card-face').textContent,
      };
    });
    assert.ok(symbol.width > 20 && symbol.height > 20, `${suit}: the symbol has a size (${symbol.width}×${symbol.height})`);
    assert.ok(symbol.shapes > 0 && symbol.drawnArea > 100, `${suit}: the symbol's shapes have an area`);
    assert.notEqual(symbol.stroke, 'none', `${suit}: the symbol is stroked`);
    // No character outside what every font has (the alchemical suit symbols were missing glyphs).
    assert.match(symbol.text, /^[\x20-\x7e]*$/, `${suit}: the face's text is plain`);
    await shot(page, `08-minor-card-${suit}`);
  }
  // The major arcana have a drawn symbol too.
  await call('show_card', { cardId: 'the-star', reversed: false }, { awaitResult: true });
  await page.waitForSelector('#display-card svg.card-symbol[data-suit="major"]');
});

test('a draw that times out is cancelled: the picker closes', async () => {
  const r = call('draw_card', { positionLabel: 'Future', promptRole: 'Where this is heading' }, { awaitResult: true, timeoutMs: 1500 });
  await page.waitForSelector('#picker[open]');
  const res = await r;
  assert.equal(res.status, 504);
  await page.waitForSelector('#picker:not([open])', { state: 'attached', timeout: 3000 });
  await page.waitForFunction(() => document.getElementById('announcer').textContent.includes('cancelled'));
  await shot(page, '09-draw-cancelled');
  assert.doesNotMatch(await page.textContent('#spread-list'), /Future/);
});

test('the tab survives a relay restart by re-binding its key', async () => {
  const addr = relay.url.replace('http://', '');
  // The same LiveKit secret and signing keys: the tab's token (and its bind proof) still holds.
  const secrets = {
    LIVEKIT_API_SECRET: relay.livekitSecret,
    RELAY_WORKER_SECRET: relay.workerSecret,
    RELAY_OPERATOR_SECRET: relay.operatorSecret,
    RELAY_SESSION_KEYS: relay.sessionKeys,
  };
  await relay.stop();
  await page.waitForSelector('#connection:not([data-state="bound"])', { timeout: 10000 });
  await shot(page, '10-relay-down');
  // The mode of before is not shown as if it were still known.
  assert.equal(await page.textContent('#mode'), 'Phase: —');
  relay = await startRelay({ ...secrets, RELAY_ADDR: addr, LIVEKIT_URL: 'ws://127.0.0.1:9' }, { name: 'relay-browser-restarted' });
  relay.remember(apiKey);
  await page.waitForSelector('#connection[data-state="bound"]', { timeout: 15000 });
  await relay.waitState(apiKey, 'online', 5000);
  // A relay that restarted knows no mode (the agent side tells it again): none is shown.
  assert.equal(await page.textContent('#mode'), 'Phase: —');
  const r = await call('OpenPopover', { message: 'Back after the restart' });
  assert.equal(r.status, 200);
  await page.waitForFunction(() => document.getElementById('popover').textContent === 'Back after the restart');
  await shot(page, '11-after-restart');
});

test('the headset button ends the session; the key goes offline; nothing of it stays: phase, status line, spread, card', async () => {
  // What the session showed: a phase, a status line, a spread, a card.
  await relay.fetch(`/api/voice-agent/keys/${apiKey}/mode`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${relay.workerSecret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ mode: 'reading' }),
  });
  await page.waitForSelector('#mode[data-mode="reading"]', { timeout: 5000 });
  await call('loading_status', { text: 'Shuffling the deck…' });
  await page.waitForSelector('#loading:not([hidden])');
  assert.match(await page.textContent('#spread-list'), /Past: /);
  assert.equal(await page.isVisible('#display'), true);
  await page.click('#headset');
  await page.waitForSelector('#connection[data-state="stopped"]');
  assert.equal(await page.getAttribute('#headset', 'aria-pressed'), 'false');
  assert.equal(await page.isVisible('#start-text'), true, 'back on the first screen');
  await relay.waitState(apiKey, 'offline', 5000);
  assert.equal(await page.textContent('#mode'), 'Phase: —');
  assert.equal(await page.getAttribute('#mode', 'data-mode'), '');
  assert.equal(await page.isVisible('#loading'), false, '"Shuffling the deck…" cleared');
  assert.equal(await page.textContent('#dev-key'), '—');
  await shot(page, '12-session-ended');
  // The next session starts with an empty spread and no card.
  await page.click('#start-text');
  await page.waitForSelector('#connection[data-state="bound"]', { timeout: 10000 });
  relay.remember((await page.textContent('#dev-key')).trim());
  assert.equal(await page.textContent('#spread-list'), '');
  assert.equal(await page.isVisible('#spread-empty'), true, '"Your spread" starts over');
  assert.equal(await page.isVisible('#display'), false);
  assert.equal(await page.textContent('#mode'), 'Phase: —');
  await shot(page, '13-next-session-fresh');
  await page.click('#headset');
  await page.waitForSelector('#connection[data-state="stopped"]');
  assert.deepEqual(pageErrors, []);
});

test('axe-core: no serious or critical accessibility violation in any state of the journey', () => {
  assert.ok(scanned.length >= 19, `states scanned: ${scanned.join(', ')}`);
  assert.deepEqual(a11y, [], JSON.stringify(a11y, null, 2));
});
