// A relay and a worker beside it, as an agent sees them: the Node agent package's tests and the
// CLI (up.mjs) start them through here.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { io } from 'socket.io-client';
import { logDir } from './paths.mjs';
import { eventually, within } from './proc.mjs';
import { Tab, startRelay, startWorker, strangerKey } from './relay.mjs';

/** The relay's default call timeout in a stack: short, so a key without a tab fails fast. */
export const RELAY_DEFAULT_TIMEOUT_MS = 1500;

let catalogs = 0;

/**
 * A relay (token service open, tabs bind with their token) and a worker beside it. `catalog` (an
 * object) is written to a file and given to the worker as WORKER_CATALOG; absent, the worker uses
 * the shipped default catalog. `relayEnv` and `workerEnv` override their environments.
 */
export async function startStack({ catalog, relayEnv = {}, workerEnv = {} } = {}) {
  const relay = await startRelay({
    RELAY_DEFAULT_TIMEOUT_MS: String(RELAY_DEFAULT_TIMEOUT_MS),
    RELAY_ALLOW_BARE_KEYS: 'false',
    ...relayEnv,
  });
  let catalogPath;
  if (catalog) {
    catalogPath = join(logDir, `catalog-${process.pid}-${++catalogs}.json`);
    writeFileSync(catalogPath, JSON.stringify(catalog, null, 2));
  }
  let worker;
  try {
    worker = await startWorker(relay, { ...(catalogPath ? { WORKER_CATALOG: catalogPath } : {}), ...workerEnv });
  } catch (e) {
    await relay.stop();
    throw e;
  }
  return new Stack(relay, worker);
}

export class Stack {
  constructor(relay, worker) {
    Object.assign(this, { relay, worker, livekitSecret: relay.livekitSecret });
    this.tabs = [];
  }

  /** Values neither log may hold whole. */
  remember(...values) {
    this.relay.remember(...values);
  }

  /** A session token for `apiKey` only (what an agent holds), minted once. */
  tokenFor(apiKey) {
    return this.relay.tokenFor(apiKey);
  }

  /** A key the relay issued (POST /token), whose tab is not connected. */
  issueKey() {
    return this.relay.token();
  }

  /** A well-formed key the relay never issued. */
  strangerKey() {
    const key = strangerKey();
    this.remember(key);
    return key;
  }

  /**
   * A tab bound to a fresh key, answering `voice-agent:<tool>` with `handlers[tool](params,
   * meta)` (an ack value; a thrown error becomes `{ok:false,error}`). Records every event.
   */
  async tab(handlers = {}) {
    const minted = await this.issueKey();
    const socket = io(this.relay.url, {
      transports: ['websocket'], auth: { token: minted.token }, forceNew: true, reconnection: false, timeout: 5000,
    });
    const tab = new Tab(socket, handlers);
    tab.apiKey = minted.apiKey;
    /** The tab's own agent's session token (the `agentToken` of its /token answer). */
    tab.agentToken = minted.agentToken;
    this.tabs.push(tab);
    await tab.connected();
    await eventually(async () => (await this.keyState(minted.apiKey)).body?.state === 'online', 'the key to be online');
    return tab;
  }

  /** Tells the relay which tools `tab` handles (voice-agent:handles), as the browser client does. */
  async declare(tab, tools) {
    const ack = await within(5000, tab.socket.emitWithAck('voice-agent:handles', { tools }), 'the handles ack');
    assert.equal(ack?.ok, true, JSON.stringify(ack));
    return ack;
  }

  keyState(apiKey) {
    return this.relay.keyState(apiKey);
  }

  async stop() {
    for (const t of this.tabs) t.socket.close();
    await this.worker.stop();
    await this.relay.stop();
  }
}
