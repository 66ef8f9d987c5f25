// The tab's half of the voice-agent relay: fetch a token, connect with it in the Socket.IO
// handshake (so every reconnect re-binds the key), tell the relay which tools this tab handles
// (so the agent is offered only those), follow the session's mode, and run the page's tool
// handlers with the answers in the relay's envelope. No global state; usable from any framework.

import { io, type Socket } from 'socket.io-client';
import { toErrorObject, type ErrorObject } from './errors.js';
import { checkToolName, checkToolSpec, MAX_PAGE_TOOLS, MAX_PAGE_TOOLS_BYTES, PREFIX, RESERVED } from './names.js';

export { ToolError, type ErrorObject } from './errors.js';
export { checkToolName, checkToolSpec } from './names.js';

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
  /**
   * The call's W3C trace context (`traceparent`, and `tracestate` with it) when the agent's call
   * carried one: give it to your own tracing so the handler's work joins the agent's trace.
   */
  traceparent?: string;
  tracestate?: string;
  /** Aborted when the relay cancels the call (timeout, revoke) or the client stops. */
  signal: AbortSignal;
}

/** The meta as the relay sends it: `acceptsHandlerMs` says the relay reads the handler's time. */
interface SentMeta extends Partial<Omit<CallMeta, 'signal'>> {
  acceptsHandlerMs?: boolean;
}

/** The handler's time for the answer's envelope: milliseconds, to a hundredth. */
const handlerMs = (since: number): number => Math.max(0, Math.round((now() - since) * 100) / 100);
const now = (): number => (typeof performance !== 'undefined' ? performance.now() : Date.now());

export type ToolHandler = (params: any, meta: CallMeta) => unknown | Promise<unknown>;

/**
 * A tool the page defines itself, brought with its handler (`handle(name, spec, handler)`). The
 * agent is offered it only when the worker runs with `WORKER_PAGE_TOOLS=true`, and never in
 * place of a catalog tool of the same name.
 */
export interface ToolSpec {
  /** What the tool does, for the agent's model (1 to 1024 characters). */
  description: string;
  /** JSON Schema of the arguments (an object schema). */
  parameters: Record<string, unknown>;
  /** JSON Schema of the result, when the page promises one. */
  outputSchema?: Record<string, unknown>;
  /** True when the agent waits for the handler's result (the default: true). */
  awaitResult?: boolean;
  /** How long the agent waits for the result, ms. */
  timeoutMs?: number;
  /** The session modes it is offered in; all modes when absent. */
  modes?: string[];
}

/** The relay's answer to a declaration of the tools this tab handles. */
export interface Declared {
  ok: boolean;
  /** Counts the changes of this key's declaration. */
  revision?: number;
  error?: ErrorObject;
}

export type ConnectionState =
  | 'idle'
  | 'fetching-token'
  | 'connecting'
  | 'bound'
  | 'reconnecting'
  | 'revoked'
  | 'stopped'
  | 'error';


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
  /**
   * The session's mode changed (the agent moved to another phase), or was learnt on bind; null
   * when the connection is lost (the relay tells it again once bound, if it knows it).
   */
  mode: (mode: string | null) => void;
  /** The relay answered a declaration of the tools this tab handles. */
  declared: (answer: Declared) => void;
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


/** Bound on the request that tells a refused origin from a server that cannot be reached. */
const ORIGIN_PROBE_MS = 3000;

/** How long the relay has to acknowledge a declaration before it is sent again. */
const DECLARE_TIMEOUT_MS = 5000;

/**
 * Answers given, kept for a call delivered again after its answer was lost on the way (the relay
 * node that carried it died): the same answer is sent instead of running the handler twice.
 */
const ANSWERS_KEPT = 64;
const ANSWER_KEPT_MS = 120_000;

interface Pending {
  controller: AbortController;
  settled: Promise<unknown>;
  timer?: ReturnType<typeof setTimeout>;
}

type Ack = (answer: unknown) => void;

export class VoiceRelayClient {
  private readonly opts: Required<Pick<ClientOptions, 'transports' | 'tokenTimeoutMs'>> & ClientOptions;
  private readonly handlers = new Map<string, ToolHandler>();
  private readonly specs = new Map<string, ToolSpec>();
  private currentMode: string | null = null;
  /** The declaration the relay last acknowledged on this connection (JSON), and one in flight. */
  private declaredJson: string | null = null;
  private declaring = false;
  private declareQueued = false;
  private readonly listeners: { [K in keyof ClientEvents]: Set<ClientEvents[K]> } = {
    state: new Set(),
    revoked: new Set(),
    call: new Set(),
    cancel: new Set(),
    error: new Set(),
    mode: new Set(),
    declared: new Set(),
  };
  private readonly pending = new Map<string, Pending>();
  /** The last answers given, by call id, oldest first ({@link ANSWERS_KEPT}). */
  private readonly answered = new Map<string, { answer: unknown; at: number }>();
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

  /** The session's mode as the agent side last set it; null until the relay says. */
  get mode(): string | null {
    return this.currentMode;
  }

