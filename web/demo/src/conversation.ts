// The conversation panel of the demo page, on the same framework-free cores the React hooks use
// (@voice-relay/client/voice: transcript, chat, push-to-talk, availability): the transcript (a toggle
// with aria-expanded, a role=log live region), text chat to the agent, push-to-talk (a button
// with aria-pressed, Space held while the focus is not in a text field or on another control),
// and, when voice cannot work here, "Switch to text" with the reason. Transcript text is put in
// the page only as textContent.

import type { Room } from 'livekit-client';
import {
  PushToTalk,
  TextChat,
  type TranscriptSegment,
  TranscriptStore,
  browserVoiceProblem,
  voiceAvailability,
} from '@voice-relay/client/voice';

export interface ConversationElements {
  unavailable: HTMLElement;
  unavailableReason: HTMLElement;
  switchToText: HTMLButtonElement;
  pttMode: HTMLInputElement;
  ptt: HTMLButtonElement;
  transcriptToggle: HTMLButtonElement;
  transcript: HTMLElement;
  transcriptList: HTMLElement;
  transcriptEmpty: HTMLElement;
  chatForm: HTMLFormElement;
  chatInput: HTMLInputElement;
  chatSend: HTMLButtonElement;
  chatStatus: HTMLElement;
}

const LABEL = { agent: 'Agent', user: 'You' } as const;

export class Conversation {
  readonly transcript = new TranscriptStore({ limit: 200 });
  private readonly chat = new TextChat({ transcript: this.transcript });
  // Pressing interrupts the agent: the turn RPCs (start_turn, end_turn) go to the agent, which
  // the reference agents register; an agent without them is not interrupted, nothing else.
  private readonly ptt = new PushToTalk({ turnRpc: true, rpcTimeoutMs: 3000 });
  private room: Room | null = null;
  private detachTranscript = () => {};
  private detachPtt: (() => void) | null = null;
  private unbindKey: (() => void) | null = null;
  private readonly items = new Map<string, HTMLLIElement>();

