// Voice in the demo page: joins the LiveKit room with the tab's token, publishes the microphone,
// plays the other participants' audio, and keeps the voice panel truthful: the pill's state,
// the connection quality, who is in the room, and level meters for the microphone and for the
// agent. Voice is optional: every failure ends in the `failed` state with its reason, and the
// relay side (the on-screen tools) is never touched by it.
//
// Hooks for end-to-end tests are DOM attributes: #voice[data-state], #quality[data-quality],
// #participants > li[data-identity][data-agent], and data-level / data-peak on #mic-level and
// #agent-level (RMS, 0..1; the peak is the highest level since the room was joined).

import {
  ConnectionError,
  ConnectionErrorReason,
  ConnectionQuality,
  ConnectionState,
  DisconnectReason,
  type LocalAudioTrack,
  MediaDeviceFailure,
  type RemoteParticipant,
  type RoomConnectOptions,
  Room,
  RoomEvent,
  Track,
  TrackEvent,
  createLocalAudioTrack,
  isBrowserSupported,
} from 'livekit-client';

export type VoiceState = 'off' | 'connecting' | 'connected' | 'reconnecting' | 'failed';

export interface VoiceElements {
  /** The voice pill (#voice). */
  pill: HTMLElement;
  /** Connection quality (#quality). */
  quality: HTMLElement;
  /** The other participants (#participants). */
  participants: HTMLElement;
  /** Shown while nobody else is in the room. */
  participantsEmpty: HTMLElement;
  micMeter: HTMLElement;
  agentMeter: HTMLElement;
  /** "Click to enable audio", shown while the browser blocks playback. */
  startAudio: HTMLButtonElement;
  /** Shown after a failure. */
  retry: HTMLButtonElement;
  /** Where the remote audio elements live. */
  audioSink: HTMLElement;
}

/** Bound on one attempt: microphone aside, joining the room and publishing the microphone. */
export const CONNECT_TIMEOUT_MS = 10_000;
const METER_INTERVAL_MS = 100;
const AGENT_STATE_ATTRIBUTE = 'lk.agent.state';

const QUALITY_TEXT: Record<ConnectionQuality, string> = {
  [ConnectionQuality.Excellent]: 'excellent',
  [ConnectionQuality.Good]: 'good',
  [ConnectionQuality.Poor]: 'poor',
  [ConnectionQuality.Lost]: 'lost',
  [ConnectionQuality.Unknown]: 'unknown',
};

class AttemptTimeout extends Error {}

/** `promise`, or an AttemptTimeout once `ms` has passed. */
function bounded<T>(promise: Promise<T>, ms: number): Promise<T> {
  // The loser of the race may still reject later (a cancelled connect): that is expected.
  promise.catch(() => {});
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new AttemptTimeout()), Math.max(0, ms));
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const short = (text: string, max = 120) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

function micFailure(err: unknown): string {
  switch (MediaDeviceFailure.getFailure(err)) {
    case MediaDeviceFailure.PermissionDenied:
      return 'microphone access was denied (allow it for this page, then try again)';
    case MediaDeviceFailure.NotFound:
      return 'no microphone was found';
    case MediaDeviceFailure.DeviceInUse:
      return 'the microphone is in use by another application';
    default:
      return `the microphone could not be opened (${short(err instanceof Error ? err.message : String(err))})`;
  }
}

/** Why joining failed; `signalled` says whether the server had answered the join. */
function connectFailure(err: unknown, url: string, signalled: boolean): string {
  const secs = Math.round(CONNECT_TIMEOUT_MS / 1000);
  if (err instanceof AttemptTimeout) {
    return signalled
      ? `reached the LiveKit server at ${url}, but no media connection could be made within ${secs} s (ICE failed)`
      : `the LiveKit server at ${url} did not answer within ${secs} s`;
  }
  if (!(err instanceof ConnectionError)) {
    return `could not join the LiveKit room at ${url} (${short(err instanceof Error ? err.message : String(err))})`;
  }
  switch (err.reason) {
    case ConnectionErrorReason.NotAllowed:
      return `the LiveKit server at ${url} refused the token${err.status ? ` (HTTP ${err.status})` : ''}`;
    case ConnectionErrorReason.ServerUnreachable:
    case ConnectionErrorReason.WebSocket:
      return `could not reach the LiveKit server at ${url}`;
    case ConnectionErrorReason.Timeout:
      return `the LiveKit server at ${url} did not answer in time`;
    case ConnectionErrorReason.ServiceNotFound:
      return `${url} does not answer as a LiveKit server`;
    case ConnectionErrorReason.LeaveRequest:
      return `the LiveKit server at ${url} turned the connection away`;
    case ConnectionErrorReason.InternalError:
      if (/pc connection/i.test(err.message)) {
        return `reached the LiveKit server at ${url}, but no media connection could be made (ICE failed)`;
      }
      return `the LiveKit server at ${url} failed (${short(err.message)})`;
    default:
      return `could not join the LiveKit room at ${url} (${short(err.message)})`;
  }
}

