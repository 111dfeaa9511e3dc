#!/usr/bin/env bash
# `make sanity`: ansible-test sanity on the collection as published + antsibull-changelog lint.
#
# The repository is unpacked as it would be published - the files git would put into an archive,
# nothing else, no ignore file - under a temporary .../ansible_collections/llmops/sglang (a real
# path: ansible-test only runs from inside such a directory) and tested there:
#
#   default           the working tree as `git ls-files --cached --others --exclude-standard`
#                     lists it (committed and new-but-not-ignored files; work in progress is
#                     tested without committing it, ignored files never are)
#   SANITY_REF=HEAD   `git archive HEAD` (any commit-ish): exactly what was committed
#
# The copy gets a fresh `git init` with every file staged, as a clone would be: ansible-test lists
# content through git when it finds a .git (and would find this checkout's otherwise), and its
# unversioned walk would not see directory symlinks, which the `symlinks` test must reject.
#
# ansible-test runs with --venv: per test it creates a virtual environment and pip-installs its
# own pinned requirements from PyPI. The pip bootstrap script it would fetch from
# ci-files.testing.ansible.com (unreachable here) is replaced by scripts/get_pip_standin.py.
#
# Environment:
#   SANITY_REF      test a commit (git archive) instead of the working tree.
#   SANITY_PYTHON   Python version the tests run under (default 3.11, the controller's).
#   SANITY_ARGS     extra ansible-test sanity arguments, e.g. "--test pylint" or "-v".
#   SANITY_KEEP=1   keep the temporary copy (it is kept anyway when a test fails).
# Results (junit XML included) are copied to build/sanity/output/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
BIN="$ROOT/.venv/bin"
PY_VERSION="${SANITY_PYTHON:-3.11}"
RESULTS="$ROOT/build/sanity/output"

[ -x "$BIN/ansible-test" ] || { echo "sanity: $BIN/ansible-test missing; run 'make venv'" >&2; exit 2; }
export PATH="$BIN:$PATH"
# The checkout's ansible.cfg (collections_path=./collections, library=...) must not leak into
# the copy's ansible-test run; ansible-test configures what it needs itself.
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS ANSIBLE_LIBRARY ANSIBLE_MODULE_UTILS

start=$(date +%s)
# One sanity run at a time per checkout: they share ansible-test's venvs and build/sanity/.
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

# --- 2. the published tree under a temporary ansible_collections/llmops/sglang --------------
TMP="$(mktemp -d "${TMPDIR:-/tmp}/llmops-sanity.XXXXXX")"
COPY="$TMP/ansible_collections/llmops/sglang"
mkdir -p "$COPY"
if [ -n "${SANITY_REF:-}" ]; then
    git -C "$ROOT" archive --format=tar "$SANITY_REF" | tar -C "$COPY" -xf -
    echo "sanity: testing git archive of $SANITY_REF ($(git -C "$ROOT" rev-parse --short "$SANITY_REF"))"
else
    # Files deleted in the working tree but not yet in the index are left out (as a commit of
    # the working tree would): tar gets only paths that exist.
    git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
        | "$BIN/python" -c '
import os, sys
sys.stdout.buffer.write(b"".join(p + b"\0" for p in sys.stdin.buffer.read().split(b"\0") if p and os.path.lexists(p)))' \
        | tar -C "$ROOT" --null --no-recursion -T - -cf - | tar -C "$COPY" -xf -
    echo "sanity: testing the working tree (tracked and new files, not ignored ones)"
fi
git -C "$COPY" init -q
git -C "$COPY" add -A -f     # -f: every unpacked file, whatever the copied .gitignore says
# ansible-test would apply an ignore file silently; findings are fixed in the code instead.
if compgen -G "$COPY/tests/sanity/ignore-*.txt" >/dev/null; then
    echo "sanity: $(cd "$COPY" && ls tests/sanity/ignore-*.txt) exists; fix the findings instead" >&2
    rm -rf "$TMP"
    exit 1
fi

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
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
[ ! -d "$COPY/tests/output" ] || cp -a "$COPY/tests/output/." "$RESULTS/"

# --- 4. changelog fragments -------------------------------------------------------------------
(cd "$COPY" && antsibull-changelog lint) || rc=$?

if [ "$rc" -eq 0 ] && [ "${SANITY_KEEP:-0}" != 1 ]; then
    rm -rf "$TMP"
else
    echo "sanity: the tested copy is kept in $COPY" >&2
fi
echo "sanity: finished in $(( $(date +%s) - start ))s, exit status $rc (results in build/sanity/output/)"
exit "$rc"
