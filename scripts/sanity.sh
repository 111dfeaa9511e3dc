#!/usr/bin/env bash
# `make sanity`: ansible-test sanity on the collection + antsibull-changelog lint.
#
# ansible-test must run from inside .../ansible_collections/llmops/sglang whose *real* path is
# that path (the collections/ symlink in the checkout does not count: getcwd resolves it), so
# the collection's files (tracked + untracked-but-not-ignored, as `git ls-files` reports them,
# minus the collections/ symlink) are copied into build/sanity/ansible_collections/llmops/sglang
# and the copy gets its own `git init` (ansible-test lists content through git when a .git is
# found walking up; without one it would find this checkout's .git, in which build/ is ignored).
#
# ansible-test runs with --venv: per test it creates a virtual environment and pip-installs
# its own pinned requirements from PyPI. The pip bootstrap script it would fetch from
# ci-files.testing.ansible.com (unreachable here) is replaced by scripts/get_pip_standin.py.
#
# Environment:
#   SANITY_PYTHON   Python version the tests run under (default 3.11, the controller's).
#   SANITY_ARGS     extra ansible-test sanity arguments, e.g. "--test pylint" or "-v".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
BIN="$ROOT/.venv/bin"
PY_VERSION="${SANITY_PYTHON:-3.11}"
COPY="$ROOT/build/sanity/ansible_collections/llmops/sglang"

[ -x "$BIN/ansible-test" ] || { echo "sanity: $BIN/ansible-test missing; run 'make venv'" >&2; exit 2; }
export PATH="$BIN:$PATH"
# The checkout's ansible.cfg (collections_path=./collections, library=...) must not leak into
# the copy's ansible-test run; ansible-test configures what it needs itself.
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS ANSIBLE_LIBRARY ANSIBLE_MODULE_UTILS

start=$(date +%s)
# One sanity run at a time per checkout: they share build/sanity/.
mkdir -p "$ROOT/build"
exec 9>"$ROOT/build/.sanity.lock"
flock 9

# --- 1. get-pip stand-in in ansible-test's cache -------------------------------------------
pip_version=$("$BIN/python" - <<'EOF'
import re, ansible_test, pathlib
src = (pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
print(re.search(r"default_packages = dict\(\s*pip='([^']+)'", src).group(1))
EOF
)
cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
mkdir -p "$(dirname "$cache")"
if [ ! -e "$cache" ] || grep -q 'llmops.sglang get-pip stand-in' "$cache"; then
    install -m 0644 scripts/get_pip_standin.py "$cache"
else
    echo "sanity: keeping existing pip bootstrap script $cache"
fi

# --- 2. copy of the collection under a real ansible_collections/ path --------------------
rm -rf "$ROOT/build/sanity"
mkdir -p "$COPY"
git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
    | "$BIN/python" -c '
import os, sys
for p in sys.stdin.buffer.read().split(b"\0"):
    # collections/ is the symlink back to the root; .git* and build outputs never belong in it
    if p and not p.startswith((b"collections/", b"build/")) and os.path.lexists(p):
        sys.stdout.buffer.write(p + b"\0")
' \
    | tar -C "$ROOT" --null -T - -cf - | tar -C "$COPY" -xf -
git -C "$COPY" init -q
# Files ansible-test sees are those git reports (untracked ones included); stage them so the
# copy looks like a clean clone and nothing depends on the copy's ignore rules.
git -C "$COPY" add -A

# --- 3. ansible-test sanity -----------------------------------------------------------------
# All default sanity tests run. None is skipped: none needs docker when run with --venv.
# --python pins the tests that run per Python version (compile, import) to the controller's
# Python; the others always use the controller Python.
rc=0
(
    cd "$COPY"
    # shellcheck disable=SC2086
    ansible-test sanity --venv --python "$PY_VERSION" --color no --junit ${SANITY_ARGS:-}
) || rc=$?

# --- 4. changelog fragments -------------------------------------------------------------------
(cd "$ROOT" && antsibull-changelog lint) || rc=$?

echo "sanity: finished in $(( $(date +%s) - start ))s, exit status $rc"
[ "$rc" -eq 0 ] || echo "sanity: results in $COPY/tests/output/" >&2
exit "$rc"
