/**
 * A typed client of the agent worker's agent API, for one tab's key.
 *
 * `GET /agent/tools` gives the session's mode, instructions and tools (and, asked with the
 * revision the caller has, waits for the next change); `POST /agent/tools/{name}` runs one
 * tool (through the relay to the tab, or a mode move). Every request carries the agent's
 * session token (a token for that one key, which reaches no other tab) as a Bearer credential
 * and the key in `X-Voice-Agent-Key`, never in the URL, and every request has a time bound.
 *
 * Two kinds of failure, kept apart: the API call itself fails (a refused or expired token, a
 * token for another key, a malformed key,
 * worker unreachable, no answer in time): the method throws a {@link WorkerError}; the tool
 * ran and failed (tab offline, the tab answered an error, invalid arguments): `callTool`
 * returns a {@link CallOutcome} whose `error` holds the same typed error as a value.
 *
 * Inside an OpenTelemetry span (LiveKit Agents' `function_tool` span while a tool runs, when the
 * agent exports its spans), each request carries that span's context as W3C `traceparent` and
 * `tracestate`, so the worker's spans are its children.
 */
import { randomBytes } from 'node:crypto';
import { context, defaultTextMapSetter } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { WorkerError, errorFromAnswer, isObject } from './errors.js';
import { fingerprint, isApiKey } from './keys.js';

export const KEY_HEADER = 'X-Voice-Agent-Key';
/** Writes the current span's W3C context into a request's headers. */
const TRACE_CONTEXT = new W3CTraceContextPropagator();
export const IDEMPOTENCY_HEADER = 'Idempotency-Key';
/** Attempts of one call when the worker cannot be reached or answers 503 (one Idempotency-Key). */
export const CALL_ATTEMPTS = 3;
/** Pauses before the second and third attempts, ms. */
export const RETRY_PAUSES_MS = [200, 600] as const;
/** The relay's default call timeout, for a tool whose `timeoutMs` is null. */
export const DEFAULT_CALL_TIMEOUT_MS = 15_000;
/** What a request may take beyond the call's own timeout (the worker's retries, transit). */
export const DEFAULT_MARGIN_MS = 10_000;
/** The longest wait the worker accepts for a changed offer. */
export const MAX_WAIT_MS = 30_000;
/** The bound of `GET /agent/tools` without a wait. */
export const DEFAULT_LIST_TIMEOUT_MS = 10_000;

/** JSON Schema, as the worker sends it (an object). */
export type JsonSchema = Record<string, unknown>;

/** One tool as the worker offers it; the schemas are the catalog's, verbatim. */
export interface ToolSpec {
  readonly name: string;
  readonly description: string;
  readonly parameters: JsonSchema;
  readonly outputSchema: JsonSchema | null;
  readonly awaitResult: boolean;
  readonly timeoutMs: number | null;
}

/** The session's current mode: its instructions and tools, for what the tab handles now. */
export interface ToolOffer {
  readonly mode: string;
  readonly instructions: string;
  readonly tools: readonly ToolSpec[];
  /** Changes whenever any of the above does; ask again with it to wait for a change. */
  readonly revision: string;
}

/** What one call came to: a result or an error value, and the mode after it. */
export interface CallOutcome {
  readonly name: string;
  readonly ok: boolean;
  readonly result: unknown;
  readonly error: WorkerError | null;
  readonly mode: string;
  readonly modeChanged: boolean;
}

/** Whether `spec` is a mode move (`enter_<mode>`, `leave_<mode>`). */
export function isModeMove(spec: Pick<ToolSpec, 'name'>): boolean {
  return spec.name.startsWith('enter_') || spec.name.startsWith('leave_');
}

/** An empty offer (before the first fetch). */
export const EMPTY_OFFER: ToolOffer = Object.freeze({ mode: '', instructions: '', tools: [], revision: '' });

export function parseToolSpec(data: unknown): ToolSpec {
  if (!isObject(data)) throw new Error('a tool is not a JSON object');
  const name = data['name'];
  if (typeof name !== 'string' || name === '') throw new Error('a tool without a name');
  const parameters = data['parameters'];
  if (!isObject(parameters)) throw new Error(`tool ${name}: parameters is not a JSON Schema object`);
  const output = data['outputSchema'];
  const timeout = data['timeoutMs'];
  return {
    name,
    description: typeof data['description'] === 'string' ? data['description'] : '',
    parameters,
    outputSchema: isObject(output) ? output : null,
    awaitResult: data['awaitResult'] === true,
    timeoutMs: typeof timeout === 'number' && Number.isFinite(timeout) ? timeout : null,
  };
}

