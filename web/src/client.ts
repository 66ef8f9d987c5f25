// The tab's half of the voice-agent relay: fetch a token, connect with it in the Socket.IO
// handshake (so every reconnect re-binds the key), and run the page's tool handlers with the
// answers in the relay's envelope. No global state; usable from any framework.

import { io, type Socket } from 'socket.io-client';

/** The token service's answer. */
export interface TokenInfo {
  token: string;
  url: string;
  roomName: string;
  identity: string;
  apiKey: string;
  /** Unix seconds. */
  expiresAt: number;
}

/** Second argument of every tool handler. */
export interface CallMeta {
  callId: string;
  expectsResult: boolean;
  /** Milliseconds the tab had to answer when the call was sent; null when no answer is awaited. */
  deadlineMs: number | null;
  /** Aborted when the relay cancels the call (timeout, revoke) or the client stops. */
  signal: AbortSignal;
}

export type ToolHandler = (params: any, meta: CallMeta) => unknown | Promise<unknown>;

export type ConnectionState =
  | 'idle'
  | 'fetching-token'
  | 'connecting'
  | 'bound'
  | 'reconnecting'
  | 'revoked'
  | 'stopped'
  | 'error';

export interface ErrorObject {
  code: string;
  message: string;
}

/** Typed events of the client. */
export interface ClientEvents {
  state: (state: ConnectionState, detail?: string) => void;
  /** The relay took the key away (another tab bound it, or the agent side revoked it). */
  revoked: (reason: string) => void;
  /** A tool call arrived. */
  call: (toolName: string, params: unknown, meta: CallMeta) => void;
  /** An awaited call ended without this tab's answer. */
  cancel: (callId: string) => void;
  /** A handler failed; the agent got `tool_failed`. */
  error: (toolName: string, error: ErrorObject) => void;
}

export interface ClientOptions {
  /** The relay's base URL; the page's own origin by default. */
  relayUrl?: string;
  /**
   * Where the token is fetched (POST, JSON body `{participantName, roomName}`, answer
   * `TokenInfo`); `<relayUrl>/token` by default. Point it at your own backend to have tokens
   * asked for there, for the users it signed in.
   */
  tokenUrl?: string;
  /**
   * Extra headers for the token request, e.g. `{ authorization: 'Bearer <session JWT>' }` for a
   * relay that issues tokens to the app's signed-in users; a function is called for every fetch.
   */
  tokenHeaders?: HeadersInit | (() => HeadersInit | Promise<HeadersInit>);
  participantName?: string;
  roomName?: string;
  /** Socket.IO transports, WebSocket first by default. */
  transports?: ('websocket' | 'polling')[];
  /** Bound on fetching a token, ms. */
  tokenTimeoutMs?: number;
  fetch?: typeof fetch;
}

/** A handler error with its own code (sent as `{ok:false,error:{code,message}}`). */
export class ToolError extends Error {
  constructor(
    public readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ToolError';
  }
}

const PREFIX = 'voice-agent:';
const RESERVED = new Set(['voice-agent:cancel', 'voice-agent:revoked', 'voice-agent:register']);

interface Pending {
  controller: AbortController;
  settled: Promise<unknown>;
  timer?: ReturnType<typeof setTimeout>;
}

type Ack = (answer: unknown) => void;

export class VoiceRelayClient {
  private readonly opts: Required<Pick<ClientOptions, 'transports' | 'tokenTimeoutMs'>> & ClientOptions;
  private readonly handlers = new Map<string, ToolHandler>();
  private readonly listeners: { [K in keyof ClientEvents]: Set<ClientEvents[K]> } = {
    state: new Set(),
    revoked: new Set(),
    call: new Set(),
    cancel: new Set(),
    error: new Set(),
  };
  private readonly pending = new Map<string, Pending>();
  private socket: Socket | null = null;
  private tokenInfo: TokenInfo | null = null;
  private currentState: ConnectionState = 'idle';
  private reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  /** Set while `start()` runs up to the first bind or refusal; `stop()` aborts it. */
  private starting: AbortController | null = null;

  constructor(options: ClientOptions = {}) {
    this.opts = { transports: ['websocket', 'polling'], tokenTimeoutMs: 10000, ...options };
  }

  get state(): ConnectionState {
    return this.currentState;
  }

  get token(): TokenInfo | null {
    return this.tokenInfo;
  }

