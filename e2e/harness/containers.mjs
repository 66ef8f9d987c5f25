// The deploy files under a real container engine: podman (rootful, with the project's
// containers.conf), the image built from deploy/Dockerfile on the local stand-in bases
// (e2e/deploy/bases.Containerfile, prepared by scripts/lib/run.sh ensure_containers), and the
// compose stacks brought up with podman-compose. Every podman call is bounded; a stack whose
// container exits or never gets ready fails with that container's last log lines.
import { spawn } from 'node:child_process';
import { createWriteStream, mkdtempSync, realpathSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { logDir, repoRoot, toolsDir } from './paths.mjs';
import { freePort, sleep } from './proc.mjs';
import { secret, sessionKeyEntry } from './relay.mjs';

/** podman's settings for this machine (ulimits, runtime): scripts/lib/containers.conf. */
export const containersConf = join(repoRoot, 'scripts/lib/containers.conf');
export const podmanCompose = process.env.PODMAN_COMPOSE ?? join(toolsDir, 'containers/venv/bin/podman-compose');
const engineEnv = () => ({ ...process.env, CONTAINERS_CONF: process.env.CONTAINERS_CONF ?? containersConf });

/** The stand-ins for the public images the deploy files name (ensure_containers builds them). */
export const BASES = {
  rust: 'localhost/va-base/rust',
  node: 'localhost/va-base/node',
  runtime: 'localhost/va-base/debian:bookworm',
  redis: 'localhost/va-base/redis',
  haproxy: 'localhost/va-base/haproxy',
  livekit: 'localhost/va-base/livekit',
};
/** The project's image as the tests build it; E2E_DEPLOY_IMAGE names one built already (then
 * buildImage builds nothing). */
export const IMAGE = process.env.E2E_DEPLOY_IMAGE ?? 'localhost/voice-relay:e2e';

/**
 * Runs a command of the container engine, bounded by `ms`; resolves with its exit code and
 * output (with `log`, the output also goes to that file as it comes).
 */
export function engine(cmd, args, { ms = 120000, log, cwd = repoRoot } = {}) {
  return new Promise((resolveE) => {
    // Its own process group: podman-compose runs podman, which may wait on a container forever.
    const p = spawn(cmd, args, { cwd, env: engineEnv(), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const file = log ? createWriteStream(log, { flags: 'a' }) : null;
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => { stdout += d; file?.write(d); });
    p.stderr.on('data', (d) => { stderr += d; file?.write(d); });
    const timer = setTimeout(() => {
      stderr += `\n(${cmd} ${args.join(' ')} stopped after ${ms} ms)`;
      try { process.kill(-p.pid, 'SIGKILL'); } catch { /* gone */ }
    }, ms);
    p.on('error', (e) => { stderr += `cannot run ${cmd}: ${e.message}`; });
    p.on('close', (code) => {
      clearTimeout(timer);
      const done = () => resolveE({ code, stdout, stderr, out: stdout + stderr });
      if (file) file.end(done);
      else done();
    });
  });
}

export const podman = (args, opts) => engine('podman', args, opts);

/** podman, failing with its output unless it exits 0. */
export async function podmanOk(args, opts) {
  const r = await podman(args, opts);
  if (r.code !== 0) throw new Error(`podman ${args.join(' ')} failed (${r.code}): ${r.out.trim().slice(-2000)}`);
  return r.stdout;
}

/** The last lines of a file's text. */
const tail = (text, n) => text.trimEnd().split('\n').slice(-n).join('\n');

/** Fails unless every stand-in base image exists (they are made by the install step). */
export async function assertBases() {
  for (const image of Object.values(BASES)) {
    const r = await podman(['image', 'exists', image]);
    if (r.code !== 0) throw new Error(`the base image ${image} is missing: run scripts/lib/run.sh ensure_containers`);
  }
}

/**
 * The bind mounts that give the build stages this machine's toolchain and trust roots: the host's
 * rustup toolchains and cargo proxies where rust:*-slim keeps them, the host's node and npm where
 * node:*-slim keeps them, the host's certificate bundle (the network may reach crates.io and npm
 * through a proxy of its own). Only RUN steps see them; nothing of them lands in the image.
 */
function toolchainMounts() {
  const home = homedir();
  const rustup = process.env.RUSTUP_HOME ?? join(home, '.rustup');
  const cargoBin = join(process.env.CARGO_HOME ?? join(home, '.cargo'), 'bin');
  const node = realpathSync(process.execPath);
  const npm = dirname(dirname(realpathSync(join(dirname(process.execPath), 'npm'))));
  const ca = process.env.SSL_CERT_FILE ?? '/etc/ssl/certs/ca-certificates.crt';
  return [
    `${rustup}:/usr/local/rustup:ro`,
    `${cargoBin}:/usr/local/cargo/bin:ro`,
    `${node}:/usr/local/bin/node:ro`,
    `${npm}:/usr/local/lib/node_modules/npm:ro`,
    `${ca}:/etc/ssl/certs/ca-certificates.crt:ro`,
  ].flatMap((v) => ['-v', v]);
}

/**
 * Builds deploy/Dockerfile as `tag` (Docker format, so HEALTHCHECK stays) on the stand-in bases;
 * the build's output goes to test-logs/. Resolves with the seconds it took.
 */
export async function buildImage(tag = IMAGE, { ms = 45 * 60 * 1000 } = {}) {
  await assertBases();
  if (process.env.E2E_DEPLOY_IMAGE) return 0;
  const log = join(logDir, 'deploy-image-build.log');
  const started = Date.now();
  const r = await podman([
    'build', '--pull=never', '--format', 'docker', '-f', 'deploy/Dockerfile', '-t', tag,
    '--build-arg', `RUST_IMAGE=${BASES.rust}`,
    '--build-arg', `NODE_IMAGE=${BASES.node}`,
    '--build-arg', `RUNTIME_IMAGE=${BASES.runtime}`,
    ...toolchainMounts(),
    '.',
  ], { ms, log });
  if (r.code !== 0) throw new Error(`podman build of deploy/Dockerfile failed (${r.code}); see ${log}:\n${tail(r.out, 40)}`);
  return (Date.now() - started) / 1000;
}

/** `podman image inspect` of one image, as an object. */
export async function inspectImage(image) {
  return JSON.parse(await podmanOk(['image', 'inspect', image]))[0];
}

/** The secrets one stack shares between its services, fresh for each test stack. */
export function stackSecrets() {
  return {
    LIVEKIT_API_KEY: 'devkey',
    LIVEKIT_API_SECRET: secret('lk'),
    RELAY_WORKER_SECRET: secret('ws'),
    RELAY_OPERATOR_SECRET: secret('os'),
    RELAY_SESSION_KEYS: sessionKeyEntry(),
    RELAY_TOKEN_ISSUER_SECRET: secret('is'),
    VAPI_SECRET: secret('vapi'),
  };
}

/**
 * An agent's session token for `apiKey` of `stack`, minted once by the relay at `url` with the
 * worker's credential (POST /api/voice-agent/sessions), as the worker does for each user.
 */
export async function agentCredential(stack, apiKey, url = stack.relayUrl) {
  stack.agentTokens ??= new Map();
  if (!stack.agentTokens.has(apiKey)) {
    const res = await fetch(`${url}/api/voice-agent/sessions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${stack.env.RELAY_WORKER_SECRET}`, 'content-type': 'application/json' },
      body: JSON.stringify({ apiKey }),
      signal: AbortSignal.timeout(20000),
    });
    const body = await res.json().catch(() => null);
    if (res.status !== 200) throw new Error(`no session token for the key: ${res.status} ${JSON.stringify(body)}`);
    stack.remember(body.token);
    stack.agentTokens.set(apiKey, body.token);
  }
  return stack.agentTokens.get(apiKey);
}

