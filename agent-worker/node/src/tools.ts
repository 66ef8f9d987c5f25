/**
 * The worker's UI tools as LiveKit Agents (Node) function tools, following the session's mode.
 *
 * The tool list, the JSON Schemas and the instructions all come from the worker
 * (`GET /agent/tools`); nothing here knows a tool by name, so any catalog works. Each offered
 * tool becomes `llm.tool({name, description, parameters: <its JSON Schema>, execute})` whose
 * `execute` posts the call to the worker, with LiveKit's abort signal passed through. A failure
 * is thrown as LiveKit's `ToolError` carrying a sentence, which LiveKit hands to the model as
 * the tool's (error) output.
 *
 * The tools live in one {@link UiToolset} whose contents are replaced when the offer changes:
 * after a mode move (`enter_<mode>`, `leave_<mode>`), or when {@link UiTools.follow} sees a
 * change on the worker (a handler added or removed in the tab, a reloaded catalog). The bound
 * agent's instructions follow the mode.
 */
import { llm } from '@livekit/agents';
import {
  EMPTY_OFFER,
  type CallOutcome,
  type ToolOffer,
  type ToolSpec,
  type WorkerClient,
} from './client.js';
import { WorkerError } from './errors.js';

/** Said before the mode's own instructions, whatever the mode. */
export const BASE_INSTRUCTIONS =
  "You are a voice assistant talking with the user through their microphone and speakers: " +
  'answer in short, plain spoken sentences, without markdown or lists. Your tools act in the ' +
  "user's browser tab; use them when they help, and tell the user what you did. If a tool " +
  'fails, say so in a few words.';

export const TOOLSET_ID = 'voice_relay_ui_tools';
/** How long one wait on the worker for a changed offer lasts. */
export const FOLLOW_WAIT_MS = 25_000;
/** Pause after the worker could not be asked, before asking again. */
export const FOLLOW_RETRY_MS = 1_000;

/**
 * What a mode change updates: LiveKit's `Agent` has it. With `updateTools` and `toolCtx` too
 * (an `Agent` has them), the agent's tool context is rebuilt before a mode move returns.
 */
export interface InstructionsTarget {
  updateInstructions(instructions: string): Promise<void>;
  updateTools?(tools: any): Promise<void>;
  readonly toolCtx?: { readonly tools: readonly unknown[] };
}

/** The agent's instructions for the mode of `offer`, after `base`. */
export function composeInstructions(offer: Pick<ToolOffer, 'instructions'>, base: string = BASE_INSTRUCTIONS): string {
  if (!offer.instructions) return base;
  if (!base) return offer.instructions;
  return `${base}\n\n${offer.instructions}`;
}

const LEADS: Partial<Record<string, string>> = {
  tab_offline: "The user's screen is not connected right now, so nothing could be shown.",
  unknown_key: "This session is no longer linked to the user's screen.",
  timeout: "The user's screen did not answer in time.",
  unauthorized: "The agent is not allowed to use the user's screen (check its secret).",
  unavailable: 'The screen service is unavailable for a moment; try again shortly.',
  relay_unreachable: 'The screen service is unavailable for a moment; try again shortly.',
  shutting_down: 'The screen service is unavailable for a moment; try again shortly.',
  cancelled: 'The call was cancelled.',
  bad_response: "The user's screen answered something that could not be read.",
};

/** Replaces line breaks and other control characters with spaces. */
function oneLine(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim();
}

/**
 * A sentence a voice model can say for `error`. The worker already writes a tool's failure as
 * a sentence (kept as is); failures met on the way to it get one here, with the code.
 */
export function speech(error: unknown, toolName?: string): string {
  if (error instanceof WorkerError) {
    if (error.status === 200 && error.message) return oneLine(error.message);
    const lead = LEADS[error.code] ?? `The request to the user's screen failed.`;
    if (error.message && error.message !== lead) return oneLine(`${lead} (${error.code}: ${error.message})`);
    return oneLine(`${lead} (${error.code})`);
  }
  return toolName ? `The ${toolName} tool failed.` : 'The tool failed.';
}

/** What the model reads after a successful call: the tab's result, or `{ok: true}`. */
export function toolOutput(outcome: CallOutcome): unknown {
  return outcome.result === null || outcome.result === undefined ? { ok: true } : outcome.result;
}

