// Reference server for the benchmark: the common design as people write it, on Node. Express
// serves POST /token (a fresh va_ key) and POST /api/voice-agent/tool-call; socket.io holds a
// Map from key to socket id filled by `voice-agent:register`; awaited calls use emitWithAck.
// It keeps one shared agent secret (REF_AGENT_SECRET), as that design does: its /token hands it
// out as the tab's agentToken, and each call checks it.
import { randomBytes, timingSafeEqual, createHash } from 'node:crypto';
import { createServer } from 'node:http';
import express from 'express';
import { Server } from 'socket.io';

const [host, port] = (process.env.REF_ADDR ?? '127.0.0.1:4201').split(':');
const agentSecret = process.env.REF_AGENT_SECRET ?? '';
const secret = createHash('sha256').update(agentSecret).digest();
const keys = new Map(); // apiKey -> socket.id

const app = express();
app.use(express.json({ limit: '64kb' }));
const http = createServer(app);
const io = new Server(http, { cors: { origin: '*' } });

app.post('/token', (req, res) => {
  const apiKey = `va_${randomBytes(32).toString('hex')}`;
  res.json({ apiKey, token: apiKey, agentToken: agentSecret });
});

io.on('connection', (socket) => {
  socket.on('voice-agent:register', (apiKey, ack) => {
    keys.set(apiKey, socket.id);
    if (typeof ack === 'function') ack({ ok: true });
  });
  socket.on('disconnect', () => {
    for (const [k, id] of keys) if (id === socket.id) keys.delete(k);
  });
});

app.post('/api/voice-agent/tool-call', async (req, res) => {
  const presented = createHash('sha256').update((req.get('authorization') ?? '').replace(/^Bearer /, '')).digest();
  if (!timingSafeEqual(presented, secret)) return res.status(401).json({ ok: false, error: { code: 'unauthorized' } });
  const { apiKey, toolName, params, awaitResult, timeoutMs = 15000 } = req.body ?? {};
  const socket = io.sockets.sockets.get(keys.get(apiKey));
  if (!socket) return res.status(404).json({ ok: false, error: { code: 'unknown_key' } });
  const meta = { callId: randomBytes(12).toString('hex'), expectsResult: !!awaitResult };
  if (!awaitResult) {
    socket.emit(`voice-agent:${toolName}`, params, meta);
    return res.json({ ok: true, callId: meta.callId });
  }
  try {
    const answer = await socket.timeout(timeoutMs).emitWithAck(`voice-agent:${toolName}`, params, meta);
    res.json({ ok: true, callId: meta.callId, result: answer?.result ?? answer });
  } catch {
    res.status(504).json({ ok: false, error: { code: 'timeout' } });
  }
});

http.listen(Number(port), host, () => console.log(`reference listening on http://${host}:${port}`));
process.on('SIGTERM', () => { io.close(); http.close(() => process.exit(0)); });
