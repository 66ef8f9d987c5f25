// The demo page: the UI tools an agent drives through the relay. Tool parameters are only ever
// put in the page as text (textContent), never as HTML. Sessions (the first screen, voice or
// text chat, leaving) are session.ts's.

import { type CallMeta, ToolError, type VoiceRelayClient } from '@voice-relay/client';
import { type Card, DECK, cardById, shuffled } from './deck';
import { setUpSessions } from './session';
import { suitSymbol } from './suits';
import { announce, ui } from './ui';

const POPOVER_MS = 5000;
const REVEAL_MS = 900;
const SHOW_MS = 600;
/** Longest a status line stays when nothing follows it. */
const LOADING_MS = 20_000;

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
  announce(`Cassette inserted: ${title}`);
  return { success: true };
}

ui.cassette.addEventListener('click', () => {
  ui.cassetteTitle.textContent = ui.cassette.dataset.title ?? '';
  ui.cassetteContent.textContent = cassetteContent;
  ui.cassetteModal.showModal();
});

let loadingTimer: ReturnType<typeof setTimeout> | undefined;

/** The status line says what the agent is doing until it does the next thing (or a while). */
function loadingStatus(params: { text?: unknown }): { success: true } {
  const text = str(params?.text, 'text', 200);
  ui.loading.textContent = text;
  ui.loading.hidden = false;
  clearTimeout(loadingTimer);
  loadingTimer = setTimeout(hideLoading, LOADING_MS);
  return { success: true };
}

function hideLoading(): void {
  clearTimeout(loadingTimer);
  ui.loading.hidden = true;
  ui.loading.textContent = '';
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

/** A session ended: what it showed of the agent's work goes (pinned notes and the cassette,
 * which the user keeps on purpose, stay). */
function sessionEnded(): void {
  closePicker();
  hideLoading();
  drawn.length = 0;
  renderSpread();
  ui.display.hidden = true;
  ui.displayCard.replaceChildren();
  ui.displayCaption.textContent = '';
  clearTimeout(popoverTimer);
  ui.popover.hidden = true;
}

function registerTools(c: VoiceRelayClient): void {
  // Whatever the agent does next replaces its status line.
  c.on('call', (tool) => {
    if (tool !== 'loading_status') hideLoading();
  });
  c.handle('pin_note', (p) => pinNote(p ?? {}));
  c.handle('set_theme', SET_THEME, (p) => setTheme(p ?? {}));
  c.handle('OpenPopover', (p) => openPopover(p ?? {}));
  c.handle('present_to_cassette', (p) => presentToCassette(p ?? {}));
  c.handle('loading_status', (p) => loadingStatus(p ?? {}));
  c.handle('draw_card', (p, meta) => drawCard(p ?? {}, meta));
  c.handle('show_card', (p, meta) => showCard(p ?? {}, meta));
}

renderSpread();
setUpSessions({ registerTools, ended: sessionEnded });
