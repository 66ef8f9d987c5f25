// The reference agent's configuration: no fake default, every problem named, secrets never shown.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ConfigError, loadConfig } from '../dist/config.js';

const agent = fileURLToPath(new URL('../dist/agent.js', import.meta.url));

test('no LLM: refused, each problem named; a relay secret in the agent\'s environment is refused too', () => {
  assert.throws(() => loadConfig({}), (e) => e instanceof ConfigError
    && e.problems.length === 1 && e.problems[0].startsWith('no LLM'));
  assert.throws(() => loadConfig({ AGENT_LLM_BASE_URL: 'http://127.0.0.1:1/v1' }), /AGENT_LLM_MODEL is required/);
  assert.throws(() => loadConfig({ AGENT_LLM_MODEL: 'm' }), /names no endpoint/);
  for (const held of ['RELAY_AGENT_SECRET', 'RELAY_WORKER_SECRET', 'RELAY_OPERATOR_SECRET']) {
    assert.throws(() => loadConfig({ [held]: 'secret-not-to-print', OPENAI_API_KEY: 'sk-test' }), (e) => e instanceof ConfigError
      && e.problems.some((p) => p.startsWith(`${held} is set`) && p.includes('session token') && !p.includes('secret-not-to-print')));
  }
  assert.throws(() => loadConfig({ AGENT_NAME: 'has space', OPENAI_API_KEY: 'sk-test' }), /AGENT_NAME/);
});

test('an OpenAI-compatible server configures the models', () => {
  const { settings, notes } = loadConfig({
    AGENT_NAME: 'helper-7', AGENT_LLM_BASE_URL: 'http://127.0.0.1:8000/v1', AGENT_LLM_MODEL: 'local', AGENT_STT: 'none', AGENT_TTS: 'none',
  });
  assert.equal(settings.agentName, 'helper-7');
  assert.deepEqual(settings.llm, { model: 'local', baseURL: 'http://127.0.0.1:8000/v1', apiKey: 'not-set' });
  assert.equal(settings.stt, null);
  assert.equal(notes.length, 2);
  const openai = loadConfig({ OPENAI_API_KEY: 'sk-test' }).settings;
  assert.equal(openai.agentName, 'voice-relay-agent');
  assert.equal(openai.llm.model, 'gpt-4.1-mini');
  assert.equal(openai.tts.model, 'gpt-4o-mini-tts');
});

test('the program refuses to start, exit 64, without printing secrets', () => {
  const run = spawnSync(process.execPath, [agent, 'start'], {
    env: { PATH: process.env.PATH, RELAY_WORKER_SECRET: 'secret-not-to-print', AGENT_LLM_MODEL: 'm' }, encoding: 'utf8', timeout: 30000,
  });
  assert.equal(run.status, 64, run.stderr);
  assert.match(run.stderr, /names no endpoint/);
  assert.match(run.stderr, /RELAY_WORKER_SECRET is set/);
  assert.match(run.stderr, /LIVEKIT_URL is not set/);
  assert.ok(!run.stderr.includes('secret-not-to-print'));
});

test('the OTEL_* variables turn on the export of the agent\'s spans; what it cannot do stops it, the endpoint never printed', () => {
  assert.equal(loadConfig({ OPENAI_API_KEY: 'sk-test' }).settings.tracing, null);
  const { settings } = loadConfig({ OPENAI_API_KEY: 'sk-test', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' });
  assert.deepEqual(settings.tracing, { endpoint: 'http://collector:4318/v1/traces', serviceName: 'voice-relay-agent' });
  assert.throws(() => loadConfig({ OPENAI_API_KEY: 'sk-test', OTEL_TRACES_EXPORTER: 'jaeger' }), /OTEL_TRACES_EXPORTER="jaeger"/);
  const run = spawnSync(process.execPath, [agent, 'start'], {
    env: {
      PATH: process.env.PATH, OPENAI_API_KEY: 'sk-test', LIVEKIT_URL: 'ws://127.0.0.1:1', LIVEKIT_API_KEY: 'k', LIVEKIT_API_SECRET: 's',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'collector?token=secret-not-to-print', OTEL_TRACES_SAMPLER: 'sometimes',
    },
    encoding: 'utf8', timeout: 30000,
  });
  assert.equal(run.status, 64, run.stderr);
  assert.match(run.stderr, /OTEL_TRACES_SAMPLER="sometimes" is not one of/);
  assert.match(run.stderr, /OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is not an http\(s\) URL/);
  assert.ok(!run.stderr.includes('secret-not-to-print'));
});
