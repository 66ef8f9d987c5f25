// Every path the tests take from the rest of the tree, in one place: the binaries under test, the
// web build outputs and sources, the tools folder, the log folder. Environment variables override
// the binaries' and folders' defaults.
import { mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const e2eDir = join(repoRoot, 'e2e');

const target = process.env.CARGO_TARGET_DIR ?? join(repoRoot, 'target');
export const relayBin = process.env.RELAY_BIN ?? join(target, 'debug/relay');
export const workerBin = process.env.WORKER_BIN ?? join(target, 'debug/agent-worker');
export const loadgenBin = process.env.LOADGEN_BIN ?? join(target, 'debug/loadgen');

export const logDir = process.env.TEST_LOG_DIR ?? join(repoRoot, 'test-logs');
mkdirSync(logDir, { recursive: true });
export const toolsDir = process.env.VA_TOOLS_DIR ?? join(repoRoot, '.tools');

// The web side: its folder and installed packages, the demo page's build (served by the relay),
// the browser client built for Node, the npm package's folder.
export const webDir = join(repoRoot, 'web');
export const webNodeModules = join(webDir, 'node_modules');
export const webDist = join(webDir, 'dist');
export const webClientNode = join(webDist, 'lib/client.node.js');
export const webPackageDir = join(webDir, 'client');

// The agents: the Node package (its build and its scripted test agent), the Python scripted agent.
export const nodeAgentDir = join(repoRoot, 'agent-worker/node');
export const pythonScriptedAgent = join(e2eDir, 'worker/scripted_agent.py');
// The OTLP/HTTP trace receiver (Python, opentelemetry-proto) and the venv's Python that runs it.
export const otlpReceiverScript = join(e2eDir, 'worker/otlp_receiver.py');
export const venvPython = join(toolsDir, 'venv/bin/python');
export const nodeScriptedAgent = join(nodeAgentDir, 'test/scripted-agent.mjs');
