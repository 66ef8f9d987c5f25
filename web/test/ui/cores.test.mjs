// The framework-free cores behind the voice UI hooks and the demo's conversation panel
// (web/client/src/{transcript,chat,push-to-talk,availability,leave}.ts), compiled with esbuild and
// run in Node. THE ONE FAKE: a small object stands in for livekit-client's Room (its text stream
// handler registry, its event emitter, the local participant's sendText / setMicrophoneEnabled /
// performRpc) and feeds the events LiveKit would deliver; the cores' own code is the real one.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const src = join(here, '../../client/src');
let out;
let T; // transcript.ts
let C; // chat.ts
let P; // push-to-talk.ts
let A; // availability.ts
let L; // leave.ts

before(async () => {
  out = await mkdtemp(join(tmpdir(), 'voice-ui-cores-'));
  const names = ['transcript', 'chat', 'push-to-talk', 'availability', 'leave'];
  await build({
    entryPoints: names.map((n) => join(src, `${n}.ts`)),
    outdir: out,
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'es2022',
    external: ['livekit-client'],
    outExtension: { '.js': '.mjs' },
    logLevel: 'error',
  });
  [T, C, P, A, L] = await Promise.all(names.map((n) => import(pathToFileURL(join(out, `${n}.mjs`)).href)));
});
after(async () => {
  if (out) await rm(out, { recursive: true, force: true });
});

/** Stands in for livekit-client's Room: only what the cores touch. */
class FakeRoom extends EventEmitter {
  constructor() {
    super();
    this.handlers = new Map();
    this.sent = [];
    this.mic = [];
    this.rpcs = [];
    this.sendText = async (text, options) => {
      this.sent.push({ text, topic: options?.topic });
      return { id: 'stream-1', topic: options?.topic };
    };
    this.remoteParticipants = new Map();
    const room = this;
    this.localParticipant = {
      identity: 'user-1',
      isMicrophoneEnabled: true,
      trackPublications: new Map([['TR_mic', { trackSid: 'TR_mic' }]]),
      sendText: (text, options) => room.sendText(text, options),
      async setMicrophoneEnabled(on) {
        room.mic.push(on);
        this.isMicrophoneEnabled = on;
      },
      async performRpc(params) {
        room.rpcs.push(params);
        if (room.rpcFails) throw new Error('Method not supported at destination');
        return '';
      },
    };
  }
  registerTextStreamHandler(topic, handler) {
    if (this.handlers.has(topic)) throw new Error(`a handler for ${topic} is already registered`);
    this.handlers.set(topic, handler);
  }
  unregisterTextStreamHandler(topic) {
    this.handlers.delete(topic);
  }
  /** A text stream as LiveKit delivers it: header attributes, then chunks (deltas). */
  async stream(from, id, attributes, chunks, { fail = false, trailer = null } = {}) {
    let release;
    const done = new Promise((r) => { release = r; });
    const reader = {
      info: { id, topic: 'lk.transcription', attributes, mimeType: 'text/plain', timestamp: Date.now() },
      async *[Symbol.asyncIterator]() {
        try {
          for (const c of chunks) {
            await new Promise((r) => setImmediate(r));
            yield c;
          }
          if (fail) throw new Error('stream cut short');
          // livekit-client merges the trailer's attributes into info.attributes at the end.
          if (trailer) reader.info.attributes = { ...reader.info.attributes, ...trailer };
        } finally {
          setImmediate(release);
        }
      },
    };
    this.handlers.get('lk.transcription')(reader, { identity: from });
    await done;
    await new Promise((r) => setImmediate(r));
  }
}

const texts = (t) => t.getSnapshot().map((s) => [s.speaker, s.text, s.final]);

