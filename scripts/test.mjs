#!/usr/bin/env node
// The whole test run (scripts/manage.sh test runs this): format and lints, the Rust tests, the
// Python and Node agent packages, the black-box suites in e2e/ (protocol, browser, package, docs,
// voice room, MCP conformance, API contract, operations, deploy), the React cores' unit tests
// and a soak. Each runner writes a machine-readable report into test-logs/reports/; the closing line
// "N passed, N failed" adds them up, and a runner that died before reporting counts as failed.
// Lints, builds and install steps stop the run at the first failure; test runners do not.
import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { total, writeStatusReport } from './lib/reports.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const LOGS = join(ROOT, 'test-logs');
const REPORTS = join(LOGS, 'reports');
const TOOLS = process.env.VA_TOOLS_DIR ?? join(ROOT, '.tools');
const VENV = join(TOOLS, 'venv');
const TARGET = process.env.CARGO_TARGET_DIR ?? join(ROOT, 'target');
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
// The binaries under test, for every suite.
const BINS = { RELAY_BIN: join(TARGET, 'debug/relay'), WORKER_BIN: join(TARGET, 'debug/agent-worker') };
// The Python agent package of this tree comes first: the venv is shared with other checkouts,
// and its editable install may point at one of them.
const PYTHONPATH = [join(ROOT, 'agent-worker/python/src'), join(ROOT, 'agent-worker/reference/python'), process.env.PYTHONPATH].filter(Boolean).join(':');
// No runner may hang the run: each is killed (its whole process group) after this long.
const RUNNER_LIMIT_MS = Number(process.env.TEST_RUNNER_LIMIT_MS ?? 45 * 60 * 1000);

const say = (line) => process.stdout.write(`${line}\n`);
const fail = (why) => {
  process.stderr.write(`manage.sh test: ${why}\n`);
  process.exit(1);
};

/**
 * Runs a command in its own process group, its output on ours (and, with `tee`, in a file);
 * resolves with its exit status (124 when it ran out of time).
 */
function run(cmd, args, { cwd = ROOT, env = {}, tee, onStdout, limitMs = RUNNER_LIMIT_MS } = {}) {
  return new Promise((resolveRun) => {
    const proc = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const file = tee ? createWriteStream(tee) : null;
    proc.stdout.on('data', (d) => {
      file?.write(d);
      if (onStdout) onStdout(d);
      else process.stdout.write(d);
    });
    proc.stderr.on('data', (d) => {
      file?.write(d);
      process.stderr.write(d);
    });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      say(`!! ${cmd} ${args.join(' ')} ran longer than ${limitMs / 60000} minutes: stopped`);
      try { process.kill(-proc.pid, 'SIGKILL'); } catch { /* gone */ }
    }, limitMs);
    proc.on('error', (err) => say(`!! cannot run ${cmd}: ${err.message}`));
    proc.on('close', (code, signal) => {
      clearTimeout(timer);
      const done = () => resolveRun(timedOut ? 124 : code ?? (signal ? 128 : 1));
      if (file) file.end(done);
      else done();
    });
  });
}

/** A step that must pass for the run to go on (a lint, a build, an install). */
async function must(cmd, args, opts) {
  const status = await run(cmd, args, opts);
  if (status !== 0) fail(`${[cmd, ...args].join(' ')} failed (exit status ${status})`);
}

/** A function of scripts/lib (an install or a build), as scripts/manage.sh runs it. */
const lib = (fn, ...args) => must(join(ROOT, 'scripts/lib/run.sh'), [fn, ...args]);

const runners = [];
const runner = (name, reports, status) => runners.push({ name, reports, status });
const report = (name) => join(REPORTS, name);

