// The tab's voice, framework-free: joins the LiveKit room with the relay token's url and token,
// publishes the microphone (or nothing: text only), plays the other participants' audio, and
// keeps one snapshot (state, reason, room) that a page reads with subscribe/getSnapshot (the
// React hooks through useSyncExternalStore, the demo page directly). Every attempt is bounded
// and ends `connected` or `failed` with a sentence saying why; `disconnect()` leaves.
//
// This entry (`@voice-relay/client/voice`) also carries the other framework-free voice UI cores:
// transcript, text chat, push-to-talk, availability and confirm-before-leaving.
//
// livekit-client is imported only when voice is asked for, so an app bundles it as a separate
// chunk and a page that never joins the room never loads it.

import type { LocalAudioTrack, Room, RoomConnectOptions, RoomOptions, Track } from 'livekit-client';
import { AttemptTimeout, bounded } from './timeout.js';

export { TranscriptStore, TRANSCRIPTION_TOPIC } from './transcript.js';
export type { Speaker, TranscriptOptions, TranscriptSegment, TranscriptSource } from './transcript.js';
export { CHAT_TOPIC, TextChat } from './chat.js';
export type { ChatOptions, ChatSnapshot, ChatState } from './chat.js';
export { PushToTalk, RPC_UNSUPPORTED_METHOD, TALK_BUTTON_ATTRIBUTE, keyBelongsTo } from './push-to-talk.js';
export type { PushToTalkOptions, PushToTalkRoom, PushToTalkSnapshot } from './push-to-talk.js';
export { browserVoiceProblem, voiceAvailability } from './availability.js';
export type { VoiceAvailability } from './availability.js';
export { DEFAULT_LEAVE_MESSAGE, confirmLeave, guardUnload } from './leave.js';
export type { ConfirmLeaveOptions } from './leave.js';

export type VoiceState = 'off' | 'connecting' | 'connected' | 'reconnecting' | 'failed';

/**
 * The microphone of the connection: `none` (text only, or not in a room), `opening` (asked
 * for, not yet sent), `on` (published; push-to-talk may mute it), `stopped` (the device ended).
 */
export type MicrophoneState = 'none' | 'opening' | 'on' | 'stopped';

export interface VoiceOptions {
  /** Publish the microphone once in the room (default true); false joins for text only. */
  microphone?: boolean;
  /** Play the other participants' audio through hidden audio elements (default true). */
  playAudio?: boolean;
  /** Where those audio elements go (default document.body). */
  audioContainer?: HTMLElement;
  /** Bound on joining the room and sending the microphone, ms (default 15000); the permission prompt is not counted. */
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
  microphone: MicrophoneState;
}

const OFF: VoiceSnapshot = { state: 'off', error: null, room: null, canPlayAudio: true, microphone: 'none' };

export const DEFAULT_VOICE_TIMEOUT_MS = 15_000;

type LiveKit = typeof import('livekit-client');

const short = (text: string, max = 120) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);
const message = (err: unknown) => short(err instanceof Error ? err.message : String(err));

function micFailure(lk: LiveKit, err: unknown): string {
  switch (lk.MediaDeviceFailure.getFailure(err)) {
    case lk.MediaDeviceFailure.PermissionDenied:
      return 'microphone access was denied (allow it for this page, then try again)';
    case lk.MediaDeviceFailure.NotFound:
      return 'no microphone was found';
    case lk.MediaDeviceFailure.DeviceInUse:
      return 'the microphone is in use by another application';
    default:
      return `the microphone could not be opened (${message(err)})`;
  }
}

