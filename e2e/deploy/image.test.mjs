// deploy/Dockerfile built by podman on local stand-ins for its public base images (the same
// Dockerfile a Docker user builds with the defaults): the image runs as a non-root user, keeps
// its HEALTHCHECK, carries both binaries, the demo page and the system's roots, and refuses to
// start without its secrets, naming them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASES, IMAGE, buildImage, inspectImage, podman } from '../harness/index.mjs';

test('deploy/Dockerfile builds on the local bases; the image is non-root, with its health check and both binaries', async () => {
  const seconds = await buildImage();
  const image = await inspectImage(IMAGE);
  const base = await inspectImage(BASES.runtime);
  console.log(`# image ${IMAGE}: built in ${seconds.toFixed(0)} s; ${(image.Size / 1e6).toFixed(1)} MB, of which ${((image.Size - base.Size) / 1e6).toFixed(1)} MB above the Debian base`);

  assert.equal(image.Config.User, '10001');
  assert.deepEqual(image.Config.Entrypoint, ['relay']);
  // Docker format: the health check is kept (OCI would drop it).
  const health = image.Healthcheck;
  assert.deepEqual(health?.Test, ['CMD', 'relay', 'healthcheck', 'http://127.0.0.1:3001/readyz']);
  assert.deepEqual(image.Config.ExposedPorts, { '3001/tcp': {}, '3002/tcp': {} });

  const relay = await podman(['run', '--rm', IMAGE, '--version']);
  assert.equal(relay.code, 0, relay.out);
  assert.match(relay.stdout, /^relay \d+\.\d+\.\d+/);
  const worker = await podman(['run', '--rm', '--entrypoint', 'agent-worker', IMAGE, '--version']);
  assert.equal(worker.code, 0, worker.out);
  assert.match(worker.stdout, /^agent-worker \d+\.\d+\.\d+/);

  const inside = await podman(['run', '--rm', '--entrypoint', 'sh', IMAGE, '-c',
    'id -u; test -s "$RELAY_WEB_DIR/index.html" && echo page; grep -c "BEGIN CERTIFICATE" /etc/ssl/certs/ca-certificates.crt']);
  assert.equal(inside.code, 0, inside.out);
  const [uid, page, certificates] = inside.stdout.trim().split('\n');
  assert.equal(uid, '10001');
  assert.equal(page, 'page');
  assert.ok(Number(certificates) > 50, `the image holds the system's roots (${certificates} certificates)`);
});

test('the image refuses to start without its secrets and names each (exit 64)', async () => {
  const r = await podman(['run', '--rm', IMAGE]);
  assert.equal(r.code, 64, r.out);
  for (const name of ['LIVEKIT_API_KEY', 'LIVEKIT_API_SECRET', 'RELAY_WORKER_SECRET', 'RELAY_SESSION_KEYS', 'RELAY_TOKEN_ISSUER_SECRET']) {
    assert.match(r.out, new RegExp(`${name} is required`));
  }
});
