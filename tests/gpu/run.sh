#!/usr/bin/env bash
# GPU validation of llmops.sglang (issue 8), on a GPU host, offline. See docs/gpu-validation.md.
#
#   bash tests/gpu/run.sh                  real GPUs: NVML (nvidia-ml-py) + nvidia-smi + torch
#   GPU_DRYRUN=fake bash tests/gpu/run.sh  CPU rehearsal: tests/gpu/fake stands in for NVML/nvidia-smi
#   GPU_DRYRUN=none bash tests/gpu/run.sh  no GPU backend at all: the GPU checks are SKIPped
#   GPUVAL_PLAYBOOK_COMPILE=1 bash tests/gpu/run.sh
#                                          only restart_extraction.yml with --enable-torch-compile,
#                                          the compile cache cold and warm (tests/gpu/compile_playbook.py)
#   GPUVAL_PLAYBOOK_PREWARM=1 bash tests/gpu/run.sh
#                                          only restart_extraction.yml with and without the prewarm
#                                          over a 20 GiB checkpoint (tests/gpu/prewarm_playbook.py)
#
# 1. a controller venv (ansible-core from .whl/*.whl, offline) and an emulator venv that sees the
#    system's torch (--system-site-packages) with the emulator installed as `sglang`;
#    an existing one can be given instead: GPUVAL_ANSIBLE_BIN=<dir with ansible-playbook>,
#    GPUVAL_EMU_VENV=<venv with the emulator>;
# 2. tests/gpu/validate.py: restart_extraction.yml / teardown.yml / the probe against localhost,
#    tp 8 over the GPUs in the emulator's GPU mode, with PASS/FAIL per check;
# 3. tests/gpu/containment_prewarm.sh, containment phase: the emulator launched through the library
#    in its own cgroup (containment cgroup), every process of it in the cgroup, _containment.stop,
#    populated 0, the cgroup removed, GPU memory back to idle (GPUVAL_CONTAINMENT=0 skips it;
#    GPUVAL_PREWARM=1 adds the prewarm phase: 20 GiB of shards, the page cache dropped);
# 4. results in $OUT (default $GPUVAL_WORK/out, GPUVAL_WORK a fresh mktemp -d; the containment
#    step's in $OUT/containment); exit 1 when any check FAILed.
# Everything it starts is killed at exit (process groups it noted, every process carrying the
# instance's state dir marker, the launch record's group); nothing else is touched.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# The work dir (state, logs, venvs) runs code as root: a fresh private 0700 directory, never a
# predictable path another local user could create first.
export GPUVAL_WORK="${GPUVAL_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/llmops-gpuval.XXXXXXXX")}"
work="$GPUVAL_WORK"
export OUT="${OUT:-$work/out}"
mode="${GPU_DRYRUN:-}"
case "$mode" in ""|0|no|false) mode=real ;; fake) ;; *) mode=none ;; esac
# KINDS.md: NVLink multicast stays off (the emulator does no NCCL; every child inherits these,
# and validate.py passes them into the launcher's clean environment too).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
started=$(date +%s)
say() { printf '[run.sh %4ss] %s\n' "$(( $(date +%s) - started ))" "$*"; }

state_dir="$work/state"
# shellcheck disable=SC2329  # invoked by the EXIT trap
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  # 1. process groups validate.py noted (ansible runs, the foreign CUDA process)
  if [ -f "$work/started.pids" ]; then
    while read -r pg; do
      [ -n "$pg" ] && kill -KILL -- "-$pg" 2>/dev/null
    done <"$work/started.pids"
  fi
  # 2. the instance: its launch record's group and every process with its state dir marker
  #    (escaped workers live in their own session; SPT_NOENV keeps the marker readable)
  if [ -f "$state_dir/gpuval.json" ]; then
    pg=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("pgid") or "")' \
         "$state_dir/gpuval.json" 2>/dev/null)
    [ -n "$pg" ] && [ "$pg" -gt 1 ] && kill -KILL -- "-$pg" 2>/dev/null
  fi
  for envf in /proc/[0-9]*/environ; do
    if { tr '\0' '\n' <"$envf"; } 2>/dev/null | grep -qx "LLMOPS_SGLANG_STATE_DIR=$state_dir"; then
      pid="${envf#/proc/}"; pid="${pid%/environ}"
      [ "$pid" != "$$" ] && kill -KILL "$pid" 2>/dev/null && say "cleanup: killed leftover pid $pid"
    fi
  done
  rm -rf /dev/shm/llmops_gpuval_hs
  if [ "$mode" = real ]; then
    say "compute processes left (nvidia-smi):"
    nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv 2>&1 | head -20
  fi
  say "done, exit $rc"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

