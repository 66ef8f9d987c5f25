// The npm package as a user gets it: `npm pack` of web/client, the tarball installed into a
// fresh React app in a temporary folder (react, react-dom, vite 7, socket.io-client,
// livekit-client), type-checked with tsc against the shipped declarations, built with Vite in
// development mode (so StrictMode really runs effects twice), served by the real relay
// (RELAY_WEB_DIR = the app's dist, same origin), and driven in Debian's Chromium. The same
// installed package is also imported in Node for the client's own lifecycle.
// Every wait is bounded; npm and the builds run with their own time limits.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { gzipSync } from 'node:zlib';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { startRelay, within, sleep, webNodeModules, webPackageDir } from '../harness/index.mjs';
import { launch, shot } from '../browser/browser.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const pkgDir = webPackageDir;
const NPM_FLAGS = ['--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'];

let work; // temporary folder: the tarball and the app
let appDir;
let tarball;
let packed;
let relay;
let context;
let page;
let apiKey;
const tokenRequests = [];
const pageErrors = [];

/** Runs a command in its own process group, killed as a whole when `ms` runs out. */
function run(cmd, args, { cwd, ms, env = {} }) {
  return new Promise((resolveRun, reject) => {
    const proc = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => { stdout += d; });
    proc.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => {
      try { process.kill(-proc.pid, 'SIGKILL'); } catch { /* already gone */ }
      reject(new Error(`${cmd} ${args.join(' ')} took longer than ${ms} ms\n${stderr.slice(-2000)}`));
    }, ms);
    proc.on('error', (err) => { clearTimeout(timer); reject(err); });
    proc.on('close', (code) => {
      clearTimeout(timer);
      if (code === 0) resolveRun({ stdout, stderr });
      else reject(new Error(`${cmd} ${args.join(' ')} exited with ${code}\n${stdout.slice(-2000)}\n${stderr.slice(-4000)}`));
    });
  });
}

/** The version of a package installed in web/, so the app's install hits npm's cache. */
async function installed(name) {
  return JSON.parse(await readFile(join(webNodeModules, name, 'package.json'), 'utf8')).version;
}

before(async () => {
  work = await mkdtemp(join(tmpdir(), 'voice-relay-package-'));
  appDir = join(work, 'app');
});

after(async () => {
  await context?.close();
  await relay?.stop();
  if (work && !process.env.KEEP_PACKAGE_APP) await rm(work, { recursive: true, force: true });
});

test('npm pack: ESM and declarations only, exports map, peer dependencies, nothing bundled', async () => {
  // `npm pack` runs the package's prepack (node build.mjs) first.
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', work], { cwd: pkgDir, ms: 120000 });
  [packed] = JSON.parse(stdout.slice(stdout.indexOf('[')));
  tarball = join(work, packed.filename);
  const files = packed.files.map((f) => f.path).sort();
  assert.deepEqual(files, [
    'CHANGELOG.md', 'README.md',
    'dist/availability.d.ts', 'dist/availability.js',
    'dist/chat.d.ts', 'dist/chat.js',
    'dist/client.d.ts', 'dist/client.js',
    'dist/errors.d.ts', 'dist/errors.js',
    'dist/leave.d.ts', 'dist/leave.js',
    'dist/names.d.ts', 'dist/names.js',
    'dist/push-to-talk.d.ts', 'dist/push-to-talk.js',
    'dist/react/index.d.ts', 'dist/react/index.js',
    'dist/react/store.d.ts', 'dist/react/store.js',
    'dist/timeout.d.ts', 'dist/timeout.js',
    'dist/transcript.d.ts', 'dist/transcript.js',
    'dist/voice.d.ts', 'dist/voice.js',
    'package.json',
  ]);
  assert.equal(packed.name, '@voice-relay/client');
  assert.equal(packed.version, '0.1.0');
  const manifest = JSON.parse(await readFile(join(pkgDir, 'package.json'), 'utf8'));
  assert.equal(manifest.type, 'module');
  assert.equal(manifest.dependencies, undefined, 'everything the package imports is a peer');
  assert.deepEqual(Object.keys(manifest.peerDependencies).sort(), ['livekit-client', 'react', 'socket.io-client']);
  assert.deepEqual(manifest.peerDependenciesMeta, { react: { optional: true } });
  assert.deepEqual(Object.keys(manifest.exports), ['.', './voice', './react', './package.json']);
  // Dependencies stay imports: no copy of socket.io, LiveKit or React inside.
  const client = await readFile(join(pkgDir, 'dist/client.js'), 'utf8');
  assert.match(client, /from "socket\.io-client"/);
  assert.doesNotMatch(client, /engine\.io|function lookup/);
  const react = await readFile(join(pkgDir, 'dist/react/index.js'), 'utf8');
  assert.match(react, /from "react"/);
  assert.match(react, /from "\.\.\/client\.js"/, 'the React entry shares the main entry\'s client module');
  const voice = await readFile(join(pkgDir, 'dist/voice.js'), 'utf8');
  assert.match(voice, /import\("livekit-client"\)/, 'livekit-client is loaded only when voice is asked for');
  for (const f of ['transcript', 'chat', 'push-to-talk', 'availability', 'leave']) {
    const core = await readFile(join(pkgDir, `dist/${f}.js`), 'utf8');
    assert.doesNotMatch(core, /from "(livekit-client|react)"/, `${f}.js is framework-free and loads no LiveKit code`);
  }
  console.log(`# packed ${packed.filename}: ${packed.size} bytes, ${packed.unpackedSize} unpacked, ${files.length} files`);
});

