#!/usr/bin/env bash
# Create .venv-router with the real SGLang router (sglang-router, a Rust binary in a wheel that
# runs on CPU), pinned. The fleet tests and the router benchmark use it; they call this script
# when the venv is missing. Idempotent: a venv with the pinned version is left as it is.
#
#   scripts/router_venv.sh [VENV_DIR]        (default: <repo>/.venv-router)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
VENV="${1:-$ROOT/.venv-router}"
VERSION="${SGLANG_ROUTER_VERSION:-0.3.2}"
PYTHON="${PYTHON:-python3}"

installed() {
    "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("sglang-router") != sys.argv[1])' \
        "$VERSION" 2>/dev/null
}

if [ -x "$VENV/bin/python" ] && installed; then
    exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "sglang-router==$VERSION"
installed || { echo "router_venv: sglang-router $VERSION not importable from $VENV" >&2; exit 1; }
echo "router_venv: sglang-router $VERSION in $VENV"
