// The package against the real relay and worker binaries, with a tab played by socket.io-client
// and a custom catalog given to the worker through WORKER_CATALOG.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { llm } from '@livekit/agents';
import { UiTools, WorkerClient, WorkerError, composeInstructions, uiTools } from '../dist/index.js';
import { byName, catalog } from './catalog.mjs';
import { eventually, startStack, within } from '../../../e2e/harness/index.mjs';

let stack;
before(async () => { stack = await startStack({ catalog }); });
after(async () => { await stack?.stop(); });

/** A client as the agent of `who` (a tab, or a minted token answer) holds it: its own session token. */
const clientFor = (who, extra = {}) => new WorkerClient({ url: stack.worker.url, token: who.agentToken, key: who.apiKey, ...extra });

/** Runs a function tool as LiveKit would: arguments, then the options with an abort signal. */
function run(tool, args, signal = new AbortController().signal) {
  return tool.execute(args, { toolCallId: `call-${Math.random()}`, abortSignal: signal, ctx: undefined });
}

const toolsOf = (ui) => Object.fromEntries(ui.toolset.tools.map((t) => [t.name, t]));

/** Stands in for LiveKit's Agent: records the instructions it is given. */
const fakeAgent = () => ({ given: [], async updateInstructions(text) { this.given.push(text); } });

test('the offer becomes function tools with the catalog\'s own schemas', async () => {
  const tab = await stack.tab();
  const ui = await uiTools(clientFor(tab));
  assert.equal(ui.mode, 'drafting');
  assert.deepEqual(ui.toolset.names(), ['CreateDiagram', 'ShowHelp', 'enter_help', 'enter_review', 'zoom']);
  const tools = toolsOf(ui);
  for (const name of ['CreateDiagram', 'zoom', 'ShowHelp']) {
    assert.ok(llm.isFunctionTool(tools[name]), name);
    assert.equal(tools[name].description, byName[name].description);
    assert.deepEqual(tools[name].parameters, byName[name].parameters, `${name}: the schema verbatim`);
  }
  assert.match(tools.enter_review.description, /review/);
  assert.equal(ui.instructions, composeInstructions({ instructions: 'Help the user draw.' }));
  assert.ok(ui.instructions.endsWith('Help the user draw.'));
  // The offer as the client reads it.
  const offer = await clientFor(tab).listTools();
  assert.equal(offer.tools.find((t) => t.name === 'CreateDiagram').timeoutMs, 5000);
  assert.deepEqual(offer.tools.find((t) => t.name === 'CreateDiagram').outputSchema, byName.CreateDiagram.outputSchema);
  assert.equal(offer.tools.find((t) => t.name === 'ShowHelp').awaitResult, false);
  assert.match(offer.revision, /^[0-9a-f]+$/);
});

test('a call reaches the tab and its result comes back to the model', async () => {
  const seen = [];
  const tab = await stack.tab({
    CreateDiagram: (params) => { seen.push(params); return { ok: true, result: { id: 'd-1' } }; },
    ShowHelp: () => ({ ok: true, result: null }),
  });
  const outcomes = [];
  const ui = await uiTools(clientFor(tab), { onTool: (o) => outcomes.push(o) });
  const result = await within(10000, run(toolsOf(ui).CreateDiagram, { title: 'Flows', kind: 'flow' }), 'the call');
  assert.deepEqual(result, { id: 'd-1' });
  assert.deepEqual(seen, [{ title: 'Flows', kind: 'flow' }]);
  assert.equal(outcomes.at(-1).ok, true);
  // Fire-and-forget: shown, and the model reads the worker's acknowledgement.
  const shown = await within(10000, run(toolsOf(ui).ShowHelp, {}), 'the call');
  assert.equal(typeof shown, 'object');
  assert.notEqual(shown, null);
  await eventually(() => tab.events.some((e) => e.event === 'voice-agent:ShowHelp'), 'ShowHelp at the tab');
});

