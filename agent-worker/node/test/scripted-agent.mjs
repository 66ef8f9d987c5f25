#!/usr/bin/env node
// The Node reference agent with a SCRIPTED LLM, for the voice-room test. Not an AI.
//
// It runs the package's own session (`runSession`: the user and its session token from the
// job's dispatch metadata, the UI
// tools of `UiTools` fetched from the agent worker and following the mode, calls through the
// worker to the tab) with two substitutions:
//
// - the LLM is `ScriptedLLM`, the one fake model of this test: a subclass of LiveKit Agents'
//   `llm.LLM` that does not read what the user says and emits a fixed sequence of tool calls,
//   one per LLM step, then a reply that names the card the user drew;
// - the TTS is espeak-ng (`EspeakTTS` below, a real local TTS run as a program), so the agent
//   publishes audible speech. There is no STT (no offline one exists here): the script is
//   started by a greeting once the user's tab is in the room, and the second reply by the
//   user's request given as text.
//
// LiveKit Agents 1.9 (Node) keeps the tools a reply started with for all of that reply's
// steps, so `draw_card` (offered in the spread mode only) comes in a second reply, after the
// move to that mode ended the first one.
//
// It also subscribes to the user's microphone track and measures its level, and exports its spans
// (LiveKit Agents' function_tool span per tool call) when the OTEL_* variables ask for it.
//
//   LIVEKIT_URL=ws://127.0.0.1:7880 LIVEKIT_API_KEY=devkey LIVEKIT_API_SECRET=... \
//   WORKER_URL=http://127.0.0.1:3002 AGENT_NAME=... node test/scripted-agent.mjs start
//
// Stdout carries LiveKit's JSON logs and, one per line, these events (lines without `level`):
//   {"event":"key","fp":"<8 hex>"}                the user's key (fingerprint only)
//   {"event":"tool","name":"draw_card","ok":true,"result":{...},"mode":"spread",
//    "modeChanged":false,"startedAt":<ms>,"endedAt":<ms>}
//                                                 every tool call and its outcome; startedAt
//                                                 is when the scripted LLM emitted the call
//   {"event":"mic_level","peak":0.12,"rms":0.05}  every second once the mic's audio flows
//   {"event":"said","text":"You drew ...","interrupted":false}
//                                                 every reply the agent says
//   {"event":"turn","method":"start_turn","interrupted":true}
//                                                 the page's push-to-talk RPCs; after an
//                                                 end_turn the agent replies (there is no STT
//                                                 to hear the turn): the script's next step,
//                                                 or its long closing words
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { ServerOptions, cli, defineAgent, llm, tts, voice } from '@livekit/agents';
import { AudioFrame, AudioStream, RoomEvent, TrackKind } from '@livekit/rtc-node';
import { GREETING_INSTRUCTIONS, exportSpans, runSession, tracingFromEnv } from '../dist/index.js';

export const FAKE_NOTICE =
  'SCRIPTED LLM: this agent does not understand speech; it plays a fixed sequence of tool calls for tests ' +
  '(OpenPopover, enter_spread, then draw_card in the next reply)';
/** What the "user" asks in the second reply (typed: there is no STT). */
export const USER_REQUEST = 'Please draw a card for me.';
/** What the agent says once the script is over: long, so a test can interrupt it. */
export const END_OF_SCRIPT =
  'That is the end of my script. I will keep talking for a while, so that you can interrupt me: ' +
  'one, two, three, four, five, six, seven, eight, nine, ten.';
/** The spread position the script draws a card for. */
export const POSITION = 'Past';

function emit(event, fields = {}) {
  process.stdout.write(`${JSON.stringify({ event, ...fields })}\n`);
}

/** The latest output of tool `name` in the conversation. */
function lastOutput(chatCtx, name) {
  return chatCtx.items.findLast((i) => i.type === 'function_call_output' && i.name === name);
}

/** "You drew …" from draw_card's output, or what went wrong. */
function nameTheCard(chatCtx) {
  const out = lastOutput(chatCtx, 'draw_card');
  if (!out) return 'No card was drawn.';
  if (out.isError) return `The card could not be drawn. ${out.output}`;
  let card;
  try {
    card = JSON.parse(out.output);
  } catch {
    return `You drew ${out.output}.`;
  }
  const name = card?.cardName ?? card?.cardId ?? 'a card';
  return `You drew ${name}${card?.reversed ? ', reversed' : ''}.`;
}

const SCRIPT = [
  { tool: 'OpenPopover', args: { message: 'Hello from the agent' } },
  { tool: 'enter_spread', args: {} },
  { text: () => `Let us draw a card for the ${POSITION.toLowerCase()}.` },
  { tool: 'draw_card', args: { positionLabel: POSITION, promptRole: 'What led you here' } },
  { text: nameTheCard },
];

