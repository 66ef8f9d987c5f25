// Launches Debian's Chromium through playwright-core, with the flags this closed network needs,
// and runs axe-core's accessibility rules on a page.
import { chromium } from 'playwright-core';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { logDir } from '../harness/index.mjs';

export const shotDir = process.env.SCREENSHOT_DIR ?? join(logDir, 'screenshots');
mkdirSync(shotDir, { recursive: true });

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** A Chromium context; `options` adds to playwright's (`bypassCSP` lets axe-core run on a page
 * whose policy refuses injected scripts). */
export async function launch(options = {}) {
  const userDataDir = mkdtempSync(join(tmpdir(), 'relay-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    ...options,
    executablePath: CHROMIUM,
    headless: true,
    timeout: 30000,
    viewport: { width: 1100, height: 820 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--use-fake-ui-for-media-stream', '--use-fake-device-for-media-stream'],
  });
  return context;
}

/**
 * A new page of `context` in a browser without the microphone API (getUserMedia deleted before
 * any script runs), opened at `url`; `errors` collects the page's uncaught errors.
 */
export async function pageWithoutMicrophoneApi(context, url) {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.addInitScript(() => {
    delete MediaDevices.prototype.getUserMedia;
    if (navigator.mediaDevices) delete navigator.mediaDevices.getUserMedia;
  });
  await page.goto(url, { waitUntil: 'load', timeout: 15000 });
  return { page, errors };
}

export async function shot(page, name) {
  await page.screenshot({ path: join(shotDir, `${name}.png`) });
}

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const axeDir = join(logDir, 'axe');
mkdirSync(axeDir, { recursive: true });

/**
 * Runs the axe-core accessibility rules on the page as it is now; writes every violation to
 * test-logs/axe/<name>.json and returns the serious and critical ones.
 */
export async function accessibilityProblems(page, name) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.addScriptTag({ content: axeSource });
  const violations = await page.evaluate(async () => {
    const result = await window.axe.run(document, { resultTypes: ['violations'] });
    return result.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(' ')) }));
  });
  writeFileSync(join(axeDir, `${name}.json`), JSON.stringify(violations, null, 2));
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}

/**
 * A journey's screenshots, each state also scanned with axe-core: `shot(page, name)` takes and
 * scans; `scanned` names the states, `a11y` holds their serious and critical violations.
 */
export function journey() {
  const scanned = [];
  const a11y = [];
  return {
    scanned,
    a11y,
    async shot(page, name) {
      await shot(page, name);
      scanned.push(name);
      for (const v of await accessibilityProblems(page, name)) a11y.push({ state: name, ...v });
    },
  };
}