test('transcript: the agent\'s streamed words accumulate; a stream without the final attribute is final when it ends', async () => {
  const t = new T.TranscriptStore();
  const room = new FakeRoom();
  const seen = [];
  t.subscribe(() => seen.push(t.getSnapshot().at(-1)?.text));
  t.attach(room);
  await room.stream('agent-7', 'S1', { 'lk.segment_id': 'SG_a', 'lk.transcribed_track_id': 'TR_agent' }, ['Hello ', 'there, ', 'friend.']);
  assert.deepEqual(texts(t), [['agent', 'Hello there, friend.', true]]);
  assert.deepEqual(seen, ['Hello ', 'Hello there, ', 'Hello there, friend.', 'Hello there, friend.']);
  assert.equal(t.getSnapshot()[0].identity, 'agent-7');
  assert.equal(t.getSnapshot()[0].id, 'SG_a');
});

test('transcript: the user\'s interim versions (sent by the agent, from the tab\'s track) are replaced by the final', async () => {
  const t = new T.TranscriptStore();
  const room = new FakeRoom();
  t.attach(room);
  const attrs = (final) => ({ 'lk.segment_id': 'SG_u', 'lk.transcribed_track_id': 'TR_mic', 'lk.transcription_final': String(final) });
  await room.stream('agent-7', 'S2', attrs(false), ['draw a'] );
  assert.deepEqual(texts(t), [['user', 'draw a', false]]);
  await room.stream('agent-7', 'S3', attrs(false), ['draw a card']);
  assert.deepEqual(texts(t), [['user', 'draw a card', false]]);
  await room.stream('agent-7', 'S4', attrs(true), ['draw a card for me']);
  assert.deepEqual(texts(t), [['user', 'draw a card for me', true]]);
  assert.equal(t.getSnapshot()[0].identity, 'user-1');
  // A late interim version never replaces the final words.
  await room.stream('agent-7', 'S5', attrs(false), ['draw a car']);
  assert.deepEqual(texts(t), [['user', 'draw a card for me', true]]);
  // Words streamed as spoken: final=false in the header, final=true in the trailer.
  await room.stream('agent-7', 'S7', { 'lk.segment_id': 'SG_w', 'lk.transcription_final': 'false' }, ['One ', 'two.'], { trailer: { 'lk.transcription_final': 'true' } });
  assert.deepEqual(texts(t).at(-1), ['agent', 'One two.', true]);
  assert.equal(t.getSnapshot().at(-1).source, 'stream');
  // The agent's words streamed as spoken, ended without a trailer (LiveKit Agents for Node):
  // complete when the stream ends.
  await room.stream('agent-7', 'S8', { 'lk.segment_id': 'SG_x', 'lk.transcription_final': 'false' }, ['Three ', 'four.']);
  assert.deepEqual(texts(t).at(-1), ['agent', 'Three four.', true]);
  // A stream cut short that said final=false stays interim.
  await room.stream('agent-7', 'S6', { 'lk.segment_id': 'SG_v', 'lk.transcription_final': 'false' }, ['and'], { fail: true });
  assert.deepEqual(texts(t).at(-1), ['agent', 'and', false]);
});

test('transcript: TranscriptionReceived segments, keyed by id, interim then final; the local participant is the user', () => {
  const t = new T.TranscriptStore();
  const room = new FakeRoom();
  t.attach(room);
  const agent = { identity: 'agent-7', isLocal: false };
  const me = { identity: 'user-1', isLocal: true };
  room.emit('transcriptionReceived', [{ id: 'a', text: 'I see', final: false }], agent);
  room.emit('transcriptionReceived', [{ id: 'a', text: 'I see the Star', final: true }], agent);
  room.emit('transcriptionReceived', [{ id: 'b', text: 'thanks', final: true }], me);
  assert.deepEqual(texts(t), [['agent', 'I see the Star', true], ['user', 'thanks', true]]);
  assert.deepEqual(t.getSnapshot().map((s) => s.source), ['event', 'event']);
});

