// The benchmark's load generator, run briefly against the real relay: it binds its tabs, the
// tabs answer, and its own bookkeeping (misrouted, lost, duplicated, errors) comes out clean.
// No figure is asserted here: speed is measured by `scripts/manage.sh bench`, not in tests.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { startRelay, loadgenBin } from '../harness/index.mjs';

const run = promisify(execFile);

let relay;
before(async () => {
  relay = await startRelay({ RELAY_SESSION_RATE_PER_SEC: '1000000', RELAY_TOKEN_RATE_PER_MIN: '100000', RUST_LOG: 'info' }, { name: 'relay-loadgen' });
});
after(async () => { await relay?.stop(); });

for (const awaited of [true, false]) {
  test(`loadgen ${awaited ? 'awaited' : 'fire-and-forget'}: every call reaches its tab`, async () => {
    const args = ['--url', relay.url, '--tabs', '8', '--agents', '4', '--duration-secs', '1', '--settle-secs', '0.2', '--server-pid', String(relay.proc.pid)];
    if (awaited) args.push('--awaited');
    const { stdout } = await run(loadgenBin, args, { timeout: 60000 });
    const r = JSON.parse(stdout.trim());
    assert.equal(r.bind_failures, 0);
    assert.ok(r.calls > 0, JSON.stringify(r));
    assert.equal(r.misrouted, 0);
    assert.equal(r.lost, 0);
    assert.equal(r.duplicated, 0);
    assert.deepEqual(r.errors, {});
    assert.ok(r.latency_us.p50 > 0 && r.latency_us.p50 <= r.latency_us.p99);
    assert.ok(r.server_rss_kib_with_tabs > 0);
  });
}

test('loadgen binds the older way too (register with the bare key)', async () => {
  const { stdout } = await run(loadgenBin, ['--url', relay.url, '--tabs', '4', '--agents', '2', '--awaited', '--bind', 'register', '--duration-secs', '0.5', '--settle-secs', '0.1'], { timeout: 60000 });
  const r = JSON.parse(stdout.trim());
  assert.equal(r.bind_failures, 0);
  assert.equal(r.misrouted, 0);
  assert.deepEqual(r.errors, {});
});
