// Span export: the OTEL_* variables read as the relay and the worker read them (every problem
// named, a credential in an endpoint never shown), and a real export to an OTLP/HTTP receiver
// of the test's own: LiveKit Agents' span is exported with the service's name, the worker's
// request made inside it carries its context, and what the user said stays off the span.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import { telemetry } from '@livekit/agents';
import { WorkerClient, DEFAULT_SERVICE_NAME, describeTracing, exportSpans, tracingFromEnv } from '../dist/index.js';

const read = (env) => {
  const problems = [];
  return { tracing: tracingFromEnv(env, problems), problems };
};

test('export is off unless an OTLP endpoint or OTEL_TRACES_EXPORTER=otlp asks for it', () => {
  assert.deepEqual(read({}), { tracing: null, problems: [] });
  assert.deepEqual(read({ OTEL_EXPORTER_OTLP_ENDPOINT: '  ' }), { tracing: null, problems: [] });
  assert.deepEqual(read({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' }), { tracing: null, problems: [] });
  assert.deepEqual(read({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'TRUE' }), { tracing: null, problems: [] });
});

test('the endpoint: the base URL with /v1/traces, the traces URL as given, or the default collector', () => {
  assert.deepEqual(read({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318/' }).tracing, { endpoint: 'http://c:4318/v1/traces', serviceName: DEFAULT_SERVICE_NAME });
  assert.deepEqual(read({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://t/x', OTEL_SERVICE_NAME: 'agent-7' }).tracing, { endpoint: 'https://t/x', serviceName: 'agent-7' });
  assert.deepEqual(read({ OTEL_TRACES_EXPORTER: 'otlp' }).tracing, { endpoint: 'http://localhost:4318/v1/traces', serviceName: DEFAULT_SERVICE_NAME });
  assert.deepEqual(read({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c', OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.25', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf' }).problems, []);
});

test('what this agent cannot do is a problem, each named; an endpoint is named by its variable, never its value', () => {
  assert.match(read({ OTEL_TRACES_EXPORTER: 'zipkin' }).problems.join(), /OTEL_TRACES_EXPORTER="zipkin": this agent exports spans over OTLP only/);
  const { problems } = read({
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '1.5',
  });
  assert.equal(problems.length, 2);
  assert.match(problems[0], /OTEL_EXPORTER_OTLP_PROTOCOL="grpc"/);
  assert.match(problems[1], /OTEL_TRACES_SAMPLER_ARG="1.5": a ratio from 0 to 1 for traceidratio/);
  assert.match(read({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c', OTEL_TRACES_SAMPLER: 'sometimes' }).problems.join(), /OTEL_TRACES_SAMPLER="sometimes" is not one of always_on/);
  assert.match(read({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c', OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: 'half' }).problems.join(), /a ratio from 0 to 1/);
  const bad = read({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'collector:4318?token=s3cret' });
  assert.equal(bad.tracing, null);
  assert.deepEqual(bad.problems, ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is not an http(s) URL']);
});

test('the endpoint as logged has no user information, query or fragment', () => {
  assert.equal(describeTracing({ endpoint: 'https://user:pw@otel.example:4318/v1/traces?key=s3cret#f', serviceName: 'a' }), 'spans of a to https://otel.example:4318/v1/traces over OTLP/HTTP');
  assert.equal(describeTracing({ endpoint: 'http://c', serviceName: 'a' }), 'spans of a to http://c over OTLP/HTTP');
  assert.equal(describeTracing({ endpoint: 'http://c/a://b', serviceName: 'a' }), 'spans of a to http://c/a://b over OTLP/HTTP');
});

test('LiveKit Agents\' spans go to the receiver under the service name; a worker request inside one carries its context; what the user said stays off', async () => {
  const bodies = [];
  const receiver = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      bodies.push({ path: req.url, type: req.headers['content-type'], body: Buffer.concat(chunks) });
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
  const endpoint = `http://127.0.0.1:${receiver.address().port}`;
  try {
    const tracing = tracingFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_SERVICE_NAME: 'agent-under-test' }, []);
    const exported = exportSpans(tracing);
    assert.ok(exported);
    assert.equal(exportSpans(tracing), exported, 'once per process');
    const sent = [];
    const fetch = async (_url, init) => {
      sent.push(new Headers(init.headers));
      return new Response(JSON.stringify({ mode: 'default', instructions: '', tools: [], revision: 1 }), { status: 200, headers: { 'content-type': 'application/json' } });
    };
    const client = new WorkerClient({ url: 'http://127.0.0.1:9', key: `va_${'cd'.repeat(32)}`, token: 'h.p.s', fetch });
    let spanId = '';
    let traceId = '';
    await telemetry.tracer.startActiveSpan(async (span) => {
      ({ spanId, traceId } = span.spanContext());
      span.setAttribute('lk.pii.function_tool.arguments', '{"said":"my secret words"}');
      span.setAttribute('lk.function_tool.name', 'draw_card');
      await client.listTools();
    }, { name: 'function_tool' });
    assert.equal(sent.length, 1);
    assert.equal(sent[0].get('traceparent'), `00-${traceId}-${spanId}-01`, 'the worker continues the agent\'s span');
    await exported.flush();
    assert.ok(bodies.length > 0, 'the receiver got the spans');
    const all = Buffer.concat(bodies.map((b) => b.body));
    assert.ok(bodies.every((b) => b.path === '/v1/traces' && b.type === 'application/x-protobuf'));
    assert.ok(all.includes('function_tool') && all.includes('draw_card'), 'the function_tool span is exported');
    assert.ok(all.includes('agent-under-test'), 'under the service name');
    assert.ok(all.includes(Buffer.from(spanId, 'hex')), 'with the span id the worker was given');
    assert.ok(!all.includes('my secret words'), 'what the user said stays off the span');
    // A collector that takes connections and never answers holds a flush no longer than its
    // bound.
    const port = receiver.address().port;
    receiver.closeAllConnections();
    await new Promise((r) => receiver.close(r));
    const held = [];
    const silent = createNetServer((socket) => held.push(socket));
    await new Promise((r) => silent.listen(port, '127.0.0.1', r));
    try {
      telemetry.tracer.startSpan({ name: 'late' }).end();
      const began = Date.now();
      await exported.flush(300);
      const took = Date.now() - began;
      // It waited (a span was still to be sent) and gave up at its bound.
      assert.ok(took >= 250 && took < 3000, `the flush gave up at its bound (${took} ms)`);
    } finally {
      for (const socket of held) socket.destroy();
      silent.close();
    }
    await exported.shutdown(300);
  } finally {
    if (receiver.listening) receiver.close();
  }
});
