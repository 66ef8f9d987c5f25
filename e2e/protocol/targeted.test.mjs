// A call for a tab on another node goes to that node alone, and its answer comes straight back:
// three relay nodes on a real Redis (one server, or a Redis Cluster with E2E_REDIS=cluster), a
// tab on B, calls posted to A. What the nodes publish is read with `redis-cli MONITOR` on every
// Redis server: each call is one message on B's own channel (`va:n:<node>`, which C never gets;
// on a Cluster B's sharded channel on one server, `va:s:{<tag>}:<node>`; published by A, or by the
// script admitting the call once A knows where the tab is) and one back on A's, nothing on the Socket.IO adapter's channels and no `PUBSUB NUMSUB`, from the first
// call on (no Socket.IO server id is needed for it). A call sent to a node that
// dies is delivered again as soon as its tab re-binds elsewhere. A tab replaced from another
// node, or revoked there, is told through the Socket.IO adapter on its own node's channel alone
// once that node's Socket.IO server is known (each node writes it to Redis, `va:sio:<node>`).
// A call that reaches the holding node while its tab's bind is still being recorded there waits
// for the bind rather than being sent back to look for the tab again.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { execFile, spawn } from 'node:child_process';
import { io } from 'socket.io-client';
import { startNode, startRedis, startBalancer, onRedisCluster, eventually, sleep, within, Tab, nodeSecrets } from '../harness/index.mjs';

const GLOBAL = 'va-relay-request#/#';
const CALLS = 'va:n:';

let redis;
const nodes = [];
const monitors = [];
const shared = {
  ...nodeSecrets(),
};
let A;
let B;
let C;

const ports = () => (redis.cluster ? redis.ports : [redis.port]);

/** `redis-cli` against one server, `port`, without following a cluster's redirections. */
function redisAt(port, ...args) {
  return within(5000, new Promise((resolve, reject) => {
    execFile('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], (err, out) => {
      if (err) reject(err); else resolve(out.trim());
    });
  }), `redis-cli -p ${port} ${args.join(' ')}`);
}

/** `redis-cli` against the Redis under test (following a cluster's redirections). */
const cli = (...args) => redisAt(redis.port, '-c', ...args);

/** `MONITOR` on every Redis server; `lines` holds what each printed since. */
async function monitor() {
  const lines = [];
  for (const port of ports()) {
    const proc = spawn('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'MONITOR'], { stdio: ['ignore', 'pipe', 'ignore'] });
    let ready;
    const started = new Promise((r) => { ready = r; });
    let rest = '';
    proc.stdout.on('data', (chunk) => {
      const text = rest + chunk.toString('latin1');
      const all = text.split('\n');
      rest = all.pop();
      for (const l of all) if (l.trim() === 'OK') ready(); else lines.push(l);
    });
    monitors.push(proc);
    await within(5000, started, 'redis-cli MONITOR to start');
  }
  return lines;
}

/** The PUBLISH (SPUBLISH on a cluster) commands among monitored lines, by channel. */
function published(lines) {
  return lines
    .map((l) => l.match(/"S?PUBLISH" "([^"]+)"/i))
    .filter(Boolean)
    .map((m) => m[1]);
}

const counted = (lines) => lines.filter((l) => /"PUBSUB" "(SHARD)?NUMSUB"/i.test(l)).length;

/** The node name Redis holds a key's tab on, and that node's Socket.IO server id. */
async function serverOf(apiKey) {
  const rid = createHash('sha256').update(apiKey).digest('hex').slice(0, 32);
  const record = onRedisCluster ? `va:k:{${rid}}` : `va:k:${rid}`;
  const node = await cli('HGET', record, 'node');
  assert.match(node, /^[0-9a-f]{16}$/, `the key's node in Redis: ${node}`);
  const server = await cli('GET', `va:sio:${node}`);
  assert.ok(server.length > 0, `node ${node} wrote its Socket.IO server id`);
  return { node, server };
}

before(async () => {
  redis = await startRedis();
  const env = { ...shared, RELAY_REDIS_URL: redis.url };
  A = await startNode(nodes, env, { name: 'relay-a' });
  B = await startNode(nodes, env, { name: 'relay-b' });
  C = await startNode(nodes, env, { name: 'relay-c' });
});
after(async () => {
  for (const m of monitors) m.kill('SIGKILL');
  for (const n of nodes) await n.stop();
  await redis?.stop();
});

async function tabOn(host) {
  const minted = await host.token();
  const tab = host.tab({ token: minted.token });
  await tab.connected();
  await A.waitState(minted.apiKey, 'online');
  tab.socket.on('voice-agent:whoami', (p, meta, ack) => ack({ callId: meta.callId }));
  return { tab, apiKey: minted.apiKey, token: minted.token };
}

const whoami = (via, apiKey) => via.call({ apiKey, toolName: 'whoami', awaitResult: true, timeoutMs: 3000 });

/** A node's sharded channel on one server of a Redis Cluster: `va:s:{<tag>}:<node>`. */
const SHARDED = /^va:s:\{[^}]*\}:/;