/** node:test with the spec reporter on stdout and a JUnit report for the count. */
async function nodeTests(name, cwd, args, env = {}, wrap = []) {
  const xml = report(`${name}.xml`);
  // A folder stands for its `*.test.mjs` files: given the folder, node --test would also run
  // the helper modules beside them, each counted as a passing test.
  const files = args.flatMap((a) => (a.endsWith('/')
    ? readdirSync(join(cwd, a)).filter((f) => f.endsWith('.test.mjs')).sort().map((f) => a + f)
    : [a]));
  const nodeArgs = ['--test', '--test-reporter=spec', '--test-reporter-destination=stdout',
    '--test-reporter=junit', `--test-reporter-destination=${xml}`, ...files];
  const [cmd, ...pre] = wrap.length ? wrap : [process.execPath];
  const status = await run(cmd, [...pre, ...(wrap.length ? [process.execPath] : []), ...nodeArgs], { cwd, env });
  runner(name, [xml], status);
}

/** pytest with a JUnit report for the count. */
async function pytest(name, cwd, args) {
  const xml = report(`${name}.xml`);
  const status = await run(join(VENV, 'bin/python'), ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', `--junitxml=${xml}`, ...args],
    { cwd, env: { ...BINS, TEST_LOG_DIR: LOGS, PYTHONPATH } });
  runner(name, [xml], status);
}

/**
 * `cargo test --workspace`, with libtest's JSON events as its report: the test executables are
 * built as cargo builds them (`--no-run`), then run one by one with `--format json` (unstable in
 * libtest, so RUSTC_BOOTSTRAP=1 at run time only: the build is unchanged); doc tests run through
 * cargo and their summary lines become a report of their own.
 */
async function cargoTests() {
  const listing = join(LOGS, 'cargo-build.jsonl');
  const built = await run('cargo', ['test', '--workspace', '--no-run', '--message-format=json-render-diagnostics'], { tee: listing, onStdout: () => {} });
  if (built !== 0) {
    runner('cargo test (build)', [], built);
    return;
  }
  const executables = readFileSync(listing, 'utf8').split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
    .filter((m) => m.reason === 'compiler-artifact' && m.profile?.test && m.executable);
  mkdirSync(join(REPORTS, 'cargo'), { recursive: true });
  for (const m of executables) {
    const pkg = packageName(m.package_id);
    const id = `${pkg}-${m.target.kind[0]}-${m.target.name}`;
    const jsonl = join(REPORTS, 'cargo', `${id}.jsonl`);
    say(`     Running ${m.target.kind[0]} ${m.target.name} (${pkg})`);
    const cwd = dirname(m.manifest_path);
    let buffer = '';
    const status = await run(m.executable, ['-Z', 'unstable-options', '--format', 'json', '--report-time'], {
      cwd,
      env: { RUSTC_BOOTSTRAP: '1', CARGO_MANIFEST_DIR: cwd, CARGO_PKG_NAME: pkg, CARGO_CRATE_NAME: m.target.name.replaceAll('-', '_') },
      tee: jsonl,
      onStdout: (d) => {
        buffer += d.toString();
        let nl;
        while ((nl = buffer.indexOf('\n')) >= 0) {
          printLibtest(buffer.slice(0, nl));
          buffer = buffer.slice(nl + 1);
        }
      },
    });
    runner(`cargo ${id}`, [jsonl], status);
  }
  // Doc tests: cargo runs them; their libtest summary lines are the report.
  const docLog = join(LOGS, 'cargo-doctests.txt');
  const status = await run('cargo', ['test', '--workspace', '--doc'], { tee: docLog });
  const summaries = readFileSync(docLog, 'utf8').match(/^test result: \w+\. \d+ passed; \d+ failed/gm) ?? [];
  const sum = (re) => summaries.reduce((n, l) => n + Number(l.match(re)[1]), 0);
  if (summaries.length) writeStatusReport(report('cargo-doctests.json'), 'cargo doc tests', sum(/(\d+) passed/), sum(/(\d+) failed/));
  runner('cargo doc tests', [report('cargo-doctests.json')], status);
}

