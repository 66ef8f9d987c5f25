// Sessions of the demo page: the first screen (voice or text chat; where voice cannot work it
// says why), the relay client of a session, its voice (or text only) in the LiveKit room, and
// leaving: the headset button (or Ctrl/⌘+K) ends a session at once, Back asks first in the
// package's confirm dialog and returns to the first screen.

import { type ConnectionState, VoiceRelayClient } from '@voice-relay/client';
import { browserVoiceProblem, confirmLeave } from '@voice-relay/client/voice';
import { Conversation } from './conversation';
import { announce, ui } from './ui';
import { Voice } from './voice';

export interface SessionHooks {
  /** Gives a new session's client the page's tools. */
  registerTools: (client: VoiceRelayClient) => void;
  /** A session ended: close what waits for the user (the card picker). */
  ended: () => void;
}

/**
 * The 8 hex digits of the key's SHA-256 that the relay's and the worker's logs print as
 * `key=…`; null where the page cannot hash (an insecure context).
 */
async function keyFingerprint(key: string): Promise<string | null> {
  if (!globalThis.crypto?.subtle) return null;
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(key));
  return [...new Uint8Array(digest).slice(0, 4)].map((b) => b.toString(16).padStart(2, '0')).join('');
}

/** Wires the first screen, the headset button, Ctrl/⌘+K and Back. */
export function setUpSessions(hooks: SessionHooks): void {
  const STATE_TEXT: Record<ConnectionState, string> = {
    idle: 'Not connected',
    'fetching-token': 'Getting a token…',
    connecting: 'Connecting…',
    bound: 'Connected',
    reconnecting: 'Reconnecting…',
    revoked: 'Session ended',
    stopped: 'Not connected',
    error: 'Connection failed',
  };

  let client: VoiceRelayClient | null = null;

  // The transcript, text chat, push-to-talk and the offer of text when voice cannot work.
  const conversation = new Conversation(ui, announce);

  // Voice is independent of the relay: whatever happens to it, the tools keep working.
  const voice = new Voice(
    {
      pill: ui.voice,
      quality: ui.quality,
      participants: ui.participants,
      participantsEmpty: ui.participantsEmpty,
      micMeter: ui.micLevel,
      agentMeter: ui.agentLevel,
      startAudio: ui.startAudio,
      retry: ui.voiceRetry,
      audioSink: ui.remoteAudio,
    },
    announce,
    {
      room: (room) => conversation.setRoom(room),
      failed: (reason) => conversation.voiceFailed(reason),
      // Text only (no microphone): no push-to-talk and no microphone meter to show.
      textOnly: (on) => {
        for (const el of document.querySelectorAll<HTMLElement>('[data-microphone]')) el.hidden = on;
      },
    },
  );

  function showMode(mode: string | null): void {
    ui.mode.dataset.mode = mode ?? '';
    ui.mode.textContent = `Phase: ${mode ?? '—'}`;
  }

  /** The session's key in the developers' details, with the fingerprint logs print for it. */
  function showKey(key: string | null): void {
    ui.devKey.textContent = key ?? '—';
    ui.devKeyFp.textContent = '—';
    const shown = key ?? '<key>';
    ui.devTryCall.textContent = `scripts/manage.sh call ${shown} OpenPopover '{"message":"Hello"}'`;
    ui.devTryDemo.textContent = `scripts/manage.sh demo ${shown}`;
    if (key) {
      void keyFingerprint(key).then((fp) => {
        if (fp && ui.devKey.textContent === key) ui.devKeyFp.textContent = `key=${fp}`;
      });
    }
  }

  type SessionKind = 'voice' | 'text';
  let kind: SessionKind = 'voice';

  const FIRST_SCREEN_TITLE = 'How would you like to talk to the agent?';
  const FIRST_SCREEN_HINT = 'Voice: press the headset button or Ctrl/⌘+K. Or choose text chat to type to the agent.';

  /** The first screen (no session: voice or text chat) or the session's panels. */
  function showScreen(inSession: boolean): void {
    ui.session.hidden = !inSession;
    ui.startText.hidden = inSession;
    ui.back.hidden = !inSession;
    ui.headset.setAttribute('aria-pressed', String(inSession));
    ui.headset.setAttribute('aria-label', inSession ? 'End session (Ctrl+K)' : 'Start voice session (Ctrl+K)');
    ui.headsetCaption.textContent = inSession ? 'End' : 'Voice';
    ui.startTitle.textContent = inSession ? (kind === 'voice' ? 'Voice session' : 'Text chat') : FIRST_SCREEN_TITLE;
    ui.voiceChoiceReason.hidden = inSession || !voiceProblem;
  }

  // Where voice cannot work (no WebRTC, no microphone API, not a secure context), the first
  // screen says why and leaves text chat; the voice button stays focusable, its reason attached.
  const voiceProblem = browserVoiceProblem();
  if (voiceProblem) {
    ui.voiceChoiceReason.textContent = `${voiceProblem} Choose text chat to type to the agent.`;
    ui.headset.setAttribute('aria-disabled', 'true');
  }

  async function startSession(as: SessionKind): Promise<void> {
    if (client) return;
    if (as === 'voice' && voiceProblem) {
      announce(`${voiceProblem} Choose text chat instead.`);
      ui.startText.focus();
      return;
    }
    kind = as;
    const c = new VoiceRelayClient({ participantName: 'Demo visitor' });
    client = c;
    hooks.registerTools(c);
    c.on('state', (state, detail) => {
      ui.connection.dataset.state = state;
      ui.connection.textContent = STATE_TEXT[state] + (state === 'error' && detail ? `: ${detail}` : '');
      if (state === 'bound') announce('Connected to the agent relay');
      if (state === 'revoked') {
        announce('The session ended');
        endSession(false);
      }
    });
    c.on('cancel', () => announce('The agent cancelled the request'));
    c.on('mode', (mode) => {
      if (client === c) showMode(mode);
    });
    // Still inside the user's click or key press: audio may start.
    voice.prepare();
    showScreen(true);
    ui.hint.textContent = 'Session active. The headset button (or Ctrl/⌘+K) ends it; Back asks first.';
    if (as === 'text') conversation.openText();
    try {
      const token = await c.start();
      ui.devIdentity.textContent = token.identity;
      ui.devRoom.textContent = token.roomName;
      showKey(token.apiKey);
      // "Switch to text" joins the same room without a microphone when voice could not.
      conversation.joinForText = () => {
        if (client === c) void voice.start(token.url, token.token, { microphone: false });
      };
      if (client === c) void voice.start(token.url, token.token, { microphone: as === 'voice' });
    } catch (err) {
      ui.hint.textContent = `Could not start: ${(err as Error).message}`;
      endSession(true);
    }
  }

  function endSession(stopClient: boolean): void {
    if (stopClient) client?.stop();
    client = null;
    voice.stop();
    conversation.reset();
    // Nothing of the session stays: no phase of an agent that is gone, no key.
    showMode(null);
    showKey(null);
    ui.devIdentity.textContent = '—';
    ui.devRoom.textContent = '—';
    showScreen(false);
    hooks.ended();
  }

  const active = () => !!client && client.state !== 'revoked' && client.state !== 'error';

  function stopSession(): void {
    endSession(true);
    ui.connection.dataset.state = 'stopped';
    ui.connection.textContent = STATE_TEXT.stopped;
  }

  function toggleSession(): void {
    if (active()) {
      stopSession();
      ui.hint.textContent = `Session ended. ${FIRST_SCREEN_HINT}`;
    } else {
      client = null;
      void startSession('voice');
    }
  }

  /** Back: while a session runs, asks first (focus on Stay, Escape stays); Leave ends it. */
  async function back(): Promise<void> {
    if (active()) {
      const what = kind === 'voice' ? 'A voice session' : 'A text chat';
      const leave = await confirmLeave({ message: `${what} with the agent is running. Leave and end it?` });
      if (!leave) return;
      stopSession();
    } else {
      endSession(true);
    }
    ui.hint.textContent = FIRST_SCREEN_HINT;
    ui.startTitle.focus();
    announce('Session ended. Choose voice or text chat to start again.');
  }

  ui.headset.addEventListener('click', toggleSession);
  ui.startText.addEventListener('click', () => {
    client = null;
    void startSession('text');
  });
  ui.back.addEventListener('click', () => void back());
  document.addEventListener('keydown', (e) => {
    if ((e.ctrlKey || e.metaKey) && !e.altKey && e.key.toLowerCase() === 'k') {
      e.preventDefault();
      toggleSession();
    }
  });
  showScreen(false);
}