/** THE FAKE LLM: a fixed script, one step per `chat()`, whatever the conversation says. */
export class ScriptedLLM extends llm.LLM {
  #next = 0;
  /** When each tool's call was last emitted (ms since the epoch). */
  emittedAt = new Map();

  constructor(steps = SCRIPT) {
    super();
    this.steps = steps;
    console.error(`scripted-agent: ${FAKE_NOTICE}`);
  }

  label() {
    return 'scripted (fake)';
  }

  get model() {
    return 'scripted';
  }

  take() {
    return this.steps[this.#next++] ?? { text: () => END_OF_SCRIPT };
  }

  chat({ chatCtx, toolCtx, connOptions }) {
    return new ScriptedStream(this, { chatCtx, toolCtx, connOptions }, this.take());
  }
}

class ScriptedStream extends llm.LLMStream {
  constructor(scripted, params, step) {
    super(scripted, params);
    this.scripted = scripted;
    this.step = step;
  }

  async run() {
    const id = randomUUID().slice(0, 12);
    if (this.step.tool) {
      this.scripted.emittedAt.set(this.step.tool, Date.now());
      const call = llm.FunctionCall.create({ callId: `call_${id}`, name: this.step.tool, args: JSON.stringify(this.step.args) });
      this.queue.put({ id, delta: { role: 'assistant', toolCalls: [call] } });
    } else {
      this.queue.put({ id, delta: { role: 'assistant', content: this.step.text(this.chatCtx) } });
    }
  }
}

/** The samples of a WAV file's data chunk (16-bit PCM) and its rate and channels. */
function parseWav(buf) {
  if (buf.length < 12 || buf.toString('ascii', 0, 4) !== 'RIFF' || buf.toString('ascii', 8, 12) !== 'WAVE') {
    throw new Error('espeak-ng did not write a WAV file');
  }
  let rate = 22050;
  let channels = 1;
  let at = 12;
  while (at + 8 <= buf.length) {
    const id = buf.toString('ascii', at, at + 4);
    const size = buf.readUInt32LE(at + 4);
    if (id === 'fmt ') {
      channels = buf.readUInt16LE(at + 10);
      rate = buf.readUInt32LE(at + 12);
    } else if (id === 'data') {
      // espeak-ng writing to a pipe leaves the size unset: the data runs to the end.
      const end = Math.min(buf.length, at + 8 + size);
      const data = buf.subarray(at + 8, end - ((end - at - 8) % 2));
      const samples = new Int16Array(data.length / 2);
      for (let i = 0; i < samples.length; i++) samples[i] = data.readInt16LE(i * 2);
      return { rate, channels, samples };
    }
    at += 8 + size + (size % 2);
  }
  throw new Error('no audio in the WAV from espeak-ng');
}

/** Runs espeak-ng on `text`: its WAV output, bounded in time. */
function speak(text, signal) {
  return new Promise((resolve, reject) => {
    const proc = spawn('espeak-ng', ['-v', 'en', '-s', '170', '--stdout'], { stdio: ['pipe', 'pipe', 'pipe'], signal });
    const chunks = [];
    const timer = setTimeout(() => proc.kill('SIGKILL'), 20000);
    proc.stdout.on('data', (d) => chunks.push(d));
    proc.on('error', (e) => { clearTimeout(timer); reject(e); });
    proc.on('close', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(Buffer.concat(chunks));
      else reject(new Error(`espeak-ng exited with ${code}`));
    });
    proc.stdin.end(text);
  });
}

const ESPEAK_RATE = 22050;

class EspeakStream extends tts.ChunkedStream {
  label = 'espeak.ChunkedStream';

  async run() {
    const { rate, channels, samples } = parseWav(await speak(this.inputText, this.abortSignal));
    const requestId = randomUUID();
    const per = Math.round(rate / 10) * channels; // 100 ms frames
    for (let at = 0; at < samples.length; at += per) {
      const chunk = samples.slice(at, at + per);
      this.queue.put({
        requestId,
        segmentId: requestId,
        frame: new AudioFrame(chunk, rate, channels, chunk.length / channels),
        final: at + per >= samples.length,
      });
    }
  }
}

/** espeak-ng as a LiveKit Agents TTS (not streaming: LiveKit feeds it sentence by sentence). */
export class EspeakTTS extends tts.TTS {
  label = 'espeak.TTS';

  constructor() {
    super(ESPEAK_RATE, 1, { streaming: false });
  }