# Only the work directory itself needs to be private; its parents keep the usual mode.
# shellcheck disable=SC2174
mkdir -p -m 0700 "$work"
mkdir -p "$OUT"
# ansible.cfg's collections_path needs collections/ansible_collections/llmops/sglang -> the checkout
# (`make collection-link`; gitignored, so a copied checkout may lack it)
if [ ! -e collections/ansible_collections/llmops/sglang ]; then
  mkdir -p collections/ansible_collections/llmops
  ln -sfn ../../.. collections/ansible_collections/llmops/sglang
fi
say "mode $mode, work $work, out $OUT, python3 $(python3 -V 2>&1)"
if [ "$mode" = real ]; then
  command -v nvidia-smi >/dev/null || { echo "run.sh: nvidia-smi not found (GPU_DRYRUN=fake rehearses without GPUs)" >&2; exit 2; }
  nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv,noheader || true
fi

# A venv that sees the base interpreter's packages (torch, psutil, pynvml, jinja2, yaml) even
# when python3 is itself a venv (--system-site-packages would then skip the outer venv): a .pth
# with the base interpreter's site dirs.
make_venv() {  # make_venv DIR
  python3 -m venv --system-site-packages "$1" 2>/dev/null \
    || { rm -rf "$1"; python3 -m venv --without-pip --system-site-packages "$1"; }
  local sp
  sp=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python3 -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' >"$sp/_gpuval_base.pth"
}
venv_pip() {  # venv_pip DIR ARGS...: the venv's pip, else the base pip aimed at the venv
  local v="$1"; shift
  if "$v/bin/python" -m pip --version >/dev/null 2>&1 && [ -x "$v/bin/pip" ]; then
    "$v/bin/python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$@"
  else
    python3 -m pip --python "$v/bin/python" install -q --no-index --no-deps --no-compile --no-cache-dir "$@"
  fi
}

# 1a. controller: ansible-core and its needs from .whl (offline), the rest from the system
if [ -n "${GPUVAL_ANSIBLE_BIN:-}" ] && [ -x "$GPUVAL_ANSIBLE_BIN/ansible-playbook" ]; then
  say "controller: existing $GPUVAL_ANSIBLE_BIN"
