// Voice in the demo page: a view over the package's VoiceConnection (@voice-relay/client/voice),
// which joins the LiveKit room, publishes the microphone (or nothing, for text chat) and says
// why when it fails. This file keeps the voice panel truthful: the pill's state, the connection
// quality, who is in the room, and level meters for the microphone and for the agent. Voice is
// optional: whatever happens to it, the relay side (the on-screen tools) is never touched.
//
// Hooks for end-to-end tests are DOM attributes: #voice[data-state], #quality[data-quality],
// #participants > li[data-identity][data-agent], and data-level / data-peak on #mic-level and
// #agent-level (RMS, 0..1; the peak is the highest level since the room was joined).

import { VoiceConnection, type VoiceSnapshot } from '@voice-relay/client/voice';
import { ConnectionQuality, type RemoteParticipant, type Room, RoomEvent, Track } from 'livekit-client';
import { Meter } from './meter';

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

const short = (text: string, max = 120) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

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
  /** Each join says whether it is text only (no microphone published). */
  textOnly?: (on: boolean) => void;
}

/**
 * How long the page waits in a room for an agent before it says that none may come (no agent
 * runs for this LiveKit server: `scripts/manage.sh start --agent` runs the reference one).
 */
export const AGENT_WAIT_MS = 10_000;

