// Vapi as the worker sees it: messages signed the way Vapi's HMAC credential signs them
// (`x-signature`: hex HMAC-SHA256 of `{timestamp}.{body}`, `x-timestamp` in seconds). Vapi's
// servers cannot be reached from here; these are the requests they would send.
import { createHmac } from 'node:crypto';

/** Posts `body` to `worker`'s `/vapi/webhook`, signed with `secret` at `ts` (now by default). */
export function sendVapi(worker, body, { secret, ts = Math.floor(Date.now() / 1000) } = {}) {
  const text = JSON.stringify(body);
  const signature = createHmac('sha256', secret).update(`${ts}.${text}`).digest('hex');
  return worker.fetch('/vapi/webhook', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-signature': signature, 'x-timestamp': String(ts) },
    body: text,
  });
}

/** A Vapi call object carrying the user's key and session token as the call's variables. */
export function vapiCall(id, apiKey, agentToken) {
  return { id, assistantOverrides: { variableValues: { apiKey, agentToken } } };
}
