// The whole story in a real voice room, every part real but the voice models: LiveKit's own
// server, the relay, the worker receiving LiveKit's own webhooks, the demo page in Chromium with
// a fake microphone fed from a WAV file that espeak-ng speaks, and a reference agent in the room:
// the Python one (LiveKit Agents for Python, room.test.mjs) or the Node one (LiveKit Agents for
// Node, room-node.test.mjs); `voiceRoom(agent)` declares the same tests for either.
// THE ONE FAKE: the agent's LLM is scripted (a subclass of the framework's llm.LLM that emits a
// fixed sequence of tool calls; e2e/worker/scripted_agent.py and
// agent-worker/node/test/scripted-agent.mjs), because no language model can run here. Its voice
// is espeak-ng, a real local TTS, in both.
//
// With either agent, the relay, the worker and the agent export their spans to a real
// OTLP/HTTP receiver (e2e/harness/otlp.mjs): each tool call of the agent is one trace, LiveKit
// Agents' own function_tool span the parent of the worker's (with the Node agent, both children
// of the turn's span), down to the relay's tool_call; no span holds a key, a token or a secret.
//
// SDK participants (the agent) never gather loopback ICE candidates, so this file runs inside a
// network namespace holding a veth pair (10.213.0.1), which `scripts/manage.sh test` creates
// before and removes after (scripts/netns.sh). Nothing leaves that namespace.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir, networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { AgentDispatchClient } from 'livekit-server-sdk';
import {
  startRelay, startWorker, startLivekit, startOtlpReceiver, livekitBin, runWorker, spawnLogged, stopProcess, eventually, sleep,
  LIVEKIT_KEY, logDir, toolsDir, repoRoot, nodeAgentDir, nodeScriptedAgent, pythonScriptedAgent,
} from '../harness/index.mjs';
import { CHROMIUM, pageWithoutMicrophoneApi, shot } from '../browser/browser.mjs';

const NODE_IP = '10.213.0.1';
/** The name the agent registers under and the worker dispatches for each user. */
const AGENT_NAME = 'voice-relay-test-agent';
const LIVEKIT_PORT = 7880;
const python = process.env.VA_PYTHON ?? join(toolsDir, 'venv/bin/python');
const fp = (key) => createHash('sha256').update(key).digest('hex').slice(0, 8);

/** How each scripted agent runs, and what its script does that the tests see. */
const AGENTS = {
  python: {
    label: '',
    prefix: 'voice',
    // Its script draws the card in the first reply, after entering the spread mode.
    position: 'Present',
    // Its scripted LLM answers a typed turn too.
    answersText: true,
    // It exports its spans (agent-worker/reference/python/agent.py, export_spans) when the
    // OTEL_* variables ask for it, as the relay and the worker do.
    traces: true,
    // A tool runs inside its function_tool span: the worker's request is that span's child.
    toolInItsSpan: true,
    ready: () => assert.ok(existsSync(python), `no Python venv at ${python}: scripts/manage.sh test makes it`),
    // The reference agent (agent-worker/reference/python) and the library of this checkout.
    command: () => [python, [pythonScriptedAgent, 'start'], {
      AGENT_TTS: 'espeak',
      PYTHONPATH: [join(repoRoot, 'agent-worker/reference/python'), join(repoRoot, 'agent-worker/python/src')].join(':'),
    }],
  },
  node: {
    label: ' (Node agent)',
    prefix: 'voice-node',
    // LiveKit Agents for Node keeps a reply's tools for all its steps: its script draws the
    // card in a second reply (see scripted-agent.mjs).
    position: 'Past',
    // It exports its spans (exportSpans of agent-worker/node) when the OTEL_* variables ask.
    traces: true,
    // LiveKit Agents 1.9 for Node starts a tool before it opens the tool's function_tool span,
    // so while the tool runs the current span is the turn's (agent_turn): the worker's request
    // is a sibling of function_tool, both children of the turn's span, in the same trace.
    toolInItsSpan: false,
    ready: () => assert.ok(existsSync(join(nodeAgentDir, 'dist/index.js')), 'agent-worker/node is not built: npm ci && npm run build there'),
    command: () => [process.execPath, [nodeScriptedAgent, 'start'], {}],
  },
};

