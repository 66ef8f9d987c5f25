// LiveKit's own server for the voice tests: the binary scripts/manage.sh installs (or one on the
// PATH), configured as manage.sh configures it (one UDP port, no TCP fallback, webhooks to the
// worker signed with the same key), optionally with its ICE address on a given interface.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { AccessToken, WebhookEvent } from 'livekit-server-sdk';
import { join } from 'node:path';
import { toolsDir } from './paths.mjs';
import { eventually, spawnLogged, stopProcess } from './proc.mjs';
import { LIVEKIT_KEY } from './relay.mjs';

/** The LiveKit server binary: the one in the tools folder, else one on the PATH, else null. */
export function livekitBin() {
  const local = join(toolsDir, 'bin/livekit-server');
  if (existsSync(local)) return local;
  try {
    return execFileSync('sh', ['-c', 'command -v livekit-server']).toString().trim() || null;
  } catch {
    return null;
  }
}

/**
 * Writes the config into `dir` and starts the server; resolves once its HTTP port answers, with
 * `{url, wsUrl, logPath, stop()}`. `nodeIp` puts its ICE candidates on that address only;
 * `prometheusPort` turns its metrics on (`http://127.0.0.1:<port>/metrics`).
 */
export async function startLivekit({ dir, secret, webhookUrl, port = 7880, udpPort = 7882, nodeIp, logPath, room = {}, prometheusPort }) {
  const bin = livekitBin();
  if (!bin) throw new Error('no LiveKit server: scripts/manage.sh test installs it into .tools/bin');
  const config = join(dir, 'livekit.yaml');
  writeFileSync(config, [
    `port: ${port}`,
    'bind_addresses: [127.0.0.1]',
    ...(prometheusPort ? [`prometheus_port: ${prometheusPort}`] : []),
    'keys:',
    `  ${LIVEKIT_KEY}: ${secret}`,
    'rtc:',
    `  udp_port: ${udpPort}`,
    '  tcp_port: 0',
    ...(nodeIp ? [`  node_ip: ${nodeIp}`, '  use_external_ip: false', '  ips:', `    includes: [${nodeIp}/32]`] : ['  use_external_ip: false', '  enable_loopback_candidate: true']),
    ...(webhookUrl ? ['webhook:', `  api_key: ${LIVEKIT_KEY}`, `  urls: ['${webhookUrl}']`] : []),
    ...(Object.keys(room).length ? ['room:', ...Object.entries(room).map(([k, v]) => `  ${k}: ${v}`)] : []),
    'logging:',
    '  level: info',
    '',
  ].join('\n'), { mode: 0o600 });
  const proc = spawnLogged('livekit', bin, ['--config', config], { PATH: process.env.PATH, HOME: process.env.HOME }, { logPath });
  const url = `http://127.0.0.1:${port}`;
  const server = { ...proc, url, wsUrl: `ws://127.0.0.1:${port}`, stop: () => stopProcess(proc, { ms: 10000 }) };
  try {
    await eventually(async () => (await fetch(`${url}/`)).ok, 'the LiveKit server', 15000, 100);
  } catch (e) {
    await server.stop();
    throw e;
  }
  return server;
}

/**
 * A webhook as LiveKit's server sends it about a participant (`participant_joined`,
 * `participant_left`, …) whose metadata holds `apiKey`, signed with LiveKit's own SDK: the
 * stand-in for a server that cannot run in a test without media.
 */
export function participantEvent(name, { room, identity, apiKey }) {
  const ev = new WebhookEvent({
    id: `EV_${Math.random().toString(16).slice(2)}`,
    createdAt: BigInt(Math.floor(Date.now() / 1000)),
    room: { sid: 'RM_test', name: room },
    participant: { sid: 'PA_test', identity, metadata: JSON.stringify({ apiKey }) },
  });
  ev.event = name;
  return ev;
}

/**
 * Posts `event` to `worker`'s `/livekit/webhook`, signed with `secret` (the body's SHA-256 in
 * the JWT, as LiveKit signs); `tamper` changes the body after signing. The JWT is remembered as
 * a secret of `relay`'s logs.
 */
export async function sendWebhook(worker, event, { secret, relay, tamper = false }) {
  const body = event.toJsonString();
  const at = new AccessToken(LIVEKIT_KEY, secret);
  at.sha256 = createHash('sha256').update(body).digest('base64');
  const jwt = await at.toJwt();
  relay?.remember(jwt);
  const sent = tamper ? body.replace('tab-', 'tab-x') : body;
  return worker.fetch('/livekit/webhook', { method: 'POST', headers: { 'content-type': 'application/webhook+json', authorization: jwt }, body: sent });
}