test('failures become sentences the model can say', async () => {
  const tab = await stack.tab({
    zoom: () => ({ ok: false, error: { code: 'tool_failed', message: 'the canvas is locked' } }),
  });
  const ui = await uiTools(clientFor(tab));
  const tools = toolsOf(ui);
  const failure = async (promise) => {
    try {
      await within(15000, promise, 'the call');
    } catch (e) {
      return e;
    }
    assert.fail('the call should have failed');
  };

  let e = await failure(run(tools.zoom, { level: 3 }));
  assert.ok((e instanceof llm.ToolError), 'a ToolError (LiveKit hands its message to the model)');
  assert.match(e.message, /could not do that/i);
  assert.match(e.message, /the canvas is locked/);
  assert.doesNotMatch(e.message, /\n/);

  // Arguments that do not match the catalog's schema: refused before the tab.
  e = await failure(run(tools.zoom, { level: 99 }));
  assert.ok((e instanceof llm.ToolError));
  assert.match(e.message, /invalid arguments/i);
  assert.equal(tab.events.filter((ev) => ev.event === 'voice-agent:zoom').length, 1, 'the bad call never reached the tab');

  // A tool the tab has no handler for.
  e = await failure(run(tools.CreateDiagram, { title: 'x', kind: 'flow' }));
  assert.ok((e instanceof llm.ToolError));
  assert.match(e.message, /cannot show that|did not answer|could not/i);

  // A key whose tab is not connected.
  const minted = await stack.issueKey();
  const { apiKey } = minted;
  const offline = await uiTools(clientFor(minted));
  e = await failure(run(toolsOf(offline).ShowHelp, {}));
  assert.ok((e instanceof llm.ToolError));
  assert.match(e.message, /not connected/);

  // The worker cannot be reached: a sentence too, and bounded.
  const gone = new UiTools(new WorkerClient({ url: 'http://127.0.0.1:9', token: minted.agentToken, key: apiKey, listTimeoutMs: 2000 }));
  const started = Date.now();
  e = await failure(gone.call({ ...byName.ShowHelp, outputSchema: null, awaitResult: false, timeoutMs: 500 }, {}));
  assert.ok((e instanceof llm.ToolError));
  assert.match(e.message, /unavailable/);
  assert.ok(Date.now() - started < 10000);
});

test('the client throws typed errors with the worker\'s codes', async () => {
  const minted = await stack.issueKey();
  const { apiKey } = minted;
  const wrong = new WorkerClient({ url: stack.worker.url, token: 'forged.token.value', key: apiKey });
  await assert.rejects(wrong.listTools(), (e) => e instanceof WorkerError && e.code === 'unauthorized' && e.status === 401);
  const other = await stack.issueKey();
  const foreign = new WorkerClient({ url: stack.worker.url, token: other.agentToken, key: apiKey });
  await assert.rejects(foreign.listTools(), (e) => e instanceof WorkerError && e.code === 'forbidden' && e.status === 403);
  assert.throws(() => new WorkerClient({ url: stack.worker.url, token: 'a-server-secret', key: apiKey }), /session token/);
  const outcome = await clientFor(minted).callTool('NoSuchTool', {});
  assert.equal(outcome.ok, false);
  assert.equal(outcome.error.code, 'unknown_tool');
  const notHere = await clientFor(minted).callTool('ShowComment', { text: 'hi' });
  assert.equal(notHere.error.code, 'tool_not_allowed');
  const bad = await clientFor(minted).callTool('zoom', { level: 'big' });
  assert.equal(bad.error.code, 'invalid_arguments');
  assert.throws(() => new WorkerClient({ url: stack.worker.url, token: minted.agentToken, key: 'va_nope' }), /routing key/);
  const down = new WorkerClient({ url: 'http://127.0.0.1:9', token: minted.agentToken, key: apiKey, listTimeoutMs: 1000 });
  await assert.rejects(down.listTools(), (e) => e instanceof WorkerError && e.code === 'unavailable');
  assert.ok(!String(clientFor(minted)).includes(apiKey), 'the client never shows its key');
});

