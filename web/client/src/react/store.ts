// What one <VoiceRelayProvider> owns, kept out of React: the client, the voice connection, the
// tool handlers registered by components, and the connection snapshot that hooks read through
// useSyncExternalStore. Creating a RelayStore has no side effect (no socket, no fetch), so React
// may create and drop one during a render; only `start()` touches the network.

import { type CallMeta, type ClientOptions, type ConnectionState, type TokenInfo, type ToolSpec, VoiceRelayClient } from '../client.js';
import { TranscriptStore } from '../transcript.js';
import { VoiceConnection, type VoiceOptions } from '../voice.js';

export interface ConnectionSnapshot {
  state: ConnectionState;
  /** Why the state changed, when the client says (an error's message, a revoke's reason). */
  detail: string | null;
  /** The token this tab is bound with; null before the first one arrives. */
  token: TokenInfo | null;
}

/** A tool handler as components register it: `params` are whatever the agent sent. */
export type ToolCallHandler<P = unknown, R = unknown> = (params: P, meta: CallMeta) => R | Promise<R>;

interface HandlerEntry {
  // Params are the agent's JSON, typed by each component for itself.
  current: ToolCallHandler<any>;
}

const ACTIVE: ReadonlySet<ConnectionState> = new Set(['fetching-token', 'connecting', 'bound', 'reconnecting']);

export class RelayStore {
  readonly client: VoiceRelayClient;
  readonly voice = new VoiceConnection();
  private snapshot: ConnectionSnapshot;
  private readonly listeners = new Set<() => void>();
  /** Per tool, the handlers of mounted components; the most recently mounted one answers. */
  private readonly stacks = new Map<string, HandlerEntry[]>();
  private readonly removers = new Map<string, () => void>();
  private wanted = false;
  private transcriptCore: TranscriptStore | null = null;

  constructor(options: ClientOptions) {
    this.client = new VoiceRelayClient(options);
    this.snapshot = { state: this.client.state, detail: null, token: null };
    this.client.on('state', (state, detail) => {
      this.snapshot = { state, detail: detail ?? null, token: this.client.token };
      for (const l of this.listeners) l();
    });
  }

  readonly subscribe = (listener: () => void): (() => void) => {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  };

  readonly getSnapshot = (): ConnectionSnapshot => this.snapshot;

  /** Subscribes to the session's mode (see `getMode`). */
  readonly subscribeMode = (listener: () => void): (() => void) => this.client.on('mode', listener);

  readonly getMode = (): string | null => this.client.mode;

  /** Fetches a token and binds, unless a session is already running. */
  start(): void {
    this.wanted = true;
    if (ACTIVE.has(this.client.state)) return;
    // A failure is the client's `error` (or `revoked`) state with its reason; nothing to throw to.
    this.client.start().catch(() => {});
  }

  /** Unbinds, aborts running handlers and leaves the voice room. */
  stop(): void {
    this.wanted = false;
    this.voice.disconnect();
    if (this.client.state !== 'idle' && this.client.state !== 'stopped') this.client.stop();
  }

  /** A new session with a new token (after `error` or `revoked`); voice is left. */
  retry(): void {
    if (!this.wanted) return;
    this.voice.disconnect();
    if (this.client.state !== 'idle' && this.client.state !== 'stopped') this.client.stop();
    this.client.start().catch(() => {});
  }

  /**
   * The conversation's transcript, one per provider, created when first asked for; it follows
   * whichever room voice has joined (and keeps its segments across rooms until cleared).
   */
  transcript(): TranscriptStore {
    if (this.transcriptCore) return this.transcriptCore;
    const transcript = new TranscriptStore();
    this.transcriptCore = transcript;
    let room: unknown = null;
    let detach = () => {};
    const follow = () => {
      const next = this.voice.getSnapshot().room;
      if (next === room) return;
      detach();
      room = next;
      detach = next ? transcript.attach(next) : () => {};
    };
    this.voice.subscribe(follow);
    follow();
    return transcript;
  }

  connectVoice(options?: VoiceOptions): Promise<void> {
    const token = this.client.token;
    if (!token || !ACTIVE.has(this.client.state)) {
      this.voice.refuse('the tab is not bound to the relay, so there is no token to join the room with');
      return Promise.resolve();
    }
    return this.voice.connect(token.url, token.token, options);
  }

  /**
   * Adds a component's handler for `toolName`; the returned function removes exactly that
   * registration. The client holds one dispatcher per tool, present while any handler is.
   */
  addHandler(toolName: string, entry: HandlerEntry, spec?: ToolSpec): () => void {
    let stack = this.stacks.get(toolName);
    if (!stack || spec) {
      // A new tool, or one whose page definition comes with this component: (re)register it.
      const mine: HandlerEntry[] = stack ?? [];
      stack = mine;
      this.stacks.set(toolName, mine);
      const dispatch = (params: unknown, meta: CallMeta) => mine[mine.length - 1].current(params, meta);
      this.removers.set(
        toolName,
        spec ? this.client.handle(toolName, spec, dispatch) : this.client.handle(toolName, dispatch),
      );
    }
    const own = stack;
    own.push(entry);
    return () => {
      const i = own.lastIndexOf(entry);
      if (i >= 0) own.splice(i, 1);
      if (own.length === 0 && this.stacks.get(toolName) === own) {
        this.stacks.delete(toolName);
        this.removers.get(toolName)?.();
        this.removers.delete(toolName);
      }
    };
  }
}