function disconnectFailure(reason: DisconnectReason | undefined): string {
  switch (reason) {
    case DisconnectReason.DUPLICATE_IDENTITY:
      return 'this session joined the room from another tab';
    case DisconnectReason.PARTICIPANT_REMOVED:
      return 'you were removed from the room';
    case DisconnectReason.ROOM_DELETED:
    case DisconnectReason.ROOM_CLOSED:
      return 'the room was closed';
    case DisconnectReason.SERVER_SHUTDOWN:
      return 'the LiveKit server shut down';
    case DisconnectReason.JOIN_FAILURE:
    case DisconnectReason.MEDIA_FAILURE:
      return 'the media connection failed';
    default:
      return 'the connection to the LiveKit server was lost';
  }
}

/** Where a level sits on the meter's bar: -60 dBFS (empty) to 0 dBFS (full). */
function barPosition(level: number): number {
  if (level <= 0) return 0;
  return Math.min(1, Math.max(0, (20 * Math.log10(level) + 60) / 60));
}

function levelText(level: number): string {
  if (level < 0.001) return 'silent';
  return `${Math.round(20 * Math.log10(level))} dB`;
}

/**
 * The RMS level of a set of audio tracks (summed), measured with an AnalyserNode on their
 * time-domain samples and written to a meter element.
 */
class Meter {
  private readonly analyser: AnalyserNode;
  private readonly samples: Float32Array<ArrayBuffer>;
  private readonly sources = new Map<MediaStreamTrack, MediaStreamAudioSourceNode>();
  private readonly fill: HTMLElement | null;
  private peak = 0;
  private shown = '';

  constructor(
    private readonly ctx: AudioContext,
    private readonly el: HTMLElement,
  ) {
    this.analyser = ctx.createAnalyser();
    this.analyser.fftSize = 4096; // ~85 ms at 48 kHz, most of one 100 ms tick
    this.samples = new Float32Array(this.analyser.fftSize);
    // A silent path to the output keeps the analyser running on every engine.
    const mute = ctx.createGain();
    mute.gain.value = 0;
    this.analyser.connect(mute).connect(ctx.destination);
    this.fill = el.querySelector<HTMLElement>('.meter-fill');
  }

  /** Measures exactly these tracks from now on. */
  follow(tracks: MediaStreamTrack[]): void {
    for (const [track, source] of this.sources) {
      if (!tracks.includes(track) || track.readyState === 'ended') {
        source.disconnect();
        this.sources.delete(track);
      }
    }
    for (const track of tracks) {
      if (this.sources.has(track) || track.readyState === 'ended') continue;
      const source = this.ctx.createMediaStreamSource(new MediaStream([track]));
      source.connect(this.analyser);
      this.sources.set(track, source);
    }
  }

  sample(): void {
    let level = 0;
    if (this.sources.size > 0) {
      this.analyser.getFloatTimeDomainData(this.samples);
      let sum = 0;
      for (const x of this.samples) sum += x * x;
      level = Math.min(1, Math.sqrt(sum / this.samples.length));
    }
    this.peak = Math.max(this.peak, level);
    this.show(level);
  }

  /** Starts a new peak (at joining a room). */
  resetPeak(): void {
    this.peak = 0;
    this.show(0);
  }

  private show(level: number): void {
    const text = level.toFixed(4);
    const peak = this.peak.toFixed(4);
    if (text + peak === this.shown) return;
    this.shown = text + peak;
    this.el.dataset.level = text;
    this.el.dataset.peak = peak;
    this.el.setAttribute('aria-valuenow', text);
    this.el.setAttribute('aria-valuetext', levelText(level));
    if (this.fill) this.fill.style.transform = `scaleX(${barPosition(level).toFixed(3)})`;
  }
}

