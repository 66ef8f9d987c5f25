// Builds the browser side in order: the npm package @voice-relay/client (client/build.mjs, into
// client/dist/), then the demo page that imports it by name (demo/build.mjs, into dist/, which
// the relay serves).
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
for (const part of ['client', 'demo']) {
  const r = spawnSync(process.execPath, [join(here, part, 'build.mjs')], { stdio: 'inherit', cwd: join(here, part) });
  if (r.status !== 0) throw new Error(`${part}/build.mjs failed with status ${r.status}`);
}
