// The README's "Your own tool in five minutes", walked as a newcomer follows it, with the blocks
// it shows taken from the README itself: the catalog is written as shown, the page is served as
// shown from an origin of its own (another port) and opened in Chromium, the settings are the
// ones the README puts in .env, and the call is the README's, answer compared with the one it
// prints. Before the page's origin is allowed, the page says that the relay refused it and the
// relay's log names the origin; once allowed, the relay's own demo page still binds. Only the
// addresses differ from the README's (free ports here; the same text otherwise).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot, startRelay, startWorker, runWorker, freePort, eventually, nodeSecrets } from '../harness/index.mjs';
import { launch, shot } from '../browser/browser.mjs';

const README_RELAY = 'http://127.0.0.1:3001';
const README_PAGE = 'http://127.0.0.1:8000';
const README_CATALOG = '/path/to/my-catalog.json';

/** The section's fenced blocks by language, and its inline code spans. */
function section() {
  const text = readFileSync(join(repoRoot, 'README.md'), 'utf8');
  const start = text.indexOf('## Your own tool in five minutes');
  assert.ok(start >= 0, 'README.md has its "Your own tool in five minutes" section');
  const end = text.indexOf('\n## ', start + 3);
  const body = text.slice(start, end < 0 ? undefined : end);
  const blocks = {};
  for (const m of body.matchAll(/^( *)```(\w+)\n([\s\S]*?)^\1```$/gm)) {
    const indent = m[1].length;
    blocks[m[2]] = m[3].split('\n').map((l) => l.slice(indent)).join('\n');
  }
  const prose = body.replace(/^( *)```[\s\S]*?^\1```$/gm, '');
  const spans = [...prose.matchAll(/`([^`]+)`/g)].map((m) => m[1].replace(/\s+/g, ' '));
  return { blocks, spans };
}

/** Splits a shell command line as sh would (single quotes only, which the README uses). */
function shellWords(line) {
  return [...line.matchAll(/'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2]);
}

let dir;
let pageServer;
let pageOrigin;
let relay;
let worker;
let browser;
const addr = { relay: '' };
const readme = section();

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'walk-'));
  addr.relay = `127.0.0.1:${await freePort()}`;
  const pagePort = await freePort();
  pageOrigin = `http://127.0.0.1:${pagePort}`;
  const html = readme.blocks.html.replaceAll(README_RELAY, `http://${addr.relay}`);
  // The page's own server, on another origin than the relay's (a stand-in for python3 -m http.server).
  pageServer = createServer((req, res) => {
    if (req.url === '/' || req.url === '/index.html') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(html);
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise((r) => pageServer.listen(pagePort, '127.0.0.1', r));
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await worker?.stop();
  await relay?.stop();
  await new Promise((r) => (pageServer ? pageServer.close(r) : r()));
});

const secrets = nodeSecrets();

test('the README shows the whole walk: a catalog, a page on the relay\'s /lib/client.js, the .env lines, the call and its answer', () => {
  const { blocks, spans } = readme;
  assert.ok(blocks.json && blocks.html && blocks.sh, `blocks found: ${Object.keys(blocks)}`);
  assert.match(blocks.html, /import \{ VoiceRelayClient \} from 'http:\/\/127\.0\.0\.1:3001\/lib\/client\.js'/);
  assert.match(blocks.sh, /^RELAY_ALLOWED_ORIGINS=http:\/\/127\.0\.0\.1:8000$/m);
  assert.match(blocks.sh, /^WORKER_CATALOG=/m);
  assert.ok(spans.some((s) => s.startsWith('scripts/manage.sh call va_… CreateDiagram ')), spans.join('\n'));
  assert.ok(spans.some((s) => s.startsWith('{"ok":true')), spans.join('\n'));
  assert.ok(spans.includes('scripts/manage.sh restart'));
});

test('a page on another origin that the relay does not allow says so, and the relay logs the origin', async () => {
  relay = await startRelay({ ...secrets, RELAY_ADDR: addr.relay }, { name: 'relay-walk-refused' });
  const page = await browser.newPage();
  try {
    await page.goto(`${pageOrigin}/`, { waitUntil: 'load', timeout: 15000 });
    await page.waitForFunction(() => /refused/.test(document.getElementById('status').textContent), null, { timeout: 15000 });
    const status = await page.textContent('#status');
    assert.equal(status, `error: the relay at http://${addr.relay} refused this page's origin ${pageOrigin}: add it to RELAY_ALLOWED_ORIGINS`);
    await shot(page, 'walk-01-origin-refused');
  } finally {
    await page.close();
  }
  await eventually(() => relay.logText().includes(`origin=${pageOrigin}`), 'the relay to log the refused origin', 5000);
  const line = relay.logText().split('\n').find((l) => l.includes(`origin=${pageOrigin}`));
  assert.match(line, /WARN .*was refused/);
  assert.match(line, /request="?(?:OPTIONS|POST) \/token/);
  await relay.stop();
  relay = undefined;
});

test('with the README\'s .env lines, the page binds, the README\'s call reaches its handler and prints the answer the README shows', async () => {
  const catalog = join(dir, 'my-catalog.json');
  writeFileSync(catalog, readme.blocks.json);
  const settings = Object.fromEntries(readme.blocks.sh.split('\n').filter((l) => /^[A-Z_]+=/.test(l)).map((l) => {
    const value = l.slice(l.indexOf('=') + 1).replaceAll(README_PAGE, pageOrigin).replaceAll(README_CATALOG, catalog);
    return [l.slice(0, l.indexOf('=')), value];
  }));
  assert.equal(settings.RELAY_ALLOWED_ORIGINS, pageOrigin);
  relay = await startRelay({ ...secrets, RELAY_ADDR: addr.relay, RELAY_ALLOWED_ORIGINS: settings.RELAY_ALLOWED_ORIGINS }, { name: 'relay-walk' });
  worker = await startWorker(relay, { WORKER_CATALOG: settings.WORKER_CATALOG });

  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  try {
    await page.goto(`${pageOrigin}/`, { waitUntil: 'load', timeout: 15000 });
    await page.waitForFunction(() => document.getElementById('status').textContent.startsWith('Connected. Key: va_'), null, { timeout: 15000 });
    const key = (await page.textContent('#status')).replace('Connected. Key: ', '').trim();
    relay.remember(key);
    await shot(page, 'walk-02-page-connected');

    const command = readme.spans.find((s) => s.startsWith('scripts/manage.sh call '));
    // scripts/manage.sh call runs agent-worker call with .env's settings (the operations test
    // runs it); here the same arguments go to the binary with this stack's settings.
    const args = shellWords(command).slice(1).map((w) => (w === 'va_…' ? key : w));
    const out = await runWorker(relay, args, { WORKER_CATALOG: settings.WORKER_CATALOG });
    assert.equal(out.code, 0, out.stdout + out.stderr);
    const printed = JSON.parse(out.stdout.trim());
    const shown = JSON.parse(readme.spans.find((s) => s.startsWith('{"ok":true')).replace('c_…', 'c_x'));
    assert.match(printed.callId, /^c_[0-9a-f]{24}$/);
    assert.deepEqual({ ...printed, callId: 'c_x' }, shown, 'the answer the README shows');
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
  }
});

test('RELAY_ALLOWED_ORIGINS keeps the relay\'s own demo page working', async () => {
  const page = await browser.newPage();
  try {
    await page.goto(`${relay.url}/`, { waitUntil: 'load', timeout: 15000 });
    await page.click('#start-text');
    await page.waitForSelector('#connection[data-state="bound"]', { timeout: 10000 });
    relay.remember((await page.textContent('#dev-key')).trim());
    await shot(page, 'walk-03-demo-page-still-binds');
  } finally {
    await page.close();
  }
});
