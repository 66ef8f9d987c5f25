// The relay and the agent worker under test: the real binaries on port 0 with fresh test secrets,
// and browser tabs played with the official socket.io-client.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';
import { io } from 'socket.io-client';
import { relayBin, workerBin, webDist } from './paths.mjs';
import { Server, launchServer, sleep, within } from './proc.mjs';

export const LIVEKIT_KEY = 'devkey';

/** A fresh test secret: `prefix-` and 48 hex digits. */
export const secret = (prefix) => `${prefix}-${randomBytes(24).toString('hex')}`;
/** A fresh signing-key entry for RELAY_SESSION_KEYS (`kid:seed`, what `relay session-key`
 * prints). */
export const sessionKeyEntry = () => `k${randomBytes(4).toString('hex')}:${randomBytes(32).toString('base64url')}`;
/** The seeds of RELAY_SESSION_KEYS entries: what no log may hold. */
const seedsOf = (keys) => (keys ?? '').split(',').map((e) => e.split(':')[1]).filter(Boolean);

/** The secrets every relay node of one set must share (each node verifies the others' tokens,
 * the tabs' and the agents'): spread into each node's environment. */
export const nodeSecrets = () => ({
  LIVEKIT_API_SECRET: secret('lk'),
  RELAY_WORKER_SECRET: secret('ws'),
  RELAY_OPERATOR_SECRET: secret('os'),
  RELAY_SESSION_KEYS: sessionKeyEntry(),
});
/** A fresh token-issuer secret (what an operator puts in RELAY_TOKEN_ISSUER_SECRET). */
export const issuerSecret = () => secret('is');
/** A well-formed key that no relay issued. */
export const strangerKey = () => `va_${randomBytes(32).toString('hex')}`;

/**
 * Starts a relay. `env` overrides its environment. By default it runs the token service open
 * (anyone gets a token, always in a fresh room) with bare-key binding on, so the tests of
 * binding and calls need no credential to mint; tests of the token modes set their own.
 */
export async function startRelay(env = {}, { name = 'relay', bin = relayBin } = {}) {
  const workerSecret = env.RELAY_WORKER_SECRET?.split(',')[0] ?? secret('ws');
  const operatorSecret = env.RELAY_OPERATOR_SECRET?.split(',')[0] ?? secret('os');
  const livekitSecret = env.LIVEKIT_API_SECRET ?? secret('lk');
  const fullEnv = {
    PATH: process.env.PATH,
    RUST_LOG: process.env.RELAY_TEST_RUST_LOG ?? 'debug',
    RELAY_ADDR: '127.0.0.1:0',
    LIVEKIT_URL: 'ws://127.0.0.1:7880',
    LIVEKIT_API_KEY: LIVEKIT_KEY,
    LIVEKIT_API_SECRET: livekitSecret,
    RELAY_WORKER_SECRET: workerSecret,
    RELAY_OPERATOR_SECRET: operatorSecret,
    RELAY_SESSION_KEYS: sessionKeyEntry(),
    RELAY_WEB_DIR: webDist,
    RELAY_TOKEN_MODE: 'open',
    RELAY_ALLOW_BARE_KEYS: 'true',
    ...env,
  };
  const started = await launchServer({ name, bin, env: fullEnv, stream: 'stdout', banner: 'relay' });
  const issuer = fullEnv.RELAY_TOKEN_MODE === 'issuer' ? fullEnv.RELAY_TOKEN_ISSUER_SECRET?.split(',')[0] : undefined;
  const relay = new Relay({ ...started, workerSecret, operatorSecret, livekitSecret, issuerSecret: issuer });
  /** RELAY_SESSION_KEYS (`kid:seed` entries): a test may sign tokens the relay accepts. */
  relay.sessionKeys = fullEnv.RELAY_SESSION_KEYS;
  relay.remember(workerSecret, operatorSecret, livekitSecret, ...seedsOf(fullEnv.RELAY_SESSION_KEYS),
    ...(fullEnv.RELAY_TOKEN_ISSUER_SECRET ?? '').split(','), fullEnv.RELAY_APP_JWT_SECRET);
  return relay;
}

/**
 * Starts a relay as one more node of `nodes` (and adds it there). The nodes share what they
 * saw: a call or a tab may pass through any of them, so no node's log may hold another's
 * secrets either.
 */
export async function startNode(nodes, env, { name } = {}) {
  const relay = await startRelay(env, { name });
  for (const other of nodes) { other.share(relay); relay.share(other); }
  nodes.push(relay);
  return relay;
}

