// Test harness for the relay's protocol tests: starts the real `relay` binary on port 0, talks
// to it over real HTTP on loopback, and plays browser tabs with the official socket.io-client.
// Every wait is bounded. Every key, token and secret a test sees is remembered, and when a relay
// stops, its whole log is searched for them: none may appear.

import { spawn } from 'node:child_process';
import net from 'node:net';
import { createWriteStream, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import { io } from 'socket.io-client';

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, '../../..');
const relayBin = process.env.RELAY_BIN ?? join(repoRoot, 'target/debug/relay');
const logDir = process.env.TEST_LOG_DIR ?? join(repoRoot, 'test-logs');
mkdirSync(logDir, { recursive: true });

export const LIVEKIT_KEY = 'devkey';

/** Rejects after `ms` with a message naming what was awaited. */
export function within(ms, promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let relayCount = 0;

/**
 * Spawns a server binary listening on port 0, sends its output to a log file, and resolves
 * with its address once it prints "<banner> listening on http://ADDR" on `stream`.
 */
async function launchServer({ name, bin, args, env, stream, banner }) {
  const logPath = join(logDir, `${name}-${process.pid}-${++relayCount}.log`);
  const log = createWriteStream(logPath);
  const proc = spawn(bin, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stdout.pipe(log, { end: false });
  proc.stderr.pipe(log, { end: false });
  // 'close' comes after the output streams end, so the log is complete when it resolves.
  const exited = new Promise((r) => proc.once('close', (code, signal) => r({ code, signal })));
  const pattern = new RegExp(`${banner} listening on http://(\\d+\\.\\d+\\.\\d+\\.\\d+:\\d+)`);
  const addr = await within(15000, new Promise((resolveAddr, reject) => {
    let buffer = '';
    const onData = (chunk) => {
      buffer += chunk.toString();
      const m = buffer.match(pattern);
      if (m) {
        proc[stream].off('data', onData);
        resolveAddr(m[1]);
      }
    };
    proc[stream].on('data', onData);
    exited.then(({ code }) => reject(new Error(`${name} exited with ${code} before listening; see ${logPath}`)));
  }), `${name} to listen`);
  return { addr, proc, exited, logPath, log };
}

/**
 * Starts a relay. `env` overrides its environment. By default it runs the token service open
 * (anyone gets a token, always in a fresh room) with bare-key binding on, so the tests of
 * binding and calls need no credential to mint; tests of the token modes set their own.
 */
export async function startRelay(env = {}, { name = 'relay' } = {}) {
  const agentSecret = env.RELAY_AGENT_SECRET?.split(',')[0] ?? `as-${randomBytes(24).toString('hex')}`;
  const livekitSecret = env.LIVEKIT_API_SECRET ?? `lk-${randomBytes(24).toString('hex')}`;
  const fullEnv = {
    PATH: process.env.PATH,
    RUST_LOG: process.env.RELAY_TEST_RUST_LOG ?? 'debug',
    RELAY_ADDR: '127.0.0.1:0',
    LIVEKIT_URL: 'ws://127.0.0.1:7880',
    LIVEKIT_API_KEY: LIVEKIT_KEY,
    LIVEKIT_API_SECRET: livekitSecret,
    RELAY_AGENT_SECRET: agentSecret,
    RELAY_WEB_DIR: join(repoRoot, 'web/dist'),
    RELAY_TOKEN_MODE: 'open',
    RELAY_ALLOW_BARE_KEYS: 'true',
    ...env,
  };
  const started = await launchServer({ name, bin: relayBin, args: [], env: fullEnv, stream: 'stdout', banner: 'relay' });
  const issuerSecret = fullEnv.RELAY_TOKEN_MODE === 'issuer' ? fullEnv.RELAY_TOKEN_ISSUER_SECRET?.split(',')[0] : undefined;
  const relay = new Relay({ ...started, agentSecret, livekitSecret, issuerSecret });
  relay.remember(agentSecret, livekitSecret, ...(fullEnv.RELAY_TOKEN_ISSUER_SECRET ?? '').split(','), fullEnv.RELAY_APP_JWT_SECRET);
  return relay;
}

/** A fresh token-issuer secret (what an operator puts in RELAY_TOKEN_ISSUER_SECRET). */
export const issuerSecret = () => `is-${randomBytes(24).toString('hex')}`;

export class Relay {
  constructor({ addr, proc, exited, logPath, log, agentSecret, livekitSecret, issuerSecret }) {
    this.url = `http://${addr}`;
    this.proc = proc;
    this.exited = exited;
    this.logPath = logPath;
    this.log = log;
    this.agentSecret = agentSecret;
    this.livekitSecret = livekitSecret;
    /** In issuer mode: what `token()` presents, as the app's backend would. */
    this.issuerSecret = issuerSecret;
    this.secrets = new Set();
    this.tabs = [];
  }

  /** Values that must never appear whole in the relay's log. */
  remember(...values) {
    const fresh = values.filter((v) => typeof v === 'string' && v.length >= 8 && !this.secrets.has(v));
    if (fresh.length === 0) return;
    for (const v of fresh) this.secrets.add(v);
    for (const w of this.watchers ?? []) w.remember(...fresh);
  }

  /** Another process whose log must not hold what this one sees either. */
  share(other) {
    this.watchers = [...(this.watchers ?? []), other];
    other.remember(...this.secrets);
  }

  async fetch(path, init = {}) {
    const res = await within(20000, fetch(this.url + path, init), `${init.method ?? 'GET'} ${path}`);
    const text = await res.text();
    let body;
    try { body = JSON.parse(text); } catch { body = text; }
    return { status: res.status, body, headers: res.headers };
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
    if (res.status === 200) this.remember(res.body.token, res.body.apiKey);
    return res;
  }

  /** Mints a token (POST /token); fails the test unless it is issued. */
  async token(body = {}, opts = {}) {
    const res = await this.requestToken(body, opts);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body;
  }

  /** Posts a tool call as the agent. */
  async call(body, { secret = this.agentSecret, headers = {}, raw } = {}) {
    const h = { 'content-type': 'application/json', ...headers };
    if (secret !== null) h.authorization = `Bearer ${secret}`;
    return this.fetch('/api/voice-agent/tool-call', {
      method: 'POST',
      headers: h,
      body: raw ?? JSON.stringify(body),
    });
  }

  async keyState(apiKey, secret = this.agentSecret) {
    return this.fetch(`/api/voice-agent/keys/${apiKey}`, { headers: { authorization: `Bearer ${secret}` } });
  }

  async revoke(apiKey, secret = this.agentSecret) {
    return this.fetch(`/api/voice-agent/keys/${apiKey}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${secret}` },
    });
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

  /** A tab bound through the handshake token; resolves once connected. */
  async boundTab(opts = {}) {
    const minted = await this.token();
    const tab = this.tab({ token: minted.token, ...opts });
    await tab.connected();
    await this.waitState(minted.apiKey, 'online');
    return { tab, ...minted };
  }

  /** Polls the key's state until it is `state` (bounded). */
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

  /** Stops the relay (SIGTERM, then SIGKILL after a bound) and checks its log for secrets. */
  async stop({ signal = 'SIGTERM' } = {}) {
    for (const t of this.tabs) t.socket.close();
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill(signal);
      try {
        await within(20000, this.exited, 'the relay to exit');
      } catch {
        this.proc.kill('SIGKILL');
        await within(5000, this.exited, 'the relay to die');
      }
    }
    // Killed earlier by the test: wait for its output to be written out all the same.
    await within(5000, this.exited, 'the relay output to end');
    await new Promise((r) => this.log.end(r));
    this.assertLogClean();
    return this.exited;
  }

  assertLogClean() {
    const text = readFileSync(this.logPath, 'utf8');
    assert.ok(text.length > 0, 'the relay wrote a log');
    for (const s of this.secrets) {
      assert.ok(!text.includes(s), `log ${this.logPath} contains a whole key/token/secret (${s.slice(0, 6)}…)`);
      // The hex body of a key alone would be as bad as the key.
      if (s.startsWith('va_')) assert.ok(!text.includes(s.slice(3)), `log contains a key's hex body`);
    }
  }

  logText() {
    return readFileSync(this.logPath, 'utf8');
  }
}