/** The package name in a cargo package id ("path+file:///…/relay/wire#relay-wire@0.1.0", or
 * "path+file:///…/relay#0.1.0" when the folder bears the name). */
function packageName(id) {
  const [url, fragment = ''] = id.split('#');
  return fragment.includes('@') ? fragment.split('@')[0] : url.split('/').pop();
}

/** One libtest JSON event as a line of cargo test's usual output. */
function printLibtest(line) {
  let ev;
  try { ev = JSON.parse(line); } catch { say(line); return; }
  if (ev.type === 'test' && ev.event !== 'started') {
    say(`test ${ev.name} ... ${ev.event === 'ok' ? 'ok' : ev.event.toUpperCase()}`);
    if (ev.event === 'failed' && ev.stdout) say(ev.stdout);
  } else if (ev.type === 'suite' && ev.event !== 'started') {
    say(`test result: ${ev.event}. ${ev.passed} passed; ${ev.failed} failed; ${ev.ignored} ignored (${ev.exec_time ?? '?'}s)`);
  }
}

/** A runner that reports only its exit status (and a line we look for): its own JSON report. */
async function statusRunner(name, cmd, args, { passLine, ...opts } = {}) {
  const log = join(LOGS, `${name}.txt`);
  const status = await run(cmd, args, { ...opts, tee: log });
  const ok = status === 0 && (!passLine || passLine.test(readFileSync(log, 'utf8')));
  writeStatusReport(report(`${name}.json`), name, ok ? 1 : 0, ok ? 0 : 1, `exit status ${status}`);
  runner(name, [report(`${name}.json`)], ok ? 0 : status || 1);
}

const has = (cmd) => spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
const started = Date.now();

if (!has('cargo')) fail('cargo is not installed. Install Rust (rustup) first.');
await lib('ensure_test_tools');
for (const [component, sub] of [['rustfmt', 'fmt'], ['clippy', 'clippy']]) {
  if (spawnSync('cargo', [sub, '--version'], { stdio: 'ignore' }).status !== 0) {
    say(`!! the Rust toolchain has no ${component}; adding it with rustup`);
    if (spawnSync('rustup', ['component', 'add', component], { stdio: 'inherit' }).status !== 0) {
      fail(`the Rust toolchain lacks ${component} and rustup could not add it: the tests need it`);
    }
  }
}
say('== cargo fmt --check');
await must('cargo', ['fmt', '--all', '--', '--check']);
say('== cargo clippy -D warnings');
await must('cargo', ['clippy', '--workspace', '--all-targets', '--', '-D', 'warnings']);

rmSync(LOGS, { recursive: true, force: true });
mkdirSync(REPORTS, { recursive: true });
say('== cargo test (libtest JSON reports in test-logs/reports/cargo)');
await cargoTests();

say('== library crates: cargo package --list holds only sources (and the worker\'s embedded default catalog and debug page)');
const allowed = /^(\.cargo_vcs_info\.json|Cargo\.lock|Cargo\.toml(\.orig)?|README\.md|(src|tests|examples)\/.*\.rs|src\/serve\/debug\/[a-z]+\.(html|js|css)|catalog\/[a-z0-9_-]+\.json)$/;
for (const crate of ['relay-wire', 'agent-worker']) {
  const listed = spawnSync('cargo', ['package', '--list', '--allow-dirty', '-p', crate], { cwd: ROOT, encoding: 'utf8' }).stdout ?? '';
  const stray = listed.split('\n').filter((f) => f && !allowed.test(f));
  if (stray.length) fail(`cargo package of ${crate} would ship stray files: ${stray.join(' ')}`);
}

