// A React app that uses @voice-relay/client as a user would, installed from the packed tarball.
// Under StrictMode, built in development mode (so React really runs effects twice). Test hooks
// are element ids and data attributes; window.__effects counts a probe effect's runs.
import { StrictMode, useEffect, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { type CallMeta, ToolError, useToolHandler, useVoiceRelay, VoiceRelayProvider } from '@voice-relay/client/react';
import { VoiceUi } from './voice-ui';

declare global {
  interface Window {
    __effects?: number;
  }
}

interface DrawCardParams {
  positionLabel: string;
  promptRole?: string;
  /** Test only: never answer, wait for the relay to cancel. */
  hang?: boolean;
}

interface DrawnCard {
  cardId: string;
  cardName: string;
  reversed: boolean;
}

function Status() {
  const { state, detail, apiKey, voice, connectVoice } = useVoiceRelay();
  return (
    <section>
      <p id="state" data-state={state}>
        {state}
        {detail ? `: ${detail}` : ''}
      </p>
      <p id="key">{apiKey ?? ''}</p>
      <button id="join-voice" type="button" onClick={() => void connectVoice({ timeoutMs: 5000 })}>
        Join voice
      </button>
      <p id="voice" data-state={voice.state}>
        {voice.error ?? voice.state}
      </p>
    </section>
  );
}

function Popover() {
  const [message, setMessage] = useState<string | null>(null);
  useToolHandler('OpenPopover', (params: { message?: string }) => {
    if (typeof params?.message !== 'string') throw new ToolError('invalid_arguments', 'message must be a string');
    setMessage(params.message);
    return { shown: 'popover' };
  });
  return message === null ? null : (
    <div id="popover" role="status">
      {message}
    </div>
  );
}

/** A second handler of the same tool: while mounted, it answers instead of Popover's. */
function Banner() {
  useToolHandler('OpenPopover', () => ({ shown: 'banner' }));
  return <p id="banner">banner mounted</p>;
}

function CardPicker({ onAborted }: { onAborted: (text: string) => void }) {
  useToolHandler('draw_card', async (params: DrawCardParams, { signal, callId }: CallMeta): Promise<DrawnCard> => {
    if (params.hang) {
      return new Promise<DrawnCard>((_, reject) => {
        signal.addEventListener('abort', () => {
          const reason = signal.reason as { name?: string } | undefined;
          onAborted(`${callId} aborted=${signal.aborted} ${reason?.name ?? ''}`);
          reject(signal.reason);
        });
      });
    }
    return { cardId: 'the-sun', cardName: `The Sun (${params.positionLabel})`, reversed: false };
  });
  return <p id="picker">picker mounted</p>;
}

function Probe() {
  useEffect(() => {
    window.__effects = (window.__effects ?? 0) + 1;
  }, []);
  return null;
}

function App() {
  const [session, setSession] = useState(true);
  const [picker, setPicker] = useState(true);
  const [banner, setBanner] = useState(false);
  const [aborted, setAborted] = useState('');
  return (
    <main>
      <Probe />
      <button id="toggle-session" type="button" onClick={() => setSession((s) => !s)}>
        {session ? 'End session' : 'Start session'}
      </button>
      <button id="toggle-picker" type="button" onClick={() => setPicker((p) => !p)}>
        {picker ? 'Unmount picker' : 'Mount picker'}
      </button>
      <button id="toggle-banner" type="button" onClick={() => setBanner((b) => !b)}>
        {banner ? 'Unmount banner' : 'Mount banner'}
      </button>
      <p id="aborted">{aborted}</p>
      {session && (
        <VoiceRelayProvider participantName="Package test">
          <Status />
          <Popover />
          <VoiceUi />
          {banner && <Banner />}
          {picker && <CardPicker onAborted={setAborted} />}
        </VoiceRelayProvider>
      )}
    </main>
  );
}

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
