// Inside an OpenTelemetry span, each request to the worker carries that span's W3C context;
// outside one, none. The worker is played by a `fetch` that records what it was sent.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { context, trace, TraceFlags } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { TraceState } from '@opentelemetry/core';
import { WorkerClient } from '../dist/index.js';

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

const KEY = `va_${'ab'.repeat(32)}`;
const OFFER = { mode: 'default', instructions: '', tools: [], revision: 1 };

function recorder() {
  const sent = [];
  const fetch = async (url, init) => {
    sent.push(new Headers(init.headers));
    return new Response(JSON.stringify(OFFER), { status: 200, headers: { 'content-type': 'application/json' } });
  };
  return { sent, fetch };
}

test('a request made inside a span carries its traceparent and tracestate; one outside carries none', async () => {
  const { sent, fetch } = recorder();
  const client = new WorkerClient({ url: 'http://127.0.0.1:9', key: KEY, token: 'h.p.s', fetch });
  const span = trace.wrapSpanContext({
    traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
    spanId: '00f067aa0ba902b7',
    traceFlags: TraceFlags.SAMPLED,
    traceState: new TraceState('vendor=v1'),
  });
  await context.with(trace.setSpan(context.active(), span), () => client.listTools().catch(() => {}));
  await client.listTools().catch(() => {});
  assert.equal(sent.length, 2);
  assert.equal(sent[0].get('traceparent'), '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
  assert.equal(sent[0].get('tracestate'), 'vendor=v1');
  assert.equal(sent[1].get('traceparent'), null);
  assert.equal(sent[1].get('tracestate'), null);
});
