// deploy/k8s/ under `podman kube play`: the relay's and the worker's Deployments start with their
// ConfigMaps and the Secret (fresh values of secret.example.yaml's keys), as the user and with
// the root filesystem the manifests ask for, and each answers its probes' paths on its port.
//
// What this does not prove: Services, the Namespace and the PodDisruptionBudget (podman plays
// none of them), probes run by a kubelet (the test asks the probe paths from inside each pod;
// podman turns a liveness probe into a curl health check, and curl is not in the image), the
// worker reaching the relay by its Service name, rolling updates, more than one replica.
// podman 4.3 stores a Secret it plays from a manifest in a form its own envFrom cannot read back:
// the Secret is stored with `podman secret create` in the form kube play reads (a JSON object of
// base64 values).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import YAML from 'yaml';
import { IMAGE, buildImage, eventually, podman, podmanOk, repoRoot, stackSecrets } from '../harness/index.mjs';

const K8S = join(repoRoot, 'deploy/k8s');
const PLAYED = new Set(['Deployment', 'ConfigMap']);

let file;
let secretName;
let secrets;
let deployments;
let configMaps;
before(async () => {
  await buildImage();
  const docs = ['relay.yaml', 'worker.yaml'].flatMap((f) => YAML.parseAllDocuments(readFileSync(join(K8S, f), 'utf8')).map((d) => d.toJSON()));
  // The manifests as shipped, but for the image (the one just built) and the worker's LiveKit
  // address (the example host is not contacted from here; no LiveKit runs beside the pods).
  const played = docs.filter((d) => PLAYED.has(d?.kind));
  deployments = played.filter((d) => d.kind === 'Deployment');
  for (const d of deployments) for (const c of d.spec.template.spec.containers) c.image = IMAGE;
  configMaps = played.filter((d) => d.kind === 'ConfigMap');
  for (const m of configMaps) if (m.data.RELAY_URL) delete m.data.LIVEKIT_URL;
  // The Secret: secret.example.yaml's keys, with fresh values.
  const example = YAML.parse(readFileSync(join(K8S, 'secret.example.yaml'), 'utf8'));
  secretName = example.metadata.name;
  const fresh = stackSecrets();
  secrets = Object.fromEntries(Object.keys(example.stringData).map((k) => [k, fresh[k]]));
  assert.ok(Object.values(secrets).every(Boolean), 'every key of the example Secret has a fresh value');
  const dir = mkdtempSync(join(tmpdir(), 'kube-'));
  file = join(dir, 'voice-relay.yaml');
  writeFileSync(file, played.map((d) => YAML.stringify(d)).join('---\n'));
  await podman(['kube', 'down', file]);
  await podman(['secret', 'rm', secretName]);
  const encoded = JSON.stringify(Object.fromEntries(Object.entries(secrets).map(([k, v]) => [k, Buffer.from(v).toString('base64')])));
  const secretFile = join(dir, 'secret.json');
  writeFileSync(secretFile, encoded, { mode: 0o600 });
  await podmanOk(['secret', 'create', secretName, secretFile]);
});
after(async () => {
  if (file) await podman(['kube', 'down', file], { ms: 120000 });
  if (secretName) await podman(['secret', 'rm', secretName]);
});

/** The container podman made for a Deployment's container: `<name>-pod-0-<container>`. */
const containerOf = (deployment, container) => `${deployment.metadata.name}-pod-0-${container.name}`;

/** A probe's URL as seen from inside its pod: its path on the container port it names. */
function probeUrl(container, probe) {
  const { port, path } = probe.httpGet;
  const number = typeof port === 'number' ? port : container.ports.find((p) => p.name === port).containerPort;
  return `http://127.0.0.1:${number}${path}`;
}

test('podman kube play starts the Deployments with their ConfigMaps and the Secret; each answers its probes\' paths', async () => {
  const started = Date.now();
  const played = await podman(['kube', 'play', file], { ms: 180000 });
  assert.equal(played.code, 0, played.out);
  for (const d of deployments) {
    const spec = d.spec.template.spec;
    for (const c of spec.containers) {
      const name = containerOf(d, c);
      for (const kind of ['readinessProbe', 'livenessProbe']) {
        const url = probeUrl(c, c[kind]);
        await eventually(async () => {
          const r = await podman(['exec', name, 'relay', 'healthcheck', url]);
          if (r.code !== 0) {
            const state = (await podman(['inspect', name, '--format', '{{.State.Status}}'])).stdout.trim();
            if (state !== 'running') throw new Error(`${name} is ${state}: ${(await podman(['logs', '--tail', '30', name])).out}`);
          }
          return r.code === 0;
        }, `${name}'s ${kind} (${url})`, 60000, 500);
      }
      // The pod runs as the manifest says: its user, a read-only root, the settings it names.
      const inside = await podmanOk(['exec', name, 'sh', '-c', 'id -u; touch /probe-write 2>/dev/null && echo writable || echo read-only']);
      assert.deepEqual(inside.trim().split('\n'), [String(spec.securityContext.runAsUser), 'read-only']);
    }
  }
  console.log(`# deploy/k8s: both Deployments answered their probes ${((Date.now() - started) / 1000).toFixed(1)} s after podman kube play`);
});

test('each container\'s environment holds its ConfigMap\'s settings and the Secret\'s values', async () => {
  const maps = Object.fromEntries(configMaps.map((m) => [m.metadata.name, m.data]));
  for (const d of deployments) {
    for (const c of d.spec.template.spec.containers) {
      const name = containerOf(d, c);
      const env = Object.fromEntries((await podmanOk(['exec', name, 'env'])).split('\n').filter(Boolean)
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
      for (const from of c.envFrom) {
        const expected = from.configMapRef ? maps[from.configMapRef.name] : from.secretRef.name === secretName ? secrets : undefined;
        assert.ok(expected, `${name}: ${JSON.stringify(from)} names a ConfigMap or Secret of the manifests`);
        for (const [k, v] of Object.entries(expected)) assert.equal(env[k], v, `${name}: ${k}`);
      }
      const logs = (await podman(['logs', name])).out;
      for (const s of Object.values(secrets).filter((v) => v.length >= 8)) assert.ok(!logs.includes(s), `${name}'s log holds no secret`);
    }
  }
});

test('podman kube down removes every pod and container it started', async () => {
  const r = await podman(['kube', 'down', file], { ms: 120000 });
  assert.equal(r.code, 0, r.out);
  for (const d of deployments) {
    const left = await podman(['pod', 'exists', `${d.metadata.name}-pod-0`]);
    assert.notEqual(left.code, 0, `${d.metadata.name}'s pod is gone`);
  }
});
