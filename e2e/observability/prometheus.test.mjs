// What ops install (deploy/observability/), against the real thing: Debian's Prometheus scrapes a
// real relay (on Redis, so its Redis lanes are measured), a real worker and LiveKit's server
// (metrics port on) with the shipped scrape configuration (its targets pointed at this test's
// ports) after real calls of every kind; every metric docs/operations.md documents exists there;
// `promtool test rules` passes the alerts' synthetic cases; every query of the shipped Grafana
// dashboard runs against that Prometheus and returns data.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  eventually, freePort, livekitBin, logDir, repoRoot, sleep, spawnLogged, startLivekit, startRedis,
  startRelay, startWorker, stopProcess, webClientNode, within,
} from '../harness/index.mjs';

const { VoiceRelayClient } = await import(pathToFileURL(webClientNode).href);

const DEPLOY = join(repoRoot, 'deploy/observability');
const has = (cmd) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;

/** The metrics docs/operations.md documents: the first column of its metrics tables. */
function documentedMetrics() {
  const text = readFileSync(join(repoRoot, 'docs/operations.md'), 'utf8');
  const section = text.split(/^## /m).find((s) => s.startsWith('Metrics'));
  assert.ok(section, 'docs/operations.md has a Metrics section');
  const names = [...section.matchAll(/^\| `((?:relay|worker)_[a-z_]+)`/gm)].map((m) => m[1]);
  assert.ok(names.length >= 25, `only ${names.length} metrics documented`);
  return names;
}

/** The queries of the shipped dashboard, Grafana's interval variables given a value. */
function dashboardQueries() {
  const dash = JSON.parse(readFileSync(join(DEPLOY, 'grafana-dashboard.json'), 'utf8'));
  const queries = dash.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));
  assert.ok(queries.length >= 20, `${queries.length} queries`);
  return queries.map((q) => ({ ...q, expr: q.expr.replaceAll('$__rate_interval', '1m').replaceAll('$__interval', '15s') }));
}

let redis;
let relay;
let worker;
let livekit;
let prometheus;
let promUrl;
const clients = [];

async function query(expr) {
  const res = await within(10000, fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(expr)}`), `query ${expr}`);
  const body = await res.json();
  assert.equal(body.status, 'success', `${expr}: ${JSON.stringify(body)}`);
  return body.data.result;
}

before(async () => {
  assert.ok(has('prometheus') && has('promtool'), 'Debian\'s prometheus (with promtool) is installed by scripts/manage.sh test');
  assert.ok(livekitBin(), 'LiveKit\'s server is installed by scripts/manage.sh test');
  redis = await startRedis();
  relay = await startRelay({ RELAY_REDIS_URL: redis.url, RELAY_DEFAULT_TIMEOUT_MS: '800' });
  const lkPort = await freePort();
  const lkMetrics = await freePort();
  livekit = await startLivekit({
    dir: mkdtempSync(join(logDir, 'lk-prom-')), secret: relay.livekitSecret, port: lkPort, udpPort: await freePort(), prometheusPort: lkMetrics,
  });
  worker = await startWorker(relay, { VAPI_SECRET: 'vapi-secret-for-the-metrics-test' });

  // The shipped scrape configuration, its targets pointed at this test's processes.
  const dir = mkdtempSync(join(logDir, 'prometheus-'));
  const shipped = readFileSync(join(DEPLOY, 'prometheus.yml'), 'utf8');
  const config = shipped
    .replace('"relay:3001"', `"${new URL(relay.url).host}"`)
    .replace('"worker:3002"', `"${new URL(worker.url).host}"`)
    .replace('"livekit:6789"', `"127.0.0.1:${lkMetrics}"`)
    .replace(/scrape_interval: \d+s/, 'scrape_interval: 1s')
    .replace(/evaluation_interval: \d+s/, 'evaluation_interval: 1s')
    .replace('- alerts.yml', `- ${join(DEPLOY, 'alerts.yml')}`);
  assert.notEqual(config, shipped);
  const configPath = join(dir, 'prometheus.yml');
  writeFileSync(configPath, config);
  execFileSync('promtool', ['check', 'config', configPath]);
  const port = await freePort();
  promUrl = `http://127.0.0.1:${port}`;
  prometheus = spawnLogged('prometheus', 'prometheus', [
    `--config.file=${configPath}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`,
  ], { PATH: process.env.PATH });
  await eventually(async () => (await fetch(`${promUrl}/-/ready`)).ok, 'Prometheus to be ready', 30000, 200);
});

after(async () => {
  for (const c of clients) c.stop();
  if (prometheus) await stopProcess(prometheus);
  await worker?.stop();
  await relay?.stop();
  await livekit?.stop();
  await redis?.stop();
});

