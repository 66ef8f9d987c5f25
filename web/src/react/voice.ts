// The tab's voice, for the React entry point: joins the LiveKit room with the relay token's url
// and token, publishes the microphone, plays the other participants' audio, and keeps one
// snapshot (state, reason, room) that React reads through useSyncExternalStore. No React here.
//
// livekit-client is imported only when voice is asked for, so an app bundles it as a separate
// chunk and a page that never joins the room never loads it.

import type { Room, RoomConnectOptions, RoomOptions, Track } from 'livekit-client';

export type VoiceState = 'off' | 'connecting' | 'connected' | 'reconnecting' | 'failed';

export interface VoiceOptions {
  /** Publish the microphone once in the room (default true). */
  microphone?: boolean;
  /** Play the other participants' audio through hidden audio elements (default true). */
  playAudio?: boolean;
  /** Bound on joining the room and opening the microphone, ms (default 15000). */
  timeoutMs?: number;
  /** Passed to livekit-client's `new Room(…)`. */
  roomOptions?: RoomOptions;
  /** Passed to `room.connect(url, token, …)`, e.g. `{ rtcConfig: { iceServers: [] } }`. */
  connectOptions?: RoomConnectOptions;
}

export interface VoiceSnapshot {
  state: VoiceState;
  /** Why voice failed, as a sentence; null otherwise. */
  error: string | null;
  /** The joined livekit-client Room (for @livekit/components-react and the like); null when off. */
  room: Room | null;
  /** False while the browser blocks audio playback until a user gesture: call `startAudio()`. */
  canPlayAudio: boolean;
}

const OFF: VoiceSnapshot = { state: 'off', error: null, room: null, canPlayAudio: true };

class AttemptTimeout extends Error {}

function bounded<T>(promise: Promise<T>, ms: number): Promise<T> {
  // The loser of the race may reject later (a connect cut short): nobody waits for it.
  promise.catch(() => {});
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new AttemptTimeout()), Math.max(0, ms));
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const reason = (err: unknown) => (err instanceof Error ? err.message : String(err));

export class VoiceConnection {
  private snapshot: VoiceSnapshot = OFF;
  private readonly listeners = new Set<() => void>();
  /** Bumped by every connect and disconnect: the async steps of an older attempt stop there. */
  private attempt = 0;
  private room: Room | null = null;
  private readonly played = new Map<Track, HTMLMediaElement[]>();

  readonly subscribe = (listener: () => void): (() => void) => {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  };

  readonly getSnapshot = (): VoiceSnapshot => this.snapshot;

  private set(patch: Partial<VoiceSnapshot>): void {
    this.snapshot = { ...this.snapshot, ...patch };
    for (const l of this.listeners) l();
  }

  /**
   * Joins the room at `url` with `token`, leaving any room joined before. Never rejects: the
   * outcome is the snapshot's `state` (`connected`, or `failed` with `error`).
   */
  async connect(url: string, token: string, options: VoiceOptions = {}): Promise<void> {
    this.teardown();
    const attempt = ++this.attempt;
    const current = () => attempt === this.attempt;
    const deadline = Date.now() + (options.timeoutMs ?? 15_000);
    this.set({ state: 'connecting', error: null, room: null, canPlayAudio: true });

    let lk: typeof import('livekit-client');
    try {
      lk = await import('livekit-client');
    } catch (err) {
      if (current()) this.set({ state: 'failed', error: `livekit-client could not be loaded (${reason(err)})` });
      return;
    }
    if (!current()) return;

    const room = new lk.Room(options.roomOptions);
    this.room = room;
    const mine = () => current() && this.room === room;
    let joined = false;
    room
      .on(lk.RoomEvent.Reconnecting, () => {
        if (mine() && joined) this.set({ state: 'reconnecting' });
      })
      .on(lk.RoomEvent.Reconnected, () => {
        if (mine() && joined) this.set({ state: 'connected' });
      })
      .on(lk.RoomEvent.Disconnected, (why) => {
        // Before joining, the failed connect says why; after, the room is gone.
        if (!mine() || !joined) return;
        this.teardown();
        const name = why === undefined ? undefined : lk.DisconnectReason[why];
        const error = `the LiveKit server at ${url} ended the connection${name ? ` (${name})` : ''}`;
        this.set({ state: 'failed', error, room: null });
      })
      .on(lk.RoomEvent.AudioPlaybackStatusChanged, () => {
        if (mine()) this.set({ canPlayAudio: room.canPlaybackAudio });
      });
    if (options.playAudio !== false) {
      room
        .on(lk.RoomEvent.TrackSubscribed, (track) => {
          if (!mine() || track.kind !== lk.Track.Kind.Audio || typeof document === 'undefined') return;
          const el = track.attach();
          el.hidden = true;
          el.dataset.voiceRelayAudio = '';
          document.body.appendChild(el);
          this.played.set(track, [...(this.played.get(track) ?? []), el]);
        })
        .on(lk.RoomEvent.TrackUnsubscribed, (track) => this.unplay(track));
    }

    const fail = (error: string) => {
      if (!current()) return;
      this.teardown();
      this.set({ state: 'failed', error, room: null });
    };
    try {
      await bounded(room.connect(url, token, options.connectOptions), deadline - Date.now());
    } catch (err) {
      if (!current()) return;
      return fail(
        err instanceof AttemptTimeout
          ? `the LiveKit server at ${url} did not let this tab join in time`
          : `could not join the LiveKit room at ${url} (${reason(err)})`,
      );
    }
    if (!current()) {
      void room.disconnect();
      return;
    }
    if (options.microphone !== false) {
      try {
        await bounded(room.localParticipant.setMicrophoneEnabled(true), deadline - Date.now());
      } catch (err) {
        return fail(
          err instanceof AttemptTimeout
            ? 'the microphone could not be sent in time'
            : `the microphone could not be opened (${reason(err)})`,
        );
      }
      if (!current()) return;
    }
    joined = true;
    this.set({ state: 'connected', error: null, room, canPlayAudio: room.canPlaybackAudio });
  }

  /** Leaves the room (or stops a join under way). */
  disconnect(): void {
    this.attempt++;
    this.teardown();
    if (this.snapshot !== OFF) {
      this.snapshot = OFF;
      for (const l of this.listeners) l();
    }
  }

  /** Ends in `failed` with `error` without trying (no token to join with). */
  refuse(error: string): void {
    this.attempt++;
    this.teardown();
    this.set({ state: 'failed', error, room: null, canPlayAudio: true });
  }

  /** Starts audio playback blocked by the browser; call it from a click. */
  async startAudio(): Promise<void> {
    const room = this.room;
    if (!room) return;
    await room.startAudio();
    if (this.room === room) this.set({ canPlayAudio: room.canPlaybackAudio });
  }

  private unplay(track: Track): void {
    const elements = this.played.get(track);
    if (!elements) return;
    this.played.delete(track);
    for (const el of elements) {
      track.detach(el);
      el.remove();
    }
  }

  private teardown(): void {
    for (const track of [...this.played.keys()]) this.unplay(track);
    const room = this.room;
    this.room = null;
    if (room) {
      room.removeAllListeners();
      void room.disconnect();
    }
  }
}
