#!/usr/bin/env bash
# Generated attacks on the published API contract: Schemathesis reads each server's own
# /openapi.json and throws generated requests (valid and invalid) at every operation, with every
# check on: no 5xx, responses that match their schema, documented status codes, content types
# and headers, invalid data refused, valid data accepted, required headers and auth enforced,
# undocumented methods refused.
#
# It starts the real debug binaries on free loopback ports: the relay in RELAY_TOKEN_MODE=issuer
# (so /token's Bearer issuer secret is exercised) and the worker pointed at it with VAPI_SECRET
# set, with the environment the protocol tests use (web/test/protocol/harness.mjs).
#
# What cannot apply, and why (everything else runs on every operation):
# - POST /livekit/webhook: its Authorization must be a JWT signed over the body's SHA-256 with
#   the LiveKit secret, which generated bodies cannot carry; every request is refused (401), and
#   the checks run on those answers (401 is documented and counts as accepted for a credential
#   the runner does not hold).
# - /mcp: positive_data_acceptance is off (see schemathesis.toml: the JSON-RPC body is opaque).
# - POST /api/voice-agent/tool-call: a 400 counts as accepted for positive_data_acceptance (see
#   schemathesis.toml: generated requests reuse Idempotency-Keys with other bodies).
# Keys Schemathesis learns from /token answers are real, offline keys: a call to one waits for
# its tab within its timeout, so the relay runs with short call timeouts (1 s, at most 3 s; its
# document states them).
#
# Env: RELAY_BIN, WORKER_BIN (default target/debug/…), ST_MAX_EXAMPLES (50 per operation),
# ST_TIMEOUT (seconds per server, 600), TEST_LOG_DIR (logs and reports; default test-logs).
# Prints "N passed, M failed" (operations) and exits non-zero on any failure.

set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HERE="$ROOT/tests-api"
RELAY_BIN="${RELAY_BIN:-$ROOT/target/debug/relay}"
WORKER_BIN="${WORKER_BIN:-$ROOT/target/debug/agent-worker}"
VENV="${VENV:-$ROOT/.tools/venv}"
LOG_DIR="${TEST_LOG_DIR:-$ROOT/test-logs}/schemathesis"
MAX_EXAMPLES="${ST_MAX_EXAMPLES:-50}"
RUN_TIMEOUT="${ST_TIMEOUT:-600}"
# Pinned: the checks and their defaults change between releases.
SCHEMATHESIS_VERSION="4.32.5"

say() { printf '%s\n' "$*"; }
fail_early() {
  say "!! $*"
  say "0 passed, 1 failed"
  exit 1
}

for bin in "$RELAY_BIN" "$WORKER_BIN"; do
  [[ -x "$bin" ]] || fail_early "missing binary $bin (cargo build --bins)"
done
if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  [[ -x "$VENV/bin/pip" ]] || python3 -m venv "$VENV" || fail_early "cannot make the venv $VENV"
  say "installing schemathesis $SCHEMATHESIS_VERSION into $VENV…"
  "$VENV/bin/pip" install -q --disable-pip-version-check --cache-dir "$ROOT/.tools/pip-cache" \
    "schemathesis==$SCHEMATHESIS_VERSION" || fail_early "cannot install schemathesis"
fi

rm -rf "$LOG_DIR"
mkdir -p "$LOG_DIR"
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null
  done
}
trap cleanup EXIT

secret() { printf '%s-%s' "$1" "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"; }

# Starts "$@" with its output in $1's log and waits for "<banner> listening on http://ADDR".
# Sets ADDR.
start() {
  local name="$1" banner="$2"
  shift 2
  local log="$LOG_DIR/$name.log"
  "$@" >"$log" 2>&1 &
  PIDS+=("$!")
  local pid=$! i
  for ((i = 0; i < 150; i++)); do
    ADDR="$(grep -oE "$banner listening on http://[0-9.]+:[0-9]+" "$log" | head -n 1 | sed 's|.*http://||')"
    [[ -n "$ADDR" ]] && return 0
    kill -0 "$pid" 2>/dev/null || fail_early "$name exited before listening; see $log"
    sleep 0.1
  done
  fail_early "$name did not listen within 15 s; see $log"
}