/** Why joining failed; `signalled` says whether the server had answered the join. */
function connectFailure(lk: LiveKit, err: unknown, url: string, signalled: boolean, ms: number): string {
  const secs = Math.round(ms / 1000);
  if (err instanceof AttemptTimeout) {
    return signalled
      ? `reached the LiveKit server at ${url}, but no media connection could be made within ${secs} s (ICE failed)`
      : `the LiveKit server at ${url} did not answer within ${secs} s`;
  }
  if (!(err instanceof lk.ConnectionError)) return `could not join the LiveKit room at ${url} (${message(err)})`;
  const R = lk.ConnectionErrorReason;
  switch (err.reason) {
    case R.NotAllowed:
      return `the LiveKit server at ${url} refused the token${err.status ? ` (HTTP ${err.status})` : ''}`;
    case R.ServerUnreachable:
    case R.WebSocket:
      return `could not reach the LiveKit server at ${url}`;
    case R.Timeout:
      return `the LiveKit server at ${url} did not answer in time`;
    case R.ServiceNotFound:
      return `${url} does not answer as a LiveKit server`;
    case R.LeaveRequest:
      return `the LiveKit server at ${url} turned the connection away`;
    case R.InternalError:
      if (/pc connection/i.test(err.message)) return `reached the LiveKit server at ${url}, but no media connection could be made (ICE failed)`;
      return `the LiveKit server at ${url} failed (${message(err)})`;
    default:
      return `could not join the LiveKit room at ${url} (${message(err)})`;
  }
}

function disconnectFailure(lk: LiveKit, reason: number | undefined): string {
  const D = lk.DisconnectReason;
  switch (reason) {
    case D.DUPLICATE_IDENTITY:
      return 'this session joined the room from another tab';
    case D.PARTICIPANT_REMOVED:
      return 'you were removed from the room';
    case D.ROOM_DELETED:
    case D.ROOM_CLOSED:
      return 'the room was closed';
    case D.SERVER_SHUTDOWN:
      return 'the LiveKit server shut down';
    case D.JOIN_FAILURE:
    case D.MEDIA_FAILURE:
      return 'the media connection failed';
    default:
      return 'the connection to the LiveKit server was lost';
  }
}

export class VoiceConnection {
  private snapshot: VoiceSnapshot = OFF;
  private readonly listeners = new Set<() => void>();
  /** Bumped by every connect and disconnect: the async steps of an older attempt stop there. */
  private attempt = 0;
  private room: Room | null = null;
  private mic: LocalAudioTrack | null = null;
  private lk: LiveKit | null = null;
  private timeoutMs = DEFAULT_VOICE_TIMEOUT_MS;
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
    const wantMic = options.microphone !== false;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_VOICE_TIMEOUT_MS;
    this.set({ state: 'connecting', error: null, room: null, canPlayAudio: true, microphone: wantMic ? 'opening' : 'none' });
    const fail = (error: string) => {
      if (!current()) return;
      this.teardown();
      this.set({ state: 'failed', error, room: null, microphone: 'none' });
    };

    let lk: LiveKit;
    try {
      lk = this.lk ??= await import('livekit-client');
    } catch (err) {
      return fail(`livekit-client could not be loaded (${message(err)})`);
    }
    if (!current()) return;
    if (!lk.isBrowserSupported()) return fail('this browser cannot make WebRTC calls');

    if (wantMic) {
      const mic = await this.openMic(lk);
      if (!current()) {
        if (typeof mic !== 'string') mic.stop();
        return;
      }
      if (typeof mic === 'string') return fail(mic);
    }

    const deadline = Date.now() + this.timeoutMs;
    const room = new lk.Room(options.roomOptions);
    this.room = room;
    const mine = () => current() && this.room === room;
    let joined = false;
    let signalled = false;
    const reconnecting = () => {
      if (mine() && joined) this.set({ state: 'reconnecting' });
    };
    const reconnected = () => {
      if (mine() && joined && this.snapshot.state === 'reconnecting') this.set({ state: 'connected' });
    };
    room
      .once(lk.RoomEvent.SignalConnected, () => {
        signalled = true;
      })
      .on(lk.RoomEvent.SignalReconnecting, reconnecting)
      .on(lk.RoomEvent.Reconnecting, reconnecting)
      .on(lk.RoomEvent.Reconnected, reconnected)
      .on(lk.RoomEvent.ConnectionStateChanged, (s) => {
        if (s === lk.ConnectionState.Connected) reconnected();
      })
      .on(lk.RoomEvent.Disconnected, (why) => {
        // Before joining, the failed connect says why; after, the room is gone.
        if (mine() && joined) fail(disconnectFailure(lk, why));
      })
      .on(lk.RoomEvent.AudioPlaybackStatusChanged, () => {
        if (mine()) this.set({ canPlayAudio: room.canPlaybackAudio });
      });
    if (options.playAudio !== false) {
      room
        .on(lk.RoomEvent.TrackSubscribed, (track) => {
          const sink = options.audioContainer ?? (typeof document !== 'undefined' ? document.body : null);
          if (!mine() || track.kind !== lk.Track.Kind.Audio || !sink) return;
          const el = track.attach();
          el.hidden = true;
          el.dataset.voiceRelayAudio = '';
          sink.appendChild(el);
          this.played.set(track, [...(this.played.get(track) ?? []), el]);
        })
        .on(lk.RoomEvent.TrackUnsubscribed, (track) => this.unplay(track));
    }

