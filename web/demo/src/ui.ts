// The demo page's elements, by id, and its live announcer.

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

export const ui = {
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
  devKeyFp: $('dev-key-fp'),
  devTryCall: $('dev-try-call'),
  devTryDemo: $('dev-try-demo'),
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

export function announce(text: string): void {
  // Clearing first makes a repeated message announced again.
  ui.announcer.textContent = '';
  requestAnimationFrame(() => {
    ui.announcer.textContent = text;
  });
}