test('what each entry point adds to an app: minified and gzipped, peers left out', async () => {
  const { build } = await import('esbuild');
  const peers = ['socket.io-client', 'livekit-client', 'react', 'react-dom'];
  const measure = async (entry) => {
    const out = await build({ entryPoints: [join(pkgDir, entry)], bundle: true, minify: true, format: 'esm', target: 'es2020', external: peers, write: false, logLevel: 'error' });
    const code = out.outputFiles[0].contents;
    return { min: code.length, gz: gzipSync(code, { level: 9 }).length };
  };
  const main = await measure('dist/client.js');
  const voice = await measure('dist/voice.js');
  const react = await measure('dist/react/index.js');
  console.log(`# @voice-relay/client: ${main.min} B minified, ${main.gz} B gzipped`);
  console.log(`# @voice-relay/client/voice: ${voice.min} B minified, ${voice.gz} B gzipped`);
  console.log(`# @voice-relay/client/react (with the client): ${react.min} B minified, ${react.gz} B gzipped`);
  // Budgets: a thin layer stays thin.
  // The client declares its tools and checks page tool specs: 3.3 KB with those.
  assert.ok(main.gz < 4 * 1024, `the client grew to ${main.gz} B gzipped`);
  // The voice UI hooks (transcript, text chat, push-to-talk, availability, confirm-leave) took
  // the React entry from 5.1 KB to 8.6 KB gzipped; the budget was 6 KB before them. The one
  // voice connection shared with the demo page (its failure sentences, publishing and
  // unpublishing the microphone) took it to 9.9 KB.
  assert.ok(react.gz < 10.5 * 1024, `the React entry grew to ${react.gz} B gzipped`);
  // The framework-free voice entry: the connection and the cores, without React or the client.
  assert.ok(voice.gz < 6 * 1024, `the voice entry grew to ${voice.gz} B gzipped`);
});

test('the tarball installs into a fresh React app next to its peers', async () => {
  assert.ok(tarball, 'packed');
  await cp(join(here, 'app'), appDir, { recursive: true });
  const pkg = {
    name: 'voice-relay-package-test-app',
    private: true,
    type: 'module',
    dependencies: {
      '@voice-relay/client': `file:${tarball}`,
      'livekit-client': await installed('livekit-client'),
      react: '^19.0.0',
      'react-dom': '^19.0.0',
      'socket.io-client': await installed('socket.io-client'),
    },
    devDependencies: {
      '@types/react': await installed('@types/react'),
      '@types/react-dom': '^19.0.0',
      typescript: await installed('typescript'),
      vite: '^7.0.0',
    },
  };
  await writeFile(join(appDir, 'package.json'), `${JSON.stringify(pkg, null, 2)}\n`);
  await run('npm', ['install', ...NPM_FLAGS], { cwd: appDir, ms: 300000 });
  const installedPkg = JSON.parse(await readFile(join(appDir, 'node_modules/@voice-relay/client/package.json'), 'utf8'));
  assert.equal(installedPkg.version, '0.1.0');
});

test('the app type-checks against the shipped declarations (tsc, strict)', async () => {
  await run(join(appDir, 'node_modules/.bin/tsc'), ['--noEmit', '-p', appDir], { cwd: appDir, ms: 120000 });
});

