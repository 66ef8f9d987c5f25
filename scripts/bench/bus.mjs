// How long the Redis servers alone take to carry a classic PUBLISH to a subscriber, with no relay
// involved: the floor under a relay's latency on that store. On a Redis Cluster the publisher
// talks to one primary and the subscriber to another, so every message crosses the cluster bus,
// as a call to a tab on another relay node does (the admission script publishes it on the key's
// primary; the holding node listens on the primary its cluster connection chose). Both sockets
// send at once (TCP_NODELAY); what is left is the servers' own delay.
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** One RESP command. */
function resp(...args) {
  return `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join('')}`;
}

function open(port) {
  return new Promise((ok, fail) => {
    const s = connect(port, '127.0.0.1', () => ok(s));
    s.setNoDelay(true);
    s.once('error', fail);
  });
}

/** `promise`, or after `ms` whatever `onTimeout` gives (its timer cleared either way). */
async function within(promise, ms, onTimeout) {
  let timer;
  try {
    return await Promise.race([promise, new Promise((ok) => { timer = setTimeout(() => ok(onTimeout()), ms); })]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Publishes `count` messages at `rate` per second on `pubPort` to a subscriber on `subPort`, each
 * stamped with the time it was sent; returns the delivery latency (µs) seen by the subscriber.
 * Every wait is bounded: the subscription by 5 s, the last messages by `timeoutMs`.
 */
export async function publishLatency(pubPort, subPort, { rate = 500, count = 1000, timeoutMs = 10000 } = {}) {
  const chan = `bench:bus:${randomBytes(6).toString('hex')}`;
  const sub = await open(subPort);
  let pub = null;
  try {
    pub = await open(pubPort);
    pub.on('data', () => { /* PUBLISH replies: receiver counts, not needed */ });
    const lat = [];
    let buf = '';
    let subscribed;
    const confirmed = new Promise((ok) => { subscribed = ok; });
    let finished;
    const done = new Promise((ok) => { finished = ok; });
    // A server gone mid-measure ends it with what arrived so far.
    let broken = null;
    for (const s of [sub, pub]) s.on('error', (e) => { broken ??= e.message; subscribed(); finished(); });
    sub.on('data', (d) => {
      const now = process.hrtime.bigint();
      buf += d.toString('latin1');
      if (buf.includes('subscribe')) subscribed();
      const re = /T=(\d+)\r\n/g;
      let m;
      let end = 0;
      while ((m = re.exec(buf))) {
        lat.push(Number(now - BigInt(m[1])) / 1000);
        end = re.lastIndex;
      }
      // Keep only what may still be the start of a message.
      buf = end ? buf.slice(end) : buf.slice(-256);
      if (lat.length >= count) finished();
    });
    sub.write(resp('SUBSCRIBE', chan));
    await within(confirmed, 5000, () => { throw new Error(`no SUBSCRIBE confirmation from :${subPort} in 5 s`); });
    const gapMs = 1000 / rate;
    const start = performance.now();
    let sent = 0;
    for (; sent < count && !broken; sent++) {
      pub.write(resp('PUBLISH', chan, `T=${process.hrtime.bigint()}`));
      const wait = start + (sent + 1) * gapMs - performance.now();
      if (wait > 0) await sleep(wait);
    }
    await within(done, timeoutMs, () => null);
    lat.sort((a, b) => a - b);
    const at = (q) => (lat.length ? Math.round(lat[Math.min(lat.length - 1, Math.floor(lat.length * q))]) : null);
    return { rate, sent, received: lat.length, p50_us: at(0.5), p99_us: at(0.99), max_us: lat.length ? Math.round(lat[lat.length - 1]) : null, error: broken };
  } finally {
    sub.destroy();
    pub?.destroy();
  }
}

/**
 * The store's publish latency: on one server, publisher and subscriber on it; on a Cluster, the
 * same on one primary and then from one primary to a subscriber on another.
 */
export async function storePublishLatency(ports, opts) {
  const out = { same_server: await publishLatency(ports[0], ports[0], opts) };
  if (ports.length > 1) out.across_cluster_bus = await publishLatency(ports[0], ports[1], opts);
  return out;
}
