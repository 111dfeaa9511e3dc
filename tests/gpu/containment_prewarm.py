"""GPU check of cgroup containment and of the prewarm, through the collection's LIBRARY (not the
playbooks): _launcher.spawn with LaunchSpec(containment="cgroup"), _containment.stop, and
_prewarm.run / _prewarm.report, against the SGLang emulator in GPU mode. Started by
tests/gpu/containment_prewarm.sh; see docs/gpu-containment-prewarm.md.

Phases (CPW_PHASES, default "containment,prewarm"):

  containment  the emulator (tp CPW_TP_CONTAIN, each rank holding CPW_GPU_MIB on the GPU) is
               launched contained in its own cgroup, twice: a tree honouring SIGTERM, and a tree
               ignoring SIGTERM with an escaped (double-forked, setsid) worker. Checks: every
               process of the launch (the supervisor's tree, every process carrying the launch id
               marker, every NVML compute process) is in the cgroup; _containment.stop empties it
               (cgroup.events `populated 0`, watched by our own 20 ms poller), removes it, and GPU
               memory goes back to the idle reading.
  prewarm      a checkpoint of CPW_CKPT_GIB GiB of safetensors shards is written (random bytes,
               fsync'd); then, each with the page cache dropped first: a cold launch (A); a
               restart without prewarm (teardown A -> B ready); a restart with the prewarm run
               while B still serves (teardown B -> C ready); a restart with a second prewarm that
               must find everything resident (C -> D). SGLANG_EMULATOR_LOAD_WEIGHTS=1: every
               launch really loads the shards into GPU memory (safe_open + copy to cuda).

Every check prints PASS/FAIL; exit 1 when one failed. $OUT receives containment-prewarm.json,
containment-prewarm.md, containment-prewarm.log and launch-logs.tar.gz.

Environment: OUT, CPW_WORK (scratch), CPW_EMU_PYTHON (interpreter with torch for the emulator;
default this one), CPW_EMU_PYTHONPATH (where `sglang` = the emulator is found; default
tests/emulator), CPW_CKPT_DIR (default: a directory on the work dir's filesystem), CPW_CKPT_GIB
(20), CPW_SHARD_MIB (1024), CPW_TP_CONTAIN (2), CPW_TP_LOAD (1), CPW_GPU_MIB (4096),
CPW_EVICT (drop_caches | fadvise: the CPU rehearsal must never drop a shared machine's caches),
CPW_GPU (1, or 0: no NVML, CPU mode), CPW_GRACE (10), CPW_KEEP_CKPT (0), CPW_LOADERS (0.5.6: the
loader wording/behaviour the emulator imitates, a comma list; 0.5.23 loads 8 shards at a time).
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import tarfile
import threading
import time
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "collections"))
if not os.path.isdir(os.path.join(ROOT, "collections", "ansible_collections", "llmops", "sglang")):
    # collections/ is made by `make` (gitignored): a copy of the checkout without it gets a
    # private link tree ansible_collections/llmops/sglang -> the checkout
    _coll = os.path.join(os.environ.get("CPW_WORK") or "/tmp/llmops-cpw", "collections")
    os.makedirs(os.path.join(_coll, "ansible_collections", "llmops"), mode=0o700, exist_ok=True)
    if not os.path.lexists(os.path.join(_coll, "ansible_collections", "llmops", "sglang")):
        os.symlink(ROOT, os.path.join(_coll, "ansible_collections", "llmops", "sglang"))
    sys.path.insert(0, _coll)

import psutil  # noqa: E402

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._prewarm import _prewarm
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs

T0 = time.monotonic()
WORK = os.environ.get("CPW_WORK") or "/tmp/llmops-cpw"
OUT = os.environ.get("OUT") or os.path.join(WORK, "out")
EMU_PY = os.path.abspath(os.environ.get("CPW_EMU_PYTHON") or sys.executable)
EMU_PATH = os.environ.get("CPW_EMU_PYTHONPATH", os.path.join(ROOT, "tests", "emulator"))
CKPT_GIB = float(os.environ.get("CPW_CKPT_GIB", "20"))
SHARD_MIB = int(os.environ.get("CPW_SHARD_MIB", "1024"))
TP_CONTAIN = int(os.environ.get("CPW_TP_CONTAIN", "2"))
TP_LOAD = int(os.environ.get("CPW_TP_LOAD", "1"))
GPU_MIB = int(os.environ.get("CPW_GPU_MIB", "4096"))
EVICT = os.environ.get("CPW_EVICT", "drop_caches")
USE_GPU = os.environ.get("CPW_GPU", "1") == "1"
GRACE = float(os.environ.get("CPW_GRACE", "10"))
PHASES = [p for p in os.environ.get("CPW_PHASES", "containment,prewarm").split(",") if p]
# The loader the emulator imitates: 0.5.6 loads the shards one after another in one thread;
# 0.5.23 (`Multi-thread loading shards`) keeps 8 shard loads in flight. One prewarm phase each.
LOADERS = [v for v in os.environ.get("CPW_LOADERS", "0.5.6").split(",") if v]
TOKEN = os.environ.get("CPW_TOKEN") or "%x" % os.getpid()
MEM_TOL_MIB = 64
KNOBS = {  # KINDS.md: NVLink multicast stays off, also in programs started with their own env
    "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
READY = "The server is fired up and ready to roll!"

CHECKS: List[Dict[str, Any]] = []
RESULTS: Dict[str, Any] = {"checks": CHECKS}
LAUNCHED: List[str] = []      # instance names, for the final cleanup
LOG_FILES: List[str] = []
_logfh = None


def log(msg: str) -> None:
    line = "[%7.2fs] %s" % (time.monotonic() - T0, msg)
    print(line, flush=True)
    if _logfh:
        _logfh.write(line + "\n")
        _logfh.flush()


def check(cid: str, desc: str, ok: bool, detail: Any = "") -> bool:
    CHECKS.append({"id": cid, "check": desc, "ok": bool(ok), "detail": detail})
    log("%s %s: %s%s" % ("PASS" if ok else "FAIL", cid, desc, " (%s)" % detail if detail != "" else ""))
    return bool(ok)


def meminfo() -> Dict[str, int]:
    out = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            key, _sep, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable", "Cached", "Dirty"):
                out[key + "_mib"] = int(rest.split()[0]) // 1024
    return out


# --- GPU: pynvml directly, an independent witness (not the collection's _gpus) ----------------

class Gpu:
    def __init__(self) -> None:
        self.nvml: Any = None
        self.handles: List[Any] = []
        if not USE_GPU:
            return
        import pynvml
        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def used_mib(self) -> List[int]:
        out = []
        for h in self.handles:
            try:  # v2: `used` excludes the driver's reserved memory (docs/gpu-validation.md)
                info = self.nvml.nvmlDeviceGetMemoryInfo(h, version=self.nvml.nvmlMemory_v2)
            except Exception:  # noqa: BLE001  (old nvidia-ml-py)
                info = self.nvml.nvmlDeviceGetMemoryInfo(h)
            out.append(int(info.used) // (1 << 20))
        return out

    def procs(self) -> Dict[int, int]:
        """pid -> MiB over all GPUs (compute + graphics)."""
        out: Dict[int, int] = {}
        for h in self.handles:
            for fn in (self.nvml.nvmlDeviceGetComputeRunningProcesses, self.nvml.nvmlDeviceGetGraphicsRunningProcesses):
                for p in fn(h):
                    out[p.pid] = out.get(p.pid, 0) + int(p.usedGpuMemory or 0) // (1 << 20)
        return out


class Poller(threading.Thread):
    """Every 20 ms: GPU memory used, NVML process count, and `populated` of the watched cgroup."""

    def __init__(self, gpu: Gpu) -> None:
        super().__init__(daemon=True)
        self.gpu, self.cgroup, self.samples, self.stop_evt = gpu, None, [], threading.Event()
        self.lock = threading.Lock()

    def watch(self, path: Optional[str]) -> None:
        with self.lock:
            self.cgroup, self.samples = path, []

    def run(self) -> None:
        while not self.stop_evt.is_set():
            with self.lock:
                path = self.cgroup
            pop: Optional[str] = None
            t_cg = time.monotonic()
            if path:
                try:
                    with open(os.path.join(path, "cgroup.events")) as fh:
                        pop = "1" if "populated 1" in fh.read() else "0"
                except OSError:
                    pop = "gone"
            used = self.gpu.used_mib() if self.gpu.handles else []
            nprocs = len(self.gpu.procs()) if self.gpu.handles else 0
            with self.lock:
                self.samples.append((time.monotonic(), used, nprocs, pop, t_cg))
            time.sleep(0.02)

    def first(self, pred: Callable[[Tuple[float, List[int], int, Optional[str], float]], bool], after: float,
              cgroup_time: bool = False) -> Optional[float]:
        """When pred first held after `after` (the GPU reading's time, or the cgroup read's)."""
        with self.lock:
            for s in self.samples:
                when = s[4] if cgroup_time else s[0]
                if when >= after and pred(s):
                    return when
        return None


# --- launches ----------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as resp:
            return resp.status == 200
    except Exception:  # noqa: BLE001
        return False


def log_phases(text: str) -> Dict[str, Any]:
    """From the log's own (millisecond) timestamps: server start -> Load weight begin -> end
    -> ready; plus the emulator's debug line of what the load did."""
    stamps: Dict[str, float] = {}
    for m in re.finditer(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)(?: (TP\d+))?\] ([^\r\n]*)", text):
        when = time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%d %H:%M:%S")) + float("0" + m.group(1)[19:])
        line, rank = m.group(3), m.group(2)
        stamps.setdefault("first_line", when)
        for key, pat in (("load_begin", "Load weight begin"), ("load_end", "Load weight end"), ("ready", READY)):
            if pat in line and (rank in (None, "TP0") or key == "ready"):
                stamps.setdefault(key, when)
    out: Dict[str, Any] = {}
    if "load_begin" in stamps and "load_end" in stamps:
        out["load_s"] = round(stamps["load_end"] - stamps["load_begin"], 3)
    if "first_line" in stamps and "load_begin" in stamps:
        out["start_to_load_begin_s"] = round(stamps["load_begin"] - stamps["first_line"], 3)
    if "load_end" in stamps and "ready" in stamps:
        out["load_end_to_ready_s"] = round(stamps["ready"] - stamps["load_end"], 3)
    m = re.search(r"TP0\] Emulator weight load: mode=(\w+), files=(\d+), bytes_read=(\d+), tensors=(\d+), "
                  r"device_bytes=(\d+), elapsed=([\d.]+) s", text)
    if m:
        out["weight_load"] = {"mode": m.group(1), "files": int(m.group(2)), "bytes_read": int(m.group(3)),
                              "tensors": int(m.group(4)), "device_bytes": int(m.group(5)),
                              "elapsed_s": float(m.group(6))}
    return out


