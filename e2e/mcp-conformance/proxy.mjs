// Adds the worker's two headers (a session token for the tab's key as a Bearer credential, the key in
// X-Voice-Agent-Key) to every request on its way to the worker's /mcp: the conformance suite
// cannot send headers of its own. Everything else passes through as it came, the Host header
// too (the suite checks that the worker refuses foreign hosts), and responses stream back as
// they are written (SSE).
//
//   WORKER=http://127.0.0.1:3002 AGENT_TOKEN=… VOICE_AGENT_KEY=va_… node proxy.mjs
//   → prints "proxy listening on http://127.0.0.1:PORT"

import http from 'node:http';

const target = new URL(process.env.WORKER ?? 'http://127.0.0.1:3002');
const added = {
  authorization: `Bearer ${process.env.AGENT_TOKEN ?? ''}`,
  'x-voice-agent-key': process.env.VOICE_AGENT_KEY ?? '',
};

const server = http.createServer((req, res) => {
  const upstream = http.request({
    host: target.hostname,
    port: target.port,
    method: req.method,
    path: req.url,
    headers: { ...req.headers, ...added },
  }, (answer) => {
    res.writeHead(answer.statusCode ?? 502, answer.headers);
    answer.pipe(res);
  });
  upstream.on('error', (err) => {
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
    res.end(`proxy: ${err.message}`);
  });
  req.pipe(upstream);
  res.on('close', () => upstream.destroy());
});

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`proxy listening on http://127.0.0.1:${server.address().port}\n`);
});
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
