// The documentation as a newcomer follows it, checked without running anything: README.md, every
// docs/*.md and the packages' READMEs. Every relative link leads to a file of the repository and
// every #anchor to a heading of its target (GitHub's slugs); every `scripts/manage.sh <command>`
// they show is one that scripts/manage.sh's usage lists; every RELAY_…, WORKER_…, AGENT_… and
// LIVEKIT_… setting they name is read somewhere in the sources (so no page names a setting that
// does not exist); README.md stays short and points at every docs page.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, extname, join, relative, resolve, sep } from 'node:path';
import { repoRoot as root } from '../harness/paths.mjs';

const README_LIMIT = 8.5 * 1024;

const docsDir = join(root, 'docs');
const docsPages = readdirSync(docsDir)
  .filter((f) => f.endsWith('.md'))
  .sort()
  .map((f) => join('docs', f));
const pages = [
  'README.md',
  ...docsPages,
  'web/client/README.md',
  'agent-worker/python/README.md',
  'agent-worker/node/README.md',
  'agent-worker/reference/python/README.md',
  'agent-worker/reference/node/README.md',
].filter((p) => existsSync(join(root, p)));
// The pages this repository's own docs are written in: no links out of the repository there.
const ownPages = new Set(['README.md', ...docsPages]);

/** A Markdown file split into its prose (fenced blocks blanked, line numbers kept) and its fenced blocks. */
function parse(rel) {
  const text = readFileSync(join(root, rel), 'utf8');
  const lines = text.split('\n');
  const prose = [];
  const blocks = [];
  let fence = null;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const m = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/.exec(line);
    if (fence) {
      if (m && m[1][0] === fence.marker[0] && m[1].length >= fence.marker.length && line.trim() === m[1]) {
        blocks.push(fence);
        fence = null;
      } else {
        fence.lines.push(line);
      }
      prose.push('');
    } else if (m) {
      fence = { marker: m[1], lang: m[2].toLowerCase(), line: i + 1, lines: [] };
      prose.push('');
    } else {
      prose.push(line);
    }
  }
  assert.equal(fence, null, `${rel}:${fence?.line}: a code fence is never closed`);
  return { rel, text, prose: prose.join('\n'), blocks };
}

/** Inline code spans of a prose text, and the text with them replaced by a placeholder. */
function codeSpans(prose) {
  const spans = [];
  const rest = prose.replace(/(`+)([\s\S]*?[^`])\1(?!`)/g, (_, _ticks, body) => {
    spans.push(body.replace(/\s+/g, ' ').trim());
    return 'code' + '\n'.repeat(body.split('\n').length - 1); // lines keep their numbers
  });
  return { spans, rest };
}

/** GitHub's anchor for a heading: lowercase, punctuation dropped except - and _, spaces to -. */
function slug(heading) {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links keep their text
    .replace(/<[^>]+>/g, '') // inline HTML
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

const anchorCache = new Map();
/** Every anchor a Markdown file offers: its headings' slugs (repeats numbered) and explicit ids. */
function anchorsOf(rel) {
  if (anchorCache.has(rel)) return anchorCache.get(rel);
  const { prose } = parse(rel);
  const anchors = new Set();
  const seen = new Map();
  for (const line of prose.split('\n')) {
    const h = /^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$/.exec(line);
    if (h) {
      const base = slug(h[1]);
      const n = seen.get(base) ?? 0;
      seen.set(base, n + 1);
      anchors.add(n === 0 ? base : `${base}-${n}`);
    }
    for (const a of line.matchAll(/<a\s+(?:name|id)="([^"]+)"/g)) anchors.add(a[1]);
  }
  anchorCache.set(rel, anchors);
  return anchors;
}

/** Link targets of a page's prose: inline links and images, and reference definitions. */
function links(page) {
  const { rest } = codeSpans(page.prose);
  const found = [];
  const lineOf = (index) => rest.slice(0, index).split('\n').length;
  const inline = /!?\[(?:[^[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)/g;
  for (const m of rest.matchAll(inline)) found.push({ target: m[1].replace(/^<|>$/g, ''), line: lineOf(m.index) });
  for (const m of rest.matchAll(/^ {0,3}\[[^\]]+\]:\s+(\S+)/gm)) found.push({ target: m[1], line: lineOf(m.index) });
  return found;
}

const parsed = pages.map(parse);

test('README.md is a short start: at most 8.5 KB', () => {
  const size = statSync(join(root, 'README.md')).size;
  assert.ok(size <= README_LIMIT, `README.md is ${size} bytes; keep it at most ${README_LIMIT}, move detail to docs/`);
});

test('README.md links every docs page, and each docs page opens with its title and a purpose', () => {
  const readmeTargets = new Set(
    links(parsed.find((p) => p.rel === 'README.md')).map((l) => l.target.split('#')[0]),
  );
  for (const page of docsPages) {
    assert.ok(readmeTargets.has(page), `README.md does not link ${page}`);
    const lines = readFileSync(join(root, page), 'utf8').split('\n');
    assert.match(lines[0], /^# \S/, `${page}: the first line is not its title`);
    assert.equal(lines[1], '', `${page}: a blank line after the title`);
    assert.match(lines[2] ?? '', /^[^#\s|`-]/, `${page}: the title is not followed by a sentence saying what the page is for`);
  }
});