/** Calls of every kind, through the relay and through the worker's agent API. */
async function traffic() {
  const client = new VoiceRelayClient({ relayUrl: relay.url, transports: ['websocket'] });
  clients.push(client);
  client.handle('draw_card', async () => { await sleep(20); return { cardId: 'the-sun', cardName: 'The Sun', reversed: false }; });
  client.handle('OpenPopover', () => undefined);
  client.handle('slow', () => new Promise(() => {}));
  const token = await within(5000, client.start(), 'client.start');
  relay.remember(token.token, token.apiKey);
  await relay.waitState(token.apiKey, 'online');
  const key = token.apiKey;
  for (let i = 0; i < 3; i++) {
    assert.equal((await relay.call({ apiKey: key, toolName: 'draw_card', params: {}, awaitResult: true })).status, 200);
    assert.equal((await relay.call({ apiKey: key, toolName: 'OpenPopover', params: { message: 'm' } })).status, 200);
    assert.equal((await relay.call({ apiKey: key, toolName: 'nope', awaitResult: true })).body.error.code, 'no_handler');
    assert.equal((await relay.call({ apiKey: key, toolName: 'slow', awaitResult: true, timeoutMs: 100 })).body.error.code, 'timeout');
  }
  const agent = { authorization: `Bearer ${await relay.tokenFor(key)}`, 'x-voice-agent-key': key, 'content-type': 'application/json' };
  for (const [tool, args] of [['OpenPopover', { message: 'from the worker' }], ['enter_spread', {}], ['draw_card', { positionLabel: 'Past', promptRole: 'r' }], ['not_a_tool', {}]]) {
    const res = await worker.fetch(`/agent/tools/${tool}`, { method: 'POST', headers: agent, body: JSON.stringify(args) });
    assert.equal(res.status, 200, JSON.stringify(res.body));
  }
  // Webhooks that do not verify.
  assert.equal((await worker.fetch('/livekit/webhook', { method: 'POST', headers: { 'content-type': 'application/webhook+json', authorization: 'not-a-jwt' }, body: '{}' })).status, 401);
  assert.equal((await worker.fetch('/vapi/webhook', { method: 'POST', headers: { 'x-vapi-secret': 'wrong-secret-0123456789' }, body: '{}' })).status, 401);
  assert.equal((await worker.fetch('/readyz')).status, 200);
}

test('Prometheus scrapes the relay, the worker and LiveKit with the shipped configuration; every documented metric is there', async () => {
  await traffic();
  await eventually(async () => {
    const up = await query('up');
    return up.length === 3 && up.every((s) => s.value[1] === '1') && up;
  }, 'every target up', 20000, 500);
  // A few scrapes after the traffic, and more traffic inside them, so rates have two samples.
  await sleep(3000);
  await traffic();
  await sleep(3000);
  const missing = [];
  for (const name of documentedMetrics()) {
    // A histogram is there when its count is; a counter is documented with its _total.
    const series = await query(`{__name__=~"${name}|${name}_count"}`);
    if (series.length === 0) missing.push(name);
  }
  assert.deepEqual(missing, [], 'documented metrics Prometheus did not find');
  // No key, call id or room is a label of any series of the relay or the worker.
  const all = await query('{job=~"relay|worker"}');
  for (const s of all) {
    for (const [label, value] of Object.entries(s.metric)) {
      assert.doesNotMatch(`${label}=${value}`, /va_[0-9a-f]|c_[0-9a-f]{24}|^room/, JSON.stringify(s.metric));
    }
  }
});

test('promtool checks the rules and passes every alert\'s synthetic case', () => {
  execFileSync('promtool', ['check', 'rules', join(DEPLOY, 'alerts.yml')]);
  const out = execFileSync('promtool', ['test', 'rules', join(DEPLOY, 'alerts.test.yml')], { cwd: DEPLOY }).toString();
  assert.match(out, /SUCCESS/);
  // Every alert of the rules has a case.
  const alerts = [...readFileSync(join(DEPLOY, 'alerts.yml'), 'utf8').matchAll(/- alert: (\w+)/g)].map((m) => m[1]);
  const cases = readFileSync(join(DEPLOY, 'alerts.test.yml'), 'utf8');
  for (const a of alerts) assert.match(cases, new RegExp(`alertname: ${a}\\b`), `${a} has no test case`);
  assert.ok(alerts.length >= 5);
});

test('every query of the shipped Grafana dashboard returns data from that Prometheus', async () => {
  const empty = [];
  for (const { panel, expr } of dashboardQueries()) {
    const result = await query(expr);
    if (result.length === 0) empty.push(`${panel}: ${expr}`);
  }
  assert.deepEqual(empty, [], 'dashboard queries without data');
});
