/**
 * The reference agent's configuration from the environment, checked as a whole before it
 * starts (the same variables as the Python reference agent). {@link loadConfig} returns the
 * settings and one note per missing optional piece, or throws {@link ConfigError} listing
 * every problem. Nothing falls back to a fake or scripted model.
 */

import { tracingFromEnv, type Tracing } from '@voice-relay/agent';

export const DEFAULT_WORKER_URL = 'http://127.0.0.1:3002';
/** The agent's name unless AGENT_NAME says otherwise (the worker's WORKER_AGENT_NAME must match). */
export const DEFAULT_AGENT_NAME = 'voice-relay-agent';
/** Models used against api.openai.com when no model is named; a custom base URL needs one. */
export const OPENAI_LLM_MODEL = 'gpt-4.1-mini';
export const OPENAI_STT_MODEL = 'gpt-4o-mini-transcribe';
export const OPENAI_TTS_MODEL = 'gpt-4o-mini-tts';
export const OPENAI_TTS_VOICE = 'ash';
/** Sent as the API key to an OpenAI-compatible server configured without one. */
export const NO_API_KEY = 'not-set';
/** Exit status for a configuration that stops the agent. */
export const EXIT_CONFIG = 64;

export class ConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(problems.join('\n'));
    this.name = 'ConfigError';
    this.problems = problems;
  }
}

/** An OpenAI-compatible model: where, which model, with which key. */
export interface Endpoint {
  readonly model: string;
  readonly baseURL?: string;
  readonly apiKey?: string;
}

export interface Settings {
  readonly workerUrl: string;
  /** The name the agent registers under: LiveKit dispatches it only when the agent worker asks
   * for it by that name (WORKER_AGENT_NAME), for one user at a time. */
  readonly agentName: string;
  readonly llm: Endpoint;
  readonly stt: Endpoint | null;
  readonly tts: Endpoint | null;
  readonly ttsVoice: string;
  readonly sttLanguage: string;
  readonly greet: boolean;
  readonly maxToolSteps: number;
  /** Span export (the standard `OTEL_*` variables), or `null` when they do not ask for it. */
  readonly tracing: Tracing | null;
}

/** `model at host`, never the key. */
export function describeEndpoint(e: Endpoint): string {
  return `${e.model} at ${e.baseURL ?? 'api.openai.com'}`;
}

type Env = Readonly<Record<string, string | undefined>>;

function get(env: Env, name: string): string | undefined {
  const v = env[name]?.trim();
  return v ? v : undefined;
}

function endpoint(env: Env, prefix: string, defaultModel: string, problems: string[]): Endpoint | null {
  const baseURL = get(env, `${prefix}_BASE_URL`);
  const model = get(env, `${prefix}_MODEL`);
  const apiKey = get(env, `${prefix}_API_KEY`) ?? get(env, 'OPENAI_API_KEY');
  if (baseURL === undefined && model === undefined && apiKey === undefined) return null;
  if (baseURL !== undefined) {
    if (!/^https?:\/\//.test(baseURL)) {
      problems.push(`${prefix}_BASE_URL=${JSON.stringify(baseURL)} is not an http(s) URL`);
      return null;
    }
    if (model === undefined) {
      problems.push(`${prefix}_MODEL is required with ${prefix}_BASE_URL=${baseURL}`);
      return null;
    }
    return { model, baseURL, apiKey: apiKey ?? NO_API_KEY };
  }
  if (apiKey === undefined) {
    problems.push(
      `${prefix}_MODEL=${model} names no endpoint: set ${prefix}_BASE_URL for an OpenAI-compatible server, or OPENAI_API_KEY for OpenAI`,
    );
    return null;
  }
  return { model: model ?? defaultModel, apiKey };
}

function flag(env: Env, name: string, fallback: boolean, problems: string[]): boolean {
  const v = get(env, name)?.toLowerCase();
  if (v === undefined) return fallback;
  if (['1', 'true', 'yes', 'on'].includes(v)) return true;
  if (['0', 'false', 'no', 'off'].includes(v)) return false;
  problems.push(`${name}=${JSON.stringify(v)} is not a boolean (use 1 or 0)`);
  return fallback;
}

function int(env: Env, name: string, fallback: number, lo: number, hi: number, problems: string[]): number {
  const v = get(env, name);
  if (v === undefined) return fallback;
  const n = /^-?\d+$/.test(v) ? Number(v) : NaN;
  if (!(n >= lo && n <= hi)) {
    problems.push(`${name}=${JSON.stringify(v)} must be an integer from ${lo} to ${hi}`);
    return fallback;
  }
  return n;
}