test('every relative link resolves to a file, and every #anchor to a heading of its target', () => {
  const problems = [];
  let checked = 0;
  for (const page of parsed) {
    for (const { target, line } of links(page)) {
      const where = `${page.rel}:${line}: ${target}`;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) {
        if (ownPages.has(page.rel)) problems.push(`${where}: points outside the repository`);
        continue;
      }
      checked++;
      const hash = target.indexOf('#');
      const pathPart = decodeURIComponent(hash < 0 ? target : target.slice(0, hash));
      const anchor = hash < 0 ? null : decodeURIComponent(target.slice(hash + 1));
      const abs = pathPart === ''
        ? join(root, page.rel)
        : pathPart.startsWith('/') ? join(root, pathPart) : resolve(root, dirname(page.rel), pathPart);
      const rel = relative(root, abs);
      if (rel.startsWith('..') || rel.startsWith(sep)) {
        problems.push(`${where}: leaves the repository`);
        continue;
      }
      if (!existsSync(abs)) {
        problems.push(`${where}: no such file (${rel})`);
        continue;
      }
      if (anchor === null) continue;
      if (anchor === '') {
        problems.push(`${where}: empty anchor`);
      } else if (extname(abs).toLowerCase() === '.md') {
        if (!anchorsOf(rel).has(anchor)) {
          problems.push(`${where}: ${rel} has no heading with the anchor #${anchor} (it has: ${[...anchorsOf(rel)].join(', ')})`);
        }
      } else if (!/^L\d+(-L\d+)?$/.test(anchor)) {
        problems.push(`${where}: #${anchor} in a file that is not Markdown`);
      }
    }
  }
  assert.deepEqual(problems, []);
  assert.ok(checked > 20, `only ${checked} relative links found: is the link parser broken?`);
});

test('the slug rules follow GitHub', () => {
  assert.equal(slug('The two commands'), 'the-two-commands');
  assert.equal(slug("Bird's-eye view"), 'birds-eye-view');
  assert.equal(slug('Python agents: `voice-relay-agent`'), 'python-agents-voice-relay-agent');
  assert.equal(slug('The client library: `@voice-relay/client`'), 'the-client-library-voice-relayclient');
  assert.equal(slug('RELAY_TOKEN_MODE and [links](x.md)'), 'relay_token_mode-and-links');
});

