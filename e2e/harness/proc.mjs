// Processes under test: bounded waits, free ports, launching a binary and reading its address from
// its "listening on" line, and the log scan: every key, token and secret a test sees is
// remembered, and when a process stops its whole log is searched for them; none may appear whole.
import { spawn } from 'node:child_process';
import net from 'node:net';
import { createWriteStream, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { logDir } from './paths.mjs';

/** Rejects after `ms` with a message naming what was awaited. */
export function within(ms, promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` (bounded) until it returns a truthy value (not an empty array), and returns it. */
export async function eventually(check, what, ms = 5000, every = 25) {
  const until = Date.now() + ms;
  let last;
  while (Date.now() < until) {
    try {
      last = await check();
      if (last && !(Array.isArray(last) && last.length === 0)) return last;
    } catch (e) {
      last = e;
    }
    await sleep(every);
  }
  const detail = last instanceof Error ? last.message : JSON.stringify(last);
  throw new Error(`timed out after ${ms} ms waiting for ${what}; last: ${detail}`);
}

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

/** True once something accepts TCP connections on `port` of loopback. */
export function listening(port, host = '127.0.0.1') {
  return new Promise((r) => {
    const s = net.connect(port, host, () => { s.end(); r(true); });
    s.once('error', () => r(false));
  });
}

let launched = 0;

/**
 * Spawns a long-running process with its output in `logPath` (default: a fresh file in the log
 * folder named after `name`); `onLine` sees its stdout line by line.
 */
export function spawnLogged(name, cmd, args, env, { logPath, onLine } = {}) {
  const path = logPath ?? join(logDir, `${name}-${process.pid}-${++launched}.log`);
  const log = createWriteStream(path);
  const proc = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let buffer = '';
  proc.stdout.on('data', (d) => {
    log.write(d);
    if (!onLine) return;
    buffer += d.toString();
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      onLine(buffer.slice(0, nl));
      buffer = buffer.slice(nl + 1);
    }
  });
  proc.stderr.pipe(log, { end: false });
  // 'close' comes after the output streams end, so the log is complete when it resolves.
  const exited = new Promise((r) => {
    proc.once('close', (code, signal) => r({ code, signal }));
    // A binary that is missing or not executable: say so in its log and end as exited.
    proc.once('error', (err) => {
      log.write(`cannot start ${cmd}: ${err.message}\n`);
      r({ code: null, signal: null, error: err });
    });
  });
  return { name, proc, exited, logPath: path, log };
}

/** The processes descended from `pid` (Linux: each process's parent read from /proc). */
export function descendants(pid) {
  const children = new Map();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // The parent is the 4th field, after the command's name in parentheses.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (!children.has(ppid)) children.set(ppid, []);
      children.get(ppid).push(Number(entry));
    } catch { /* gone meanwhile */ }
  }
  const found = [];
  for (let todo = [pid]; todo.length;) {
    const next = children.get(todo.pop()) ?? [];
    found.push(...next);
    todo.push(...next);
  }
  return found;
}

/**
 * Stops a spawned process: `signal`, then SIGKILL after `ms`, to it and to every process it
 * started (a program that runs its work in child processes, such as a LiveKit agent's jobs, may
 * leave them holding its output open).
 */
export async function stopProcess({ proc, exited, name = 'a process' }, { signal = 'SIGTERM', ms = 20000 } = {}) {
  if (proc.exitCode === null && proc.signalCode === null) {
    proc.kill(signal);
    try {
      await within(ms, exited, `${name} to exit`);
    } catch {
      for (const pid of [...descendants(proc.pid), proc.pid]) {
        try { process.kill(pid, 'SIGKILL'); } catch { /* gone meanwhile */ }
      }
      await within(5000, exited, `${name} to die`);
    }
  }
  // Killed earlier by the test: wait for its output to be written out all the same.
  return within(5000, exited, `${name} output to end`);
}

/**
 * Spawns a server binary listening on port 0 and resolves with the spawned process and its
 * address once it prints "<banner> listening on http://ADDR" on `stream` (bounded).
 */
export async function launchServer({ name, bin, args = [], env, stream, banner }) {
  const started = spawnLogged(name, bin, args, env);
  const { proc, exited, logPath } = started;
  const pattern = new RegExp(`${banner} listening on http://(\\d+\\.\\d+\\.\\d+\\.\\d+:\\d+)`);
  try {
    const addr = await within(15000, new Promise((resolveAddr, reject) => {
      let buffer = '';
      const onData = (chunk) => {
        buffer += chunk.toString().replace(/\x1b\[[0-9;]*m/g, '');
        const m = buffer.match(pattern);
        if (m) {
          proc[stream].off('data', onData);
          resolveAddr(m[1]);
        }
      };
      proc[stream].on('data', onData);
      exited.then(({ code, error }) => reject(new Error(error
        ? `cannot start ${name} (${bin}): ${error.message}`
        : `${name} exited with ${code} before listening; see ${logPath}`)));
    }), `${name} to listen`);
    return { ...started, addr };
  } catch (e) {
    proc.kill('SIGKILL');
    throw e;
  }
}

/**
 * A log written to a file is plain text (no terminal colour codes: grep finds `tool=X` in it),
 * and holds no rmcp line below `warn` (its Debug dumps of whole MCP messages).
 */
export function assertPlainLog(text, path) {
  assert.ok(!text.includes('\x1b['), `log ${path} holds ANSI escape codes`);
  const rmcp = text.match(/^\S+\s+(?:TRACE|DEBUG|INFO) [^\n]*?\brmcp(?:::\w+)*: .*$|"level":"(?:TRACE|DEBUG|INFO)"[^\n]*"target":"rmcp/m);
  assert.equal(rmcp, null, `log ${path} holds rmcp's own lines below warn: ${rmcp?.[0].slice(0, 200)}`);
}

/** A server process under test whose log must never hold a whole secret it was shown. */
export class Server {
  constructor({ name = 'server', addr, proc, exited, logPath, log }) {
    Object.assign(this, { name, proc, exited, logPath, log });
    this.url = `http://${addr}`;
    this.secrets = new Set();
  }

  /** Values that must never appear whole in this process's log. */
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

  /** One request; resolves with `{status, body (JSON when it parses), headers}`. */
  async fetch(path, init = {}) {
    const res = await within(20000, fetch(this.url + path, init), `${init.method ?? 'GET'} ${path}`);
    const text = await res.text();
    let body;
    try { body = JSON.parse(text); } catch { body = text; }
    return { status: res.status, body, headers: res.headers };
  }

  /** Stops the process (SIGTERM, then SIGKILL after a bound) and checks its log for secrets. */
  async stop({ signal = 'SIGTERM' } = {}) {
    await stopProcess(this, { signal });
    await new Promise((r) => this.log.end(r));
    this.assertLogClean();
    return this.exited;
  }

  assertLogClean() {
    const text = this.logText();
    assert.ok(text.length > 0, `the ${this.name} wrote a log`);
    assertPlainLog(this.plainText(), this.logPath);
    for (const s of this.secrets) {
      assert.ok(!text.includes(s), `log ${this.logPath} contains a whole key/token/secret (${s.slice(0, 6)}…)`);
      // The hex body of a key alone would be as bad as the key.
      if (s.startsWith('va_')) assert.ok(!text.includes(s.slice(3)), `log ${this.logPath} contains a key's hex body`);
      // A session token's signature alone would let no one in, but it is the token's own part:
      // a log or a span that holds it holds a token cut in pieces.
      const signature = s.split('.').length === 3 ? s.split('.')[2] : '';
      if (signature.length >= 32) assert.ok(!text.includes(signature), `log ${this.logPath} contains a session token's signature`);
    }
  }

  logText() {
    return readFileSync(this.logPath, 'utf8');
  }

  /** What must be plain text: the log (`logText` may add what a server received). */
  plainText() {
    return readFileSync(this.logPath, 'utf8');
  }
}
