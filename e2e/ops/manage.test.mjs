// scripts/manage.sh as an operator uses it, on a fresh copy of the working tree in a temporary
// directory: start builds and starts everything, a second start starts no twins, status tells,
// the call and demo lines start prints run as printed, restart checks first (a bad catalog stops
// nothing), restart worker and reload change the catalog alone, restart keeps LiveKit's rooms,
// the log files are plain text, stop leaves no process and no port held (a participant in a room
// does not hold it up); check refuses a broken .env with exit 64. The build cache
// (CARGO_TARGET_DIR) is shared with the repository.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, statSync, writeFileSync, existsSync, rmSync, symlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { io } from 'socket.io-client';
import WebSocket from 'ws';
import { repoRoot, webNodeModules, freePort, within, sleep, eventually } from '../harness/index.mjs';

let dir;
let ports;

function manage(args, env = {}, ms = 600000) {
  return within(ms, new Promise((resolveM) => {
    const p = spawn(join(dir, 'scripts/manage.sh'), args, {
      cwd: dir,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        CARGO_HOME: process.env.CARGO_HOME ?? join(process.env.HOME, '.cargo'),
        RUSTUP_HOME: process.env.RUSTUP_HOME ?? join(process.env.HOME, '.rustup'),
        CARGO_TARGET_DIR: process.env.CARGO_TARGET_DIR ?? join(repoRoot, 'target'),
        RELAY_ADDR: `127.0.0.1:${ports.relay}`,
        WORKER_ADDR: `127.0.0.1:${ports.worker}`,
        LIVEKIT_URL: `ws://127.0.0.1:${ports.livekit}`,
        LIVEKIT_UDP_PORT: String(ports.livekitUdp),
        // The LiveKit server the repository's own run installed (or installs once, there).
        VA_TOOLS_DIR: process.env.VA_TOOLS_DIR ?? join(repoRoot, '.tools'),
        ...env,
      },
    });
    let out = '';
    let stdout = '';
    p.stdout.on('data', (d) => { out += d; stdout += d; });
    p.stderr.on('data', (d) => { out += d; });
    p.on('exit', (code) => resolveM({ code, out, stdout }));
  }), `manage.sh ${args.join(' ')}`);
}

const alive = (pid) => { try { process.kill(pid, 0); return true; } catch { return false; } };
const pidOf = (name) => Number(readFileSync(join(dir, '.run', `${name}.pid`), 'utf8'));
const portOpen = (port) => new Promise((resolveP) => {
  const s = createServer();
  s.once('error', () => resolveP(true));
  s.listen(port, '127.0.0.1', () => s.close(() => resolveP(false)));
});

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'relay-manage-'));
  // The working tree as it is (tracked and new files), without build output or dependencies.
  const files = execFileSync('git', ['ls-files', '-co', '--exclude-standard', '-z'], { cwd: repoRoot }).toString().split('\0').filter(Boolean);
  execFileSync('tar', ['-cf', join(dir, 'src.tar'), '--null', '-T', '-'], { cwd: repoRoot, input: files.join('\0') });
  execFileSync('tar', ['-xf', 'src.tar'], { cwd: dir });
  rmSync(join(dir, 'src.tar'));
  // npm's packages come from the repository's own install (same lockfile) to keep this test fast.
  symlinkSync(webNodeModules, join(dir, relative(repoRoot, webNodeModules)));
  ports = { relay: await freePort(), worker: await freePort(), livekit: await freePort(), livekitUdp: await freePort() };
});