interface ParticipantItem {
  li: HTMLLIElement;
  who: HTMLElement;
  badge: HTMLElement;
  activity: HTMLElement;
}

function span(className: string): HTMLSpanElement {
  const el = document.createElement('span');
  el.className = className;
  return el;
}

/** What the rest of the page hears from voice: the joined room (null when left), failures. */
export interface VoiceListener {
  room?: (room: Room | null) => void;
  failed?: (reason: string) => void;
}

export class Voice {
  state: VoiceState = 'off';
  private ctx: AudioContext | null = null;
  private meters: { mic: Meter; agent: Meter } | null = null;
  private room: Room | null = null;
  private mic: LocalAudioTrack | null = null;
  private joined = false;
  private ticker: ReturnType<typeof setInterval> | undefined;
  /** Bumped by every start and stop: async work of an older attempt stops where it is. */
  private attempt = 0;
  private last: { url: string; token: string; microphone: boolean } | null = null;
  private readonly items = new Map<string, ParticipantItem>();

  constructor(
    private readonly el: VoiceElements,
    private readonly announce: (text: string) => void,
    private readonly listener: VoiceListener = {},
  ) {
    el.startAudio.addEventListener('click', () => void this.enableAudio());
    el.retry.addEventListener('click', () => {
      if (this.last && el.retry.getAttribute('aria-disabled') !== 'true') {
        void this.start(this.last.url, this.last.token, { microphone: this.last.microphone });
      }
    });
    this.showQuality(ConnectionQuality.Unknown);
  }

  /**
   * Call from the user's gesture (the click or key that starts a session), so the audio
   * context for the meters may start running.
   */
  prepare(): void {
    if (!this.ctx) {
      try {
        this.ctx = new AudioContext();
        this.ctx.addEventListener('statechange', () => this.showAudioButton());
        this.meters = { mic: new Meter(this.ctx, this.el.micMeter), agent: new Meter(this.ctx, this.el.agentMeter) };
      } catch {
        this.ctx = null; // no Web Audio: voice works, the meters stay at zero
      }
    }
    if (this.ctx?.state === 'suspended') this.ctx.resume().catch(() => {});
  }

  /**
   * Joins the room `url` with `token`, after a failure or a stop as well. With `microphone:
   * false` it joins to hear the agent and to chat in text, publishing nothing: the text mode,
   * which works where the microphone cannot.
   */
  async start(url: string, token: string, { microphone = true }: { microphone?: boolean } = {}): Promise<void> {
    this.teardown();
    const attempt = ++this.attempt;
    const current = () => attempt === this.attempt;
    this.last = { url, token, microphone };
    // A retry button stays where it is (keeping the keyboard focus) but does nothing meanwhile.
    this.el.retry.setAttribute('aria-disabled', 'true');
    if (!isBrowserSupported()) return this.fail('this browser cannot make WebRTC calls');

    let mic: LocalAudioTrack | null = null;
    if (microphone) {
      this.set('connecting', 'Voice: opening the microphone…');
      this.announce('Connecting voice');
      try {
        if (!navigator.mediaDevices?.getUserMedia) {
          throw new Error('the page needs https (or localhost) to use the microphone');
        }
        mic = await createLocalAudioTrack();
      } catch (err) {
        if (current()) this.fail(micFailure(err));
        return;
      }
      if (!current()) {
        mic.stop();
        return;
      }
      this.mic = mic;
      mic.on(TrackEvent.Ended, () => {
        if (current() && this.state === 'connected') {
          this.set('connected', 'Voice: connected, but the microphone stopped');
          this.announce('The microphone stopped');
        }
      });
    } else {
      this.announce('Connecting for text chat');
    }

    this.set('connecting', `Voice: connecting to ${url}…`);
    const deadline = Date.now() + CONNECT_TIMEOUT_MS;
    const room = new Room();
    this.room = room;
    this.listen(room);
    let signalled = false;
    room.once(RoomEvent.SignalConnected, () => {
      signalled = true;
    });
    const options: RoomConnectOptions = {
      websocketTimeout: CONNECT_TIMEOUT_MS,
      peerConnectionTimeout: CONNECT_TIMEOUT_MS,
    };
    // In a closed network the STUN servers LiveKit hands out cannot be reached: `?ice=none`
    // makes the browser use only its own host candidates.
    if (new URLSearchParams(location.search).get('ice') === 'none') options.rtcConfig = { iceServers: [] };
    try {
      await bounded(room.connect(url, token, options), deadline - Date.now());
    } catch (err) {
      if (!current()) return;
      this.teardown();
      return this.fail(connectFailure(err, url, signalled));
    }
    if (!current()) return;
    if (mic) {
      try {
        await bounded(room.localParticipant.publishTrack(mic, { source: Track.Source.Microphone }), deadline - Date.now());
      } catch (err) {
        if (!current()) return;
        this.teardown();
        const why = err instanceof AttemptTimeout ? 'in time' : `(${short(err instanceof Error ? err.message : String(err))})`;
        return this.fail(`joined the room, but the microphone could not be sent ${why}`);
      }
      if (!current()) return;
    }

    this.joined = true;
    this.meters?.mic.resetPeak();
    this.meters?.agent.resetPeak();
    this.ticker = setInterval(() => this.tick(), METER_INTERVAL_MS);
    this.showQuality(room.localParticipant.connectionQuality);
    this.showParticipants();
    this.showAudioButton();
    this.el.retry.hidden = true;
    if (mic) {
      this.set('connected', 'Voice: connected');
      this.announce('Voice connected. You can speak to the agent.');
    } else {
      this.set('connected', 'Voice: text only (no microphone)');
      this.announce('Connected for text chat. Type to the agent.');
    }
    this.listener.room?.(room);
  }