/** The function tools of the current offer; {@link replace} swaps them in a running agent. */
export class UiToolset extends llm.Toolset {
  #push: ((tools: readonly llm.ToolContextEntry[]) => void) | undefined;

  constructor(id: string = TOOLSET_ID) {
    super({ id, tools: [] });
  }

  override async setup(ctx: llm.ToolsetContext): Promise<void> {
    this.#push = ctx.updateTools;
  }

  override async aclose(): Promise<void> {
    this.#push = undefined;
  }

  /** Makes `tools` the toolset's; a running agent re-advertises them before its next step. */
  replace(tools: readonly llm.ToolContextEntry[]): void {
    this._setTools(tools);
    this.#push?.(tools);
  }

  /** The names of the tools held now, sorted. */
  names(): string[] {
    return this.tools
      .filter((t): t is llm.FunctionTool => llm.isFunctionTool(t))
      .map((t) => t.name)
      .sort();
  }
}

export interface UiToolsOptions {
  /** Told every call's outcome, successes and failures alike. */
  onTool?: (outcome: CallOutcome) => void;
  /** Told every offer that replaces the tools (first fetch, mode moves, changes followed). */
  onOffer?: (offer: ToolOffer) => void;
  /** Said before each mode's instructions (default {@link BASE_INSTRUCTIONS}; '' for none). */
  baseInstructions?: string;
  /** The toolset's id (default {@link TOOLSET_ID}). */
  toolsetId?: string;
  /** The agent whose instructions follow the mode (also settable later with `bind`). */
  agent?: InstructionsTarget;
}

/** The UI tools of one session (one tab's key), kept in step with its mode. */
export class UiTools {
  readonly client: WorkerClient;
  readonly toolset: UiToolset;
  readonly baseInstructions: string;
  #offer: ToolOffer = EMPTY_OFFER;
  #target: InstructionsTarget | undefined;
  #lock: Promise<unknown> = Promise.resolve();
  readonly #onTool: ((outcome: CallOutcome) => void) | undefined;
  readonly #onOffer: ((offer: ToolOffer) => void) | undefined;

  constructor(client: WorkerClient, options: UiToolsOptions = {}) {
    this.client = client;
    this.toolset = new UiToolset(options.toolsetId);
    this.baseInstructions = options.baseInstructions ?? BASE_INSTRUCTIONS;
    this.#onTool = options.onTool;
    this.#onOffer = options.onOffer;
    this.#target = options.agent;
  }

  /** The offer whose tools are held now. */
  get offer(): ToolOffer {
    return this.#offer;
  }

  get mode(): string {
    return this.#offer.mode;
  }

  /** The instructions of the current mode, after the base ones. */
  get instructions(): string {
    return composeInstructions(this.#offer, this.baseInstructions);
  }

  /** The agent whose instructions follow the mode. */
  bind(target: InstructionsTarget): void {
    this.#target = target;
  }

  /** Function tools for every tool in `offer`, with the worker's schemas verbatim. */
  build(offer: ToolOffer = this.#offer): llm.FunctionTool[] {
    return offer.tools.map((spec) => this.#functionTool(spec));
  }

  /** Makes `offer` the held one and its tools the toolset's (instructions: see `switch`). */
  apply(offer: ToolOffer): void {
    this.toolset.replace(this.build(offer));
    this.#offer = offer;
    this.#onOffer?.(offer);
  }

  /** Fetches the current offer and applies its tools. */
  async refresh(signal?: AbortSignal): Promise<ToolOffer> {
    const offer = await this.client.listTools(signal ? { signal } : {});
    this.apply(offer);
    return offer;
  }

  /** After a mode change: the new mode's tools and instructions replace the old ones. */
  switch(signal?: AbortSignal): Promise<ToolOffer> {
    return this.#locked(async () => {
      const previous = this.#offer;
      const offer = await this.refresh(signal);
      await this.#retarget(previous, offer);
      return offer;
    });
  }