/** Values no container's log may hold whole: the secrets, and each signing key's seed. */
function secretValues(env) {
  const values = Object.entries(env).filter(([k, v]) => /SECRET/.test(k) && v).map(([, v]) => v);
  const seeds = (env.RELAY_SESSION_KEYS ?? '').split(',').map((entry) => entry.split(':')[1]).filter(Boolean);
  return [...values, ...seeds];
}

/** Every project this suite brings up is named with this prefix. */
const PROJECT_PREFIX = 'vae2e';

/**
 * Removes what runs of this suite that died left behind: their containers, pods and networks
 * (a network left behind would hold its fixed subnet).
 */
export async function removeStale() {
  const names = async (args) => (await podmanOk(args)).split('\n').filter((n) => n.startsWith(PROJECT_PREFIX));
  const containers = await names(['ps', '-a', '--format', '{{.Names}}']);
  if (containers.length) await podman(['rm', '-f', '-t', '2', ...containers], { ms: 120000 });
  const pods = await names(['pod', 'ps', '--format', '{{.Name}}']);
  if (pods.length) await podman(['pod', 'rm', '-f', ...pods]);
  const networks = await names(['network', 'ls', '--format', '{{.Name}}']);
  if (networks.length) await podman(['network', 'rm', '-f', ...networks]);
}