/** The node whose channel `c` is (its classic channel, or one of its sharded ones). */
const nodeOf = (c) => (c.startsWith(CALLS) ? c.slice(CALLS.length) : c.replace(SHARDED, ''));

/** The messages on the nodes' own channels among monitored lines (no key changes meanwhile: all
 * calls and outcomes), by channel. */
const hops = (lines) => published(lines).filter((c) => c.startsWith(CALLS) || SHARDED.test(c));

test('a call goes to the holding node alone and its answer comes straight back, from the first call on', async () => {
  const { tab, apiKey } = await tabOn(B);
  const b = await serverOf(apiKey);
  const lines = await monitor();
  for (let i = 0; i < 5; i += 1) {
    const r = await whoami(A, apiKey);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.result.callId, r.body.callId);
  }
  const fire = await A.call({ apiKey, toolName: 'note', params: { text: 'aimed' } });
  assert.equal(fire.status, 200, JSON.stringify(fire.body));
  await tab.next('voice-agent:note', (_, meta) => meta.callId === fire.body.callId);
  await sleep(200);
  // Six calls on B's channel, six outcomes on one other channel (A's; C's is never used), and
  // nothing through the adapter: no request on any node's channel, no node count asked.
  // On a Redis Cluster each goes on the receiving node's sharded channel on one server, never
  // as a classic message the cluster forwards to every server.
  const sent = hops(lines);
  const toB = sent.filter((c) => nodeOf(c) === b.node);
  const back = sent.filter((c) => nodeOf(c) !== b.node);
  assert.equal(toB.length, 6, JSON.stringify(sent));
  assert.equal(back.length, 6, JSON.stringify(sent));
  assert.equal(new Set(back.map(nodeOf)).size, 1, `every outcome goes to the calling node: ${JSON.stringify(sent)}`);
  if (redis.cluster) assert.ok(sent.every((c) => SHARDED.test(c)), `on sharded channels: ${JSON.stringify(sent)}`);
  else assert.ok(sent.every((c) => c.startsWith(CALLS)), JSON.stringify(sent));
  assert.deepEqual(published(lines).filter((c) => c.startsWith(GLOBAL)), [], 'no call went through the adapter');
  assert.equal(counted(lines), 0, 'no node count asked for a call');
  tab.close();
});

test('a call needs no Socket.IO server id of the holding node', async () => {
  const { tab, apiKey } = await tabOn(C);
  const c = await serverOf(apiKey);
  const lines = await monitor();
  // The record is gone (C writes it again at its next heartbeat): the call goes to C anyway.
  await cli('DEL', `va:sio:${c.node}`);
  lines.length = 0;
  const r = await whoami(A, apiKey);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.result.callId, r.body.callId);
  await sleep(200);
  assert.ok(hops(lines).some((ch) => nodeOf(ch) === c.node), `sent on C's call channel: ${hops(lines)}`);
  assert.deepEqual(published(lines).filter((ch) => ch.startsWith(GLOBAL)), [], 'nothing through the adapter');
  // And the record comes back with C's heartbeat, for dismissals.
  await eventually(async () => (await cli('GET', `va:sio:${c.node}`)) === c.server, 'C to write its server id again', 5000, 100);
  tab.close();
});

