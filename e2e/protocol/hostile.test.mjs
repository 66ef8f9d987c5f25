// Hostile input the HTTP contract does not describe: Engine.IO / Socket.IO frames that are
// malformed, truncated, oversized, deeply nested, binary where text is expected, with attachment
// placeholders that point nowhere, huge ack ids, unknown namespaces; polling requests with bad or
// foreign session ids; handshakes with hostile `auth`; slow and half-open HTTP connections held
// in their hundreds. After each group the relay is alive, still routes a call to a fresh tab, and
// its resident memory stays bounded.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import WebSocket from 'ws';
import { startRelay, within, sleep } from '../harness/index.mjs';

let relay;
let host;
let port;
let baselineKb;
const counts = {};

before(async () => {
  relay = await startRelay({ RELAY_UNBOUND_SOCKET_SECS: '5', RUST_LOG: 'info' }, { name: 'relay-hostile' });
  ({ hostname: host, port } = new URL(relay.url));
  port = Number(port);
  await stillRoutes('warm-up');
  baselineKb = rssKb();
});
after(async () => {
  if (Object.keys(counts).length) console.log(`hostile cases run: ${JSON.stringify(counts)}; RSS ${baselineKb} KB at start, ${rssKb()} KB at end`);
  await relay?.stop();
});

