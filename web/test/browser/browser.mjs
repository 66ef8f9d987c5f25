// Launches Debian's Chromium through playwright-core, with the flags this closed network needs.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { repoRoot } from '../protocol/harness.mjs';

export const shotDir = process.env.SCREENSHOT_DIR ?? join(repoRoot, 'test-logs', 'screenshots');
mkdirSync(shotDir, { recursive: true });

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export async function launch() {
  const userDataDir = mkdtempSync(join(tmpdir(), 'relay-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    timeout: 30000,
    viewport: { width: 1100, height: 820 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--use-fake-ui-for-media-stream', '--use-fake-device-for-media-stream'],
  });
  return context;
}

export async function shot(page, name) {
  await page.screenshot({ path: join(shotDir, `${name}.png`) });
}