  /** Leaves the room (the session ended). */
  stop(): void {
    this.attempt++;
    this.last = null;
    this.teardown();
    this.el.retry.hidden = true;
    if (this.state !== 'off') this.set('off', 'Voice: off');
  }

  private listen(room: Room): void {
    const mine = () => room === this.room;
    const reconnecting = () => {
      if (!mine() || !this.joined || this.state === 'reconnecting') return;
      this.set('reconnecting', 'Voice: connection interrupted, reconnecting…');
      this.announce('Voice connection interrupted, reconnecting');
    };
    const reconnected = () => {
      if (!mine() || !this.joined || this.state !== 'reconnecting') return;
      this.set('connected', 'Voice: connected');
      this.announce('Voice reconnected');
    };
    const people = () => {
      if (mine()) this.showParticipants();
    };
    room
      .on(RoomEvent.SignalReconnecting, reconnecting)
      .on(RoomEvent.Reconnecting, reconnecting)
      .on(RoomEvent.Reconnected, reconnected)
      .on(RoomEvent.ConnectionStateChanged, (state) => {
        if (state === ConnectionState.Connected) reconnected();
      })
      .on(RoomEvent.Disconnected, (reason) => {
        // Before joining, the failed connect says why; after, this is the end of voice.
        if (!mine() || !this.joined) return;
        this.teardown();
        this.fail(disconnectFailure(reason));
      })
      .on(RoomEvent.ConnectionQualityChanged, (quality, participant) => {
        if (mine() && participant.isLocal) this.showQuality(quality);
      })
      .on(RoomEvent.ParticipantConnected, people)
      .on(RoomEvent.ParticipantDisconnected, people)
      .on(RoomEvent.ParticipantNameChanged, people)
      .on(RoomEvent.ParticipantAttributesChanged, people)
      .on(RoomEvent.ActiveSpeakersChanged, people)
      .on(RoomEvent.TrackSubscribed, (track) => {
        if (mine() && track.kind === Track.Kind.Audio) this.el.audioSink.append(track.attach());
      })
      .on(RoomEvent.TrackUnsubscribed, (track) => {
        for (const element of track.detach()) element.remove();
      })
      .on(RoomEvent.AudioPlaybackStatusChanged, () => {
        if (mine()) this.showAudioButton();
      });
  }

  private tick(): void {
    const room = this.room;
    if (!room || !this.meters) return;
    const mic = this.mic?.mediaStreamTrack;
    this.meters.mic.follow(mic ? [mic] : []);
    const remote: MediaStreamTrack[] = [];
    for (const p of room.remoteParticipants.values()) {
      for (const pub of p.audioTrackPublications.values()) {
        if (pub.track && pub.isSubscribed) remote.push(pub.track.mediaStreamTrack);
      }
    }
    this.meters.agent.follow(remote);
    this.meters.mic.sample();
    this.meters.agent.sample();
  }