  synthesize(text, connOptions, abortSignal) {
    return new EspeakStream(text, this, connOptions, abortSignal);
  }

  stream() {
    throw new Error('espeak-ng does not stream: use synthesize');
  }
}

/** Reports the level of `track` every second: the highest 10 ms RMS, and the overall RMS. */
async function meter(track, signal) {
  const stream = new AudioStream(track, { sampleRate: 48000, numChannels: 1 });
  let start = Date.now();
  let peak = 0;
  let energy = 0;
  let frames = 0;
  try {
    for await (const frame of stream) {
      if (signal.aborted) break;
      const d = frame.data;
      const step = 480; // 10 ms at 48 kHz
      for (let at = 0; at < d.length; at += step) {
        let sum = 0;
        const end = Math.min(d.length, at + step);
        for (let i = at; i < end; i++) sum += (d[i] / 32768) ** 2;
        const rms = Math.sqrt(sum / (end - at));
        peak = Math.max(peak, rms);
        energy += rms * rms;
        frames += 1;
      }
      if (Date.now() - start >= 1000 && frames > 0) {
        emit('mic_level', { peak: Number(peak.toFixed(6)), rms: Number(Math.sqrt(energy / frames).toFixed(6)) });
        start = Date.now();
        peak = 0;
        energy = 0;
        frames = 0;
      }
    }
  } catch {
    // the track went away
  }
}

export default defineAgent({
  entry: async (ctx) => {
    // Its spans, when the OTEL_* variables ask for it, as the reference agent exports them.
    const problems = [];
    const spans = exportSpans(tracingFromEnv(process.env, problems));
    if (problems.length > 0) throw new Error(problems.join('; '));
    if (spans) ctx.addShutdownCallback(() => spans.flush());
    const model = new ScriptedLLM();
    const stop = new AbortController();
    ctx.addShutdownCallback(async () => stop.abort());
    let moved = false;
    let asked = false;
    let session = null;
    session = await runSession(
      ctx,
      { workerUrl: process.env.WORKER_URL, greet: false, maxToolSteps: 6 },
      { llm: model, tts: new EspeakTTS() },
      {
        onKey: (fp) => emit('key', { fp }),
        onTool: (o) => {
          const body = { name: o.name, ok: o.ok, result: o.result, mode: o.mode, modeChanged: o.modeChanged };
          if (o.error) body.error = { code: o.error.code, message: o.error.message };
          const startedAt = model.emittedAt.get(o.name);
          if (startedAt !== undefined) body.startedAt = startedAt;
          body.endedAt = Date.now();
          emit('tool', body);
          if (o.name === 'enter_spread' && o.ok) moved = true;
        },
        onTurn: (method, interrupted) => {
          emit('turn', { method, interrupted });
          if (method === 'end_turn') session?.generateReply({ userInput: 'Tell me more.' });
        },
      },
    );
    session.on(voice.AgentSessionEventTypes.ConversationItemAdded, (ev) => {
      const item = ev.item;
      if (item.type !== 'message' || item.role !== 'assistant') return;
      const text = item.textContent;
      if (text) emit('said', { text, interrupted: Boolean(item.interrupted) });
      // The first reply ended after the move to the spread mode: the user asks for a card.
      if (moved && !asked) {
        asked = true;
        session.generateReply({ userInput: USER_REQUEST });
      }
    });
    const metered = new Set();
    const watch = (track, participant) => {
      if (track?.kind !== TrackKind.KIND_AUDIO || participant.identity === ctx.room.localParticipant?.identity) return;
      if (metered.has(track.sid)) return;
      metered.add(track.sid);
      void meter(track, stop.signal);
    };
    ctx.room.on(RoomEvent.TrackSubscribed, (track, _pub, participant) => watch(track, participant));
    for (const p of ctx.room.remoteParticipants.values()) {
      for (const pub of p.trackPublications.values()) watch(pub.track, p);
    }
    session.generateReply({ instructions: GREETING_INSTRUCTIONS });
  },
});

// Run as a program only (`node --test test/` imports every file here: it then does nothing).
if (!process.env.NODE_TEST_CONTEXT && process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  // No CPU load limit (a small test machine with Chromium beside it), one idle job process.
  // The machine's CPU, LiveKit Agents' default load, is shared with the test's own servers and
// Chromium: reported as this agent's load, it would make LiveKit's server withhold jobs from it.
// Registered by name: LiveKit dispatches it only when the agent worker asks, for one user.
cli.runApp(new ServerOptions({
  agent: fileURLToPath(import.meta.url), agentName: process.env.AGENT_NAME, loadThreshold: Infinity, loadFunc: async () => 0, numIdleProcesses: 1,
}));
}