  /** The tools this tab handles now, sorted. */
  get tools(): string[] {
    return [...this.handlers.keys()].sort();
  }

  /**
   * Registers the handler for `toolName`; returns a function that removes it. With a `spec`, the
   * page also defines the tool (description and JSON Schema) for agents that accept page tools.
   * The relay is told the tabs' whole set of tools after each change (coalesced) and each bind.
   * Throws on a name the relay would refuse or a spec it would refuse.
   */
  handle(toolName: string, handler: ToolHandler): () => void;
  handle(toolName: string, spec: ToolSpec, handler: ToolHandler): () => void;
  handle(toolName: string, specOrHandler: ToolSpec | ToolHandler, maybeHandler?: ToolHandler): () => void {
    checkToolName(toolName);
    const handler = typeof specOrHandler === 'function' ? specOrHandler : maybeHandler;
    const spec = typeof specOrHandler === 'function' ? undefined : specOrHandler;
    if (typeof handler !== 'function') throw new TypeError(`tool ${toolName}: the handler must be a function`);
    if (spec) {
      checkToolSpec(toolName, spec);
      const others = [...this.specs].filter(([n]) => n !== toolName);
      if (others.length >= MAX_PAGE_TOOLS) throw new TypeError(`a page may define at most ${MAX_PAGE_TOOLS} tools`);
    }
    this.handlers.set(toolName, handler);
    if (spec) this.specs.set(toolName, { ...spec });
    else this.specs.delete(toolName);
    this.scheduleDeclare();
    return () => {
      if (this.handlers.get(toolName) !== handler) return;
      this.handlers.delete(toolName);
      this.specs.delete(toolName);
      this.scheduleDeclare();
    };
  }

  /** The declaration of this tab's tools as the relay receives it. */
  private declaration(): { tools: string[]; pageTools?: unknown[] } {
    const tools = this.tools;
    const pageTools = tools.filter((n) => this.specs.has(n)).map((name) => ({ name, ...this.specs.get(name) }));
    return pageTools.length ? { tools, pageTools } : { tools };
  }

  /** Sends the declaration after the current task (several changes make one), one at a time. */
  private scheduleDeclare(): void {
    if (this.declareQueued) return;
    this.declareQueued = true;
    queueMicrotask(() => {
      this.declareQueued = false;
      void this.declare();
    });
  }