    const connectOptions: RoomConnectOptions = { websocketTimeout: this.timeoutMs, peerConnectionTimeout: this.timeoutMs, ...options.connectOptions };
    try {
      await bounded(room.connect(url, token, connectOptions), deadline - Date.now());
    } catch (err) {
      return fail(connectFailure(lk, err, url, signalled, this.timeoutMs));
    }
    if (!current()) return;
    if (this.mic) {
      const sent = await this.publishMic(room, lk, deadline);
      if (!current()) return;
      if (sent) return fail(`joined the room, but ${sent}`);
    }
    joined = true;
    this.set({ state: 'connected', error: null, room, canPlayAudio: room.canPlaybackAudio });
  }

  /**
   * Publishes the microphone in the joined room (`true`: from text only to voice) or stops
   * sending it (`false`). Resolves null when done, or why not as a sentence (the connection
   * itself stays as it was).
   */
  async setMicrophone(on: boolean): Promise<string | null> {
    const room = this.room;
    const lk = this.lk;
    if (!room || !lk || this.snapshot.room !== room) return 'voice is not connected';
    const attempt = this.attempt;
    if (!on) {
      const mic = this.mic;
      this.mic = null;
      if (mic) {
        await room.localParticipant.unpublishTrack(mic, true).catch(() => mic.stop());
      }
      if (attempt === this.attempt) this.set({ microphone: 'none' });
      return null;
    }
    if (this.mic) return null;
    this.set({ microphone: 'opening' });
    const mic = await this.openMic(lk);
    if (attempt !== this.attempt) {
      if (typeof mic !== 'string') mic.stop();
      return 'voice was left meanwhile';
    }
    const why = typeof mic === 'string' ? mic : await this.publishMic(room, lk, Date.now() + this.timeoutMs);
    if (why && attempt === this.attempt) {
      (this.mic as LocalAudioTrack | null)?.stop();
      this.mic = null;
      this.set({ microphone: 'none' });
    }
    return why;
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
    this.set({ ...OFF, state: 'failed', error });
  }

  /** Starts audio playback blocked by the browser; call it from a click. */
  async startAudio(): Promise<void> {
    const room = this.room;
    if (!room) return;
    await room.startAudio();
    if (this.room === room) this.set({ canPlayAudio: room.canPlaybackAudio });
  }

  /** Opens the microphone (kept as `this.mic`), or says why it could not. */
  private async openMic(lk: LiveKit): Promise<LocalAudioTrack | string> {
    const attempt = this.attempt;
    let mic: LocalAudioTrack;
    try {
      if (typeof navigator === 'undefined' || !navigator.mediaDevices?.getUserMedia) {
        throw new Error('the page needs https (or localhost) to use the microphone');
      }
      mic = await lk.createLocalAudioTrack();
    } catch (err) {
      return micFailure(lk, err);
    }
    if (attempt !== this.attempt) return mic;
    this.mic = mic;
    mic.on(lk.TrackEvent.Ended, () => {
      if (this.mic === mic && attempt === this.attempt) this.set({ microphone: 'stopped' });
    });
    return mic;
  }

  /** Sends the opened microphone in `room` by `deadline`: null, or why not. */
  private async publishMic(room: Room, lk: LiveKit, deadline: number): Promise<string | null> {
    const mic = this.mic;
    if (!mic) return 'the microphone is not open';
    try {
      await bounded(room.localParticipant.publishTrack(mic, { source: lk.Track.Source.Microphone }), deadline - Date.now());
    } catch (err) {
      return `the microphone could not be sent ${err instanceof AttemptTimeout ? 'in time' : `(${message(err)})`}`;
    }
    if (this.mic === mic) this.set({ microphone: 'on' });
    return null;
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
      room.disconnect().catch(() => {});
    }
    this.mic?.stop();
    this.mic = null;
  }
}
