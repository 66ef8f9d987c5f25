/**
 * What an agent is dispatched with: the one user it serves, and a session token for that
 * user's key alone. The agent worker asks LiveKit to dispatch the agent (explicit dispatch, by
 * agent name) into the room of each user who joins with a key, with this JSON as the job's
 * metadata: `{"apiKey", "identity", "agentToken", "sessionId", "expiresAt"}`. The room's
 * participants never see a job's metadata. The token reaches that key's tab only (listing,
 * calling, the mode, the status; never revoking) and dies when the user leaves. An agent holds
 * no other credential of the relay's.
 */
import { fingerprint, isApiKey } from './keys.js';

export class DispatchGrant {
  readonly #apiKey: string;
  readonly #token: string;
  readonly #sessionId: string;

  private constructor(
    apiKey: string,
    readonly identity: string,
    token: string,
    sessionId: string,
    readonly expiresAt: number,
  ) {
    this.#apiKey = apiKey;
    this.#token = token;
    this.#sessionId = sessionId;
  }

  /** The user's routing key. */
  get apiKey(): string {
    return this.#apiKey;
  }

  /** The session token for that key alone. */
  get agentToken(): string {
    return this.#token;
  }

  get sessionId(): string {
    return this.#sessionId;
  }

  get keyFingerprint(): string {
    return fingerprint(this.#apiKey);
  }

  /** Never shows the key or the token. */
  toString(): string {
    return `DispatchGrant(${this.identity}, key ${this.keyFingerprint})`;
  }

  toJSON(): Record<string, unknown> {
    return { identity: this.identity, key: this.keyFingerprint, expiresAt: this.expiresAt };
  }

  /** The grant in a job's metadata; throws a `TypeError` saying what is missing (never a value). */
  static parse(metadata: string | null | undefined): DispatchGrant {
    let data: unknown;
    try {
      data = JSON.parse(metadata ?? '');
    } catch {
      throw new TypeError('the job carries no dispatch metadata: the agent is dispatched by the agent worker (WORKER_AGENT_NAME) for one user');
    }
    if (typeof data !== 'object' || data === null || Array.isArray(data)) throw new TypeError("the job's metadata is not a JSON object");
    const d = data as Record<string, unknown>;
    const missing = [
      ['apiKey', isApiKey(d['apiKey'])],
      ['identity', typeof d['identity'] === 'string' && d['identity'] !== ''],
      ['agentToken', typeof d['agentToken'] === 'string' && d['agentToken'].split('.').length === 3],
      ['sessionId', typeof d['sessionId'] === 'string' && d['sessionId'].startsWith('s_')],
      ['expiresAt', Number.isInteger(d['expiresAt'])],
    ].filter(([, ok]) => !ok).map(([name]) => name);
    if (missing.length > 0) throw new TypeError(`the job's metadata lacks a valid ${missing.join(', ')}`);
    return new DispatchGrant(d['apiKey'] as string, d['identity'] as string, d['agentToken'] as string, d['sessionId'] as string, d['expiresAt'] as number);
  }
}
