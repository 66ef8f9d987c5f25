// Starts the real relay and agent-worker binaries on free ports (port 0, address read from
// their "listening on" line) with fresh test secrets, and plays browser tabs with the official
// socket.io-client. Every wait has a bound. Every key, token and secret a test sees is
// remembered, and when a process stops its log is searched for them: none may appear whole.

import { spawn } from 'node:child_process';
import { createWriteStream, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import { io } from 'socket.io-client';

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, '../../..');
const relayBin = process.env.RELAY_BIN ?? join(repoRoot, 'target/debug/relay');
const workerBin = process.env.WORKER_BIN ?? join(repoRoot, 'target/debug/agent-worker');
const logDir = process.env.TEST_LOG_DIR ?? mkdtempSync(join(tmpdir(), 'voice-relay-agent-node-'));
mkdirSync(logDir, { recursive: true });

/** Rejects after `ms` with a message naming what was awaited. */
export function within(ms, promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` (bounded) until it returns a truthy value, and returns it. */
export async function eventually(check, what, ms = 5000) {
  const until = Date.now() + ms;
  let last;
  while (Date.now() < until) {
    last = await check();
    if (last && !(Array.isArray(last) && last.length === 0)) return last;
    await sleep(25);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

let launched = 0;

class Proc {
  constructor(name, proc, url, logPath, log, exited) {
    Object.assign(this, { name, proc, url, logPath, log, exited });
    this.secrets = new Set();
  }

  remember(...values) {
    for (const v of values) if (typeof v === 'string' && v.length >= 8) this.secrets.add(v);
  }

  async stop() {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill('SIGTERM');
      try {
        await within(10000, this.exited, `${this.name} to exit`);
      } catch {
        this.proc.kill('SIGKILL');
        await within(5000, this.exited, `${this.name} to die`);
      }
    }
    await within(5000, new Promise((r) => this.log.end(r)), `${this.name} log to close`);
    const text = readFileSync(this.logPath, 'utf8');
    for (const s of this.secrets) {
      assert.ok(!text.includes(s), `${this.logPath} holds a whole key, token or secret (${s.slice(0, 5)}…)`);
      if (s.startsWith('va_')) assert.ok(!text.includes(s.slice(3)), `${this.logPath} holds a key's hex body`);
    }
  }
}

