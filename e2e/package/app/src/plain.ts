// The README's framework-free example, type-checked (not built).
import { VoiceRelayClient } from '@voice-relay/client';

declare function showPopover(message: string): void;

export async function main(): Promise<string> {
  const client = new VoiceRelayClient({ participantName: 'Ada' });
  client.handle('OpenPopover', (params: { message: string }) => {
    showPopover(params.message);
    return { shown: true };
  });
  client.on('state', (state, detail) => console.log('relay:', state, detail ?? ''));
  const token = await client.start(); // { token, url, roomName, identity, apiKey, expiresAt }
  return token.url;
}
