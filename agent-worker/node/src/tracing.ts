/**
 * Span export for an agent on LiveKit Agents for Node: its own spans (a turn's `agent_turn`, a
 * `function_tool` span per tool call) go over OTLP/HTTP (protobuf) when the standard
 * OpenTelemetry variables ask for it, read as the relay and the worker read them. The
 * {@link WorkerClient} sends the current span's context with every request, so the worker's and
 * the relay's spans of a call are in the agent's trace. LiveKit Agents 1.9 for Node starts a tool
 * before it opens the tool's `function_tool` span, so the span current while the tool runs, and
 * the parent of the worker's, is the turn's.
 *
 * {@link tracingFromEnv} checks the variables (every problem listed, none ignored);
 * {@link exportSpans} starts the export in the process that runs the agent's sessions (LiveKit
 * Agents runs each job in a process of its own). What the user said and the tools' arguments and
 * results stay off the spans.
 */
import { telemetry } from '@livekit/agents';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';

/** The collector's base URL when `OTEL_TRACES_EXPORTER=otlp` names no endpoint. */
export const DEFAULT_OTLP_ENDPOINT = 'http://localhost:4318';
/** The service name of the agent's spans unless `OTEL_SERVICE_NAME` says otherwise. */
export const DEFAULT_SERVICE_NAME = 'voice-relay-agent';
/** The samplers of `OTEL_TRACES_SAMPLER` that the OpenTelemetry SDK reads. */
export const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;

/**
 * Where spans go: the traces endpoint (its full URL) and the service name. The SDK reads the
 * other standard settings itself (`OTEL_EXPORTER_OTLP_HEADERS`, the timeout,
 * `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`, `OTEL_RESOURCE_ATTRIBUTES`).
 */
export interface Tracing {
  readonly endpoint: string;
  readonly serviceName: string;
}

type Env = Readonly<Record<string, string | undefined>>;

function get(env: Env, name: string): string | undefined {
  const v = env[name]?.trim();
  return v ? v : undefined;
}

/**
 * Span export as the `OTEL_*` variables ask for it: on with `OTEL_TRACES_EXPORTER=otlp` or an
 * OTLP endpoint (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, the full URL, or
 * `OTEL_EXPORTER_OTLP_ENDPOINT`, the collector's base URL) and no exporter named; off (`null`)
 * with `OTEL_TRACES_EXPORTER=none`, `OTEL_SDK_DISABLED=true` or none of them. What this agent
 * cannot do (another exporter or protocol, an unknown sampler, a ratio outside 0 to 1) is
 * pushed to `problems`, never silently replaced.
 */
