// Token service in app-jwt mode: the browser presents its app's own session JWT, and the relay
// mints a LiveKit token for that user (identity from `sub`, display name from `name`, room from
// `room` or a fresh one). Keys are made here with node:crypto and JWTs signed with jose: an HMAC
// secret (HS256), an RSA public key (RS256), a P-256 public key (ES256) and a JWKS of both, each
// on its own relay. LiveKit's own TokenVerifier checks what the relay minted.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SignJWT, UnsecuredJWT, exportJWK } from 'jose';
import { TokenVerifier } from 'livekit-server-sdk';
import { startRelay, LIVEKIT_KEY } from '../harness/index.mjs';

const ISSUER = 'https://app.example';
const AUDIENCE = 'voice-relay';
const hmacSecret = randomBytes(32).toString('hex');
const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const otherRsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
const otherEc = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const rsaPem = rsa.publicKey.export({ type: 'spki', format: 'pem' });

let dir;
const relays = {};
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'relay-app-jwt-'));
  writeFileSync(join(dir, 'rsa.pem'), rsaPem);
  writeFileSync(join(dir, 'ec.pem'), ec.publicKey.export({ type: 'spki', format: 'pem' }));
  const jwks = { keys: [
    { ...(await exportJWK(rsa.publicKey)), kid: 'r1', use: 'sig', alg: 'RS256' },
    { ...(await exportJWK(ec.publicKey)), kid: 'e1', use: 'sig' },
  ] };
  writeFileSync(join(dir, 'jwks.json'), JSON.stringify(jwks));
  const common = {
    RELAY_TOKEN_MODE: 'app-jwt',
    RELAY_APP_JWT_ISSUER: ISSUER,
    RELAY_APP_JWT_AUDIENCE: AUDIENCE,
    RELAY_TOKEN_RATE_PER_MIN: '1000',
    RELAY_ALLOW_BARE_KEYS: 'false',
  };
  const [hs, rs, es, jwksRelay] = await Promise.all([
    startRelay({ ...common, RELAY_APP_JWT_SECRET: hmacSecret }, { name: 'relay-jwt-hs' }),
    startRelay({ ...common, RELAY_APP_JWT_PUBLIC_KEY_FILE: join(dir, 'rsa.pem') }, { name: 'relay-jwt-rs' }),
    startRelay({ ...common, RELAY_APP_JWT_PUBLIC_KEY_FILE: join(dir, 'ec.pem') }, { name: 'relay-jwt-es' }),
    startRelay({ ...common, RELAY_APP_JWT_JWKS_FILE: join(dir, 'jwks.json') }, { name: 'relay-jwt-jwks' }),
  ]);
  Object.assign(relays, { hs, rs, es, jwks: jwksRelay });
});
after(async () => {
  for (const r of Object.values(relays)) await r.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const now = () => Math.floor(Date.now() / 1000);

/** An app session JWT: the claims a real app would put in, overridable. */
function sessionJwt({ alg, key, kid, claims = {}, iss = ISSUER, aud = AUDIENCE, exp = now() + 300 }) {
  const jwt = new SignJWT({ name: 'Ada Lovelace', room: 'team-7', ...claims })
    .setProtectedHeader({ alg, typ: 'JWT', ...(kid ? { kid } : {}) })
    .setSubject(claims.sub ?? 'user-42')
    .setIssuedAt();
  if (iss !== null) jwt.setIssuer(iss);
  if (aud !== null) jwt.setAudience(aud);
  if (exp !== null) jwt.setExpirationTime(exp);
  return jwt.sign(key);
}

const hsKey = new TextEncoder().encode(hmacSecret);
const signers = {
  hs: (opts = {}) => sessionJwt({ alg: 'HS256', key: hsKey, ...opts }),
  rs: (opts = {}) => sessionJwt({ alg: 'RS256', key: rsa.privateKey, ...opts }),
  es: (opts = {}) => sessionJwt({ alg: 'ES256', key: ec.privateKey, ...opts }),
  jwks: (opts = {}) => sessionJwt({ alg: 'ES256', key: ec.privateKey, kid: 'e1', ...opts }),
};

const verify = (relay, token) => new TokenVerifier(LIVEKIT_KEY, relay.livekitSecret).verify(token);

for (const mode of ['hs', 'rs', 'es', 'jwks']) {
  test(`app-jwt (${mode}): a valid session JWT gets a token for its sub, name and room`, async () => {
    const relay = relays[mode];
    const t = await relay.token({}, { bearer: await signers[mode]() });
    assert.equal(t.identity, 'user-42');
    assert.equal(t.roomName, 'team-7');
    const claims = await verify(relay, t.token);
    assert.equal(claims.sub, 'user-42');
    assert.equal(claims.name, 'Ada Lovelace');
    assert.equal(claims.video.room, 'team-7');
    assert.equal(claims.video.roomJoin, true);
    assert.notEqual(claims.video.canUpdateOwnMetadata, true);
    assert.deepEqual(JSON.parse(claims.metadata), { apiKey: t.apiKey });

    // The token binds the tab (LiveKit's HS256 verification, in the same process)...
    const tab = relay.tab({ token: t.token });
    await tab.connected();
    await relay.waitState(t.apiKey, 'online');
    tab.close();
    // ...and the app's JWTs still verify after LiveKit tokens were minted and verified.
    const again = await relay.token({ participantName: 'Ignored' }, { bearer: await signers[mode]({ claims: { sub: 'user-43', name: undefined, room: undefined } }) });
    assert.equal(again.identity, 'user-43');
    assert.match(again.roomName, /^voice-[0-9a-f]{32}$/, 'no room claim: a fresh room');
    assert.equal((await verify(relay, again.token)).name, 'Ignored', 'no name claim: the body\'s name');
  });
}

test('app-jwt: the JWKS key is chosen by kid; RSA and EC keys of the set both work', async () => {
  const relay = relays.jwks;
  const byRsa = await relay.token({}, { bearer: await signers.rs({ kid: 'r1', claims: { sub: 'rsa-user' } }) });
  assert.equal(byRsa.identity, 'rsa-user');
  for (const [what, jwt] of [
    ['unknown kid', await signers.es({ kid: 'nope' })],
    ['no kid', await signers.es()],
    ['EC signature under the RSA key\'s kid', await signers.es({ kid: 'r1' })],
    ['PS256 where the key names RS256', await sessionJwt({ alg: 'PS256', key: rsa.privateKey, kid: 'r1' })],
  ]) {
    const r = await relay.requestToken({}, { bearer: jwt });
    assert.equal(r.status, 401, `${what}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.error.code, 'unauthorized');
  }
});

test('app-jwt: forged, expired, wrong-audience, wrong-issuer, alg none and wrong-key JWTs get 401', async () => {
  for (const mode of ['hs', 'rs', 'es']) {
    const relay = relays[mode];
    const good = await signers[mode]();
    const [h, , s] = good.split('.');
    const tampered = Buffer.from(JSON.stringify({ sub: 'admin', iss: ISSUER, aud: AUDIENCE, exp: now() + 300, room: 'team-7' })).toString('base64url');
    const wrongKey = {
      hs: () => sessionJwt({ alg: 'HS256', key: new TextEncoder().encode(randomBytes(32).toString('hex')) }),
      rs: () => sessionJwt({ alg: 'RS256', key: otherRsa.privateKey }),
      es: () => sessionJwt({ alg: 'ES256', key: otherEc.privateKey }),
    }[mode];
    const cases = [
      ['forged (payload changed after signing)', `${h}.${tampered}.${s}`, /bad signature/],
      ['expired', await signers[mode]({ exp: now() - 120 }), /expired/],
      ['wrong audience', await signers[mode]({ aud: 'another-service' }), /audience/],
      ['wrong issuer', await signers[mode]({ iss: 'https://evil.example' }), /issuer/],
      ['no exp', await signers[mode]({ exp: null }), /exp/],
      ['alg none', new UnsecuredJWT({ room: 'team-7' }).setSubject('user-42').setIssuer(ISSUER).setAudience(AUDIENCE).setExpirationTime(now() + 300).encode(), /not valid/],
      ['wrong key', await wrongKey(), /bad signature|not valid/],
      // The classic confusion: an HMAC signature keyed with the RSA public key's PEM text.
      ['HS256 keyed with the public key', await sessionJwt({ alg: 'HS256', key: new TextEncoder().encode(rsaPem) }), mode === 'hs' ? /bad signature/ : /algorithm/],
      ['garbage', 'not.a.jwt', /not valid/],
    ];
    for (const [what, jwt, message] of cases) {
      const r = await relay.requestToken({}, { bearer: jwt });
      assert.equal(r.status, 401, `${mode} ${what}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.ok, false);
      assert.equal(r.body.error.code, 'unauthorized', `${mode} ${what}`);
      assert.match(r.body.error.message, message, `${mode} ${what}`);
    }
    const none = await relay.requestToken({}, { bearer: null });
    assert.equal(none.status, 401);
    assert.match(none.body.error.message, /Authorization: Bearer/);
  }
});

test('app-jwt: the body may not choose the room or the identity', async () => {
  const relay = relays.rs;
  for (const [body, field] of [[{ roomName: 'someone-elses-room' }, 'roomName'], [{ identity: 'admin' }, 'identity']]) {
    const r = await relay.requestToken(body, { bearer: await signers.rs() });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.error.code, 'invalid_request');
    assert.match(r.body.error.message, new RegExp(`^${field} cannot be chosen`));
  }
  const badRoom = await relay.requestToken({}, { bearer: await signers.rs({ claims: { room: 'has spaces' } }) });
  assert.equal(badRoom.status, 401);
  assert.match(badRoom.body.error.message, /room claim/);
});

test('app-jwt: with bare keys off, register binds only with the token', async () => {
  const relay = relays.hs;
  const t = await relay.token({}, { bearer: await signers.hs() });
  const tab = relay.tab();
  await tab.connected();
  const refused = await tab.register(t.apiKey);
  assert.equal(refused.ok, false);
  assert.equal(refused.error.code, 'unauthorized');
  assert.equal((await relay.keyState(t.apiKey)).body.state, 'issued');
  assert.deepEqual(await tab.register(t.token), { ok: true });
  await relay.waitState(t.apiKey, 'online');
  tab.close();
});
