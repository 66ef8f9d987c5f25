// scripts/manage.sh as an operator uses it, on a fresh copy of the working tree in a temporary
// directory: start builds and starts everything, a second start starts no twins, status tells,
// agent-worker call reaches a tab, stop leaves no process and no port held; check refuses a
// broken .env with exit 64. The build cache (CARGO_TARGET_DIR) is shared with the repository.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, statSync, writeFileSync, existsSync, rmSync, symlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { io } from 'socket.io-client';
import { repoRoot, webNodeModules, freePort, within, sleep } from '../harness/index.mjs';

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
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { out += d; });
    p.on('exit', (code) => resolveM({ code, out }));
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
  assert.match(r.out, /agent-worker call <va_key> OpenPopover/);
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

test('agent-worker call, with the secrets from .env, reaches a tab', async () => {
  const url = `http://127.0.0.1:${ports.relay}`;
  const t = await (await fetch(`${url}/token`, { method: 'POST' })).json();
  const socket = io(url, { transports: ['websocket'], auth: { token: t.token }, forceNew: true, reconnection: false });
  try {
    await within(5000, new Promise((r) => socket.once('connect', r)), 'the tab to connect');
    const got = within(5000, new Promise((r) => socket.once('voice-agent:OpenPopover', (p) => r(p))), 'the popover event');
    const envVars = Object.fromEntries(readFileSync(join(dir, '.env'), 'utf8').split('\n').filter((l) => /^[A-Z_]+=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
    const bin = join(process.env.CARGO_TARGET_DIR ?? join(repoRoot, 'target'), 'release/agent-worker');
    const out = execFileSync(bin, ['call', t.apiKey, 'OpenPopover', '{"message":"from manage"}'], { env: { PATH: process.env.PATH, ...envVars } }).toString();
    assert.equal(JSON.parse(out).ok, true);
    assert.deepEqual(await got, { message: 'from manage' });
  } finally {
    socket.close();
  }
});

test('stop leaves no process and no port held; status says stopped', async () => {
  const pids = [pidOf('livekit'), pidOf('relay'), pidOf('worker')];
  const r = await manage(['stop']);
  assert.equal(r.code, 0, r.out);
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
