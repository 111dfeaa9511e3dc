"""CPU-only stand-in for nvidia-ml-py, used by `GPU_DRYRUN=fake bash tests/gpu/run.sh` to
rehearse the GPU validation on a machine without GPUs. NEVER on a GPU host (run.sh only puts
it on PYTHONPATH in fake mode).

It lists as "compute processes" only the live processes whose environment carries
GPUVAL_FAKE_TOKEN=<the token of this run> (other users' emulators on a shared machine stay
invisible): sglang::scheduler_TP<r> on GPU r % FAKE_GPU_COUNT holding SGLANG_EMULATOR_GPU_MIB,
and any process with GPUVAL_FAKE_GPU=<index> holding GPUVAL_FAKE_MIB (the foreign process).
Memory: like NVML on an H200 with driver 580, the v1 struct counts the driver's reserved
memory (GPUVAL_FAKE_BASE_MIB, default 615) as used, the v2 struct (version=nvmlMemory_v2, what
nvidia-smi shows) does not. A zombie holds nothing.
"""
import os
import re
from collections import namedtuple

NVML_VALUE_NOT_AVAILABLE = None
_COUNT = int(os.environ.get("GPUVAL_FAKE_GPU_COUNT", "2"))
_BASE = int(os.environ.get("GPUVAL_FAKE_BASE_MIB", "615"))
_TOTAL = 143771
_MiB = 1024 * 1024
_Mem = namedtuple("_Mem", "total free used")
_MemV2 = namedtuple("_MemV2", "version total reserved free used")
nvmlMemory_v2 = 0x02000028
_Proc = namedtuple("_Proc", "pid usedGpuMemory gpuInstanceId computeInstanceId")


class NVMLError(Exception):
    pass


def nvmlInit():
    if not os.environ.get("GPUVAL_FAKE_TOKEN"):
        raise NVMLError("fake NVML: GPUVAL_FAKE_TOKEN is not set")


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return _COUNT


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetUUID(handle):
    return "GPU-fake-0000-0000-0000-%012d" % handle


def nvmlDeviceGetName(handle):
    return "Fake H200"


def _environ(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as fh:
            raw = fh.read()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def _state(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _holders():
    token = os.environ.get("GPUVAL_FAKE_TOKEN")
    out = {}  # index -> [(pid, mib)]
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        env = _environ(pid)
        if not token or env.get("GPUVAL_FAKE_TOKEN") != token or _state(pid) in (None, "Z", "X"):
            continue
        if "GPUVAL_FAKE_GPU" in env:
            out.setdefault(int(env["GPUVAL_FAKE_GPU"]) % _COUNT, []).append(
                (pid, int(env.get("GPUVAL_FAKE_MIB", "2048"))))
            continue
        match = re.match(r"sglang::scheduler_TP(\d+)", _cmdline(pid))
        mib = int(env.get("SGLANG_EMULATOR_GPU_MIB", "0") or 0)
        if match and mib > 0:
            out.setdefault(int(match.group(1)) % _COUNT, []).append((pid, mib))
    return out


def nvmlDeviceGetComputeRunningProcesses(handle):
    return [_Proc(pid, mib * _MiB, 0, 0) for pid, mib in sorted(_holders().get(handle, []))]


def nvmlDeviceGetMemoryInfo(handle, version=None):
    procs = sum(mib for _pid, mib in _holders().get(handle, [])) * _MiB
    free = _TOTAL * _MiB - _BASE * _MiB - procs
    if version is None:
        return _Mem(_TOTAL * _MiB, free, _TOTAL * _MiB - free)
    return _MemV2(version, _TOTAL * _MiB, _BASE * _MiB, free, procs)
