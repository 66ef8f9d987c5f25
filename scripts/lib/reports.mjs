// Counting what the test runners report, from the machine-readable files they write into
// test-logs/reports/: JUnit XML (node:test, pytest, Schemathesis), libtest's JSON lines (cargo
// test executables), and one JSON object per runner ({"runner", "passed", "failed"}) for the
// runners that report only an exit status. A runner with no report counts as one failure.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';

/** Passed and failed test cases of a JUnit XML file (skipped cases count as neither). */
export function countJunit(text) {
  let passed = 0;
  let failed = 0;
  for (const m of text.matchAll(/<testcase\b[^>]*?(?:\/>|>([\s\S]*?)<\/testcase>)/g)) {
    const body = m[1] ?? '';
    if (/<(failure|error)\b/.test(body)) failed += 1;
    else if (!/<skipped\b/.test(body)) passed += 1;
  }
  return { passed, failed };
}

/** Passed and failed tests of libtest's JSON output (`--format json`, one event a line). */
export function countLibtest(text) {
  let passed = 0;
  let failed = 0;
  let finished = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith('{')) continue;
    let ev;
    try { ev = JSON.parse(line); } catch { continue; }
    if (ev.type === 'test' && ev.event === 'ok') passed += 1;
    else if (ev.type === 'test' && (ev.event === 'failed' || ev.event === 'timeout')) failed += 1;
    else if (ev.type === 'suite' && (ev.event === 'ok' || ev.event === 'failed')) finished = true;
  }
  // An executable that died before its suite's closing event did not finish: one failure more.
  return { passed, failed: failed + (finished ? 0 : 1) };
}

/** Counts of one report file, by its kind (its extension): .xml, .jsonl (libtest) or .json. */
export function countReport(path) {
  const text = readFileSync(path, 'utf8');
  if (path.endsWith('.xml')) return countJunit(text);
  if (path.endsWith('.jsonl')) return countLibtest(text);
  const { passed, failed } = JSON.parse(text);
  return { passed: Number(passed) || 0, failed: Number(failed) || 0 };
}

/** Writes a runner's own report: one JSON object with its counts. */
export function writeStatusReport(path, runner, passed, failed, detail) {
  writeFileSync(path, `${JSON.stringify({ runner, passed, failed, ...(detail ? { detail } : {}) })}\n`);
}

/**
 * Totals of the runners: each names the reports it should have written and its exit status. A
 * missing report, or a runner that failed although its reports show no failure, counts as one
 * failure more.
 */
export function total(runners) {
  const lines = [];
  let passed = 0;
  let failed = 0;
  for (const r of runners) {
    let p = 0;
    let f = 0;
    let note = '';
    for (const path of r.reports) {
      if (!existsSync(path)) {
        f += 1;
        note = ' (no report: the runner died before reporting)';
        continue;
      }
      try {
        const c = countReport(path);
        p += c.passed;
        f += c.failed;
      } catch (e) {
        f += 1;
        note = ` (unreadable report ${path}: ${e.message})`;
      }
    }
    if (r.status !== 0 && f === 0) {
      f += 1;
      note ||= ` (exit status ${r.status}, no failure in its reports)`;
    }
    passed += p;
    failed += f;
    lines.push(`${r.name}: ${p} passed, ${f} failed${note}`);
  }
  return { passed, failed, lines };
}