class Launch:
    def __init__(self, label: str, tp: int, env: Dict[str, str], model: str, extra: List[str]) -> None:
        self.label, self.port = label, free_port()
        self.name = "cpw-%s-%s" % (label, TOKEN)
        base = os.path.join(WORK, self.name)
        full_env = dict(KNOBS, PYTHONPATH=EMU_PATH, **env)
        if os.environ.get("LD_LIBRARY_PATH"):  # the GPU image finds libcuda through it
            full_env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        if USE_GPU:
            full_env.setdefault("SGLANG_EMULATOR_GPU_MIB", str(GPU_MIB))
        argv = [EMU_PY, "-m", "sglang.launch_server", "--model-path", model, "--host", "127.0.0.1",
                "--port", str(self.port), "--tp-size", str(tp), "--log-level", "debug"] + extra
        why = _containment.choose("cgroup")[1]
        self.spec = _launcher.LaunchSpec(name=self.name, state_dir=os.path.join(base, "state"),
                                         log_dir=os.path.join(base, "logs"), python=EMU_PY, venv=None, argv=argv,
                                         env=full_env, containment="cgroup", containment_why=why, spawn_timeout=60)
        self.record: Dict[str, Any] = {}
        self.t_spawn = self.t_spawned = self.t_ready = 0.0

    def start(self, timeout: float = 240) -> float:
        """Spawn and wait for the ready line + /health 200; returns launch-to-ready seconds."""
        LAUNCHED.append(self.name)
        self.t_spawn = time.monotonic()
        self.record = _launcher.spawn(self.spec)
        self.t_spawned = time.monotonic()
        LOG_FILES.append(self.record["log_path"])
        deadline = self.t_spawn + timeout
        while time.monotonic() < deadline:
            if READY in self.log_text() and healthy(self.port):
                self.t_ready = time.monotonic()
                return self.t_ready - self.t_spawn
            if not psutil.pid_exists(self.record["supervisor_pid"]):
                raise RuntimeError("%s died before ready; log tail:\n%s" % (self.name, self.log_text()[-3000:]))
            time.sleep(0.02)
        raise RuntimeError("%s not ready within %d s; log tail:\n%s" % (self.name, timeout, self.log_text()[-3000:]))

    def log_text(self) -> str:
        try:
            with open(self.record["log_path"], "rb") as fh:
                return fh.read().decode("utf-8", "replace")
        except (OSError, KeyError):
            return ""

    def phases(self) -> Dict[str, Any]:
        return log_phases(self.log_text())

    def stop(self, deadline_s: float = 30) -> Dict[str, Any]:
        t0 = time.monotonic()
        res = _containment.stop(self.record, GRACE if "fault" not in self.label else 3.0, t0 + GRACE + deadline_s)
        res["wall_s"] = round(time.monotonic() - t0, 3)
        res["t_start"] = t0
        return res


