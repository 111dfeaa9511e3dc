#!/usr/bin/env bash
# `make demo`: the incident's extraction restart against the SGLang emulator on localhost
# (inventory/local.yml: tp 8, extraction dump dir, NCCL_* variables).
#   1. restart_extraction.yml          plan -> teardown (if needed) -> launch -> ready -> dump proof
#   2. restart_extraction.yml again    same inputs: must report changed=0 (nothing restarted)
#   3. restart_extraction.yml --check --diff with another mem fraction: shows what would change
#   4. teardown.yml                    nothing is left running
#
# Everything comes from this checkout, so demos of two checkouts on one machine never meet:
#   LLMOPS_DEMO_DIR   default <checkout>/.cache/demo: state/, logs/, hs/ (dumps), out.*/ (output)
#   instance name     demo-<8 hex digits of sha1(LLMOPS_DEMO_DIR)> (as inventory/local.yml derives it)
#   LLMOPS_DEMO_PORT  default: a free port, chosen once per demo
#   LLMOPS_DEMO_REPORT_DIR  default <checkout>/build/demo-report: the restart report of run 1
# Two demos of the same checkout are kept apart by the instance's operation lock. When the demo
# fails, it tears down only a server that THIS run launched, through teardown.yml, which holds
# the same lock (refused while another run holds it).
#
#   scripts/demo.sh --env    print the name, port and directories the demo would use, and exit
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export ANSIBLE_CONFIG="$root/ansible.cfg"
export PYTHONDONTWRITEBYTECODE=1

demo_dir="$(realpath -m "${LLMOPS_DEMO_DIR:-$root/.cache/demo}")"
name="demo-$(printf '%s' "$demo_dir" | sha1sum | cut -c1-8)"
state="$demo_dir/state"
logs="$demo_dir/logs"
report_dir="$(realpath -m "${LLMOPS_DEMO_REPORT_DIR:-$root/build/demo-report}")"
if [ "${1:-}" = "--env" ]; then
  printf 'name=%s\ndemo_dir=%s\nstate_dir=%s\nlog_dir=%s\ndump_dir=%s\nreport_dir=%s\n' \
    "$name" "$demo_dir" "$state" "$logs" "$demo_dir/hs" "$report_dir"
  exit 0
fi
test -x .venv/bin/ansible-playbook || { echo "demo: run 'make venv' first" >&2; exit 2; }
test -x .venv-emulator/bin/python || { echo "demo: run 'make emulator-venv' first" >&2; exit 2; }
port="${LLMOPS_DEMO_PORT:-$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
mkdir -p "$demo_dir"
chmod 0700 "$demo_dir"
out="$(mktemp -d "$demo_dir/out.XXXXXX")"
playbook=(.venv/bin/ansible-playbook -i inventory/local.yml -e "sglang_demo_dir=$demo_dir" -e "sglang_port=$port")

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
recap() {  # recap FILE -> "ok=.. changed=.. ..." of localhost
  grep -E '^localhost +:' "$1" | tail -1 | sed -E 's/^localhost +: +//'
}
changed_of() { recap "$1" | sed -E 's/.*changed=([0-9]+).*/\1/'; }
launched_in() {  # launched_in FILE: this run's launch task started a server (whichever role runs it)
  awk '/^TASK \[([A-Za-z0-9_.]+ : )?Launch the new server\]/ { on = 1; next } /^TASK \[/ { on = 0 }
       on && /^changed:/ { found = 1 } END { exit !found }' "$1" 2>/dev/null
}

# shellcheck disable=SC2329  # invoked by the ERR trap
cleanup_on_error() {
  local launched=no f
  for f in "$out"/run*.log; do
    if launched_in "$f"; then launched=yes; fi
  done
  if [ "$launched" = no ]; then
    echo "demo FAILED before it launched a server: nothing to tear down (output in $out)" >&2
    return
  fi
  echo "demo FAILED - tearing down the server this run launched (logs kept in $logs, output in $out)" >&2
  "${playbook[@]}" playbooks/teardown.yml >"$out/teardown-after-failure.log" 2>&1 \
    || echo "demo: teardown refused or failed, see $out/teardown-after-failure.log" >&2
}
trap cleanup_on_error ERR

echo "demo: instance $name on 127.0.0.1:$port, state $state, logs $logs"

step "1/4 restart_extraction.yml (first run: launches the server)"
"${playbook[@]}" playbooks/restart_extraction.yml -e "sglang_report_dir=$report_dir" | tee "$out/run1.log"
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
trap - ERR

step "demo summary"
sed -n '/Summarise the restart of the instance/,/^$/p' "$out/run1.log" | sed -n '3,$p'
echo
echo "run 1: $(recap "$out/run1.log")"
echo "run 2: $(recap "$out/run2.log")   <- same inputs, nothing restarted"
echo "check: $(recap "$out/check.log")   <- would restart (mem-fraction-static 0.88 -> 0.85)"
echo "teardown: $(recap "$out/teardown.log")"
echo "server logs: $logs   ansible output: $out"
echo "where the host stood after run 1: $(grep -m1 -E ' on localhost: ' "$out/run1.log" | sed -E "s/^[ '\"-]*//; s/['\",]*$//")"
echo "restart report: $(grep -m1 -oE 'restart report: [^ "]+' "$out/run1.log" | sed 's/^restart report: //')"