say('== python: lint and type check of the agent library, the reference agent and the worker\'s Python tests (ruff, mypy)');
await lib('ensure_venv');
for (const dir of ['agent-worker/python', 'agent-worker/reference/python', 'e2e/worker']) {
  const cwd = join(ROOT, dir);
  await must(join(VENV, 'bin/ruff'), ['check', '.'], { cwd });
  await must(join(VENV, 'bin/ruff'), ['format', '--check', '.'], { cwd });
  await must(join(VENV, 'bin/mypy'), [], { cwd });
}
say('== web: type check and build');
await lib('build_web');
await must('npx', ['--no-install', 'tsc', '--noEmit', '-p', 'client'], { cwd: join(ROOT, 'web') });
await must(process.execPath, ['build.mjs'], { cwd: join(ROOT, 'web') });
// The demo's type check reads the package's declarations, which the build writes.
await must('npx', ['--no-install', 'tsc', '--noEmit', '-p', 'demo'], { cwd: join(ROOT, 'web') });
await must('cargo', ['build', '--bins']);
say('== deploy files');
await must(join(ROOT, 'deploy/check.sh'), []);
say('== e2e packages (npm ci in e2e when missing or stale)');
await lib('e2e_deps');
// The deploy tests run rootful podman (see below); as another user they are counted as failed.
if (process.getuid?.() === 0) {
  say('== container tools for the deploy tests (podman, podman-compose, the debootstrap base, stand-in images)');
  await lib('ensure_containers');
}

say('== python tests (the agent library; the reference agent; the worker\'s MCP, catalog and agent API tests against the real binaries)');
await pytest('python-agent', join(ROOT, 'agent-worker/python'), ['tests']);
await pytest('python-reference', join(ROOT, 'agent-worker/reference/python'), ['tests']);
await pytest('python-worker', join(ROOT, 'e2e/worker'), ['.']);

say('== node agent library (agent-worker/node: type check, lint, tests against the real worker and relay) and reference agent');
{
  const cwd = join(ROOT, 'agent-worker/node');
  const prep = await run('sh', ['-c', 'npm ci --no-audit --no-fund >/dev/null && npm run -s build && npm run -s typecheck && npm run -s lint'], { cwd });
  if (prep === 0) await nodeTests('node-agent', cwd, ['--test-concurrency=1', 'test/'], { ...BINS, TEST_LOG_DIR: LOGS });
  else runner('node-agent', [report('node-agent.xml')], prep);
  // The reference agent installs a copy of the library just built (install-links).
  const ref = join(ROOT, 'agent-worker/reference/node');
  const refPrep = await run('sh', ['-c', 'npm ci --no-audit --no-fund >/dev/null && npm run -s build && npm run -s typecheck'], { cwd: ref });
  if (refPrep === 0) await nodeTests('node-reference-agent', ref, ['test/']);
  else runner('node-reference-agent', [report('node-reference-agent.xml')], refPrep);
}

say('== protocol tests (relay and agent-worker binaries, tabs played by the official socket.io-client)');
say('== browser tests (the demo page in Chromium; screenshots in test-logs/screenshots)');
say('== package test (npm pack of the browser client, installed into a fresh React app built with Vite, in Chromium)');
say('== docs (links, anchors, commands and settings the pages name)');
await nodeTests('e2e', join(ROOT, 'e2e'), ['--test-concurrency=2', 'protocol/', 'browser/', 'package/', 'docs/'],
  { ...BINS, TEST_LOG_DIR: LOGS, CHROMIUM_PATH: CHROMIUM });
say('== cross-node protocol tests once more on a Redis Cluster (E2E_REDIS=cluster: six redis-server, redis+cluster://)');
await nodeTests('e2e-redis-cluster', join(ROOT, 'e2e'),
  ['--test-concurrency=1', 'protocol/cluster.test.mjs', 'protocol/cluster-failover.test.mjs', 'protocol/partition.test.mjs', 'protocol/catalog-nodes.test.mjs', 'protocol/targeted.test.mjs', 'protocol/cluster-tracing.test.mjs', 'protocol/admission.test.mjs'],
  { ...BINS, TEST_LOG_DIR: LOGS, E2E_REDIS: 'cluster' });
