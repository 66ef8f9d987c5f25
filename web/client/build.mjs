// Builds the npm package @voice-relay/client into dist/: one ES module per source file (not
// bundled, so socket.io-client, livekit-client and react stay the app's own peer dependencies,
// and every entry imports the very client module the main entry is), and .d.ts from tsc.
// `npm run build` here, and `npm pack` (its prepack step).
import { build } from 'esbuild';
import { spawnSync } from 'node:child_process';
import { readdir, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const src = join(here, 'src');
const dist = join(here, 'dist');
await rm(dist, { recursive: true, force: true });
const files = (await readdir(src, { recursive: true })).filter((f) => f.endsWith('.ts')).map((f) => join(src, f));
await build({ entryPoints: files, outdir: dist, outbase: src, bundle: false, format: 'esm', target: 'es2020', logLevel: 'warning' });
const tscBin = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const tsc = spawnSync(process.execPath, [tscBin, '-p', join(here, 'tsconfig.build.json')], { stdio: 'inherit' });
if (tsc.status !== 0) throw new Error(`tsc (declarations) failed with status ${tsc.status}`);
console.log('built web/client/dist');
