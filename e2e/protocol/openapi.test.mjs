// The published API contract, as the real binaries serve it: the relay's and the worker's
// /openapi.json (OpenAPI 3.1, every operation, the error table), and a request path that the
// static-file service cannot open answered 404, never 500. The generated attacks on these
// documents run in e2e/api/run.sh.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startRelay, startWorker, issuerSecret } from '../harness/index.mjs';

let relay;
let worker;
before(async () => {
  relay = await startRelay({ RELAY_TOKEN_MODE: 'issuer', RELAY_TOKEN_ISSUER_SECRET: issuerSecret() });
  worker = await startWorker(relay);
});
after(async () => { await worker?.stop(); await relay?.stop(); });

const operations = (doc) => Object.entries(doc.paths)
  .flatMap(([path, item]) => Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`))
  .sort();

test("the relay serves its OpenAPI 3.1 document, with the error table's codes and statuses", async () => {
  const res = await relay.fetch('/openapi.json');
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^application\/json/);
  const doc = res.body;
  assert.equal(doc.openapi, '3.1.0');
  assert.deepEqual(operations(doc), [
    'DELETE /api/voice-agent/keys/{apiKey}',
    'DELETE /api/voice-agent/sessions/{sessionId}',
    'GET /api/voice-agent/keys/{apiKey}',
    'GET /api/voice-agent/session-keys',
    'GET /healthz',
    'GET /metrics',
    'GET /openapi.json',
    'GET /readyz',
    'GET /token',
    'POST /api/voice-agent/sessions',
    'POST /api/voice-agent/tool-call',
    'POST /api/voice-agent/tool-call/cancel',
    'POST /token',
    'PUT /api/voice-agent/keys/{apiKey}/mode',
  ]);
  assert.deepEqual(doc.components.schemas.ErrorCode.enum, [
    'invalid_request', 'unauthorized', 'forbidden', 'unknown_key', 'tab_offline', 'payload_too_large', 'rate_limited',
    'tool_failed', 'no_handler', 'shutting_down', 'unavailable', 'timeout', 'internal',
  ]);
  const responses = doc.paths['/api/voice-agent/tool-call'].post.responses;
  for (const status of ['400', '401', '403', '404', '409', '413', '429', '502', '503', '504']) {
    assert.equal(responses[status].content['application/json'].schema.$ref, '#/components/schemas/ErrorBody', status);
  }
  assert.deepEqual(doc.paths['/token'].post.security, [{ issuer_secret: [] }, { app_jwt: [] }, {}]);
  // Who may call what: agents only with their session token, never a server's secret.
  const who = (path, method) => (doc.paths[path][method].security ?? []).map((s) => Object.keys(s)[0] ?? 'none');
  assert.deepEqual(who('/api/voice-agent/tool-call', 'post'), ['session_token']);
  assert.deepEqual(who('/api/voice-agent/tool-call/cancel', 'post'), ['session_token']);
  assert.deepEqual(who('/api/voice-agent/keys/{apiKey}/mode', 'put'), ['session_token', 'worker_secret']);
  assert.deepEqual(who('/api/voice-agent/keys/{apiKey}', 'delete'), ['worker_secret', 'operator_secret']);
  assert.deepEqual(who('/api/voice-agent/sessions', 'post'), ['worker_secret', 'operator_secret', 'issuer_secret']);
  assert.deepEqual(who('/api/voice-agent/session-keys', 'get'), []);

  // An answer the document describes: a refused tool call has the ErrorBody's shape.
  const refused = await relay.call({ apiKey: 'nope', toolName: 'OpenPopover' }, { secret: 'wrong-secret-0123456789' });
  assert.equal(refused.status, 401);
  assert.deepEqual(Object.keys(refused.body).sort(), ['error', 'ok']);
  assert.ok(doc.components.schemas.ErrorCode.enum.includes(refused.body.error.code));
});

test('the worker serves its OpenAPI 3.1 document, with the MCP endpoint\'s HTTP surface', async () => {
  const res = await worker.fetch('/openapi.json');
  assert.equal(res.status, 200);
  const doc = res.body;
  assert.equal(doc.openapi, '3.1.0');
  assert.deepEqual(operations(doc), [
    'DELETE /mcp',
    'GET /agent/tools',
    'GET /debug',
    'GET /healthz',
    'GET /mcp',
    'GET /metrics',
    'GET /openapi.json',
    'GET /readyz',
    'GET /sessions',
    'GET /sessions/{id}/events',
    // One operation per catalog tool, with its schema (the default catalog here).
    'POST /agent/tools/OpenPopover',
    'POST /agent/tools/draw_card',
    'POST /agent/tools/loading_status',
    'POST /agent/tools/pin_note',
    'POST /agent/tools/present_to_cassette',
    'POST /agent/tools/show_card',
    'POST /agent/tools/{name}',
    'POST /livekit/webhook',
    'POST /mcp',
    'POST /vapi/webhook',
  ]);
  const pin = doc.paths['/agent/tools/pin_note'].post;
  const body = pin.requestBody.content['application/json'].schema;
  assert.deepEqual(body.required, ['text']);
  assert.equal(body.properties.text.maxLength, 280);
  // A method /mcp does not take is refused as such, before any credential is asked for.
  const put = await worker.fetch('/mcp', { method: 'PUT' });
  assert.equal(put.status, 405);
  assert.equal(put.headers.get('allow'), 'GET, POST, DELETE');
  assert.equal(put.body.jsonrpc, '2.0');
});

test('a path segment longer than a file name can be is a 404 from the static files, not a 500', async () => {
  for (const path of [`/${'a'.repeat(300)}`, `/lib/${'x'.repeat(256)}`, '/index.html/x']) {
    const res = await relay.fetch(path);
    assert.equal(res.status, 404, path);
  }
  assert.equal((await relay.fetch('/')).status, 200);
});
