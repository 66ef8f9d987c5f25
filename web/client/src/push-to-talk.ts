// Push-to-talk: framework-free, shared by the React hook usePushToTalk() and the demo page.
// While attached to a room and not held, the microphone is muted
// (`room.localParticipant.setMicrophoneEnabled(false)`); pressing unmutes it, releasing mutes it
// again. Unmuting alone does not interrupt an agent that is speaking: LiveKit Agents does that
// when the agent registers RPC methods for turns (its push-to-talk pattern: `start_turn`
// interrupts and opens the user's turn, `end_turn` commits it). With `turnRpc` set, press and
// release call those methods on the room's agent participant (the reference agents of this
// repository register both). An agent that registers none answers "unsupported method": that
// is no error (the microphone still follows the key), and that agent is not asked again. Each
// call waits at most `rpcTimeoutMs`.
//
// The key binding: holding the key (Space by default) presses, letting go releases, unless the
// focus is in a text field or on another control that Space activates (buttons, links, lists).

import type { Room } from 'livekit-client';
import { AttemptTimeout, bounded } from './timeout.js';

export interface PushToTalkOptions {
  /** `KeyboardEvent.code` of the key to hold (default 'Space'); null for no key binding. */
  key?: string | null;
  /**
   * RPC methods on the agent participant called on press and release (names of the agent's
   * `register_rpc_method`), or true for `{ start: 'start_turn', end: 'end_turn' }`. Default: none.
   */
  turnRpc?: boolean | { start: string; end: string };
  /** Bound on each RPC call, ms (default 3000). */
  rpcTimeoutMs?: number;
}

export interface PushToTalkSnapshot {
  /** The talk key or button is held: the microphone is open. */
  held: boolean;
  /** Why the last press or release did not take effect (microphone or RPC), null otherwise. */
  error: string | null;
}

/** The part of a livekit-client Room push-to-talk uses. */
export type PushToTalkRoom = Pick<Room, 'localParticipant' | 'remoteParticipants'>;

const IDLE: PushToTalkSnapshot = { held: false, error: null };

const reason = (err: unknown) => (err instanceof AttemptTimeout ? 'no answer in time' : err instanceof Error ? err.message : String(err));

/** LiveKit's RPC error code for a method the destination did not register. */
export const RPC_UNSUPPORTED_METHOD = 1400;

/** The attribute that marks a talk button: the talk key works while it has the focus. */
export const TALK_BUTTON_ATTRIBUTE = 'data-push-to-talk';

/** Whether Space (or the talk key) belongs to the focused element rather than to the page. */
export function keyBelongsTo(target: EventTarget | null): boolean {
  if (!target || typeof Element === 'undefined' || !(target instanceof Element)) return false;
  if (target.closest(`[${TALK_BUTTON_ATTRIBUTE}]`)) return false;
  if ((target as HTMLElement).isContentEditable) return true;
  // Text fields take the key as text; buttons, checkboxes, links and lists act on it.
  if (['INPUT', 'TEXTAREA', 'SELECT', 'BUTTON', 'SUMMARY', 'A'].includes(target.tagName)) return true;
  const role = target.getAttribute('role');
  return !!role && ['button', 'checkbox', 'radio', 'switch', 'menuitem', 'option', 'tab', 'textbox', 'combobox', 'listbox'].includes(role);
}

export class PushToTalk {
  private snapshot: PushToTalkSnapshot = IDLE;
  private readonly listeners = new Set<() => void>();
  private room: PushToTalkRoom | null = null;
  private readonly rpc: { start: string; end: string } | null;
  private readonly rpcTimeoutMs: number;
  /** Bumped by every press and release: a slower microphone change of an older one is undone. */
  private step = 0;
  /** Agents (identity and method) that answered "unsupported method". */
  private readonly unsupported = new Set<string>();

  constructor(options: Pick<PushToTalkOptions, 'turnRpc' | 'rpcTimeoutMs'> = {}) {
    this.rpc = options.turnRpc === true ? { start: 'start_turn', end: 'end_turn' } : options.turnRpc || null;
    this.rpcTimeoutMs = options.rpcTimeoutMs ?? 3000;
  }

