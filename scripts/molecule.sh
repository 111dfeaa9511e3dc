#!/usr/bin/env bash
# Molecule scenarios (extensions/molecule/*) against the SGLang emulator on this machine.
# Called by `make test-molecule`. Runs from the collection root: molecule 26 finds galaxy.yml
# there and takes its scenarios from extensions/molecule/ (collection mode). Each scenario has
# its own instance name, port (1810x) and directories (/tmp/llmops-molecule/<scenario>,
# /dev/shm/llmops_molecule_<scenario>_hs) and cleans up only those.
#
#   scripts/molecule.sh                 all scenarios
#   scripts/molecule.sh restart serving some of them
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$root/.venv/bin:$PATH"          # molecule runs ansible-playbook / ansible-config from PATH
export ANSIBLE_CONFIG="$root/ansible.cfg"
export PYTHONDONTWRITEBYTECODE=1
export ANSIBLE_FORCE_COLOR="${ANSIBLE_FORCE_COLOR:-0}"
test -x .venv/bin/molecule || { echo "molecule.sh: .venv/bin/molecule missing - run 'make venv'" >&2; exit 2; }
test -x .venv-emulator/bin/python || { echo "molecule.sh: .venv-emulator missing - run 'make emulator-venv'" >&2; exit 2; }

if [ "$#" -gt 0 ]; then
  scenarios=("$@")
else
  scenarios=(restart serving teardown broken_venv)
fi

start=$SECONDS
declare -a results=()
rc=0
for s in "${scenarios[@]}"; do
  t0=$SECONDS
  if .venv/bin/molecule test -s "$s"; then
    results+=("PASS  $s  $((SECONDS - t0)) s")
  else
    results+=("FAIL  $s  $((SECONDS - t0)) s")
    rc=1
  fi
done
echo
echo "molecule summary (total $((SECONDS - start)) s):"
printf '  %s\n' "${results[@]}"
exit $rc
