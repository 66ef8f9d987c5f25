// Typed text for the agent: framework-free, shared by the React hook useTextChat() and the demo
// page. LiveKit Agents 1.x reads text input from the topic `lk.chat` and answers through the
// transcription stream (see transcript.ts), so a reply shows up in the transcript. The message is
// sent with livekit-client 2.x's `room.localParticipant.sendText(text, { topic: 'lk.chat' })`,
// and, when a transcript is given, recorded there as the user's (final) words.

import type { Room } from 'livekit-client';
import { AttemptTimeout, bounded } from './timeout.js';
import type { TranscriptStore } from './transcript.js';

export const CHAT_TOPIC = 'lk.chat';

export type ChatState = 'idle' | 'sending' | 'failed';

export interface ChatSnapshot {
  state: ChatState;
  /** Why the last send failed, as a sentence; null otherwise. */
  error: string | null;
}

export interface ChatOptions {
  /** The longest message accepted, in characters (default 2000). */
  maxLength?: number;
  /** Bound on one send, ms (default 10000). */
  timeoutMs?: number;
  /** Where the sent messages are recorded as the user's words. */
  transcript?: TranscriptStore;
}

/**
 * The part of a livekit-client Room a chat sends through; with `remoteParticipants`, a message
 * is refused while nobody else (no agent) is in the room to read it.
 */
export type ChatRoom = Pick<Room, 'localParticipant'> & { readonly remoteParticipants?: ReadonlyMap<string, unknown> };

const IDLE: ChatSnapshot = { state: 'idle', error: null };

let counter = 0;

export class TextChat {
  readonly maxLength: number;
  private readonly timeoutMs: number;
  private readonly transcript: TranscriptStore | undefined;
  private snapshot: ChatSnapshot = IDLE;
  private readonly listeners = new Set<() => void>();
  private sending = 0;

  constructor(options: ChatOptions = {}) {
    this.maxLength = Math.max(1, Math.floor(options.maxLength ?? 2000));
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.transcript = options.transcript;
  }

  readonly subscribe = (listener: () => void): (() => void) => {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  };

  readonly getSnapshot = (): ChatSnapshot => this.snapshot;

  /**
   * Sends `text` (trimmed) to the agent in `room`. Resolves true once sent, false when refused
   * or failed (the snapshot's `error` says why); never rejects.
   */
  async send(room: ChatRoom | null, text: string): Promise<boolean> {
    const message = text.trim();
    if (!message) return this.fail('the message is empty');
    if (message.length > this.maxLength) {
      return this.fail(`the message is ${message.length} characters long; at most ${this.maxLength} are sent`);
    }
    if (!room) return this.fail('voice is not connected, so there is no room to send the message to');
    if (room.remoteParticipants && room.remoteParticipants.size === 0) {
      return this.fail('no agent is in the room yet, so nobody would read the message');
    }
    const mine = ++this.sending;
    this.set({ state: 'sending', error: null });
    try {
      await bounded(room.localParticipant.sendText(message, { topic: CHAT_TOPIC }), this.timeoutMs);
    } catch (err) {
      const why = err instanceof AttemptTimeout ? 'the message could not be sent in time' : err instanceof Error ? err.message : String(err);
      if (mine === this.sending) this.fail(why);
      return false;
    }
    this.transcript?.update({
      id: `chat-${Date.now().toString(36)}-${++counter}`,
      speaker: 'user',
      identity: room.localParticipant.identity ?? null,
      text: message,
      final: true,
      source: 'chat',
    });
    if (mine === this.sending) this.set(IDLE);
    return true;
  }

  /** Back to `idle` (e.g. when the user edits the message after a failure). */
  reset(): void {
    if (this.snapshot !== IDLE) this.set(IDLE);
  }

  private fail(error: string): false {
    this.set({ state: 'failed', error });
    return false;
  }

  private set(next: ChatSnapshot): void {
    this.snapshot = next;
    for (const l of this.listeners) l();
  }
}
