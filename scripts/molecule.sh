#!/usr/bin/env bash
# Molecule scenarios (molecule/*) against the SGLang emulator on this machine.
# Called by `make test-molecule`. Runs from the collection root, where molecule finds its
# scenarios in molecule/<scenario>/molecule.yml: each one is also `molecule test -s <scenario>`
# from the root. Each scenario has its own instance name, port (1810x) and directories
# (/tmp/llmops-molecule/<scenario>, /dev/shm/llmops_molecule_<scenario>_hs) and cleans up only those.
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
test -e collections/ansible_collections/llmops/sglang/galaxy.yml \
    || { echo "molecule.sh: collections/ansible_collections/llmops/sglang missing - run 'make collection-link'" >&2; exit 2; }

if [ "$#" -gt 0 ]; then
  scenarios=("$@")
else
  scenarios=()
  for f in molecule/*/molecule.yml; do scenarios+=("$(basename "$(dirname "$f")")"); done
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