test('the app builds with Vite 7 (development mode, so StrictMode double-invokes)', async () => {
  await run(join(appDir, 'node_modules/.bin/vite'), ['build', '--mode', 'development'], {
    cwd: appDir,
    ms: 180000,
    env: { NODE_ENV: 'development' },
  });
  const html = await readFile(join(appDir, 'dist/index.html'), 'utf8');
  assert.match(html, /<script type="module"[^>]+src="\/assets\/[^"]+\.js"/);
  // The relay serves the built app (it looks for index.html when it starts). The page fetches
  // its own token, as in development: open token mode. LiveKit's URL points where nothing
  // listens, so joining voice fails, with its reason.
  relay = await startRelay(
    { RELAY_WEB_DIR: join(appDir, 'dist'), RELAY_TOKEN_MODE: 'open', LIVEKIT_URL: 'ws://127.0.0.1:9' },
    { name: 'relay-package' },
  );
});

test('in Node: the exports map resolves; tokenUrl is used; stop() during start() binds nothing', async () => {
  const require = createRequire(join(appDir, 'package.json'));
  const main = require.resolve('@voice-relay/client');
  assert.ok(main.endsWith('/node_modules/@voice-relay/client/dist/client.js'), main);
  assert.ok(require.resolve('@voice-relay/client/react').endsWith('/dist/react/index.js'));
  assert.ok(require.resolve('@voice-relay/client/voice').endsWith('/dist/voice.js'));
  assert.throws(() => require.resolve('@voice-relay/client/dist/react/store.js'), { code: 'ERR_PACKAGE_PATH_NOT_EXPORTED' });
  const { VoiceRelayClient } = await import(pathToFileURL(main).href);

  // tokenUrl and tokenHeaders: the token comes from there, asked with those headers (here the
  // relay's own endpoint with a marker; an open relay ignores the credential).
  const fetched = [];
  const recording = (url, init) => {
    fetched.push([String(url), init.headers.get('authorization'), init.headers.get('content-type')]);
    return fetch(url, init);
  };
  const client = new VoiceRelayClient({
    relayUrl: relay.url,
    tokenUrl: `${relay.url}/token?from=app`,
    tokenHeaders: async () => ({ authorization: 'Bearer session-of-the-app' }),
    transports: ['websocket'],
    fetch: recording,
  });
  const token = await within(5000, client.start(), 'client.start with tokenUrl');
  relay.remember(token.token, token.apiKey);
  assert.deepEqual(fetched, [[`${relay.url}/token?from=app`, 'Bearer session-of-the-app', 'application/json']]);
  await relay.waitState(token.apiKey, 'online');
  client.stop();
  await relay.waitState(token.apiKey, 'offline');

  // stop() while the token is on its way: start() rejects with AbortError, nothing connects.
  let minted;
  let stopNow = true;
  const slow = async (url, init) => {
    const res = await fetch(url, init);
    minted = await res.clone().json();
    relay.remember(minted.token, minted.apiKey);
    if (stopNow) stopping.stop();
    return res;
  };
  const stopping = new VoiceRelayClient({ relayUrl: relay.url, transports: ['websocket'], fetch: slow });
  const states = [];
  stopping.on('state', (s) => states.push(s));
  await assert.rejects(within(5000, stopping.start(), 'start() to reject'), (err) => err.name === 'AbortError');
  assert.equal(stopping.state, 'stopped');
  assert.deepEqual(states, ['fetching-token', 'stopped']);
  await sleep(300);
  assert.equal((await relay.keyState(minted.apiKey)).body.state, 'issued', 'the key was never bound');
  // The same client can start again afterwards.
  stopNow = false;
  const again = await within(5000, stopping.start(), 'a second start');
  relay.remember(again.token, again.apiKey);
  await relay.waitState(again.apiKey, 'online');
  stopping.stop();
});