test('transcript: a room that sends text streams too (LiveKit Agents 1.x sends both ways): the streams win', async () => {
  const t = new T.TranscriptStore();
  const room = new FakeRoom();
  t.attach(room);
  const agent = { identity: 'agent-7', isLocal: false };
  room.emit('transcriptionReceived', [{ id: 'GEN_1', text: 'You drew the Star.', final: true }], agent);
  assert.deepEqual(texts(t), [['agent', 'You drew the Star.', true]]);
  await room.stream('agent-7', 'S1', { 'lk.segment_id': 'SG_1', 'lk.transcription_final': 'false' }, ['You drew ', 'the Star.'], { trailer: { 'lk.transcription_final': 'true' } });
  room.emit('transcriptionReceived', [{ id: 'GEN_2', text: 'Anything else?', final: true }], agent);
  await room.stream('agent-7', 'S2', { 'lk.segment_id': 'SG_2' }, ['Anything else?']);
  assert.deepEqual(t.getSnapshot().map((s) => [s.id, s.source, s.text, s.final]), [
    ['SG_1', 'stream', 'You drew the Star.', true],
    ['SG_2', 'stream', 'Anything else?', true],
  ]);
});

test('transcript: bounded to its limit (oldest out) and to its text length; an unchanged update keeps the snapshot', () => {
  const t = new T.TranscriptStore({ limit: 3, maxTextLength: 5 });
  for (let i = 0; i < 5; i++) t.update({ id: `s${i}`, speaker: 'agent', text: `segment ${i}`, final: true });
  assert.deepEqual(t.getSnapshot().map((s) => s.id), ['s2', 's3', 's4']);
  assert.equal(t.getSnapshot()[0].text, 'segme');
  const before = t.getSnapshot();
  assert.equal(t.update({ id: 's4', speaker: 'agent', text: 'segment 4', final: true }), false);
  assert.equal(t.getSnapshot(), before);
  t.clear();
  assert.deepEqual(t.getSnapshot(), []);
});

test('transcript: detaching unregisters the stream handler and the event listener; words after that are dropped', async () => {
  const t = new T.TranscriptStore();
  const room = new FakeRoom();
  const detach = t.attach(room);
  assert.equal(room.listenerCount('transcriptionReceived'), 1);
  detach();
  assert.equal(room.handlers.has('lk.transcription'), false);
  assert.equal(room.listenerCount('transcriptionReceived'), 0);
  room.emit('transcriptionReceived', [{ id: 'x', text: 'late', final: true }], { identity: 'agent-7' });
  assert.deepEqual(t.getSnapshot(), []);
  // A room can be followed again (the handler slot is free).
  const again = t.attach(room);
  assert.equal(room.handlers.has('lk.transcription'), true);
  again();
  // When the app holds the topic's handler, the event is still read and the app's stays.
  const theirs = () => {};
  room.registerTextStreamHandler('lk.transcription', theirs);
  const shared = t.attach(room);
  room.emit('transcriptionReceived', [{ id: 'y', text: 'still heard', final: true }], { identity: 'agent-7' });
  assert.deepEqual(texts(t), [['agent', 'still heard', true]]);
  shared();
  assert.equal(room.handlers.get('lk.transcription'), theirs);
});

