#!/usr/bin/env bash
# How an operator runs the voice-agent relay: start, stop, restart, status, logs, check, and the
# test run and the benchmark (scripts/test.mjs, scripts/bench.mjs). State lives in .run/ (pid
# and log files, the generated LiveKit config) and .env (secrets, created on first start); tools
# it installs (the LiveKit server, the Python venv) in .tools/ (VA_TOOLS_DIR), reused afterwards.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Paths, messages and .env (common.sh); the LiveKit server's binary, config and start
# (livekit.sh); builds and installs (install.sh); pid files, start and stop of one process
# (procs.sh).
. "$ROOT/scripts/lib/common.sh"
. "$ROOT/scripts/lib/livekit.sh"
. "$ROOT/scripts/lib/install.sh"
. "$ROOT/scripts/lib/procs.sh"
PROCS=(livekit relay worker agent)

# Starts a reference voice agent, the Python one (agent-worker/reference/python) or the Node one
# (agent-worker/reference/node), with the model settings from .env; it refuses (and says what is
# missing) when they are incomplete.
start_agent() {
  local kind="${1:-python}" cmd readme
  if [[ "$kind" == node ]]; then
    ensure_node_agent
    cmd=(node "$ROOT/agent-worker/reference/node/dist/agent.js" start)
    readme=agent-worker/reference/node/README.md
  else
    ensure_venv
    cmd=("$VENV/bin/python" "$ROOT/agent-worker/reference/python/agent.py" start)
    readme=agent-worker/reference/python/README.md
  fi
  if livekit_local && ! pid_alive "$RUN_DIR/livekit.pid"; then
    say "agent: NOT STARTED: no LiveKit server runs here for it to join"
    return 0
  fi
  pid_alive "$RUN_DIR/agent.pid" || printf '%s\n' "$kind" >"$RUN_DIR/agent.kind"
  # Its first start loads LiveKit Agents and its plugins: allow it up to 60 s.
  # The agent holds no secret of the relay's (it refuses to start with one): each job's
  # dispatch gives it its user and a session token for that user's key.
  if ! WORKER_URL="${WORKER_URL:-http://$(worker_addr)}" AGENT_HTTP_PORT="${AGENT_HTTP_PORT:-8081}" READY_TRIES=600 \
      AGENT_NAME="${WORKER_AGENT_NAME:-voice-relay-agent}" \
      start_proc agent env -u RELAY_WORKER_SECRET -u RELAY_OPERATOR_SECRET -u RELAY_TOKEN_ISSUER_SECRET \
      -u RELAY_SESSION_KEYS -u VAPI_SECRET "${cmd[@]}"; then
    rm -f "$RUN_DIR/agent.kind"
    say "agent: NOT STARTED: see the reasons above; its models are set in $ENV_FILE ($readme)"
  fi
  return 0
}

# This script as the user can run it from where they are.
manage_cmd() {
  if [[ "$PWD" == "$ROOT" ]]; then printf 'scripts/manage.sh'; else printf '%s' "$ROOT/scripts/manage.sh"; fi
}

# What start would run with, checked without touching what runs: the relay's and the worker's
# configuration from .env and the environment, the worker's catalog (WORKER_CATALOG) included.
# Prints every problem (the binaries' own messages) and fails when there is one.
preflight() {
  load_env
  export RELAY_WEB_DIR="$ROOT/web/dist"
  local rc=0
  if ! "$RELAY_BIN" check-config >/dev/null; then
    say "manage.sh: the relay's configuration is not valid (above; it is read from $ENV_FILE)" >&2
    rc=64
  fi
  if ! "$WORKER_BIN" check-config >/dev/null; then
    say "manage.sh: the worker's configuration is not valid (above; it is read from $ENV_FILE and the catalog ${WORKER_CATALOG:-that WORKER_CATALOG names, the default one when unset})" >&2
    rc=64
  fi
  return "$rc"
}

start_relay() { start_proc relay "$RELAY_BIN"; }
start_worker() {
  WORKER_STATE_FILE="${WORKER_STATE_FILE:-$RUN_DIR/worker-sessions.json}" start_proc worker "$WORKER_BIN" serve
}

# The lines start and restart end with: where the page is, and the commands that drive it.
print_next_steps() {
  local addr manage; addr="$(relay_addr)"; manage="$(manage_cmd)"
  say ""
  say "demo page:  http://$addr/  (press Ctrl+K or the headset button to start a session)"
  say "pop the popover in that tab (its key is under \"Session details\" on the page):"
  say "  $manage call <va_key> OpenPopover '{\"message\":\"Hello\"}'"
  say "walk it through every tool: $manage demo <va_key>"
  where_to_look "$addr" "$(addr_of worker)"
}

