// Redis set-ups beyond one server, for the cross-node tests: a primary with a replica watched by
// three sentinels (real `redis-server` and `redis-server --sentinel` processes on free loopback
// ports, no persistence). Every wait is bounded.

import { spawn, execFile } from 'node:child_process';
import net from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { logDir } from './paths.mjs';
import { freePort, sleep, within } from './proc.mjs';


/** Runs `redis-cli -p port args…`; resolves with its trimmed output. */
export function redisCli(port, ...args) {
  return within(5000, new Promise((resolveC, reject) => {
    execFile('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], (err, out) => {
      if (err) reject(err); else resolveC(out.trim());
    });
  }), `redis-cli ${args.join(' ')}`);
}

async function listening(port, ms, what) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await new Promise((r) => {
      const s = net.connect(port, '127.0.0.1', () => { s.end(); r(true); });
      s.once('error', () => r(false));
    })) return;
    await sleep(50);
  }
  throw new Error(`${what} did not start on port ${port}`);
}

async function until(ms, what, check) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try { if (await check()) return; } catch (e) { last = e; }
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

function server(args, name) {
  const proc = spawn('redis-server', [...args, '--logfile', join(logDir, `${name}-${process.pid}.log`)], { stdio: 'ignore' });
  const exited = new Promise((r) => proc.once('exit', r));
  return { proc, exited };
}

/**
 * A primary and one replica (`redis-server`), and three sentinels monitoring them as `name`
 * with a quorum of two, `down-after-milliseconds` = `downAfterMs`. `url` is the relay's
 * `redis+sentinel://` URL. `failover()` asks a sentinel to fail over (the primary stays up and
 * becomes a replica); `killPrimary()` kills the primary with SIGKILL. Both resolve once every
 * sentinel names the new primary and it answers as one.
 */
export async function startSentinels({ name = 'main', downAfterMs = 1000 } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'relay-sentinel-'));
  const dataPorts = [await freePort(), await freePort()];
  const data = new Map();
  for (const [i, port] of dataPorts.entries()) {
    const replicaOf = i === 0 ? [] : ['--replicaof', '127.0.0.1', String(dataPorts[0])];
    data.set(port, server(['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--dbfilename', `dump-${port}.rdb`, ...replicaOf], `redis-data-${port}`));
    await listening(port, 10000, 'redis-server');
  }
  const sentinelPorts = [await freePort(), await freePort(), await freePort()];
  const sentinels = [];
  for (const port of sentinelPorts) {
    const conf = join(dir, `sentinel-${port}.conf`);
    writeFileSync(conf, [
      `port ${port}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${name} 127.0.0.1 ${dataPorts[0]} 2`,
      `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
      `sentinel failover-timeout ${name} 5000`,
      `sentinel parallel-syncs ${name} 1`,
      '',
    ].join('\n'));
    sentinels.push(server([conf, '--sentinel'], `redis-sentinel-${port}`));
    await listening(port, 10000, 'redis-sentinel');
  }
  const set = {
    name,
    dir,
    dataPorts,
    sentinelPorts,
    url: `redis+sentinel://${sentinelPorts.map((p) => `127.0.0.1:${p}`).join(',')}/${name}`,
    /** The primary's port as each sentinel names it. */
    async named() {
      const ports = [];
      for (const p of sentinelPorts) {
        const out = await redisCli(p, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name).catch(() => '');
        ports.push(Number(out.split('\n')[1]));
      }
      return ports;
    },
    async primary() {
      return (await this.named())[0];
    },
    /** Resolves once every sentinel names `port` and it says it is the primary. */
    async settledOn(port, ms = 30000) {
      await until(ms, `every sentinel to name ${port} as the primary`, async () => {
        const named = await this.named();
        if (!named.every((p) => p === port)) return false;
        return (await redisCli(port, 'ROLE')).startsWith('master');
      });
    },
    /** Resolves once the sentinels know the replica and each other (a failover needs both). */
    async ready(ms = 30000) {
      await this.settledOn(dataPorts[0], ms);
      await until(ms, 'the replica in sync and the sentinels to know each other', async () => {
        const info = await redisCli(dataPorts[1], 'INFO', 'replication');
        if (!/master_link_status:up/.test(info)) return false;
        for (const p of sentinelPorts) {
          const master = await redisCli(p, 'SENTINEL', 'MASTER', name);
          const field = (f) => Number(master.split('\n')[master.split('\n').indexOf(f) + 1]);
          if (field('num-slaves') < 1 || field('num-other-sentinels') < 2) return false;
        }
        return true;
      });
      return this;
    },
    /** `SENTINEL FAILOVER`; resolves with the new primary's port once every sentinel names it. */
    async failover(ms = 30000) {
      const old = await this.primary();
      const next = dataPorts.find((p) => p !== old);
      await redisCli(sentinelPorts[0], 'SENTINEL', 'FAILOVER', name);
      await this.settledOn(next, ms);
      return next;
    },
    /** SIGKILL of the primary; resolves with the new primary's port once every sentinel names it. */
    async killPrimary(ms = 30000) {
      const old = await this.primary();
      const next = dataPorts.find((p) => p !== old);
      const { proc, exited } = data.get(old);
      proc.kill('SIGKILL');
      await within(5000, exited, 'the primary to die');
      await this.settledOn(next, ms);
      return next;
    },
    /** Starts the data server on `port` again (after `killPrimary`), as a replica of the primary. */
    async restart(port) {
      const { proc } = data.get(port);
      if (proc.exitCode === null && proc.signalCode === null) return;
      const primary = await this.primary();
      data.set(port, server(['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--dbfilename', `dump-${port}.rdb`, '--replicaof', '127.0.0.1', String(primary)], `redis-data-${port}`));
      await listening(port, 10000, 'redis-server');
      await until(30000, 'the restarted server to sync as a replica', async () =>
        /master_link_status:up/.test(await redisCli(port, 'INFO', 'replication')));
    },
    async stop() {
      for (const { proc, exited } of [...sentinels, ...data.values()]) {
        if (proc.exitCode === null && proc.signalCode === null) {
          proc.kill('SIGKILL');
          await within(5000, exited, 'a redis process to exit');
        }
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return set.ready();
}
