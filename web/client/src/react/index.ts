// React bindings for the voice-agent relay (`@voice-relay/client/react`): <VoiceRelayProvider> owns one VoiceRelayClient for
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
import { voiceAvailability, type VoiceAvailability } from '../availability.js';
import { type ChatSnapshot, TextChat } from '../chat.js';
import { DEFAULT_LEAVE_MESSAGE, confirmLeave as askToLeave, guardUnload } from '../leave.js';
import { PushToTalk, type PushToTalkOptions, type PushToTalkSnapshot, TALK_BUTTON_ATTRIBUTE } from '../push-to-talk.js';
import { RelayStore, type ToolCallHandler } from './store.js';
import type { Speaker, TranscriptSegment } from '../transcript.js';
import type { VoiceOptions, VoiceSnapshot, VoiceState } from '../voice.js';

export { ToolError, VoiceRelayClient } from '../client.js';
export type { CallMeta, ClientEvents, ClientOptions, ConnectionState, Declared, ErrorObject, TokenInfo, ToolSpec } from '../client.js';
export type { ToolCallHandler } from './store.js';
export type { MicrophoneState, VoiceOptions, VoiceSnapshot, VoiceState } from '../voice.js';
export { TranscriptStore, TRANSCRIPTION_TOPIC } from '../transcript.js';
export type { Speaker, TranscriptOptions, TranscriptSegment, TranscriptSource } from '../transcript.js';
export { CHAT_TOPIC, TextChat } from '../chat.js';
export type { ChatOptions, ChatSnapshot, ChatState } from '../chat.js';
export { PushToTalk, TALK_BUTTON_ATTRIBUTE } from '../push-to-talk.js';
export type { PushToTalkOptions, PushToTalkSnapshot } from '../push-to-talk.js';
export { browserVoiceProblem, voiceAvailability } from '../availability.js';
export type { VoiceAvailability } from '../availability.js';
export { DEFAULT_LEAVE_MESSAGE, confirmLeave, guardUnload } from '../leave.js';
export type { ConfirmLeaveOptions } from '../leave.js';

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

// ---- voice UI: transcript, text chat, push-to-talk, availability, leaving ----------------------

/** What useTranscript() returns. */
export interface TranscriptView {
  /** The conversation, oldest first: the last 200 segments, each the agent's or the user's. */
  segments: readonly TranscriptSegment[];
  clear: () => void;
}

/**
 * The conversation as text, from the voice room's transcriptions (`lk.transcription` text
 * streams and TranscriptionReceived): interim words replaced by final ones, the last 200
 * segments. One transcript per provider, shared by every component that reads it.
 */
export function useTranscript(): TranscriptView {
  const store = useStore('useTranscript');
  const transcript = store.transcript();
  const segments = useSyncExternalStore(transcript.subscribe, transcript.getSnapshot, transcript.getSnapshot);
  return useMemo(() => ({ segments, clear: () => transcript.clear() }), [segments, transcript]);
}

/** What useTextChat() returns. */
export interface TextChatView extends ChatSnapshot {
  /** Sends typed text to the agent (topic `lk.chat`); resolves false when refused or failed. */
  send: (text: string) => Promise<boolean>;
  /** Back to `idle` after a failure. */
  reset: () => void;
  maxLength: number;
}

/**
 * Text chat with the agent in the voice room: LiveKit Agents answers typed text on `lk.chat`,
 * and its replies arrive in the transcript (where the sent messages are recorded too).
 */
export function useTextChat(options: { maxLength?: number; timeoutMs?: number } = {}): TextChatView {
  const store = useStore('useTextChat');
  const [chat] = useState(() => new TextChat({ ...options, transcript: store.transcript() }));
  const snap = useSyncExternalStore(chat.subscribe, chat.getSnapshot, chat.getSnapshot);
  return useMemo(
    () => ({
      ...snap,
      maxLength: chat.maxLength,
      send: (text: string) => chat.send(store.voice.getSnapshot().room, text),
      reset: () => chat.reset(),
    }),
    [snap, chat, store],
  );
}

/** What usePushToTalk() returns. */
export interface PushToTalkView extends PushToTalkSnapshot {
  press: () => void;
  release: () => void;
  toggle: () => void;
  /**
   * Spread on a <button>: aria-pressed, hold with the pointer, Enter toggles; the talk key
   * (Space) works while it has the focus.
   */
  buttonProps: {
    type: 'button';
    'aria-pressed': boolean;
    'data-push-to-talk': '';
    onPointerDown: (e: { button: number }) => void;
    onPointerUp: () => void;
    onPointerLeave: (e: { buttons: number }) => void;
    onPointerCancel: () => void;
    onClick: (e: { detail: number }) => void;
  };
}