def marker_pids(launch_id: str) -> List[int]:
    """Every process whose environment carries this launch's id (SPT_NOENV keeps it readable)."""
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get(_procs.MARKER_LAUNCH_ID) == launch_id:
                out.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return sorted(out)


def tree_pids(pid: int) -> List[int]:
    try:
        root = psutil.Process(pid)
        return sorted([pid] + [c.pid for c in root.children(recursive=True)])
    except psutil.Error:
        return []


def escaped_of(pids: List[int], sid: int) -> List[int]:
    """Members living in another session than the launch's (the escape fault's worker)."""
    out = []
    for pid in pids:
        proc = _procs.read_proc(pid)
        if proc is not None and proc.sid != sid:
            out.append(pid)
    return out


def wait_gpu_idle(gpu: Gpu, idle: List[int], timeout: float = 30) -> Optional[float]:
    """Seconds until every GPU is back within MEM_TOL_MIB of its idle reading (None: never)."""
    if not gpu.handles:
        return 0.0
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if all(u <= i + MEM_TOL_MIB for u, i in zip(gpu.used_mib(), idle)):
            return round(time.monotonic() - t0, 3)
        time.sleep(0.02)
    return None


def cleanup() -> None:
    """Whatever of ours is still in a cgroup: cgroup.kill, wait, rmdir (only our instance names)."""
    mount = _cgroup.v2_mount()
    for name in LAUNCHED:
        path = _cgroup.instance_path(mount, name) if mount else None
        if path and os.path.isdir(path):
            log("cleanup: killing leftover cgroup %s (%s)" % (path, _cgroup.members(path)))
            _cgroup.kill(path)
            _cgroup.wait_empty(path, time.monotonic() + 10)
            _cgroup.remove(path)