  constructor(
    private readonly el: ConversationElements,
    private readonly announce: (text: string) => void,
  ) {
    el.chatInput.maxLength = this.chat.maxLength;
    el.transcriptToggle.addEventListener('click', () => this.showTranscript(el.transcript.hidden));
    el.switchToText.addEventListener('click', () => this.switchToText());
    el.chatForm.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.send();
    });
    el.chatInput.addEventListener('input', () => this.chat.reset());
    this.chat.subscribe(() => this.showChat());
    this.transcript.subscribe(() => this.renderTranscript());
    this.ptt.subscribe(() => this.showPtt());
    el.pttMode.addEventListener('change', () => this.setPushToTalk(el.pttMode.checked));
    // Pointer: hold to talk. Keyboard: Space held (the binding), or Enter toggles.
    el.ptt.addEventListener('pointerdown', (e) => {
      if (e.button === 0) this.ptt.press();
    });
    for (const type of ['pointerup', 'pointercancel']) el.ptt.addEventListener(type, () => this.ptt.release());
    // Dragged off while held with the pointer (not while Space holds it).
    el.ptt.addEventListener('pointerleave', (e) => {
      if (e.buttons & 1) this.ptt.release();
    });
    el.ptt.addEventListener('click', (e) => {
      if (e.detail === 0) this.ptt.toggle();
    });
    this.renderTranscript();
  }

  /** The room voice joined, or null when it left. */
  setRoom(room: Room | null): void {
    if (room === this.room) return;
    this.detachTranscript();
    this.detachTranscript = () => {};
    this.detachPtt?.();
    this.detachPtt = null;
    this.room = room;
    if (!room) return;
    this.detachTranscript = this.transcript.attach(room);
    if (this.el.pttMode.checked) this.detachPtt = this.ptt.attach(room);
    // Voice works after all (a retry joined), or text was chosen and joined: the offer of text
    // stays only while it is still an offer.
    if (!browserVoiceProblem() || this.textChosen) this.el.unavailable.hidden = true;
  }

  /** Voice failed with `reason`: offer text instead. */
  voiceFailed(reason: string): void {
    const a = voiceAvailability(reason);
    if (a.reason) this.offerText(a.reason);
  }

  private offerText(reason: string): void {
    this.el.unavailableReason.textContent = `${reason} You can type to the agent instead.`;
    this.el.unavailable.hidden = false;
  }

  /** Joins the room without a microphone, for text chat when voice could not join it. */
  joinForText: (() => void) | null = null;

  private textChosen = false;

  private switchToText(): void {
    if (!this.room) this.joinForText?.();
    this.openText();
  }

  /** Text chat chosen (on the first screen, or instead of failed voice): the chat and the transcript. */
  openText(): void {
    this.textChosen = true;
    this.showTranscript(true);
    this.el.chatInput.focus();
    this.announce('Text chat: type your message and press Enter');
  }

  /** The session ended: nothing offered or chosen, the transcript emptied. */
  reset(): void {
    this.textChosen = false;
    this.joinForText = null;
    this.el.unavailable.hidden = true;
    this.transcript.clear();
    this.showTranscript(false);
  }

  private showTranscript(show: boolean): void {
    this.el.transcript.hidden = !show;
    // The name stays "Transcript": aria-expanded tells whether it is shown.
    this.el.transcriptToggle.setAttribute('aria-expanded', String(show));
  }

  private async send(): Promise<void> {
    if (this.chat.getSnapshot().state === 'sending') return;
    const sent = await this.chat.send(this.room, this.el.chatInput.value);
    if (sent) this.el.chatInput.value = '';
  }

  private showChat(): void {
    const { state, error } = this.chat.getSnapshot();
    this.el.chatSend.setAttribute('aria-disabled', String(state === 'sending'));
    this.el.chatStatus.dataset.state = state;
    this.el.chatStatus.textContent = state === 'sending' ? 'Sending…' : state === 'failed' ? `Not sent: ${error}` : '';
  }

  private setPushToTalk(on: boolean): void {
    this.el.ptt.hidden = !on;
    if (on) {
      this.unbindKey ??= this.ptt.bindKey('Space', document);
      if (this.room && !this.detachPtt) this.detachPtt = this.ptt.attach(this.room);
      this.announce('Push to talk on: hold Space or the talk button to speak');
    } else {
      this.unbindKey?.();
      this.unbindKey = null;
      this.ptt.release();
      this.detachPtt?.();
      this.detachPtt = null;
      this.announce('Push to talk off');
    }
  }

  private showPtt(): void {
    const { held, error } = this.ptt.getSnapshot();
    // The name stays: aria-pressed tells whether the microphone is open.
    this.el.ptt.setAttribute('aria-pressed', String(held));
    if (error) this.el.chatStatus.textContent = error;
  }

  /** One item per segment, kept in place; interim items are aria-busy until final. */
  private renderTranscript(): void {
    const segments = this.transcript.getSnapshot();
    const wanted = new Set(segments.map((s) => s.id));
    for (const [id, li] of this.items) {
      if (!wanted.has(id)) {
        li.remove();
        this.items.delete(id);
      }
    }
    for (const s of segments) this.item(s);
    this.el.transcriptEmpty.hidden = segments.length > 0;
  }

  private item(s: TranscriptSegment): void {
    let li = this.items.get(s.id);
    if (!li) {
      li = document.createElement('li');
      this.items.set(s.id, li);
      this.el.transcriptList.append(li);
    }
    li.dataset.speaker = s.speaker;
    li.dataset.final = String(s.final);
    li.dataset.source = s.source;
    if (s.final) li.removeAttribute('aria-busy');
    else li.setAttribute('aria-busy', 'true');
    const text = `${LABEL[s.speaker]}: ${s.text}`;
    if (li.textContent !== text) li.textContent = text;
  }
}
