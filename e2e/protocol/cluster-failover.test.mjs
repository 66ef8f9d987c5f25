// On a Redis Cluster only (E2E_REDIS=cluster): the primary holding a bound key is killed with
// SIGKILL, its replica takes over, and calls reach the tab again from every node within a bound,
// through the Socket.IO adapter's sharded channels; a tab bound after the failover is reached too.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startNode, startRedis, sleep, onRedisCluster, nodeSecrets } from '../harness/index.mjs';

const skip = onRedisCluster ? false : 'needs a Redis Cluster (E2E_REDIS=cluster); one server has no replica to take over';
if (skip) console.log(`# cluster-failover.test.mjs skipped: ${skip}`);

let redis;
const nodes = [];
const shared = {
  ...nodeSecrets(),
  RELAY_RECONNECT_GRACE_MS: '20000',
};

before(async () => {
  if (skip) return;
  redis = await startRedis();
  for (const name of ['relay-a', 'relay-b', 'relay-c']) {
    await startNode(nodes, { ...shared, RELAY_REDIS_URL: redis.url }, { name });
  }
});
after(async () => {
  for (const n of nodes) await n.stop();
  await redis?.stop();
});

/** The Redis name of a key's state on a cluster (the digest as hash tag). */
const stateName = (apiKey) => `va:k:{${createHash('sha256').update(apiKey).digest().subarray(0, 16).toString('hex')}}`;

/** Calls until one succeeds (bounded), returning it. */
async function callUntilOk(via, apiKey, ms) {
  const until = Date.now() + ms;
  let r;
  while (Date.now() < until) {
    r = await via.call({ apiKey, toolName: 'ping', awaitResult: true, timeoutMs: 2000 });
    if (r.status === 200) return r;
    await sleep(250);
  }
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r;
}

test('the primary holding a bound key dies: its replica takes over and calls reach the tab from every node', { skip }, async () => {
  const [A, B, C] = nodes;
  const minted = await A.token();
  const tab = A.tab({ token: minted.token });
  tab.socket.on('voice-agent:ping', (p, m, ack) => ack('pong'));
  await tab.connected();
  await B.waitState(minted.apiKey, 'online');

  const killed = await redis.killPrimaryOf(stateName(minted.apiKey));
  assert.ok(redis.ports.includes(killed));
  const r = await callUntilOk(B, minted.apiKey, 20000);
  assert.equal(r.body.result, 'pong');
  for (const via of [C, A]) {
    const again = await callUntilOk(via, minted.apiKey, 5000);
    assert.equal(again.body.result, 'pong');
  }
  const fresh = await C.token();
  const other = C.tab({ token: fresh.token });
  other.socket.on('voice-agent:ping', (p, m, ack) => ack('new'));
  await other.connected();
  await A.waitState(fresh.apiKey, 'online', 8000);
  const n = await callUntilOk(B, fresh.apiKey, 5000);
  assert.equal(n.body.result, 'new');
  for (const x of nodes) assert.equal(x.proc.exitCode, null, 'the node is still running');
  other.close();
  tab.close();
});
