// The README's voice UI example, type-checked (not built): it must compile as users copy it.
import { useState } from 'react';
import { Transcript, usePushToTalk, useTextChat, useVoiceAvailability } from '@voice-relay/client/react';

export function Conversation() {
  const { available, reason } = useVoiceAvailability();
  const chat = useTextChat();
  const ptt = usePushToTalk({ key: 'Space' });
  const [draft, setDraft] = useState('');
  return (
    <>
      {!available && <p role="status">{reason} Type to the agent instead.</p>}
      <Transcript />
      <form onSubmit={async (e) => { e.preventDefault(); if (await chat.send(draft)) setDraft(''); }}>
        <input value={draft} maxLength={chat.maxLength} onChange={(e) => setDraft(e.target.value)} />
        <button type="submit" aria-disabled={chat.state === 'sending'}>Send</button>
        {chat.error && <p role="status">Not sent: {chat.error}</p>}
      </form>
      {available && <button {...ptt.buttonProps}>Hold to talk (Space)</button>}
    </>
  );
}
