/**
 * One voice session of the reference agent: join the job's room, wait for the user's tab (a
 * participant whose metadata holds a valid key), fetch that session's offer from the worker,
 * and run an `AgentSession` linked to that participant whose tools are the mode's UI tools.
 * The models are given by the caller (see `agent.ts` for the ones read from the environment).
 */
import { voice, type JobContext, type llm, type stt, type tts } from '@livekit/agents';
import { WorkerClient, type CallOutcome } from './client.js';
import { WorkerError } from './errors.js';
import { fingerprint, waitForKeyedParticipant } from './keys.js';
import { UiTools } from './tools.js';

/** What the first reply is asked to do once the user is in the room. */
export const GREETING_INSTRUCTIONS = 'Greet the user in one short sentence and offer your help.';
/** Attempts (one second apart) to fetch the session's tools before going on without them. */
export const TOOL_FETCH_ATTEMPTS = 3;

export interface Pipeline {
  llm: llm.LLM;
  stt?: stt.STT | undefined;
  tts?: tts.TTS | undefined;
}

export interface SessionSettings {
  workerUrl: string;
  agentSecret: string;
  greet?: boolean;
  maxToolSteps?: number;
}

export interface SessionHooks {
  /** Given the key's fingerprint (never the key). */
  onKey?: (fingerprint: string) => void;
  onTool?: (outcome: CallOutcome) => void;
  log?: (line: string) => void;
}

/** Fetches the offer, a few times if the worker is not there yet; an empty offer at worst. */
export async function fetchOffer(ui: UiTools, log: (line: string) => void): Promise<void> {
  for (let attempt = 1; attempt <= TOOL_FETCH_ATTEMPTS; attempt++) {
    try {
      await ui.refresh();
      return;
    } catch (e) {
      const why = e instanceof WorkerError ? `${e.code}: ${e.message}` : String(e);
      log(`cannot fetch the tools from the agent worker (attempt ${attempt} of ${TOOL_FETCH_ATTEMPTS}): ${why}`);
      if (attempt < TOOL_FETCH_ATTEMPTS) await new Promise((r) => setTimeout(r, 1000));
    }
  }
  log('going on without UI tools: the agent can talk but not act in the tab');
}

export async function runSession(
  ctx: JobContext,
  settings: SessionSettings,
  pipeline: Pipeline,
  hooks: SessionHooks = {},
): Promise<voice.AgentSession> {
  const log = hooks.log ?? ((line: string) => console.error(`voice-relay-agent: ${line}`));
  await ctx.connect();
  const stop = new AbortController();
  ctx.addShutdownCallback(async () => stop.abort());
  const { participant, key } = await waitForKeyedParticipant(ctx.room, { signal: stop.signal });
  const fp = fingerprint(key);
  log(`user ${participant.identity} joined with key ${fp}`);
  hooks.onKey?.(fp);

  const client = new WorkerClient({ url: settings.workerUrl, secret: settings.agentSecret, key });
  const ui = new UiTools(client, {
    onTool: (outcome) => {
      log(`tool ${outcome.name}: ${outcome.ok ? 'ok' : outcome.error?.code ?? 'failed'} (key ${fp}, mode ${outcome.mode})`);
      hooks.onTool?.(outcome);
    },
    onOffer: (offer) => log(`mode ${offer.mode}: tools ${offer.tools.map((t) => t.name).join(', ') || '(none)'} (key ${fp})`),
  });
  await fetchOffer(ui, log);
  const agent = new voice.Agent({ instructions: ui.instructions, tools: [ui.toolset] });
  ui.bind(agent);
  // The tools follow the session: a handler added or removed in the tab, a reloaded catalog.
  void ui.follow(stop.signal, { onError: (e) => log(`cannot wait for changes of the tools: ${e.code}`) });

  const session = new voice.AgentSession({
    llm: pipeline.llm,
    ...(pipeline.stt ? { stt: pipeline.stt } : { vad: null }),
    ...(pipeline.tts ? { tts: pipeline.tts } : {}),
    maxToolSteps: settings.maxToolSteps ?? 6,
  });
  session.on(voice.AgentSessionEventTypes.Close, (ev) => {
    // The agent serves one user: when their session ends, the job ends (and leaves).
    stop.abort();
    ctx.shutdown(`session closed (${String(ev.reason)})`);
  });
  await session.start({
    agent,
    room: ctx.room,
    inputOptions: { participantIdentity: participant.identity, audioEnabled: pipeline.stt !== undefined },
    outputOptions: { audioEnabled: pipeline.tts !== undefined },
  });
  if (settings.greet ?? true) session.generateReply({ instructions: GREETING_INSTRUCTIONS });
  return session;
}