# --- phase 1: containment ------------------------------------------------------------------------

def containment_run(gpu: Gpu, poll: Poller, idle: List[int], label: str, fault: str) -> Dict[str, Any]:
    env = {"SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}
    if fault:
        env["SGLANG_EMULATOR_FAULT"] = fault
    ln = Launch(label, TP_CONTAIN, env, "emulator/containment-check", [])
    ready_s = ln.start()
    rec = ln.record
    path = rec["cgroup"]
    out: Dict[str, Any] = {"label": label, "fault": fault, "tp": TP_CONTAIN, "launch_to_ready_s": round(ready_s, 3),
                           "cgroup": path, "containment_why": rec.get("containment_why")}
    if "escape" in fault:  # the escaped worker appears after the bind
        t_end = time.monotonic() + 10
        while time.monotonic() < t_end and not escaped_of(_cgroup.members(path), rec["sid"]):
            time.sleep(0.05)
    time.sleep(0.3)
    members = _cgroup.members(path)
    tree, marked = tree_pids(rec["supervisor_pid"]), marker_pids(rec["launch_id"])
    nv = gpu.procs() if gpu.handles else {}
    escaped = escaped_of(members, rec["sid"])
    used = gpu.used_mib()
    out.update(members=len(members), tree=len(tree), marked=len(marked), escaped=escaped,
               nvml_procs={str(k): v for k, v in nv.items()}, gpu_used_mib=used,
               gpu_above_idle_mib=[u - i for u, i in zip(used, idle)])
    c = label
    check(c + ".ready", "contained launch ready (%s)" % (fault or "plain tree"), True, "%.2f s" % ready_s)
    check(c + ".tree", "the supervisor's whole process tree is in the cgroup",
          bool(tree) and set(tree) <= set(members), "%d of %d in; cgroup has %d" % (len(set(tree) & set(members)), len(tree), len(members)))
    check(c + ".marker", "every process carrying the launch id is in the cgroup",
          bool(marked) and set(marked) <= set(members), "%d marked, outside: %s" % (len(marked), sorted(set(marked) - set(members))))
    if gpu.handles:
        check(c + ".gpu", "every NVML process holding GPU memory is in the cgroup (%d MiB per rank asked)" % GPU_MIB,
              len(nv) >= TP_CONTAIN and set(nv) <= set(members), {str(k): v for k, v in nv.items()})
    if "escape" in fault:
        check(c + ".escaped", "the escaped worker (own session) is in the cgroup", bool(escaped), escaped)
    poll.watch(path)
    time.sleep(0.05)
    res = ln.stop()
    t_stop = res["t_start"]
    time.sleep(0.5)  # the poller's samples of the last moments
    gone_at = poll.first(lambda s: s[3] in ("0", "gone"), t_stop, cgroup_time=True)
    idle_at = poll.first(lambda s: bool(s[1]) and all(u <= i + MEM_TOL_MIB for u, i in zip(s[1], idle)), t_stop)
    nvml_clear_at = poll.first(lambda s: s[2] == 0, t_stop)
    poll.watch(None)
    left = [p for p in members if psutil.pid_exists(p) and (psutil.Process(p).status() != psutil.STATUS_ZOMBIE)]
    gpu_idle_after = wait_gpu_idle(gpu, idle) if gpu.handles else 0.0
    ended: Dict[str, int] = {}
    for m in res["members"]:
        ended[m["ended"]] = ended.get(m["ended"], 0) + 1
    out.update(stop={k: res[k] for k in ("changed", "killed_with", "empty", "removed", "timings", "wall_s", "notes")},
               stop_members=len(res["members"]), ended=ended,
               populated0_after_stop_s=round(gone_at - t_stop, 3) if gone_at else None,
               nvml_clear_after_stop_s=round(nvml_clear_at - t_stop, 3) if nvml_clear_at else None,
               gpu_idle_after_stop_s=round(idle_at - t_stop, 3) if idle_at else None,
               left=left, port_free=not healthy(ln.port))
    check(c + ".stop", "_containment.stop: empty (populated 0) and removed, every member signalled",
          res["empty"] and res["removed"] and res["changed"] and len(res["members"]) >= len(members),
          "%d members, ended %s, killed_with %s, %.3f s" % (len(res["members"]), ended, res["killed_with"], res["wall_s"]))
    check(c + ".gone", "cgroup directory removed, no member left, port free",
          not os.path.exists(path) and not left and out["port_free"], "left %s" % left)
    if fault and "ignore_sigterm" in fault:
        check(c + ".sigkill", "members ignoring SIGTERM ended by cgroup.kill after the grace period",
              res["killed_with"] is not None and ended.get("SIGKILL", 0) > 0, ended)
    if gpu.handles:
        check(c + ".idle", "GPU memory back to idle (within %d MiB) and NVML lists no process" % MEM_TOL_MIB,
              gpu_idle_after is not None and not gpu.procs(), "used %s, idle %s" % (gpu.used_mib(), idle))
    return out


# --- phase 2: prewarm ------------------------------------------------------------------------------

def write_checkpoint(folder: str, total_gib: float, shard_mib: int) -> Dict[str, Any]:
    """Valid safetensors shards (4 bf16 tensors [rows, 4096] each) of random bytes, fsync'd, with
    model.safetensors.index.json and config.json, written without torch."""
    os.makedirs(folder, exist_ok=True)
    shards = max(1, int(round(total_gib * 1024 / shard_mib)))
    per_tensor = shard_mib * (1 << 20) // 4
    rows = per_tensor // (4096 * 2)
    nbytes = rows * 4096 * 2
    chunk = os.urandom(64 << 20)
    names = ["model-%05d-of-%05d.safetensors" % (i, shards) for i in range(1, shards + 1)]
    weight_map: Dict[str, str] = {}
    t0 = time.monotonic()
    for idx, name in enumerate(names):
        header: Dict[str, Any] = {"__metadata__": {"format": "pt"}}
        for j in range(4):
            tname = "model.layers.%d.w%d.weight" % (idx, j)
            header[tname] = {"dtype": "BF16", "shape": [rows, 4096], "data_offsets": [j * nbytes, (j + 1) * nbytes]}
            weight_map[tname] = name
        blob = json.dumps(header).encode()
        blob += b" " * (-len(blob) % 8)
        fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, len(blob).to_bytes(8, "little") + blob)
            left = 4 * nbytes
            while left:
                left -= os.write(fd, memoryview(chunk)[:min(left, len(chunk))])
            os.fsync(fd)
        finally:
            os.close(fd)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": 4 * nbytes * shards}, "weight_map": weight_map}, fh)
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, fh)
    secs = time.monotonic() - t0
    total = sum(os.path.getsize(os.path.join(folder, n)) for n in names)
    return {"shards": shards, "bytes": total, "gb": round(total / 1e9, 2), "gib": round(total / 2 ** 30, 2),
            "write_s": round(secs, 1), "write_gbps": round(total / secs / 1e9, 2)}