  /** Registers the handler for `toolName`; returns a function that removes it. */
  handle(toolName: string, handler: ToolHandler): () => void {
    this.handlers.set(toolName, handler);
    return () => {
      if (this.handlers.get(toolName) === handler) this.handlers.delete(toolName);
    };
  }

  on<K extends keyof ClientEvents>(event: K, listener: ClientEvents[K]): () => void {
    this.listeners[event].add(listener);
    return () => this.listeners[event].delete(listener);
  }

  private emit<K extends keyof ClientEvents>(event: K, ...args: Parameters<ClientEvents[K]>): void {
    for (const l of this.listeners[event]) {
      try {
        (l as (...a: unknown[]) => void)(...args);
      } catch (err) {
        console.error(`voice-relay: a ${event} listener threw`, err);
      }
    }
  }

  private setState(state: ConnectionState, detail?: string): void {
    this.currentState = state;
    this.emit('state', state, detail);
  }

  private relayUrl(): string {
    return (this.opts.relayUrl ?? globalThis.location?.origin ?? '').replace(/\/$/, '');
  }

  /**
   * Gets a token and binds this tab; resolves with the token once bound. `stop()` before that
   * rejects it with an `AbortError` and leaves nothing connected.
   */
  async start(): Promise<TokenInfo> {
    if (this.socket || this.starting) throw new Error('already started');
    const starting = new AbortController();
    this.starting = starting;
    this.setState('fetching-token');
    let token: TokenInfo;
    try {
      token = await this.fetchToken(starting.signal);
    } catch (err) {
      if (this.starting === starting) this.starting = null;
      throw err;
    }
    if (starting.signal.aborted) throw starting.signal.reason;
    this.tokenInfo = token;
    this.setState('connecting');
    const socket = io(this.relayUrl(), {
      transports: this.opts.transports,
      // A function: evaluated on every (re)connection, so each one binds with the token.
      auth: (cb) => cb({ token: this.tokenInfo?.token ?? '' }),
      reconnectionDelay: 250,
      reconnectionDelayMax: 3000,
      timeout: 8000,
    });
    this.socket = socket;
    socket.onAny((event: string, ...args: unknown[]) => this.onEvent(event, args));
    socket.on('voice-agent:cancel', (p: { callId?: string }) => {
      if (p?.callId) this.cancelCall(p.callId, 'cancelled by the relay');
    });
    socket.on('voice-agent:revoked', (p: { reason?: string }) => {
      const reason = p?.reason ?? 'revoked';
      this.abortAll(`key ${reason}`);
      this.setState('revoked', reason);
      this.emit('revoked', reason);
    });
    socket.on('disconnect', (reason) => {
      if (this.currentState === 'revoked' || this.currentState === 'stopped') return;
      this.setState('reconnecting', reason);
      // socket.io-client retries by itself except after a server-side disconnect; the relay
      // sends one when it shuts down, so try again here (each attempt re-binds with the token).
      if (reason === 'io server disconnect') this.scheduleReconnect(500);
    });
    socket.io.on('reconnect_attempt', () => {
      if (this.currentState !== 'revoked') this.setState('reconnecting');
    });

    return new Promise<TokenInfo>((resolve, reject) => {
      let first = true;
      const settle = () => {
        first = false;
        if (this.starting === starting) this.starting = null;
        starting.signal.removeEventListener('abort', onStop);
      };
      const onStop = () => {
        if (!first) return;
        settle();
        reject(starting.signal.reason);
      };
      starting.signal.addEventListener('abort', onStop);
      socket.on('connect', () => {
        this.setState('bound');
        if (first) {
          settle();
          resolve(token);
        }
      });
      socket.on('connect_error', (err: Error & { data?: ErrorObject }) => {
        const code = err.data?.code;
        if (code === 'unknown_key') {
          // The key was revoked or is gone for good: no retry will bind it.
          socket.disconnect();
          this.setState('revoked', err.message);
          this.emit('revoked', 'revoked');
        } else if (code === 'unauthorized') {
          socket.disconnect();
          this.setState('error', err.message);
        } else {
          this.setState('reconnecting', err.message);
          // A refused middleware does not auto-retry; a transport error does.
          if (err.data) this.scheduleReconnect(1000);
          return;
        }
        if (first) {
          settle();
          reject(Object.assign(new Error(err.message), { code }));
        }
      });
    });
  }

