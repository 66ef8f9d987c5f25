// The voice UI hooks as an app uses them: availability, the transcript, text chat,
// push-to-talk and confirm-before-leave. Test hooks are element ids and data attributes.
import { type FormEvent, useState } from 'react';
import {
  Transcript,
  useConfirmLeave,
  usePushToTalk,
  useTextChat,
  useTranscript,
  useVoiceAvailability,
} from '@voice-relay/client/react';

export function VoiceUi() {
  const { available, reason } = useVoiceAvailability();
  const { segments } = useTranscript();
  const chat = useTextChat({ maxLength: 500 });
  const ptt = usePushToTalk({ key: 'Space' });
  const confirmLeave = useConfirmLeave(true, 'Leave the voice session?');
  const [draft, setDraft] = useState('');
  const [left, setLeft] = useState('');
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (await chat.send(draft)) setDraft('');
  };
  return (
    <section aria-label="Voice UI">
      <p id="availability" data-available={String(available)}>
        {reason ?? 'voice available'}
      </p>
      <Transcript id="transcript" />
      <p id="segments">{segments.length}</p>
      <form id="chat" onSubmit={submit}>
        <input id="chat-input" value={draft} maxLength={chat.maxLength} onChange={(e) => setDraft(e.target.value)} />
        <button type="submit">Send</button>
        <p id="chat-status" data-state={chat.state} role="status">
          {chat.error ?? ''}
        </p>
      </form>
      <button id="ptt" {...ptt.buttonProps}>
        Hold to talk
      </button>
      <button id="back" type="button" onClick={() => void confirmLeave().then((yes) => setLeft(yes ? 'leave' : 'stay'))}>
        Back
      </button>
      <p id="left">{left}</p>
    </section>
  );
}
