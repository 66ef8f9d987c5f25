// A real OTLP/HTTP trace receiver (e2e/worker/otlp_receiver.py: the OpenTelemetry project's own
// protobuf messages, from PyPI's opentelemetry-proto, in the project venv) as a process of the
// test: the relay, the worker and the agents export their spans to it. Like every server here,
// what it received is searched, when it stops, for every key, token and secret the test saw:
// its log, and every payload it decoded.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { logDir, otlpReceiverScript, venvPython } from './paths.mjs';
import { Server, eventually, launchServer } from './proc.mjs';

let receivers = 0;

/** Starts a receiver; `receiver.env()` is what a process exports to it with. */
export async function startOtlpReceiver() {
  const payloads = join(logDir, `otlp-payloads-${process.pid}-${++receivers}.bin`);
  const started = await launchServer({
    name: 'otlp-receiver',
    bin: venvPython,
    args: [otlpReceiverScript, '--payloads', payloads],
    env: { PATH: process.env.PATH },
    stream: 'stdout',
    banner: 'otlp receiver',
  });
  return new OtlpReceiver({ ...started, name: 'otlp receiver' }, payloads);
}

export class OtlpReceiver extends Server {
  constructor(started, payloads) {
    super(started);
    this.payloads = payloads;
  }

  /** The standard variables that send a process's spans here (every span sampled). */
  env(service) {
    return {
      OTEL_EXPORTER_OTLP_ENDPOINT: this.url,
      OTEL_TRACES_SAMPLER: 'always_on',
      OTEL_BSP_SCHEDULE_DELAY: '200',
      ...(service ? { OTEL_SERVICE_NAME: service } : {}),
    };
  }

  /** Every span received so far. */
  async spans() {
    const res = await this.fetch('/spans');
    return res.body.spans;
  }

  /** Waits (bounded) until `check(spans)` is truthy; returns its value. */
  waitFor(check, what, ms = 15000) {
    return eventually(async () => check(await this.spans()), what, ms, 100);
  }

  /** Its log and every payload: protobuf, whose random ids may hold any byte (an escape code's
   * too), so the plain-text check of logs is made of its log only. */
  logText() {
    let payloads = '';
    try { payloads = readFileSync(this.payloads, 'latin1'); } catch { /* none received */ }
    return `${readFileSync(this.logPath, 'utf8')}\n${payloads}`;
  }
}
