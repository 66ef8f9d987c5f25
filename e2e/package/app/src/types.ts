// Type-level checks of the shipped declarations: with skipLibCheck on (livekit-client's own
// declarations import a module it does not ship), a type the package's .d.ts failed to resolve
// would silently become `any`. These lines fail to compile if any of them did.
import type { Room } from 'livekit-client';
import type {
  CallMeta,
  ConnectionState,
  PushToTalkView,
  TextChatView,
  TokenInfo,
  TranscriptSegment,
  VoiceAvailability,
  VoiceRelay,
  VoiceSnapshot,
} from '@voice-relay/client/react';
import type { useVoiceAvailability } from '@voice-relay/client/react';
import type { ClientOptions, VoiceRelayClient } from '@voice-relay/client';

type IsAny<T> = 0 extends 1 & T ? true : false;
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;

export const checks: [
  IsAny<VoiceSnapshot['room']>,
  IsAny<VoiceRelay['client']>,
  IsAny<CallMeta['signal']>,
  IsAny<TokenInfo>,
  IsAny<ClientOptions['fetch']>,
  Same<VoiceSnapshot['room'], Room | null>,
  Same<VoiceRelay['client'], VoiceRelayClient>,
  Same<VoiceRelay['state'], ConnectionState>,
  IsAny<TranscriptSegment>,
  IsAny<TextChatView['send']>,
  IsAny<PushToTalkView['buttonProps']>,
  Same<TranscriptSegment['speaker'], 'agent' | 'user'>,
  Same<ReturnType<typeof useVoiceAvailability>, VoiceAvailability>,
] = [false, false, false, false, false, true, true, true, false, false, false, true, true];