  private async declare(): Promise<void> {
    const socket = this.socket;
    if (this.declaring || !socket?.connected) return;
    const payload = this.declaration();
    const json = JSON.stringify(payload);
    if (json === this.declaredJson) return;
    this.declaring = true;
    let answer: Declared;
    try {
      answer = (await socket.timeout(DECLARE_TIMEOUT_MS).emitWithAck('voice-agent:handles', payload)) as Declared;
    } catch {
      answer = { ok: false, error: { code: 'timeout', message: 'the relay did not acknowledge the tools in time' } };
    }
    this.declaring = false;
    if (socket !== this.socket) return;
    if (answer?.ok) this.declaredJson = json;
    else console.warn('voice-relay: the relay refused this tab\'s tools:', answer?.error?.message);
    this.emit('declared', answer);
    // Changed while in flight: send the newer set (a refused one is not sent again as is).
    if (socket.connected && JSON.stringify(this.declaration()) !== json) this.scheduleDeclare();
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
    socket.on('voice-agent:mode', (p: { mode?: unknown }) => {
      if (typeof p?.mode !== 'string' || p.mode === this.currentMode) return;
      this.currentMode = p.mode;
      this.emit('mode', p.mode);
    });
    socket.on('voice-agent:revoked', (p: { reason?: string }) => {
      const reason = p?.reason ?? 'revoked';
      this.abortAll(`key ${reason}`);
      this.setState('revoked', reason);
      this.emit('revoked', reason);
    });
    socket.on('disconnect', (reason) => {
      // A new connection binds anew: it declares again, and learns the mode again (a relay
      // that restarted knows none until the agent side tells it).
      this.declaredJson = null;
      if (this.currentMode !== null) {
        this.currentMode = null;
        this.emit('mode', null);
      }
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
        this.scheduleDeclare();
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
          // A refused middleware does not auto-retry; a transport error does. A second, with
          // jitter: a node busy binding a storm of tabs refuses them all at once.
          if (err.data) this.scheduleReconnect(750 + Math.random() * 500);
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
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, this.opts.tokenTimeoutMs);
    const onStop = () => controller.abort(stopped.reason);
    stopped.addEventListener('abort', onStop);
    const url = this.opts.tokenUrl ?? `${this.relayUrl()}/token`;
    let res: Response;
    try {
      const extra = typeof this.opts.tokenHeaders === 'function' ? await this.opts.tokenHeaders() : this.opts.tokenHeaders;
      const headers = new Headers(extra);
      headers.set('content-type', 'application/json');
      res = await f(url, {
        method: 'POST',
        headers,
        body: JSON.stringify({ participantName: this.opts.participantName, roomName: this.opts.roomName }),
        signal: controller.signal,
      });
    } catch (err) {
      if (stopped.aborted) throw stopped.reason;
      // The browser says only "Failed to fetch", whether the server is down or refused this
      // page's origin: find out which, and say so.
      const why = timedOut
        ? Object.assign(new Error(`the token service at ${url} did not answer within ${this.opts.tokenTimeoutMs} ms`), { code: 'timeout' })
        : await this.whyUnreachable(url, err as Error, f);
      this.setState('error', why.message);
      throw why;
    } finally {
      clearTimeout(timer);
      stopped.removeEventListener('abort', onStop);
    }
    let body: { error?: ErrorObject } | undefined;
    try {
      body = await res.json();
    } catch {
      body = undefined;
    }
    if (stopped.aborted) throw stopped.reason;
    if (!res.ok || !body) {
      const message = body?.error?.message ?? `the token service at ${url} answered ${res.status} without a token`;
      this.setState('error', message);
      throw Object.assign(new Error(message), { code: body?.error?.code });
    }
    return body as unknown as TokenInfo;
  }

  /**
   * Why a token request failed at the network level: the server answers a request that does
   * not ask to read its answer (`no-cors`) when only this page's origin was refused.
   */
  private async whyUnreachable(url: string, err: Error, f: typeof fetch): Promise<Error & { code: string }> {
    const page = globalThis.location?.origin;
    let target: URL | null = null;
    try {
      target = new URL(url, page);
    } catch {
      target = null;
    }
    if (page && target && target.origin !== page) {
      const relay = this.opts.tokenUrl === undefined;
      const probe = new AbortController();
      const timer = setTimeout(() => probe.abort(), ORIGIN_PROBE_MS);
      try {
        // The relay's health check, which mints nothing; another token service at its URL.
        await f(relay ? `${this.relayUrl()}/healthz` : target.href, { method: 'GET', mode: 'no-cors', signal: probe.signal });
        return Object.assign(
          new Error(relay
            ? `the relay at ${target.origin} refused this page's origin ${page}: add it to RELAY_ALLOWED_ORIGINS`
            : `${target.origin} refused this page's origin ${page} (CORS): allow it there`),
          { code: 'origin_refused' },
        );
      } catch {
        // Not reachable at all: said below.
      } finally {
        clearTimeout(timer);
      }
    }
    return Object.assign(new Error(`could not reach the token service at ${url} (${err.message})`), { code: 'unreachable' });
  }

  private onEvent(event: string, args: unknown[]): void {
    if (!event.startsWith(PREFIX) || RESERVED.has(event)) return;
    const toolName = event.slice(PREFIX.length);
    const ack = typeof args[args.length - 1] === 'function' ? (args.pop() as Ack) : null;
    const params = args[0];
    const raw = (args[1] ?? {}) as SentMeta;
    const arrived = now();
    // The handler's time goes back only to a relay that said it reads it: an older relay would
    // hand the extra field to the agent as part of the result.
    const timed = raw.acceptsHandlerMs === true;
    const callId = raw.callId ?? `local-${Math.random().toString(16).slice(2)}`;
    const handler = this.handlers.get(toolName);
    if (!handler) {
      const answer = { ok: false, error: { code: 'no_handler', message: `this tab has no handler for ${toolName}` } };
      ack?.(timed ? { ...answer, handlerMs: handlerMs(arrived) } : answer);
      return;
    }

    // The same call delivered again (this tab re-bound while it was running): answer the new
    // acknowledgement when the running handler settles, instead of running it twice.
    const running = this.pending.get(callId);
    if (running) {
      if (ack) running.settled.then(ack, () => {});
      return;
    }
    // Delivered again after this tab answered (the answer was lost with a relay node): the same
    // answer again.
    const given = this.answered.get(callId);
    if (given && Date.now() - given.at < ANSWER_KEPT_MS) {
      ack?.(given.answer);
      return;
    }

    const controller = new AbortController();
    const meta: CallMeta = {
      callId,
      expectsResult: raw.expectsResult ?? ack !== null,
      deadlineMs: raw.deadlineMs ?? null,
      signal: controller.signal,
    };
    if (typeof raw.traceparent === 'string') meta.traceparent = raw.traceparent;
    if (typeof raw.tracestate === 'string') meta.tracestate = raw.tracestate;
    this.emit('call', toolName, params, meta);
    const settled = (async () => {
      let answer: Record<string, unknown>;
      try {
        const result = await handler(params, meta);
        answer = { ok: true, result: result === undefined ? null : result };
      } catch (err) {
        const error = toErrorObject(err);
        this.emit('error', toolName, error);
        answer = { ok: false, error };
      }
      if (timed) answer.handlerMs = handlerMs(arrived);
      return answer;
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
      if (ack && !controller.signal.aborted) {
        ack(answer);
        this.keepAnswer(callId, answer);
      }
    });
  }

  private keepAnswer(callId: string, answer: unknown): void {
    this.answered.delete(callId);
    this.answered.set(callId, { answer, at: Date.now() });
    if (this.answered.size > ANSWERS_KEPT) this.answered.delete(this.answered.keys().next().value as string);
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