const rssKb = () => Number(readFileSync(`/proc/${relay.proc.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);

/** The relay answers health, and a fresh tab bound with a token gets a call and answers it. */
async function stillRoutes(group) {
  assert.equal((await relay.fetch('/healthz')).status, 200, `alive after ${group}`);
  const { tab, apiKey } = await relay.boundTab();
  tab.socket.on('voice-agent:OpenPopover', (_params, _meta, ack) => ack?.({ ok: true, result: { group } }));
  const r = await relay.call({ apiKey, toolName: 'OpenPopover', params: {}, awaitResult: true, timeoutMs: 3000 });
  assert.equal(r.status, 200, `a call routes after ${group}: ${JSON.stringify(r.body)}`);
  assert.deepEqual(r.body.result, { group });
  tab.close();
}

/** Memory after a group: within `slackMb` of the baseline once the relay has settled. */
async function boundedMemory(group, slackMb = 64) {
  let kb = rssKb();
  for (let i = 0; i < 20 && kb > baselineKb + slackMb * 1024; i++) {
    await sleep(250);
    kb = rssKb();
  }
  assert.ok(kb <= baselineKb + slackMb * 1024, `RSS after ${group}: ${kb} KB against ${baselineKb} KB at start`);
}

/** A raw Engine.IO WebSocket, opened, with the server's open packet read. */
async function rawSocket() {
  const ws = new WebSocket(`ws://${host}:${port}/socket.io/?EIO=4&transport=websocket`, { maxPayload: 1 << 20 });
  const frames = [];
  ws.on('message', (data, isBinary) => frames.push(isBinary ? data : data.toString()));
  await within(5000, new Promise((r, j) => { ws.once('open', r); ws.once('error', j); }), 'the raw socket to open');
  await within(5000, (async () => { while (!frames.some((f) => typeof f === 'string' && f.startsWith('0'))) await sleep(10); })(), 'the Engine.IO open packet');
  const closed = new Promise((r) => ws.once('close', (code) => r(code)));
  return { ws, frames, closed };
}

/** Sends each frame on a fresh socket (optionally connected to the default namespace first) and
 * waits until the relay has either closed it or kept it open for a moment. No answer may be a
 * crash: the process must be alive afterwards. */
async function throwFrames(group, frames, { connectFirst = false, binary = false } = {}) {
  counts[group] = (counts[group] ?? 0) + frames.length;
  for (const frame of frames) {
    const s = await rawSocket();
    if (connectFirst) {
      s.ws.send('40');
      await within(5000, (async () => { while (!s.frames.some((f) => typeof f === 'string' && f.startsWith('40'))) await sleep(5); })(), 'the namespace connect');
    }
    s.ws.send(frame, { binary });
    await Promise.race([s.closed, sleep(150)]);
    s.ws.terminate();
    assert.equal(relay.proc.exitCode, null, `the relay survived ${group}: ${String(frame).slice(0, 60)}`);
  }
}

test('malformed and truncated Engine.IO / Socket.IO packets', async () => {
  await throwFrames('malformed', [
    '', '9', 'x', '4', '42', '42[', '42["voice-agent:register"', '42["voice-agent:register",', '42{}', '42"str"',
    '42[]', '42[1,2,3]', '42[null]', '43', '43[]', '44', '45', '46', '4-1["a"]', '42abc["a"]',
    '2probe', '3', '5', '6', '1', '0', '40{', '40{"token":', '41', '4\u0000', '\uffff\ufffe',
    '42["voice-agent:register","va_' + 'z'.repeat(64) + '"]',
  ], { connectFirst: true });
  await throwFrames('malformed-before-connect', ['42["x"]', '43[]', '41', '40/', '40abc', '4', '{}'], { connectFirst: false });
  await stillRoutes('malformed packets');
  await boundedMemory('malformed packets');
});

test('oversized and deeply nested payloads', async () => {
  const deep = (n) => '['.repeat(n) + ']'.repeat(n);
  const deepObj = (n) => '{"a":'.repeat(n) + '1' + '}'.repeat(n);
  await throwFrames('oversized', [
    `42["voice-agent:register","${'a'.repeat(900_000)}"]`,
    `42["voice-agent:register",${deep(50_000)}]`,
    `42["voice-agent:register",${deepObj(20_000)}]`,
    `42[${'"x",'.repeat(100_000)}"x"]`,
    `40${JSON.stringify({ token: 'x'.repeat(500_000) })}`,
  ], { connectFirst: false });
  await stillRoutes('oversized payloads');
  await boundedMemory('oversized payloads');
});

test('binary where text is expected, and attachment placeholders that point nowhere', async () => {
  await throwFrames('binary', [Buffer.from([0, 1, 2, 3, 255]), Buffer.alloc(70_000, 7), Buffer.from('42["voice-agent:register","x"]')], { connectFirst: true, binary: true });
  await throwFrames('placeholders', [
    '451-["voice-agent:register",{"_placeholder":true,"num":0}]',
    '451-["voice-agent:register",{"_placeholder":true,"num":7}]',
    '459999999999-["voice-agent:register",{"_placeholder":true,"num":0}]',
    '45-1-["x"]',
    '451-["voice-agent:register",{"_placeholder":true}]',
    '461-0["x",{"_placeholder":true,"num":0}]',
  ], { connectFirst: true });
  await stillRoutes('binary and placeholders');
  await boundedMemory('binary and placeholders');
});

test('huge ack ids and unknown namespaces', async () => {
  await throwFrames('ack-ids', [
    '4299999999999999999999999999["voice-agent:register","x"]',
    '42-5["voice-agent:register","x"]',
    '4218446744073709551616["voice-agent:register","x"]',
    '431["nothing was asked"]',
    '4399999999999999999999["x"]',
  ], { connectFirst: true });
  await throwFrames('namespaces', [
    '40/admin,', '40/nope,{"token":"x"}', '42/nope,["voice-agent:register","x"]', `40/${'n'.repeat(100_000)},`, '40/\u0000,',
  ], { connectFirst: false });
  await stillRoutes('ack ids and namespaces');
  await boundedMemory('ack ids and namespaces');
});

/** One raw HTTP request; resolves with the status line and body (bounded). */
function rawHttp(request, ms = 5000) {
  return within(ms, new Promise((resolveR, reject) => {
    const sock = net.connect(port, host, () => sock.end(request));
    let data = '';
    sock.on('data', (d) => { data += d; });
    sock.on('end', () => resolveR(data));
    sock.on('error', reject);
  }), 'a raw HTTP answer');
}

test('polling requests with bad or foreign session ids', async () => {
  // A real polling session, to borrow its id from another "client".
  const open = await relay.fetch('/socket.io/?EIO=4&transport=polling');
  assert.equal(open.status, 200);
  const sid = JSON.parse(String(open.body).slice(1)).sid;
  const cases = [
    `/socket.io/?EIO=4&transport=polling&sid=nope`,
    `/socket.io/?EIO=4&transport=polling&sid=${'a'.repeat(10_000)}`,
    `/socket.io/?EIO=4&transport=polling&sid=%00%ff`,
    `/socket.io/?EIO=3&transport=polling`,
    `/socket.io/?EIO=99&transport=polling`,
    `/socket.io/?transport=carrier-pigeon`,
    `/socket.io/?EIO=4&transport=websocket&sid=${sid}`,
  ];
  counts.polling = cases.length + 3;
  for (const path of cases) {
    const r = await relay.fetch(path);
    assert.ok(r.status >= 400 && r.status < 500, `${path.slice(0, 60)} → ${r.status}`);
  }
  // Posting garbage into someone else's live session: refused or ignored, never a crash.
  const post = await relay.fetch(`/socket.io/?EIO=4&transport=polling&sid=${sid}`, { method: 'POST', body: '42["voice-agent:register",{"__proto__":1}]\u001e4\u001e' });
  assert.ok(post.status < 500, `foreign post → ${post.status}`);
  // An oversized post is refused: with a status, or by closing the connection before the body
  // is all sent (the relay does not read past its message limit). Never a 5xx.
  const big = await relay.fetch(`/socket.io/?EIO=4&transport=polling&sid=${sid}`, { method: 'POST', body: 'x'.repeat(2_000_000) })
    .catch((e) => ({ status: 0, cause: e.cause?.code ?? e.message }));
  if (big.status === 0) assert.match(String(big.cause), /EPIPE|ECONNRESET|UND_ERR_SOCKET|other side closed/, `oversized post: ${big.cause}`);
  else assert.ok(big.status < 500, `oversized post → ${big.status}`);
  const raw = await rawHttp(`GET /socket.io/?EIO=4&transport=polling HTTP/1.1\r\nHost: ${host}\r\nContent-Length: -1\r\n\r\n`);
  assert.match(raw, /^HTTP\/1\.1 4\d\d/, raw.slice(0, 40));
  await stillRoutes('bad polling requests');
  await boundedMemory('bad polling requests');
});

test('handshakes with hostile auth', async () => {
  const auths = [
    { token: 42 }, { token: null }, { token: ['a'] }, { token: { nested: { deeper: true } } }, { token: '' },
    { token: 'x'.repeat(200_000) }, { token: 'a.b.c' }, { token: 'eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.' },
    { '__proto__': { token: 'x' } }, { token: '\u0000\u0001' }, 'just a string', [1, 2, 3],
  ];
  counts.auth = auths.length;
  for (const auth of auths) {
    const tab = relay.tab({ auth });
    const err = await tab.connectError().catch((e) => e);
    tab.close();
    assert.ok(err && (err.data?.code || err.message), `a clear refusal for ${JSON.stringify(auth).slice(0, 40)}`);
  }
  await stillRoutes('hostile auth');
  await boundedMemory('hostile auth');
});

test('hundreds of slow and half-open HTTP connections', async () => {
  const n = 300;
  counts.slow = n;
  const sockets = [];
  for (let i = 0; i < n; i++) {
    const s = net.connect(port, host);
    s.on('error', () => {});
    // Half a request head, then nothing: a slowloris client.
    s.write(i % 2 ? 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ' : 'POST /token HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"a":');
    sockets.push(s);
  }
  await sleep(500);
  // While they hang, the relay serves others.
  await stillRoutes('slow connections held open');
  // Half-open: the client goes away without a word.
  for (const s of sockets) s.destroy();
  await sleep(300);
  await stillRoutes('half-open connections dropped');
  await boundedMemory('slow and half-open connections');
});
