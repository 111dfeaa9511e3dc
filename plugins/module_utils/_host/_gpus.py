"""GPU inventory: per-GPU memory and compute processes from NVML, else nvidia-smi, else none.

`LLMOPS_SGLANG_GPU_BACKEND=nvml|nvidia-smi|none` (or the modules' gpu_backend option) forces
one backend; the GPU validation uses it to prove both give the same answers.

Each compute process is tagged with its PID namespace as seen from this module: `own`, `other`
(a container: visible here, but not this module's to stop, ever) or `not visible` (the number
is not a process in this module's /proc). Only `own` processes can be ours.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

BACKENDS = ("auto", "nvml", "nvidia-smi", "none")
ENV_BACKEND = "LLMOPS_SGLANG_GPU_BACKEND"


NS_OWN, NS_OTHER, NS_INVISIBLE = "own", "other", "not visible"
_ASCII_DIGITS = re.compile(r"[0-9]+")
_ASCII_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


@dataclass
class GpuProcess:
    """A compute process on a GPU, with the memory it holds."""

    pid: int
    used_mib: Optional[int]
    namespace: Optional[str] = None       # NS_OWN | NS_OTHER | NS_INVISIBLE; None: not looked at

    def to_dict(self) -> Dict[str, object]:
        out: Dict[str, object] = {"pid": self.pid, "used_mib": self.used_mib}
        if self.namespace is not None:
            out["pid_namespace"] = self.namespace
        return out

    @property
    def foreign_namespace(self) -> bool:
        """Never ours, whatever else matches: it lives in another PID namespace (or is not a
        process this module can see)."""
        return self.namespace in (NS_OTHER, NS_INVISIBLE)


@dataclass
class Gpu:
    """One GPU, its memory and its compute processes."""

    index: int
    uuid: str
    name: str
    memory_used_mib: int
    memory_total_mib: int
    processes: List[GpuProcess] = field(default_factory=list)

    def to_dict(self) -> Dict[str, object]:
        return {
            "index": self.index, "uuid": self.uuid, "name": self.name,
            "memory_used_mib": self.memory_used_mib, "memory_total_mib": self.memory_total_mib,
            "processes": [p.to_dict() for p in self.processes],
        }


@dataclass
class GpuReport:
    """The GPUs a backend reported (none, with a note saying why, without one)."""

    backend: str
    gpus: List[Gpu]
    note: str = ""

    def to_dict(self) -> Dict[str, object]:
        return {"backend": self.backend, "note": self.note, "gpus": [g.to_dict() for g in self.gpus]}

    def pids_on(self, indexes: Optional[List[int]] = None) -> Dict[int, Dict[int, Optional[int]]]:
        """pid -> {gpu index: MiB} for the selected GPUs."""
        out: Dict[int, Dict[int, Optional[int]]] = {}
        for gpu in self.gpus:
            if indexes is not None and gpu.index not in indexes:
                continue
            for proc in gpu.processes:
                out.setdefault(proc.pid, {})[gpu.index] = proc.used_mib
        return out


def _mib(value: int) -> int:
    return int(value // (1024 * 1024))


def _nvml_memory(pynvml, handle) -> Tuple[int, int]:
    """(used, total) bytes as nvidia-smi shows them. The v1 struct counts the driver's reserved
    memory as used (615 MiB on an idle H200, driver 580, where nvidia-smi says 0 MiB); the v2
    struct reports it apart. v1 only where v2 is missing (old nvidia-ml-py or driver)."""
    v2 = getattr(pynvml, "nvmlMemory_v2", None)
    if v2 is not None:
        try:
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=v2)
            return mem.used, mem.total
        except Exception:  # TypeError (no version parameter) or an NVML "not supported" error
            pass
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return mem.used, mem.total


def _query_nvml() -> GpuReport:
    import pynvml  # nvidia-ml-py; ImportError handled by the caller

    pynvml.nvmlInit()
    try:
        gpus: List[Gpu] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            used, total = _nvml_memory(pynvml, handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            procs = [
                GpuProcess(p.pid, _mib(p.usedGpuMemory) if p.usedGpuMemory is not None else None)
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            ]
            gpus.append(Gpu(index, uuid if isinstance(uuid, str) else uuid.decode(),
                            name if isinstance(name, str) else name.decode(),
                            _mib(used), _mib(total), procs))
        return GpuReport("nvml", gpus)
    finally:
        pynvml.nvmlShutdown()


def _csv(cmd: List[str]) -> List[List[str]]:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    if out.returncode != 0:
        raise RuntimeError((out.stderr or out.stdout).strip() or "exit %d" % out.returncode)
    return [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]


def _int_or_none(text: str) -> Optional[int]:
    """A MiB figure ("900", "900.5"); None for "[N/A]" and anything not plain ASCII."""
    return int(float(text)) if _ASCII_NUMBER.fullmatch(text) else None


def _ascii_int(text: str) -> Optional[int]:
    """An index or a pid: ASCII digits only (str.isdigit also takes "\u00b2", which int()
    refuses, and "\u0663", which int() reads as 3)."""
    return int(text) if _ASCII_DIGITS.fullmatch(text) else None


def _query_nvidia_smi(binary: str) -> GpuReport:
    rows = _csv([binary, "--query-gpu=index,uuid,name,memory.used,memory.total",
                 "--format=csv,noheader,nounits"])
    gpus: Dict[str, Gpu] = {}
    for row in rows:
        index = _ascii_int(row[0]) if len(row) >= 5 else None
        if index is not None:
            gpus[row[1]] = Gpu(index, row[1], row[2], _int_or_none(row[3]) or 0, _int_or_none(row[4]) or 0)
    apps = _csv([binary, "--query-compute-apps=pid,used_memory,gpu_uuid",
                 "--format=csv,noheader,nounits"])
    for row in apps:
        pid = _ascii_int(row[0]) if len(row) >= 3 and row[2] in gpus else None
        if pid is not None:
            gpus[row[2]].processes.append(GpuProcess(pid, _int_or_none(row[1])))
    return GpuReport("nvidia-smi", sorted(gpus.values(), key=lambda g: g.index))


def mark_namespaces(report: GpuReport, own: Optional[str] = None) -> GpuReport:
    """Tag every compute process with its PID namespace relative to this module's."""
    own = own or _procs.own_pid_namespace()
    for gpu in report.gpus:
        for proc in gpu.processes:
            ns = _procs.pid_namespace(proc.pid)
            if ns is None:
                # unreadable (another user's, as non-root): unknown; absent: not in our /proc
                proc.namespace = None if os.path.exists("/proc/%d" % proc.pid) else NS_INVISIBLE
            else:
                proc.namespace = NS_OWN if own is None or ns == own else NS_OTHER
    return report


