// The benchmark's several-node mode (`loadgen --control`, driven by scripts/bench/scale.mjs), run
// briefly against two real relays on one real redis-server: tabs bind on both nodes, calls reach
// the tab they were meant for, and when a node is killed its tabs come back on the other one (the
// browser client's backoff) and are called there. No figure is asserted: speed is measured by
// `scripts/manage.sh bench --scale`, not in tests.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { startRelay, startRedis, within, sleep, loadgenBin, nodeSecrets } from '../harness/index.mjs';

const shared = {
  ...nodeSecrets(),
  RELAY_SESSION_RATE_PER_SEC: '1000000',
  RELAY_TOKEN_RATE_PER_MIN: '100000',
  RUST_LOG: 'info',
};

let redis;
let A;
let B;
let gen;
before(async () => {
  redis = await startRedis();
  A = await startRelay({ ...shared, RELAY_REDIS_URL: redis.url }, { name: 'relay-control-a' });
  B = await startRelay({ ...shared, RELAY_REDIS_URL: redis.url }, { name: 'relay-control-b' });
});
after(async () => {
  gen?.kill('SIGKILL');
  await A?.stop();
  await B?.stop();
  await redis?.stop();
});

test('loadgen --control: binds on two nodes, calls each tab, brings a lost node\'s tabs back', async () => {
  gen = spawn(loadgenBin, ['--control', '--nodes', `${A.url}=6,${B.url}=6`, '--call-nodes', B.url, '--reconnect-nodes', B.url, '--source-ip', '127.0.0.2'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = [];
  const waiting = [];
  createInterface({ input: gen.stdout }).on('line', (l) => { const m = JSON.parse(l); const w = waiting.shift(); if (w) w(m); else lines.push(m); });
  const next = (what) => within(30000, lines.length ? Promise.resolve(lines.shift()) : new Promise((r) => waiting.push(r)), what);

  assert.equal((await next('minted')).tabs, 12);
  gen.stdin.write('bind\n');
  const bound = await next('bound');
  assert.equal(bound.event, 'bound');
  assert.equal(bound.bound, 12, JSON.stringify(bound));
  assert.equal(bound.failures, 0);

  gen.stdin.write('calls 1 40\n');
  const quiet = await next('calls');
  assert.ok(quiet.calls.quiet.ok > 0, JSON.stringify(quiet));
  assert.deepEqual(quiet.calls.quiet.errors, {});
  assert.equal(quiet.calls.quiet.wrong_answer, 0);
  assert.equal(quiet.misrouted, 0);
  assert.equal(quiet.roam.drops, 0);

  A.proc.kill('SIGKILL');
  // `roam` waits while tabs are away: give the tabs of A the moment they need to see it gone.
  await within(5000, A.exited, 'node A to exit');
  await sleep(1000);
  gen.stdin.write('roam 20\n');
  const roam = (await next('roam')).roam;
  assert.equal(roam.drops, 6, JSON.stringify(roam));
  assert.equal(roam.rebinds, 6);
  assert.equal(roam.away, 0);
  assert.ok(roam.first_drop_unix_ms <= roam.last_rebind_unix_ms);

  gen.stdin.write('calls 1 40\n');
  const after = await next('calls');
  const back = after.calls.back;
  assert.ok(back.ok + after.calls.others.ok > 0, JSON.stringify(after));
  assert.deepEqual({ ...back.errors, ...after.calls.others.errors }, {});
  assert.equal(after.misrouted, 0);
  gen.stdin.write('exit\n');
  await within(10000, new Promise((r) => (gen.exitCode !== null ? r() : gen.once('exit', r))), 'loadgen to exit');
  assert.equal(gen.exitCode, 0);
});
