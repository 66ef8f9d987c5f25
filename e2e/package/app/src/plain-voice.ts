// The README's framework-free voice example (@voice-relay/client/voice), type-checked (not built).
import { PushToTalk, VoiceConnection } from '@voice-relay/client/voice';

declare function showVoice(text: string): void;

export async function main(token: { url: string; token: string }): Promise<string | null> {
  const voice = new VoiceConnection();
  voice.subscribe(() => {
    const { state, error, microphone } = voice.getSnapshot();
    showVoice(state === 'failed' ? `Voice failed: ${error}` : `${state} (microphone: ${microphone})`);
  });
  await voice.connect(token.url, token.token); // never rejects; { microphone: false } for text only
  const ptt = new PushToTalk({ turnRpc: true });
  const room = voice.getSnapshot().room;
  if (room) ptt.attach(room); // the microphone is muted unless ptt.press() … ptt.release()
  const why = await voice.setMicrophone(false); // stop sending it (true: publish it again); null, or why not
  voice.disconnect(); // leave
  return why;
}