test('text chat: sends on lk.chat, records the message as the user\'s words, refuses empty, too long, no room and nobody in it', async () => {
  const transcript = new T.TranscriptStore();
  const chat = new C.TextChat({ maxLength: 10, transcript });
  const room = new FakeRoom();
  assert.equal(await chat.send(room, 'anyone?'), false);
  assert.deepEqual(chat.getSnapshot(), { state: 'failed', error: 'no agent is in the room yet, so nobody would read the message' });
  assert.equal(room.sent.length, 0, 'not sent into an empty room');
  room.remoteParticipants.set('agent-1', { identity: 'agent-1', isAgent: true });
  const states = [];
  chat.subscribe(() => states.push(chat.getSnapshot().state));
  assert.equal(await chat.send(room, '  hi agent  '), true);
  assert.deepEqual(room.sent, [{ text: 'hi agent', topic: 'lk.chat' }]);
  assert.deepEqual(states, ['sending', 'idle']);
  assert.deepEqual(texts(transcript), [['user', 'hi agent', true]]);
  assert.equal(transcript.getSnapshot()[0].source, 'chat');

  assert.equal(await chat.send(room, '   '), false);
  assert.deepEqual(chat.getSnapshot(), { state: 'failed', error: 'the message is empty' });
  assert.equal(await chat.send(room, 'x'.repeat(11)), false);
  assert.match(chat.getSnapshot().error, /11 characters long; at most 10/);
  assert.equal(await chat.send(null, 'hello'), false);
  assert.match(chat.getSnapshot().error, /voice is not connected/);
  assert.equal(room.sent.length, 1, 'nothing refused was sent');
  chat.reset();
  assert.deepEqual(chat.getSnapshot(), { state: 'idle', error: null });
});

test('text chat: a failed send says why; a send that never completes fails after its bound', async () => {
  const chat = new C.TextChat({ timeoutMs: 100 });
  const room = new FakeRoom();
  room.remoteParticipants.set('agent-1', { identity: 'agent-1', isAgent: true });
  room.sendText = async () => { throw new Error('the room is not connected'); };
  assert.equal(await chat.send(room, 'hello'), false);
  assert.deepEqual(chat.getSnapshot(), { state: 'failed', error: 'the room is not connected' });
  room.sendText = () => new Promise(() => {});
  const started = Date.now();
  assert.equal(await chat.send(room, 'hello'), false);
  assert.ok(Date.now() - started < 2000);
  assert.equal(chat.getSnapshot().error, 'the message could not be sent in time');
});

test('push-to-talk: muted while attached and not held; press opens, release mutes; detaching restores the microphone', async () => {
  const ptt = new P.PushToTalk();
  const room = new FakeRoom();
  const detach = ptt.attach(room);
  await Promise.resolve();
  assert.deepEqual(room.mic, [false]);
  ptt.press();
  ptt.press(); // already held: nothing more
  assert.equal(ptt.getSnapshot().held, true);
  ptt.release();
  assert.equal(ptt.getSnapshot().held, false);
  ptt.toggle();
  ptt.toggle();
  await Promise.resolve();
  assert.deepEqual(room.mic, [false, true, false, true, false]);
  assert.deepEqual(room.rpcs, [], 'no turn RPC unless asked for');
  detach();
  assert.deepEqual(room.mic, [false, true, false, true, false, true], 'the microphone was on before: on again');
});