/**
 * A compose stack of deploy/ under podman-compose: one env file (secrets, images, published
 * ports on loopback) written to a fresh folder. The project's name is new for each stack:
 * podman 4.3 hands out a network's addresses one after the other across runs of the same
 * network name (ignoring `ip_range`), so a reused name would sooner or later give a fixed
 * address (the balancer's) to another container first.
 */
export class ComposeStack {
  constructor({ file, name, env }) {
    const project = `${PROJECT_PREFIX}${name}${process.pid}${Date.now() % 100000}`;
    Object.assign(this, { file, project, env });
    this.dir = mkdtempSync(join(tmpdir(), `${project}-`));
    this.envFile = join(this.dir, 'stack.env');
    writeFileSync(this.envFile, Object.entries(env).map(([k, v]) => `${k}=${v}`).join('\n') + '\n', { mode: 0o600 });
    this.log = join(logDir, `deploy-${project}.log`);
    this.seen = new Set(secretValues(env));
  }

  compose(args, ms = 300000) {
    return engine(podmanCompose, ['-p', this.project, '--env-file', this.envFile, '-f', join(repoRoot, 'deploy', this.file), ...args], { ms, log: this.log });
  }

  /** `up -d`; fails with the output when podman-compose does. */
  async up() {
    const r = await this.compose(['up', '-d']);
    if (r.code !== 0) throw new Error(`podman-compose up failed (${r.code}):\n${tail(r.out, 40)}\n${await this.describe()}`);
  }

  /** `down -v`, then what is left of the project: containers, pods, networks, volumes. */
  async down() {
    const r = await this.compose(['down', '-v', '-t', '25'], 180000);
    return { code: r.code, out: r.out, left: await this.leftovers() };
  }

  async leftovers() {
    const label = `label=io.podman.compose.project=${this.project}`;
    const list = async (args) => (await podmanOk(args)).split('\n').filter(Boolean);
    return {
      containers: await list(['ps', '-a', '--filter', label, '--format', '{{.Names}}']),
      pods: await list(['pod', 'ps', '--filter', `name=${this.project}`, '--format', '{{.Name}}']),
      networks: (await list(['network', 'ls', '--format', '{{.Name}}'])).filter((n) => n.startsWith(`${this.project}_`)),
      volumes: await list(['volume', 'ls', '--filter', label, '--format', '{{.Name}}']),
    };
  }

  /** The container of a service. */
  container(service) {
    return `${this.project}_${service}_1`;
  }

  /** Each container of the project with its state. */
  async states() {
    const out = await podmanOk(['ps', '-a', '--filter', `label=io.podman.compose.project=${this.project}`, '--format', 'json']);
    return JSON.parse(out || '[]').map((c) => ({ name: c.Names[0], state: c.State, exitCode: c.ExitCode, restarts: c.Restarts ?? 0 }));
  }

  /** A container's last log lines. conmon writes them out after the process ended: a container
   * that just exited may show none yet, so an empty answer is asked again (bounded). */
  async logs(container, lines = 30) {
    let r;
    for (let attempt = 0; attempt < 10; attempt += 1) {
      r = await podman(['logs', '--tail', String(lines), container]);
      if (r.out.trim()) break;
      await sleep(300);
    }
    return r.out;
  }

  /** Every container's state and last log lines, for a failure's message. */
  async describe(lines = 30) {
    const parts = [];
    for (const c of await this.states().catch(() => [])) {
      parts.push(`--- ${c.name}: ${c.state} (exit ${c.exitCode})\n${tail(await this.logs(c.name, lines), lines)}`);
    }
    return parts.join('\n');
  }