/** What is missing to reach the LiveKit server (LiveKit's own names; a CLI flag counts). */
export function livekitProblems(env: Env, argv: readonly string[] = []): string[] {
  const problems: string[] = [];
  for (const [name, opt] of [['LIVEKIT_URL', '--url'], ['LIVEKIT_API_KEY', '--api-key'], ['LIVEKIT_API_SECRET', '--api-secret']] as const) {
    if (get(env, name) === undefined && !argv.some((a) => a === opt || a.startsWith(`${opt}=`))) {
      problems.push(`${name} is not set: the agent cannot join LiveKit rooms`);
    }
  }
  return problems;
}

/** Settings from `env` and notes on what is missing; throws {@link ConfigError} on problems. */
export function loadConfig(env: Env = process.env): { settings: Settings; notes: string[] } {
  const problems: string[] = [];
  const notes: string[] = [];

  const workerUrl = get(env, 'WORKER_URL') ?? DEFAULT_WORKER_URL;
  if (!/^https?:\/\//.test(workerUrl)) problems.push(`WORKER_URL=${JSON.stringify(workerUrl)} is not an http(s) URL`);

  for (const held of ['RELAY_AGENT_SECRET', 'RELAY_WORKER_SECRET', 'RELAY_OPERATOR_SECRET']) {
    if (get(env, held) !== undefined) {
      problems.push(`${held} is set: the agent holds no secret of the relay's; each job gets a session token for its one user in its dispatch (unset it here)`);
    }
  }
  const agentName = get(env, 'AGENT_NAME') ?? DEFAULT_AGENT_NAME;
  if (agentName.length > 128 || !/^[A-Za-z0-9._-]+$/.test(agentName)) {
    problems.push(`AGENT_NAME=${JSON.stringify(agentName)} must be letters, digits, '-', '_' or '.'`);
  }

  const llm = endpoint(env, 'AGENT_LLM', OPENAI_LLM_MODEL, problems);
  if (llm === null && !problems.some((p) => p.startsWith('AGENT_LLM'))) {
    problems.push(
      'no LLM: set AGENT_LLM_BASE_URL and AGENT_LLM_MODEL (an OpenAI-compatible server, AGENT_LLM_API_KEY if it needs one) or OPENAI_API_KEY; without a model the agent cannot decide anything, so it does not start',
    );
  }

  let stt: Endpoint | null = null;
  const sttKind = (get(env, 'AGENT_STT') ?? 'openai').toLowerCase();
  if (sttKind === 'openai') {
    stt = endpoint(env, 'AGENT_STT', OPENAI_STT_MODEL, problems);
    if (stt === null) notes.push('no STT (set AGENT_STT_BASE_URL and AGENT_STT_MODEL, or OPENAI_API_KEY): the agent cannot hear the user; it answers text typed in the room');
  } else if (sttKind === 'none') {
    notes.push('AGENT_STT=none: the agent cannot hear the user; it answers typed text only');
  } else {
    problems.push(`AGENT_STT=${JSON.stringify(sttKind)} is not one of openai, none`);
  }

  let tts: Endpoint | null = null;
  const ttsKind = (get(env, 'AGENT_TTS') ?? 'openai').toLowerCase();
  if (ttsKind === 'openai') {
    tts = endpoint(env, 'AGENT_TTS', OPENAI_TTS_MODEL, problems);
    if (tts === null) notes.push('no TTS (set AGENT_TTS_BASE_URL and AGENT_TTS_MODEL, or OPENAI_API_KEY): the agent cannot speak; its replies reach the room as text only');
  } else if (ttsKind === 'none') {
    notes.push('AGENT_TTS=none: the agent cannot speak; its replies reach the room as text');
  } else if (ttsKind === 'espeak') {
    problems.push('AGENT_TTS=espeak is only in the Python reference agent; use openai (an OpenAI-compatible server) or none here');
  } else {
    problems.push(`AGENT_TTS=${JSON.stringify(ttsKind)} is not one of openai, none`);
  }

  const settings: Settings = {
    workerUrl,
    agentName,
    llm: llm ?? { model: '' },
    stt,
    tts,
    ttsVoice: get(env, 'AGENT_TTS_VOICE') ?? OPENAI_TTS_VOICE,
    sttLanguage: get(env, 'AGENT_STT_LANGUAGE') ?? 'en',
    greet: flag(env, 'AGENT_GREETING', true, problems),
    maxToolSteps: int(env, 'AGENT_MAX_TOOL_STEPS', 6, 1, 50, problems),
    tracing: tracingFromEnv(env, problems),
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return { settings, notes };
}