test('push-to-talk: with turnRpc, press and release call start_turn / end_turn on the agent; a refusal is reported', async () => {
  const ptt = new P.PushToTalk({ turnRpc: true, rpcTimeoutMs: 500 });
  const room = new FakeRoom();
  room.remoteParticipants.set('agent-7', { identity: 'agent-7', isAgent: true });
  ptt.attach(room);
  ptt.press();
  ptt.release();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(room.rpcs.map((r) => [r.destinationIdentity, r.method, r.responseTimeout]), [
    ['agent-7', 'start_turn', 500],
    ['agent-7', 'end_turn', 500],
  ]);
  room.rpcFails = true;
  ptt.press();
  await new Promise((r) => setImmediate(r));
  assert.match(ptt.getSnapshot().error, /the agent did not take the turn \(start_turn: Method not supported/);
});

test('push-to-talk: an agent without the turn methods (unsupported method) is no error and is not asked again; an unanswered call is bounded', async () => {
  const ptt = new P.PushToTalk({ turnRpc: true, rpcTimeoutMs: 200 });
  const room = new FakeRoom();
  room.remoteParticipants.set('agent-7', { identity: 'agent-7', isAgent: true });
  // What livekit-client rejects with when the destination registered no such method.
  room.localParticipant.performRpc = async (params) => {
    room.rpcs.push(params);
    throw Object.assign(new Error('Method not supported at destination'), { code: P.RPC_UNSUPPORTED_METHOD });
  };
  ptt.attach(room);
  ptt.press();
  ptt.release();
  await new Promise((r) => setImmediate(r));
  assert.equal(ptt.getSnapshot().error, null, 'not an error: the microphone still follows the key');
  ptt.press();
  ptt.release();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(room.rpcs.map((r) => r.method), ['start_turn', 'end_turn'], 'asked once per method');
  assert.equal(P.RPC_UNSUPPORTED_METHOD, 1400);

  // An agent that never answers: the call gives up after rpcTimeoutMs and says so.
  const silent = new FakeRoom();
  silent.remoteParticipants.set('agent-8', { identity: 'agent-8', isAgent: true });
  silent.localParticipant.performRpc = () => new Promise(() => {});
  const other = new P.PushToTalk({ turnRpc: true, rpcTimeoutMs: 150 });
  other.attach(silent);
  const started = Date.now();
  other.press();
  while (!other.getSnapshot().error && Date.now() - started < 2000) await new Promise((r) => setTimeout(r, 20));
  assert.match(other.getSnapshot().error, /the agent did not take the turn \(start_turn: no answer in time\)/);
  assert.ok(Date.now() - started < 1000, `bounded (${Date.now() - started} ms)`);
});

test('push-to-talk: the key binding presses on keydown, ignores auto-repeat, releases on keyup', () => {
  const ptt = new P.PushToTalk();
  const target = new EventTarget();
  const unbind = ptt.bindKey('Space', target);
  const key = (type, code, extra = {}) => {
    const e = new Event(type, { cancelable: true });
    Object.assign(e, { code, repeat: false, ctrlKey: false, metaKey: false, altKey: false, ...extra });
    target.dispatchEvent(e);
    return e;
  };
  const states = [];
  ptt.subscribe(() => states.push(ptt.getSnapshot().held));
  assert.equal(key('keydown', 'Space').defaultPrevented, true, 'no scrolling while talking');
  key('keydown', 'Space', { repeat: true });
  key('keydown', 'KeyA');
  key('keydown', 'Space', { ctrlKey: true });
  assert.deepEqual(states, [true]);
  key('keyup', 'Space');
  assert.deepEqual(states, [true, false]);
  key('keydown', 'Space');
  unbind(); // unbinding while held releases
  assert.deepEqual(states, [true, false, true, false]);
  key('keydown', 'Space');
  assert.equal(states.length, 4);
});

test('availability: no WebRTC, an insecure context, no getUserMedia, a failed connection; each a sentence', () => {
  const ok = { RTCPeerConnection: function () {}, isSecureContext: true, navigator: { mediaDevices: { getUserMedia() {} } } };
  assert.deepEqual(A.voiceAvailability(null, ok), { available: true, reason: null });
  assert.match(A.voiceAvailability(null, { ...ok, RTCPeerConnection: undefined }).reason, /^This browser cannot make WebRTC calls/);
  assert.match(A.voiceAvailability(null, { ...ok, isSecureContext: false }).reason, /not served over https/);
  assert.match(A.voiceAvailability(null, { ...ok, navigator: { mediaDevices: {} } }).reason, /does not let the page use a microphone/);
  assert.match(A.voiceAvailability(null, { ...ok, navigator: {} }).reason, /does not let the page use a microphone/);
  assert.deepEqual(A.voiceAvailability('could not reach the LiveKit server at ws://x', ok), {
    available: false,
    reason: 'Voice failed: Could not reach the LiveKit server at ws://x.',
  });
});

test('leave: without a DOM (server rendering, Node) confirmLeave answers true and guardUnload is a no-op', async () => {
  assert.equal(await L.confirmLeave(), true);
  const remove = L.guardUnload(() => true);
  assert.equal(typeof remove, 'function');
  remove();
});
