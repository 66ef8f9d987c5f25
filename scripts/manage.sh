#!/usr/bin/env bash
# How an operator runs the voice-agent relay: start, stop, restart, status, logs, test, bench,
# check. State lives in .run/ (pid and log files) and .env (secrets, created on first start).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN_DIR="$ROOT/.run"
ENV_FILE="$ROOT/.env"
RELAY_BIN="$ROOT/target/release/relay"

say() { printf '%s\n' "$*"; }
die() { printf 'manage.sh: %s\n' "$*" >&2; exit 1; }

need() {
  command -v "$1" >/dev/null 2>&1 || die "$1 is not installed. $2"
}

# Loads .env into the environment of the commands that follow.
load_env() {
  if [[ -f "$ENV_FILE" ]]; then
    set -a
    # shellcheck disable=SC1090
    . "$ENV_FILE"
    set +a
  fi
}

random_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

# Creates .env with fresh random secrets on first run; never overwrites it.
ensure_env() {
  if [[ -f "$ENV_FILE" ]]; then return; fi
  umask 077
  cat >"$ENV_FILE" <<EOF
# Created by scripts/manage.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ). Keep it private (mode 600).
RELAY_ADDR=127.0.0.1:3001
LIVEKIT_URL=ws://127.0.0.1:7880
LIVEKIT_API_KEY=devkey
LIVEKIT_API_SECRET=$(random_hex 32)
RELAY_AGENT_SECRET=$(random_hex 32)
RUST_LOG=info
EOF
  chmod 600 "$ENV_FILE"
  say "created $ENV_FILE with fresh secrets"
}

relay_addr() { load_env; printf '%s' "${RELAY_ADDR:-127.0.0.1:3001}"; }

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

build_release() {
  need cargo "Install Rust (rustup) first."
  if [[ ! -x "$RELAY_BIN" || -n "$(find "$ROOT/relay" "$ROOT/Cargo.toml" -newer "$RELAY_BIN" -type f -print -quit 2>/dev/null)" ]]; then
    say "building release binaries…"
    (cd "$ROOT" && cargo build --release --bin relay)
  fi
}

wait_ready() {
  local url="$1" tries=100
  while (( tries-- > 0 )); do
    if curl -fsS "$url/readyz" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  return 1
}

cmd_start() {
  mkdir -p "$RUN_DIR"
  ensure_env
  local addr; addr="$(relay_addr)"
  if pid_alive "$RUN_DIR/relay.pid"; then
    say "relay already running (pid $(cat "$RUN_DIR/relay.pid")) on http://$addr"
    return 0
  fi
  need curl "Install curl (apt-get install -y curl)."
  if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
    die "port ${addr##*:} is in use by another program; stop it or set RELAY_ADDR in $ENV_FILE"
  fi
  build_release
  load_env
  "$RELAY_BIN" check-config >/dev/null || die "configuration in $ENV_FILE is not valid"
  nohup "$RELAY_BIN" >>"$RUN_DIR/relay.log" 2>&1 &
  echo $! >"$RUN_DIR/relay.pid"
  if ! wait_ready "http://$addr"; then
    tail -n 20 "$RUN_DIR/relay.log" >&2 || true
    die "relay did not become ready; see $RUN_DIR/relay.log"
  fi
  say "relay running (pid $(cat "$RUN_DIR/relay.pid")) on http://$addr"
  say "demo page:   http://$addr/"
  say "a token:     curl -s -X POST http://$addr/token"
  say "a tool call: curl -s -H \"Authorization: Bearer \$RELAY_AGENT_SECRET\" -H 'content-type: application/json' \\"
  say "               -d '{\"apiKey\":\"va_…\",\"toolName\":\"OpenPopover\",\"params\":{\"message\":\"Hello\"}}' http://$addr/api/voice-agent/tool-call"
  say "(the agent secret is in $ENV_FILE)"
}

stop_pid() {
  local name="$1" pidfile="$RUN_DIR/$1.pid"
  if ! pid_alive "$pidfile"; then
    rm -f "$pidfile"
    say "$name not running"
    return 0
  fi
  local pid; pid="$(cat "$pidfile")"
  kill -TERM "$pid" 2>/dev/null || true
  # The relay drains for up to RELAY_DRAIN_MS (10 s by default); wait a little longer.
  for _ in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "$name did not stop in 15 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  say "$name stopped"
}