test('a mode move swaps the tools and the instructions', async () => {
  const tab = await stack.tab();
  const agent = fakeAgent();
  const ui = await uiTools(clientFor(tab), { agent });
  const stale = toolsOf(ui).CreateDiagram;
  const moved = await within(10000, run(toolsOf(ui).enter_review, {}), 'enter_review');
  assert.ok(moved !== undefined);
  assert.equal(ui.mode, 'review');
  assert.deepEqual(ui.toolset.names(), ['ShowComment', 'ShowHelp', 'enter_drafting', 'zoom']);
  assert.deepEqual(toolsOf(ui).ShowComment.parameters, byName.ShowComment.parameters);
  assert.ok(agent.given.at(-1).endsWith('Walk through the diagram.'));
  // The tab is told its mode.
  await eventually(() => tab.events.some((e) => e.event === 'voice-agent:mode' && e.args[0]?.mode === 'review'), 'the mode at the tab');
  // A tool of the old mode is refused now, as a sentence.
  await assert.rejects(run(stale, { title: 'x', kind: 'flow' }), (e) => e instanceof llm.ToolError && /not available in this mode/.test(e.message));
  await within(10000, run(toolsOf(ui).enter_drafting, {}), 'enter_drafting');
  assert.equal(ui.mode, 'drafting');
  await within(10000, run(toolsOf(ui).enter_help, {}), 'enter_help');
  assert.deepEqual(ui.toolset.names(), ['ShowHelp', 'leave_help']);
  await within(10000, run(toolsOf(ui).leave_help, {}), 'leave_help');
  assert.equal(ui.mode, 'drafting');
  assert.ok(agent.given.at(-1).endsWith('Help the user draw.'));
});

test('follow: a change seen by the long-poll replaces the tools', async () => {
  const tab = await stack.tab();
  const agent = fakeAgent();
  const ui = await uiTools(clientFor(tab), { agent });
  const stop = new AbortController();
  const following = ui.follow(stop.signal, { waitMs: 5000 });
  try {
    // The tab says it handles only zoom: CreateDiagram and ShowHelp leave the offer.
    await stack.declare(tab, ['zoom']);
    await eventually(() => !ui.toolset.names().includes('CreateDiagram'), 'the tools to follow the tab', 8000);
    assert.deepEqual(ui.toolset.names(), ['enter_help', 'enter_review', 'zoom']);
    // A move made by someone else (another client of the same session) is followed too.
    const other = clientFor(tab);
    assert.equal((await other.callTool('enter_review', {})).modeChanged, true);
    await eventually(() => ui.mode === 'review', 'the mode to follow', 8000);
    assert.ok(agent.given.at(-1).endsWith('Walk through the diagram.'));
  } finally {
    stop.abort();
    await within(10000, following, 'follow to end');
  }
});

test('cancellation: LiveKit\'s abort signal drops the call', async () => {
  let answer;
  const tab = await stack.tab({ zoom: () => new Promise((r) => { answer = r; }) });
  const ui = await uiTools(clientFor(tab));
  const abort = new AbortController();
  const started = Date.now();
  const call = run(toolsOf(ui).zoom, { level: 2 }, abort.signal);
  await eventually(() => tab.events.some((e) => e.event === 'voice-agent:zoom'), 'the call at the tab');
  abort.abort();
  await assert.rejects(within(5000, call, 'the cancelled call'), (e) => (e instanceof llm.ToolError) && /cancelled/i.test(e.message));
  assert.ok(Date.now() - started < 5000, 'well before the tool\'s 20 s timeout');
  // The relay tells the tab the call is cancelled.
  await eventually(() => tab.events.some((e) => e.event === 'voice-agent:cancel'), 'voice-agent:cancel at the tab', 5000);
  answer?.({ ok: true, result: null });
});