after(async () => {
  if (dir && existsSync(join(dir, 'scripts/manage.sh'))) await manage(['stop'], {}, 60000);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('start on a fresh copy: builds, creates .env (600), starts LiveKit, relay and worker, prints the demo URL', async () => {
  const r = await manage(['start']);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, new RegExp(`livekit running \\(pid \\d+\\) on http://127\\.0\\.0\\.1:${ports.livekit}`));
  assert.equal((await fetch(`http://127.0.0.1:${ports.livekit}/`)).status, 200, 'LiveKit answers');
  assert.equal(statSync(join(dir, '.run/livekit.yaml')).mode & 0o777, 0o600, 'its config holds the secret');
  assert.match(readFileSync(join(dir, '.run/livekit.yaml'), 'utf8'), new RegExp(`urls: \\['http://127\\.0\\.0\\.1:${ports.worker}/livekit/webhook'\\]`));
  assert.match(r.out, /created .*\.env with fresh secrets/);
  assert.match(r.out, new RegExp(`demo page: +http://127\\.0\\.0\\.1:${ports.relay}/`));
  assert.match(r.out, /^ {2}scripts\/manage\.sh call <va_key> OpenPopover '\{"message":"Hello"\}'$/m);
  assert.match(r.out, /walk it through every tool: scripts\/manage\.sh demo <va_key>$/m);
  assert.equal(statSync(join(dir, '.env')).mode & 0o777, 0o600);
  const ready = await fetch(`http://127.0.0.1:${ports.relay}/readyz`);
  assert.equal(ready.status, 200);
  const page = await (await fetch(`http://127.0.0.1:${ports.relay}/`)).text();
  assert.match(page, /<title>Voice agent/);
  assert.equal((await fetch(`http://127.0.0.1:${ports.worker}/healthz`)).status, 200);
  const status = await manage(['status']);
  assert.equal(status.code, 0, status.out);
  assert.match(status.out, /livekit: running, pid \d+, .*ready/);
  assert.match(status.out, /relay: running, pid \d+, .*ready/);
  assert.match(status.out, /worker: running, pid \d+, .*ready/);
});

test('a second start reports what runs and starts no twins', async () => {
  const before = [pidOf('livekit'), pidOf('relay'), pidOf('worker')];
  const env = readFileSync(join(dir, '.env'), 'utf8');
  const r = await manage(['start']);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /relay already running/);
  assert.match(r.out, /worker already running/);
  assert.match(r.out, /livekit already running/);
  assert.deepEqual([pidOf('livekit'), pidOf('relay'), pidOf('worker')], before);
  assert.equal(readFileSync(join(dir, '.env'), 'utf8'), env, '.env is never overwritten');
});

/** A bound tab of the running relay, answering draw_card. */
async function tab() {
  const url = `http://127.0.0.1:${ports.relay}`;
  const t = await (await fetch(`${url}/token`, { method: 'POST' })).json();
  const socket = io(url, { transports: ['websocket'], auth: { token: t.token }, forceNew: true, reconnection: false });
  await within(5000, new Promise((r) => socket.once('connect', r)), 'the tab to connect');
  return { socket, apiKey: t.apiKey };
}