test('StrictMode: one token, one bind; the provider reports bound with the key', async () => {
  context = await launch();
  page = await context.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('request', (r) => {
    if (new URL(r.url()).pathname === '/token') tokenRequests.push(r.method());
  });
  const logFrom = relay.logText().length; // the Node test's binds come before
  await page.goto(relay.url, { waitUntil: 'load', timeout: 15000 });
  await page.waitForSelector('#state[data-state="bound"]', { timeout: 10000 });
  apiKey = (await page.textContent('#key')).trim();
  assert.match(apiKey, /^va_[0-9a-f]{64}$/);
  relay.remember(apiKey);
  // React did run the effects twice (development build, StrictMode)…
  assert.equal(await page.evaluate(() => window.__effects), 2);
  // …and the relay still saw one token and one bind, and holds one tab.
  await sleep(500);
  assert.deepEqual(tokenRequests, ['POST']);
  assert.equal(relay.logText().slice(logFrom).split('\n').filter((l) => l.includes('tab bound')).length, 1);
  const metrics = (await relay.fetch('/metrics')).body;
  assert.match(metrics, /^relay_connected_tabs 1$/m);
  assert.match(metrics, /^relay_bound_keys 1$/m);
  assert.equal((await relay.keyState(apiKey)).body.state, 'online');
  await shot(page, 'package-00-bound');
});

const call = (toolName, params, extra = {}) => relay.call({ apiKey, toolName, params, ...extra });

test('useToolHandler: OpenPopover renders its message; the latest mounted handler answers', async () => {
  const fire = await call('OpenPopover', { message: 'Hello from the agent' });
  assert.equal(fire.status, 200, JSON.stringify(fire.body));
  await page.waitForSelector('#popover', { timeout: 5000 });
  assert.equal(await page.textContent('#popover'), 'Hello from the agent');
  assert.equal(await page.getAttribute('#popover', 'role'), 'status');
  const awaited = await call('OpenPopover', { message: 'Again' }, { awaitResult: true });
  assert.deepEqual(awaited.body.result, { shown: 'popover' });
  const bad = await call('OpenPopover', { message: 7 }, { awaitResult: true });
  assert.equal(bad.status, 502);
  assert.deepEqual(bad.body.error, { code: 'tool_failed', message: 'message must be a string' });

  await page.click('#toggle-banner', { timeout: 5000 });
  await page.waitForSelector('#banner', { timeout: 5000 });
  assert.deepEqual((await call('OpenPopover', { message: 'x' }, { awaitResult: true })).body.result, { shown: 'banner' });
  await page.click('#toggle-banner', { timeout: 5000 });
  await page.waitForSelector('#banner', { state: 'detached', timeout: 5000 });
  assert.deepEqual((await call('OpenPopover', { message: 'y' }, { awaitResult: true })).body.result, { shown: 'popover' });
  await shot(page, 'package-01-popover');
});

