// The harness every black-box suite uses: paths, bounded waits, free ports, processes with their
// logs scanned for secrets (proc.mjs); the relay, the worker and tabs (relay.mjs); Redis, a
// balancer and haproxy (cluster.mjs); LiveKit's server (livekit.mjs); a relay with a worker as an
// agent sees them (stack.mjs); Vapi's signed webhooks (vapi.mjs); the image and the compose
// stacks of deploy/ under podman (containers.mjs). up.mjs starts them for the shell runners.
export * from './paths.mjs';
export * from './proc.mjs';
export * from './relay.mjs';
export * from './cluster.mjs';
export { onRedisCluster } from './redis-cluster.mjs';
export * from './livekit.mjs';
export * from './stack.mjs';
export * from './sentinel.mjs';
export * from './vapi.mjs';
export * from './containers.mjs';
