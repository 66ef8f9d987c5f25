# Building and installing what start and the tests need: release binaries, the web bundle and its
# npm packages, the Node agent library and reference agent, the e2e packages, the Python venv, Debian packages.
# Sourced after common.sh.

build_release() {
  need cargo "Install Rust (rustup) first."
  if [[ ! -x "$RELAY_BIN" || ! -x "$WORKER_BIN" || -n "$(find "$ROOT/relay" "$ROOT/agent-worker" "$ROOT/Cargo.toml" "$ROOT/Cargo.lock" -newer "$RELAY_BIN" -type f -print -quit 2>/dev/null)" ]]; then
    say "building release binaries…"
    (cd "$ROOT" && cargo build --release --bins)
    touch "$RELAY_BIN"
  fi
}

# Installs the npm packages (npm ci) of the Node agent library (agent-worker/node) and of the
# Node reference agent (agent-worker/reference/node, which holds a copy of the built library:
# reinstalled when the library was rebuilt) when they are missing or stale, and builds each
# (dist/) when its sources are newer.
ensure_node_agent() {
  need node "Install Node.js 20 or newer."
  need npm "Install npm."
  local lib="$ROOT/agent-worker/node" ref="$ROOT/agent-worker/reference/node"
  node_package "$lib" "$lib/dist/index.js" "$lib/package-lock.json"
  node_package "$ref" "$ref/dist/agent.js" "$lib/dist/index.js"
}

# node_package DIR BUILT STALE: npm ci in DIR unless its node_modules is newer than its lockfile
# and than STALE; npm run build unless BUILT is newer than its sources.
node_package() {
  local pkg="$1" built="$2" stale="$3" name="${1#"$ROOT"/}"
  if [[ ! -d "$pkg/node_modules" || "$pkg/package-lock.json" -nt "$pkg/node_modules/.package-lock.json" ||
        "$stale" -nt "$pkg/node_modules/.package-lock.json" ]]; then
    say "installing the npm packages of $name (npm ci)…"
    (cd "$pkg" && npm ci --no-audit --no-fund >/dev/null) || die "npm ci failed in $pkg"
  fi
  if [[ ! -f "$built" || -n "$(find "$pkg/src" "$pkg/package.json" "$pkg/tsconfig.json" "$pkg/tsconfig.build.json" -newer "$built" -type f -print -quit 2>/dev/null)" ]]; then
    say "building $name…"
    (cd "$pkg" && npm run -s build) || die "$name did not build"
  fi
}