export class Voice {
  readonly connection = new VoiceConnection();
  private ctx: AudioContext | null = null;
  private meters: { mic: Meter; agent: Meter } | null = null;
  private room: Room | null = null;
  private shown: VoiceSnapshot = this.connection.getSnapshot();
  private ticker: ReturnType<typeof setInterval> | undefined;
  private last: { url: string; token: string; microphone: boolean } | null = null;
  private readonly items = new Map<string, ParticipantItem>();
  private unlisten = () => {};
  /** Set once the room was joined this long without an agent ([`AGENT_WAIT_MS`]). */
  private agentOverdue = false;
  private agentTimer: ReturnType<typeof setTimeout> | undefined;

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
    this.connection.subscribe(() => this.render());
    this.showQuality(ConnectionQuality.Unknown);
  }

  get state(): VoiceSnapshot['state'] {
    return this.connection.getSnapshot().state;
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
  start(url: string, token: string, { microphone = true }: { microphone?: boolean } = {}): Promise<void> {
    this.last = { url, token, microphone };
    this.listener.textOnly?.(!microphone);
    // A retry button stays where it is (keeping the keyboard focus) but does nothing meanwhile.
    this.el.retry.setAttribute('aria-disabled', 'true');
    this.announce(microphone ? 'Connecting voice' : 'Connecting for text chat');
    // In a closed network the STUN servers LiveKit hands out cannot be reached: `?ice=none`
    // makes the browser use only its own host candidates.
    const ice = new URLSearchParams(location.search).get('ice') === 'none';
    return this.connection.connect(url, token, {
      microphone,
      audioContainer: this.el.audioSink,
      timeoutMs: CONNECT_TIMEOUT_MS,
      connectOptions: ice ? { rtcConfig: { iceServers: [] } } : undefined,
    });
  }

  /** Leaves the room (the session ended). */
  stop(): void {
    this.last = null;
    this.connection.disconnect();
    this.el.retry.hidden = true;
    this.listener.textOnly?.(false);
  }

  /** Follows the connection's snapshot: the pill, announcements, the room's panel. */
  private render(): void {
    const before = this.shown;
    const now = this.connection.getSnapshot();
    this.shown = now;
    if (now.room !== before.room) this.follow(now.room);
    const url = this.last?.url ?? '';
    const textOnly = this.last?.microphone === false;
    switch (now.state) {
      case 'off':
        if (before.state !== 'off') this.set('off', 'Voice: off');
        break;
      case 'connecting':
        if (before.state !== 'connecting') this.set('connecting', `Voice: connecting to ${url}…`);
        break;
      case 'reconnecting':
        if (before.state !== 'reconnecting') {
          this.set('reconnecting', 'Voice: connection interrupted, reconnecting…');
          this.announce('Voice connection interrupted, reconnecting');
        }
        break;
      case 'connected':
        if (before.state === 'reconnecting') {
          this.set('connected', 'Voice: connected');
          this.announce('Voice reconnected');
        } else if (now.microphone === 'stopped' && before.microphone !== 'stopped') {
          this.set('connected', 'Voice: connected, but the microphone stopped');
          this.announce('The microphone stopped');
        } else if (before.state !== 'connected') {
          this.el.retry.hidden = true;
          this.set('connected', textOnly ? 'Voice: text only (no microphone)' : 'Voice: connected');
          this.announce(textOnly ? 'Connected for text chat. Type to the agent.' : 'Voice connected. You can speak to the agent.');
        }
        break;
      case 'failed':
        if (before.state !== 'failed' || before.error !== now.error) this.fail(now.error ?? 'voice failed');
        break;
    }
    this.showAudioButton();
  }

  /** Listens to the joined room (or stops, when left) for the panel's parts. */
  private follow(room: Room | null): void {
    this.unlisten();
    this.unlisten = () => {};
    this.room = room;
    clearInterval(this.ticker);
    this.ticker = undefined;
    clearTimeout(this.agentTimer);
    this.agentOverdue = false;
    if (room) {
      this.agentTimer = setTimeout(() => {
        this.agentOverdue = true;
        this.showParticipants();
        if (!this.agentPresent()) {
          this.announce('No agent has joined the room. The on-screen tools still work.');
        }
      }, AGENT_WAIT_MS);
      const people = () => this.showParticipants();
      const quality = (q: ConnectionQuality, p: { isLocal: boolean }) => {
        if (p.isLocal) this.showQuality(q);
      };
      const events = [RoomEvent.ParticipantConnected, RoomEvent.ParticipantDisconnected, RoomEvent.ParticipantNameChanged,
        RoomEvent.ParticipantAttributesChanged, RoomEvent.ActiveSpeakersChanged] as const;
      for (const e of events) room.on(e, people);
      room.on(RoomEvent.ConnectionQualityChanged, quality);
      this.unlisten = () => {
        for (const e of events) room.off(e, people);
        room.off(RoomEvent.ConnectionQualityChanged, quality);
      };
      this.meters?.mic.resetPeak();
      this.meters?.agent.resetPeak();
      this.ticker = setInterval(() => this.tick(), METER_INTERVAL_MS);
      this.showQuality(room.localParticipant.connectionQuality);
    } else if (this.meters) {
      // The levels drop to zero; the peaks stay until the next join.
      this.meters.mic.follow([]);
      this.meters.agent.follow([]);
      this.meters.mic.sample();
      this.meters.agent.sample();
      this.showQuality(ConnectionQuality.Unknown);
    } else {
      this.showQuality(ConnectionQuality.Unknown);
    }
    this.showParticipants();
    this.listener.room?.(room);
  }

  private tick(): void {
    const room = this.room;
    if (!room || !this.meters) return;
    const mic = room.localParticipant.getTrackPublication(Track.Source.Microphone)?.track?.mediaStreamTrack;
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

  private set(state: VoiceSnapshot['state'], text: string): void {
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
      await this.connection.startAudio();
    } catch {
      // Still blocked: the button stays.
    }
    this.showAudioButton();
  }

  private showAudioButton(): void {
    const { room, canPlayAudio } = this.connection.getSnapshot();
    const blocked = !!room && (!canPlayAudio || this.ctx?.state === 'suspended');
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
    const room = this.room;
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
    this.el.participantsEmpty.textContent = !room
      ? 'Not in a voice room.'
      : this.agentOverdue
        ? `No agent has joined in ${AGENT_WAIT_MS / 1000} s: none may be running for this LiveKit server (scripts/manage.sh start --agent runs the reference agent). The on-screen tools still work, driven by scripts/manage.sh call or demo.`
        : 'No agent in the room yet: waiting for one to join.';
    this.el.participantsEmpty.dataset.agent = !room ? 'none' : this.agentOverdue ? 'overdue' : 'waiting';
    this.el.participantsEmpty.hidden = wanted.length > 0;
  }

  private agentPresent(): boolean {
    return [...(this.room?.remoteParticipants.values() ?? [])].some((p) => p.isAgent);
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
    li.dataset.agentState = agentState ?? '';
    if (activity.textContent !== doing) activity.textContent = doing;
    return li;
  }
}