def query_gpus(backend: str = "auto") -> GpuReport:
    """Never raises: a host without GPUs is a report with no GPUs and a note saying why.
    Compute processes come tagged with their PID namespace (mark_namespaces)."""
    return mark_namespaces(_query(backend))


def _query(backend: str) -> GpuReport:
    backend = os.environ.get(ENV_BACKEND, backend) if backend == "auto" else backend
    notes: List[str] = []
    if backend in ("auto", "nvml"):
        try:
            return _query_nvml()
        except ImportError:
            notes.append("nvidia-ml-py (pynvml) is not importable")
        except Exception as exc:  # NVML raises its own error types; any means "no NVML"
            notes.append("NVML failed: %s" % exc)
    if backend in ("auto", "nvidia-smi"):
        binary = shutil.which("nvidia-smi")
        if binary:
            try:
                return _query_nvidia_smi(binary)
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                notes.append("nvidia-smi failed: %s" % exc)
        else:
            notes.append("nvidia-smi not found")
    if backend == "none":
        notes.append("GPU backend disabled")
    return GpuReport("none", [], "; ".join(notes) or "no GPU backend")


# Between two looks at the clock while reading one process's fd links (a process can hold a
# million of them).
_FDS_PER_CLOCK = 256


@dataclass
class HolderScan:
    """The fuser view (pid -> /dev/nvidia* files it holds open) and how much of the host it
    covers: `left_out` processes the rules exclude (another user's, another PID namespace's),
    `unreached` the ones the deadline left unread (`cut_short`)."""

    holders: Dict[int, List[str]] = field(default_factory=dict)
    scanned: int = 0
    left_out: int = 0
    unreached: int = 0
    cut_short: bool = False
    seconds: float = 0.0

    def to_dict(self) -> Dict[str, object]:
        out: Dict[str, object] = {"scanned": self.scanned, "left_out": self.left_out, "unreached": self.unreached,
                                  "cut_short": self.cut_short, "seconds": round(self.seconds, 3)}
        if self.cut_short:
            out["note"] = ("cut short at the teardown's timeout: the fd links of %d process(es) were not read, so "
                           "device_file_holders may be incomplete (it is only reported, never used to choose a "
                           "target)" % self.unreached)
        return out


def _nvidia_files(pid: int, deadline: Optional[float]) -> Tuple[List[str], bool]:
    """The /dev/nvidia* files among a process's fd links; (files, finished before the deadline)."""
    files = set()
    for count, (_fd, target) in enumerate(_procs.fd_targets(pid), 1):
        if target.startswith("/dev/nvidia"):
            files.add(target)
        if deadline is not None and count % _FDS_PER_CLOCK == 0 and time.monotonic() >= deadline:
            return sorted(files), False
    return sorted(files), True


def scan_device_holders(pids: List[int], deadline: Optional[float] = None, left_out: int = 0) -> HolderScan:
    """The fuser view over `pids`, stopped at `deadline` (time.monotonic()), even inside one
    process's fd table. Every CUDA process holds ALL device files, so this says "uses CUDA",
    never "uses GPU N"."""
    t0 = time.monotonic()
    scan = HolderScan(left_out=left_out)
    for i, pid in enumerate(pids):
        if deadline is not None and time.monotonic() >= deadline:
            scan.cut_short, scan.unreached = True, len(pids) - i
            break
        files, finished = _nvidia_files(pid, deadline)
        if files:
            scan.holders[pid] = files
        if not finished:
            scan.cut_short, scan.unreached = True, len(pids) - i
            break
        scan.scanned += 1
    scan.seconds = time.monotonic() - t0
    return scan


def device_file_holders(pids: Optional[List[int]] = None) -> Dict[int, List[str]]:
    """The fuser view of `pids` (every process when None), unbounded: see scan_device_holders."""
    return scan_device_holders(pids if pids is not None else _procs.all_pids()).holders
