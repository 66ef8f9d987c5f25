# Shared by scripts/manage.sh and the test run (scripts/test.mjs through scripts/lib/run.sh):
# paths, messages, and reading .env. Sourced; ROOT is the repository.
ROOT="${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
RUN_DIR="$ROOT/.run"
ENV_FILE="$ROOT/.env"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
RELAY_BIN="$TARGET/release/relay"
WORKER_BIN="$TARGET/release/agent-worker"
TOOLS_DIR="${VA_TOOLS_DIR:-$ROOT/.tools}"
VENV="$TOOLS_DIR/venv"
# The LiveKit server version `start` installs (go install of the published Go module).
LIVEKIT_VERSION=v1.13.5

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
# A signing-key entry for RELAY_SESSION_KEYS: kid:seed, the seed 32 random bytes in base64url
# (what `relay session-key` prints).
session_key_entry() {
  printf 'k%s:%s' "$(random_hex 4)" "$(head -c32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
}

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
# The relay's and the worker's own credentials; no agent, platform or browser holds them.
# RELAY_WORKER_SECRET: the worker at the relay. RELAY_OPERATOR_SECRET: you (agent-worker call and
# demo mint a session token for the key with it; the worker's /sessions takes it).
# RELAY_SESSION_KEYS: the relay's Ed25519 keys that sign agents' session tokens and tab tokens'
# bind proofs (put a new one first to rotate; see docs/security.md).
RELAY_WORKER_SECRET=$(random_hex 32)
RELAY_OPERATOR_SECRET=$(random_hex 32)
RELAY_SESSION_KEYS=$(session_key_entry)
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
# The reference agent's name: the worker dispatches it for each user who joins, with a session
# token for that user's key alone (scripts/manage.sh start --agent runs it).
WORKER_AGENT_NAME=voice-relay-agent
# Development: the demo page defines a tool of its own (set_theme) with its handler, and the
# worker offers such page tools to agents. Off in every deploy file: a page's text then reaches
# the agent's model.
WORKER_PAGE_TOOLS=true
# Your app's tool catalog (docs/add-a-tool.md); the product's own tools when unset.
#WORKER_CATALOG=/path/to/my-catalog.json
# Pages on other origins that may use the relay, comma-separated (docs/browser.md); the relay's
# own pages always may.
#RELAY_ALLOWED_ORIGINS=http://127.0.0.1:8000
RUST_LOG=info
EOF
  chmod 600 "$ENV_FILE"
  say "created $ENV_FILE with fresh secrets"
}