build_web() {
  web_deps
  if [[ ! -f "$ROOT/web/dist/index.html" || -n "$(find "$ROOT/web/client/src" "$ROOT/web/demo/src" "$ROOT/web/demo/index.html" "$ROOT/web/demo/styles.css" "$ROOT/web/client/build.mjs" "$ROOT/web/demo/build.mjs" -newer "$ROOT/web/dist/index.html" -type f -print -quit 2>/dev/null)" ]]; then
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
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
  # Prometheus and promtool: the scrape configuration, alert rules and dashboard queries of
  # deploy/observability are run against a real Prometheus.
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
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

# The project-local Python venv with the agent library and the reference agent (both editable)
# and their pinned dependencies; wheels are cached in $TOOLS_DIR/pip-cache. Reinstalled when a
# pyproject.toml changes.
ensure_venv() {
  need python3 "Install Python 3.11 or newer."
  local pkg="$ROOT/agent-worker/python" ref="$ROOT/agent-worker/reference/python"
  if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV" || die "cannot make a venv at $VENV (apt-get install -y python3-venv)"
  fi
  if [[ ! -f "$VENV/.installed" || "$pkg/pyproject.toml" -nt "$VENV/.installed" || "$ref/pyproject.toml" -nt "$VENV/.installed" ]]; then
    say "installing the Python agent library, the reference agent and their pinned dependencies into $VENV…"
    "$VENV/bin/pip" install -q --disable-pip-version-check --cache-dir "$TOOLS_DIR/pip-cache" -e "$pkg[dev,mcp]" -e "$ref[dev]"
    touch "$VENV/.installed"
  fi
}

# Installs the e2e suites' npm packages (e2e/package.json) when they are missing or stale.
e2e_deps() {
  need npm "Install npm."
  if [[ ! -d "$ROOT/e2e/node_modules" || "$ROOT/e2e/package-lock.json" -nt "$ROOT/e2e/node_modules/.package-lock.json" ]]; then
    say "installing the e2e suites' packages (npm ci in e2e)…"
    (cd "$ROOT/e2e" && npm ci --no-audit --no-fund >/dev/null) || die "npm ci failed in $ROOT/e2e"
  fi
}

# What the deploy tests (e2e/deploy) need to build the image and run the stacks: podman (as
# root, with scripts/lib/containers.conf: this machine's ulimits, runc), catatonit (pods),
# debootstrap, podman-compose 1.6.0 (PyPI, in its own venv: Debian's 1.0.3 leaves networks
# behind), a Debian bookworm base made by debootstrap (no registry is reachable; cached as a
# tarball in $TOOLS_DIR/containers) and the stand-ins for the public images the deploy files
# name (e2e/deploy/bases.Containerfile; LiveKit's from the binary ensure_livekit installs).
# Everything is skipped or taken from podman's layer cache when it is there already.
ensure_containers() {
  local dir="$TOOLS_DIR/containers" missing=()
  export CONTAINERS_CONF="$ROOT/scripts/lib/containers.conf"
  command -v podman >/dev/null 2>&1 || missing+=(podman)
  command -v catatonit >/dev/null 2>&1 || [[ -x /usr/libexec/podman/catatonit ]] || missing+=(catatonit)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  if ((${#missing[@]})); then
    [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1 || die "the deploy tests need: ${missing[*]} (apt-get install -y ${missing[*]})"
    say "installing the container tools: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  mkdir -p "$dir"
  if ! "$dir/venv/bin/podman-compose" --version 2>/dev/null | grep -q 'podman-compose version 1\.6\.0'; then
    say "installing podman-compose 1.6.0 into $dir/venv…"
    python3 -m venv "$dir/venv" || die "cannot make a venv at $dir/venv (apt-get install -y python3-venv)"
    "$dir/venv/bin/pip" install -q --disable-pip-version-check --cache-dir "$TOOLS_DIR/pip-cache" podman-compose==1.6.0
  fi
  local base=localhost/va-base/debian:bookworm tarball="$dir/debian-bookworm-minbase.tar"
  # podman's image store is the machine's: a checkout that finds the base there needs no tarball.
  if ! podman image exists "$base" && [[ ! -s "$tarball" ]]; then
    local rootfs="$dir/rootfs"
    rm -rf "$rootfs"
    say "making the Debian bookworm base with debootstrap (a minute or more)…"
    debootstrap --variant=minbase bookworm "$rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$dir/debootstrap.log" 2>&1 ||
      { tail -n 20 "$dir/debootstrap.log" >&2; die "debootstrap failed (log: $dir/debootstrap.log)"; }
    # As slim as debian:bookworm-slim: no package lists, caches, documentation or locales.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/doc/* \
      "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log
    tar -C "$rootfs" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
    rm -rf "$rootfs"
  fi
  if ! podman image exists "$base"; then
    say "importing the Debian base as $base…"
    podman import -q "$tarball" "$base" >/dev/null || die "podman import of $tarball failed"
  fi
  local target
  for target in tools rust node redis haproxy; do
    podman build -q --pull=never --format docker --target "$target" -t "localhost/va-base/$target" \
      -f "$ROOT/e2e/deploy/bases.Containerfile" "$ROOT/e2e/deploy" >/dev/null ||
      die "the stand-in image $target did not build (podman build --target $target -f e2e/deploy/bases.Containerfile e2e/deploy)"
  done
  ensure_livekit
  mkdir -p "$dir/livekit"
  cp -u "$(livekit_bin)" "$dir/livekit/livekit-server"
  podman build -q --pull=never --format docker --target livekit -t localhost/va-base/livekit \
    -f "$ROOT/e2e/deploy/bases.Containerfile" "$dir/livekit" >/dev/null || die "the LiveKit stand-in image did not build"
}
