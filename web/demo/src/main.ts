// The demo page: the UI tools an agent drives through the relay. Tool parameters are only ever
// put in the page as text (textContent), never as HTML.

import { type CallMeta, ToolError, VoiceRelayClient, type ConnectionState } from '@voice-relay/client';
import { browserVoiceProblem, confirmLeave } from '@voice-relay/client/voice';
import { type Card, DECK, cardById, shuffled } from './deck';
import { suitSymbol } from './suits';
import { Conversation } from './conversation';
import { Voice } from './voice';

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

const ui = {
  connection: $('connection'),
  voice: $('voice'),
  quality: $('quality'),
  participants: $('participants'),
  participantsEmpty: $('participants-empty'),
  micLevel: $('mic-level'),
  agentLevel: $('agent-level'),
  startAudio: $<HTMLButtonElement>('start-audio'),
  voiceRetry: $<HTMLButtonElement>('voice-retry'),
  remoteAudio: $('remote-audio'),
  headset: $<HTMLButtonElement>('headset'),
  headsetCaption: $('headset-caption'),
  startText: $<HTMLButtonElement>('start-text'),
  back: $<HTMLButtonElement>('back'),
  startTitle: $('start-title'),
  voiceChoiceReason: $('voice-choice-reason'),
  session: $('session'),
  hint: $('hint'),
  loading: $('loading'),
  cassette: $<HTMLButtonElement>('cassette'),
  cassetteLabel: $('cassette-label'),
  slotEmpty: $('slot-empty'),
  cassetteModal: $<HTMLDialogElement>('cassette-modal'),
  cassetteTitle: $('cassette-title'),
  cassetteContent: $('cassette-content'),
  spreadList: $('spread-list'),
  spreadEmpty: $('spread-empty'),
  display: $('display'),
  displayCard: $('display-card'),
  displayCaption: $('display-caption'),
  popover: $('popover'),
  picker: $<HTMLDialogElement>('picker'),
  pickerTitle: $('picker-title'),
  pickerRole: $('picker-role'),
  pickerDeck: $('picker-deck'),
  pickerReveal: $('picker-reveal'),
  announcer: $('announcer'),
  devIdentity: $('dev-identity'),
  devRoom: $('dev-room'),
  devKey: $('dev-key'),
  mode: $('mode'),
  notesList: $('notes-list'),
  notesEmpty: $('notes-empty'),
  unavailable: $('voice-unavailable'),
  unavailableReason: $('voice-unavailable-reason'),
  switchToText: $<HTMLButtonElement>('switch-to-text'),
  pttMode: $<HTMLInputElement>('ptt-mode'),
  ptt: $<HTMLButtonElement>('ptt'),
  transcriptToggle: $<HTMLButtonElement>('transcript-toggle'),
  transcript: $('transcript'),
  transcriptList: $('transcript-list'),
  transcriptEmpty: $('transcript-empty'),
  chatForm: $<HTMLFormElement>('chat-form'),
  chatInput: $<HTMLInputElement>('chat-input'),
  chatSend: $<HTMLButtonElement>('chat-send'),
  chatStatus: $('chat-status'),
};

const POPOVER_MS = 5000;
const REVEAL_MS = 900;
const SHOW_MS = 600;

function announce(text: string): void {
  // Clearing first makes a repeated message announced again.
  ui.announcer.textContent = '';
  requestAnimationFrame(() => {
    ui.announcer.textContent = text;
  });
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(t);
      reject(signal.reason);
    });
  });

function str(v: unknown, field: string, max = 4000): string {
  if (typeof v !== 'string') throw new ToolError('invalid_arguments', `${field} must be a string`);
  return v.slice(0, max);
}

// ---- connection and voice ---------------------------------------------------------------------

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
  { room: (room) => conversation.setRoom(room), failed: (reason) => conversation.voiceFailed(reason) },
);

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
  registerTools(c);
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
    ui.mode.dataset.mode = mode;
    ui.mode.textContent = `Phase: ${mode}`;
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
    ui.devKey.textContent = token.apiKey;
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
  showScreen(false);
  closePicker();
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

// ---- popover ----------------------------------------------------------------------------------

let popoverTimer: ReturnType<typeof setTimeout> | undefined;

function openPopover(params: { message?: unknown }): { success: true } {
  const message = params?.message === undefined ? 'Hello from your agent!' : str(params.message, 'message', 280);
  ui.popover.textContent = message;
  ui.popover.hidden = false;
  ui.popover.classList.remove('bounce');
  void ui.popover.offsetWidth; // restart the animation
  ui.popover.classList.add('bounce');
  clearTimeout(popoverTimer);
  popoverTimer = setTimeout(() => {
    ui.popover.hidden = true;
  }, POPOVER_MS);
  return { success: true };
}

// ---- cassette and loading status --------------------------------------------------------------

let cassetteContent = '';