def evict(folder: str) -> Dict[str, Any]:
    t0 = time.monotonic()
    if EVICT == "drop_caches":
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
    else:  # only this checkpoint's files (CPU rehearsal on a shared machine)
        for name in os.listdir(folder):
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    return {"how": EVICT, "seconds": round(time.monotonic() - t0, 2), "resident_pct": resident_pct(folder)}


def resident_pct(folder: str) -> float:
    """mincore through the library: _prewarm.plan selects and measures, reads nothing."""
    sums = _prewarm.plan(folder, _prewarm.Options().validate(), _prewarm.system_memory).sums()
    return _prewarm.pct(sums["before"], sums["bytes"])


def prewarm(folder: str, **opts: Any) -> Dict[str, Any]:
    o = _prewarm.Options(**opts)
    t0 = time.monotonic()
    outcome = _prewarm.run(folder, o)
    rep = _prewarm.report(outcome, o)
    rep["wall_s"] = round(time.monotonic() - t0, 3)
    return rep


def restart(old: Launch, new: Launch, gpu: Gpu, idle: List[int]) -> Dict[str, Any]:
    """Teardown of the old instance (by cgroup) -> GPU memory back to idle -> new one ready: the
    downtime as a restart has it (the old server serves until the teardown starts)."""
    res = old.stop()
    t_down = res["t_start"]
    gpu_idle_s = wait_gpu_idle(gpu, idle)
    ready_s = new.start()
    downtime = new.t_ready - t_down
    return {"teardown_s": res["wall_s"], "teardown_ok": res["empty"] and res["removed"],
            "teardown_timings": res["timings"], "gpu_idle_after_teardown_s": gpu_idle_s,
            "launch_to_ready_s": round(ready_s, 3), "downtime_s": round(downtime, 3), **new.phases()}