  private scheduleReconnect(ms: number): void {
    if (this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      if (this.socket && !this.socket.connected && this.currentState === 'reconnecting') this.socket.connect();
    }, ms);
  }

  /** Disconnects and aborts every running handler (and a `start()` still under way). */
  stop(): void {
    const starting = this.starting;
    this.starting = null;
    starting?.abort(new DOMException('stopped', 'AbortError'));
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    this.abortAll('stopped');
    this.setState('stopped');
    this.socket?.disconnect();
    this.socket = null;
  }

  private async fetchToken(stopped: AbortSignal): Promise<TokenInfo> {
    const f = this.opts.fetch ?? fetch;
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), this.opts.tokenTimeoutMs);
    const onStop = () => controller.abort(stopped.reason);
    stopped.addEventListener('abort', onStop);
    try {
      const extra = typeof this.opts.tokenHeaders === 'function' ? await this.opts.tokenHeaders() : this.opts.tokenHeaders;
      const headers = new Headers(extra);
      headers.set('content-type', 'application/json');
      const res = await f(this.opts.tokenUrl ?? `${this.relayUrl()}/token`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ participantName: this.opts.participantName, roomName: this.opts.roomName }),
        signal: controller.signal,
      });
      const body = await res.json();
      if (!res.ok) {
        this.setState('error', body?.error?.message ?? `token service answered ${res.status}`);
        throw Object.assign(new Error(body?.error?.message ?? 'token refused'), { code: body?.error?.code });
      }
      return body as TokenInfo;
    } catch (err) {
      if (stopped.aborted) throw stopped.reason;
      if (this.currentState !== 'error') this.setState('error', (err as Error).message);
      throw err;
    } finally {
      clearTimeout(timer);
      stopped.removeEventListener('abort', onStop);
    }
  }

  private onEvent(event: string, args: unknown[]): void {
    if (!event.startsWith(PREFIX) || RESERVED.has(event)) return;
    const toolName = event.slice(PREFIX.length);
    const ack = typeof args[args.length - 1] === 'function' ? (args.pop() as Ack) : null;
    const params = args[0];
    const raw = (args[1] ?? {}) as Partial<CallMeta>;
    const callId = raw.callId ?? `local-${Math.random().toString(16).slice(2)}`;
    const handler = this.handlers.get(toolName);
    if (!handler) {
      ack?.({ ok: false, error: { code: 'no_handler', message: `this tab has no handler for ${toolName}` } });
      return;
    }

    // The same call delivered again (this tab re-bound while it was running): answer the new
    // acknowledgement when the running handler settles, instead of running it twice.
    const running = this.pending.get(callId);
    if (running) {
      if (ack) running.settled.then(ack, () => {});
      return;
    }

    const controller = new AbortController();
    const meta: CallMeta = {
      callId,
      expectsResult: raw.expectsResult ?? ack !== null,
      deadlineMs: raw.deadlineMs ?? null,
      signal: controller.signal,
    };
    this.emit('call', toolName, params, meta);
    const settled = (async () => {
      try {
        const result = await handler(params, meta);
        return { ok: true, result: result === undefined ? null : result };
      } catch (err) {
        const error = toErrorObject(err);
        this.emit('error', toolName, error);
        return { ok: false, error };
      }
    })();
    const entry: Pending = { controller, settled };
    if (meta.deadlineMs !== null) {
      entry.timer = setTimeout(() => this.cancelCall(callId, 'deadline passed'), meta.deadlineMs + 1000);
    }
    this.pending.set(callId, entry);
    settled.then((answer) => {
      if (entry.timer) clearTimeout(entry.timer);
      if (this.pending.get(callId) === entry) this.pending.delete(callId);
      // An aborted call's answer would be dropped by the relay anyway.
      if (ack && !controller.signal.aborted) ack(answer);
    });
  }

  private cancelCall(callId: string, why: string): void {
    const entry = this.pending.get(callId);
    if (!entry) return;
    this.pending.delete(callId);
    if (entry.timer) clearTimeout(entry.timer);
    entry.controller.abort(new DOMException(why, 'AbortError'));
    this.emit('cancel', callId);
  }

  private abortAll(why: string): void {
    for (const id of [...this.pending.keys()]) this.cancelCall(id, why);
  }
}

function toErrorObject(err: unknown): ErrorObject {
  const message = err instanceof Error ? err.message : typeof err === 'string' ? err : 'the tool failed';
  // The contract: a thrown error is `tool_failed`; a ToolError's own code says more.
  const code = err instanceof ToolError ? err.code : 'tool_failed';
  return { code, message };
}
