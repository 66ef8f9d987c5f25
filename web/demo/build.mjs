// Builds the demo page into web/dist/ (what the relay serves from RELAY_WEB_DIR): index.html,
// styles.css and app.js (bundled with esbuild), and the client library as one ES module for
// other pages (lib/client.js) and for Node (lib/client.node.js: the tests, server-side tabs).
// The page imports @voice-relay/client by its name, as any app would: build the package first
// (web/build.mjs does both, in order).
import { build } from 'esbuild';
import { copyFile, mkdir, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const dist = join(here, '../dist');
await rm(dist, { recursive: true, force: true });
await mkdir(dist, { recursive: true });
const common = { bundle: true, format: 'esm', target: 'es2020', sourcemap: true, logLevel: 'warning' };
await build({ ...common, entryPoints: [join(here, 'src/main.ts')], outfile: join(dist, 'app.js'), minify: true });
const library = { contents: "export * from '@voice-relay/client';", resolveDir: here, loader: 'js' };
await build({ ...common, stdin: library, outfile: join(dist, 'lib/client.js') });
await build({ ...common, stdin: library, outfile: join(dist, 'lib/client.node.js'), platform: 'node', external: ['socket.io-client', 'livekit-client'] });
await copyFile(join(here, 'index.html'), join(dist, 'index.html'));
await copyFile(join(here, 'styles.css'), join(dist, 'styles.css'));
console.log('built web/dist');
