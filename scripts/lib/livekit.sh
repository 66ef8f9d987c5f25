# The LiveKit server: finding or installing its binary, its config written from .env, and
# starting it for `start`.
# Sourced after common.sh.

# True when LIVEKIT_URL names a server on this machine (then start runs one); sets LK_PORT.
livekit_local() {
  local url="${LIVEKIT_URL:-ws://127.0.0.1:7880}"
  if [[ "$url" =~ ^wss?://(127\.0\.0\.1|localhost):([0-9]+)/?$ ]]; then
    LK_PORT="${BASH_REMATCH[2]}"
    return 0
  fi
  return 1
}

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
# worker signed with the same key, its Prometheus metrics on 127.0.0.1:$LIVEKIT_METRICS_PORT
# (6789 by default; 0 turns them off).
write_livekit_config() {
  local cfg="${1:-$RUN_DIR/livekit.yaml}"
  mkdir -p "$RUN_DIR"
  (
    umask 077
    cat >"$cfg" <<YAML
# Written by scripts/manage.sh from $ENV_FILE at every start; edit .env, not this file.
port: $LK_PORT
bind_addresses: [127.0.0.1]
$([[ "${LIVEKIT_METRICS_PORT:-6789}" != 0 ]] && printf 'prometheus_port: %s\n' "${LIVEKIT_METRICS_PORT:-6789}")
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

# True when the config start would write now differs from the one the running server read.
livekit_config_changed() {
  local next="$RUN_DIR/livekit.yaml.next" rc=1
  write_livekit_config "$next" >/dev/null
  cmp -s "$next" "$RUN_DIR/livekit.yaml" || rc=0
  rm -f "$next"
  return "$rc"
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

# The LiveKit server for the voice-room test: the one on the PATH or in $TOOLS_DIR, else
# installed with Go.
ensure_livekit() {
  [[ -n "$(livekit_bin)" ]] && return 0
  install_livekit || die "the voice-room test needs a LiveKit server: install Go ≥ 1.26 or put livekit-server on the PATH"
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