def checkpoint() -> Tuple[str, Dict[str, Any]]:
    folder = os.environ.get("CPW_CKPT_DIR") or os.path.join(WORK, "ckpt")
    st = os.statvfs(os.path.dirname(folder) or "/")
    info: Dict[str, Any] = {"dir": folder, "fs": _fstype(folder)}
    log("writing the checkpoint: %g GiB in %d MiB shards under %s (%s, %.0f GiB free)"
        % (CKPT_GIB, SHARD_MIB, folder, info["fs"], st.f_bavail * st.f_frsize / 2 ** 30))
    info.update(write_checkpoint(folder, CKPT_GIB, SHARD_MIB))
    info["mem_after_write"] = meminfo()
    log("checkpoint: %s" % info)
    return folder, info


def prewarm_phase(gpu: Gpu, idle: List[int], folder: str, ck: Dict[str, Any], loader: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {"loader": loader, "tp": TP_LOAD, "evict": EVICT, "checkpoint": ck}
    RESULTS.setdefault("prewarm", {})[loader] = out  # filled in step by step; written after each step
    tag = "L" + loader.replace(".", "") + "-"
    env = {"SGLANG_EMULATOR_LOAD_WEIGHTS": "1", "SGLANG_EMULATOR_LOG_VERSION": loader}
    if USE_GPU:
        env["SGLANG_EMULATOR_GPU_MIB"] = "1024"  # the weights themselves are what the GPU holds
    runs: Dict[str, Any] = {}
    out["runs"] = runs

    def mk(label: str) -> Launch:
        return Launch(tag + label, TP_LOAD, env, folder, [])

    # A: cold launch
    out["evict_A"] = evict(folder)
    log("evicted: %s" % out["evict_A"])
    a = mk("load-a")
    ready = a.start()
    runs["A_cold_launch"] = {"launch_to_ready_s": round(ready, 3), **a.phases()}
    log("A cold launch: %s" % runs["A_cold_launch"])
    write_out()
    # B: restart without prewarm (caches dropped while A serves)
    out["evict_B"] = evict(folder)
    b = mk("load-b")
    runs["B_restart_cold"] = restart(a, b, gpu, idle)
    runs["B_restart_cold"]["resident_pct_at_teardown"] = out["evict_B"]["resident_pct"]
    log("B restart without prewarm: %s" % runs["B_restart_cold"])
    write_out()
    # C: restart with the prewarm (caches dropped, then the prewarm while B serves)
    out["evict_C"] = evict(folder)
    out["mem_before_prewarm"] = meminfo()
    pw = prewarm(folder)
    out["prewarm"] = pw
    log("prewarm: %s" % pw.get("msg"))
    if pw.get("stopped") == "memory_floor":  # recorded as is, then the rest with a lower floor
        out["prewarm_second_pass"] = prewarm(folder, min_available="2G")
        log("prewarm stopped at the memory floor; second pass with min_available=2G: %s"
            % out["prewarm_second_pass"].get("msg"))
    out["mem_after_prewarm"] = meminfo()
    c = mk("load-c")
    runs["C_restart_prewarmed"] = restart(b, c, gpu, idle)
    runs["C_restart_prewarmed"]["resident_pct_at_teardown"] = resident_pct(folder)
    log("C restart with prewarm: %s" % runs["C_restart_prewarmed"])
    write_out()
    # D: the prewarm again finds it all resident (changed false); restart again
    pw2 = prewarm(folder)
    out["prewarm_again"] = {k: pw2.get(k) for k in ("changed", "msg", "resident_before_pct", "read_bytes", "wall_s")}
    d = mk("load-d")
    runs["D_restart_prewarmed_again"] = restart(c, d, gpu, idle)
    log("D restart, prewarm found it resident: %s" % runs["D_restart_prewarmed_again"])
    last = d.stop()
    out["final_teardown"] = {"wall_s": last["wall_s"], "ok": last["empty"] and last["removed"],
                             "gpu_idle_after_s": wait_gpu_idle(gpu, idle)}
    _prewarm_checks(out, loader)
    return out


def remove_checkpoint(folder: str) -> None:
    if os.environ.get("CPW_KEEP_CKPT", "0") != "1" and os.path.isdir(folder):
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)


