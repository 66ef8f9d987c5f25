// The token service's configuration as an operator meets it: the default (issuer) mode without
// its secret refuses to start and says what to set; `relay check-config` refuses inconsistent
// settings with exit 64 and the reason; open mode starts with a loud warning.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sessionKeyEntry, startRelay, runRelay as runRelayToExit } from '../harness/index.mjs';

/** The relay run to its exit, on a free port unless `env` names one. */
const runRelay = (env, args = []) => runRelayToExit({ RELAY_ADDR: '127.0.0.1:0', ...env }, args);

const base = {
  LIVEKIT_API_KEY: 'devkey', LIVEKIT_API_SECRET: 'secret', RELAY_WORKER_SECRET: 'long-enough-worker-secret',
  RELAY_SESSION_KEYS: sessionKeyEntry(),
};

test('the default mode is issuer: without RELAY_TOKEN_ISSUER_SECRET the relay refuses to start, and says what to set', async () => {
  for (const args of [[], ['check-config']]) {
    const r = await runRelay(base, args);
    assert.equal(r.code, 64, r.out);
    assert.match(r.out, /RELAY_TOKEN_ISSUER_SECRET is required/);
    assert.match(r.out, /RELAY_TOKEN_MODE=open/);
    assert.doesNotMatch(r.out, /listening/);
  }
  const ok = await runRelay({ ...base, RELAY_TOKEN_ISSUER_SECRET: 'issuer-secret-0123456789' }, ['check-config']);
  assert.equal(ok.code, 0, ok.out);
  assert.match(ok.out, /token mode issuer/);
});

test('check-config refuses inconsistent token settings with exit 64 and the reason', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'relay-token-config-'));
  try {
    const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    writeFileSync(join(dir, 'public.pem'), publicKey.export({ type: 'spki', format: 'pem' }));
    writeFileSync(join(dir, 'private.pem'), privateKey.export({ type: 'pkcs8', format: 'pem' }));
    writeFileSync(join(dir, 'garbage.pem'), '-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n');
    writeFileSync(join(dir, 'jwks.json'), '{"keys": "not a list"}');
    const appJwt = { ...base, RELAY_TOKEN_MODE: 'app-jwt', RELAY_APP_JWT_ISSUER: 'https://app.example', RELAY_APP_JWT_AUDIENCE: 'voice-relay' };
    const cases = [
      ['unknown mode', { ...base, RELAY_TOKEN_MODE: 'public' }, /RELAY_TOKEN_MODE "public" is not a mode/],
      ['short issuer secret', { ...base, RELAY_TOKEN_ISSUER_SECRET: 'short-secret' }, /RELAY_TOKEN_ISSUER_SECRET entry 1 is shorter than 16/],
      ['issuer secret equal to the worker\'s', { ...base, RELAY_TOKEN_ISSUER_SECRET: base.RELAY_WORKER_SECRET }, /must differ from RELAY_WORKER_SECRET and RELAY_OPERATOR_SECRET/],
      ['app-jwt without a key', appJwt, /needs the key/],
      ['app-jwt without issuer and audience', { ...base, RELAY_TOKEN_MODE: 'app-jwt', RELAY_APP_JWT_PUBLIC_KEY_FILE: join(dir, 'public.pem') }, /RELAY_APP_JWT_ISSUER[\s\S]*RELAY_APP_JWT_AUDIENCE/],
      ['two key sources', { ...appJwt, RELAY_APP_JWT_SECRET: 'x'.repeat(40), RELAY_APP_JWT_PUBLIC_KEY_FILE: join(dir, 'public.pem') }, /only one/],
      ['short HMAC secret', { ...appJwt, RELAY_APP_JWT_SECRET: 'too-short' }, /shorter than 32/],
      ['key file that does not parse', { ...appJwt, RELAY_APP_JWT_PUBLIC_KEY_FILE: join(dir, 'garbage.pem') }, /not a PEM public key/],
      ['private key instead of public', { ...appJwt, RELAY_APP_JWT_PUBLIC_KEY_FILE: join(dir, 'private.pem') }, /private key/],
      ['missing key file', { ...appJwt, RELAY_APP_JWT_PUBLIC_KEY_FILE: join(dir, 'nowhere.pem') }, /cannot read/],
      ['JWKS that does not parse', { ...appJwt, RELAY_APP_JWT_JWKS_FILE: join(dir, 'jwks.json') }, /not a JWKS/],
      ['bad CIDR', { ...base, RELAY_TOKEN_MODE: 'open', RELAY_TRUSTED_PROXIES: '10.0.0.0/8, 300.1.2.3/8' }, /RELAY_TRUSTED_PROXIES entry "300.1.2.3\/8"/],
      ['bad forwarded header', { ...base, RELAY_TOKEN_MODE: 'open', RELAY_FORWARDED_HEADER: 'x-real-ip' }, /RELAY_FORWARDED_HEADER/],
      ['bad bare-key switch', { ...base, RELAY_TOKEN_MODE: 'open', RELAY_ALLOW_BARE_KEYS: 'sometimes' }, /RELAY_ALLOW_BARE_KEYS/],
    ];
    for (const [what, env, reason] of cases) {
      const r = await runRelay(env, ['check-config']);
      assert.equal(r.code, 64, `${what}: ${r.out}`);
      assert.match(r.out, reason, what);
    }
    assert.doesNotMatch((await runRelay({ ...base, RELAY_TOKEN_ISSUER_SECRET: 'short-secret' }, ['check-config'])).out, /short-secret/, 'a secret is never echoed');
    const good = await runRelay({ ...appJwt, RELAY_APP_JWT_PUBLIC_KEY_FILE: join(dir, 'public.pem'), RELAY_TRUSTED_PROXIES: '10.0.0.0/8,127.0.0.1' }, ['check-config']);
    assert.equal(good.code, 0, good.out);
    assert.match(good.out, /token mode app-jwt/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('open mode starts with a loud warning that it is for development only; issuer mode says who gets tokens', async () => {
  const open = await startRelay({ RUST_LOG: 'info' }, { name: 'relay-open-warning' });
  const issuer = await startRelay({ RUST_LOG: 'info', RELAY_TOKEN_MODE: 'issuer', RELAY_TOKEN_ISSUER_SECRET: 'issuer-secret-0123456789', RELAY_ALLOW_BARE_KEYS: 'false' }, { name: 'relay-issuer-line' });
  await open.stop();
  await issuer.stop();
  // Read once stopped: the logs are complete then.
  assert.match(open.logText(), /WARN.*RELAY_TOKEN_MODE=open: FOR DEVELOPMENT ONLY/);
  assert.match(issuer.logText(), /token service: the app's backend asks with the issuer secret/);
  assert.doesNotMatch(issuer.logText(), /FOR DEVELOPMENT ONLY/);
});