const envOf = () => Object.fromEntries(readFileSync(join(dir, '.env'), 'utf8').split('\n')
  .filter((l) => /^[A-Z_]+=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
const log = (name) => readFileSync(join(dir, '.run', `${name}.log`), 'utf8');
const answers = async (port, path) => (await fetch(`http://127.0.0.1:${port}${path}`)).status === 200;

test('the lines start prints run as printed: scripts/manage.sh call reaches a tab with the settings of .env', async () => {
  const { socket, apiKey } = await tab();
  try {
    const got = within(5000, new Promise((r) => socket.once('voice-agent:OpenPopover', (p) => r(p))), 'the popover event');
    // No secret in this environment: manage.sh reads them from .env.
    const r = await manage(['call', apiKey, 'OpenPopover', '{"message":"from manage"}']);
    assert.equal(r.code, 0, r.out);
    assert.equal(JSON.parse(r.stdout).ok, true, r.stdout);
    assert.deepEqual(await got, { message: 'from manage' });
    const unknown = await manage(['call', `va_${'0'.repeat(64)}`, 'OpenPopover', '{}']);
    assert.equal(unknown.code, 1, unknown.out);
    assert.equal(JSON.parse(unknown.stdout).error.code, 'unknown_key');
  } finally {
    socket.close();
  }
});

test('log files are plain text: no terminal colour codes, fields grep finds', async () => {
  for (const name of ['relay', 'worker']) {
    const text = log(name);
    assert.ok(text.length > 0, `${name}.log is empty`);
    assert.doesNotMatch(text, /\x1b\[/, `${name}.log holds ANSI escape codes`);
  }
  assert.match(log('worker'), /catalog=the default catalog: 6 tools/);
  assert.match(log('relay'), /tool=OpenPopover/);
});

const badCatalog = () => {
  const path = join(dir, 'bad-catalog.json');
  writeFileSync(path, '{\n  "tools": [\n    {"name": "CreateDiagram", "description": "Create a diagram.",\n     "parameters": {"type": "object"}, "awaitResults": true}\n  ]\n}\n');
  return path;
};
const goodCatalog = (tools = ['CreateDiagram']) => {
  const path = join(dir, 'my-catalog.json');
  writeFileSync(path, JSON.stringify({
    tools: tools.map((name) => ({ name, description: `${name}.`, parameters: { type: 'object', additionalProperties: false }, awaitResult: true })),
  }, null, 2));
  return path;
};

test('restart with a catalog that has problems stops nothing: it says what is wrong, and the running stack stays up', async () => {
  const pids = [pidOf('livekit'), pidOf('relay'), pidOf('worker')];
  const bad = badCatalog();
  const r = await manage(['restart'], { WORKER_CATALOG: bad });
  assert.equal(r.code, 64, r.out);
  assert.match(r.out, /bad-catalog\.json:4:\d+: tools\[0\]\.awaitResults: is not a tool field/);
  assert.match(r.out, /the worker's configuration is not valid .*bad-catalog\.json/);
  assert.match(r.out, /restart stopped nothing/);
  assert.doesNotMatch(r.out, /stopped$/m, 'no process was stopped');
  assert.deepEqual([pidOf('livekit'), pidOf('relay'), pidOf('worker')], pids);
  for (const pid of pids) assert.ok(alive(pid));
  assert.ok(await answers(ports.relay, '/readyz'));
  assert.ok(await answers(ports.worker, '/healthz'));
  assert.ok(await answers(ports.livekit, '/'));
});

test('restart worker restarts the worker alone with the catalog given; reload reads it again, and refuses a broken one', async () => {
  const [livekit, relay, worker] = [pidOf('livekit'), pidOf('relay'), pidOf('worker')];
  const catalog = goodCatalog();
  const r = await manage(['restart', 'worker'], { WORKER_CATALOG: catalog });
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /worker stopped/);
  assert.doesNotMatch(r.out, /relay stopped|livekit stopped/);
  assert.notEqual(pidOf('worker'), worker);
  assert.deepEqual([pidOf('livekit'), pidOf('relay')], [livekit, relay]);
  assert.match(log('worker'), /catalog=\S*my-catalog\.json: 1 tools/);

  goodCatalog(['CreateDiagram', 'SaveDiagram']);
  const reloaded = await manage(['reload']);
  assert.equal(reloaded.code, 0, reloaded.out);
  assert.match(reloaded.out, /worker: catalog reloaded \(\S*my-catalog\.json: 2 tools/);
  writeFileSync(catalog, '{"tools": [{"name": "x y"}]}');
  const refused = await manage(['reload']);
  assert.equal(refused.code, 64, refused.out);
  assert.match(refused.out, /my-catalog\.json:1:\d+: tools\[0\]\.name/);
  assert.match(refused.out, /keeps the one it runs/);
  assert.ok(await answers(ports.worker, '/healthz'));
  // Back to the default catalog for the rest.
  assert.equal((await manage(['restart', 'worker'])).code, 0);
});

test('restart keeps the LiveKit server (and its rooms) when its configuration did not change', async () => {
  const [livekit, relay, worker] = [pidOf('livekit'), pidOf('relay'), pidOf('worker')];
  const r = await manage(['restart']);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /livekit: kept running/);
  assert.equal(pidOf('livekit'), livekit);
  assert.notEqual(pidOf('relay'), relay);
  assert.notEqual(pidOf('worker'), worker);
  assert.ok(await answers(ports.relay, '/readyz'));
});

/**
 * A participant in a LiveKit room, on the signalling connection alone (no media): LiveKit's
 * server waits for such participants to leave when asked to stop.
 */
async function participant() {
  const { AccessToken, RoomServiceClient } = await import('livekit-server-sdk');
  const env = envOf();
  const at = new AccessToken(env.LIVEKIT_API_KEY, env.LIVEKIT_API_SECRET, { identity: 'ops-participant' });
  at.addGrant({ roomJoin: true, room: 'ops-room' });
  const ws = new WebSocket(`ws://127.0.0.1:${ports.livekit}/rtc?access_token=${await at.toJwt()}&protocol=15&sdk=js&version=2.15.0&auto_subscribe=1`);
  ws.on('error', () => {});
  const rooms = new RoomServiceClient(`http://127.0.0.1:${ports.livekit}`, env.LIVEKIT_API_KEY, env.LIVEKIT_API_SECRET);
  await eventually(async () => (await rooms.listParticipants('ops-room')).length === 1, 'the participant in its room', 10000);
  return ws;
}

test('stop leaves no process and no port held, a participant in a room holding nothing up; status says stopped', async () => {
  const pids = [pidOf('livekit'), pidOf('relay'), pidOf('worker')];
  const ws = await participant();
  const r = await manage(['stop']);
  ws.terminate();
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /livekit stopped/);
  assert.doesNotMatch(r.out, /did not stop in 15 s/, 'LiveKit was told to stop at once, not waited for and killed');
  await sleep(200);
  for (const pid of pids) assert.equal(alive(pid), false, `pid ${pid} is gone`);
  assert.equal(existsSync(join(dir, '.run/relay.pid')), false);
  assert.equal(await portOpen(ports.relay), false);
  assert.equal(await portOpen(ports.worker), false);
  assert.equal(await portOpen(ports.livekit), false);
  const status = await manage(['status']);
  assert.equal(status.code, 3);
  assert.match(status.out, /relay: stopped/);
  // A stale pid file (a process that died) is cleaned up by stop.
  writeFileSync(join(dir, '.run/relay.pid'), '999999');
  assert.equal((await manage(['stop'])).code, 0);
  assert.equal(existsSync(join(dir, '.run/relay.pid')), false);
});

test('check refuses a broken .env with the reason and exit 64', async () => {
  const good = readFileSync(join(dir, '.env'), 'utf8');
  assert.equal((await manage(['check'])).code, 0);
  writeFileSync(join(dir, '.env'), good.replace(/^RELAY_WORKER_SECRET=.*$/m, 'RELAY_WORKER_SECRET=short'));
  const weak = await manage(['check']);
  assert.equal(weak.code, 64, weak.out);
  assert.match(weak.out, /RELAY_WORKER_SECRET .*shorter than 16/);
  writeFileSync(join(dir, '.env'), good.replace(/^LIVEKIT_API_SECRET=.*$/m, ''));
  const missing = await manage(['check']);
  assert.equal(missing.code, 64);
  assert.match(missing.out, /LIVEKIT_API_SECRET is required/);
  writeFileSync(join(dir, '.env'), `${good}\nthis line is not an assignment\n`);
  const syntax = await manage(['check']);
  assert.equal(syntax.code, 64);
  assert.match(syntax.out, /line \d+ is not KEY=VALUE/);
  writeFileSync(join(dir, '.env'), good);
});

test('check refuses a LiveKit secret the server would not trust, and start then runs the rest without voice', async () => {
  const good = readFileSync(join(dir, '.env'), 'utf8');
  writeFileSync(join(dir, '.env'), good.replace(/^LIVEKIT_API_SECRET=.*$/m, 'LIVEKIT_API_SECRET=only-twenty-chars-xx'));
  const check = await manage(['check']);
  assert.equal(check.code, 64, check.out);
  assert.match(check.out, /LIVEKIT_API_SECRET is shorter than 32 characters/);
  const r = await manage(['start']);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /livekit: NOT STARTED: LIVEKIT_API_SECRET is shorter than 32 characters.*without voice/);
  assert.match(r.out, /relay running/);
  assert.match(r.out, /worker running/);
  assert.equal(existsSync(join(dir, '.run/livekit.pid')), false);
  assert.equal((await manage(['stop'])).code, 0);
  writeFileSync(join(dir, '.env'), good);
});

test('start with no LiveKit server and no Go says how to get one and starts the rest', async () => {
  const noGo = process.env.PATH.split(':').filter((d) => !existsSync(join(d, 'go')) && !existsSync(join(d, 'livekit-server'))).join(':');
  const r = await manage(['start'], { PATH: noGo, VA_TOOLS_DIR: join(dir, 'no-tools') });
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /livekit: NOT STARTED: no livekit-server on the PATH and no Go/);
  assert.match(r.out, /Install Go/);
  assert.match(r.out, /relay running/);
  assert.equal((await manage(['stop'], { PATH: noGo })).code, 0);
});

test('LIVEKIT_URL pointing to another server (LiveKit Cloud, a cluster) starts nothing local', async () => {
  const good = readFileSync(join(dir, '.env'), 'utf8');
  writeFileSync(join(dir, '.env'), good.replace(/^LIVEKIT_URL=.*$/m, 'LIVEKIT_URL=wss://voice.example.com'));
  try {
    const r = await manage(['start']);
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /livekit: LIVEKIT_URL is wss:\/\/voice\.example\.com; using that server, none started here/);
    assert.equal(existsSync(join(dir, '.run/livekit.pid')), false);
    const status = await manage(['status']);
    assert.match(status.out, /livekit: not run here/);
    assert.equal((await manage(['stop'])).code, 0);
  } finally {
    writeFileSync(join(dir, '.env'), good);
  }
});