# Where an operator looks: each server's metrics and readiness, the worker's session timelines,
# LiveKit's metrics, the traces' destination, and the page that follows one call end to end.
where_to_look() {
  local relay="$1" worker="$2"
  say ""
  say "where to look:"
  say "  metrics:    http://$relay/metrics (relay), http://$worker/metrics (worker)$(
    livekit_local && [[ "${LIVEKIT_METRICS_PORT:-6789}" != 0 ]] && printf ', http://127.0.0.1:%s/metrics (LiveKit)' "${LIVEKIT_METRICS_PORT:-6789}")"
  say "  readiness:  http://$relay/readyz, http://$worker/readyz (the worker's: the relay reachable)"
  if [[ "${WORKER_DEBUG_PAGE:-false}" == true ]]; then
    say "  sessions:   http://$worker/debug (their timelines; it asks for RELAY_OPERATOR_SECRET from $ENV_FILE)"
  else
    say "  sessions:   GET http://$worker/sessions and /sessions/<id>/events (WORKER_DEBUG_PAGE=true adds a page)"
  fi
  if [[ -n "${OTEL_EXPORTER_OTLP_ENDPOINT:-}${OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:-}" ]]; then
    # Shown without user information or query: either may hold a credential.
    say "  traces:     exported over OTLP to $(sed -E 's#//[^/@]*@#//#; s#[?].*##' <<<"${OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:-$OTEL_EXPORTER_OTLP_ENDPOINT}")"
  else
    say "  traces:     off (set OTEL_EXPORTER_OTLP_ENDPOINT in $ENV_FILE to export spans)"
  fi
  say "  dashboards and alerts: deploy/observability/; one call end to end: docs/follow-a-call.md"
}

# Reads the arguments of start (`start` as $1) or restart (`restart`): --agent [python|node]
# into AGENT_KIND, and for restart the processes named into NAMES.
read_args() {
  local command="$1" arg
  shift
  AGENT_KIND=""
  NAMES=()
  while (($#)); do
    arg="$1"
    shift
    case "$arg" in
      --agent)
        AGENT_KIND=python
        if [[ "${1:-}" == python || "${1:-}" == node ]]; then AGENT_KIND="$1"; shift; fi
        ;;
      --agent=python | --agent=node) AGENT_KIND="${arg#--agent=}" ;;
      livekit | relay | worker | agent) [[ "$command" == restart ]] && NAMES+=("$arg") || die "start: unknown option $arg (only --agent [python|node])" ;;
      *)
        [[ "$command" == restart ]] && die "restart: $arg is not one of livekit, relay, worker, agent (or --agent [python|node])"
        die "start: unknown option $arg (only --agent [python|node])"
        ;;
    esac
  done
}

cmd_start() {
  read_args start "$@"
  local agent_kind="$AGENT_KIND"
  mkdir -p "$RUN_DIR"
  ensure_env
  need curl "Install curl (apt-get install -y curl)."
  build_release
  build_web
  preflight || exit 64
  start_livekit
  start_relay || die "the relay did not start"
  start_worker || die "the worker did not start"
  [[ -n "$agent_kind" ]] && start_agent "$agent_kind"
  print_next_steps
}