/** One browser tab's socket, recording every event it receives. */
export class Tab {
  constructor(socket) {
    this.socket = socket;
    this.events = [];
    this.waiters = [];
    socket.onAny((event, ...args) => this.record(event, args));
    // Reserved events do not reach onAny.
    socket.on('disconnect', (reason) => this.record('disconnect', [reason]));
    socket.on('connect', () => this.record('connect', []));
  }

  record(event, args) {
    this.events.push({ event, args });
    this.waiters = this.waiters.filter((w) => !w(event, args));
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

const workerBin = process.env.WORKER_BIN ?? join(repoRoot, 'target/debug/agent-worker');

/** Runs `agent-worker <args>` against `relay`; resolves with its exit code and output. */
export function runWorker(relay, args, env = {}, ms = 20000) {
  return within(ms, new Promise((resolveW) => {
    const p = spawn(workerBin, args, {
      env: { PATH: process.env.PATH, RELAY_URL: relay.url, RELAY_AGENT_SECRET: relay.agentSecret, RUST_LOG: 'debug', ...env },
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
      RELAY_AGENT_SECRET: relay.agentSecret,
      LIVEKIT_API_KEY: LIVEKIT_KEY,
      LIVEKIT_API_SECRET: livekitSecret,
      ...env,
    },
    stream: 'stderr',
    banner: 'agent-worker',
  });
  const worker = new Relay({ ...started, agentSecret: relay.agentSecret, livekitSecret });
  worker.remember(livekitSecret, env.VAPI_SECRET);
  relay.share(worker);
  return worker;
}

/** A well-formed key that this relay never issued. */
export const strangerKey = () => `va_${randomBytes(32).toString('hex')}`;

/** A free TCP port on loopback (closed again at once, so a server can take it). */
export function freePort() {
  return new Promise((resolveP, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolveP(port));
    });
  });
}

/**
 * A real `redis-server` on a free loopback port, with no persistence (a restart comes back
 * empty, the harder case). `stop()` and `start()` may be called again, on the same port.
 */
export async function startRedis() {
  const port = await freePort();
  const logPath = join(logDir, `redis-${process.pid}-${port}.log`);
  const redis = {
    port,
    url: `redis://127.0.0.1:${port}`,
    proc: null,
    async start() {
      const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--logfile', logPath], { stdio: 'ignore' });
      this.proc = proc;
      this.exited = new Promise((r) => proc.once('exit', r));
      const until = Date.now() + 10000;
      while (Date.now() < until) {
        if (await new Promise((r) => {
          const s = net.connect(port, '127.0.0.1', () => { s.end(); r(true); });
          s.once('error', () => r(false));
        })) return this;
        await sleep(50);
      }
      throw new Error(`redis-server did not start on port ${port}; see ${logPath}`);
    },
    async stop() {
      if (!this.proc || this.proc.exitCode !== null) return;
      this.proc.kill('SIGKILL');
      await within(5000, this.exited, 'redis-server to exit');
    },
  };
  return redis.start();
}

/**
 * A TCP balancer on loopback standing in for whatever spreads tabs over relay nodes: each new
 * connection goes to `target` (a relay URL) or, with no target, is refused.
 */
export async function startBalancer(target) {
  const open = new Set();
  const lb = {
    target,
    server: net.createServer((client) => {
      open.add(client);
      client.once('close', () => open.delete(client));
      client.on('error', () => client.destroy());
      if (!lb.target) { client.destroy(); return; }
      const { hostname, port } = new URL(lb.target);
      const upstream = net.connect(Number(port), hostname);
      upstream.on('error', () => { upstream.destroy(); client.destroy(); });
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
      client.pipe(upstream);
      upstream.pipe(client);
    }),
    close() {
      for (const c of open) c.destroy();
      return new Promise((r) => lb.server.close(r));
    },
  };
  await new Promise((r) => lb.server.listen(0, '127.0.0.1', r));
  lb.url = `http://127.0.0.1:${lb.server.address().port}`;
  return lb;
}

/**
 * One HTTP request from a chosen loopback source address (`localAddress`, e.g. 127.0.0.2), as
 * a distinct client would make it; resolves with `{status, body}`.
 */
export function requestFrom(url, { localAddress, method = 'POST', headers = {}, body } = {}) {
  return within(10000, new Promise((resolveR, reject) => {
    const req = http.request(url, { method, localAddress, headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        let parsed;
        try { parsed = JSON.parse(text); } catch { parsed = text; }
        resolveR({ status: res.statusCode, body: parsed });
      });
    });
    req.on('error', reject);
    req.end(body ?? '');
  }), `${method} ${url} from ${localAddress}`);
}

