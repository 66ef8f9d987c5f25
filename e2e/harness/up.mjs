#!/usr/bin/env node
// Starts parts of the system for a runner written in another language (the shell runners of the
// API contract and the MCP conformance suites), through the same harness the JS suites use:
//
//   node e2e/harness/up.mjs --relay [--worker] [--tab] [--relay-env K=V]… [--worker-env K=V]…
//
// It prints one JSON line on stdout once everything is ready: the relay's and the worker's URLs,
// log files and secrets, and the bound tab's key. It stops everything (SIGTERM, bounded) when
// its standard input closes or on SIGTERM/SIGINT, then checks the logs: it exits 1 when a log
// holds a whole key, token or secret (or when something failed to start), 0 otherwise.
import { createInterface } from 'node:readline';
import { io } from 'socket.io-client';
import { Tab, issuerSecret, secret, startRelay, startWorker } from './relay.mjs';

const USAGE = 'usage: up.mjs --relay [--worker] [--tab] [--relay-env K=V]... [--worker-env K=V]... [--json]';

function parse(argv) {
  const opts = { relay: false, worker: false, tab: false, relayEnv: {}, workerEnv: {} };
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    if (arg === '--relay' || arg === '--worker' || arg === '--tab') opts[arg.slice(2)] = true;
    else if (arg === '--json') { /* the only output format */ }
    else if (arg === '--relay-env' || arg === '--worker-env') {
      const pair = argv[++i] ?? '';
      const eq = pair.indexOf('=');
      if (eq < 1) throw new Error(`${arg} takes KEY=VALUE, got "${pair}"`);
      opts[arg === '--relay-env' ? 'relayEnv' : 'workerEnv'][pair.slice(0, eq)] = pair.slice(eq + 1);
    } else throw new Error(`unknown option ${arg}\n${USAGE}`);
  }
  if (!opts.relay) throw new Error(`--relay is required (the worker and the tab need one)\n${USAGE}`);
  return opts;
}

let opts;
try {
  opts = parse(process.argv.slice(2));
} catch (e) {
  console.error(`up.mjs: ${e.message}`);
  process.exit(2);
}

const started = [];
let tabSocket;
let stopping;

async function stopAll() {
  stopping ??= (async () => {
    tabSocket?.close();
    let rc = 0;
    for (const server of started.reverse()) {
      try {
        await server.stop();
      } catch (e) {
        console.error(`up.mjs: ${e.message}`);
        rc = 1;
      }
    }
    return rc;
  })();
  return stopping;
}

async function main() {
  // Issuer mode needs the app backend's secret: a fresh one unless given.
  const issuer = opts.relayEnv.RELAY_TOKEN_MODE === 'issuer' && !opts.relayEnv.RELAY_TOKEN_ISSUER_SECRET
    ? { RELAY_TOKEN_ISSUER_SECRET: issuerSecret() } : {};
  const relay = await startRelay({ RUST_LOG: 'info', ...issuer, ...opts.relayEnv });
  started.push(relay);
  const out = {
    relay: {
      url: relay.url,
      log: relay.logPath,
      workerSecret: relay.workerSecret,
      operatorSecret: relay.operatorSecret,
      livekitSecret: relay.livekitSecret,
      issuerSecret: relay.issuerSecret ?? null,
    },
  };
  if (opts.worker) {
    const vapiSecret = opts.workerEnv.VAPI_SECRET ?? secret('vs');
    const worker = await startWorker(relay, { RUST_LOG: 'info', VAPI_SECRET: vapiSecret, ...opts.workerEnv });
    started.push(worker);
    out.worker = { url: worker.url, log: worker.logPath, vapiSecret };
  }
  if (opts.tab) {
    const minted = await relay.token();
    tabSocket = io(relay.url, { transports: ['websocket'], auth: { token: minted.token }, forceNew: true, reconnection: false, timeout: 5000 });
    const tab = new Tab(tabSocket);
    await tab.connected();
    await relay.waitState(minted.apiKey, 'online');
    out.tab = { apiKey: minted.apiKey, agentToken: minted.agentToken };
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

const finish = async () => process.exit(await stopAll());
process.once('SIGTERM', finish);
process.once('SIGINT', finish);
// Standard input closing (the runner ended or closed its end) stops everything.
createInterface({ input: process.stdin }).once('close', finish);

main().catch(async (e) => {
  console.error(`up.mjs: ${e.message}`);
  await stopAll();
  process.exit(1);
});