test('useToolHandler: draw_card answers the awaited call', async () => {
  const r = await call('draw_card', { positionLabel: 'Past', promptRole: 'What led here' }, { awaitResult: true, timeoutMs: 5000 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body.result, { cardId: 'the-sun', cardName: 'The Sun (Past)', reversed: false });
});

test('cancel: a call the handler never answers times out and the handler sees its signal aborted', async () => {
  const r = await call('draw_card', { positionLabel: 'Future', hang: true }, { awaitResult: true, timeoutMs: 500 });
  assert.equal(r.status, 504);
  assert.equal(r.body.error.code, 'timeout');
  await page.waitForFunction((id) => document.getElementById('aborted').textContent.startsWith(id), r.body.callId, { timeout: 5000 });
  assert.equal(await page.textContent('#aborted'), `${r.body.callId} aborted=true AbortError`);
});

test('unmounting the component removes its handler (no_handler); mounting it again restores it', async () => {
  await page.click('#toggle-picker', { timeout: 5000 });
  await page.waitForSelector('#picker', { state: 'detached', timeout: 5000 });
  const gone = await call('draw_card', { positionLabel: 'Present' }, { awaitResult: true, timeoutMs: 3000 });
  assert.equal(gone.status, 502);
  assert.equal(gone.body.error.code, 'no_handler');
  await page.click('#toggle-picker', { timeout: 5000 });
  await page.waitForSelector('#picker', { timeout: 5000 });
  const back = await call('draw_card', { positionLabel: 'Present' }, { awaitResult: true, timeoutMs: 3000 });
  assert.equal(back.status, 200, JSON.stringify(back.body));
  assert.equal(back.body.result.cardName, 'The Sun (Present)');
  await shot(page, 'package-02-handlers');
});

test('voice UI hooks: available before joining; text chat refuses without a room; Space held presses the talk button', async () => {
  assert.equal(await page.getAttribute('#availability', 'data-available'), 'true');
  assert.equal(await page.textContent('#availability'), 'voice available');
  assert.equal(await page.getAttribute('#transcript', 'role'), 'log');
  assert.equal(await page.getAttribute('#transcript', 'aria-live'), 'polite');
  assert.equal(await page.textContent('#segments'), '0');
  assert.equal(await page.getAttribute('#chat-input', 'maxlength'), '500');
  await page.fill('#chat-input', 'hello agent', { timeout: 5000 });
  await page.press('#chat-input', 'Enter');
  await page.waitForSelector('#chat-status[data-state="failed"]', { timeout: 5000 });
  assert.equal(await page.textContent('#chat-status'), 'voice is not connected, so there is no room to send the message to');
  assert.equal(await page.inputValue('#chat-input'), 'hello agent');
  // Space in the text field is text; on the page it talks.
  await page.press('#chat-input', 'Space');
  assert.equal(await page.getAttribute('#ptt', 'aria-pressed'), 'false');
  await page.evaluate(() => document.activeElement?.blur());
  await page.keyboard.down('Space');
  await page.waitForSelector('#ptt[aria-pressed="true"]', { timeout: 3000 });
  await page.keyboard.up('Space');
  await page.waitForSelector('#ptt[aria-pressed="false"]', { timeout: 3000 });
  // Enter on the focused button toggles.
  await page.focus('#ptt');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#ptt[aria-pressed="true"]', { timeout: 3000 });
  await page.keyboard.press('Enter');
  await page.waitForSelector('#ptt[aria-pressed="false"]', { timeout: 3000 });
  await shot(page, 'package-02a-voice-ui');
});

test('useConfirmLeave: an in-app back button asks in a modal dialog; Escape stays, Leave leaves', async () => {
  await page.click('#back', { timeout: 5000 });
  await page.waitForSelector('dialog.voice-relay-leave[open]', { timeout: 3000 });
  assert.equal(await page.getAttribute('dialog.voice-relay-leave', 'role'), 'alertdialog');
  assert.equal(await page.textContent('dialog.voice-relay-leave p'), 'Leave the voice session?');
  assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Stay', 'the focus starts on the safe answer');
  await shot(page, 'package-02b-confirm-leave');
  await page.keyboard.press('Escape');
  await page.waitForFunction(() => document.getElementById('left').textContent === 'stay', null, { timeout: 3000 });
  assert.equal(await page.$$eval('dialog.voice-relay-leave', (d) => d.length), 0, 'the dialog is removed');
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'back', 'the focus is back on the button');
  await page.click('#back', { timeout: 5000 });
  await page.click('dialog.voice-relay-leave button[data-answer="leave"]', { timeout: 3000 });
  await page.waitForFunction(() => document.getElementById('left').textContent === 'leave', null, { timeout: 3000 });
});

test('connectVoice() loads livekit-client on demand and reports why joining failed', async () => {
  await page.click('#join-voice', { timeout: 5000 });
  await page.waitForSelector('#voice[data-state="failed"]', { timeout: 10000 });
  assert.match(await page.textContent('#voice'), /^could not reach the LiveKit server at ws:\/\/127\.0\.0\.1:9$/);
  // Voice failing leaves the relay session as it was.
  assert.equal(await page.getAttribute('#state', 'data-state'), 'bound');
  // …and useVoiceAvailability() says voice is unavailable, and why.
  await page.waitForSelector('#availability[data-available="false"]', { timeout: 5000 });
  assert.match(await page.textContent('#availability'), /^Voice failed: Could not reach the LiveKit server at ws:\/\/127\.0\.0\.1:9\.$/);
  await shot(page, 'package-03-voice-failed');
});

test('unmounting the provider unbinds the tab; mounting it again binds a new key with one new token', async () => {
  await page.click('#toggle-session', { timeout: 5000 });
  await page.waitForSelector('#state', { state: 'detached', timeout: 5000 });
  await relay.waitState(apiKey, 'offline');
  await page.click('#toggle-session', { timeout: 5000 });
  await page.waitForSelector('#state[data-state="bound"]', { timeout: 10000 });
  const next = (await page.textContent('#key')).trim();
  relay.remember(next);
  assert.notEqual(next, apiKey);
  await relay.waitState(next, 'online');
  await sleep(300);
  assert.deepEqual(tokenRequests, ['POST', 'POST']);
  assert.match((await relay.fetch('/metrics')).body, /^relay_connected_tabs 1$/m);
  assert.deepEqual(pageErrors, []);
});
