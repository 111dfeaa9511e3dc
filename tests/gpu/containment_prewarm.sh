#!/usr/bin/env bash
# cgroup containment and the prewarm on a GPU host, through the collection's library (see
# tests/gpu/containment_prewarm.py and docs/gpu-containment-prewarm.md). Offline: it needs python3
# with torch (CUDA), safetensors, psutil and nvidia-ml-py, root, and cgroup v2.
#
#   bash tests/gpu/containment_prewarm.sh                     real GPU, drops the page cache (root)
#   CPW_GPU=0 CPW_EVICT=fadvise CPW_CKPT_GIB=0.5 CPW_SHARD_MIB=128 \
#     CPW_PYTHON=.venv/bin/python CPW_EMU_PYTHON=.venv-emulator/bin/python \
#     bash tests/gpu/containment_prewarm.sh                   CPU rehearsal: never drops a shared
#                                                             machine's caches (per-file fadvise)
# Results in $OUT (default $CPW_WORK/out). Everything it started is killed at exit: the cgroups
# llmops-sglang.slice/cpw-*-<token> it made (cgroup.kill, rmdir) and the checkpoint it wrote.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export CPW_WORK="${CPW_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/llmops-cpw.XXXXXXXX")}"
export OUT="${OUT:-$CPW_WORK/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONDONTWRITEBYTECODE=1
py="${CPW_PYTHON:-python3}"
export CPW_EMU_PYTHON="${CPW_EMU_PYTHON:-$(command -v "$py")}"
# names this run's cgroups (llmops-sglang.slice/cpw-<label>-<token>), so the trap kills only them
export CPW_TOKEN="${CPW_TOKEN:-$(printf '%x%04x' $$ $RANDOM)}"
# Only the work directory itself needs to be private; its parents keep the usual mode.
# shellcheck disable=SC2174
mkdir -p -m 0700 "$CPW_WORK"
mkdir -p "$OUT"
started=$(date +%s)
say() { printf '[cpw.sh %4ss] %s\n' "$(( $(date +%s) - started ))" "$*"; }

# shellcheck disable=SC2329  # invoked by the EXIT trap
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  # cgroups this run made: their names end in the script's token and start with cpw-
  for cg in /sys/fs/cgroup/llmops-sglang.slice/cpw-* /sys/fs/cgroup/unified/llmops-sglang.slice/cpw-*; do
    [ -d "$cg" ] || continue
    [[ "$cg" == *"-$CPW_TOKEN" ]] || continue
    say "cleanup: cgroup.kill $cg"
    echo 1 >"$cg/cgroup.kill" 2>/dev/null
    for _ in $(seq 100); do grep -q 'populated 0' "$cg/cgroup.events" 2>/dev/null && break; sleep 0.05; done
    rmdir "$cg" 2>/dev/null
  done
  [ "${CPW_KEEP_CKPT:-0}" = 1 ] || rm -rf "${CPW_CKPT_DIR:-$CPW_WORK/ckpt}"
  if [ "${CPW_GPU:-1}" = 1 ]; then
    say "compute processes left (nvidia-smi):"
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv 2>&1 | head -5
  fi
  say "done, exit $rc"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

say "work $CPW_WORK, out $OUT, kernel $(uname -r), $(nproc) cpus, PID 1: $(cat /proc/1/comm)"
grep -E '^(MemTotal|MemAvailable)' /proc/meminfo | tr -s ' ' | paste -sd' '
df -hT "$CPW_WORK" | tail -1
grep -E ' - cgroup2? ' /proc/self/mountinfo | awk '{print "mount:", $5, $9, $(NF)}'
if [ "${CPW_GPU:-1}" = 1 ]; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv,noheader
fi
# psutil and requests are the library's needs; where the image lacks them, the carried .whl/
if ! "$py" -c 'import psutil, requests' 2>/dev/null; then
  say "psutil/requests missing: installing .whl/psutil-* .whl/requests-* into $CPW_WORK/site"
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$CPW_WORK/site" \
    .whl/psutil-*.whl .whl/requests-*.whl
  export PYTHONPATH="$CPW_WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
"$py" - <<'EOF'
import importlib, os, sys
need = ["psutil", "requests"] + (["torch", "safetensors", "pynvml"] if os.environ.get("CPW_GPU", "1") == "1" else [])
missing = []
for name in need:
    try:
        mod = importlib.import_module(name)
        print("  %s %s" % (name, getattr(mod, "__version__", "")))
    except ImportError as exc:
        missing.append("%s (%s)" % (name, exc))
if os.environ.get("CPW_GPU", "1") == "1" and not missing:
    import torch
    print("  torch.cuda: %s device(s)" % torch.cuda.device_count())
print("  python", sys.version.split()[0], sys.executable)
if missing:
    sys.exit("missing: " + ", ".join(missing))
EOF

say "containment_prewarm.py"
set +e
PYTHONUNBUFFERED=1 timeout -k 10 "${CPW_BUDGET_S:-540}" "$py" -u tests/gpu/containment_prewarm.py &
pypid=$!
trap 'say "signal: stopping the script"; kill -TERM "$pypid" 2>/dev/null; wait "$pypid"; exit 143' INT TERM
wait "$pypid"
rc=$?
set -e
say "containment_prewarm.py exit $rc; results in $OUT"
exit "$rc"