test('a call sent to a node that is killed is delivered again once its tab re-binds on another node', async (t) => {
  const doomed = await startNode(nodes, { ...shared, RELAY_REDIS_URL: redis.url }, { name: 'relay-doomed' });
  const lb = await startBalancer(doomed.url);
  try {
    const minted = await doomed.token();
    const socket = io(lb.url, {
      transports: ['websocket'], auth: { token: minted.token }, forceNew: true,
      reconnection: true, reconnectionDelay: 100, reconnectionDelayMax: 300, timeout: 3000,
    });
    const tab = new Tab(socket);
    let deliveries = 0;
    socket.on('voice-agent:whoami', (p, meta, ack) => ack({ callId: meta.callId }));
    socket.on('voice-agent:draw_card', (params, meta, ack) => {
      deliveries += 1;
      // The first delivery reaches the node that dies; the second one (after the re-bind) is
      // answered.
      if (deliveries >= 2) ack({ ok: true, result: { callId: meta.callId } });
    });
    await tab.connected();
    await A.waitState(minted.apiKey, 'online');
    const warm = await whoami(A, minted.apiKey);
    assert.equal(warm.status, 200, JSON.stringify(warm.body));

    const pending = A.call({ apiKey: minted.apiKey, toolName: 'draw_card', awaitResult: true, timeoutMs: 20000 });
    await tab.next('voice-agent:draw_card');
    lb.target = null;
    doomed.proc.kill('SIGKILL');
    await tab.next('disconnect');
    await A.waitState(minted.apiKey, 'offline', 8000);
    lb.target = C.url;
    await tab.connected(10000);
    await A.waitState(minted.apiKey, 'online');
    // The key watch sees the move: the call goes to C at once, not after a timeout for the dead
    // node's answer.
    const rebound = Date.now();
    const done = await within(15000, pending, 'the waiting call');
    assert.equal(done.status, 200, JSON.stringify(done.body));
    assert.equal(done.body.result.callId, done.body.callId);
    assert.equal(deliveries, 2);
    const after = Date.now() - rebound;
    t.diagnostic(`answered ${after} ms after the re-bind`);
    assert.ok(after < 2500, `delivered again ${after} ms after the re-bind`);
    socket.close();
  } finally {
    await lb.close();
  }
});

/**
 * Runs `round` (which returns the monitored lines of one dismissal) with fresh keys until the
 * dismissal is aimed at `channel` alone: the first one from a node that does not know the holding
 * node's Socket.IO server yet goes to every node (and starts the lookup).
 */
async function untilAimed(round, what) {
  let requests = [];
  await eventually(async () => {
    const { lines, channel } = await round();
    requests = published(lines).filter((c) => c.startsWith(GLOBAL));
    return requests.length >= 2 && requests.every((c) => c === channel);
  }, what, 8000, 100);
  return requests;
}

test('a tab replaced from another node, and a key revoked there, are told on their node alone', async () => {
  // Replaced: the same key's token binds a second tab on A, which dismisses B's tab through B's
  // channel only (once A knows B's server).
  await untilAimed(async () => {
    const { tab, apiKey, token } = await tabOn(B);
    const b = await serverOf(apiKey);
    const lines = await monitor();
    const revoked = tab.next('voice-agent:revoked');
    const replacement = A.tab({ token });
    await replacement.connected();
    const told = await within(5000, revoked, 'the replaced tab to be told');
    assert.equal(told[0].reason, 'replaced');
    await tab.next('disconnect');
    await sleep(200);
    replacement.close();
    return { lines, channel: `${GLOBAL}${b.server}#` };
  }, 'a replaced tab told through its own node alone');
  // Revoked on B while its tab is on A: B tells A alone (once B knows A's server).
  await untilAimed(async () => {
    const { tab, apiKey } = await tabOn(A);
    const a = await serverOf(apiKey);
    const lines = await monitor();
    const gone = tab.next('voice-agent:revoked');
    assert.equal((await B.revoke(apiKey)).status, 200);
    assert.equal((await within(5000, gone, 'the revoked tab to be told'))[0].reason, 'revoked');
    await sleep(200);
    tab.close();
    return { lines, channel: `${GLOBAL}${a.server}#` };
  }, 'a revoked tab told through its own node alone');
});

