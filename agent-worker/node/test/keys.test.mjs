// The key rules: a valid key from a remote user participant's metadata only.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { randomBytes } from 'node:crypto';
import { LocalParticipant, RemoteParticipant, ParticipantKind } from '@livekit/rtc-node';
import { fingerprint, firstKeyed, isApiKey, keyFromMetadata, keyFromParticipant, waitForKeyedParticipant } from '../dist/index.js';

const key = () => `va_${randomBytes(32).toString('hex')}`;

/** A participant of rtc-node's own classes, without a room (its getters read `info`). */
function participant(Kind, { identity = 'user', metadata = '', kind = ParticipantKind.STANDARD } = {}) {
  const p = Object.create(Kind.prototype);
  p.info = { identity, metadata, kind, name: identity };
  return p;
}

test('a key is va_ and 64 lowercase hex digits', () => {
  const k = key();
  assert.ok(isApiKey(k));
  for (const bad of [k.toUpperCase(), k.slice(0, -1), `${k}0`, `vb_${k.slice(3)}`, ` ${k}`, 42, null, undefined]) {
    assert.equal(isApiKey(bad), false, String(bad));
  }
  assert.match(fingerprint(k), /^[0-9a-f]{8}$/);
  assert.ok(!k.includes(fingerprint(k)));
});

test('the key is read from the metadata JSON apiKey, nothing else', () => {
  const k = key();
  assert.equal(keyFromMetadata(JSON.stringify({ apiKey: k })), k);
  assert.equal(keyFromMetadata(JSON.stringify({ apiKey: k, other: 1 })), k);
  for (const bad of ['', null, undefined, 'not json', k, JSON.stringify(k), JSON.stringify([k]),
    JSON.stringify({ apikey: k }), JSON.stringify({ apiKey: k.toUpperCase() }), JSON.stringify({ apiKey: 7 }), 'null']) {
    assert.equal(keyFromMetadata(bad), undefined, String(bad));
  }
});

test('only a remote, non-agent participant gives its key', () => {
  const k = key();
  const metadata = JSON.stringify({ apiKey: k });
  assert.equal(keyFromParticipant(participant(RemoteParticipant, { metadata })), k);
  assert.equal(keyFromParticipant(participant(RemoteParticipant, { metadata, kind: ParticipantKind.SIP })), k);
  // The agent's own participant, even with a key in its metadata.
  assert.equal(keyFromParticipant(participant(LocalParticipant, { metadata })), undefined);
  // Another agent in the room.
  assert.equal(keyFromParticipant(participant(RemoteParticipant, { metadata, kind: ParticipantKind.AGENT })), undefined);
  // Plain objects: the room's own identity is not a user.
  assert.equal(keyFromParticipant({ identity: 'me', metadata }, { localIdentity: 'me' }), undefined);
  assert.equal(keyFromParticipant({ identity: 'you', metadata }, { localIdentity: 'me' }), k);
  assert.equal(keyFromParticipant(participant(RemoteParticipant, { metadata: '{}' })), undefined);
  assert.equal(keyFromParticipant(undefined), undefined);
  const agent = participant(RemoteParticipant, { identity: 'a', metadata, kind: ParticipantKind.AGENT });
  const user = participant(RemoteParticipant, { identity: 'u', metadata });
  assert.equal(firstKeyed([agent, user])?.participant, user);
});

class FakeRoom extends EventEmitter {
  constructor(participants = []) {
    super();
    this.localParticipant = participant(LocalParticipant, { identity: 'agent' });
    this.remoteParticipants = new Map(participants.map((p) => [p.identity, p]));
  }
}

test('waiting for a keyed user: present, joining, keyed later, or bounded', async () => {
  const k = key();
  const present = participant(RemoteParticipant, { identity: 'u1', metadata: JSON.stringify({ apiKey: k }) });
  assert.equal((await waitForKeyedParticipant(new FakeRoom([present]), { timeoutMs: 1000 })).key, k);

  const room = new FakeRoom([participant(RemoteParticipant, { identity: 'observer' })]);
  const waiting = waitForKeyedParticipant(room, { timeoutMs: 2000 });
  const other = participant(RemoteParticipant, { identity: 'bot', metadata: JSON.stringify({ apiKey: key() }), kind: ParticipantKind.AGENT });
  room.emit('participantConnected', other);
  // The agent's own metadata changing to hold a key does not count.
  room.emit('participantMetadataChanged', '', participant(LocalParticipant, { identity: 'agent', metadata: JSON.stringify({ apiKey: key() }) }));
  const late = participant(RemoteParticipant, { identity: 'u2', metadata: JSON.stringify({ apiKey: k }) });
  room.emit('participantMetadataChanged', '', late);
  const hit = await waiting;
  assert.equal(hit.participant, late);
  assert.equal(room.listenerCount('participantConnected'), 0, 'listeners removed');

  await assert.rejects(waitForKeyedParticipant(new FakeRoom(), { timeoutMs: 50 }), /within 50 ms/);
  const gone = new FakeRoom();
  const p = waitForKeyedParticipant(gone, { timeoutMs: 2000 });
  gone.emit('disconnected', 0);
  await assert.rejects(p, /disconnected/);
  const ac = new AbortController();
  const q = waitForKeyedParticipant(new FakeRoom(), { signal: ac.signal });
  ac.abort(new Error('stop'));
  await assert.rejects(q, /stop/);
});
