// Process helpers of the voice-room tests (room.mjs): the LiveKit server binary, long-running
// processes with their output in log files, bounded stops and bounded waits.
import { spawn, execFileSync } from 'node:child_process';
import { createWriteStream, existsSync } from 'node:fs';
import { join } from 'node:path';
import { within, sleep } from '../protocol/harness.mjs';

export function livekitBin(toolsDir) {
  const local = join(toolsDir, 'bin/livekit-server');
  if (existsSync(local)) return local;
  try {
    return execFileSync('sh', ['-c', 'command -v livekit-server']).toString().trim();
  } catch {
    return null;
  }
}

/** Starts a long-running process with its output in `logPath`; `onLine` sees stdout lines. */
export function launchLogged(logPath, cmd, args, env, onLine) {
  const log = createWriteStream(logPath);
  const proc = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let buffer = '';
  proc.stdout.on('data', (d) => {
    log.write(d);
    if (!onLine) return;
    buffer += d.toString();
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      onLine(buffer.slice(0, nl));
      buffer = buffer.slice(nl + 1);
    }
  });
  proc.stderr.pipe(log, { end: false });
  const exited = new Promise((r) => proc.once('close', (code, signal) => r({ code, signal })));
  return { proc, exited, logPath };
}

/** Stops `p` (SIGTERM, then SIGKILL after `ms`). */
export async function stopProc(p, ms = 10000) {
  if (!p || p.proc.exitCode !== null || p.proc.signalCode !== null) return;
  p.proc.kill('SIGTERM');
  try {
    await within(ms, p.exited, 'a process to exit');
  } catch {
    p.proc.kill('SIGKILL');
    await p.exited;
  }
}

/** Polls `check` every `every` ms until it returns something truthy, at most `ms`. */
export async function waitFor(what, ms, check, every = 100) {
  const until = Date.now() + ms;
  let last;
  while (Date.now() < until) {
    try {
      last = await check();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await sleep(every);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
}

