// Bind admission (relay/src/admission.rs): a node runs at most RELAY_BIND_CONCURRENCY binds at
// once; a handshake beyond them waits its turn up to RELAY_BIND_WAIT_MS and is then refused as
// `unavailable` (which the browser client retries), never bound half-way. Redis is made to hold
// the binds (CLIENT PAUSE WRITE holds the bind scripts, not the reads) so that the two places
// are taken while a third tab arrives.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { startNode, startRedis, sleep } from '../harness/index.mjs';

let redis;
const nodes = [];
let relay;
before(async () => {
  redis = await startRedis();
  relay = await startNode(nodes, { RELAY_REDIS_URL: redis.url, RELAY_BIND_CONCURRENCY: '2', RELAY_BIND_WAIT_MS: '300' }, { name: 'relay-admission' });
});
after(async () => {
  for (const n of nodes) await n.stop();
  await redis?.stop();
});

async function metric(name) {
  const text = await (await fetch(`${relay.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : null;
}

test('binds beyond the limit wait their turn, then are refused as unavailable; the tab binds when it tries again', async () => {
  const minted = [await relay.token(), await relay.token(), await relay.token()];
  assert.equal(await metric('relay_bind_limit'), 2);
  // Writes held for 800 ms (below the relay's 1 s bound on a Redis operation), on every server
  // of a Redis Cluster (E2E_REDIS=cluster), whichever serves the keys.
  for (const port of redis.ports ?? [redis.port]) {
    execFileSync('redis-cli', ['-p', String(port), 'CLIENT', 'PAUSE', '800', 'WRITE']);
  }
  const first = relay.tab({ token: minted[0].token });
  const second = relay.tab({ token: minted[1].token });
  // Their handshakes reach the relay and take both places (their bind scripts wait on Redis).
  await sleep(150);
  const third = relay.tab({ token: minted[2].token });
  const refused = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no refusal within 2 s')), 2000);
    third.socket.once('connect', () => { clearTimeout(timer); reject(new Error('the third tab bound while two binds held their places')); });
    third.socket.once('connect_error', (err) => { clearTimeout(timer); resolve(err); });
  });
  assert.equal(refused.data?.code, 'unavailable', JSON.stringify(refused.data));
  assert.match(refused.data.message, /busy binding other tabs/);
  assert.equal(await metric('relay_binds_refused_busy_total'), 1);
  // The held binds complete once Redis takes writes again.
  await first.connected(3000);
  await second.connected(3000);
  await relay.waitState(minted[0].apiKey, 'online');
  await relay.waitState(minted[1].apiKey, 'online');
  const refusedState = await relay.keyState(minted[2].apiKey);
  assert.equal(refusedState.body.state, 'issued', 'the refused tab was not bound half-way');
  // Tried again (the browser client does so after about a second), it binds.
  third.socket.connect();
  await third.connected(3000);
  await relay.waitState(minted[2].apiKey, 'online');
  assert.equal(await metric('relay_binds_waiting'), 0);
  for (const t of [first, second, third]) t.close();
});
