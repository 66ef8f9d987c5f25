#!/usr/bin/env bash
# Runs a command inside a private network namespace with a veth pair (10.213.0.1/24 on `va`),
# made for the run and removed after it, also when the command fails or is interrupted; a
# leftover of an interrupted run is removed first. The voice-room test runs in it: LiveKit's SDK
# participants never gather loopback ICE candidates, so they need an address of their own, and
# every process of the test lives in the namespace, where nothing is routed out.
# Needs root (ip netns). Usage: scripts/netns.sh <command> [args…]
set -uo pipefail
NS="${VOICE_NETNS:-va-voice}"
down() { ip netns del "$NS" 2>/dev/null || true; }
down
ip netns add "$NS" || exit 1
trap down EXIT
trap 'exit 130' INT TERM
ip netns exec "$NS" sh -c 'ip link set lo up && ip link add va type veth peer name vb &&
  ip addr add 10.213.0.1/24 dev va && ip link set va up && ip link set vb up' || exit 1
ip netns exec "$NS" "$@"
