/**
 * The tab's routing key (`va_` + 64 lowercase hex digits) and how an agent finds it: in the
 * metadata of the user's participant, as JSON `{"apiKey": "va_…"}`. Read from a remote
 * participant only (never the agent's own metadata), never from another agent, and never
 * logged whole: log {@link fingerprint} instead.
 */
import { createHash } from 'node:crypto';

const KEY_RE = /^va_[0-9a-f]{64}$/;

/** LiveKit's participant kind of agents (`ParticipantKind.AGENT`). */
export const PARTICIPANT_KIND_AGENT = 4;

/** Whether `value` is a well-formed routing key. */
export function isApiKey(value: unknown): value is string {
  return typeof value === 'string' && KEY_RE.test(value);
}

/** The first 8 hex digits of SHA-256 of `secret`: what a log may show of a key. */
export function fingerprint(secret: string): string {
  return createHash('sha256').update(secret, 'utf8').digest('hex').slice(0, 8);
}

/** The routing key in a participant's metadata, or `undefined` when there is no valid one. */
export function keyFromMetadata(metadata: string | null | undefined): string | undefined {
  if (!metadata) return undefined;
  let data: unknown;
  try {
    data = JSON.parse(metadata);
  } catch {
    return undefined;
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return undefined;
  const key = (data as Record<string, unknown>)['apiKey'];
  return isApiKey(key) ? key : undefined;
}

/** What {@link keyFromParticipant} reads of a participant (rtc-node's `Participant` has it). */
export interface ParticipantLike {
  readonly identity: string;
  readonly metadata: string | null | undefined;
  readonly kind?: number | undefined;
}

/** What a room looks like to {@link waitForKeyedParticipant} (rtc-node's `Room` has it). */
export interface RoomLike {
  readonly localParticipant?: { readonly identity: string } | undefined;
  readonly remoteParticipants: ReadonlyMap<string, ParticipantLike>;
  on(event: string, listener: (...args: any[]) => void): unknown;
  off(event: string, listener: (...args: any[]) => void): unknown;
}

/**
 * Whether `participant` is a remote one: rtc-node's `RemoteParticipant`, or (for plain objects)
 * anything but the room's local participant.
 */
function isRemote(participant: ParticipantLike, localIdentity: string | undefined): boolean {
  const ctor = (participant as object).constructor?.name;
  if (ctor === 'LocalParticipant') return false;
  if (localIdentity !== undefined && participant.identity === localIdentity) return false;
  return true;
}

/**
 * The key of a user participant: `undefined` for the local participant (the agent itself),
 * for agents, and for participants without a valid key. `localIdentity` is the agent's own
 * identity, when known (`room.localParticipant.identity`).
 */
export function keyFromParticipant(
  participant: ParticipantLike | null | undefined,
  options: { localIdentity?: string | undefined } = {},
): string | undefined {
  if (!participant) return undefined;
  if (!isRemote(participant, options.localIdentity)) return undefined;
  if (participant.kind === PARTICIPANT_KIND_AGENT) return undefined;
  return keyFromMetadata(participant.metadata);
}

/** The first remote, non-agent participant that carries a valid key, with that key. */
export function firstKeyed<P extends ParticipantLike>(
  participants: Iterable<P>,
  options: { localIdentity?: string | undefined } = {},
): { participant: P; key: string } | undefined {
  for (const participant of participants) {
    const key = keyFromParticipant(participant, options);
    if (key !== undefined) return { participant, key };
  }
  return undefined;
}

/**
 * Waits until a user participant with a valid key is in `room`: present already, joining, or
 * given a key later by a metadata update. Other agents and participants without a key are
 * ignored; with `identity` and `key`, so is every participant but that user with that key (an
 * agent dispatched for one user serves no other). Rejects when the room disconnects, when
 * `signal` aborts, or after `timeoutMs`.
 */
export function waitForKeyedParticipant<P extends ParticipantLike>(
  room: RoomLike & { readonly remoteParticipants: ReadonlyMap<string, P> },
  options: { signal?: AbortSignal; timeoutMs?: number; identity?: string; key?: string } = {},
): Promise<{ participant: P; key: string }> {
  const localIdentity = room.localParticipant?.identity;
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const cleanup = () => {
      room.off('participantConnected', consider);
      room.off('participantMetadataChanged', onMetadata);
      room.off('disconnected', onDisconnected);
      options.signal?.removeEventListener('abort', onAbort);
      if (timer) clearTimeout(timer);
    };
    const consider = (participant: P) => {
      const hit = firstKeyed([participant], { localIdentity });
      const wanted = hit
        && (options.identity === undefined || hit.participant.identity === options.identity)
        && (options.key === undefined || hit.key === options.key);
      if (hit && wanted) {
        cleanup();
        resolve(hit);
      }
    };
    // rtc-node: (metadata, participant); other emitters may pass (participant, …).
    const onMetadata = (...args: unknown[]) => {
      for (const arg of args) {
        if (typeof arg === 'object' && arg !== null && 'identity' in arg) consider(arg as P);
      }
    };
    const onDisconnected = () => {
      cleanup();
      reject(new Error('the room disconnected before a user with a key joined'));
    };
    const onAbort = () => {
      cleanup();
      reject(options.signal?.reason ?? new Error('aborted'));
    };
    if (options.signal?.aborted) return onAbort();
    room.on('participantConnected', consider);
    room.on('participantMetadataChanged', onMetadata);
    room.on('disconnected', onDisconnected);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    if (options.timeoutMs !== undefined) {
      timer = setTimeout(() => {
        cleanup();
        reject(new Error(`no user with a key joined within ${options.timeoutMs} ms`));
      }, options.timeoutMs);
    }
    const present = firstKeyed<P>(room.remoteParticipants.values() as Iterable<P>, { localIdentity });
    if (present) {
      cleanup();
      resolve(present);
    }
  });
}
