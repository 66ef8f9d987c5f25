# Sourced by the shell runners: starts parts of the system through up.mjs (the harness the JS
# suites use) and reads what it prints.
#
#   . e2e/harness/up.sh
#   harness_up --relay --worker --relay-env RELAY_TOKEN_MODE=issuer   # fails when they do not start
#   url=$(harness_field relay.url)
#   …
#   harness_down   # stops them; fails when a log held a whole key, token or secret

HARNESS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HARNESS_JSON=""

# Starts up.mjs with "$@" and waits (bounded, 60 s) for its JSON line.
harness_up() {
  coproc HARNESS { exec node "$HARNESS_DIR/up.mjs" "$@"; }
  HARNESS_IN=${HARNESS[1]}
  if ! read -r -t 60 HARNESS_JSON <&"${HARNESS[0]}" || [[ -z "$HARNESS_JSON" ]]; then
    printf 'harness: the servers did not start (see the messages above)\n' >&2
    harness_down
    return 1
  fi
}

# One field of up.mjs's JSON line, by dotted path (relay.url, worker.log, tab.apiKey…).
harness_field() {
  node -e 'let v = JSON.parse(process.argv[1]); for (const k of process.argv[2].split(".")) v = v?.[k]; process.stdout.write(v == null ? "" : String(v));' \
    "$HARNESS_JSON" "$1"
}

# Closes up.mjs's standard input, which stops everything it started, and returns its status.
harness_down() {
  local pid=${HARNESS_PID:-}
  [[ -n "$pid" ]] || return 0
  if [[ -n "${HARNESS_IN:-}" ]]; then
    eval "exec ${HARNESS_IN}>&-"
    HARNESS_IN=""
  fi
  local status=0
  wait "$pid" || status=$?
  HARNESS_PID=""
  return "$status"
}