/** The port of the primary that serves the Redis name `name` (a Redis Cluster). */
async function primaryOf(name) {
  const moved = (await redisAt(redis.port, 'EXISTS', name)).match(/MOVED \d+ [\d.]+:(\d+)/);
  return moved ? Number(moved[1]) : redis.port;
}

/**
 * A subscriber to the classic channel `channel`: `ready` once subscribed, `next()` the next
 * message (a JSON object's text), `stop()`.
 */
function listen(channel) {
  const proc = spawn('redis-cli', ['-h', '127.0.0.1', '-p', String(redis.port), 'SUBSCRIBE', channel], { stdio: ['ignore', 'pipe', 'ignore'] });
  monitors.push(proc);
  const lines = [];
  let wake = () => {};
  let rest = '';
  proc.stdout.on('data', (chunk) => {
    const all = (rest + chunk.toString()).split('\n');
    rest = all.pop();
    lines.push(...all);
    wake();
  });
  const seen = (test) => new Promise((resolve) => {
    const look = () => {
      const at = lines.findIndex(test);
      if (at < 0) return;
      wake = () => {};
      resolve(lines.splice(0, at + 1)[at]);
    };
    wake = look;
    look();
  });
  return {
    // Printed raw: `subscribe`, the channel, the count; then `message`, the channel, the body.
    ready: within(5000, seen((l) => l === '1'), `SUBSCRIBE ${channel}`),
    next: () => seen((l) => l.startsWith('{')),
    stop: () => proc.kill('SIGKILL'),
  };
}

test('a call that reaches the holding node while its tab\'s bind is still being recorded there waits for it', async (t) => {
  if (!redis.cluster) {
    // The call is sent from one server while the bind waits on another; one server holds both.
    t.skip('a Redis Cluster only: the bind and the call must come from two servers');
    return;
  }
  // A's node name, from a first tab there.
  const first = await tabOn(A);
  const a = await serverOf(first.apiKey);
  first.tab.close();
  // The tab's key, on primary P; A's sharded channel on another primary, S.
  const { apiKey, token } = await A.token();
  const rid = createHash('sha256').update(apiKey).digest('hex').slice(0, 32);
  const P = await primaryOf(`va:k:{${rid}}`);
  let S = null;
  let channel = null;
  for (const port of redis.ports) {
    if (port === P) continue;
    const found = (await redisAt(port, 'PUBSUB', 'SHARDCHANNELS', `va:s:*:${a.node}`)).split('\n').filter(Boolean);
    if (found.length === 1) { S = port; channel = found[0]; break; }
  }
  assert.ok(channel, `A's sharded channel on a primary other than the key's (${P})`);
  // The node the call comes from, as far as A knows: a listener on its classic channel, where
  // the outcome goes (a script's publish on a channel nobody holds sharded falls back to it).
  const caller = '0ca11e40ca11e40c';
  const outcomes = listen(`va:n:${caller}`);
  await outcomes.ready;
  // P holds its writes for 600 ms: the tab connects (socketioxide sends CONNECT before the bind
  // runs) and its bind script waits on P, so A has not recorded the bind when the call, sent on
  // S, arrives. A waits for the bind instead of answering that the socket holds no key there.
  await redisAt(P, 'CLIENT', 'PAUSE', '600', 'WRITE');
  const tab = A.tab({ token });
  let delivered = 0;
  tab.socket.on('voice-agent:whoami', (p, meta, ack) => { delivered += 1; ack({ callId: meta.callId }); });
  await tab.connected();
  const call = JSON.stringify({ k: 'call', id: 'c_held_early', from: caller, rid, event: 'voice-agent:whoami', params: {}, ack: true, ms: 4000, n: 1 });
  assert.equal(await redisAt(S, 'SPUBLISH', channel, `c${tab.socket.id}\n${call}`), '1', 'A received the call');
  const reply = JSON.parse(await within(6000, outcomes.next(), 'the outcome at the caller'));
  outcomes.stop();
  assert.equal(reply.k, 'reply');
  assert.equal(reply.id, 'c_held_early');
  assert.equal(reply.r, 'answered', `the tab answered, not "gone": ${JSON.stringify(reply)}`);
  assert.equal(reply.v?.callId, 'c_held_early');
  assert.equal(delivered, 1);
  tab.close();
});
