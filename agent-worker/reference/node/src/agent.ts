#!/usr/bin/env node
/**
 * The reference agent as a program: `voice-relay-agent start|dev|connect --room R`.
 *
 * Models come from the environment (the same variables as the Python reference agent): an
 * OpenAI-compatible LLM (required), STT and TTS (optional). It registers under its agent name
 * (`AGENT_NAME`) and is dispatched by the agent worker for one user at a time, with a session
 * token for that user's key alone in the job's metadata; it holds no secret of the relay's.
 * With no LLM, a relay secret in its environment, or no LiveKit server, it refuses to start and
 * says what is missing (exit 64). The standard `OTEL_*` variables turn on the export of its
 * spans over OTLP/HTTP, the worker's spans of each tool call in the same trace.
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ServerOptions, cli, defineAgent, type JobContext } from '@livekit/agents';
import * as openai from '@livekit/agents-plugin-openai';
import { ConfigError, DEFAULT_AGENT_NAME, EXIT_CONFIG, describeEndpoint, livekitProblems, loadConfig, type Settings } from './config.js';
import { describeTracing, exportSpans, runSession, type Pipeline } from '@voice-relay/agent';

const RUN_COMMANDS = ['start', 'dev', 'connect'];

/** The OpenAI-compatible models that `settings` configure. */
export function buildPipeline(settings: Settings): Pipeline {
  const model = new openai.LLM({ model: settings.llm.model, baseURL: settings.llm.baseURL, apiKey: settings.llm.apiKey });
  const pipeline: Pipeline = { llm: model };
  if (settings.stt) {
    pipeline.stt = new openai.STT({
      model: settings.stt.model,
      language: settings.sttLanguage,
      baseURL: settings.stt.baseURL,
      apiKey: settings.stt.apiKey,
    });
  }
  if (settings.tts) {
    pipeline.tts = new openai.TTS({
      model: settings.tts.model,
      voice: settings.ttsVoice as openai.TTSVoices,
      baseURL: settings.tts.baseURL,
      apiKey: settings.tts.apiKey,
    });
  }
  return pipeline;
}

export default defineAgent({
  entry: async (ctx: JobContext) => {
    const { settings } = loadConfig();
    // In the job's own process, where its spans are made; sent before the job's process ends.
    const spans = exportSpans(settings.tracing);
    if (spans) ctx.addShutdownCallback(() => spans.flush());
    await runSession(ctx, settings, buildPipeline(settings));
  },
});

/**
 * The port of LiveKit's health server: `AGENT_HTTP_PORT` (as for the Python reference agent),
 * else LiveKit's default (8081 with `start`). Throws {@link ConfigError} when it is not a port.
 */
export function httpPort(env: Readonly<Record<string, string | undefined>> = process.env): number | undefined {
  const raw = env['AGENT_HTTP_PORT']?.trim();
  if (!raw) return undefined;
  const port = /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!(port >= 1 && port <= 65535)) throw new ConfigError([`AGENT_HTTP_PORT=${JSON.stringify(raw)} must be a port from 1 to 65535`]);
  return port;
}

/** Checks the configuration for `argv`'s command; prints every problem and exits when fatal. */
export function check(argv: readonly string[], env = process.env): void {
  const command = argv.find((a) => !a.startsWith('-'));
  if (command === undefined || !RUN_COMMANDS.includes(command)) return;
  try {
    const lk = livekitProblems(env, argv);
    let loaded: ReturnType<typeof loadConfig>;
    try {
      loaded = loadConfig(env);
    } catch (e) {
      throw e instanceof ConfigError ? new ConfigError([...e.problems, ...lk]) : e;
    }
    if (lk.length > 0) throw new ConfigError(lk);
    httpPort(env);
    const { settings, notes } = loaded;
    console.error(`voice-relay-agent: worker at ${settings.workerUrl}, dispatched as ${settings.agentName}`);
    console.error(`voice-relay-agent: LLM ${describeEndpoint(settings.llm)}`);
    if (settings.stt) console.error(`voice-relay-agent: STT ${describeEndpoint(settings.stt)}`);
    if (settings.tts) console.error(`voice-relay-agent: TTS ${describeEndpoint(settings.tts)}`);
    if (settings.tracing) console.error(`voice-relay-agent: ${describeTracing(settings.tracing)}`);
    for (const note of notes) console.error(`voice-relay-agent: ${note}`);
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    for (const problem of e.problems) console.error(`voice-relay-agent: ${problem}`);
    process.exit(EXIT_CONFIG);
  }
}

function isMain(): boolean {
  try {
    return process.argv[1] !== undefined && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isMain()) {
  check(process.argv.slice(2));
  // Registered by name: dispatched only when the agent worker asks for it, for one user.
  const port = httpPort();
  const agentName = process.env['AGENT_NAME']?.trim() || DEFAULT_AGENT_NAME;
  cli.runApp(new ServerOptions({ agent: fileURLToPath(import.meta.url), agentName, ...(port ? { port } : {}) }));
}
