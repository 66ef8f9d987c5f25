/**
 * The closed list of error codes of the agent worker: the relay's table first, then the
 * worker's own. A failure is a {@link WorkerError} whose `code` is one of them (or, from a
 * newer worker, a code this package does not know yet, kept as is).
 */

/** The relay's codes. */
export const RELAY_CODES = [
  'invalid_request',
  'unauthorized',
  'forbidden',
  'unknown_key',
  'tab_offline',
  'payload_too_large',
  'rate_limited',
  'tool_failed',
  'no_handler',
  'shutting_down',
  'unavailable',
  'timeout',
  'internal',
] as const;

/** The worker's own codes. */
export const WORKER_CODES = [
  'invalid_arguments',
  'unknown_tool',
  'tool_not_allowed',
  'relay_unreachable',
  'bad_response',
  'cancelled',
  'not_configured',
] as const;

export type RelayCode = (typeof RELAY_CODES)[number];
export type WorkerCode = (typeof WORKER_CODES)[number];
/** Every code this package knows. */
export type ErrorCode = RelayCode | WorkerCode;

const KNOWN: ReadonlySet<string> = new Set<string>([...RELAY_CODES, ...WORKER_CODES]);

/** Whether `code` is one of the known codes. */
export function isErrorCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && KNOWN.has(code);
}

/**
 * A failure reported by the worker, or met on the way to it.
 *
 * `message` is a sentence a voice model can say (the worker writes its tool failures that
 * way; this package writes its own the same way). `status` is the HTTP status when the worker
 * answered, absent when it was never reached.
 */
export class WorkerError extends Error {
  override readonly name = 'WorkerError';
  readonly code: ErrorCode | (string & {});
  readonly status: number | undefined;

  constructor(code: ErrorCode | (string & {}), message: string, options: { status?: number; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.status = options.status;
  }

  /** Whether the code is one of the known list (a newer worker may send others). */
  get known(): boolean {
    return isErrorCode(this.code);
  }

  /** `{code, message}`, what the worker itself sends. */
  toJSON(): { code: string; message: string } {
    return { code: this.code, message: this.message };
  }
}

/** Whether `error` is a {@link WorkerError}, optionally with one of `codes`. */
export function isWorkerError(error: unknown, ...codes: ErrorCode[]): error is WorkerError {
  return error instanceof WorkerError && (codes.length === 0 || codes.includes(error.code as ErrorCode));
}

const STATUS_FALLBACK: Record<number, ErrorCode> = {
  400: 'invalid_request',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'unknown_key',
  413: 'payload_too_large',
  429: 'rate_limited',
  503: 'unavailable',
  504: 'timeout',
};

/** The error of a non-200 answer: `{"ok":false,"error":{"code","message"}}`, or by status. */
export function errorFromAnswer(status: number, body: unknown): WorkerError {
  const error = isObject(body) ? body['error'] : undefined;
  if (isObject(error) && typeof error['code'] === 'string') {
    return new WorkerError(error['code'], String(error['message'] ?? ''), { status });
  }
  const code = STATUS_FALLBACK[status] ?? 'unavailable';
  return new WorkerError(code, `The agent worker answered HTTP ${status}.`, { status });
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
