#!/usr/bin/env bash
# sglang_probe / sglang_launch preflight against REAL sglang wheels, on a CPU-only machine.
# NOT part of `make test`: it downloads sglang, triton and friends from PyPI (~1.3 GB per version,
# ~2.3 GB per venv on disk). See docs/real-sglang.md.
#
#   bash tests/realsglang/check.sh                      0.5.6 and 0.5.23, venvs /tmp/realsgl-<V>
#   REALSGL_VERSIONS="0.5.23" bash tests/realsglang/check.sh
#   REALSGL_FRESH=1 ...   recreate the venvs (default: reuse one that has sglang==<V>)
#   REALSGL_BASE=/tmp  REALSGL_PYTHON=python3.11  REALSGL_TORCH=torch==2.13.0  (a CPU build:
#   the script refuses a CUDA torch; where no local CPU wheel exists, point pip at one with
#   PIP_EXTRA_INDEX_URL/PIP_FIND_LINKS)
#
# Per version: 1. venv = sglang --no-deps + CPU torch + the minimal dependencies below;
# 2. a missing dependency is reported by name; 3. introspection: launch_server path, choices,
# flag count, cached second run; 4. sglang_launch check-mode preflight (never launches).
# Prints PASS/FAIL per check; exits 1 when any check FAILed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
versions="${REALSGL_VERSIONS:-0.5.6 0.5.23}"
base="${REALSGL_BASE:-/tmp}"
python="${REALSGL_PYTHON:-python3.11}"
torch_spec="${REALSGL_TORCH:-torch==2.13.0}"
ctl="$root/.venv/bin"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 ANSIBLE_DEPRECATION_WARNINGS=false
work="$(mktemp -d "${TMPDIR:-/tmp}/realsgl-check.XXXXXX")"
hidden=""  # "<moved-aside path>|<original path>" while a module is hidden
unhide_module() {
  if [[ -n "$hidden" ]]; then
    mv "${hidden%%|*}" "${hidden#*|}"
    hidden=""
  fi
}
hide_module() {  # hide_module VENV TOP_LEVEL_PACKAGE
  local site
  site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  hidden="$site/$2.hidden-by-check|$site/$2"
  mv "$site/$2" "$site/$2.hidden-by-check"
}
trap 'unhide_module; rm -rf "$work"' EXIT
failures=0
pass() { printf 'PASS  %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*"; failures=$((failures + 1)); }
say() { printf '\n== %s\n' "$*"; }

# The modules sglang imports before its argument parser exists, found by running the probe and
# installing what its error named, one at a time (docs/real-sglang.md). Pins are sglang's own.
deps_for() {
  case "$1" in
    0.5.6) echo numpy tqdm pybase64 requests ipython pydantic aiohttp orjson safetensors triton \
                'pyzmq>=25.1.2' fastapi packaging pillow 'openai==2.6.1' partial-json-parser \
                huggingface-hub 'transformers==4.57.1' torchvision dill sentencepiece ;;
    0.5.23) echo numpy orjson psutil pybase64 requests triton packaging pillow starlette msgspec \
                 pydantic 'pyzmq>=25.1.2' tqdm ipython aiohttp huggingface-hub ;;
    *) echo "no dependency list for sglang $1: add one to deps_for" >&2; return 1 ;;
  esac
}

# module NAME CHECK(true|false) ARGS_JSON OUT_JSON: one task through ansible-playbook, its
# registered result written to OUT_JSON by the play itself (no JSON stdout callback needed).
module() {
  local name=$1 check=$2 args=$3 out=$4 book="$work/book.yml"
  rm -f "$out"
  cat > "$book" <<YML
- hosts: localhost
  gather_facts: false
  tasks:
    - llmops.sglang.$name: $args
      check_mode: $check
      register: result
      ignore_errors: true
    - ansible.builtin.copy:
        content: "{{ result | to_json }}"
        dest: "$out"
        mode: "0600"
      check_mode: false
YML
  if ! "$ctl/ansible-playbook" "$book" > "$work/play.log" 2>&1 || [[ ! -s "$out" ]]; then
    cat "$work/play.log" >&2
    echo '{"failed": true, "msg": "ansible-playbook failed (its output is above)"}' > "$out"
  fi
}