say('== observability (spans over OTLP to a real receiver, session timelines and /debug in Chromium, Debian\'s Prometheus on the shipped scrape config, alerts and dashboard)');
await lib('ensure_livekit');
await nodeTests('observability', join(ROOT, 'e2e'), ['--test-concurrency=1', 'observability/'],
  { ...BINS, TEST_LOG_DIR: LOGS, CHROMIUM_PATH: CHROMIUM, VA_TOOLS_DIR: TOOLS });
say('== voice UI cores (web/test/ui: the React cores in Node)');
await nodeTests('web-ui', join(ROOT, 'web'), ['test/ui/']);

say('== voice room tests (LiveKit server, relay, worker, the Python and the Node reference agent, Chromium; in a network namespace), and the demo page in a room no agent joins (browser/room/)');
await lib('ensure_livekit');
if (process.getuid?.() !== 0) {
  say('!! the voice room test needs root for its network namespace (ip netns); counted as failed');
  runner('voice', [report('voice.xml')], 1);
} else {
  await nodeTests('voice', join(ROOT, 'e2e'), ['--test-concurrency=1', 'voice/', 'browser/room/'],
    { ...BINS, TEST_LOG_DIR: LOGS, CHROMIUM_PATH: CHROMIUM, VA_TOOLS_DIR: TOOLS, PYTHONPATH }, [join(ROOT, 'scripts/netns.sh')]);
}

say('== MCP conformance (the official suite against the worker\'s /mcp, baseline in e2e/mcp-conformance)');
await statusRunner('mcp-conformance', join(ROOT, 'e2e/mcp-conformance/run.sh'), [], { env: { ...BINS, TEST_LOG_DIR: LOGS } });

say('== API contract: generated requests against the relay\'s and the worker\'s /openapi.json (schemathesis, every check)');
{
  const dir = join(REPORTS, 'api');
  const status = await run(join(ROOT, 'e2e/api/run.sh'), [], { env: { ...BINS, TEST_LOG_DIR: LOGS, ST_REPORT_DIR: dir } });
  runner('api', [join(dir, 'relay.junit.xml'), join(dir, 'worker.junit.xml')], status);
}

say('== soak, a minute per mode (tabs churning while agents call, one node and three on Redis)');
await statusRunner('soak', process.execPath, [join(ROOT, 'scripts/soak.mjs'), '--minutes', '1', '--nodes', 'both', '--bin', BINS.RELAY_BIN],
  { passLine: /^soak: passed/m });
say('== soak on a Redis Cluster, a minute (three nodes, redis+cluster://)');
await statusRunner('soak-cluster', process.execPath, [join(ROOT, 'scripts/soak.mjs'), '--minutes', '1', '--nodes', '3', '--redis', 'cluster', '--bin', BINS.RELAY_BIN],
  { passLine: /^soak: passed/m });

// Alone, after the rest: it builds release binaries, which would slow the timed tests above.
say('== operations test (scripts/manage.sh on a fresh copy of the tree)');
await nodeTests('ops', join(ROOT, 'e2e'), ['ops/']);

// After the rest too: the image build compiles release binaries inside the build container.
say('== deploy (deploy/Dockerfile built by podman, both compose stacks under podman-compose, the Kubernetes manifests under podman kube play)');
if (process.getuid?.() !== 0) {
  say('!! the deploy test needs root (rootful podman); counted as failed');
  runner('deploy', [report('deploy.xml')], 1);
} else {
  await nodeTests('deploy', join(ROOT, 'e2e'), ['--test-concurrency=1', 'deploy/'], { TEST_LOG_DIR: LOGS, VA_TOOLS_DIR: TOOLS });
}

const { passed, failed, lines } = total(runners);
say('');
say(`== reports (test-logs/reports/), ${Math.round((Date.now() - started) / 1000)} s in all`);
for (const line of lines) say(`   ${line}`);
say('');
say(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && runners.every((r) => r.status === 0) ? 0 : 1);
