// A browser tab as a process, for tests written in other languages: gets a token from the relay
// (POST /token), connects with the official socket.io-client (`auth: {token}`), and prints one
// JSON line per thing that happens. The first line is {"apiKey"}; then {"event":"connect"},
// each tool event as {"event","params","meta"}, each {"event":"voice-agent:cancel","callId"}.
// Awaited calls are answered at once: draw_card with a fixed card, show_card with success,
// anything else with {"ok":true}; a draw_card whose positionLabel is "Hold" is left unanswered
// (for cancellation tests). Each line on its standard input is a command: {"handles": payload}
// sends `voice-agent:handles` with that payload and prints {"event":"handles-ack","ack"}.
// Exits when its standard input closes.
//
// With --client the tab is the browser client itself (web/client, built for Node): it handles
// draw_card (as above, after 30 ms), show_card and OpenPopover, declares them, answers every
// other tool no_handler, and reports its handler's time to a relay that reads it; each call
// prints {"event","params","meta"} with the meta the handler got (its traceparent too).
//
//   [RELAY_TOKEN_ISSUER_SECRET=…] node e2e/harness/tab-process.mjs http://127.0.0.1:3001 [--client]

import { pathToFileURL } from 'node:url';
import { io } from 'socket.io-client';
import { webClientNode } from './paths.mjs';

export const CARD = { cardId: 'the-star', cardName: 'The Star', reversed: false };

const relayUrl = process.argv[2];
if (!relayUrl) {
  process.stderr.write('usage: tab-process.mjs <relay url>\n');
  process.exit(64);
}

const print = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);
const issuer = process.env.RELAY_TOKEN_ISSUER_SECRET;

if (process.argv.includes('--client')) {
  const { VoiceRelayClient } = await import(pathToFileURL(webClientNode).href);
  const client = new VoiceRelayClient({
    relayUrl,
    transports: ['websocket'],
    ...(issuer ? { tokenHeaders: { authorization: `Bearer ${issuer}` } } : {}),
  });
  const seen = (tool) => (params, meta) => {
    const { signal, ...plain } = meta;
    print({ event: `voice-agent:${tool}`, params, meta: plain });
    return signal;
  };
  client.handle('draw_card', (params, meta) => {
    const signal = seen('draw_card')(params, meta);
    if (params?.positionLabel === 'Hold') {
      return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
    }
    return new Promise((resolve) => setTimeout(() => resolve(CARD), 30));
  });
  client.handle('show_card', (params, meta) => {
    seen('show_card')(params, meta);
    return { success: true, cardId: params?.cardId, reversed: params?.reversed };
  });
  client.handle('OpenPopover', (params, meta) => { seen('OpenPopover')(params, meta); });
  client.on('cancel', (callId) => print({ event: 'voice-agent:cancel', callId }));
  const token = await client.start();
  print({ apiKey: token.apiKey });
  print({ event: 'connect' });
  process.stdin.resume();
  process.stdin.on('end', () => {
    client.stop();
    process.exit(0);
  });
} else {

  // A relay that issues tokens only to the app's backend takes its issuer secret.
  const res = await fetch(`${relayUrl}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(issuer ? { authorization: `Bearer ${issuer}` } : {}) },
    body: '{}',
    signal: AbortSignal.timeout(10000),
  });
  if (res.status !== 200) {
    process.stderr.write(`POST /token answered ${res.status}\n`);
    process.exit(1);
  }
  const { token, apiKey } = await res.json();
  print({ apiKey });

  const socket = io(relayUrl, { auth: { token }, transports: ['websocket'], reconnection: false, timeout: 5000 });
  socket.on('connect', () => print({ event: 'connect' }));
  socket.on('connect_error', (err) => print({ event: 'connect_error', message: err.message, data: err.data }));
  socket.on('disconnect', (reason) => print({ event: 'disconnect', reason }));

  socket.onAny((event, ...args) => {
    if (!event.startsWith('voice-agent:')) return;
    if (event === 'voice-agent:cancel' || event === 'voice-agent:revoked') {
      print({ event, ...(args[0] ?? {}) });
      return;
    }
    const ack = typeof args[args.length - 1] === 'function' ? args.pop() : null;
    const [params, meta] = args;
    print({ event, params, meta });
    if (!ack) return;
    const tool = event.slice('voice-agent:'.length);
    if (tool === 'draw_card') {
      if (params?.positionLabel === 'Hold') return;
      ack({ ok: true, result: CARD });
    } else if (tool === 'show_card') {
      ack({ ok: true, result: { success: true, cardId: params?.cardId, reversed: params?.reversed } });
    } else {
      ack({ ok: true, result: { ok: true } });
    }
  });

  let pending = '';
  process.stdin.on('data', (chunk) => {
    pending += chunk.toString();
    let newline;
    while ((newline = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, newline).trim();
      pending = pending.slice(newline + 1);
      if (!line) continue;
      const command = JSON.parse(line);
      if (command.handles !== undefined) {
        socket.timeout(5000).emit('voice-agent:handles', command.handles, (err, ack) =>
          print({ event: 'handles-ack', ack: err ? { ok: false, error: { code: 'timeout', message: String(err) } } : ack }),
        );
      }
    }
  });
  process.stdin.on('end', () => {
    socket.close();
    process.exit(0);
  });
}
