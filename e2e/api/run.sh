#!/usr/bin/env bash
# Generated attacks on the published API contract: Schemathesis reads each server's own
# /openapi.json and throws generated requests (valid and invalid) at every operation, with every
# check on: no 5xx, responses that match their schema, documented status codes, content types
# and headers, invalid data refused, valid data accepted, required headers and auth enforced,
# undocumented methods refused.
#
# It starts the real debug binaries on free loopback ports through the e2e harness
# (e2e/harness/up.mjs, with the environment the protocol tests use): the relay in
# RELAY_TOKEN_MODE=issuer (so /token's Bearer issuer secret is exercised) and the worker pointed
# at it with VAPI_SECRET set and its operators' page on (WORKER_DEBUG_PAGE=true: off, /debug
# answers 503 not_configured, which the no-5xx check would count). When they stop, their logs are searched for the secrets.
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
# ST_TIMEOUT (seconds per server, 600), TEST_LOG_DIR (logs; default test-logs), ST_REPORT_DIR
# (the JUnit reports, one test case per operation; default the log folder).
# Prints "N passed, M failed" (operations) and exits non-zero on any failure.

set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
RELAY_BIN="${RELAY_BIN:-$ROOT/target/debug/relay}"
WORKER_BIN="${WORKER_BIN:-$ROOT/target/debug/agent-worker}"
VENV="${VENV:-$ROOT/.tools/venv}"
LOG_DIR="${TEST_LOG_DIR:-$ROOT/test-logs}/schemathesis"
REPORT_DIR="${ST_REPORT_DIR:-$LOG_DIR}"
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
mkdir -p "$LOG_DIR" "$REPORT_DIR"
rm -f "$REPORT_DIR"/{relay,worker}.junit.xml
# shellcheck source=../harness/up.sh
. "$ROOT/e2e/harness/up.sh"
trap harness_down EXIT

export TEST_LOG_DIR="$LOG_DIR" RELAY_BIN WORKER_BIN
harness_up --relay --worker --tab --relay-env RELAY_TOKEN_MODE=issuer \
  --relay-env RELAY_ALLOW_BARE_KEYS=false --relay-env RELAY_DEFAULT_TIMEOUT_MS=1000 --relay-env RELAY_MAX_TIMEOUT_MS=3000 \
  --worker-env WORKER_DEBUG_PAGE=true ||
  fail_early "the relay and the worker did not start"
export ST_SESSION_TOKEN ST_WORKER_SECRET ST_OPERATOR_SECRET ST_ISSUER_SECRET
# A bound tab's agent token: generated requests name random keys, which it reaches none of.
ST_SESSION_TOKEN="$(harness_field tab.agentToken)"
ST_WORKER_SECRET="$(harness_field relay.workerSecret)"
ST_OPERATOR_SECRET="$(harness_field relay.operatorSecret)"
ST_ISSUER_SECRET="$(harness_field relay.issuerSecret)"
RELAY_ADDR="$(harness_field relay.url)"
RELAY_ADDR="${RELAY_ADDR#http://}"
WORKER_ADDR="$(harness_field worker.url)"
WORKER_ADDR="${WORKER_ADDR#http://}"
RELAY_LOG="$(harness_field relay.log)"
WORKER_LOG="$(harness_field worker.log)"
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
    --report junit --report-junit-path "$REPORT_DIR/$name.junit.xml" \
    --output-truncate false --no-color) 2>&1 | tee "$LOG_DIR/$name.txt"
  local status=${PIPESTATUS[0]}
  if ((status == 124)); then
    say "!! $name: schemathesis did not finish within ${RUN_TIMEOUT}s"
  fi
  ((status == 0)) || rc=1
}

attack relay "$RELAY_ADDR"
attack worker "$WORKER_ADDR"

# Neither server may have died or panicked under the attack, nor logged a secret whole.
for log in "$RELAY_LOG" "$WORKER_LOG"; do
  if grep -q "panicked" "$log"; then
    say "!! a server panicked; see $log"
    rc=1
  fi
done
for url in "$RELAY_ADDR/readyz" "$WORKER_ADDR/healthz"; do
  curl -fsS -o /dev/null --max-time 5 "http://$url" || { say "!! a server stopped answering during the run (http://$url)"; rc=1; }
done
trap - EXIT
harness_down || { say "!! stopping the servers failed, or a log holds a whole key, token or secret (see above)"; rc=1; }

# Operations that passed and failed, from the JUnit reports (one test case per operation).
read -r passed failed < <(python3 - "$REPORT_DIR" <<'PY'
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