else
  ls .whl/ansible_core-*.whl >/dev/null 2>&1 || { echo "run.sh: no .whl/ansible_core-*.whl (carry .whl)" >&2; exit 2; }
  say "controller venv $work/ctl from .whl"
  make_venv "$work/ctl"
  venv_pip "$work/ctl" .whl/*.whl
  export GPUVAL_ANSIBLE_BIN="$work/ctl/bin"
fi
ctl_py="$(head -1 "$GPUVAL_ANSIBLE_BIN/ansible-playbook" | sed 's/^#!//' | awk '{print $1}')"
[ -x "$ctl_py" ] || ctl_py="$GPUVAL_ANSIBLE_BIN/python"
"$ctl_py" -c 'import ansible, psutil, jinja2, yaml; print("controller python", __import__("sys").version.split()[0], "ansible-core", ansible.__version__ if hasattr(ansible, "__version__") else "?")'
ver="$("$GPUVAL_ANSIBLE_BIN/ansible-playbook" --version)"
echo "${ver%%$'\n'*}"

# 1b. emulator venv: the emulator as the distribution `sglang`, torch from the system
if [ -n "${GPUVAL_EMU_VENV:-}" ] && [ -x "$GPUVAL_EMU_VENV/bin/python" ]; then
  say "emulator: existing $GPUVAL_EMU_VENV"
else
  say "emulator venv $work/emu"
  make_venv "$work/emu"
  cp -r tests/emulator "$work/emulator-src"
  rm -rf "$work/emulator-src/build" "$work/emulator-src"/*.egg-info
  spt=""
  for f in .whl/setproctitle-*.whl; do [ -f "$f" ] && spt="$f"; done
  if [ -n "$spt" ]; then venv_pip "$work/emu" "$spt"; fi
  # pip builds the emulator offline only where setuptools (+ bdist_wheel) is importable;
  # else the fallback copies the package and writes its dist-info itself.
  if ! venv_pip "$work/emu" --no-build-isolation "$work/emulator-src" >"$work/emulator-pip.log" 2>&1; then
    say "pip could not build the emulator offline ($(grep -m1 -iE 'error' "$work/emulator-pip.log" || true)); installing it by copy"
    "$work/emu/bin/python" tests/gpu/install_emulator.py "$work/emulator-src"
  fi
  export GPUVAL_EMU_VENV="$work/emu"
fi
"$GPUVAL_EMU_VENV/bin/python" -c 'import importlib.metadata as m, setproctitle; print("emulator sglang", m.version("sglang"))'

if [ "$mode" = fake ]; then
  export PYTHONPATH="$root/tests/gpu/fake${PYTHONPATH:+:$PYTHONPATH}" PATH="$root/tests/gpu/fake:$PATH"
  GPUVAL_FAKE_TOKEN="gpuval-$$-$RANDOM"
  export GPUVAL_FAKE_TOKEN
fi
export GPU_DRYRUN="$mode"
[ "$mode" = real ] && export GPU_DRYRUN=

if [ "${GPUVAL_PLAYBOOK_PREWARM:-0}" = 1 ]; then
  # restart_extraction.yml with and without the prewarm, the emulator loading real shards
  # (tests/gpu/prewarm_playbook.py); instead of validate.py and the containment step
  [ "$mode" = real ] || export PWP_GPU=0 PWP_EVICT=fadvise PWP_CKPT_GIB="${PWP_CKPT_GIB:-0.25}" PWP_SHARD_MIB="${PWP_SHARD_MIB:-64}"
  say "prewarm_playbook.py"
  set +e
  timeout -k 10 "${GPUVAL_PWP_TIMEOUT:-3000}" "$ctl_py" -u tests/gpu/prewarm_playbook.py
  rc=$?
  set -e
  say "prewarm_playbook.py exit $rc; results: $OUT/prewarm-playbook.md"
  exit "$rc"
fi

if [ "${GPUVAL_PLAYBOOK_COMPILE:-0}" = 1 ]; then
  # restart_extraction.yml with --enable-torch-compile, the compile cache cold and warm, for the
  # 0.5.6 and the 0.5.23 emulation (tests/gpu/compile_playbook.py); instead of validate.py
  [ "$mode" = real ] || export CPB_GPU=0
  say "compile_playbook.py"
  set +e
  timeout -k 10 "${GPUVAL_CPB_TIMEOUT:-1500}" "$ctl_py" -u tests/gpu/compile_playbook.py
  rc=$?
  set -e
  say "compile_playbook.py exit $rc; results: $OUT/compile-playbook.md"
  exit "$rc"
fi

say "validate.py (budget ${GPUVAL_BUDGET_S:-420} s)"
# In the background so that a TERM/INT reaches this script at once: validate.py gets TERM (it
# tears the instance down and writes its results), then the EXIT trap kills what is left.
timeout -k 10 "$(( ${GPUVAL_BUDGET_S:-420} + 60 ))" "$ctl_py" -u tests/gpu/validate.py &
vpid=$!
trap 'say "signal: stopping validate.py"; kill -TERM "$vpid" 2>/dev/null; for _ in $(seq 60); do kill -0 "$vpid" 2>/dev/null || break; sleep 0.5; done; exit 143' INT TERM
set +e
wait "$vpid"
rc=$?
set -e
say "validate.py exit $rc; results: $OUT/gpu-results.md"

if [ "${GPUVAL_CONTAINMENT:-1}" != 0 ]; then
  phases=containment
  [ "${GPUVAL_PREWARM:-0}" = 1 ] && phases=containment,prewarm
  cpw_env=(CPW_WORK="$work/cpw" OUT="$OUT/containment" CPW_PHASES="$phases" CPW_PYTHON="$ctl_py"
           CPW_EMU_PYTHON="$GPUVAL_EMU_VENV/bin/python" CPW_TP_CONTAIN="${GPUVAL_TP_CONTAIN:-2}"
           CPW_GPU_MIB="${GPUVAL_GPU_MIB:-4096}")
  # without real GPUs: CPU mode, and never a machine-wide cache drop
  [ "$mode" = real ] || cpw_env+=(CPW_GPU=0 CPW_EVICT=fadvise CPW_CKPT_GIB=0.25 CPW_SHARD_MIB=64)
  say "containment_prewarm.sh ($phases)"
  set +e
  env "${cpw_env[@]}" bash tests/gpu/containment_prewarm.sh &
  cpid=$!
  # a TERM/INT now reaches that script (its own trap removes its cgroups), then this one's EXIT trap
  trap 'say "signal: stopping containment_prewarm.sh"; kill -TERM "$cpid" 2>/dev/null; wait "$cpid"; exit 143' INT TERM
  wait "$cpid"
  crc=$?
  set -e
  say "containment_prewarm.sh exit $crc; results: $OUT/containment/containment-prewarm.md"
  [ "$crc" = 0 ] || rc=1
fi
exit "$rc"
