// Builds the browser side into dist/: the demo page (index.html, styles.css, app.js) and the
// client library as an ES module (lib/client.js) for other pages.
import { build } from 'esbuild';
import { copyFile, mkdir, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
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
