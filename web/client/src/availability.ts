// Whether this page can use voice at all, and if not why, as a sentence: framework-free, shared
// by the React hook useVoiceAvailability() and the demo page, so a page can offer text chat
// instead. The browser's side is checked at once (WebRTC, the microphone API, a secure
// context); a voice connection that failed (VoiceSnapshot's `failed`) counts as unavailable too.

export interface VoiceAvailability {
  available: boolean;
  /** Why voice is unavailable, as a sentence; null when it is available. */
  reason: string | null;
}

/** What the browser lacks for voice, as a sentence; null when nothing. `scope` is globalThis by default. */
export function browserVoiceProblem(scope: any = globalThis): string | null {
  if (typeof scope.RTCPeerConnection !== 'function') {
    return 'This browser cannot make WebRTC calls, so voice is not available.';
  }
  if (scope.isSecureContext === false) {
    return 'The page is not served over https (or from localhost), so the browser does not allow the microphone.';
  }
  if (typeof scope.navigator?.mediaDevices?.getUserMedia !== 'function') {
    return 'This browser does not let the page use a microphone, so voice is not available.';
  }
  return null;
}

/**
 * Voice's availability from the browser and the state of the voice connection: `voiceError` is
 * the failed connection's reason (null or undefined when it did not fail).
 */
export function voiceAvailability(voiceError?: string | null, scope: any = globalThis): VoiceAvailability {
  const problem = browserVoiceProblem(scope);
  if (problem) return { available: false, reason: problem };
  if (voiceError) {
    const sentence = voiceError.charAt(0).toUpperCase() + voiceError.slice(1);
    return { available: false, reason: `Voice failed: ${sentence}${/[.!?]$/.test(sentence) ? '' : '.'}` };
  }
  return { available: true, reason: null };
}