  /**
   * Keeps the tools and instructions current until `signal` aborts: each wait on the worker
   * ends as soon as the offer changes, and the new offer replaces the old one. Failures to
   * reach the worker are retried after a pause. Resolves when `signal` aborts.
   */
  async follow(signal: AbortSignal, options: { waitMs?: number; retryMs?: number; onError?: (e: WorkerError) => void } = {}): Promise<void> {
    const waitMs = options.waitMs ?? FOLLOW_WAIT_MS;
    const retryMs = options.retryMs ?? FOLLOW_RETRY_MS;
    while (!signal.aborted) {
      let offer: ToolOffer;
      try {
        offer = await this.client.waitForChange(this.#offer.revision, waitMs, signal);
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof WorkerError) options.onError?.(e);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, retryMs);
          function done() {
            clearTimeout(timer);
            signal.removeEventListener('abort', done);
            resolve();
          }
          signal.addEventListener('abort', done, { once: true });
        });
        continue;
      }
      if (signal.aborted) return;
      await this.#locked(async () => {
        if (offer.revision === this.#offer.revision) return;
        const previous = this.#offer;
        this.apply(offer);
        await this.#retarget(previous, offer);
      });
    }
  }

  /**
   * Runs one call for the model: resolves with what the model reads, or throws LiveKit's
   * `ToolError` with a sentence it can say. A mode change brings the new mode's tools first.
   */
  async call(spec: ToolSpec, args: Record<string, unknown>, signal?: AbortSignal): Promise<unknown> {
    return (await this.#invoke(spec, args, signal)).output;
  }

  async #invoke(spec: ToolSpec, args: Record<string, unknown>, signal?: AbortSignal): Promise<{ output: unknown; modeChanged: boolean }> {
    let outcome: CallOutcome;
    try {
      outcome = await this.client.callTool(spec.name, args, signal ? { spec, signal } : { spec });
    } catch (e) {
      const error = e instanceof WorkerError ? e : new WorkerError('internal', 'The call failed unexpectedly.', { cause: e });
      outcome = { name: spec.name, ok: false, result: null, error, mode: this.mode, modeChanged: false };
    }
    try {
      this.#onTool?.(outcome);
    } catch {
      // An observer's failure is not the call's.
    }
    if (outcome.modeChanged) {
      try {
        await this.switch();
      } catch (e) {
        throw new llm.ToolError(
          `The mode changed to ${outcome.mode}, but its tools could not be loaded. ${speech(e)}`,
        );
      }
    }
    if (!outcome.ok) throw new llm.ToolError(speech(outcome.error, spec.name));
    return { output: toolOutput(outcome), modeChanged: outcome.modeChanged };
  }

  /** Rebuilds the bound agent's tool context from its tools (the toolset's new contents). */
  async #syncAgent(): Promise<void> {
    const target = this.#target;
    if (target?.updateTools && target.toolCtx) await target.updateTools(target.toolCtx.tools);
  }

  async #retarget(previous: ToolOffer, offer: ToolOffer): Promise<void> {
    if (this.#target && (offer.instructions !== previous.instructions || previous === EMPTY_OFFER)) {
      await this.#target.updateInstructions(composeInstructions(offer, this.baseInstructions));
    }
  }

  #locked<T>(task: () => Promise<T>): Promise<T> {
    const run = this.#lock.then(task, task);
    this.#lock = run.catch(() => undefined);
    return run;
  }

  #functionTool(spec: ToolSpec): llm.FunctionTool {
    return llm.tool({
      name: spec.name,
      description: spec.description,
      // The catalog's JSON Schema, verbatim (LiveKit takes a raw JSON Schema as is).
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      parameters: spec.parameters as any,
      execute: async (args: Record<string, unknown>, opts: llm.ToolOptions) => {
        const { output, modeChanged } = await this.#invoke(spec, { ...(args ?? {}) }, opts?.abortSignal);
        // The agent's tool context is rebuilt before the move returns. LiveKit Agents 1.9
        // (Node) keeps the tools a reply started with for all its steps: the new mode's tools
        // are the model's from the next reply on.
        if (modeChanged) await this.#syncAgent();
        return output;
      },
    }) as llm.FunctionTool;
  }
}

/**
 * The UI tools of the session of `client`'s key, fetched once: give `ui.toolset` to your
 * `Agent`'s `tools`, `ui.instructions` to its `instructions`, then `ui.bind(agent)` and run
 * `ui.follow(signal)`.
 */
export async function uiTools(client: WorkerClient, options: UiToolsOptions & { signal?: AbortSignal } = {}): Promise<UiTools> {
  const ui = new UiTools(client, options);
  await ui.refresh(options.signal);
  return ui;
}
