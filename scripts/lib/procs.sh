# The processes start runs: their addresses and health paths, pid files in .run/, starting one
# and waiting for its health (bounded), stopping one (SIGTERM, bounded wait, then kill). Sourced
# after common.sh and livekit.sh.

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

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

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

stop_pid() {
  local name="$1" pidfile="$RUN_DIR/$1.pid"
  if ! pid_alive "$pidfile"; then
    rm -f "$pidfile"
    say "$name not running"
    return 0
  fi
  local pid; pid="$(cat "$pidfile")"
  kill -TERM "$pid" 2>/dev/null || true
  # The relay drains for up to RELAY_DRAIN_MS (10 s by default); wait a little longer. The
  # LiveKit server waits on its first signal for every participant to leave the rooms; a second
  # one shuts it down at once (the rooms end either way).
  for i in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || break
    if [[ "$name" == livekit && "$i" == 10 ]]; then kill -TERM "$pid" 2>/dev/null || true; fi
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "$name did not stop in 15 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  say "$name stopped"
}
