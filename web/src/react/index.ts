// React bindings for the voice-agent relay: <VoiceRelayProvider> owns one VoiceRelayClient for
// its lifetime, useVoiceRelay() reads the connection and voice state, useMode() the session's
// mode, and useToolHandler() answers a tool while its component is mounted (and tells the relay
// so: the agent is offered only the tools mounted components handle). A thin layer: the client
// does the protocol.
//
// Strict mode: React may render the provider twice and run its effects mount → unmount → mount.
// The client is created in a state initializer (its constructor does no I/O), start() is a no-op
// while a session runs, and the provider's stop is deferred by one task so the simulated unmount
// is undone before it happens: one token, one bind. Handler registration is per mount and undone
// by the effect's cleanup, so a double effect leaves exactly one handler.

import {
  type ReactElement,
  type ReactNode,
  createContext,
  createElement,
  useContext,
  useEffect,
  useLayoutEffect,
  useMemo,
  useRef,
  useState,
  useSyncExternalStore,
} from 'react';
import type { CallMeta, ClientOptions, ConnectionState, TokenInfo, ToolSpec, VoiceRelayClient } from '../client.js';
import { RelayStore, type ToolCallHandler } from './store.js';
import type { VoiceOptions, VoiceSnapshot, VoiceState } from './voice.js';

export { ToolError, VoiceRelayClient } from '../client.js';
export type { CallMeta, ClientEvents, ClientOptions, ConnectionState, Declared, ErrorObject, TokenInfo, ToolSpec } from '../client.js';
export type { ToolCallHandler } from './store.js';
export type { VoiceOptions, VoiceSnapshot, VoiceState } from './voice.js';

export interface VoiceRelayProviderProps extends ClientOptions {
  children?: ReactNode;
  /**
   * Bind while true (the default). False stops the session (and leaves the voice room); true
   * again starts a new one with a new token. The client options are read once, at mount: to
   * change them, remount the provider (give it a new `key`).
   */
  connect?: boolean;
}

/** What useVoiceRelay() returns. */
export interface VoiceRelay {
  /** The provider's client (the same object for the provider's whole life). */
  client: VoiceRelayClient;
  state: ConnectionState;
  /** Why the state changed, when known: an error's message, a revoke's reason. */
  detail: string | null;
  token: TokenInfo | null;
  /** This tab's routing key (`va_…`), once a token arrived. */
  apiKey: string | null;
  /** Starts a new session with a new token, e.g. after `error` or `revoked`. */
  retry: () => void;
  voice: VoiceSnapshot;
  /** Joins the LiveKit room with the token's url and token; never rejects (see `voice`). */
  connectVoice: (options?: VoiceOptions) => Promise<void>;
  disconnectVoice: () => void;
  /** Starts audio the browser blocked (`voice.canPlayAudio` false); call it from a click. */
  startAudio: () => Promise<void>;
}

const StoreContext = createContext<RelayStore | null>(null);

// useLayoutEffect warns when rendered on a server; there, effects never run anyway.
const useIsomorphicLayoutEffect = typeof document !== 'undefined' ? useLayoutEffect : useEffect;

/** Fetches a token, binds this tab to the relay, and provides the client to its children. */
export function VoiceRelayProvider(props: VoiceRelayProviderProps): ReactElement {
  const { children, connect = true, ...options } = props;
  const [store] = useState(() => new RelayStore(options));
  const pendingStop = useRef<ReturnType<typeof setTimeout> | null>(null);

  useEffect(() => {
    if (!connect) return;
    if (pendingStop.current !== null) {
      // Mounted again before the stop ran (strict mode, or `connect` flipped back at once).
      clearTimeout(pendingStop.current);
      pendingStop.current = null;
    }
    store.start();
    return () => {
      pendingStop.current = setTimeout(() => {
        pendingStop.current = null;
        store.stop();
      }, 0);
    };
  }, [store, connect]);

  return createElement(StoreContext.Provider, { value: store }, children);
}

function useStore(hook: string): RelayStore {
  const store = useContext(StoreContext);
  if (!store) throw new Error(`${hook}() must be used inside <VoiceRelayProvider>`);
  return store;
}

/** The connection and voice state, and the actions on them; re-renders when they change. */
export function useVoiceRelay(): VoiceRelay {
  const store = useStore('useVoiceRelay');
  const conn = useSyncExternalStore(store.subscribe, store.getSnapshot, store.getSnapshot);
  const voice = useSyncExternalStore(store.voice.subscribe, store.voice.getSnapshot, store.voice.getSnapshot);
  return useMemo(
    () => ({
      client: store.client,
      state: conn.state,
      detail: conn.detail,
      token: conn.token,
      apiKey: conn.token?.apiKey ?? null,
      retry: () => store.retry(),
      voice,
      connectVoice: (o?: VoiceOptions) => store.connectVoice(o),
      disconnectVoice: () => store.voice.disconnect(),
      startAudio: () => store.voice.startAudio(),
    }),
    [store, conn, voice],
  );
}

/**
 * Answers the tool `toolName` while this component is mounted: the handler's return value (or
 * its promise's) is the agent's result, a thrown error reaches the agent as `tool_failed` with
 * the error's message, and `meta.signal` is aborted when the relay cancels the call (timeout, revoke) or the
 * session stops. After unmount the tool answers `no_handler` again, unless another mounted
 * component handles it: the most recently mounted handler of a tool answers.
 *
 * The latest `handler` is always the one called; changing it does not re-register.
 */
export function useToolHandler<P = unknown, R = unknown>(toolName: string, handler: ToolCallHandler<P, R>): void;
/**
 * The same, for a tool the page defines itself: `spec` (description, JSON Schema) is sent with
 * the tools this tab handles. The spec is read when the component mounts or `toolName` changes.
 */
export function useToolHandler<P = unknown, R = unknown>(
  toolName: string,
  spec: ToolSpec,
  handler: ToolCallHandler<P, R>,
): void;
export function useToolHandler<P = unknown, R = unknown>(
  toolName: string,
  specOrHandler: ToolSpec | ToolCallHandler<P, R>,
  maybeHandler?: ToolCallHandler<P, R>,
): void {
  const store = useStore('useToolHandler');
  const handler = (typeof specOrHandler === 'function' ? specOrHandler : maybeHandler) as ToolCallHandler<P, R>;
  const spec = typeof specOrHandler === 'function' ? undefined : specOrHandler;
  const latest = useRef(handler);
  const latestSpec = useRef(spec);
  useIsomorphicLayoutEffect(() => {
    latest.current = handler;
    latestSpec.current = spec;
  });
  useEffect(() => {
    const entry = { current: (params: P, meta: CallMeta) => latest.current(params, meta) };
    return store.addHandler(toolName, entry, latestSpec.current);
  }, [store, toolName]);
}

/**
 * The session's mode (the agent's current phase, e.g. `default`, `reading`), as the agent side
 * last set it; null until the relay says. Re-renders when it changes.
 */
export function useMode(): string | null {
  const store = useStore('useMode');
  return useSyncExternalStore(store.subscribeMode, store.getMode, store.getMode);
}
