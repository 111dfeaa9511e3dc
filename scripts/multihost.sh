#!/usr/bin/env bash
# Multi-host checks over real SSH (make test-multihost): creates N test hosts on this machine
# (network + PID namespaces, one sshd each: tests/multihost/harness.sh), runs
# tests/multihost/test_multihost.py against them, and removes the hosts again, also on failure
# or Ctrl-C. Needs root. Exit status: pytest's (non-zero on any failed check).
#
#   scripts/multihost.sh                 3 hosts, every check
#   MH_HOSTS=4 scripts/multihost.sh      more hosts (2..9)
#   scripts/multihost.sh -k multinode    pytest arguments pass through
#   MH_KEEP=1 scripts/multihost.sh       leave the hosts up afterwards (prints how to remove them)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
HARNESS=$ROOT/tests/multihost/harness.sh
PY=$ROOT/.venv/bin/python

[ "$(id -u)" = 0 ] || { echo "multihost: needs root (network namespaces, sshd)" >&2; exit 1; }
[ -x "$PY" ] || { echo "multihost: $PY missing: run make venv" >&2; exit 1; }
[ -x "$ROOT/.venv-emulator/bin/python" ] || { echo "multihost: .venv-emulator missing: run make emulator-venv" >&2; exit 1; }
[ -e "$ROOT/collections/ansible_collections/llmops/sglang/galaxy.yml" ] \
    || { echo "multihost: collections/ansible_collections/llmops/sglang missing: run make collection-link" >&2; exit 1; }

export ANSIBLE_CONFIG=$ROOT/ansible.cfg
export PYTHONDONTWRITEBYTECODE=1

DIR=""
PYTEST_PID=""
# shellcheck disable=SC2329  # invoked by the EXIT/INT/TERM trap
cleanup() {
    local rc=$?
    if [ -n "$PYTEST_PID" ] && kill -0 "$PYTEST_PID" 2>/dev/null; then
        kill -TERM "$PYTEST_PID" 2>/dev/null || true
        wait "$PYTEST_PID" 2>/dev/null || true
    fi
    if [ -n "$DIR" ]; then
        if [ "${MH_KEEP:-0}" = 1 ]; then
            echo "multihost: hosts kept in $DIR; remove with: $HARNESS down $DIR" >&2
        else
            "$HARNESS" down "$DIR" || true
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$(date +%s)
DIR=$("$HARNESS" up --hosts "${MH_HOSTS:-3}")
# shellcheck disable=SC1091
source "$DIR/env"
rc=0
# In the background + wait: a SIGTERM (CI timeout) reaches the trap at once, not after pytest.
"$PY" -m pytest -p no:cacheprovider -q -rA tests/multihost "$@" &
PYTEST_PID=$!
wait "$PYTEST_PID" || rc=$?
PYTEST_PID=""
echo "multihost: pytest rc=$rc in $(( $(date +%s) - start ))s" >&2
exit "$rc"