async function launch(name, bin, args, env, stream, banner) {
  const logPath = join(logDir, `${name}-${process.pid}-${++launched}.log`);
  const log = createWriteStream(logPath);
  const proc = spawn(bin, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stdout.pipe(log, { end: false });
  proc.stderr.pipe(log, { end: false });
  const exited = new Promise((r) => proc.once('close', (code, signal) => r({ code, signal })));
  const pattern = new RegExp(`${banner} listening on (http://\\d+\\.\\d+\\.\\d+\\.\\d+:\\d+)`);
  const url = await within(15000, new Promise((resolveUrl, reject) => {
    let buffer = '';
    const onData = (chunk) => {
      buffer += chunk.toString().replace(/\x1b\[[0-9;]*m/g, '');
      const m = buffer.match(pattern);
      if (m) {
        proc[stream].off('data', onData);
        resolveUrl(m[1]);
      }
    };
    proc[stream].on('data', onData);
    exited.then(({ code }) => reject(new Error(`${name} exited with ${code} before listening; see ${logPath}`)));
  }), `${name} to listen`);
  return new Proc(name, proc, url, logPath, log, exited);
}

/** The relay's default call timeout here: short, so a key without a tab fails fast. */
export const RELAY_DEFAULT_TIMEOUT_MS = 1500;

/**
 * A relay and a worker beside it. `catalog` (an object) is written to a file and given to the
 * worker as WORKER_CATALOG; absent, the worker uses the shipped default catalog.
 */
export async function startStack({ catalog, workerEnv = {} } = {}) {
  const agentSecret = `as-${randomBytes(24).toString('hex')}`;
  const livekitSecret = `lk-${randomBytes(24).toString('hex')}`;
  const base = {
    PATH: process.env.PATH,
    RUST_LOG: 'debug',
    LIVEKIT_API_KEY: 'devkey',
    LIVEKIT_API_SECRET: livekitSecret,
    RELAY_AGENT_SECRET: agentSecret,
  };
  const relay = await launch('relay', relayBin, [], {
    ...base,
    RELAY_ADDR: '127.0.0.1:0',
    LIVEKIT_URL: 'ws://127.0.0.1:7880',
    RELAY_DEFAULT_TIMEOUT_MS: String(RELAY_DEFAULT_TIMEOUT_MS),
    RELAY_TOKEN_MODE: 'open',
  }, 'stdout', 'relay');
  let catalogPath;
  if (catalog) {
    catalogPath = join(logDir, `catalog-${process.pid}-${++launched}.json`);
    writeFileSync(catalogPath, JSON.stringify(catalog, null, 2));
  }
  let worker;
  try {
    worker = await launch('agent-worker', workerBin, ['serve'], {
      ...base,
      WORKER_ADDR: '127.0.0.1:0',
      RELAY_URL: relay.url,
      ...(catalogPath ? { WORKER_CATALOG: catalogPath } : {}),
      ...workerEnv,
    }, 'stderr', 'agent-worker');
  } catch (e) {
    await relay.stop();
    throw e;
  }
  return new Stack(relay, worker, agentSecret, livekitSecret);
}

export class Stack {
  constructor(relay, worker, agentSecret, livekitSecret) {
    Object.assign(this, { relay, worker, agentSecret, livekitSecret });
    this.tabs = [];
    this.remember(agentSecret, livekitSecret);
  }

  remember(...values) {
    this.relay.remember(...values);
    this.worker.remember(...values);
  }

  /** A key the relay issued (POST /token), whose tab is not connected. */
  async issueKey() {
    const res = await within(10000, fetch(`${this.relay.url}/token`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}',
    }), 'POST /token');
    assert.equal(res.status, 200);
    const body = await res.json();
    this.remember(body.apiKey, body.token);
    return body;
  }

  /** A well-formed key the relay never issued. */
  strangerKey() {
    const key = `va_${randomBytes(32).toString('hex')}`;
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
    const tab = { socket, apiKey: minted.apiKey, events: [] };
    socket.onAny((event, ...args) => {
      tab.events.push({ event, args });
      const name = event.startsWith('voice-agent:') ? event.slice('voice-agent:'.length) : undefined;
      const ack = typeof args.at(-1) === 'function' ? args.at(-1) : undefined;
      const handler = name && handlers[name];
      if (!handler || !ack) return;
      Promise.resolve()
        .then(() => handler(args[0], args[1]))
        .then((result) => ack(result === undefined ? { ok: true, result: null } : result))
        .catch((e) => ack({ ok: false, error: { code: e.code ?? 'tool_failed', message: e.message } }));
    });
    await within(5000, new Promise((ok, fail) => {
      socket.once('connect', ok);
      socket.once('connect_error', (e) => fail(new Error(`connect_error: ${e.message}`)));
    }), 'the tab to connect');
    await eventually(async () => (await this.keyState(minted.apiKey)).body?.state === 'online', 'the key to be online');
    this.tabs.push(tab);
    return tab;
  }

  /** Tells the relay which tools `tab` handles (voice-agent:handles), as the browser client does. */
  async declare(tab, tools) {
    const ack = await within(5000, tab.socket.emitWithAck('voice-agent:handles', { tools }), 'the handles ack');
    assert.equal(ack?.ok, true, JSON.stringify(ack));
    return ack;
  }

  async keyState(apiKey) {
    const res = await within(10000, fetch(`${this.relay.url}/api/voice-agent/keys/${apiKey}`, {
      headers: { authorization: `Bearer ${this.agentSecret}` },
    }), 'the key state');
    let body;
    try { body = await res.json(); } catch { body = undefined; }
    return { status: res.status, body };
  }

  async stop() {
    for (const t of this.tabs) t.socket.close();
    await this.worker.stop();
    await this.relay.stop();
  }
}