export ST_AGENT_SECRET ST_ISSUER_SECRET ST_VAPI_SECRET
ST_AGENT_SECRET="$(secret as)"
ST_ISSUER_SECRET="$(secret is)"
ST_VAPI_SECRET="$(secret vs)"
LIVEKIT_SECRET="$(secret lk)"

start relay relay env -i PATH="$PATH" RUST_LOG=info RELAY_ADDR=127.0.0.1:0 \
  LIVEKIT_URL=ws://127.0.0.1:7880 LIVEKIT_API_KEY=devkey LIVEKIT_API_SECRET="$LIVEKIT_SECRET" \
  RELAY_AGENT_SECRET="$ST_AGENT_SECRET" RELAY_WEB_DIR="$ROOT/web/dist" \
  RELAY_DEFAULT_TIMEOUT_MS=1000 RELAY_MAX_TIMEOUT_MS=3000 \
  RELAY_TOKEN_MODE=issuer RELAY_TOKEN_ISSUER_SECRET="$ST_ISSUER_SECRET" "$RELAY_BIN"
RELAY_ADDR="$ADDR"
start worker agent-worker env -i PATH="$PATH" RUST_LOG=info WORKER_ADDR=127.0.0.1:0 \
  RELAY_URL="http://$RELAY_ADDR" RELAY_AGENT_SECRET="$ST_AGENT_SECRET" \
  LIVEKIT_API_KEY=devkey LIVEKIT_API_SECRET="$LIVEKIT_SECRET" VAPI_SECRET="$ST_VAPI_SECRET" \
  "$WORKER_BIN" serve
WORKER_ADDR="$ADDR"
say "relay on $RELAY_ADDR (issuer mode), worker on $WORKER_ADDR"

rc=0
# One Schemathesis run against one server's own document; its JUnit report is counted below.
# One worker: Hypothesis's description of its own strategies is not thread-safe on Python 3.11
# (an "AST constructor recursion depth mismatch" runtime error with two).
attack() {
  local name="$1" addr="$2"
  say "== schemathesis: $name (http://$addr/openapi.json, every check, $MAX_EXAMPLES examples per operation)"
  # From the log directory: Schemathesis keeps its cache (.schemathesis/) in the working one.
  (cd "$LOG_DIR" && timeout "$RUN_TIMEOUT" "$VENV/bin/schemathesis" --config-file "$HERE/schemathesis.toml" \
    run "http://$addr/openapi.json" \
    --max-examples "$MAX_EXAMPLES" --workers 1 --request-timeout 20 \
    --suppress-health-check too_slow,filter_too_much \
    --report junit --report-junit-path "$LOG_DIR/$name.junit.xml" \
    --output-truncate false --no-color) 2>&1 | tee "$LOG_DIR/$name.txt"
  local status=${PIPESTATUS[0]}
  if ((status == 124)); then
    say "!! $name: schemathesis did not finish within ${RUN_TIMEOUT}s"
  fi
  ((status == 0)) || rc=1
}

attack relay "$RELAY_ADDR"
attack worker "$WORKER_ADDR"

# Neither server may have died or panicked under the attack.
for name in relay worker; do
  if grep -q "panicked" "$LOG_DIR/$name.log"; then
    say "!! $name panicked; see $LOG_DIR/$name.log"
    rc=1
  fi
done
for pid in "${PIDS[@]}"; do
  kill -0 "$pid" 2>/dev/null || { say "!! a server died during the run (pid $pid)"; rc=1; }
done

# Operations that passed and failed, from the JUnit reports (one test case per operation).
read -r passed failed < <(python3 - "$LOG_DIR" <<'PY'
import sys, pathlib, xml.etree.ElementTree as ET
passed = failed = 0
for name in ("relay", "worker"):
    path = pathlib.Path(sys.argv[1]) / f"{name}.junit.xml"
    if not path.exists():
        failed += 1
        continue
    for case in ET.parse(path).iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        else:
            passed += 1
print(passed, failed)
PY
)
if ((rc != 0 && failed == 0)); then
  failed=1
fi
say ""
say "schemathesis: $passed passed, $failed failed"
exit "$rc"