/** Starts `agent-worker serve` next to `relay`; its log must not hold what the relay's may not. */
export async function startWorker(relay, env = {}) {
  const livekitSecret = env.LIVEKIT_API_SECRET ?? relay.livekitSecret;
  const started = await launchServer({
    name: 'worker',
    bin: workerBin,
    args: ['serve'],
    env: {
      PATH: process.env.PATH,
      RUST_LOG: 'debug',
      WORKER_ADDR: '127.0.0.1:0',
      RELAY_URL: relay.url,
      RELAY_WORKER_SECRET: relay.workerSecret,
      RELAY_OPERATOR_SECRET: relay.operatorSecret,
      LIVEKIT_API_KEY: LIVEKIT_KEY,
      LIVEKIT_API_SECRET: livekitSecret,
      ...env,
    },
    stream: 'stderr',
    banner: 'agent-worker',
  });
  const worker = new Relay({ ...started, workerSecret: relay.workerSecret, operatorSecret: relay.operatorSecret, livekitSecret });
  worker.relay = relay;
  worker.remember(livekitSecret, relay.workerSecret, relay.operatorSecret, env.VAPI_SECRET);
  relay.share(worker);
  return worker;
}

/**
 * Runs the relay binary until it exits (a configuration it refuses, `check-config`), with only
 * PATH and `env` in its environment; resolves with its exit code and its whole output.
 */
export function runRelay(env, args = [], ms = 10000) {
  return within(ms, new Promise((resolveR) => {
    const p = spawn(relayBin, args, { env: { PATH: process.env.PATH, ...env } });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { out += d; });
    p.on('exit', (code) => resolveR({ code, out }));
  }), 'relay to exit');
}

/** Runs `agent-worker <args>` against `relay` as an operator (`call` and `demo` mint a session
 * token for their key); resolves with its exit code and output. */
export function runWorker(relay, args, env = {}, ms = 20000) {
  return within(ms, new Promise((resolveW) => {
    const p = spawn(workerBin, args, {
      env: { PATH: process.env.PATH, RELAY_URL: relay.url, RELAY_OPERATOR_SECRET: relay.operatorSecret, RUST_LOG: 'debug', ...env },
    });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    p.on('exit', (code) => {
      let json;
      try { json = JSON.parse(stdout.trim().split('\n').pop()); } catch { json = undefined; }
      resolveW({ code, stdout, stderr, json });
    });
  }), `agent-worker ${args[0]}`);
}

/** A relay (or a worker) under test, with what the tests ask of it over HTTP and its tabs. */
export class Relay extends Server {
  constructor({ workerSecret, operatorSecret, livekitSecret, issuerSecret: issuer, ...started }) {
    super(started);
    /** The worker's credential: mints session tokens, reads key state, revokes. */
    this.workerSecret = workerSecret;
    /** The operators' credential. */
    this.operatorSecret = operatorSecret;
    this.livekitSecret = livekitSecret;
    /** In issuer mode: what `token()` presents, as the app's backend would. */
    this.issuerSecret = issuer;
    this.tabs = [];
    /** A session token per key, minted on first use (`tokenFor`). */
    this.sessionTokens = new Map();
  }

  /**
   * POST /token with `body`, presenting `bearer` (the issuer secret by default in issuer mode;
   * an app session JWT in app-jwt mode); resolves with the raw answer.
   */
  async requestToken(body = {}, { bearer = this.issuerSecret } = {}) {
    const headers = { 'content-type': 'application/json' };
    if (bearer) {
      headers.authorization = `Bearer ${bearer}`;
      this.remember(bearer);
    }
    const res = await this.fetch('/token', { method: 'POST', headers, body: JSON.stringify(body) });
    if (res.status === 200) this.remember(res.body.token, res.body.apiKey, res.body.agentToken);
    return res;
  }

  /**
   * POST /api/voice-agent/sessions for `apiKey` (`extra`: ttlSecs, tools, scope, …), presenting
   * `bearer` (the worker's credential by default); resolves with the raw answer.
   */
  async requestSession(apiKey, extra = {}, { bearer = this.workerSecret } = {}) {
    const headers = { 'content-type': 'application/json' };
    if (bearer) headers.authorization = `Bearer ${bearer}`;
    const res = await this.fetch('/api/voice-agent/sessions', { method: 'POST', headers, body: JSON.stringify({ apiKey, ...extra }) });
    if (res.status === 200) this.remember(res.body.token);
    return res;
  }

  /** A session token for `apiKey` (minted once with the worker's credential); fails the test
   * unless the relay mints it. */
  async tokenFor(apiKey) {
    if (!this.sessionTokens.has(apiKey)) {
      const res = await this.requestSession(apiKey);
      assert.equal(res.status, 200, `a session token for the key: ${JSON.stringify(res.body)}`);
      this.sessionTokens.set(apiKey, res.body.token);
    }
    return this.sessionTokens.get(apiKey);
  }

  /** Mints a token (POST /token); fails the test unless it is issued. */
  async token(body = {}, opts = {}) {
    const res = await this.requestToken(body, opts);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body;
  }

  /**
   * Posts a tool call as the key's agent: with a session token for `body.apiKey` (minted once),
   * or `token` (another session token), or `secret` (any credential; `null` for none).
   */
  async call(body, { secret, token, headers = {}, raw } = {}) {
    const h = { 'content-type': 'application/json', ...headers };
    const credential = secret !== undefined ? secret : token ?? await this.tokenFor(body.apiKey);
    if (credential !== null) h.authorization = `Bearer ${credential}`;
    return this.fetch('/api/voice-agent/tool-call', { method: 'POST', headers: h, body: raw ?? JSON.stringify(body) });
  }

