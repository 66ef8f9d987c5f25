// A Redis Cluster on loopback for the cross-node tests (`E2E_REDIS=cluster`): six
// `redis-server --cluster-enabled yes` on free ports (three primaries, a replica each), joined
// by `redis-cli --cluster create`. `stop()` kills every server and `start()` brings them back on
// the same ports with their cluster files, empty (nothing is persisted): the cluster's meaning
// of "Redis restarted empty".
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { logDir } from './paths.mjs';
import { freePort, listening, sleep, within } from './proc.mjs';

/** Whether the cross-node tests run on a Redis Cluster (`E2E_REDIS=cluster`). */
export const onRedisCluster = process.env.E2E_REDIS === 'cluster';

function cli(args, ms = 20000) {
  return new Promise((resolve) => {
    execFile('redis-cli', args, { timeout: ms }, (err, stdout, stderr) => resolve({ ok: !err, out: `${stdout}${stderr}` }));
  });
}

async function until(what, ms, check) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await sleep(100);
  }
  throw new Error(`${what} within ${ms} ms`);
}

export async function startRedisCluster() {
  const dir = mkdtempSync(join(tmpdir(), 'e2e-redis-cluster-'));
  // Each server's cluster bus gets its own free port: the default, the client port plus 10,000,
  // does not exist above 55535, and Redis refuses to start there.
  const taken = new Set();
  while (taken.size < 12) taken.add(await freePort());
  const [ports, busPorts] = [[...taken].slice(0, 6), [...taken].slice(6)];
  const cluster = {
    cluster: true,
    ports,
    port: ports[0],
    url: `redis+cluster://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`,
    procs: [],
    created: false,
    async start() {
      this.procs = ports.map((port, i) => {
        const proc = spawn('redis-server', [
          '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
          '--cluster-enabled', 'yes', '--cluster-port', String(busPorts[i]), '--cluster-config-file', join(dir, `nodes-${port}.conf`),
          '--cluster-node-timeout', '2000', '--dir', dir,
          '--logfile', join(logDir, `redis-cluster-${process.pid}-${port}.log`),
        ], { stdio: 'ignore' });
        return { proc, exited: new Promise((r) => proc.once('exit', r)) };
      });
      for (const port of ports) await until(`redis-server on port ${port}`, 10000, () => listening(port));
      if (!this.created) {
        const made = await cli(['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '1', '--cluster-yes']);
        if (!made.ok) throw new Error(`redis-cli --cluster create failed: ${made.out}`);
        this.created = true;
      }
      for (const port of ports) {
        await until(`cluster_state:ok on port ${port}`, 30000, async () => (await cli(['-p', String(port), 'CLUSTER', 'INFO'], 2000)).out.includes('cluster_state:ok'));
        // A replica takes over only once it has synchronised with its primary.
        await until(`replication on port ${port}`, 30000, async () => {
          const info = (await cli(['-p', String(port), 'INFO', 'replication'], 2000)).out;
          return info.includes('role:master') || info.includes('master_link_status:up');
        });
      }
      return this;
    },
    /**
     * SIGKILLs the primary holding `name` (a key) and waits until its replica took over: the
     * killed server is marked failed and every live server says `cluster_state:ok`. Returns the
     * killed server's port.
     */
    async killPrimaryOf(name) {
      let killed;
      for (const [i, port] of ports.entries()) {
        const role = await cli(['-p', String(port), 'ROLE'], 2000);
        if (!role.out.startsWith('master')) continue;
        const has = await cli(['-p', String(port), 'EXISTS', name], 2000);
        if (has.out.trim() !== '1') continue;
        killed = port;
        this.procs[i].proc.kill('SIGKILL');
        await within(5000, this.procs[i].exited, 'the primary to exit');
        break;
      }
      if (!killed) throw new Error(`no primary holds ${name}`);
      const live = ports.filter((p) => p !== killed);
      await until('the replica to take over', 30000, async () => {
        for (const port of live) {
          const info = await cli(['-p', String(port), 'CLUSTER', 'INFO'], 2000);
          if (!info.out.includes('cluster_state:ok')) return false;
          const nodes = await cli(['-p', String(port), 'CLUSTER', 'NODES'], 2000);
          const line = nodes.out.split('\n').find((l) => l.includes(`:${killed}@`));
          if (!line || !line.split(' ')[2].split(',').includes('fail')) return false;
        }
        return true;
      });
      return killed;
    },
    async stop() {
      for (const { proc, exited } of this.procs) {
        if (proc.exitCode !== null) continue;
        proc.kill('SIGKILL');
        await within(5000, exited, 'redis-server to exit');
      }
    },
  };
  return cluster.start();
}
