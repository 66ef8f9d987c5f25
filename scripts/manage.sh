#!/usr/bin/env bash
# How an operator runs the voice-agent relay: start, stop, restart, status, logs, test, bench,
# check. State lives in .run/ (pid and log files, the generated LiveKit config) and .env
# (secrets, created on first start); tools it installs (the LiveKit server, the Python venv) in
# .tools/ (VA_TOOLS_DIR), reused afterwards.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN_DIR="$ROOT/.run"
ENV_FILE="$ROOT/.env"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
RELAY_BIN="$TARGET/release/relay"
WORKER_BIN="$TARGET/release/agent-worker"
TOOLS_DIR="${VA_TOOLS_DIR:-$ROOT/.tools}"
VENV="$TOOLS_DIR/venv"
# The LiveKit server version `start` installs (go install of the published Go module).
LIVEKIT_VERSION=v1.13.5
PROCS=(livekit relay worker agent)

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
LIVEKIT_URL=${LIVEKIT_URL:-ws://127.0.0.1:7880}
LIVEKIT_UDP_PORT=${LIVEKIT_UDP_PORT:-7882}
LIVEKIT_API_KEY=devkey
LIVEKIT_API_SECRET=$(random_hex 32)
RELAY_AGENT_SECRET=$(random_hex 32)
# Who may get a token. open: anyone, always in a fresh room of its own; the demo page asks for
# its token itself, so "start" runs open, for development only. In production: issuer (your
# app's backend asks POST /token with RELAY_TOKEN_ISSUER_SECRET, as deploy/compose*.yaml do) or
# app-jwt; see docs/security.md.
RELAY_TOKEN_MODE=open
RELAY_TOKEN_ISSUER_SECRET=$(random_hex 32)
# Tabs bind with their token; true only for frontends that register bare keys.
RELAY_ALLOW_BARE_KEYS=false
RELAY_URL=http://${RELAY_ADDR:-127.0.0.1:3001}
WORKER_ADDR=${WORKER_ADDR:-127.0.0.1:3002}
VAPI_SECRET=$(random_hex 32)
# Development: the demo page defines a tool of its own (set_theme) with its handler, and the
# worker offers such page tools to agents. Off in every deploy file: a page's text then reaches
# the agent's model. WORKER_CATALOG names your app's tool catalog (docs/add-a-tool.md).
WORKER_PAGE_TOOLS=true
RUST_LOG=info
EOF
  chmod 600 "$ENV_FILE"
  say "created $ENV_FILE with fresh secrets"
}

relay_addr() { load_env; printf '%s' "${RELAY_ADDR:-127.0.0.1:3001}"; }
worker_addr() { load_env; printf '%s' "${WORKER_ADDR:-127.0.0.1:3002}"; }
# The local LiveKit server's HTTP address (LIVEKIT_URL on this machine).
livekit_addr() { load_env; if livekit_local; then printf '127.0.0.1:%s' "$LK_PORT"; fi; }
# The reference agent's health server (LiveKit Agents' worker HTTP port).
agent_addr() { load_env; printf '127.0.0.1:%s' "${AGENT_HTTP_PORT:-8081}"; }
addr_of() {
  case "$1" in
    relay) relay_addr ;;
    worker) worker_addr ;;
    livekit) livekit_addr ;;
    agent) agent_addr ;;
  esac
}
health_path() {
  case "$1" in
    relay) echo /readyz ;;
    worker) echo /healthz ;;
    *) echo / ;;
  esac
}

