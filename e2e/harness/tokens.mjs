// Session tokens made by hand, for the tests that check what the relay and the worker refuse:
// signed with a given Ed25519 seed (a `kid:seed` entry of RELAY_SESSION_KEYS, or any other), or
// with HMAC, or unsigned, with any claims. What the relay mints is checked against these.
import { createHash, createHmac, createPrivateKey, createPublicKey, randomBytes, sign } from 'node:crypto';

/** The digest a key is named by in a session token (the first 16 bytes of its SHA-256, hex). */
export const keyDigest = (key) => createHash('sha256').update(key).digest('hex').slice(0, 32);

/** A session id of `key`: `s_`, its digest, 16 random hex characters. */
export const sessionIdOf = (key) => `s_${keyDigest(key)}${randomBytes(8).toString('hex')}`;

const b64 = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
const now = () => Math.floor(Date.now() / 1000);

/** Claims as the relay mints them for `key`, with `over` applied. */
export function sessionClaims(key, over = {}) {
  const t = now();
  return {
    iss: 'voice-relay', aud: 'voice-agent', sub: keyDigest(key), sid: sessionIdOf(key),
    scope: 'list call mode status', iat: t, nbf: t, exp: t + 600, ...over,
  };
}

/** The Ed25519 private key of a RELAY_SESSION_KEYS entry (`kid:seed`). */
function ed25519(entry) {
  const seed = Buffer.from(entry.split(':')[1], 'base64url');
  const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]);
  return createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' });
}

/** The public key (raw 32 bytes) of a `kid:seed` entry. */
export function publicKeyOf(entry) {
  const der = createPublicKey(ed25519(entry)).export({ format: 'der', type: 'spki' });
  return der.subarray(der.length - 32);
}

/**
 * A token with `claims`: signed by the `kid:seed` `entry` (EdDSA, its kid unless `kid` says
 * otherwise), or with `alg: 'HS256'` keyed by `hmacKey`, or `alg: 'none'` and no signature.
 */
export function signToken(claims, { entry, kid = entry?.split(':')[0], alg = 'EdDSA', hmacKey } = {}) {
  const header = { alg, typ: 'JWT', ...(kid ? { kid } : {}) };
  const input = `${b64(header)}.${b64(claims)}`;
  if (alg === 'none') return `${input}.`;
  if (alg === 'HS256') return `${input}.${createHmac('sha256', hmacKey).update(input).digest('base64url')}`;
  return `${input}.${sign(null, Buffer.from(input), ed25519(entry)).toString('base64url')}`;
}
