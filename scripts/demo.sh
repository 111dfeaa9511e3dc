#!/usr/bin/env bash
# `make demo`: the incident's extraction restart against the SGLang emulator on localhost
# (inventory/local.yml: tp 8, port 18000, state/logs under /tmp/llmops-sglang-demo, dumps in
# /dev/shm/llmops_demo_hs).
#   1. restart_extraction.yml          plan -> teardown (if needed) -> launch -> ready -> dump proof
#   2. restart_extraction.yml again    same inputs: must report changed=0 (nothing restarted)
#   3. restart_extraction.yml --check --diff with another mem fraction: shows what would change
#   4. teardown.yml                    nothing is left running
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export ANSIBLE_CONFIG="$root/ansible.cfg"
export PYTHONDONTWRITEBYTECODE=1
playbook=(.venv/bin/ansible-playbook -i inventory/local.yml)
test -x .venv/bin/ansible-playbook || { echo "demo: run 'make venv' first" >&2; exit 2; }
test -x .venv-emulator/bin/python || { echo "demo: run 'make emulator-venv' first" >&2; exit 2; }
out="$(mktemp -d /tmp/llmops-sglang-demo-out.XXXXXX)"

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
recap() {  # recap FILE -> "ok=.. changed=.. ..." of localhost
  grep -E '^localhost +:' "$1" | tail -1 | sed -E 's/^localhost +: +//'
}
changed_of() { recap "$1" | sed -E 's/.*changed=([0-9]+).*/\1/'; }

cleanup_on_error() {
  echo "demo FAILED - tearing the demo instance down (logs kept in /tmp/llmops-sglang-demo/logs, output in $out)" >&2
  "${playbook[@]}" playbooks/teardown.yml >"$out/teardown-after-failure.log" 2>&1 || true
}
trap cleanup_on_error ERR

step "1/4 restart_extraction.yml (first run: launches the server)"
"${playbook[@]}" playbooks/restart_extraction.yml | tee "$out/run1.log"
echo "recap: $(recap "$out/run1.log")"

step "2/4 restart_extraction.yml again with the same inputs (must be changed=0)"
"${playbook[@]}" playbooks/restart_extraction.yml | tee "$out/run2.log"
c2="$(changed_of "$out/run2.log")"
echo "recap: $(recap "$out/run2.log")"
if [ "$c2" != "0" ]; then
  echo "demo: second run reported changed=$c2, expected 0" >&2
  false
fi
echo "second run: changed=0 - nothing was restarted"

step "3/4 --check --diff with mem-fraction-static 0.85 (shows the change, changes nothing)"
"${playbook[@]}" playbooks/restart_extraction.yml --check --diff \
  -e '{"sglang_extraction_mem_fraction_static": 0.85}' | tee "$out/check.log"
grep -q -- '+    "--mem-fraction-static": 0.85' "$out/check.log" || { echo "demo: the check-mode diff does not show the change" >&2; false; }

step "4/4 teardown.yml (nothing left behind)"
"${playbook[@]}" playbooks/teardown.yml -e sglang_purge_dumps_on_teardown=true | tee "$out/teardown.log"
rmdir /dev/shm/llmops_demo_hs 2>/dev/null || true
trap - ERR

step "demo summary"
sed -n '/Summarise the restart of the instance/,/^$/p' "$out/run1.log" | sed -n '3,$p'
echo
echo "run 1: $(recap "$out/run1.log")"
echo "run 2: $(recap "$out/run2.log")   <- same inputs, nothing restarted"
echo "check: $(recap "$out/check.log")   <- would restart (mem-fraction-static 0.88 -> 0.85)"
echo "teardown: $(recap "$out/teardown.log")"
echo "server logs: /tmp/llmops-sglang-demo/logs   ansible output: $out"
