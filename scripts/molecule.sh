#!/usr/bin/env bash
# Molecule scenarios (molecule/*) against the SGLang emulator on this machine.
# Called by `make test-molecule`. Runs from the collection root, where molecule finds its
# scenarios in molecule/<scenario>/molecule.yml: each one is also `molecule test -s <scenario>`
# from the root. Each scenario has its own instance name, port (1810x) and directories
# (/tmp/llmops-molecule/<scenario>, /dev/shm/llmops_molecule_<scenario>_hs) and cleans up only those.
#
#   scripts/molecule.sh                 all scenarios
#   scripts/molecule.sh restart serving some of them
#   MOLECULE_JOBS=1 scripts/molecule.sh one at a time
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$root/.venv/bin:$PATH"          # molecule runs ansible-playbook / ansible-config from PATH
export ANSIBLE_CONFIG="$root/ansible.cfg"
export PYTHONDONTWRITEBYTECODE=1
export ANSIBLE_FORCE_COLOR="${ANSIBLE_FORCE_COLOR:-0}"
test -x .venv/bin/molecule || { echo "molecule.sh: .venv/bin/molecule missing - run 'make venv'" >&2; exit 2; }
test -x .venv-emulator/bin/python || { echo "molecule.sh: .venv-emulator missing - run 'make emulator-venv'" >&2; exit 2; }
test -e collections/ansible_collections/llmops/sglang/galaxy.yml \
    || { echo "molecule.sh: collections/ansible_collections/llmops/sglang missing - run 'make collection-link'" >&2; exit 2; }

if [ "$#" -gt 0 ]; then
  scenarios=("$@")
else
  scenarios=()
  for f in molecule/*/molecule.yml; do scenarios+=("$(basename "$(dirname "$f")")"); done
fi

# The scenarios run side by side (MOLECULE_JOBS at a time, default all): each owns its instance,
# port and directories, and most of a scenario is waiting on a server. Each one's output goes to
# build/molecule/<scenario>.log and is printed whole when it ends, so logs do not interleave.
jobs="${MOLECULE_JOBS:-${#scenarios[@]}}"
logs="$root/build/molecule"
mkdir -p "$logs"
start=$SECONDS
declare -A pids=()
declare -a results=() running=()
rc=0
finish() {  # wait for scenario $1, print its log and record the result
  local s="$1" status=0
  wait "${pids[$s]}" || status=$?
  echo "===== molecule scenario $s (exit status $status) ====="
  cat "$logs/$s.log"
  if [ "$status" -eq 0 ]; then results+=("PASS  $s  $(cat "$logs/$s.seconds") s"); else
    results+=("FAIL  $s  $(cat "$logs/$s.seconds" 2>/dev/null || echo '?') s"); rc=1; fi
}
# (the scenarios stay in this script's process group: a Ctrl-C reaches them too)
for s in "${scenarios[@]}"; do
  if [ "${#running[@]}" -ge "$jobs" ]; then finish "${running[0]}"; running=("${running[@]:1}"); fi
  (t0=$SECONDS; status=0; .venv/bin/molecule test -s "$s" >"$logs/$s.log" 2>&1 || status=$?
   echo "$((SECONDS - t0))" >"$logs/$s.seconds"; exit "$status") &
  pids[$s]=$!
  running+=("$s")
done
for s in "${running[@]}"; do finish "$s"; done
echo
echo "molecule summary (total $((SECONDS - start)) s, $jobs at a time):"
printf '  %s\n' "${results[@]}"
exit $rc
