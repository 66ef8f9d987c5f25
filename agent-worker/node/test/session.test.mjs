// The UI tools inside a real LiveKit Agents AgentSession (no room; a scripted LLM that calls
// tools by name), against the real relay and worker, with a socket.io tab: LiveKit runs the
// tools with the catalog's schemas, a failure reaches the model as a sentence, and after a
// mode move the very next step of the same reply already has the new mode's tools.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { initializeLogger, voice } from '@livekit/agents';
import { WorkerClient, uiTools } from '../dist/index.js';
import { catalog } from './catalog.mjs';
import { eventually, startStack, within } from '../../../e2e/harness/index.mjs';

initializeLogger({ pretty: false, level: 'fatal' });

/** LiveKit's FakeLLM, answering each input (the user's text or a tool's output) by a function. */
class ScriptedLLM extends voice.testing.FakeLLM {
  constructor(script) {
    super([]);
    this.script = script;
    this.inputs = [];
  }

  chat(options) {
    const stream = super.chat(options);
    // LiveKit's fake stream reads no input when a configuration note (new tools or
    // instructions) is the last item; read the last message or tool output behind it.
    const proto = Object.getPrototypeOf(stream);
    if (!proto.readsPastConfigUpdates) {
      const original = proto.getInputText;
      proto.getInputText = function getInputText() {
        const last = this.chatCtx.items.filter((i) => i.type !== 'agent_config_update').at(-1);
        if (last?.type === 'function_call_output') return last.output;
        return original.call(this);
      };
      proto.readsPastConfigUpdates = true;
    }
    return stream;
  }

  lookup(input) {
    this.inputs.push(input);
    return this.script(input);
  }
}

let stack;
before(async () => { stack = await startStack({ catalog }); });
after(async () => { await stack?.stop(); });

async function sessionFor(tab, script) {
  const client = new WorkerClient({ url: stack.worker.url, token: tab.agentToken, key: tab.apiKey });
  const ui = await uiTools(client);
  const agent = new voice.Agent({ instructions: ui.instructions, tools: [ui.toolset] });
  ui.bind(agent);
  const model = new ScriptedLLM(script);
  const session = new voice.AgentSession({ llm: model, vad: null });
  await within(10000, session.start({ agent }), 'the session to start');
  return { ui, agent, session, model };
}

const outputs = (result) => result.events.filter((e) => e.type === 'function_call_output').map((e) => e.item);

test('LiveKit runs a UI tool: the call reaches the tab, the result reaches the model', async () => {
  const seen = [];
  const tab = await stack.tab({ CreateDiagram: (p) => { seen.push(p); return { ok: true, result: { id: 'd-7' } }; } });
  const { session, model } = await sessionFor(tab, (input) => {
    if (input === 'draw a flow') return { input, toolCalls: [{ name: 'CreateDiagram', args: { title: 'Flow', kind: 'flow' } }] };
    if (input.includes('d-7')) return { input, content: 'Your diagram is ready.' };
    return undefined;
  });
  try {
    const result = await within(15000, session.run({ userInput: 'draw a flow' }).wait(), 'the run');
    result.expect.containsFunctionCall({ name: 'CreateDiagram' });
    const [out] = outputs(result);
    assert.equal(out.isError, false);
    assert.deepEqual(JSON.parse(out.output), { id: 'd-7' });
    result.expect.containsMessage({ role: 'assistant' });
    assert.deepEqual(seen, [{ title: 'Flow', kind: 'flow' }]);
    assert.ok(model.inputs.some((i) => i.includes('d-7')));
  } finally {
    await session.close();
  }
});

test('LiveKit hands a failure to the model as a sentence', async () => {
  const tab = await stack.tab({ zoom: () => ({ ok: false, error: { code: 'tool_failed', message: 'the canvas is locked' } }) });
  const { session } = await sessionFor(tab, (input) => {
    if (input === 'zoom in') return { input, toolCalls: [{ name: 'zoom', args: { level: 4 } }] };
    if (input.includes('canvas is locked')) return { input, content: 'I could not zoom: the canvas is locked.' };
    return undefined;
  });
  try {
    const result = await within(15000, session.run({ userInput: 'zoom in' }).wait(), 'the run');
    const [out] = outputs(result);
    assert.equal(out.isError, true);
    assert.match(out.output, /could not do that.*the canvas is locked/i);
    assert.doesNotMatch(out.output, /internal error/i);
  } finally {
    await session.close();
  }
});

test('after a mode move, the next reply has the new mode\'s tools and instructions', async () => {
  const tab = await stack.tab();
  const { session, agent, ui } = await sessionFor(tab, (input) => {
    if (input === 'let us review') return { input, toolCalls: [{ name: 'enter_review', args: {} }] };
    if (input === 'comment on it') return { input, toolCalls: [{ name: 'ShowComment', args: { text: 'Looks good' } }] };
    return { input, content: 'Done.' };
  });
  try {
    assert.equal(agent.toolCtx.getFunctionTool('ShowComment'), undefined, 'not offered while drafting');
    const moved = await within(20000, session.run({ userInput: 'let us review' }).wait(), 'the move');
    const [out] = outputs(moved);
    assert.equal(out.name, 'enter_review');
    assert.equal(out.isError, false);
    assert.equal(JSON.parse(out.output).mode, 'review');
    assert.equal(ui.mode, 'review');
    assert.ok(agent.toolCtx.getFunctionTool('ShowComment'));
    assert.equal(agent.toolCtx.getFunctionTool('CreateDiagram'), undefined);
    assert.ok(String(agent.instructions).endsWith('Walk through the diagram.'));
    const next = await within(20000, session.run({ userInput: 'comment on it' }).wait(), 'the next reply');
    const [shown] = outputs(next);
    assert.equal(shown.name, 'ShowComment');
    assert.equal(shown.isError, false, shown.output);
    const [event] = await eventually(() => tab.events.filter((e) => e.event === 'voice-agent:ShowComment'), 'ShowComment at the tab', 5000)
      .then((found) => (found.length ? found : Promise.reject(new Error('no ShowComment'))));
    assert.deepEqual(event.args[0], { text: 'Looks good' });
  } finally {
    await session.close();
  }
});