# True when LIVEKIT_URL names a server on this machine (then start runs one); sets LK_PORT.
livekit_local() {
  local url="${LIVEKIT_URL:-ws://127.0.0.1:7880}"
  if [[ "$url" =~ ^wss?://(127\.0\.0\.1|localhost):([0-9]+)/?$ ]]; then
    LK_PORT="${BASH_REMATCH[2]}"
    return 0
  fi
  return 1
}

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

build_release() {
  need cargo "Install Rust (rustup) first."
  if [[ ! -x "$RELAY_BIN" || ! -x "$WORKER_BIN" || -n "$(find "$ROOT/relay" "$ROOT/agent-worker" "$ROOT/Cargo.toml" "$ROOT/Cargo.lock" -newer "$RELAY_BIN" -type f -print -quit 2>/dev/null)" ]]; then
    say "building release binaries…"
    (cd "$ROOT" && cargo build --release --bins)
    touch "$RELAY_BIN"
  fi
}

# Waits until `url` answers 2xx (0.1 s a try); gives up early when process `pid` (if given) ends.
wait_ready() {
  local url="$1" tries="${2:-100}" pid="${3:-}"
  while (( tries-- > 0 )); do
    if curl -fsS "$url" >/dev/null 2>&1; then return 0; fi
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then return 1; fi
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
  if port_busy "$addr"; then
    say "manage.sh: port ${addr##*:} ($name) is in use by another program; stop it or change its address in $ENV_FILE" >&2
    return 1
  fi
  nohup "$@" >>"$RUN_DIR/$name.log" 2>&1 &
  echo $! >"$RUN_DIR/$name.pid"
  if ! wait_ready "http://$addr$(health_path "$name")" "${READY_TRIES:-100}" "$(cat "$RUN_DIR/$name.pid")"; then
    tail -n 20 "$RUN_DIR/$name.log" >&2 || true
    say "manage.sh: $name did not become ready; see $RUN_DIR/$name.log" >&2
    stop_pid "$name" >/dev/null
    return 1
  fi
  say "$name running (pid $(cat "$RUN_DIR/$name.pid")) on http://$addr"
}

# ---- LiveKit server ---------------------------------------------------------------------------

# The LiveKit server binary: livekit-server on the PATH as it is, else the one start installed in
# $TOOLS_DIR/bin. Prints nothing when there is none.
livekit_bin() {
  if command -v livekit-server >/dev/null 2>&1; then
    command -v livekit-server
  elif [[ -x "$TOOLS_DIR/bin/livekit-server" ]]; then
    printf '%s' "$TOOLS_DIR/bin/livekit-server"
  fi
}

# Installs the pinned LiveKit server into $TOOLS_DIR/bin with Go (a few minutes the first time,
# Go's build cache makes later installs quick). Fails when there is no Go.
install_livekit() {
  command -v go >/dev/null 2>&1 || return 1
  mkdir -p "$TOOLS_DIR/bin"
  say "installing the LiveKit server $LIVEKIT_VERSION into $TOOLS_DIR/bin (go install; minutes the first time)…"
  # The module is published without cgo; its binary is called `server`.
  if ! (cd "$TOOLS_DIR" && CGO_ENABLED=0 GOBIN="$TOOLS_DIR/bin" GOFLAGS=-mod=mod \
      go install "github.com/livekit/livekit-server/cmd/server@$LIVEKIT_VERSION") >"$TOOLS_DIR/livekit-install.log" 2>&1; then
    tail -n 20 "$TOOLS_DIR/livekit-install.log" >&2
    return 1
  fi
  mv -f "$TOOLS_DIR/bin/server" "$TOOLS_DIR/bin/livekit-server"
}

# Single-quoted YAML scalar.
yaml_str() { printf "'%s'" "${1//\'/\'\'}"; }

# Writes the local LiveKit server's config from .env into $RUN_DIR/livekit.yaml (mode 600: it
# holds the API secret): HTTP on 127.0.0.1, one UDP port, no TCP fallback, webhooks to the
# worker signed with the same key.
write_livekit_config() {
  local cfg="$RUN_DIR/livekit.yaml"
  mkdir -p "$RUN_DIR"
  (
    umask 077
    cat >"$cfg" <<YAML
# Written by scripts/manage.sh from $ENV_FILE at every start; edit .env, not this file.
port: $LK_PORT
bind_addresses: [127.0.0.1]
keys:
  $(yaml_str "$LIVEKIT_API_KEY"): $(yaml_str "$LIVEKIT_API_SECRET")
rtc:
  udp_port: ${LIVEKIT_UDP_PORT:-7882}
  tcp_port: 0
  use_external_ip: false
  enable_loopback_candidate: true
$([[ -n "${LIVEKIT_NODE_IP:-}" ]] && printf '  node_ip: %s\n' "$(yaml_str "$LIVEKIT_NODE_IP")")
webhook:
  api_key: $(yaml_str "$LIVEKIT_API_KEY")
  urls: [$(yaml_str "http://${WORKER_ADDR:-127.0.0.1:3002}/livekit/webhook")]
logging:
  level: info
YAML
  )
  printf '%s' "$cfg"
}

# Refuses settings the local LiveKit server would not run well with; checks the generated config
# with the server's own (strict) parser. Prints the problem and fails.
check_livekit_config() {
  local bin="$1" cfg="$2" out
  if [[ -z "${LIVEKIT_API_KEY:-}" || -z "${LIVEKIT_API_SECRET:-}" ]]; then
    printf 'LIVEKIT_API_KEY and LIVEKIT_API_SECRET are required for the LiveKit server\n'
    return 1
  fi
  if ((${#LIVEKIT_API_SECRET} < 32)); then
    printf 'LIVEKIT_API_SECRET is shorter than 32 characters, which the LiveKit server refuses to trust\n'
    return 1
  fi
  out="$("$bin" --config "$cfg" ports 2>&1)" || true
  if ! grep -q 'HTTP service' <<<"$out"; then
    printf 'the LiveKit server refuses %s: %s\n' "$cfg" "$out"
    return 1
  fi
}

# Starts the local LiveKit server when LIVEKIT_URL is on this machine, installing it first when
# needed. Voice is optional: when it cannot run, say why and go on without it.
start_livekit() {
  if ! livekit_local; then
    say "livekit: LIVEKIT_URL is ${LIVEKIT_URL}; using that server, none started here"
    return 0
  fi
  local bin; bin="$(livekit_bin)"
  if [[ -z "$bin" ]] && ! install_livekit; then
    say "livekit: NOT STARTED: no livekit-server on the PATH and no Go to install it with."
    say "  Install Go ≥ 1.26 (then start installs LiveKit $LIVEKIT_VERSION into $TOOLS_DIR), or put"
    say "  livekit-server on the PATH, or set LIVEKIT_URL in $ENV_FILE to a LiveKit server (Cloud)."
    say "  Starting the rest without voice: the page's tools still work."
    return 0
  fi
  bin="$(livekit_bin)"
  local cfg problem
  cfg="$(write_livekit_config)"
  if ! problem="$(check_livekit_config "$bin" "$cfg")"; then
    say "livekit: NOT STARTED: $problem. Starting the rest without voice."
    return 0
  fi
  if ! start_proc livekit "$bin" --config "$cfg"; then
    say "livekit: NOT STARTED (see $RUN_DIR/livekit.log). Starting the rest without voice."
  fi
  return 0
}

# Installs the Node agent package's npm packages (npm ci) when they are missing or stale, and
# builds it (dist/) when its sources are newer.
ensure_node_agent() {
  need node "Install Node.js 20 or newer."
  need npm "Install npm."
  local pkg="$ROOT/agent-worker/node"
  if [[ ! -d "$pkg/node_modules" || "$pkg/package-lock.json" -nt "$pkg/node_modules/.package-lock.json" ]]; then
    say "installing the Node agent package's dependencies (npm ci in agent-worker/node)…"
    (cd "$pkg" && npm ci --no-audit --no-fund >/dev/null) || die "npm ci failed in $pkg"
  fi
  if [[ ! -f "$pkg/dist/agent.js" || -n "$(find "$pkg/src" "$pkg/package.json" "$pkg/tsconfig.json" "$pkg/tsconfig.build.json" -newer "$pkg/dist/agent.js" -type f -print -quit 2>/dev/null)" ]]; then
    say "building the Node agent package…"
    (cd "$pkg" && npm run -s build) || die "the Node agent package did not build"
  fi
}

# Starts a reference voice agent, the Python one (agent-worker/python) or the Node one
# (agent-worker/node), with the model settings from .env; it refuses (and says what is missing)
# when they are incomplete.
start_agent() {
  local kind="${1:-python}" cmd readme
  if [[ "$kind" == node ]]; then
    ensure_node_agent
    cmd=(node "$ROOT/agent-worker/node/dist/agent.js" start)
    readme=agent-worker/node/README.md
  else
    ensure_venv
    cmd=("$VENV/bin/python" -m voice_relay_agent start)
    readme=agent-worker/python/README.md
  fi
  if livekit_local && ! pid_alive "$RUN_DIR/livekit.pid"; then
    say "agent: NOT STARTED: no LiveKit server runs here for it to join"
    return 0
  fi
  pid_alive "$RUN_DIR/agent.pid" || printf '%s\n' "$kind" >"$RUN_DIR/agent.kind"
  # Its first start loads LiveKit Agents and its plugins: allow it up to 60 s.
  if ! WORKER_URL="${WORKER_URL:-http://$(worker_addr)}" AGENT_HTTP_PORT="${AGENT_HTTP_PORT:-8081}" READY_TRIES=600 \
      start_proc agent "${cmd[@]}"; then
    rm -f "$RUN_DIR/agent.kind"
    say "agent: NOT STARTED: see the reasons above; its models are set in $ENV_FILE ($readme)"
  fi
  return 0
}

cmd_start() {
  local agent_kind="" arg
  while (($#)); do
    arg="$1"
    shift
    case "$arg" in
      --agent)
        agent_kind=python
        if [[ "${1:-}" == python || "${1:-}" == node ]]; then agent_kind="$1"; shift; fi
        ;;
      --agent=python | --agent=node) agent_kind="${arg#--agent=}" ;;
      *) die "start: unknown option $arg (only --agent [python|node])" ;;
    esac
  done
  mkdir -p "$RUN_DIR"
  ensure_env
  need curl "Install curl (apt-get install -y curl)."
  build_release
  build_web
  load_env
  export RELAY_WEB_DIR="$ROOT/web/dist"
  "$RELAY_BIN" check-config >/dev/null || die "relay configuration in $ENV_FILE is not valid"
  "$WORKER_BIN" check-config >/dev/null || die "worker configuration in $ENV_FILE is not valid"
  start_livekit
  start_proc relay "$RELAY_BIN" || die "the relay did not start"
  WORKER_STATE_FILE="${WORKER_STATE_FILE:-$RUN_DIR/worker-sessions.json}" \
    start_proc worker "$WORKER_BIN" serve || die "the worker did not start"
  [[ -n "$agent_kind" ]] && start_agent "$agent_kind"
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

cmd_stop() { stop_pid agent; stop_pid worker; stop_pid relay; stop_pid livekit; }

cmd_status() {
  load_env
  local rc=0 name
  for name in "${PROCS[@]}"; do
    local addr; addr="$(addr_of "$name")"
    if [[ "$name" == livekit ]] && ! livekit_local; then
      say "livekit: not run here (LIVEKIT_URL is ${LIVEKIT_URL})"
      continue
    fi
    if [[ "$name" == agent ]] && ! pid_alive "$RUN_DIR/agent.pid"; then
      say "agent: not running (start --agent [python|node] runs it)"
      continue
    fi
    if pid_alive "$RUN_DIR/$name.pid"; then
      local health="not ready"
      curl -fsS "http://$addr$(health_path "$name")" >/dev/null 2>&1 && health="ready"
      local label="$name"
      [[ "$name" == agent && -f "$RUN_DIR/agent.kind" ]] && label="agent ($(cat "$RUN_DIR/agent.kind"))"
      say "$label: running, pid $(cat "$RUN_DIR/$name.pid"), http://$addr, $health"
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
  if livekit_local; then
    local bin problem; bin="$(livekit_bin)"
    if [[ -z "$bin" ]]; then
      say "livekit: no server installed yet (start installs $LIVEKIT_VERSION with Go); its config is not checked"
    elif ! problem="$(check_livekit_config "$bin" "$(write_livekit_config)")"; then
      printf 'configuration error: %s\n' "$problem" >&2
      rc=64
    else
      say "livekit: $RUN_DIR/livekit.yaml is valid for $("$bin" --version 2>/dev/null)"
    fi
  fi
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
  command -v espeak-ng >/dev/null 2>&1 || missing+=(espeak-ng)
  command -v sox >/dev/null 2>&1 || missing+=(sox)
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
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

# The project-local Python venv with the agent package (editable) and its pinned dependencies;
# wheels are cached in $TOOLS_DIR/pip-cache. Reinstalled when pyproject.toml changes.
ensure_venv() {
  need python3 "Install Python 3.11 or newer."
  local pkg="$ROOT/agent-worker/python"
  if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV" || die "cannot make a venv at $VENV (apt-get install -y python3-venv)"
  fi
  if [[ ! -f "$VENV/.installed" || "$pkg/pyproject.toml" -nt "$VENV/.installed" ]]; then
    say "installing the Python agent package and its pinned dependencies into $VENV…"
    "$VENV/bin/pip" install -q --disable-pip-version-check --cache-dir "$TOOLS_DIR/pip-cache" -e "$pkg[dev,mcp]"
    touch "$VENV/.installed"
  fi
}

# The LiveKit server for the voice-room test: the one on the PATH or in $TOOLS_DIR, else
# installed with Go.
ensure_livekit() {
  [[ -n "$(livekit_bin)" ]] && return 0
  install_livekit || die "the voice-room test needs a LiveKit server: install Go ≥ 1.26 or put livekit-server on the PATH"
}

cmd_test() {
  need cargo "Install Rust (rustup) first."
  ensure_test_tools
  local chromium="${CHROMIUM_PATH:-/usr/bin/chromium}"
  cd "$ROOT"
  local out; out="$(mktemp -d)"
  local component
  for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
      say "!! the Rust toolchain has no $component; adding it with rustup"
      rustup component add "$component" || die "the Rust toolchain lacks $component and rustup could not add it: the tests need it"
    fi
  done
  say "== cargo fmt --check"
  cargo fmt --all -- --check
  say "== cargo clippy -D warnings"
  cargo clippy --workspace --all-targets -- -D warnings
  say "== cargo test"
  cargo test --workspace 2>&1 | tee "$out/cargo.txt"
  say "== library crates: cargo package --list holds only sources (and the worker's embedded default catalog)"
  local crate stray
  for crate in relay-wire agent-worker; do
    stray="$(cargo package --list --allow-dirty -p "$crate" 2>/dev/null |
      grep -vE '^(\.cargo_vcs_info\.json|Cargo\.lock|Cargo\.toml(\.orig)?|README\.md|(src|tests|examples)/.*\.rs|catalog/[a-z0-9_-]+\.json)$' || true)"
    [[ -z "$stray" ]] || die "cargo package of $crate would ship stray files: $stray"
  done
  say "== python: lint and type check of the agent package (ruff, mypy)"
  ensure_venv
  (cd "$ROOT/agent-worker/python" && "$VENV/bin/ruff" check . && "$VENV/bin/ruff" format --check . && "$VENV/bin/mypy")
  say "== web: type check and build"
  build_web
  (cd "$ROOT/web" && npx --no-install tsc --noEmit -p . && node build.mjs)
  cargo build --bins
  say "== deploy files"
  "$ROOT/deploy/check.sh"
  rm -rf "$ROOT/test-logs"
  mkdir -p "$ROOT/test-logs"
  local rc=0
  say "== python tests (the agent package; against the real worker and relay binaries)"
  (cd "$ROOT/agent-worker/python" && RELAY_BIN="$ROOT/target/debug/relay" WORKER_BIN="$ROOT/target/debug/agent-worker" \
    TEST_LOG_DIR="$ROOT/test-logs" "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests) 2>&1 | tee "$out/py.txt" || rc=$?
  say "== node agent package (agent-worker/node: type check, lint, tests against the real worker and relay)"
  (cd "$ROOT/agent-worker/node" && npm ci --no-audit --no-fund >/dev/null && npm run -s build && npm run -s typecheck &&
    npm run -s lint && RELAY_BIN="$ROOT/target/debug/relay" WORKER_BIN="$ROOT/target/debug/agent-worker" \
    node --test --test-concurrency=1 --test-reporter=spec test/) 2>&1 | tee "$out/nodeagent.txt" || rc=1
  say "== protocol tests (relay and agent-worker binaries, tabs played by the official socket.io-client)"
  say "== browser tests (the demo page in Chromium; screenshots in test-logs/screenshots)"
  say "== package test (npm pack of the browser client, installed into a fresh React app built with Vite, in Chromium)"
  (cd "$ROOT/web" && RELAY_BIN="$ROOT/target/debug/relay" WORKER_BIN="$ROOT/target/debug/agent-worker" \
    TEST_LOG_DIR="$ROOT/test-logs" CHROMIUM_PATH="$chromium" \
    node --test --test-concurrency=2 --test-reporter=spec test/protocol/ test/browser/ test/package/ test/docs/ test/ui/) 2>&1 | tee "$out/node.txt" || rc=$?
  say "== voice room tests (LiveKit server, relay, worker, the Python and the Node reference agent, Chromium; in a network namespace)"
  ensure_livekit
  if [[ "$(id -u)" != 0 ]]; then
    say "!! the voice room test needs root for its network namespace (ip netns); counted as failed"
    printf 'ℹ fail 1\n' >"$out/voice.txt"
    rc=1
  else
    (cd "$ROOT/web" && RELAY_BIN="$ROOT/target/debug/relay" WORKER_BIN="$ROOT/target/debug/agent-worker" \
      TEST_LOG_DIR="$ROOT/test-logs" CHROMIUM_PATH="$chromium" VA_TOOLS_DIR="$TOOLS_DIR" \
      "$ROOT/scripts/netns.sh" node --test --test-concurrency=1 --test-reporter=spec test/voice/) 2>&1 | tee "$out/voice.txt" || rc=$?
  fi
  say "== MCP conformance (the official suite against the worker's /mcp, baseline in agent-worker/mcp-conformance)"
  (RELAY_BIN="$ROOT/target/debug/relay" WORKER_BIN="$ROOT/target/debug/agent-worker" TEST_LOG_DIR="$ROOT/test-logs" \
    "$ROOT/agent-worker/mcp-conformance/run.sh") 2>&1 | tee "$out/mcp.txt" || { rc=1; printf 'ℹ fail 1\n' >>"$out/mcp.txt"; }
  grep -q '^ℹ fail' "$out/mcp.txt" || printf 'ℹ pass 1\nℹ fail 0\n' >>"$out/mcp.txt"
  say "== API contract: generated requests against the relay's and the worker's /openapi.json (schemathesis, every check)"
  (TEST_LOG_DIR="$ROOT/test-logs" "$ROOT/tests-api/run.sh") 2>&1 | tee "$out/api.txt" || rc=1
  { grep -oE '^schemathesis: [0-9]+ passed, [0-9]+ failed' "$out/api.txt" || true; } | awk '{print "ℹ pass " $2; print "ℹ fail " $4}' >>"$out/api.txt"
  say "== soak, a minute per mode (tabs churning while agents call, one node and three on Redis)"
  (node "$ROOT/scripts/soak.mjs" --minutes 1 --nodes both --bin "$ROOT/target/debug/relay") 2>&1 | tee "$out/soak.txt" || rc=1
  if grep -q '^soak: passed' "$out/soak.txt"; then printf 'ℹ pass 1\nℹ fail 0\n' >>"$out/soak.txt"; else printf 'ℹ fail 1\n' >>"$out/soak.txt"; fi
  # Alone, after the rest: it builds release binaries, which would slow the timed tests above.
  say "== operations test (scripts/manage.sh on a fresh copy of the tree)"
  (cd "$ROOT/web" && node --test --test-reporter=spec test/ops/) 2>&1 | tee "$out/ops.txt" || rc=$?
  # One closing line for the whole run: Rust, Python and Node counts together.
  local cp cf np nf pp pf f
  cp=$({ grep -oE '^test result: [a-zA-Z]+\. [0-9]+ passed' "$out/cargo.txt" || true; } | awk '{s+=$4} END {print s+0}')
  cf=$({ grep -oE '[0-9]+ failed' "$out/cargo.txt" || true; } | awk '{s+=$1} END {print s+0}')
  # pytest's closing line: "N passed[, M failed][, …] in Xs".
  pp=$(tail -n 1 "$out/py.txt" | { grep -oE '[0-9]+ passed' || true; } | awk '{s+=$1} END {print s+0}')
  pf=$(tail -n 1 "$out/py.txt" | { grep -oE '[0-9]+ (failed|error|errors)' || true; } | awk '{s+=$1} END {print s+0}')
  ((pp + pf > 0)) || pf=$((pf + 1))
  np=$(cat "$out"/{nodeagent,node,voice,mcp,api,soak,ops}.txt | { grep -oE '^ℹ pass [0-9]+' || true; } | awk '{s+=$3} END {print s+0}')
  nf=$(cat "$out"/{nodeagent,node,voice,mcp,api,soak,ops}.txt | { grep -oE '^ℹ fail [0-9]+' || true; } | awk '{s+=$3} END {print s+0}')
  # No summary at all means a runner died before reporting: count that as a failure.
  for f in nodeagent node voice mcp api soak ops; do
    grep -qE '^ℹ fail' "$out/$f.txt" || nf=$((nf + 1))
  done
  rm -rf "$out"
  say ""
  say "$((cp + pp + np)) passed, $((cf + pf + nf)) failed"
  return "$rc"
}

cmd_bench() {
  need cargo "Install Rust (rustup) first."
  need node "Install Node.js 20 or newer."
  cd "$ROOT"
  if [[ "${1:-}" == --soak ]]; then
    local minutes="${2:-10}"
    [[ "$minutes" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "bench --soak takes a number of minutes"
    say "building the release relay…"
    cargo build --release -p relay
    web_deps
    node "$ROOT/scripts/soak.mjs" --minutes "$minutes" --nodes both
    return
  fi
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
  start [--agent [python|node]]  build what is missing, create .env, start LiveKit, the relay
                   and the worker (and a reference voice agent with --agent: the Python one,
                   or the Node one with --agent node), wait until ready
  stop             stop what start started (SIGTERM, bounded wait, then kill)
  restart          stop, then start
  status           show what runs, its pid, address and readiness
  logs [relay|worker|livekit|agent]  follow a log
  test             run every test (format, lints, Rust tests, protocol and browser tests)
  bench [--quick]  run the benchmark (relay against the Node reference design); see scripts/bench.mjs
  bench --soak M   soak for M minutes on one node and on three (churning tabs, every call outcome)
  bench --scale    six relays on one Redis at 10k, 50k and 100k tabs (memory, binds, calls)
  bench --storm    a relay node killed under 19,000 tabs: how they come back, what calls meet
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
