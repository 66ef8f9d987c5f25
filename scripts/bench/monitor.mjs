// Which Redis commands each relay process sends, read from Redis's `MONITOR` feed: a command a
// client sent is one line with the client's address; a command run inside a script is a line
// marked `lua` and is counted apart (it is no round trip). A client address is traced to its
// process through /proc (the socket's inode among the process's descriptors), so the counts
// are per relay node whatever connections it opened.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { connect } from 'node:net';

/** Local `ip:port` of every TCP socket held by `pid`. */
function addressesOf(pid) {
  const inodes = new Set();
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m) inodes.add(m[1]);
      } catch { /* closed meanwhile */ }
    }
  } catch { return []; }
  const out = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text;
    try { text = readFileSync(table, 'utf8'); } catch { continue; }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || !inodes.has(f[9])) continue;
      const [hexIp, hexPort] = f[1].split(':');
      const port = parseInt(hexPort, 16);
      const ip = hexIp.length === 8
        ? [3, 2, 1, 0].map((i) => parseInt(hexIp.slice(i * 2, i * 2 + 2), 16)).join('.')
        : 'v6';
      out.push(`${ip}:${port}`);
    }
  }
  return out;
}

/**
 * The shape of a command, with the digests and ids in it blanked: `EVALSHA va:k va:if …` for a
 * script (by the prefixes of its keys), `PUBLISH <channel>` for a publish.
 */
function shape(args) {
  const blank = (s) => s
    .replace(/\{[0-9a-f]{16,}\}/g, '')
    .replace(/[0-9a-f]{16,}/g, '')
    // A session's tag after its key's digest (hex, its leading zeros dropped).
    .replace(/::[0-9a-f]+/g, '::')
    .replace(/#[^#]{8,}#/g, '#*#')
    .replace(/:\d{6,}$/, ':')
    .replace(/[:#]+$/, '');
  const cmd = (args[0] ?? '').toUpperCase();
  if (cmd === 'EVALSHA' || cmd === 'EVAL') {
    const n = Number(args[2] ?? 0);
    return `script(${args.slice(3, 3 + n).map(blank).join(' ')})`;
  }
  if (/PUBLISH$|SUBSCRIBE$/.test(cmd)) return `${cmd} ${blank(args[1] ?? '')}`;
  if (cmd === 'CLUSTER' || cmd === 'PUBSUB' || cmd === 'CLIENT' || cmd === 'INFO') return `${cmd} ${(args[1] ?? '').toUpperCase()}`;
  if (args.length > 1) return `${cmd} ${blank(args[1])}`;
  return cmd;
}

/** The quoted arguments of one MONITOR line. */
function argsOf(line) {
  const out = [];
  const re = /"((?:[^"\\]|\\.)*)"/g;
  let m;
  while ((m = re.exec(line)) !== null) out.push(m[1]);
  return out;
}

/**
 * Watches the Redis servers on `ports` and counts, while `counting`, each command by the process
 * that sent it (`who`: pid → label, e.g. the relay nodes) and by its shape. `stop()` ends it.
 */
export async function monitor(ports, who) {
  const byAddress = new Map();
  const resolve = (addr) => {
    if (!byAddress.has(addr)) {
      for (const [pid, label] of Object.entries(who)) {
        for (const a of addressesOf(pid)) byAddress.set(a, label);
      }
      if (!byAddress.has(addr)) byAddress.set(addr, 'other');
    }
    return byAddress.get(addr);
  };
  const state = { counting: false, counts: {}, inside: 0, published: {} };
  const socks = await Promise.all(ports.map((port) => new Promise((ok, fail) => {
    const sock = connect(port, '127.0.0.1', () => { sock.write('MONITOR\r\n'); ok(sock); });
    sock.once('error', fail);
    let rest = '';
    sock.on('data', (d) => {
      rest += d.toString('latin1');
      let nl;
      while ((nl = rest.indexOf('\r\n')) >= 0) {
        const line = rest.slice(0, nl);
        rest = rest.slice(nl + 2);
        if (!state.counting || !line.startsWith('+') || line === '+OK') continue;
        const m = /^\+[\d.]+ \[\d+ ([^\]]+)\] (.*)$/.exec(line);
        if (!m) continue;
        if (m[1] === 'lua') {
          state.inside += 1;
          // The key events scripts publish (the key's Redis name), by channel; a node's channel
          // also carries calls and their outcomes, which are not counted here.
          const args = /^"(S?PUBLISH)" "([^"]*)" "va:k:/i.exec(m[2]);
          if (args) state.published[args[2]] = (state.published[args[2]] ?? 0) + 1;
          continue;
        }
        const label = resolve(m[1]);
        const key = shape(argsOf(m[2]));
        const mine = (state.counts[label] ??= {});
        mine[key] = (mine[key] ?? 0) + 1;
      }
    });
  })));
  // MONITOR answers +OK before the feed; give it a moment to be on.
  await new Promise((r) => setTimeout(r, 200));
  return {
    /** Counts from now on, from zero. */
    start() { state.counts = {}; state.inside = 0; state.published = {}; state.counting = true; },
    /**
     * Stops counting: `{ counts: {label: {shape: n}}, inside, published: {channel: n} }` (the key
     * events scripts published, by channel).
     */
    take() { state.counting = false; return { counts: state.counts, inside: state.inside, published: state.published }; },
    stop() { for (const s of socks) s.destroy(); },
  };
}
