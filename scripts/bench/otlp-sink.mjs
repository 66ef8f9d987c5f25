// An OTLP/HTTP endpoint for the benchmark's tracing runs (scripts/bench.mjs --tracing RATIO): it
// takes every POST /v1/traces and answers an empty ExportTraceServiceResponse without decoding,
// so what the runs measure is the relay's cost of tracing, not a collector's.
//   node scripts/bench/otlp-sink.mjs 127.0.0.1:4199
import { createServer } from 'node:http';

const [host, port] = (process.argv[2] ?? '127.0.0.1:4199').split(':');
let requests = 0;
let bytes = 0;
createServer((req, res) => {
  req.on('data', (d) => { bytes += d.length; });
  req.on('end', () => {
    requests += 1;
    res.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': '0' });
    res.end();
  });
}).listen(Number(port), host, () => process.stdout.write(`otlp sink listening on http://${host}:${port}\n`));
process.on('SIGTERM', () => {
  process.stdout.write(`otlp sink: ${requests} requests, ${bytes} bytes\n`);
  process.exit(0);
});