  /** The key's state, read with the worker's credential (or `bearer`). */
  async keyState(apiKey, bearer = this.workerSecret) {
    return this.fetch(`/api/voice-agent/keys/${apiKey}`, { headers: { authorization: `Bearer ${bearer}` } });
  }

  /** Revokes the key with the worker's credential (or `bearer`). */
  async revoke(apiKey, bearer = this.workerSecret) {
    return this.fetch(`/api/voice-agent/keys/${apiKey}`, { method: 'DELETE', headers: { authorization: `Bearer ${bearer}` } });
  }

  /** Opens a tab: a socket.io-client socket, optionally with a handshake token. */
  tab({ token, transports = ['websocket'], auth, autoConnect = true, reconnection = false } = {}) {
    const socket = io(this.url, {
      transports,
      auth: auth ?? (token ? { token } : undefined),
      forceNew: true,
      reconnection,
      reconnectionDelay: 100,
      reconnectionDelayMax: 200,
      autoConnect,
      timeout: 5000,
    });
    const tab = new Tab(socket);
    this.tabs.push(tab);
    return tab;
  }

  /** A tab bound through the handshake token; resolves once connected and online. */
  async boundTab(opts = {}) {
    const minted = await this.token();
    const tab = this.tab({ token: minted.token, ...opts });
    await tab.connected();
    await this.waitState(minted.apiKey, 'online');
    return { tab, ...minted };
  }

  /** Polls the key's state until it is `state` (null: unknown, 404), bounded. */
  async waitState(apiKey, state, ms = 5000) {
    const until = Date.now() + ms;
    let last;
    while (Date.now() < until) {
      last = await this.keyState(apiKey);
      if ((state === null && last.status === 404) || last.body?.state === state) return last;
      await sleep(20);
    }
    throw new Error(`key never reached state ${state}; last: ${JSON.stringify(last?.body)}`);
  }

  async stop(opts) {
    for (const t of this.tabs) t.socket.close();
    return super.stop(opts);
  }
}

/**
 * One browser tab's socket, recording every event it receives. `handlers[tool](params, meta)`
 * answers `voice-agent:<tool>` calls (its value is the ack; a thrown error becomes
 * `{ok:false,error}`).
 */
export class Tab {
  constructor(socket, handlers = {}) {
    this.socket = socket;
    this.events = [];
    this.waiters = [];
    socket.onAny((event, ...args) => {
      this.record(event, args);
      this.answer(handlers, event, args);
    });
    // Reserved events do not reach onAny.
    socket.on('disconnect', (reason) => this.record('disconnect', [reason]));
    socket.on('connect', () => this.record('connect', []));
  }

  record(event, args) {
    this.events.push({ event, args });
    this.waiters = this.waiters.filter((w) => !w(event, args));
  }

  answer(handlers, event, args) {
    const name = event.startsWith('voice-agent:') ? event.slice('voice-agent:'.length) : undefined;
    const ack = typeof args.at(-1) === 'function' ? args.at(-1) : undefined;
    const handler = name && handlers[name];
    if (!handler || !ack) return;
    Promise.resolve()
      .then(() => handler(args[0], args[1]))
      .then((result) => ack(result === undefined ? { ok: true, result: null } : result))
      .catch((e) => ack({ ok: false, error: { code: e.code ?? 'tool_failed', message: e.message } }));
  }

  connected(ms = 5000) {
    if (this.socket.connected) return Promise.resolve();
    return within(ms, new Promise((resolveC, reject) => {
      this.socket.once('connect', resolveC);
      this.socket.once('connect_error', (err) => reject(Object.assign(new Error(`connect_error: ${err.message}`), { data: err.data })));
    }), 'the socket to connect');
  }

  connectError(ms = 5000) {
    return within(ms, new Promise((resolveE, reject) => {
      this.socket.once('connect_error', resolveE);
      this.socket.once('connect', () => reject(new Error('connected, but a connect_error was expected')));
    }), 'a connect_error');
  }

  /** Resolves with the args of the next (or an already received) `event` matching `pred`. */
  next(event, pred = () => true, ms = 5000) {
    const seen = this.events.find((e) => e.event === event && pred(...e.args));
    if (seen) return Promise.resolve(seen.args);
    return within(ms, new Promise((resolveN) => {
      this.waiters.push((ev, args) => {
        if (ev === event && pred(...args)) { resolveN(args); return true; }
        return false;
      });
    }), `event ${event}`);
  }

  received(event) {
    return this.events.filter((e) => e.event === event);
  }

  register(arg, ms = 5000) {
    return within(ms, this.socket.emitWithAck('voice-agent:register', arg), 'the register ack');
  }

  close() { this.socket.close(); }
}