# jq-less assertions: q FILE EXPR -> prints the Python expression evaluated with r = the result
q() { "$ctl/python" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

now() { "$ctl/python" -c 'import time; print(time.monotonic())'; }
elapsed() { "$ctl/python" -c 'import sys; print("%.2f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$2"; }

make_venv() {
  local v=$1 venv=$2 have=""
  if [[ -x "$venv/bin/python" && "${REALSGL_FRESH:-0}" != 1 ]]; then
    have=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null || true)
  fi
  if [[ "$have" != "$v" ]]; then
    rm -rf "$venv"
    "$python" -m venv "$venv" || return 1
    "$venv/bin/pip" install -q --no-deps "sglang==$v" 2>&1 | grep -v "is ignored" >&2 || true
    "$venv/bin/python" -c 'import importlib.metadata as m; m.version("sglang")' || return 1
    # pip complains that sglang's other requirements are absent: expected, shown only on failure.
    if ! "$venv/bin/pip" install -q "$torch_spec" > "$work/pip.log" 2>&1; then
      cat "$work/pip.log" >&2
      return 1
    fi
  fi
  local cuda
  cuda=$("$venv/bin/python" -W ignore -c 'import torch; print(torch.version.cuda or "")') || return 1
  if [[ -n "$cuda" ]]; then
    echo "torch in $venv is a CUDA build ($cuda): this check wants a CPU torch (REALSGL_TORCH)" >&2
    return 1
  fi
  local torch_pin
  torch_pin=$("$venv/bin/python" -W ignore -c 'import torch; print(torch.__version__.split("+")[0])') || return 1
  printf 'torch==%s\n' "$torch_pin" > "$work/constraints.txt"
  local -a deps
  read -r -a deps <<< "$(deps_for "$v")"
  if ! "$venv/bin/pip" install -q -c "$work/constraints.txt" "${deps[@]}" > "$work/pip.log" 2>&1; then
    cat "$work/pip.log" >&2
    return 1
  fi
  if [[ " ${deps[*]} " == *" torchvision "* ]]; then
    # PyPI has only CUDA builds of torchvision: next to a CPU torch, declare its two op schemas
    # (test-only; tests/realsglang/_llmops_torchvision_cpu_shim.py says why).
    local site
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cp tests/realsglang/_llmops_torchvision_cpu_shim.py "$site/"
    echo "import _llmops_torchvision_cpu_shim" > "$site/_llmops_torchvision_cpu_shim.pth"
  fi
}

model="$work/model"
mkdir -p "$model"
echo '{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}' > "$model/config.json"
port=$("$ctl/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

for v in $versions; do
  venv="$base/realsgl-$v"
  state="$work/state-$v"
  say "sglang $v in $venv"
  if ! make_venv "$v" "$venv"; then
    fail "$v: venv $venv could not be set up"
    continue
  fi
  pass "$v: venv with sglang $v, CPU torch and $(deps_for "$v" | wc -w) dependencies"

  # A dependency really missing (its package directory moved aside, put back right after, and
  # by the EXIT trap if this script dies in between): the operator must read its name.
  hide_module "$venv" orjson
  module sglang_probe false \
    "{\"venv\": \"$venv\", \"introspect\": true, \"state_dir\": \"$work/state-hidden-$v\", \"gpu_backend\": \"none\"}" "$work/hidden.json"
  unhide_module
  msg=$(q "$work/hidden.json" 'r.get("msg", "")')
  if [[ $(q "$work/hidden.json" 'bool(r.get("failed")) and r.get("missing_module") == "orjson"') == True \
        && "$msg" == *"Python module 'orjson' is not installed in $venv (imported at $venv/"*"/sglang/"* ]]; then
    pass "$v: missing dependency named: $msg"
  else
    fail "$v: missing dependency not named clearly: $msg"
  fi
  if [[ "$v" != 0.5.6 ]]; then
    # 0.5.23 imports huggingface_hub only in launch_server.py: the parser is still read (from
    # ServerArgs.add_cli_args), with a warning naming the module, and that result is not cached.
    hide_module "$venv" huggingface_hub
    module sglang_probe false \
      "{\"venv\": \"$venv\", \"introspect\": true, \"state_dir\": \"$work/state-hidden-$v\", \"gpu_backend\": \"none\"}" "$work/hidden.json"
    unhide_module
    if [[ $(q "$work/hidden.json" 'not r.get("failed") and r["introspection"]["source"].endswith("add_cli_args") and r["introspection"]["cache_path"] is None and "huggingface_hub" in " ".join(r["introspection"]["warnings"])') == True ]]; then
      pass "$v: without huggingface_hub: fallback parser, not cached, warning: $(q "$work/hidden.json" 'r["introspection"]["warnings"][0]')"
    else
      fail "$v: without huggingface_hub: $(q "$work/hidden.json" 'r.get("msg") or r["introspection"]')"
    fi
  fi

  # Introspection: first run (imports sglang), second run (cache).
  probe_args="{\"venv\": \"$venv\", \"introspect\": true, \"state_dir\": \"$state\", \"gpu_backend\": \"none\"}"
  t0=$(now); module sglang_probe false "$probe_args" "$work/first.json"; t1=$(now)
  module sglang_probe false "$probe_args" "$work/second.json"; t2=$(now)
  if [[ $(q "$work/first.json" 'bool(r.get("failed"))') == True ]]; then
    fail "$v: introspection failed: $(q "$work/first.json" 'r.get("msg")')"
    continue
  fi
  first_s=$(q "$work/first.json" 'r["introspection"]["seconds"]')
  second_s=$(q "$work/second.json" 'r["introspection"]["seconds"]')
  nflags=$(q "$work/first.json" 'len(r["flags"])')
  nvisible=$(q "$work/first.json" 'sum(1 for f in r["flags"].values() if not f["hidden"])')
  echo "   first run: ${first_s}s in sglang ($(elapsed "$t0" "$t1")s wall); cached run: ${second_s}s ($(elapsed "$t1" "$t2")s wall); $nflags flags ($nvisible shown by --help)"
  src=$(q "$work/first.json" 'r["introspection"]["source"]')
  warn=$(q "$work/first.json" 'r["introspection"]["warnings"]')
  if [[ "$src" == sglang.launch_server && "$warn" == "[]" ]]; then
    pass "$v: parser captured from sglang.launch_server itself (no fallback)"
  else
    fail "$v: introspection source $src, warnings $warn"
  fi
  if [[ $(q "$work/first.json" 'r["introspection"]["sglang_version"]') == "$v" ]]; then
    pass "$v: reports sglang_version $v"
  else
    fail "$v: wrong sglang_version"
  fi
  if [[ $nflags -ge 250 ]]; then pass "$v: $nflags flags (>= 250)"; else fail "$v: only $nflags flags"; fi
  for flag in --reasoning-parser --tool-call-parser; do
    choices=$(q "$work/first.json" "' '.join(r['flags']['$flag']['choices'] or [])")
    if [[ " $choices " == *" kimi_k2 "* ]]; then
      pass "$v: $flag offers kimi_k2"
    else
      fail "$v: $flag lacks kimi_k2: $choices"
    fi
    echo "   $flag: $choices"
  done
  k3=$(q "$work/first.json" "'kimi_k3' in r['flags']['--reasoning-parser']['choices']")
  if [[ "$v" == 0.5.6 ]]; then
    if [[ $k3 == False ]]; then pass "$v: --reasoning-parser has no kimi_k3"; else fail "$v: kimi_k3 offered"; fi
  elif [[ $k3 == True ]]; then
    pass "$v: --reasoning-parser offers kimi_k3"
  else
    fail "$v: --reasoning-parser lacks kimi_k3"
  fi
  if [[ $(q "$work/second.json" 'r["introspection"]["cached"]') == True ]] \
       && "$ctl/python" -c 'import sys; sys.exit(float(sys.argv[1]) >= 0.5)' "$second_s"; then
    pass "$v: second run cached (${second_s}s)"
  else
    fail "$v: second run not cached: $(q "$work/second.json" 'r["introspection"]')"
  fi

  # sglang_launch preflight, check mode only: nothing is started.
  launch() {  # launch ARGS_DICT_JSON OUT
    module sglang_launch true "{\"name\": \"realsgl\", \"venv\": \"$venv\", \"model_path\": \"$model\", \"port\": $port, \"gpu_backend\": \"none\", \"state_dir\": \"$state\", \"args\": $1}" "$2"
  }
  launch '{"reasoning-parser": "kimi_k2", "tool-call-parser": "kimi_k2"}' "$work/ok.json"
  if [[ $(q "$work/ok.json" 'not r.get("failed") and r.get("pid") is None and not r["preflight"]["errors"]') == True ]]; then
    pass "$v: preflight accepts reasoning-parser=kimi_k2 tool-call-parser=kimi_k2 ($(q "$work/ok.json" '[c["msg"] for c in r["preflight"]["checks"] if c["name"] == "flags"][0]'))"
  else
    fail "$v: preflight rejects kimi_k2: $(q "$work/ok.json" 'r.get("msg")')"
  fi
  launch '{"reasoning-parser": "kimi_k3"}' "$work/k3.json"
  if [[ "$v" == 0.5.6 ]]; then
    msg=$(q "$work/k3.json" 'r.get("msg", "")')
    if [[ $(q "$work/k3.json" 'bool(r.get("failed"))') == True && "$msg" == *"valid choices:"*kimi_k2* ]]; then
      pass "$v: preflight refuses kimi_k3: $msg"
    else
      fail "$v: kimi_k3 not refused with the valid choices: $msg"
    fi
  else
    if [[ $(q "$work/k3.json" 'bool(r.get("failed"))') == False ]]; then
      pass "$v: preflight accepts reasoning-parser=kimi_k3"
    else
      fail "$v: kimi_k3 refused: $(q "$work/k3.json" 'r.get("msg")')"
    fi
  fi
  launch '{"no-such-flag-xyz": "1"}' "$work/unknown.json"
  msg=$(q "$work/unknown.json" 'r.get("msg", "")')
  if [[ $(q "$work/unknown.json" 'bool(r.get("failed"))') == True && "$msg" == *no-such-flag-xyz* ]]; then
    pass "$v: preflight refuses an unknown flag: $msg"
  else
    fail "$v: unknown flag not refused: $msg"
  fi
  if [[ ! -e "$state/realsgl.json" ]]; then
    pass "$v: check mode wrote no launch record"
  else
    fail "$v: check mode wrote $state/realsgl.json"
  fi
done

say "summary"
if (( failures )); then
  echo "$failures check(s) FAILED"
  exit 1
fi
echo "all checks PASSED"