/**
 * The shipped deploy/haproxy.cfg in front of two relays on loopback: the compose service names
 * pointed at `a` and `b`, the Docker resolver dropped. Resolves once both pass its /readyz
 * check, with `{url, stop()}`.
 */
export async function startHaproxy(a, b) {
  const port = await freePort();
  const hostOf = (relay) => new URL(relay.url).host;
  const cfg = readFileSync(join(repoRoot, 'deploy/haproxy.cfg'), 'utf8')
    .replace(/^resolvers docker[\s\S]*?(?=^frontend)/m, '')
    .replace(' resolvers docker', '')
    .replace('maxconn 100000', 'maxconn 2000')
    .replace('bind :3001', `bind 127.0.0.1:${port}`)
    .replace('relay-a:3001', hostOf(a))
    .replace('relay-b:3001', hostOf(b));
  const cfgPath = join(logDir, `haproxy-${process.pid}-${port}.cfg`);
  writeFileSync(cfgPath, cfg);
  const proc = spawn('haproxy', ['-db', '-f', cfgPath], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((r) => proc.once('exit', r));
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    proc.kill('SIGTERM');
    await within(5000, exited, 'haproxy to exit').catch(() => proc.kill('SIGKILL'));
    if (stderr.includes('ALERT')) console.log(stderr);
  };
  const until = Date.now() + 15000;
  while (Date.now() < until) {
    const hits = new Set();
    for (let i = 0; i < 4; i += 1) {
      try {
        const r = await fetch(`${url}/readyz`);
        if (r.status === 200) hits.add((r.headers.get('set-cookie') ?? '').match(/RELAY_NODE=(\w)/)?.[1]);
      } catch { /* not up yet */ }
    }
    if (hits.has('a') && hits.has('b')) return { url, stop };
    await sleep(200);
  }
  await stop();
  throw new Error(`haproxy did not pass both relays' health checks: ${stderr}`);
}