/**
 * Push-to-talk while `enabled` (default true) and voice is connected: the microphone is muted
 * unless the key (`key`, a KeyboardEvent.code, default 'Space'; null for none) or the button is
 * held. Space is left to text fields and other controls that have the focus. Interrupting the
 * agent needs the agent to register turn RPC methods: see `turnRpc`.
 */
export function usePushToTalk(options: PushToTalkOptions & { enabled?: boolean } = {}): PushToTalkView {
  const store = useStore('usePushToTalk');
  const { key = 'Space', enabled = true } = options;
  const [ptt] = useState(() => new PushToTalk(options));
  const snap = useSyncExternalStore(ptt.subscribe, ptt.getSnapshot, ptt.getSnapshot);
  const voice = useSyncExternalStore(store.voice.subscribe, store.voice.getSnapshot, store.voice.getSnapshot);
  const room = voice.room;
  useEffect(() => {
    if (!enabled || !room) return;
    return ptt.attach(room);
  }, [ptt, room, enabled]);
  useEffect(() => {
    if (!enabled || !key || typeof document === 'undefined') return;
    return ptt.bindKey(key, document);
  }, [ptt, key, enabled]);
  return useMemo(() => {
    const release = () => ptt.release();
    return {
      ...snap,
      press: () => ptt.press(),
      release,
      toggle: () => ptt.toggle(),
      buttonProps: {
        type: 'button' as const,
        'aria-pressed': snap.held,
        [TALK_BUTTON_ATTRIBUTE]: '' as const,
        onPointerDown: (e: { button: number }) => {
          if (e.button === 0) ptt.press();
        },
        onPointerUp: release,
        // Dragged off while held with the pointer (not while the key holds it).
        onPointerLeave: (e: { buttons: number }) => {
          if (e.buttons & 1) ptt.release();
        },
        onPointerCancel: release,
        // A click from the keyboard (Enter) toggles; a pointer's click follows its hold.
        onClick: (e: { detail: number }) => {
          if (e.detail === 0) ptt.toggle();
        },
      },
    };
  }, [snap, ptt]);
}

/**
 * Whether voice can be used here and, if not, why as a sentence: no WebRTC, no microphone API,
 * not a secure context, or the voice connection failed. Offer text chat when it is false.
 */
export function useVoiceAvailability(): VoiceAvailability {
  const store = useStore('useVoiceAvailability');
  const voice = useSyncExternalStore(store.voice.subscribe, store.voice.getSnapshot, store.voice.getSnapshot);
  const error = voice.state === 'failed' ? voice.error ?? 'the voice connection failed' : null;
  return useMemo(() => voiceAvailability(error), [error]);
}

/**
 * While `active`, the browser asks before the tab is closed or reloaded (`beforeunload`).
 * Returns `confirmLeave()` for an in-app back button: true at once when not active, otherwise
 * the user's answer to a small modal dialog (window.confirm where <dialog> is missing).
 */
export function useConfirmLeave(active: boolean, message: string = DEFAULT_LEAVE_MESSAGE): () => Promise<boolean> {
  const latest = useRef({ active, message });
  useIsomorphicLayoutEffect(() => {
    latest.current = { active, message };
  });
  useEffect(() => guardUnload(() => latest.current.active, message), [message]);
  return useMemo(
    () => () => (latest.current.active ? askToLeave({ message: latest.current.message }) : Promise.resolve(true)),
    [],
  );
}

export interface TranscriptProps {
  /** How each speaker is named before their words (default 'Agent' and 'You'). */
  labels?: Partial<Record<Speaker, string>>;
  id?: string;
  className?: string;
  /** The list's accessible name (default 'Conversation transcript'). */
  label?: string;
}

/**
 * The transcript as an unstyled list: a polite live region (role log) with one item per segment,
 * `data-speaker` and `data-final` on each; interim items are aria-busy until their words are final.
 */
export function Transcript(props: TranscriptProps): ReactElement {
  const { segments } = useTranscript();
  const labels = { agent: 'Agent', user: 'You', ...props.labels };
  return createElement(
    'ol',
    { role: 'log', 'aria-live': 'polite', 'aria-label': props.label ?? 'Conversation transcript', id: props.id, className: props.className },
    segments.map((s) =>
      createElement(
        'li',
        { key: s.id, 'data-speaker': s.speaker, 'data-final': String(s.final), 'data-source': s.source, 'aria-busy': s.final ? undefined : true },
        `${labels[s.speaker]}: ${s.text}`,
      ),
    ),
  );
}