export function parseOffer(data: unknown): ToolOffer {
  if (!isObject(data)) throw new Error('the offer is not a JSON object');
  const tools = data['tools'];
  if (!Array.isArray(tools)) throw new Error('the offer has no tools list');
  return {
    mode: typeof data['mode'] === 'string' ? data['mode'] : '',
    instructions: typeof data['instructions'] === 'string' ? data['instructions'] : '',
    tools: tools.filter(isObject).map(parseToolSpec),
    revision: typeof data['revision'] === 'string' ? data['revision'] : '',
  };
}

/** The outcome in a 200 answer of `POST /agent/tools/{name}`. */
export function parseCallAnswer(name: string, body: unknown): CallOutcome {
  if (!isObject(body) || typeof body['ok'] !== 'boolean') {
    throw new WorkerError('bad_response', 'The agent worker sent an answer that could not be read.', { status: 200 });
  }
  const mode = typeof body['mode'] === 'string' ? body['mode'] : '';
  const modeChanged = body['modeChanged'] === true;
  if (body['ok']) {
    return { name, ok: true, result: body['result'] ?? null, error: null, mode, modeChanged };
  }
  const e = body['error'];
  const error = isObject(e) && typeof e['code'] === 'string'
    ? new WorkerError(e['code'], String(e['message'] ?? ''), { status: 200 })
    : new WorkerError('tool_failed', `The ${name} tool failed.`, { status: 200 });
  return { name, ok: false, result: null, error, mode, modeChanged };
}

export interface WorkerClientOptions {
  /** The worker's base URL, e.g. `http://127.0.0.1:3002`. */
  url: string;
  /** The agent's session token for `key` (from its dispatch's metadata, or the app's backend). */
  token: string;
  /** The tab's routing key, `va_…`. */
  key: string;
  /** Bound of `GET /agent/tools` (added to the wait of a long-poll). Default 10 s. */
  listTimeoutMs?: number;
  /** Added to a tool's own timeout to bound its request. Default 10 s. */
  marginMs?: number;
  /** A tool's timeout when it names none. Default 15 s (the relay's). */
  defaultCallTimeoutMs?: number;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
}

export interface ListOptions {
  /** The revision the caller has: the answer waits until the offer differs. */
  after?: string;
  /** How long the worker may wait for a change, 0 to 30000 ms. */
  waitMs?: number;
  signal?: AbortSignal;
}

export interface CallOptions {
  /** The tool as offered: its `timeoutMs` bounds the request. */
  spec?: Pick<ToolSpec, 'timeoutMs'>;
  /** Overrides the bound of the whole request, ms. */
  timeoutMs?: number;
  /** One key for every attempt (default: a fresh one). */
  idempotencyKey?: string;
  /** Aborting cancels the call: the request is dropped and `cancelled` is thrown. */
  signal?: AbortSignal;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/** The agent API for one tab's key. Holds no connection of its own. */
export class WorkerClient {
  readonly url: string;
  /** What a log may show of the key. */
  readonly keyFingerprint: string;
  readonly listTimeoutMs: number;
  readonly marginMs: number;
  readonly defaultCallTimeoutMs: number;
  readonly #headers: Record<string, string>;
  readonly #fetch: typeof fetch;