def _fstype(path: str) -> str:
    best, fstype = "", "?"
    real = os.path.realpath(os.path.dirname(path) or "/")
    with open("/proc/mounts") as fh:
        for line in fh:
            parts = line.split()
            mnt = parts[1]
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, fstype = mnt, parts[2]
    return "%s on %s" % (fstype, best)


def _prewarm_checks(out: Dict[str, Any], loader: str) -> None:
    runs = out["runs"]
    ck = out["checkpoint"]
    sfx = "@" + loader
    check("W0" + sfx, "checkpoint of at least 20 GB written", ck["bytes"] >= 20e9 or CKPT_GIB < 18, "%.2f GB" % ck["gb"])
    for key in ("evict_A", "evict_B", "evict_C"):
        check("W1." + key[-1] + sfx, "pages evicted before run %s (mincore)" % key[-1], out[key]["resident_pct"] < 1.0,
              "%.2f%% resident" % out[key]["resident_pct"])
    pw = out.get("prewarm_second_pass") or out["prewarm"]
    check("W2" + sfx, "prewarm read the checkpoint into the page cache", pw["resident_after_pct"] >= 99.0,
          "resident %.1f%% -> %.1f%%, %.1f s, %.2f GB/s" % (
              out["prewarm"]["resident_before_pct"], pw["resident_after_pct"], out["prewarm"]["seconds"],
              out["prewarm"]["gbps"]))
    for key in ("A_cold_launch", "B_restart_cold", "C_restart_prewarmed", "D_restart_prewarmed_again"):
        wl = runs[key].get("weight_load") or {}
        want = "cuda" if USE_GPU else "host"
        check("W3." + key[0] + sfx, "run %s really loaded the shards (%s)" % (key[0], want),
              wl.get("mode") == want and wl.get("files") == ck["shards"], wl)
    cold, warm = runs["B_restart_cold"].get("load_s"), runs["C_restart_prewarmed"].get("load_s")
    ratio = round(cold / warm, 2) if cold and warm else None
    out["load_ratio_cold_over_prewarmed"] = ratio
    down_c, down_w = runs["B_restart_cold"]["downtime_s"], runs["C_restart_prewarmed"]["downtime_s"]
    out["downtime_ratio"] = round(down_c / down_w, 2) if down_w else None
    check("W4" + sfx, "load phase at least 3x shorter with prewarm", ratio is not None and ratio >= 3.0,
          "%s s cold vs %s s prewarmed: %sx" % (cold, warm, ratio))
    check("W5" + sfx, "second prewarm finds everything resident: changed=false, nothing read",
          out["prewarm_again"]["changed"] is False and not out["prewarm_again"]["read_bytes"], out["prewarm_again"])
    check("W6" + sfx, "every teardown by cgroup emptied and removed the cgroup; GPU back to idle",
          all(runs[k]["teardown_ok"] and runs[k]["gpu_idle_after_teardown_s"] is not None
              for k in ("B_restart_cold", "C_restart_prewarmed", "D_restart_prewarmed_again"))
          and out["final_teardown"]["ok"] and out["final_teardown"]["gpu_idle_after_s"] is not None)


