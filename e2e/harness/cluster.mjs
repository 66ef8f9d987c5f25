// What stands around several relay nodes: a real redis-server, a TCP balancer on loopback, the
// shipped haproxy config in front of two relays, and requests from chosen source addresses.
import { spawn } from 'node:child_process';
import net from 'node:net';
import http from 'node:http';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { logDir, repoRoot } from './paths.mjs';
import { freePort, listening, sleep, within } from './proc.mjs';
import { onRedisCluster, startRedisCluster } from './redis-cluster.mjs';

/**
 * A real `redis-server` on a free loopback port, with no persistence (a restart comes back
 * empty, the harder case). `stop()` and `start()` may be called again, on the same port. With
 * `E2E_REDIS=cluster`, a Redis Cluster instead (see `redis-cluster.mjs`), its `url` a
 * `redis+cluster://` one.
 */
export async function startRedis() {
  if (onRedisCluster) return startRedisCluster();
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
        if (await listening(port)) return this;
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
 * pointed at `a` and `b`, the engine's resolver dropped. Resolves once both pass its /readyz
 * check, with `{url, stop()}`.
 */
export async function startHaproxy(a, b) {
  const port = await freePort();
  const hostOf = (relay) => new URL(relay.url).host;
  const cfg = readFileSync(join(repoRoot, 'deploy/haproxy.cfg'), 'utf8')
    .replace(/^# The container engine's DNS[\s\S]*?(?=^frontend)/m, '')
    .replace(' resolvers compose', '')
    .replace('bind :3001', `bind 127.0.0.1:${port}`)
    .replace('relay-a:3001', hostOf(a))
    .replace('relay-b:3001', hostOf(b));
  const cfgPath = join(logDir, `haproxy-${process.pid}-${port}.cfg`);
  writeFileSync(cfgPath, cfg);
  const proc = spawn('haproxy', ['-db', '-f', cfgPath], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, HAPROXY_MAXCONN: '2000' } });
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