  /**
   * Polls `checks` (name → async function resolving true when ready) until all pass, within
   * `ms`. A container of the project that exits fails at once; either way the failure carries
   * every container's state and last log lines.
   */
  async ready(checks, ms = 120000) {
    const until = Date.now() + ms;
    const pending = new Map(Object.entries(checks));
    while (pending.size && Date.now() < until) {
      for (const [name, check] of pending) {
        if (await check().catch(() => false)) pending.delete(name);
      }
      const exited = (await this.states()).filter((c) => c.state === 'exited' || c.state === 'stopped');
      if (exited.length) {
        throw new Error(`${exited.map((c) => `${c.name} exited (${c.exitCode})`).join(', ')} before the stack was ready:\n${await this.describe()}`);
      }
      if (pending.size) await sleep(500);
    }
    if (pending.size) throw new Error(`not ready within ${ms} ms: ${[...pending.keys()].join(', ')}\n${await this.describe()}`);
  }

  /** Runs the container's own health check (podman runs none by itself without systemd). */
  async healthy(container, ms = 30000) {
    const until = Date.now() + ms;
    let last;
    while (Date.now() < until) {
      last = await podman(['healthcheck', 'run', container]);
      if (last.code === 0) return true;
      await sleep(500);
    }
    throw new Error(`${container} never passed its health check: ${last?.out}\n${await this.describe()}`);
  }

  /** Values a test saw that no container's log may hold whole (keys, tokens). */
  remember(...values) {
    for (const v of values) if (typeof v === 'string' && v.length >= 8) this.seen.add(v);
  }

  /**
   * Every container's whole log into test-logs/, checked for every secret, key and token the
   * test saw; resolves with the logs by container name.
   */
  async collectLogs() {
    const logs = {};
    for (const c of await this.states()) {
      const r = await podman(['logs', c.name]);
      logs[c.name] = r.out;
      writeFileSync(join(logDir, `deploy-${c.name}.log`), r.out);
    }
    const leaks = [];
    for (const [name, text] of Object.entries(logs)) {
      for (const s of this.seen) {
        if (text.includes(s) || (s.startsWith('va_') && text.includes(s.slice(3)))) leaks.push(`${name} holds ${s.slice(0, 6)}…`);
      }
    }
    return { logs, leaks };
  }
}

/**
 * Brings up deploy/`file` on the local images with fresh secrets, every port published on
 * loopback only (free ports), and waits (bounded) until the relay (or the balancer), the worker
 * and LiveKit answer there. Resolves with the stack, its URLs and the seconds it took to be
 * ready; `extraEnv` adds to its env file.
 */
export async function startComposeStack(file, name, extraEnv = {}) {
  await removeStale();
  const ports = { relay: await freePort(), worker: await freePort(), livekit: await freePort(), livekitTcp: await freePort() };
  // LiveKit's 61 media ports (UDP), somewhere in 44000-47999.
  const udp = 44000 + Math.floor(Math.random() * 60) * 64;
  const stack = new ComposeStack({
    file,
    name,
    env: {
      ...stackSecrets(),
      VOICE_RELAY_IMAGE: IMAGE,
      LIVEKIT_IMAGE: BASES.livekit,
      REDIS_IMAGE: BASES.redis,
      HAPROXY_IMAGE: BASES.haproxy,
      PUBLISH_ADDRESS: '127.0.0.1',
      PUBLISH_RELAY_PORT: String(ports.relay),
      PUBLISH_WORKER_PORT: String(ports.worker),
      PUBLISH_LIVEKIT_PORT: String(ports.livekit),
      PUBLISH_LIVEKIT_TCP_PORT: String(ports.livekitTcp),
      PUBLISH_LIVEKIT_UDP_PORTS: `${udp}-${udp + 60}`,
      LIVEKIT_PUBLIC_URL: `ws://127.0.0.1:${ports.livekit}`,
      // The open-file limit here is 20,000: HAProxy needs two per connection.
      HAPROXY_MAXCONN: '5000',
      ...extraEnv,
    },
  });
  stack.relayUrl = `http://127.0.0.1:${ports.relay}`;
  stack.workerUrl = `http://127.0.0.1:${ports.worker}`;
  stack.livekitUrl = `http://127.0.0.1:${ports.livekit}`;
  const status = async (url) => (await fetch(url, { signal: AbortSignal.timeout(3000) })).status === 200;
  const started = Date.now();
  try {
    await stack.up();
    await stack.ready({
      'the relay\'s /readyz': () => status(`${stack.relayUrl}/readyz`),
      'the worker\'s /healthz': () => status(`${stack.workerUrl}/healthz`),
      'LiveKit\'s HTTP port': () => status(stack.livekitUrl),
    });
  } catch (e) {
    await stack.down().catch(() => {});
    throw e;
  }
  stack.readySeconds = (Date.now() - started) / 1000;
  return stack;
}