/** scripts/manage.sh's commands and options, as its usage lists them. */
function manageUsage() {
  const script = readFileSync(join(root, 'scripts/manage.sh'), 'utf8');
  const m = /^usage\(\) \{\n\s*cat <<EOF\n([\s\S]*?)\nEOF$/m.exec(script);
  assert.ok(m, 'scripts/manage.sh has no usage() heredoc');
  const commands = new Set();
  const options = new Map();
  for (const line of m[1].split('\n')) {
    const c = /^ {2}([a-z][a-z-]*)((?:\s+\[?--?[a-z][a-z-]*)*)/.exec(line);
    if (!c) continue;
    commands.add(c[1]);
    const opts = options.get(c[1]) ?? new Set();
    for (const o of c[2].matchAll(/--?[a-z][a-z-]*/g)) opts.add(o[0]);
    options.set(c[1], opts);
  }
  return { commands, options };
}

test('every scripts/manage.sh command the docs show is in its usage', () => {
  const { commands, options } = manageUsage();
  assert.ok(commands.has('start') && commands.has('test'), `usage lists ${[...commands]}`);
  const problems = [];
  let seen = 0;
  for (const page of parsed) {
    const code = [...codeSpans(page.prose).spans, ...page.blocks.map((b) => b.lines.join('\n'))].join('\n');
    for (const m of code.matchAll(/(?:^|[\s(;&|])(?:\.\/)?(?:scripts\/)?manage\.sh[ \t]+([a-z][a-z-]*)((?:[ \t]+--?[a-z][a-z-]*)*)/gm)) {
      seen++;
      const [, command, flags] = m;
      if (!commands.has(command)) {
        problems.push(`${page.rel}: scripts/manage.sh ${command}: not a command of scripts/manage.sh (${[...commands].join(', ')})`);
        continue;
      }
      for (const flag of flags.match(/--?[a-z][a-z-]*/g) ?? []) {
        if (!options.get(command).has(flag)) problems.push(`${page.rel}: scripts/manage.sh ${command} ${flag}: not an option its usage lists`);
      }
    }
  }
  assert.deepEqual(problems, []);
  assert.ok(seen >= 5, `only ${seen} scripts/manage.sh commands found in the docs`);
});

const SETTING = /\b(?:RELAY|WORKER|AGENT|LIVEKIT)_[A-Z0-9_]*[A-Z0-9]\b/g;
const SOURCES = ['relay/src', 'agent-worker', 'scripts', 'deploy'];
const SKIP_DIRS = new Set(['node_modules', 'dist', 'target', '.venv', '__pycache__', '.mypy_cache', '.pytest_cache', '.ruff_cache', '.git']);

/**
 * Every setting name the sources (not their Markdown) mention, and the suffixes they append to a
 * name they compose (`f"{prefix}_API_KEY"`, `${prefix}_MODEL`): a composed name counts when a
 * source names its prefix and appends its suffix.
 */
function settingsInSources() {
  const names = new Set();
  const suffixes = new Set();
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (!SKIP_DIRS.has(entry.name)) walk(path);
      } else if (entry.isFile() && !entry.name.endsWith('.md') && statSync(path).size < 2_000_000) {
        const text = readFileSync(path, 'utf8');
        if (text.includes('\0')) continue;
        for (const m of text.matchAll(SETTING)) names.add(m[0]);
        for (const m of text.matchAll(/\}(_[A-Z0-9_]*[A-Z0-9])\b/g)) suffixes.add(m[1]);
      }
    }
  };
  for (const dir of SOURCES) walk(join(root, dir));
  const has = (name) => names.has(name) ||
    [...suffixes].some((s) => name.endsWith(s) && names.has(name.slice(0, -s.length)));
  return { names, has };
}

test('every RELAY_, WORKER_, AGENT_ and LIVEKIT_ setting the docs name exists in the sources', () => {
  const known = settingsInSources();
  assert.ok(known.names.has('RELAY_WORKER_SECRET') && known.names.has('WORKER_CATALOG'), 'the source scan found no settings');
  assert.ok(!known.has('RELAY_NO_SUCH_SETTING'), 'the source scan accepts any name');
  const problems = [];
  let named = 0;
  for (const page of parsed) {
    const lines = page.text.split('\n');
    lines.forEach((line, i) => {
      for (const m of line.matchAll(SETTING)) {
        named++;
        if (!known.has(m[0])) problems.push(`${page.rel}:${i + 1}: ${m[0]} appears nowhere in ${SOURCES.join(', ')}`);
      }
    });
  }
  assert.deepEqual(problems, []);
  assert.ok(named > 50, `only ${named} settings named in the docs`);
});