/** Declares the voice-room tests with the scripted `kind` agent (python or node) in the room. */
export function voiceRoom(kind) {
  const spec = AGENTS[kind];
  assert.ok(spec, `unknown agent ${kind}`);

  let dir;
  let relay;
  let worker;
  let livekit;
  let agent;
  let context;
  let page;
  let apiKey;
  let livekitSecret;
  /** The OTLP/HTTP receiver the relay, the worker and the agent export to (when spec.traces). */
  let receiver;
  /** The variables that send a process's spans there (none without a receiver). */
  let otel = {};
  const timings = {};
  const agentEvents = [];
  const pageErrors = [];

  /** Starts a long-running process with its output in a log file; `onLine` sees stdout lines. */
  function launch(name, cmd, args, env, onLine) {
    return spawnLogged(name, cmd, args, env, { logPath: join(logDir, `${spec.prefix}-${name}.log`), onLine });
  }

  async function stopProc(p) {
    if (p) await stopProcess(p, { ms: 10000 });
  }

  const waitFor = (what, ms, check, every = 100) => eventually(check, what, ms, every);

  /** The next agent event matching `pred` (already seen or still to come). */
  function agentEvent(pred, ms, what) {
    return waitFor(`the agent to report ${what}`, ms, () => agentEvents.find(pred), 50);
  }

  async function workerSessions() {
    const r = await worker.fetch('/sessions', { headers: { authorization: `Bearer ${relay.operatorSecret}` } });
    assert.equal(r.status, 200);
    return r.body.sessions;
  }

  // A fixed address (free: the namespace is the test's own), so that LiveKit's webhooks reach the
  // worker again after it restarts.
  async function startWorkerHere(extra = {}) {
    return startWorker(relay, {
      WORKER_ADDR: '127.0.0.1:3002',
      LIVEKIT_URL: `ws://127.0.0.1:${LIVEKIT_PORT}`,
      WORKER_ROOM_SYNC_SECS: '1',
      WORKER_STATE_FILE: join(dir, 'worker-sessions.json'),
      // Each user who joins gets the agent dispatched for them, with their session token.
      WORKER_AGENT_NAME: AGENT_NAME,
      ...otel,
      ...extra,
    });
  }

  before(async () => {
    const inNamespace = Object.values(networkInterfaces()).flat().some((a) => a?.address === NODE_IP);
    assert.ok(inNamespace, `no interface holds ${NODE_IP}: run this through scripts/manage.sh test, which makes the network namespace`);
    assert.ok(livekitBin(), 'no LiveKit server: scripts/manage.sh test installs it into .tools/bin');
    spec.ready();
    dir = mkdtempSync(join(tmpdir(), 'relay-voice-'));

    // What the user says into the fake microphone: real speech, from espeak-ng, as 48 kHz PCM.
    const wav = join(dir, 'mic.wav');
    execFileSync('sh', ['-c', `espeak-ng -s 150 -w ${dir}/speech.wav "Hello agent. Please draw a card for me. I want to know where I stand." && sox ${dir}/speech.wav -r 48000 -c 1 -b 16 ${wav}`]);

    livekitSecret = `lk-${createHash('sha256').update(String(Math.random())).digest('hex')}`;
    if (spec.traces) {
      receiver = await startOtlpReceiver();
      // No OTEL_SERVICE_NAME: each process names itself (voice-relay, agent-worker,
      // voice-relay-agent).
      otel = receiver.env();
    }
    relay = await startRelay({ LIVEKIT_URL: `ws://127.0.0.1:${LIVEKIT_PORT}`, LIVEKIT_API_SECRET: livekitSecret, RUST_LOG: 'info', ...otel }, { name: `${spec.prefix}-relay` });
    // Whatever the relay (and so the worker) must not log, no span may hold either.
    if (receiver) relay.share(receiver);
    worker = await startWorkerHere();

    // LiveKit's own server, configured as scripts/manage.sh does, but with its ICE address on the
    // namespace's veth (SDK participants gather no loopback candidates).
    livekit = await startLivekit({
      dir,
      secret: livekitSecret,
      port: LIVEKIT_PORT,
      nodeIp: NODE_IP,
      webhookUrl: `${worker.url}/livekit/webhook`,
      room: { departure_timeout: 5, empty_timeout: 30 },
      logPath: join(logDir, `${spec.prefix}-livekit.log`),
    });

    // The reference agent with the scripted LLM (the one fake), registered with LiveKit by name.
    // It holds no secret of the relay's: each job's dispatch gives it its user and a session
    // token for that user's key alone.
    const [agentCmd, agentArgs, agentEnv] = spec.command();
    agent = launch('agent', agentCmd, agentArgs, {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      LIVEKIT_URL: `ws://127.0.0.1:${LIVEKIT_PORT}`,
      LIVEKIT_API_KEY: LIVEKIT_KEY,
      LIVEKIT_API_SECRET: livekitSecret,
      WORKER_URL: worker.url,
      AGENT_NAME,
      ...otel,
      ...(process.env.PYTHONPATH ? { PYTHONPATH: process.env.PYTHONPATH } : {}),
      ...agentEnv,
    }, (line) => {
      try {
        const ev = JSON.parse(line);
        // Events, not log lines (the Node agent's JSON logs share its stdout and have a level).
        if (ev && typeof ev.event === 'string' && ev.level === undefined) agentEvents.push({ ...ev, at: Date.now() });
      } catch {
        // not an event line
      }
    });
    relay.remember(livekitSecret);

    // Chromium with a fake microphone that plays the WAV, and audio allowed to play.
    const userDataDir = mkdtempSync(join(tmpdir(), 'relay-chromium-'));
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM,
      headless: true,
      timeout: 30000,
      viewport: { width: 1100, height: 820 },
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync', '--use-fake-ui-for-media-stream', '--use-fake-device-for-media-stream',
        `--use-file-for-fake-audio-capture=${wav}`, '--autoplay-policy=no-user-gesture-required'],
    });
    page = await context.newPage();
    page.on('pageerror', (e) => pageErrors.push(e.message));
    // The page runs with no STUN servers: this closed network cannot reach the ones LiveKit names.
    await page.goto(`${relay.url}/?ice=none`, { waitUntil: 'load', timeout: 15000 });
  });

  after(async () => {
    await context?.close().catch(() => {});
    // Everything is stopped even when one stop fails (a process left running would hold the
    // test's process open); the first failure is reported after.
    let failed = null;
    for (const stop of [() => stopProc(agent), () => worker?.stop().catch(() => {}), () => relay?.stop().catch(() => {}), () => livekit?.stop()]) {
      try {
        await stop();
      } catch (e) {
        failed ??= e;
      }
    }
    try {
      // After the rest, whose last spans are flushed as they stop: every payload is searched.
      await receiver?.stop();
      if (failed) throw failed;
    } finally {
      if (dir) rmSync(dir, { recursive: true, force: true });
      if (Object.keys(timings).length) console.log(`voice room timings${spec.label} (ms): ${JSON.stringify(timings)}`);
    }
  });

  test(`the page joins the room: relay bound, voice connected, the worker opens the session from LiveKit's webhook${spec.label}`, async () => {
    await waitFor('the agent to register with LiveKit', 60000, async () => /registered worker/i.test(execFileSync('cat', [agent.logPath]).toString()), 250);
    // When the popover appears, by the page's own clock (the agent's is the same machine's).
    await page.evaluate(() => {
      const el = document.getElementById('popover');
      new MutationObserver(() => {
        if (!el.hidden && !window.popoverShownAt) window.popoverShownAt = Date.now();
      }).observe(el, { attributes: true, childList: true, characterData: true, subtree: true });
    });
    // The first screen offers voice or text chat; Ctrl+K (as the headset button) chooses voice.
    assert.equal(await page.isVisible('#start-text'), true);
    assert.equal(await page.isVisible('#session'), false);
    const pressed = Date.now();
    await page.keyboard.press('Control+k');
    await page.waitForSelector('#connection[data-state="bound"]', { timeout: 10000 });
    apiKey = (await page.textContent('#dev-key')).trim();
    assert.match(apiKey, /^va_[0-9a-f]{64}$/);
    relay.remember(apiKey);
    await page.waitForSelector('#voice[data-state="connected"]', { timeout: 20000 });
    timings.joinMs = Date.now() - pressed;
    const sessions = await waitFor('the participant_joined webhook to open a session', 10000, async () => {
      const all = await workerSessions();
      return all.find((s) => s.key === fp(apiKey));
    });
    assert.equal(sessions.source, 'livekit');
    assert.equal(sessions.room, (await page.textContent('#dev-room')).trim());
    await shot(page, `${spec.prefix}-01-joined`);
  });

  test(`the agent is dispatched for this user with their token, and its OpenPopover reaches the page${spec.label}`, async () => {
    const keyEvent = await agentEvent((e) => e.event === 'key', 60000, 'the key it read');
    assert.equal(keyEvent.fp, fp(apiKey), 'the agent serves the user it was dispatched for');
    const log = execFileSync('cat', [worker.logPath]).toString();
    assert.match(log, /agent dispatched for the user/, 'the worker dispatched it');
    await page.waitForSelector('#participants li[data-agent="true"]', { timeout: 20000 });
    await page.waitForSelector('#popover:not([hidden])', { timeout: 30000 });
    const shownAt = await page.evaluate(() => window.popoverShownAt);
    assert.equal(await page.textContent('#popover'), 'Hello from the agent');
    const call = await agentEvent((e) => e.event === 'tool' && e.name === 'OpenPopover', 10000, 'the OpenPopover outcome');
    assert.equal(call.ok, true, JSON.stringify(call));
    if (typeof call.startedAt === 'number') timings.toolCallToPageMs = shownAt - call.startedAt;
    await shot(page, `${spec.prefix}-02-popover-from-agent`);
  });

  test(`draw_card from the agent opens the picker; the card the test picks reaches the agent${spec.label}`, async () => {
    await page.waitForSelector('#picker[open]', { timeout: 30000 });
    assert.equal(await page.textContent('#picker-title'), `Draw a card for ${spec.position}`);
    // The agent moved to the spread mode first (draw_card is offered there): the page shows it.
    await page.waitForSelector('#mode[data-mode="spread"]', { timeout: 10000 });
    assert.equal(await page.textContent('#mode'), 'Phase: spread');
    await shot(page, `${spec.prefix}-03-picker`);
    await page.click('#picker-deck button:nth-child(3)');
    await page.waitForSelector('#picker-reveal:not([hidden])');
    const call = await agentEvent((e) => e.event === 'tool' && e.name === 'draw_card', 20000, 'the draw_card answer');
    assert.equal(call.ok, true, JSON.stringify(call));
    const card = call.result;
    assert.deepEqual(Object.keys(card).sort(), ['cardId', 'cardName', 'reversed']);
    assert.match(await page.textContent('#spread-list'), new RegExp(`${spec.position}: ${card.cardName}`));
    const said = await agentEvent((e) => e.event === 'said' && /^You drew|could not be drawn/.test(e.text), 20000, 'its spoken answer');
    assert.match(said.text, new RegExp(card.cardName));
    // What the agent said reaches the page's transcript, from LiveKit Agents' lk.transcription stream.
    await page.waitForFunction(
      (name) => [...document.querySelectorAll('#transcript-list li[data-speaker="agent"]')].some((li) => li.textContent.includes(name)),
      card.cardName,
      { timeout: 20000 },
    );
    await page.waitForSelector('#transcript-list li[data-speaker="agent"][data-final="true"]', { state: 'attached', timeout: 20000 });
    await shot(page, `${spec.prefix}-04-card-drawn`);
  });

  if (spec.traces) {
    const parentage = spec.toolInItsSpan ? 'LiveKit Agents\' function_tool span is the parent of the worker\'s'
      : 'LiveKit Agents\' function_tool span and the worker\'s are children of the same agent_turn span';
    test(`one trace per tool call: ${parentage}, whose spans lead to the relay's tool_call; no span holds a key, a token or a secret${spec.label}`, async () => {
      // The agent's session token, from its dispatch's metadata (LiveKit's own server SDK, as an
      // operator would list it): searched for in every span, as the key and the secrets are.
      const room = (await page.textContent('#dev-room')).trim();
      const dispatches = await new AgentDispatchClient(`http://127.0.0.1:${LIVEKIT_PORT}`, LIVEKIT_KEY, livekitSecret).listDispatch(room);
      const dispatch = dispatches.find((d) => d.agentName === AGENT_NAME);
      assert.ok(dispatch, `the agent's dispatch in ${room}: ${JSON.stringify(dispatches.map((d) => d.agentName))}`);
      const grant = JSON.parse(dispatch.metadata);
      assert.equal(grant.apiKey, apiKey);
      assert.equal(grant.agentToken.split('.').length, 3);
      relay.remember(grant.agentToken);

      // The scripted agent called OpenPopover, enter_spread and draw_card; the first and the
      // last reached the tab through the relay.
      const byId = (spans) => new Map(spans.map((s) => [s.spanId, s]));
      const traceOf = (name) => (spans) => {
        const tool = spans.find((s) => s.service === 'voice-relay-agent' && s.name === 'function_tool'
          && s.attributes['lk.function_tool.name'] === name);
        // The worker's spans whose parent is the agent's (the call's request; a mode change's
        // GET /agent/tools too), and the tool span under one of them.
        const parent = tool && (spec.toolInItsSpan ? tool.spanId : tool.parentSpanId);
        const children = tool ? spans.filter((s) => s.service === 'agent-worker' && s.parentSpanId === parent) : [];
        const toolSpan = spans.find((s) => s.name === `tool ${name}` && children.some((c) => c.spanId === s.parentSpanId));
        const callId = toolSpan?.attributes['relay.call_id'];
        const relayCall = callId && spans.find((s) => s.service === 'voice-relay' && s.name === 'tool_call'
          && s.attributes['relay.call_id'] === callId);
        if (!relayCall) return null;
        const request = children.find((c) => c.spanId === toolSpan.parentSpanId);
        return { tool, request, toolSpan, relayCall, spans: byId(spans) };
      };
      for (const name of ['OpenPopover', 'draw_card']) {
        const { tool, request, toolSpan, relayCall, spans } = await receiver.waitFor(traceOf(name), `the spans of ${name} from the agent to the relay`, 20000);
        assert.equal(tool.scope, 'livekit-agents', 'LiveKit Agents\' own span');
        if (spec.toolInItsSpan) {
          assert.equal(request.parentSpanId, tool.spanId, 'the worker continues the agent\'s function_tool span');
        } else {
          const turn = spans.get(tool.parentSpanId);
          assert.ok(turn, 'the function_tool span\'s parent is exported');
          assert.deepEqual([turn.service, turn.scope, turn.name], ['voice-relay-agent', 'livekit-agents', 'agent_turn']);
          assert.equal(request.parentSpanId, turn.spanId, 'the worker continues the span current in the tool: the turn of its function_tool span');
        }
        assert.equal(request.kind, 'server');
        assert.equal(request.name, 'POST /agent/tools/{name}');
        assert.equal(relayCall.attributes['relay.tool'], name);
        assert.equal(relayCall.status.code, 'unset', `${name} succeeded`);
        // Up from the relay's span, each parent received, to the worker's request span.
        const chain = [relayCall];
        for (let at = relayCall; at.spanId !== request.spanId;) {
          at = spans.get(at.parentSpanId);
          assert.ok(at, `the chain from ${name}'s tool_call breaks after ${chain.map((s) => `${s.service}/${s.name}`).join(' <- ')}`);
          assert.ok(chain.length < 10, 'a parent chain of at most ten spans');
          chain.push(at);
        }
        assert.ok(chain.includes(toolSpan), `the worker's tool span is on the way: ${chain.map((s) => s.name).join(' <- ')}`);
        assert.deepEqual([chain[1].service, chain[1].kind], ['agent-worker', 'client'], 'the worker\'s attempt at the relay is the relay span\'s parent');
        for (const s of [tool, ...chain]) assert.equal(s.traceId, tool.traceId, `${s.service}/${s.name} is in the agent's trace`);
      }
      // The search the harness makes of every server's log, over every payload received so far
      // (again when the receiver stops); and no token of any kind (a JWT: LiveKit's, the relay's).
      receiver.assertLogClean();
      const jwt = receiver.logText().match(/eyJ[\w-]{10,}\.eyJ[\w-]{10,}\.[\w-]*/);
      assert.equal(jwt, null, 'a span holds a token');
      // Nor the conversation: the tools' arguments and results and the agent's words stay off the
      // spans (the agent exports with LiveKit Agents' allow_pii=False; the relay without
      // RELAY_TRACE_PAYLOADS).
      const said = agentEvents.find((e) => e.event === 'said' && /^You drew/.test(e.text));
      assert.ok(said, 'the agent named the card');
      for (const words of ['Hello from the agent', 'Where you stand now', said.text]) {
        assert.ok(!receiver.logText().includes(words), `a span holds "${words}"`);
      }
    });
  }

  if (spec.answersText) {
    test(`text chat: a typed message goes to the agent on lk.chat; its reply comes back in the transcript${spec.label}`, async () => {
      const agentItems = () => page.$$eval('#transcript-list li[data-speaker="agent"]', (li) => li.length);
      const before = await agentItems();
      const saidBefore = agentEvents.filter((e) => e.event === 'said').length;
      await page.click('#transcript-toggle');
      await page.fill('#chat-input', 'What does that card mean?');
      await page.press('#chat-input', 'Enter');
      await page.waitForFunction(() => document.getElementById('chat-input').value === '', null, { timeout: 10000 });
      assert.equal(await page.textContent('#chat-status'), '');
      assert.equal(await page.textContent('#transcript-list li[data-speaker="user"]:last-child'), 'You: What does that card mean?');
      // The agent answers the typed turn (the scripted LLM's next step) and its words are transcribed.
      await waitFor('the agent to answer the typed message', 30000, () => agentEvents.filter((e) => e.event === 'said').length > saidBefore);
      await waitFor('the answer in the transcript', 20000, async () => (await agentItems()) > before, 200);
      // Settled: every item final; the agent's words once each (LiveKit Agents sends them as text
      // streams and as TranscriptionReceived events: the streams are kept).
      const items = await waitFor('every transcript item to be final', 20000, async () => {
        const li = await page.$$eval('#transcript-list li', (els) => els.map((l) => ({ source: l.dataset.source, final: l.dataset.final, text: l.textContent })));
        return li.every((l) => l.final === 'true') ? li : null;
      }, 200);
      const agentSaid = items.filter((l) => l.text.startsWith('Agent: '));
      assert.ok(agentSaid.every((l) => l.source === 'stream'), JSON.stringify(items));
      assert.equal(new Set(agentSaid.map((l) => l.text)).size, agentSaid.length, `no words twice: ${JSON.stringify(items)}`);
      assert.equal(items.filter((l) => l.source === 'chat').length, 1);
      await shot(page, `${spec.prefix}-04a-text-chat`);
    });
  }

  test(`audio both ways: the page hears the agent, the agent hears the page's microphone${spec.label}`, async () => {
    const agentPeak = await waitFor('agent audio at the page', 30000, async () => {
      const peak = Number(await page.getAttribute('#agent-level', 'data-peak'));
      return peak > 0.01 ? peak : null;
    }, 200);
    timings.agentPeakAtPage = Number(agentPeak.toFixed(3));
    const mic = await agentEvent((e) => e.event === 'mic_level' && e.peak > 0.01, 30000, 'microphone audio above the threshold');
    timings.micPeakAtAgent = Number(mic.peak.toFixed(3));
    const micPeak = Number(await page.getAttribute('#mic-level', 'data-peak'));
    assert.ok(micPeak > 0.01, `the page's own mic meter moved (${micPeak})`);
    await shot(page, `${spec.prefix}-05-audio`);
  });

  test(`push-to-talk: the microphone is muted until Space is held, and open again when push-to-talk is off, at the page and at the agent${spec.label}`, async () => {
    // The loudest microphone level the page measures over `ms` (the speech has pauses).
    const loudest = async (ms = 1500) => {
      let max = 0;
      for (const until = Date.now() + ms; Date.now() < until; await sleep(100)) {
        max = Math.max(max, Number(await page.getAttribute('#mic-level', 'data-level')));
      }
      return max;
    };
    // What the agent heard (its mic_level reports, one a second while audio reaches it) between
    // two moments; a muted track reaches it as silence or not at all.
    const agentHeard = (from, to) => agentEvents.filter((e) => e.event === 'mic_level' && e.at >= from && e.at <= to);
    const audible = (e) => e.peak > 0.001;
    await page.check('#ptt-mode');
    await waitFor('the muted microphone to fall silent', 5000, async () => (await loudest(800)) === 0, 0);
    // Frames already on their way may still arrive: the agent's muted window starts a second later.
    const mutedFrom = Date.now() + 1000;
    await sleep(3000);
    await page.evaluate(() => document.activeElement?.blur());
    const pressedAt = Date.now();
    await page.keyboard.down('Space');
    assert.equal(await page.getAttribute('#ptt', 'aria-pressed'), 'true');
    const held = await loudest(2500);
    await page.keyboard.up('Space');
    const releasedAt = Date.now();
    assert.ok(held > 0.001, `the microphone sounds while Space is held (${held})`);
    assert.equal(await page.getAttribute('#ptt', 'aria-pressed'), 'false');
    const mutedBefore = agentHeard(mutedFrom, pressedAt);
    assert.ok(!mutedBefore.some(audible), `the agent heard nothing while push-to-talk was not held: ${JSON.stringify(mutedBefore)}`);
    await agentEvent((e) => e.event === 'mic_level' && e.at > pressedAt && audible(e), 5000, 'hearing the microphone while Space is held');
    await waitFor('silence again after release', 5000, async () => (await loudest(800)) === 0, 0);
    await sleep(3000);
    const mutedAfter = agentHeard(releasedAt + 1500, Date.now());
    assert.ok(!mutedAfter.some(audible), `the agent heard nothing after release: ${JSON.stringify(mutedAfter)}`);
    await shot(page, `${spec.prefix}-05a-push-to-talk`);
    const openedAt = Date.now();
    await page.uncheck('#ptt-mode');
    const open = await loudest(2500);
    assert.ok(open > 0.001, `push-to-talk off: the microphone is open again (${open})`);
    await agentEvent((e) => e.event === 'mic_level' && e.at > openedAt && audible(e), 5000, 'hearing the microphone again once push-to-talk is off');
  });

  test(`push-to-talk interrupts the agent: pressed while it speaks, its start_turn RPC cuts the reply short${spec.label}`, async () => {
    const agentItem = '#participants li[data-agent="true"]';
    const speaking = async () => (await page.getAttribute(agentItem, 'data-agent-state')) === 'speaking';
    const agentLevel = async () => Number(await page.getAttribute('#agent-level', 'data-level'));
    await page.check('#ptt-mode');
    await page.evaluate(() => document.activeElement?.blur());
    // Quiet for a while (not merely between thinking and speaking a reply still to come).
    let quietSince = 0;
    await waitFor('the agent to be quiet', 40000, async () => {
      const quiet = ['listening', 'idle'].includes(await page.getAttribute(agentItem, 'data-agent-state'));
      quietSince = quiet ? quietSince || Date.now() : 0;
      return quiet && Date.now() - quietSince > 1500;
    }, 100);
    // A turn of the user's: released, end_turn makes the scripted agent reply with its long closing words.
    const turnAt = Date.now();
    await page.keyboard.down('Space');
    await sleep(300);
    await page.keyboard.up('Space');
    const ended = await agentEvent((e) => e.event === 'turn' && e.method === 'end_turn' && e.at >= turnAt, 10000, 'the end_turn RPC');
    assert.equal(ended.interrupted, false);
    await waitFor('the agent to speak its reply', 30000, async () => (await speaking()) && (await agentLevel()) > 0.01, 50);
    // Pressed while it speaks: start_turn reaches the agent, which interrupts its speech.
    const pressed = Date.now();
    await page.keyboard.down('Space');
    const turn = await agentEvent((e) => e.event === 'turn' && e.method === 'start_turn' && e.at >= pressed, 5000, 'the start_turn RPC');
    assert.equal(turn.interrupted, true, 'start_turn found the agent speaking and interrupted it');
    // At the page: the agent stops speaking at once (its closing words last about ten seconds).
    await waitFor('the agent to stop speaking', 3000, async () => !(await speaking()), 50);
    timings.pushToTalkInterruptMs = Date.now() - pressed;
    // …and its audio at the page falls silent for good within seconds, where its closing words
    // would have gone on for about ten.
    let quietFrom = 0;
    await waitFor('the agent\'s audio at the page to fall silent for a second', 4000, async () => {
      const quiet = (await agentLevel()) < 0.01;
      quietFrom = quiet ? quietFrom || Date.now() : 0;
      return quiet && Date.now() - quietFrom >= 1000;
    }, 50);
    timings.pushToTalkSilentMs = quietFrom - pressed;
    // The reply was cut, not finished (LiveKit Agents records it as interrupted, if at all: a
    // reply cut before any of its words played is not recorded).
    const said = agentEvents.filter((e) => e.event === 'said' && e.at >= pressed);
    assert.ok(said.every((e) => e.interrupted === true), JSON.stringify(said));
    await shot(page, `${spec.prefix}-05b-push-to-talk-interrupts`);
    await page.keyboard.up('Space');
    assert.equal(await page.textContent('#chat-status'), '', 'the turn RPCs answered without an error');
    await page.uncheck('#ptt-mode');
  });

  test(`a worker restart loses no session: it is back from RoomService within seconds and calls work${spec.label}`, async () => {
    await worker.stop();
    rmSync(join(dir, 'worker-sessions.json'), { force: true });
    const restarted = Date.now();
    // It reads the rooms at start, then not again during this file: the leave below must come
    // through LiveKit's webhook.
    worker = await startWorkerHere({ WORKER_ROOM_SYNC_SECS: '300' });
    await waitFor('the session back from RoomService', 10000, async () => (await workerSessions()).find((s) => s.key === fp(apiKey) && s.source === 'livekit'));
    timings.sessionBackAfterRestartMs = Date.now() - restarted;
    const r = await runWorker(relay, ['call', apiKey, 'OpenPopover', '{"message":"After the restart"}']);
    assert.equal(r.code, 0, r.stderr);
    await page.waitForFunction(() => document.getElementById('popover').textContent === 'After the restart', null, { timeout: 5000 });
  });

  test(`a participant that leaves while the worker is down has its key revoked when the worker is back${spec.label}`, async () => {
    const other = await context.newPage();
    other.on('pageerror', (e) => pageErrors.push(e.message));
    await other.goto(`${relay.url}/?ice=none`, { waitUntil: 'load', timeout: 15000 });
    await other.keyboard.press('Control+k');
    await other.waitForSelector('#voice[data-state="connected"]', { timeout: 20000 });
    const otherKey = (await other.textContent('#dev-key')).trim();
    relay.remember(otherKey);
    await waitFor('its session, kept in the state file', 10000, async () =>
      (await workerSessions()).some((s) => s.key === fp(otherKey)) && existsSync(join(dir, 'worker-sessions.json')));
    await worker.stop();
    await other.close();
    // Out of the room while no worker listened; the relay still has the key (its tab is gone, the
    // key waits out its reconnect grace).
    await sleep(2000);
    assert.notEqual((await relay.keyState(otherKey)).status, 404);
    const back = Date.now();
    worker = await startWorkerHere({ WORKER_ROOM_SYNC_SECS: '300' });
    await waitFor('the key to be revoked', 15000, async () => (await relay.keyState(otherKey)).status === 404, 100);
    timings.leftWhileDownRevokedMs = Date.now() - back;
    assert.equal((await workerSessions()).find((s) => s.key === fp(otherKey)), undefined);
    // The first tab's session was kept through all this.
    assert.ok((await workerSessions()).find((s) => s.key === fp(apiKey)));
  });

  test(`closing the tab: LiveKit says participant_left, the worker revokes the key, the agent's token dies with it${spec.label}`, async () => {
    // A session token of this user's key, as the agent's was minted: it works until they leave.
    const agentToken = await relay.tokenFor(apiKey);
    const asAgent = () => worker.fetch('/agent/tools/OpenPopover', {
      method: 'POST',
      headers: { authorization: `Bearer ${agentToken}`, 'x-voice-agent-key': apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'still there?' }),
    });
    assert.equal((await asAgent()).body.ok, true);
    const closed = Date.now();
    await page.close({ runBeforeUnload: true });
    await waitFor('the key to be revoked', 45000, async () => (await relay.keyState(apiKey)).status === 404, 250);
    timings.leaveToRevokedMs = Date.now() - closed;
    const r = await relay.call({ apiKey, toolName: 'OpenPopover', params: {} }, { token: agentToken });
    assert.equal(r.status, 404);
    assert.equal(r.body.error.code, 'unknown_key');
    const viaWorker = await asAgent();
    assert.equal(viaWorker.body.ok, false);
    assert.equal(viaWorker.body.error.code, 'unknown_key');
    assert.equal((await workerSessions()).find((s) => s.key === fp(apiKey)), undefined);
    const log = execFileSync('cat', [worker.logPath]).toString();
    assert.match(log, /session closed.*participant_(left|connection_aborted)|participant_(left|connection_aborted).*session closed/, 'the webhook closed the session');
    assert.deepEqual(pageErrors, []);
  });

  if (spec.answersText) {
    test(`text mode where the browser has no microphone: the page joins without one, the agent's tools reach it, a typed message is answered; Back asks first, then leaves the room${spec.label}`, async () => {
      const { page: bare, errors } = await pageWithoutMicrophoneApi(context, `${relay.url}/?ice=none`);
      try {
        // The first screen says why voice cannot work here and offers text chat.
        await bare.waitForSelector('#voice-choice-reason:not([hidden])', { timeout: 5000 });
        await bare.click('#start-text');
        await bare.waitForSelector('#connection[data-state="bound"]', { timeout: 10000 });
        relay.remember((await bare.textContent('#dev-key')).trim());
        await bare.waitForSelector('#voice[data-state="connected"]', { timeout: 20000 });
        assert.equal(await bare.textContent('#voice'), 'Voice: text only (no microphone)');
        assert.equal(await bare.isVisible('#voice-unavailable'), false, 'text chosen and joined: no offer of text');
        // The agent joins this room too; its first tool call reaches the page in text mode.
        await bare.waitForSelector('#popover:not([hidden])', { timeout: 30000 });
        assert.equal(await bare.textContent('#popover'), 'Hello from the agent');
        // The agent's script goes on to draw a card: the picker it opens (a modal, which makes the
        // rest of the page inert) is declined, since this test is about text.
        await bare.waitForSelector('#picker[open]', { timeout: 30000 });
        await bare.keyboard.press('Escape');
        await bare.waitForSelector('#picker:not([open])', { state: 'attached', timeout: 5000 });
        const agentItems = () => bare.$$eval('#transcript-list li[data-speaker="agent"]', (li) => li.length);
        const before = await agentItems();
        await bare.fill('#chat-input', 'Hello, can you read this?');
        await bare.press('#chat-input', 'Enter');
        await bare.waitForFunction(() => document.getElementById('chat-input').value === '', null, { timeout: 10000 });
        await waitFor('the agent to answer in the transcript', 30000, async () => (await agentItems()) > before, 200);
        await shot(bare, `${spec.prefix}-06-text-mode`);
        // Back asks first: Stay keeps the room; Leave leaves it (LiveKit tells the worker, which
        // revokes the key) and returns to the first screen.
        const key = (await bare.textContent('#dev-key')).trim();
        const ask = async () => {
          await bare.click('#back');
          await bare.waitForSelector('dialog.voice-relay-leave[open]', { timeout: 3000 });
        };
        await ask();
        await bare.click('dialog.voice-relay-leave button[data-answer="stay"]');
        await bare.waitForSelector('dialog.voice-relay-leave', { state: 'detached', timeout: 3000 });
        assert.equal(await bare.getAttribute('#voice', 'data-state'), 'connected', 'Stay keeps the room');
        await ask();
        await bare.click('dialog.voice-relay-leave button[data-answer="leave"]');
        await bare.waitForSelector('#start-text', { state: 'visible', timeout: 5000 });
        assert.equal(await bare.getAttribute('#voice', 'data-state'), 'off', 'Leave leaves the room');
        await waitFor('the key of the session left to be revoked', 45000, async () => (await relay.keyState(key)).status === 404, 250);
        assert.deepEqual(errors, []);
      } finally {
        await bare.close();
      }
    });
  }
}