# --- report ----------------------------------------------------------------------------------------

def markdown() -> str:
    lines = ["# containment + prewarm on the GPU host (library calls)", ""]
    env = RESULTS.get("env", {})
    lines += ["%s: %s" % (k, v) for k, v in env.items()] + [""]
    lines += ["| check | result | detail |", "|---|---|---|"]
    for c in CHECKS:
        lines.append("| %s %s | %s | %s |" % (c["id"], c["check"], "PASS" if c["ok"] else "FAIL",
                                              str(c["detail"]).replace("|", "/")[:300]))
    for loader, pw in (RESULTS.get("prewarm") or {}).items():
        lines += ["", "loader %s (tp %s)" % (loader, pw.get("tp")), "",
                  "| run | load phase (s) | launch-to-ready (s) | teardown (s) | downtime (s) |", "|---|---|---|---|---|"]
        for key, r in (pw.get("runs") or {}).items():
            lines.append("| %s | %s | %s | %s | %s |" % (
                key, r.get("load_s"), r.get("launch_to_ready_s"), r.get("teardown_s", "-"), r.get("downtime_s", "-")))
        p = pw.get("prewarm") or {}
        lines += ["", "prewarm: %s" % p.get("msg"), "", "load ratio cold/prewarmed: %s; downtime ratio: %s"
                  % (pw.get("load_ratio_cold_over_prewarmed"), pw.get("downtime_ratio"))]
    return "\n".join(lines) + "\n"


def write_out() -> None:
    with open(os.path.join(OUT, "containment-prewarm.json"), "w") as fh:
        json.dump(RESULTS, fh, indent=1, default=str)
    with open(os.path.join(OUT, "containment-prewarm.md"), "w") as fh:
        fh.write(markdown())
    with tarfile.open(os.path.join(OUT, "launch-logs.tar.gz"), "w:gz") as tar:
        for path in LOG_FILES:
            if os.path.exists(path):
                tar.add(path, arcname=os.path.basename(os.path.dirname(os.path.dirname(path))) + "-" + os.path.basename(path))


def _on_term(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("SIGTERM (the run's time budget?)")


def main() -> int:
    global _logfh
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(WORK, mode=0o700, exist_ok=True)
    _logfh = open(os.path.join(OUT, "containment-prewarm.log"), "a")
    signal.signal(signal.SIGTERM, _on_term)
    gpu = Gpu()
    backend, why = _containment.choose("auto")
    RESULTS["env"] = {"uname": " ".join(os.uname()[2:3]), "python": sys.version.split()[0],
                      "cgroup2_mount": _cgroup.v2_mount(), "auto_backend": backend, "auto_why": why,
                      "gpus": len(gpu.handles), "emulator_python": EMU_PY, "mem": meminfo(), "cpus": os.cpu_count()}
    idle = gpu.used_mib()
    RESULTS["env"]["gpu_idle_mib"] = idle
    log("env: %s" % RESULTS["env"])
    check("E0", "cgroup v2 found and writable: containment cgroup available", _containment.choose("cgroup")[0] == "cgroup", why)
    poll = Poller(gpu)
    poll.start()
    try:
        if "containment" in PHASES:
            RESULTS["containment"] = [containment_run(gpu, poll, idle, "c-plain", ""),
                                      containment_run(gpu, poll, idle, "c-fault", "escape,ignore_sigterm")]
            write_out()
        if "prewarm" in PHASES:
            folder, ck = checkpoint()
            RESULTS["checkpoint"] = ck
            try:
                for loader in LOADERS:
                    prewarm_phase(gpu, idle, folder, ck, loader)
                    write_out()
            finally:
                remove_checkpoint(folder)
    except BaseException as exc:  # noqa: BLE001  (recorded, also a TERM at the budget; the checks so far stay)
        import traceback
        RESULTS["error"] = traceback.format_exc()
        check("X", "the run finished without an exception", False, "%s: %s" % (type(exc).__name__, str(exc)[:2000]))
    finally:
        poll.stop_evt.set()
        cleanup()
        write_out()
    failed = [c["id"] for c in CHECKS if not c["ok"]]
    log("%d checks, %d failed %s" % (len(CHECKS), len(failed), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