  readonly subscribe = (listener: () => void): (() => void) => {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  };

  readonly getSnapshot = (): PushToTalkSnapshot => this.snapshot;

  /**
   * Controls the microphone of `room` from now on (muted unless held). Returns a function that
   * lets go of it: the microphone is enabled again if it was when attached (push-to-talk off).
   */
  attach(room: PushToTalkRoom): () => void {
    const wasOn = room.localParticipant.isMicrophoneEnabled;
    this.room = room;
    void this.mic(this.snapshot.held, ++this.step);
    return () => {
      if (this.room !== room) return;
      this.room = null;
      this.step++;
      if (wasOn) room.localParticipant.setMicrophoneEnabled(true).catch(() => {});
    };
  }

  press(): void {
    if (this.snapshot.held) return;
    this.set({ held: true, error: null });
    const step = ++this.step;
    void this.mic(true, step);
    void this.call(this.rpc?.start);
  }

  release(): void {
    if (!this.snapshot.held) return;
    this.set({ held: false, error: null });
    const step = ++this.step;
    void this.mic(false, step);
    void this.call(this.rpc?.end);
  }

  toggle(): void {
    if (this.snapshot.held) this.release();
    else this.press();
  }

  /**
   * Holding `code` on `target` (the document by default) presses, letting it go releases; the
   * window losing focus releases too. On a talk button (TALK_BUTTON_ATTRIBUTE) the key works as
   * well. Returns a function that removes the binding.
   */
  bindKey(code = 'Space', target: Document | HTMLElement = document): () => void {
    let down = false;
    const onDown = (e: Event) => {
      const k = e as KeyboardEvent;
      if (k.code !== code || k.ctrlKey || k.metaKey || k.altKey) return;
      if (keyBelongsTo(k.target)) return;
      k.preventDefault(); // no page scroll, no click of the talk button on release
      if (k.repeat || down) return;
      down = true;
      this.press();
    };
    const onUp = (e: Event) => {
      const k = e as KeyboardEvent;
      if (k.code !== code || !down) return;
      k.preventDefault();
      down = false;
      this.release();
    };
    const onBlur = () => {
      if (!down) return;
      down = false;
      this.release();
    };
    target.addEventListener('keydown', onDown);
    target.addEventListener('keyup', onUp);
    const win = typeof window !== 'undefined' ? window : null;
    win?.addEventListener('blur', onBlur);
    return () => {
      target.removeEventListener('keydown', onDown);
      target.removeEventListener('keyup', onUp);
      win?.removeEventListener('blur', onBlur);
      onBlur();
    };
  }

  private async mic(on: boolean, step: number): Promise<void> {
    const room = this.room;
    if (!room) return;
    try {
      await room.localParticipant.setMicrophoneEnabled(on);
    } catch (err) {
      if (step === this.step) this.set({ ...this.snapshot, error: `the microphone could not be ${on ? 'opened' : 'muted'} (${reason(err)})` });
    }
  }

  private async call(method: string | undefined): Promise<void> {
    const room = this.room;
    if (!method || !room) return;
    const agent = [...room.remoteParticipants.values()].find((p) => p.isAgent);
    const asked = agent ? `${agent.identity}\n${method}` : '';
    if (!agent || this.unsupported.has(asked)) return;
    try {
      const call = room.localParticipant.performRpc({
        destinationIdentity: agent.identity,
        method,
        payload: '',
        responseTimeout: this.rpcTimeoutMs,
      });
      await bounded(call, this.rpcTimeoutMs);
    } catch (err) {
      if ((err as { code?: unknown } | null)?.code === RPC_UNSUPPORTED_METHOD) {
        this.unsupported.add(asked);
        return;
      }
      this.set({ ...this.snapshot, error: `the agent did not take the turn (${method}: ${reason(err)})` });
    }
  }

  private set(next: PushToTalkSnapshot): void {
    this.snapshot = next;
    for (const l of this.listeners) l();
  }
}