# restart [livekit|relay|worker|agent…]: checks what would start first and stops nothing when
# it is not valid. Without names: the relay and the worker (and the agent when one runs); the
# LiveKit server only when its configuration changed or it is not running, since restarting it
# ends every voice room (and waits for their participants).
cmd_restart() {
  read_args restart "$@"
  local names=("${NAMES[@]}") name agent_asked="$AGENT_KIND"
  mkdir -p "$RUN_DIR"
  ensure_env
  need curl "Install curl (apt-get install -y curl)."
  build_release
  build_web
  if ! preflight; then
    say "manage.sh: restart stopped nothing: what runs keeps running; fix the problems above, then restart again" >&2
    return 64
  fi
  local agent_kind="$agent_asked"
  if [[ -z "$agent_kind" ]] && pid_alive "$RUN_DIR/agent.pid"; then
    agent_kind="$(cat "$RUN_DIR/agent.kind" 2>/dev/null || echo python)"
  fi
  if [[ -n "$agent_asked" && "${#names[@]}" -gt 0 ]]; then names+=(agent); fi
  if ((${#names[@]} == 0)); then
    names=(relay worker)
    [[ -n "$agent_kind" ]] && names+=(agent)
    if livekit_local && { ! pid_alive "$RUN_DIR/livekit.pid" || livekit_config_changed; }; then
      names+=(livekit)
    elif livekit_local; then
      say "livekit: kept running (its configuration is unchanged; restart livekit restarts it)"
    fi
  fi
  local has=" ${names[*]} "
  # Stopped in the order stop uses, started in the order start uses.
  for name in agent worker relay livekit; do
    [[ "$has" == *" $name "* ]] && stop_pid "$name"
  done
  [[ "$has" == *" livekit "* ]] && start_livekit
  if [[ "$has" == *" relay "* ]]; then start_relay || die "the relay did not start"; fi
  if [[ "$has" == *" worker "* ]]; then start_worker || die "the worker did not start"; fi
  [[ "$has" == *" agent "* ]] && start_agent "${agent_kind:-python}"
  print_next_steps
}

# reload: the running worker reads its catalog again (SIGHUP); a catalog with problems is
# refused and the running one stays. The worker keeps the catalog file it started with: another
# WORKER_CATALOG needs restart worker.
cmd_reload() {
  pid_alive "$RUN_DIR/worker.pid" || die "reload: the worker is not running (scripts/manage.sh start starts it)"
  load_env
  local pid log="$RUN_DIR/worker.log" from line
  pid="$(cat "$RUN_DIR/worker.pid")"
  from=$(($(wc -c <"$log") + 1))
  kill -HUP "$pid"
  for _ in $(seq 1 100); do
    line="$(tail -c "+$from" "$log" | grep -E 'catalog reloaded|the running one is kept' | tail -n 1 || true)"
    [[ -n "$line" ]] && break
    sleep 0.1
  done
  if [[ "$line" == *"catalog reloaded"* ]]; then
    say "worker: catalog reloaded (${line#*catalog=})"
  elif [[ -n "$line" ]]; then
    tail -c "+$from" "$log" | grep -E 'catalog not reloaded' >&2 || true
    say "manage.sh: reload refused the catalog (problems above); the worker keeps the one it runs" >&2
    return 64
  else
    die "reload: the worker did not say within 10 s whether it read the catalog (see $log)"
  fi
}

# call / demo: agent-worker call or demo with .env's settings (the relay's URL and the
# credential it needs), as the worker itself runs: the lines start prints, runnable as printed.
cmd_worker_cli() {
  [[ -f "$ENV_FILE" ]] || die "no $ENV_FILE yet: scripts/manage.sh start creates one"
  load_env
  build_release >&2
  exec "$WORKER_BIN" "$@"
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

cmd_bench() {
  need cargo "Install Rust (rustup) first."
  need node "Install Node.js 20 or newer."
  cd "$ROOT"
  if [[ "${1:-}" == --soak ]]; then
    local minutes="${2:-10}"
    [[ "$minutes" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "bench --soak takes a number of minutes"
    say "building the release relay…"
    cargo build --release -p relay
    e2e_deps
    if [[ "${3:-}" == --failover ]]; then
      # Three nodes on a primary + replica + three sentinels, the primary failing over every 75 s.
      node "$ROOT/scripts/soak.mjs" --minutes "$minutes" --nodes 3 --failover-every "${4:-75}"
    else
      node "$ROOT/scripts/soak.mjs" --minutes "$minutes" --nodes both
    fi
    return
  fi
  say "building release binaries (relay, loadgen, and the worker for --timeline)…"
  # --wake plays its tabs with the official socket.io-client, from the black-box suites' packages.
  if [[ " $* " == *" --wake "* ]]; then
    e2e_deps
  fi
  if [[ " $* " == *" --timeline "* ]]; then
    cargo build --release -p relay -p relay-bench -p agent-worker
  else
    cargo build --release -p relay -p relay-bench
  fi
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
  restart [livekit|relay|worker|agent] [--agent [python|node]]  check the configuration, then
                   restart those (default: the relay, the worker and a running agent, or the
                   one --agent names; LiveKit only when its configuration changed); nothing
                   stops when the check fails
  reload           the running worker reads its catalog again (SIGHUP); a bad one is refused
  call <va_key> <tool> [params-json] [--await]  agent-worker call with .env's settings
  demo <va_key>    agent-worker demo with .env's settings: walk a tab through every tool
  status           show what runs, its pid, address and readiness
  logs [relay|worker|livekit|agent]  follow a log
  test             run every test (scripts/test.mjs: format, lints, cargo test, pytest and
                   node:test for the agent packages, e2e/ suites; reports in test-logs/reports/)
  bench [--quick]  run the benchmark (relay against the Node reference design); see scripts/bench.mjs
  bench --tracing R   the relay alone with its spans exported over OTLP, R (0 to 1) of the calls sampled
  bench --timeline    the worker's memory per session with its timeline on, and off
  bench --soak M   soak for M minutes on one node and on three (churning tabs, every call outcome)
  bench --soak M --failover [S]   three nodes on Redis with sentinels, the primary failing over every S s (75)
  bench --costs    a call's cost on Redis against a relay without it (relay CPU, Redis round trips)
  bench --scale    six relays on one Redis at 10k, 50k and 100k tabs (memory, binds, calls)
  bench --storm    a relay node killed under 19,000 tabs: how they come back, what calls meet
  bench --wake     how soon a call waiting for its tab goes out once the tab binds on another node
  bench --scale --redis K   on a Redis Cluster of three primaries (K: cluster) or both (one,cluster); --costs and --storm take it too
  check            validate the configuration without starting anything
EOF
}

# The whole test run: scripts/test.mjs (every suite in order, reports in test-logs/reports/):
# cargo test, pytest for agent-worker/python, agent-worker/reference/python and e2e/worker,
# node:test for the Node agent packages, web/test/ui and e2e/, Schemathesis, the soak.
cmd_test() {
  need node "Install Node.js 20 or newer."
  exec node "$ROOT/scripts/test.mjs" "$@"
}

main() {
  local cmd="${1:-}"
  shift || true
  case "$cmd" in
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    restart) cmd_restart "$@" ;;
    reload) cmd_reload "$@" ;;
    call) cmd_worker_cli call "$@" ;;
    demo) cmd_worker_cli demo "$@" ;;
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