cmd_stop() { stop_pid relay; }

cmd_status() {
  local addr; addr="$(relay_addr)"
  if pid_alive "$RUN_DIR/relay.pid"; then
    local ready="not ready"
    curl -fsS "http://$addr/readyz" >/dev/null 2>&1 && ready="ready"
    say "relay: running, pid $(cat "$RUN_DIR/relay.pid"), http://$addr, $ready"
  else
    say "relay: stopped"
    return 3
  fi
}

cmd_logs() {
  local which="${1:-relay}"
  [[ -f "$RUN_DIR/$which.log" ]] || die "no log for $which yet ($RUN_DIR/$which.log)"
  tail -n 100 -f "$RUN_DIR/$which.log"
}

cmd_check() {
  ensure_env
  load_env
  build_release
  "$RELAY_BIN" check-config
}

# Installs the web side's npm packages when they are missing or stale.
web_deps() {
  need node "Install Node.js 20 or newer."
  need npm "Install npm."
  if [[ ! -d "$ROOT/web/node_modules" || "$ROOT/web/package-lock.json" -nt "$ROOT/web/node_modules/.package-lock.json" ]]; then
    (cd "$ROOT/web" && npm ci --no-audit --no-fund)
  fi
}

cmd_test() {
  need cargo "Install Rust (rustup) first."
  need node "Install Node.js 20 or newer."
  cd "$ROOT"
  local out; out="$(mktemp -d)"
  say "== cargo fmt --check"
  cargo fmt --all -- --check
  say "== cargo clippy -D warnings"
  cargo clippy --workspace --all-targets -- -D warnings
  say "== cargo test"
  cargo test --workspace 2>&1 | tee "$out/cargo.txt"
  say "== protocol tests (the relay binary driven by the official socket.io-client)"
  cargo build --bin relay
  web_deps
  rm -rf "$ROOT/test-logs"
  local rc=0
  (cd "$ROOT/web" && RELAY_BIN="$ROOT/target/debug/relay" TEST_LOG_DIR="$ROOT/test-logs" \
    node --test --test-concurrency=2 --test-reporter=spec test/protocol/) 2>&1 | tee "$out/node.txt" || rc=$?
  # One closing line for the whole run: Rust and Node counts together.
  local cp cf np nf
  cp=$(grep -oE '^test result: [a-zA-Z]+\. [0-9]+ passed' "$out/cargo.txt" | awk '{s+=$4} END {print s+0}')
  cf=$(grep -oE '[0-9]+ failed' "$out/cargo.txt" | awk '{s+=$1} END {print s+0}')
  np=$(grep -oE '^ℹ pass [0-9]+' "$out/node.txt" | awk '{print $3}' | tail -n1)
  nf=$(grep -oE '^ℹ fail [0-9]+' "$out/node.txt" | awk '{print $3}' | tail -n1)
  rm -rf "$out"
  say ""
  say "$((cp + ${np:-0})) passed, $((cf + ${nf:-1})) failed"
  return "$rc"
}

cmd_bench() {
  die "the benchmark is not built yet"
}

usage() {
  cat <<EOF
usage: scripts/manage.sh <command>
  start            build what is missing, create .env, start the relay, wait until ready
  stop             stop what start started (SIGTERM, bounded wait, then kill)
  restart          stop, then start
  status           show what runs, its pid, address and readiness
  logs [relay]     follow a log
  test             run every test (format, lints, Rust tests, protocol tests)
  bench            run the benchmark
  check            validate the configuration without starting anything
EOF
}

main() {
  local cmd="${1:-}"
  shift || true
  case "$cmd" in
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    restart) cmd_stop; cmd_start "$@" ;;
    status) cmd_status "$@" ;;
    logs) cmd_logs "$@" ;;
    test) cmd_test "$@" ;;
    bench) cmd_bench "$@" ;;
    check) cmd_check "$@" ;;
    -h|--help|help|"") usage ;;
    *) usage; exit 2 ;;
  esac
}

main "$@"