export function tracingFromEnv(env: Env, problems: string[]): Tracing | null {
  if ((get(env, 'OTEL_SDK_DISABLED') ?? '').toLowerCase() === 'true') return null;
  const tracesEndpoint = get(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const base = get(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  const exporter = get(env, 'OTEL_TRACES_EXPORTER');
  if (exporter === undefined) {
    if (tracesEndpoint === undefined && base === undefined) return null;
  } else if (exporter === 'none') {
    return null;
  } else if (exporter !== 'otlp') {
    problems.push(`OTEL_TRACES_EXPORTER=${JSON.stringify(exporter)}: this agent exports spans over OTLP only (otlp or none)`);
    return null;
  }
  const protocol = get(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') ?? get(env, 'OTEL_EXPORTER_OTLP_PROTOCOL');
  if (protocol !== undefined && protocol !== 'http/protobuf') {
    problems.push(`OTEL_EXPORTER_OTLP_PROTOCOL=${JSON.stringify(protocol)}: this agent sends OTLP over HTTP with protobuf only (http/protobuf)`);
  }
  const sampler = get(env, 'OTEL_TRACES_SAMPLER');
  if (sampler !== undefined && !(SAMPLERS as readonly string[]).includes(sampler)) {
    problems.push(`OTEL_TRACES_SAMPLER=${JSON.stringify(sampler)} is not one of ${SAMPLERS.join(', ')}`);
  }
  const ratio = get(env, 'OTEL_TRACES_SAMPLER_ARG');
  if (sampler?.endsWith('traceidratio') && ratio !== undefined) {
    const r = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(ratio) ? Number(ratio) : Number.NaN;
    if (!(r >= 0 && r <= 1)) problems.push(`OTEL_TRACES_SAMPLER_ARG=${JSON.stringify(ratio)}: a ratio from 0 to 1 for ${sampler}`);
  }
  const endpoint = tracesEndpoint ?? `${(base ?? DEFAULT_OTLP_ENDPOINT).replace(/\/+$/, '')}/v1/traces`;
  if (!/^https?:\/\//.test(endpoint)) {
    // Named by its variable only: the value may carry a credential.
    problems.push(`${tracesEndpoint ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT'} is not an http(s) URL`);
    return null;
  }
  return { endpoint, serviceName: get(env, 'OTEL_SERVICE_NAME') ?? DEFAULT_SERVICE_NAME };
}

/**
 * Where spans go, for a log line: without the endpoint's user information, query or fragment
 * (any may hold a credential).
 */
export function describeTracing(t: Tracing): string {
  const at = t.endpoint.indexOf('://');
  const scheme = t.endpoint.slice(0, at);
  const rest = t.endpoint.slice(at + 3);
  const slash = rest.indexOf('/');
  const authority = slash < 0 ? rest : rest.slice(0, slash);
  const path = slash < 0 ? '' : rest.slice(slash).split(/[?#]/)[0];
  const host = authority.slice(authority.lastIndexOf('@') + 1);
  return `spans of ${t.serviceName} to ${scheme}://${host}${path} over OTLP/HTTP`;
}

/**
 * What {@link exportSpans} started: `flush` sends the spans ended so far, `shutdown` also stops;
 * each gives up after `timeoutMs` (a collector that does not answer must not hold up a job's end).
 */
export interface SpanExport {
  flush(timeoutMs?: number): Promise<void>;
  shutdown(timeoutMs?: number): Promise<void>;
}

/** How long {@link SpanExport.flush} and {@link SpanExport.shutdown} wait by default. */
export const FLUSH_TIMEOUT_MS = 5_000;

/** `work`, or nothing more once `ms` have passed. */
function bounded(work: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
    timer.unref();
  });
  return Promise.race([work.catch(() => {}), late]).finally(() => clearTimeout(timer));
}

let started: SpanExport | null = null;

/**
 * Exports LiveKit Agents' spans as `tracing` says, once per process (a second call returns the
 * first export); `null` without `tracing`. The provider becomes the process's global one, so
 * LiveKit Agents' span current while a tool runs is the one the worker's requests carry.
 * LiveKit Agents' own filter strips what the user said and the tools' arguments and results
 * (`allowPii: false`) before the spans leave.
 */
export function exportSpans(tracing: Tracing | null): SpanExport | null {
  if (started !== null) return started;
  if (tracing === null) return null;
  // Processors LiveKit Agents adds (its PII filter) run ahead of the export.
  const added = new telemetry.FanoutSpanProcessor();
  const provider = new NodeTracerProvider({
    // OTEL_RESOURCE_ATTRIBUTES as the SDK reads it, the service name over it.
    resource: defaultResource()
      .merge(detectResources({ detectors: [envDetector] }))
      .merge(resourceFromAttributes({ 'service.name': tracing.serviceName })),
    spanProcessors: [added, new BatchSpanProcessor(new OTLPTraceExporter({ url: tracing.endpoint }))],
  });
  provider.register();
  telemetry.setTracerProvider(provider, { registerSpanProcessor: (p) => added.add(p), allowPii: false });
  started = {
    flush: (ms = FLUSH_TIMEOUT_MS) => bounded(provider.forceFlush(), ms),
    shutdown: (ms = FLUSH_TIMEOUT_MS) => bounded(provider.shutdown(), ms),
  };
  return started;
}