async function presentToCassette(params: { title?: unknown; content?: unknown }): Promise<{ success: true }> {
  const title = str(params?.title, 'title', 40);
  const content = str(params?.content, 'content');
  if (!ui.cassette.hidden) {
    ui.cassette.classList.remove('inserting');
    ui.cassette.classList.add('ejecting');
    await sleep(350);
    ui.cassette.classList.remove('ejecting');
  }
  cassetteContent = content;
  ui.cassetteLabel.textContent = title;
  ui.cassette.setAttribute('aria-label', `Open cassette: ${title}`);
  ui.cassette.dataset.title = title;
  ui.cassette.hidden = false;
  ui.slotEmpty.hidden = true;
  ui.cassette.classList.add('inserting');
  ui.loading.hidden = true;
  announce(`Cassette inserted: ${title}`);
  return { success: true };
}

ui.cassette.addEventListener('click', () => {
  ui.cassetteTitle.textContent = ui.cassette.dataset.title ?? '';
  ui.cassetteContent.textContent = cassetteContent;
  ui.cassetteModal.showModal();
});

function loadingStatus(params: { text?: unknown }): { success: true } {
  const text = str(params?.text, 'text', 200);
  ui.loading.textContent = text;
  ui.loading.hidden = false;
  return { success: true };
}

// ---- cards ------------------------------------------------------------------------------------

interface Drawn {
  card: Card;
  reversed: boolean;
  position: string;
}

const drawn: Drawn[] = [];

function cardFace(card: Card, reversed: boolean): HTMLElement {
  const face = document.createElement('div');
  face.className = `card-face ${card.arcana}${reversed ? ' reversed' : ''}`;
  face.setAttribute('role', 'img');
  face.setAttribute('aria-label', `${card.name}${reversed ? ', reversed' : ', upright'}`);
  const inner = document.createElement('div');
  inner.className = 'card-inner';
  const num = document.createElement('span');
  num.className = 'card-number';
  num.textContent = card.number;
  const symbol = suitSymbol(card.suit);
  const name = document.createElement('span');
  name.className = 'card-name';
  name.textContent = card.name;
  inner.append(num, symbol, name);
  face.append(inner);
  return face;
}

function renderSpread(): void {
  ui.spreadList.replaceChildren(
    ...drawn.map((d) => {
      const li = document.createElement('li');
      li.textContent = `${d.position}: ${d.card.name}${d.reversed ? ' (reversed)' : ''}`;
      return li;
    }),
  );
  ui.spreadEmpty.hidden = drawn.length > 0;
}

let closePickerNow: (() => void) | null = null;

function closePicker(): void {
  closePickerNow?.();
}

function drawCard(
  params: { positionLabel?: unknown; promptRole?: unknown },
  meta: CallMeta,
): Promise<{ cardId: string; cardName: string; reversed: boolean }> {
  const position = str(params?.positionLabel, 'positionLabel', 64);
  const role = str(params?.promptRole, 'promptRole', 200);
  const remaining = DECK.filter((c) => !drawn.some((d) => d.card.id === c.id));
  if (remaining.length === 0) throw new ToolError('deck_empty', 'every card has been drawn');
  closePicker();
  const deck = shuffled(remaining);

  return new Promise((resolve, reject) => {
    let done = false;
    const finish = () => {
      done = true;
      closePickerNow = null;
      meta.signal.removeEventListener('abort', onAbort);
      ui.picker.removeEventListener('cancel', onCancel);
      if (ui.picker.open) ui.picker.close();
      ui.pickerDeck.replaceChildren();
      ui.pickerDeck.removeAttribute('tabindex');
    };
    const onAbort = () => {
      if (done) return;
      finish();
      announce(`Card draw for ${position} cancelled`);
      reject(meta.signal.reason);
    };
    const onCancel = (e: Event) => {
      // Escape declines the draw: the agent hears that the user closed the picker.
      e.preventDefault();
      if (done) return;
      finish();
      announce('Card draw declined');
      reject(new ToolError('declined', 'the user closed the card picker'));
    };
    closePickerNow = onAbort;
    meta.signal.addEventListener('abort', onAbort);
    ui.picker.addEventListener('cancel', onCancel);

    ui.pickerTitle.textContent = `Draw a card for ${position}`;
    ui.pickerRole.textContent = role;
    ui.pickerReveal.hidden = true;
    ui.pickerReveal.replaceChildren();
    const buttons = deck.map((card, i) => {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'card-back';
      b.setAttribute('aria-label', `Card ${i + 1} of ${deck.length}, face down`);
      b.dataset.index = String(i);
      b.tabIndex = i === 0 ? 0 : -1;
      b.addEventListener('click', () => pick(card));
      return b;
    });
    ui.pickerDeck.replaceChildren(...buttons);
    ui.pickerDeck.onkeydown = (e) => {
      const idx = buttons.indexOf(document.activeElement as HTMLButtonElement);
      if (idx < 0) return;
      const perRow = Math.max(1, Math.round(ui.pickerDeck.clientWidth / (buttons[0].offsetWidth + 6)));
      const step: Record<string, number> = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: perRow, ArrowUp: -perRow, Home: -idx, End: buttons.length - 1 - idx };
      if (!(e.key in step)) return;
      e.preventDefault();
      const next = Math.min(buttons.length - 1, Math.max(0, idx + step[e.key]));
      buttons[idx].tabIndex = -1;
      buttons[next].tabIndex = 0;
      buttons[next].focus();
    };
    ui.picker.showModal();
    buttons[0].focus();
    announce(`Drawing card for ${position} position. ${role}`);

    async function pick(card: Card) {
      if (done) return;
      const reversed = crypto.getRandomValues(new Uint8Array(1))[0] < 85; // about one in three
      for (const b of buttons) b.disabled = true;
      // The deck keeps a keyboard stop while its cards are disabled (it may scroll).
      ui.pickerDeck.tabIndex = 0;
      ui.pickerReveal.replaceChildren(cardFace(card, reversed));
      ui.pickerReveal.hidden = false;
      announce(`You drew ${card.name}${reversed ? ', reversed' : ''}`);
      try {
        await sleep(REVEAL_MS, meta.signal);
      } catch {
        return; // cancelled while revealing: onAbort already rejected
      }
      if (done) return;
      finish();
      drawn.push({ card, reversed, position });
      renderSpread();
      resolve({ cardId: card.id, cardName: card.name, reversed });
    }
  });
}