  /** Leaves the room if in one and clears what it showed; the state is the caller's to set. */
  private teardown(): void {
    const room = this.room;
    const wasJoined = this.joined;
    this.room = null;
    this.joined = false;
    clearInterval(this.ticker);
    this.ticker = undefined;
    if (room) {
      if (wasJoined) this.listener.room?.(null);
      for (const p of room.remoteParticipants.values()) {
        for (const pub of p.audioTrackPublications.values()) pub.track?.detach();
      }
      room.disconnect().catch(() => {});
    }
    this.mic?.stop();
    this.mic = null;
    this.el.audioSink.replaceChildren();
    if (this.meters) {
      // The levels drop to zero; the peaks stay until the next join.
      this.meters.mic.follow([]);
      this.meters.agent.follow([]);
      this.meters.mic.sample();
      this.meters.agent.sample();
    }
    this.showQuality(ConnectionQuality.Unknown);
    this.showParticipants();
    this.el.startAudio.hidden = true;
  }

  private set(state: VoiceState, text: string): void {
    this.state = state;
    this.el.pill.dataset.state = state;
    this.el.pill.textContent = text;
  }

  private fail(reason: string): void {
    this.set('failed', `Voice failed: ${reason}; tools still work`);
    this.announce(`Voice failed: ${reason}. The on-screen tools still work.`);
    this.listener.failed?.(reason);
    this.el.retry.hidden = this.last === null;
    this.el.retry.removeAttribute('aria-disabled');
  }

  private async enableAudio(): Promise<void> {
    try {
      await this.ctx?.resume();
      await this.room?.startAudio();
    } catch {
      // Still blocked: the button stays.
    }
    this.showAudioButton();
  }

  private showAudioButton(): void {
    const room = this.room;
    const blocked = !!room && this.joined && (!room.canPlaybackAudio || this.ctx?.state === 'suspended');
    if (blocked && this.el.startAudio.hidden) this.announce('The browser blocked audio: press “Click to enable audio” to hear the agent');
    this.el.startAudio.hidden = !blocked;
  }

  private showQuality(quality: ConnectionQuality): void {
    const text = QUALITY_TEXT[quality] ?? 'unknown';
    this.el.quality.dataset.quality = text;
    this.el.quality.textContent = `Voice link: ${text}`;
  }

  /** One item per remote participant, kept in place between updates. */
  private showParticipants(): void {
    const room = this.joined ? this.room : null;
    const people: RemoteParticipant[] = room ? [...room.remoteParticipants.values()] : [];
    const speaking = new Set(room?.activeSpeakers.map((p) => p.identity) ?? []);
    const wanted = people.map((p) => this.item(p, speaking.has(p.identity)));
    for (const [identity, item] of this.items) {
      if (!wanted.includes(item.li)) {
        item.li.remove();
        this.items.delete(identity);
      }
    }
    const list = this.el.participants;
    const inOrder = wanted.length === list.children.length && wanted.every((li, i) => list.children[i] === li);
    if (!inOrder) list.replaceChildren(...wanted);
    this.el.participantsEmpty.textContent = room ? 'Nobody else yet: waiting for the agent to join.' : 'Not in a voice room.';
    this.el.participantsEmpty.hidden = wanted.length > 0;
  }

  private item(p: RemoteParticipant, speaking: boolean): HTMLLIElement {
    let item = this.items.get(p.identity);
    if (!item) {
      item = { li: document.createElement('li'), who: span('who'), badge: span('badge'), activity: span('activity') };
      // Spaces between the parts, so they are read as separate words.
      item.li.append(item.who, ' ', item.badge, ' ', item.activity);
      this.items.set(p.identity, item);
    }
    const { li, who, badge, activity } = item;
    li.dataset.identity = p.identity;
    li.dataset.agent = String(p.isAgent);
    li.dataset.speaking = String(speaking);
    const name = short(p.name || p.identity, 60);
    if (who.textContent !== name) who.textContent = name;
    const badgeText = p.isAgent ? 'agent' : '';
    if (badge.textContent !== badgeText) badge.textContent = badgeText;
    badge.hidden = !p.isAgent;
    // LiveKit agents publish what they are doing (listening, thinking, speaking) as an attribute.
    const agentState = p.isAgent ? p.attributes[AGENT_STATE_ATTRIBUTE] : undefined;
    const doing = speaking ? 'speaking' : agentState ? short(agentState, 24) : '';
    if (activity.textContent !== doing) activity.textContent = doing;
    return li;
  }
}
