/**
 * One voice session of the reference agent: read the user it was dispatched for from the job's
 * metadata ({@link DispatchGrant}: that user's identity and a session token for their key
 * alone), join the job's room, wait for that user, fetch that session's offer from the worker,
 * and run an `AgentSession` linked to that participant whose tools are the mode's UI tools. A
 * job without a grant ends. The models are given by the caller (see `agent.ts` for the ones
 * read from the environment).
 */
import { voice, type JobContext, type llm, type stt, type tts } from '@livekit/agents';
import { RpcError } from '@livekit/rtc-node';
import { WorkerClient, type CallOutcome } from './client.js';
import { DispatchGrant } from './dispatch.js';
import { WorkerError } from './errors.js';
import { waitForKeyedParticipant } from './keys.js';
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
  greet?: boolean;
  maxToolSteps?: number;
}

export interface SessionHooks {
  /** Given the key's fingerprint (never the key). */
  onKey?: (fingerprint: string) => void;
  onTool?: (outcome: CallOutcome) => void;
  /** The page's push-to-talk RPC `method`, and whether it interrupted the agent's speech. */
  onTurn?: (method: string, interrupted: boolean) => void;
  log?: (line: string) => void;
}

/** The RPC methods the page calls when push-to-talk is pressed and released. */
export const START_TURN_RPC = 'start_turn';
export const END_TURN_RPC = 'end_turn';

/**
 * Push-to-talk from the user's tab: `start_turn` interrupts the agent's speech; `end_turn`
 * needs nothing more here (the session's turn detection ends the user's turn). Calls from other
 * participants are refused.
 */
export function registerTurnRpc(
  room: JobContext['room'],
  session: voice.AgentSession,
  userIdentity: string,
  hooks: Pick<SessionHooks, 'onTurn' | 'log'> = {},
): void {
  for (const method of [START_TURN_RPC, END_TURN_RPC]) {
    room.localParticipant?.registerRpcMethod(method, async (data) => {
      if (data.callerIdentity !== userIdentity) throw new RpcError(RpcError.ErrorCode.APPLICATION_ERROR, "not this session's user");
      let interrupted = false;
      if (method === START_TURN_RPC && session.agentState === 'speaking') {
        try {
          session.interrupt();
          interrupted = true;
        } catch (e) {
          // A speech that does not allow interruptions.
          hooks.log?.(`push-to-talk could not interrupt the agent: ${e instanceof Error ? e.message : String(e)}`);
        }
      }
      hooks.onTurn?.(method, interrupted);
      return 'ok';
    });
  }
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
  let grant: DispatchGrant;
  try {
    grant = DispatchGrant.parse(ctx.job.metadata);
  } catch (e) {
    log(`job refused: ${e instanceof Error ? e.message : String(e)}`);
    ctx.shutdown('no dispatch grant');
    throw e;
  }
  await ctx.connect();
  const stop = new AbortController();
  ctx.addShutdownCallback(async () => stop.abort());
  const { participant } = await waitForKeyedParticipant(ctx.room, {
    signal: stop.signal,
    identity: grant.identity,
    key: grant.apiKey,
  });
  const fp = grant.keyFingerprint;
  log(`user ${participant.identity} joined with key ${fp}`);
  hooks.onKey?.(fp);

  const client = new WorkerClient({ url: settings.workerUrl, token: grant.agentToken, key: grant.apiKey });
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
  registerTurnRpc(ctx.room, session, participant.identity, { onTurn: hooks.onTurn, log });
  if (settings.greet ?? true) session.generateReply({ instructions: GREETING_INSTRUCTIONS });
  return session;
}