async function showCard(
  params: { cardId?: unknown; reversed?: unknown },
  meta: CallMeta,
): Promise<{ success: true; cardId: string; reversed: boolean }> {
  const id = str(params?.cardId, 'cardId', 64);
  if (typeof params?.reversed !== 'boolean') throw new ToolError('invalid_arguments', 'reversed must be a boolean');
  const card = cardById(id);
  if (!card) throw new ToolError('unknown_card', `there is no card with id ${id}`);
  const face = cardFace(card, params.reversed);
  face.classList.add('showing');
  ui.displayCard.replaceChildren(face);
  ui.displayCaption.textContent = `${card.name} — ${params.reversed ? 'reversed' : 'upright'}`;
  ui.display.hidden = false;
  announce(`Showing ${card.name}${params.reversed ? ', reversed' : ''}`);
  await sleep(SHOW_MS, meta.signal);
  return { success: true, cardId: card.id, reversed: params.reversed };
}

const MAX_NOTES = 20;
const TONES = ['info', 'success', 'warning'];

/** The catalog's `pin_note`: a note that stays until the user dismisses it. */
function pinNote(params: { text?: unknown; tone?: unknown }): { pinned: true; notes: number } {
  const text = str(params?.text, 'text', 280).trim();
  if (!text) throw new ToolError('invalid_arguments', 'text must not be empty');
  const tone = params?.tone === undefined ? 'info' : params.tone;
  if (typeof tone !== 'string' || !TONES.includes(tone)) {
    throw new ToolError('invalid_arguments', `tone must be one of ${TONES.join(', ')}`);
  }
  const item = document.createElement('li');
  item.className = 'note';
  item.dataset.tone = tone;
  const body = document.createElement('p');
  body.textContent = text;
  const dismiss = document.createElement('button');
  dismiss.type = 'button';
  dismiss.textContent = 'Dismiss';
  dismiss.setAttribute('aria-label', `Dismiss note: ${text.slice(0, 60)}`);
  dismiss.addEventListener('click', () => {
    item.remove();
    ui.notesEmpty.hidden = ui.notesList.childElementCount > 0;
  });
  item.append(body, dismiss);
  ui.notesList.prepend(item);
  while (ui.notesList.childElementCount > MAX_NOTES) ui.notesList.lastElementChild?.remove();
  ui.notesEmpty.hidden = true;
  return { pinned: true, notes: ui.notesList.childElementCount };
}

/** A tool this page defines itself (offered when the worker accepts page tools). */
const SET_THEME = {
  description: 'Switch the page between its dark and light colour themes, when the user asks for it.',
  parameters: {
    type: 'object',
    properties: { theme: { type: 'string', enum: ['dark', 'light'], description: 'The theme to show' } },
    required: ['theme'],
    additionalProperties: false,
  },
  awaitResult: true,
  timeoutMs: 5000,
};

function setTheme(params: { theme?: unknown }): { theme: string } {
  const theme = params?.theme;
  if (theme !== 'dark' && theme !== 'light') throw new ToolError('invalid_arguments', 'theme must be dark or light');
  document.body.dataset.theme = theme;
  announce(`Switched to the ${theme} theme`);
  return { theme };
}

function registerTools(c: VoiceRelayClient): void {
  c.handle('pin_note', (p) => pinNote(p ?? {}));
  c.handle('set_theme', SET_THEME, (p) => setTheme(p ?? {}));
  c.handle('OpenPopover', (p) => openPopover(p ?? {}));
  c.handle('present_to_cassette', (p) => presentToCassette(p ?? {}));
  c.handle('loading_status', (p) => loadingStatus(p ?? {}));
  c.handle('draw_card', (p, meta) => drawCard(p ?? {}, meta));
  c.handle('show_card', (p, meta) => showCard(p ?? {}, meta));
}

renderSpread();
