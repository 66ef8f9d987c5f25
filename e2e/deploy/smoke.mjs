// What the compose smoke runs do through a stack's published ports, as its users would: ask
// /token as the app's backend, open a tab with the official socket.io-client, act as an agent
// through the worker's agent API and the relay's, and read which relay a log line came from.
import assert from 'node:assert/strict';
import { io } from 'socket.io-client';
import { Tab, agentCredential, eventually, within } from '../harness/index.mjs';

/** What the tabs answer to draw_card, the catalog's awaited tool. */
export const CARD = { cardId: 'the-fool', cardName: 'The Fool', reversed: false };

async function json(url, init = {}) {
  const res = await within(20000, fetch(url, init), `${init.method ?? 'GET'} ${url}`);
  const text = await res.text();
  let body;
  try { body = JSON.parse(text); } catch { body = text; }
  return { status: res.status, body, headers: res.headers };
}

/** POST /token at `url` as the app's backend (the stack runs the token service in issuer mode). */
export async function issue(stack, url = stack.relayUrl) {
  const res = await json(`${url}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.env.RELAY_TOKEN_ISSUER_SECRET}` },
    body: '{}',
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  stack.remember(res.body.token, res.body.apiKey);
  return res.body;
}

/**
 * A tab bound with its token at `url`, answering draw_card with CARD. `cookie` goes with every
 * request (the balancer's RELAY_NODE pins a node). After a server-side disconnect (its relay
 * stopping) it connects again by itself, as the browser client does.
 */
export async function openTab(url, token, { cookie } = {}) {
  const socket = io(url, {
    transports: ['websocket'],
    auth: { token },
    forceNew: true,
    reconnection: true,
    reconnectionDelay: 250,
    reconnectionDelayMax: 1000,
    timeout: 5000,
    extraHeaders: cookie ? { cookie } : undefined,
  });
  const tab = new Tab(socket, { draw_card: () => ({ ok: true, result: CARD }) });
  socket.on('disconnect', (reason) => {
    if (reason === 'io server disconnect') setTimeout(() => socket.connect(), 250);
  });
  await tab.connected(10000);
  return tab;
}

const agentHeaders = async (stack, apiKey) => ({
  authorization: `Bearer ${await agentCredential(stack, apiKey)}`,
  'x-voice-agent-key': apiKey,
  'content-type': 'application/json',
});

/** The key's state as the relay at `url` tells an operator. */
export async function keyState(stack, apiKey, url = stack.relayUrl) {
  return json(`${url}/api/voice-agent/keys/${apiKey}`, { headers: { authorization: `Bearer ${stack.env.RELAY_OPERATOR_SECRET}` } });
}

export function waitOnline(stack, apiKey, url = stack.relayUrl, ms = 30000) {
  return eventually(async () => (await keyState(stack, apiKey, url)).body?.state === 'online', 'the key to be online', ms, 200);
}

/** One agent tool through the worker's agent API. */
export async function agentTool(stack, apiKey, name, args = {}) {
  return json(`${stack.workerUrl}/agent/tools/${name}`, { method: 'POST', headers: await agentHeaders(stack, apiKey), body: JSON.stringify(args) });
}

/**
 * As a voice agent through the worker: reads the session's offer, moves it to the spread mode,
 * and calls draw_card, whose answer comes from the tab; fails the test unless it is CARD.
 */
export async function drawThroughWorker(stack, apiKey) {
  const offer = await json(`${stack.workerUrl}/agent/tools`, { headers: await agentHeaders(stack, apiKey) });
  assert.equal(offer.status, 200, JSON.stringify(offer.body));
  if (offer.body.mode !== 'spread') {
    const moved = await agentTool(stack, apiKey, 'enter_spread');
    assert.equal(moved.body.ok, true, JSON.stringify(moved.body));
    assert.equal(moved.body.mode, 'spread');
  }
  const drawn = await agentTool(stack, apiKey, 'draw_card', { positionLabel: 'Past', promptRole: 'What led here' });
  assert.equal(drawn.status, 200, JSON.stringify(drawn.body));
  assert.equal(drawn.body.ok, true, JSON.stringify(drawn.body));
  assert.deepEqual(drawn.body.result, CARD);
  return drawn.body;
}

/** A tool call straight to the relay's API at `url` (the balancer), with `cookie` if given. */
export async function relayCall(stack, url, body, { cookie } = {}) {
  const headers = { authorization: `Bearer ${await agentCredential(stack, body.apiKey, url)}`, 'content-type': 'application/json' };
  if (cookie) headers.cookie = cookie;
  return json(`${url}/api/voice-agent/tool-call`, { method: 'POST', headers, body: JSON.stringify(body) });
}

/** The JSON log lines of a container whose message is `message` and whose fields match `fields`. */
export async function logLines(stack, container, message, fields) {
  const text = await stack.logs(container, 100000);
  return text.split('\n').filter((l) => l.startsWith('{')).map((l) => { try { return JSON.parse(l); } catch { return null; } })
    .filter((l) => l && l.message === message && Object.entries(fields).every(([k, v]) => l[k] === v));
}
