#!/usr/bin/env bash
# Runs one function of these files (ensure_venv, build_web, ensure_livekit…), for the test run
# (scripts/test.mjs): scripts/lib/run.sh <function> [args…]
set -euo pipefail
LIB="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$LIB/common.sh"
. "$LIB/livekit.sh"
. "$LIB/install.sh"
. "$LIB/procs.sh"
declare -F "${1:-}" >/dev/null || die "run.sh: no function ${1:-} in scripts/lib"
"$@"
