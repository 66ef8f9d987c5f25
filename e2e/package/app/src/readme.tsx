// The README's React example, type-checked (not built): it must compile as users copy it.
import { ToolError, useToolHandler, useVoiceRelay, VoiceRelayProvider } from '@voice-relay/client/react';

declare function showPicker(
  positionLabel: string,
  signal: AbortSignal,
): Promise<{ id: string; name: string; reversed: boolean } | null>;

export function App() {
  return (
    <VoiceRelayProvider participantName="Ada">
      <VoiceButton />
      <CardPicker />
    </VoiceRelayProvider>
  );
}

function VoiceButton() {
  const { state, voice, connectVoice, disconnectVoice } = useVoiceRelay();
  if (state !== 'bound') return <p>Connecting to the relay… ({state})</p>;
  if (voice.state === 'failed') return <p role="alert">Voice failed: {voice.error}</p>;
  return voice.state === 'off'
    ? <button onClick={() => connectVoice()}>Talk to the agent</button>
    : <button onClick={disconnectVoice}>Hang up ({voice.state})</button>;
}

interface DrawCard { positionLabel: string; promptRole?: string }

function CardPicker() {
  useToolHandler('draw_card', async (params: DrawCard, { signal }) => {
    // Resolves with the user's pick; the agent gets it as the call's result.
    const card = await showPicker(params.positionLabel, signal);
    if (!card) throw new ToolError('declined', 'the user closed the card picker');
    return { cardId: card.id, cardName: card.name, reversed: card.reversed };
  });
  return null;
}
