// Builds the browser side. Into dist/: the demo page (index.html, styles.css, app.js) and the
// client library as an ES module (lib/client.js) for other pages. Into package/dist/: the npm
// package @voice-relay/client (one ES module per source file, dependencies left as imports, and
// .d.ts from tsc). `node build.mjs package` builds only the npm package (its prepack step), so
// packing never touches the demo page that a running relay serves.
import { build } from 'esbuild';
import { spawnSync } from 'node:child_process';
import { copyFile, mkdir, readdir, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const onlyPackage = process.argv[2] === 'package';

if (!onlyPackage) {
  const dist = join(here, 'dist');
  await rm(dist, { recursive: true, force: true });
  await mkdir(dist, { recursive: true });
  const common = { bundle: true, format: 'esm', target: 'es2020', sourcemap: true, logLevel: 'warning' };
  await build({ ...common, entryPoints: [join(here, 'src/demo/main.ts')], outfile: join(dist, 'app.js'), minify: true });
  await build({ ...common, entryPoints: [join(here, 'src/client.ts')], outfile: join(dist, 'lib/client.js') });
  // The same library for Node (tests, server-side tabs), with its dependencies left to node_modules.
  await build({ ...common, entryPoints: [join(here, 'src/client.ts')], outfile: join(dist, 'lib/client.node.js'), platform: 'node', packages: 'external' });
  await copyFile(join(here, 'index.html'), join(dist, 'index.html'));
  await copyFile(join(here, 'styles.css'), join(dist, 'styles.css'));
  console.log('built web/dist');
}

// The package: not bundled, so socket.io-client, livekit-client and react stay the app's own
// (peer dependencies), and the React entry imports the very client module the main entry is.
const pkgDist = join(here, 'package/dist');
await rm(pkgDist, { recursive: true, force: true });
const reactDir = join(here, 'src/react');
const reactFiles = (await readdir(reactDir)).filter((f) => f.endsWith('.ts')).map((f) => join(reactDir, f));
await build({
  entryPoints: [join(here, 'src/client.ts'), ...reactFiles],
  outdir: pkgDist,
  outbase: join(here, 'src'),
  bundle: false,
  format: 'esm',
  target: 'es2020',
  logLevel: 'warning',
});
const tsc = spawnSync(process.execPath, [join(here, 'node_modules/typescript/bin/tsc'), '-p', join(here, 'tsconfig.package.json')], { stdio: 'inherit' });
if (tsc.status !== 0) throw new Error(`tsc (declarations) failed with status ${tsc.status}`);
console.log('built web/package/dist');
