#!/usr/bin/env bash
# How an operator runs the voice-agent relay: start, stop, restart, status, logs, test, bench,
# check. State lives in .run/ (pid and log files) and .env (secrets, created on first start).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN_DIR="$ROOT/.run"
ENV_FILE="$ROOT/.env"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
RELAY_BIN="$TARGET/release/relay"
WORKER_BIN="$TARGET/release/agent-worker"
PROCS=(relay worker)

say() { printf '%s\n' "$*"; }
die() { printf 'manage.sh: %s\n' "$*" >&2; exit 1; }

need() {
  command -v "$1" >/dev/null 2>&1 || die "$1 is not installed. $2"
}

# Refuses an .env that is not plain KEY=VALUE lines (exit 64, as the binaries' config checks).
check_env_syntax() {
  [[ -f "$ENV_FILE" ]] || return 0
  local n=0 line
  while IFS= read -r line || [[ -n "$line" ]]; do
    n=$((n + 1))
    [[ -z "${line//[[:space:]]/}" || "$line" =~ ^[[:space:]]*# ]] && continue
    if ! [[ "$line" =~ ^[A-Za-z_][A-Za-z0-9_]*=[^\`\$\(\)\;]*$ ]]; then
      printf 'manage.sh: %s line %d is not KEY=VALUE (no $, backquotes, parentheses or ;)\n' "$ENV_FILE" "$n" >&2
      exit 64
    fi
  done <"$ENV_FILE"
}

# Loads .env into the environment of the commands that follow.
load_env() {
  check_env_syntax
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
RELAY_ADDR=${RELAY_ADDR:-127.0.0.1:3001}
LIVEKIT_URL=ws://127.0.0.1:7880
LIVEKIT_API_KEY=devkey
LIVEKIT_API_SECRET=$(random_hex 32)
RELAY_AGENT_SECRET=$(random_hex 32)
RELAY_URL=http://${RELAY_ADDR:-127.0.0.1:3001}
WORKER_ADDR=${WORKER_ADDR:-127.0.0.1:3002}
VAPI_SECRET=$(random_hex 32)
RUST_LOG=info
EOF
  chmod 600 "$ENV_FILE"
  say "created $ENV_FILE with fresh secrets"
}

relay_addr() { load_env; printf '%s' "${RELAY_ADDR:-127.0.0.1:3001}"; }
worker_addr() { load_env; printf '%s' "${WORKER_ADDR:-127.0.0.1:3002}"; }
addr_of() { if [[ "$1" == relay ]]; then relay_addr; else worker_addr; fi; }
health_path() { if [[ "$1" == relay ]]; then echo /readyz; else echo /healthz; fi; }

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

build_release() {
  need cargo "Install Rust (rustup) first."
  if [[ ! -x "$RELAY_BIN" || ! -x "$WORKER_BIN" || -n "$(find "$ROOT/relay" "$ROOT/agent-worker" "$ROOT/Cargo.toml" "$ROOT/Cargo.lock" -newer "$RELAY_BIN" -type f -print -quit 2>/dev/null)" ]]; then
    say "building release binaries…"
    (cd "$ROOT" && cargo build --release --bins)
    touch "$RELAY_BIN"
  fi
}

wait_ready() {
  local url="$1" tries=100
  while (( tries-- > 0 )); do
    if curl -fsS "$url" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  return 1
}

port_busy() { (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }

# Starts one process in the background with its pid and log file, and waits for its health.
start_proc() {
  local name="$1"; shift
  local addr; addr="$(addr_of "$name")"
  if pid_alive "$RUN_DIR/$name.pid"; then
    say "$name already running (pid $(cat "$RUN_DIR/$name.pid")) on http://$addr"
    return 0
  fi
  port_busy "$addr" && die "port ${addr##*:} ($name) is in use by another program; stop it or change its address in $ENV_FILE"
  nohup "$@" >>"$RUN_DIR/$name.log" 2>&1 &
  echo $! >"$RUN_DIR/$name.pid"
  if ! wait_ready "http://$addr$(health_path "$name")"; then
    tail -n 20 "$RUN_DIR/$name.log" >&2 || true
    die "$name did not become ready; see $RUN_DIR/$name.log"
  fi
  say "$name running (pid $(cat "$RUN_DIR/$name.pid")) on http://$addr"
}

cmd_start() {
  mkdir -p "$RUN_DIR"
  ensure_env
  need curl "Install curl (apt-get install -y curl)."
  build_release
  build_web
  load_env
  export RELAY_WEB_DIR="$ROOT/web/dist"
  "$RELAY_BIN" check-config >/dev/null || die "relay configuration in $ENV_FILE is not valid"
  "$WORKER_BIN" check-config >/dev/null || die "worker configuration in $ENV_FILE is not valid"
  start_proc relay "$RELAY_BIN"
  start_proc worker "$WORKER_BIN" serve
  local addr; addr="$(relay_addr)"
  say ""
  say "demo page:  http://$addr/  (press Ctrl+K or the headset button to start a session)"
  say "pop the popover in that tab (its key is shown on the page):"
  say "  set -a; . $ENV_FILE; set +a; $WORKER_BIN call <va_key> OpenPopover '{\"message\":\"Hello\"}'"
  say "walk it through every tool: $WORKER_BIN demo <va_key>"
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

cmd_stop() { stop_pid worker; stop_pid relay; }

cmd_status() {
  local rc=0 name
  for name in "${PROCS[@]}"; do
    local addr; addr="$(addr_of "$name")"
    if pid_alive "$RUN_DIR/$name.pid"; then
      local health="not ready"
      curl -fsS "http://$addr$(health_path "$name")" >/dev/null 2>&1 && health="ready"
      say "$name: running, pid $(cat "$RUN_DIR/$name.pid"), http://$addr, $health"
    else
      say "$name: stopped"
      rc=3
    fi
  done
  return "$rc"
}

cmd_logs() {
  local which="${1:-relay}"
  [[ -f "$RUN_DIR/$which.log" ]] || die "no log for $which yet ($RUN_DIR/$which.log)"
  tail -n 100 -f "$RUN_DIR/$which.log"
}

cmd_check() {
  [[ -f "$ENV_FILE" ]] || die "no $ENV_FILE yet: scripts/manage.sh start creates one"
  load_env
  build_release
  local rc=0
  "$RELAY_BIN" check-config || rc=$?
  "$WORKER_BIN" check-config || rc=$?
  return "$rc"
}

build_web() {
  web_deps
  if [[ ! -f "$ROOT/web/dist/index.html" || -n "$(find "$ROOT/web/src" "$ROOT/web/index.html" "$ROOT/web/styles.css" "$ROOT/web/build.mjs" -newer "$ROOT/web/dist/index.html" -type f -print -quit 2>/dev/null)" ]]; then
    say "building the web bundle…"
    (cd "$ROOT/web" && node build.mjs)
  fi
}

# Installs the web side's npm packages when they are missing or stale.
web_deps() {
  need node "Install Node.js 20 or newer."
  need npm "Install npm."
  if [[ ! -d "$ROOT/web/node_modules" || "$ROOT/web/package-lock.json" -nt "$ROOT/web/node_modules/.package-lock.json" ]]; then
    (cd "$ROOT/web" && npm ci --no-audit --no-fund)
  fi
}

# Installs the Debian packages the tests need when they are missing (as root), or says which.
ensure_test_tools() {
  local missing=()
  command -v node >/dev/null 2>&1 || missing+=(nodejs npm)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  [[ -x "${CHROMIUM_PATH:-/usr/bin/chromium}" ]] || missing+=(chromium)
  command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
  command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
  command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-venv)
  ((${#missing[@]})) || return 0
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    say "installing test prerequisites: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    die "the tests need: ${missing[*]} (apt-get install -y ${missing[*]})"
  fi
}

cmd_test() {
  need cargo "Install Rust (rustup) first."
  ensure_test_tools
  local chromium="${CHROMIUM_PATH:-/usr/bin/chromium}"
  cd "$ROOT"
  local out; out="$(mktemp -d)"
  say "== cargo fmt --check"
  cargo fmt --all -- --check
  say "== cargo clippy -D warnings"
  cargo clippy --workspace --all-targets -- -D warnings
  say "== cargo test"
  cargo test --workspace 2>&1 | tee "$out/cargo.txt"
  say "== web: type check and build"
  build_web
  (cd "$ROOT/web" && npx --no-install tsc --noEmit -p . && node build.mjs)
  cargo build --bins
  say "== deploy files"
  "$ROOT/deploy/check.sh"
  rm -rf "$ROOT/test-logs"
  local rc=0
  say "== protocol tests (relay and agent-worker binaries, tabs played by the official socket.io-client)"
  say "== browser tests (the demo page in Chromium; screenshots in test-logs/screenshots)"
  (cd "$ROOT/web" && RELAY_BIN="$ROOT/target/debug/relay" WORKER_BIN="$ROOT/target/debug/agent-worker" \
    TEST_LOG_DIR="$ROOT/test-logs" CHROMIUM_PATH="$chromium" \
    node --test --test-concurrency=2 --test-reporter=spec test/protocol/ test/browser/) 2>&1 | tee "$out/node.txt" || rc=$?
  # Alone, after the rest: it builds release binaries, which would slow the timed tests above.
  say "== operations test (scripts/manage.sh on a fresh copy of the tree)"
  (cd "$ROOT/web" && node --test --test-reporter=spec test/ops/) 2>&1 | tee "$out/ops.txt" || rc=$?
  # One closing line for the whole run: Rust and Node counts together.
  local cp cf np nf
  cp=$(grep -oE '^test result: [a-zA-Z]+\. [0-9]+ passed' "$out/cargo.txt" | awk '{s+=$4} END {print s+0}')
  cf=$(grep -oE '[0-9]+ failed' "$out/cargo.txt" | awk '{s+=$1} END {print s+0}')
  np=$(cat "$out/node.txt" "$out/ops.txt" | grep -oE '^ℹ pass [0-9]+' | awk '{s+=$3} END {print s+0}')
  nf=$(cat "$out/node.txt" "$out/ops.txt" | grep -oE '^ℹ fail [0-9]+' | awk '{s+=$3} END {print s+0}')
  # No summary at all means a runner died before reporting: count that as a failure.
  [[ -n "$(grep -E '^ℹ fail' "$out/node.txt")" && -n "$(grep -E '^ℹ fail' "$out/ops.txt")" ]] || nf=$((nf + 1))
  rm -rf "$out"
  say ""
  say "$((cp + np)) passed, $((cf + nf)) failed"
  return "$rc"
}

cmd_bench() {
  need cargo "Install Rust (rustup) first."
  need node "Install Node.js 20 or newer."
  cd "$ROOT"
  say "building release binaries (relay, loadgen)…"
  cargo build --release -p relay -p relay-bench
  if [[ ! -d "$ROOT/relay/bench/reference/node_modules" ]]; then
    (cd "$ROOT/relay/bench/reference" && npm ci --no-audit --no-fund)
  fi
  # 50,000 tabs need as many sockets on each side.
  ulimit -n 262144 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
  node "$ROOT/scripts/bench.mjs" "$@"
}

usage() {
  cat <<EOF
usage: scripts/manage.sh <command>
  start            build what is missing, create .env, start the relay, wait until ready
  stop             stop what start started (SIGTERM, bounded wait, then kill)
  restart          stop, then start
  status           show what runs, its pid, address and readiness
  logs [relay|worker]  follow a log
  test             run every test (format, lints, Rust tests, protocol and browser tests)
  bench [--quick]  run the benchmark (relay against the Node reference design); see scripts/bench.mjs
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