  constructor(options: WorkerClientOptions) {
    if (!isApiKey(options.key)) throw new TypeError('key is not a routing key (va_ and 64 lowercase hex digits)');
    if (typeof options.token !== 'string' || options.token.split('.').length !== 3) {
      throw new TypeError('token is not a session token (a JWT the relay minted for the key)');
    }
    if (!/^https?:\/\//.test(options.url)) throw new TypeError('url is not an http(s) URL');
    this.url = options.url.replace(/\/+$/, '');
    this.keyFingerprint = fingerprint(options.key);
    this.listTimeoutMs = options.listTimeoutMs ?? DEFAULT_LIST_TIMEOUT_MS;
    this.marginMs = options.marginMs ?? DEFAULT_MARGIN_MS;
    this.defaultCallTimeoutMs = options.defaultCallTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.#headers = {
      authorization: `Bearer ${options.token}`,
      [KEY_HEADER]: options.key,
      accept: 'application/json',
    };
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /** Never shows the key or the token. */
  toString(): string {
    return `WorkerClient(${this.url}, key ${this.keyFingerprint})`;
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return this.toString();
  }

  /** The bound of a call to a tool with `spec`: its own timeout plus the margin. */
  callTimeoutMs(spec?: Pick<ToolSpec, 'timeoutMs'> | null): number {
    return (spec?.timeoutMs ?? this.defaultCallTimeoutMs) + this.marginMs;
  }

  /**
   * The session's current mode, instructions and tools. With `after` (the revision the caller
   * has) and `waitMs`, the worker answers when the offer changes, or with the same offer when
   * the wait ends.
   */
  async listTools(options: ListOptions = {}): Promise<ToolOffer> {
    let path = '/agent/tools';
    let bound = this.listTimeoutMs;
    const wait = Math.max(0, Math.min(Math.floor(options.waitMs ?? 0), MAX_WAIT_MS));
    if (options.after !== undefined && wait > 0) {
      path += `?after=${encodeURIComponent(options.after)}&waitMs=${wait}`;
      bound += wait;
    }
    const { status, body } = await this.#request('GET', path, undefined, bound, {}, options.signal);
    if (status !== 200) throw errorFromAnswer(status, body);
    try {
      return parseOffer(body);
    } catch (e) {
      throw new WorkerError('bad_response', `The agent worker sent an offer that could not be read (${(e as Error).message}).`, { status, cause: e });
    }
  }

  /** Waits (at most `waitMs`) for an offer other than revision `after`. */
  waitForChange(after: string, waitMs: number, signal?: AbortSignal): Promise<ToolOffer> {
    return this.listTools(signal ? { after, waitMs, signal } : { after, waitMs });
  }

  /**
   * Runs tool `name`; the tool's failure comes back in the outcome, not as an exception. When
   * the worker cannot be reached or answers 503, the call is tried again (three attempts in
   * all) with the same Idempotency-Key, so the tab gets it once.
   */
  async callTool(name: string, args: Record<string, unknown> = {}, options: CallOptions = {}): Promise<CallOutcome> {
    const bound = options.timeoutMs ?? this.callTimeoutMs(options.spec);
    const path = `/agent/tools/${encodeURIComponent(name)}`;
    const idempotencyKey = options.idempotencyKey ?? `ts-${randomBytes(16).toString('hex')}`;
    for (let attempt = 0; ; attempt++) {
      const last = attempt === CALL_ATTEMPTS - 1;
      let answer: { status: number; body: unknown };
      try {
        answer = await this.#request('POST', path, args, bound, { [IDEMPOTENCY_HEADER]: idempotencyKey }, options.signal);
      } catch (e) {
        if (!last && e instanceof WorkerError && e.code === 'unavailable' && e.status === undefined) {
          await this.#pause(attempt, options.signal);
          continue;
        }
        throw e;
      }
      if (answer.status === 503 && !last) {
        await this.#pause(attempt, options.signal);
        continue;
      }
      if (answer.status !== 200) throw errorFromAnswer(answer.status, answer.body);
      return parseCallAnswer(name, answer.body);
    }
  }

  async #pause(attempt: number, signal: AbortSignal | undefined): Promise<void> {
    try {
      await sleep(RETRY_PAUSES_MS[attempt] ?? 600, signal);
    } catch (e) {
      throw cancelled(e);
    }
  }

  async #request(
    method: 'GET' | 'POST',
    path: string,
    body: Record<string, unknown> | undefined,
    boundMs: number,
    extra: Record<string, string>,
    signal: AbortSignal | undefined,
  ): Promise<{ status: number; body: unknown }> {
    if (signal?.aborted) throw cancelled(signal.reason);
    const timeout = AbortSignal.timeout(boundMs);
    const combined = signal ? AbortSignal.any([signal, timeout]) : timeout;
    const headers: Record<string, string> = { ...this.#headers, ...extra };
    if (body !== undefined) headers['content-type'] = 'application/json';
    // The current span's context, if there is one: nothing is added outside a span.
    TRACE_CONTEXT.inject(context.active(), headers, defaultTextMapSetter);
    try {
      const response = await this.#fetch(this.url + path, {
        method,
        headers,
        body: body === undefined ? null : JSON.stringify(body),
        signal: combined,
      });
      const text = await response.text();
      let parsed: unknown = null;
      try {
        parsed = text ? JSON.parse(text) : null;
      } catch {
        parsed = null;
      }
      return { status: response.status, body: parsed };
    } catch (e) {
      if (signal?.aborted) throw cancelled(signal.reason);
      if (timeout.aborted) {
        throw new WorkerError('timeout', 'The agent worker did not answer in time.', { cause: e });
      }
      throw new WorkerError('unavailable', 'The agent worker cannot be reached right now.', { cause: e });
    }
  }
}

function cancelled(reason: unknown): WorkerError {
  return new WorkerError('cancelled', 'The call was cancelled.', { cause: reason });
}
