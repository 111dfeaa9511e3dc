"""GPU validation of llmops.sglang (issue 8): the extraction restart, teardown and the GPU
checks against the SGLang emulator in GPU mode on a real GPU host. Started by tests/gpu/run.sh,
which prepares the interpreters; see docs/gpu-validation.md.

Every check prints PASS / FAIL / SKIP as it happens; the exit status is 1 when any check
failed. Results go to $OUT (gpu-results.json, gpu-results.md, nvml-timeline.jsonl.gz,
artifacts.tar.gz).

Environment (run.sh sets the first four):
  GPUVAL_ANSIBLE_BIN   directory holding ansible-playbook and ansible
  GPUVAL_EMU_VENV      venv with the emulator installed as `sglang` (sees torch for GPU mode)
  GPUVAL_WORK          scratch directory (state, logs, vars), default /tmp/llmops-gpuval
  OUT                  results directory, default $GPUVAL_WORK/out
  GPU_DRYRUN           unset/0: real GPUs (NVML + nvidia-smi); fake: tests/gpu/fake stands in for
                       NVML and nvidia-smi (CPU rehearsal); none: gpu_backend none, GPU checks SKIP
  GPUVAL_TP (8) GPUVAL_GPU_MIB (4096) GPUVAL_FOREIGN_MIB (2048) GPUVAL_FOREIGN_GPU (1)
  GPUVAL_PORT (18600) GPUVAL_BUDGET_S (420: steps still to run are skipped past it)
"""
from __future__ import annotations

import datetime
import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "collections"))

MODE = os.environ.get("GPU_DRYRUN", "").strip().lower()
if MODE in ("", "0", "no", "false"):
    MODE = "real"
elif MODE not in ("fake", "none"):
    MODE = "none"
GPU = MODE in ("real", "fake")
WORK = os.environ.get("GPUVAL_WORK", "/tmp/llmops-gpuval")
OUT = os.environ.get("OUT") or os.path.join(WORK, "out")
ABIN = os.environ.get("GPUVAL_ANSIBLE_BIN") or os.path.join(ROOT, ".venv", "bin")
EMU = os.environ.get("GPUVAL_EMU_VENV") or os.path.join(ROOT, ".venv-emulator")
TP = int(os.environ.get("GPUVAL_TP", "8"))
GPU_MIB = int(os.environ.get("GPUVAL_GPU_MIB", "4096"))
FOREIGN_MIB = int(os.environ.get("GPUVAL_FOREIGN_MIB", "2048"))
PORT = int(os.environ.get("GPUVAL_PORT", "18600"))
BUDGET = float(os.environ.get("GPUVAL_BUDGET_S", "420"))
FOREIGN_GPU = 1           # set from the GPU count in main()
NAME = "gpuval"
STATE = os.path.join(WORK, "state")
LOGS = os.path.join(WORK, "logs")
ALOGS = os.path.join(WORK, "ansible")
DUMP = "/dev/shm/llmops_gpuval_hs"
RESULTS = os.path.join(WORK, "task-results.jsonl")
PIDFILE = os.path.join(WORK, "started.pids")       # run.sh's trap kills these groups
MEM_TOL_MIB = 64          # "memory back to baseline": within this of the idle reading
SMI_TOL_MIB = 64          # NVML vs nvidia-smi, per process (memory.used differs by reserved memory)
T0 = time.time()
CVD = ",".join(str(i) for i in range(TP))
KNOBS = {  # KINDS.md: NVLink multicast stays off, also in programs started with their own env
    "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

# --- checks ----------------------------------------------------------------------------------

CHECKS: List[Dict[str, Any]] = []
FIGURES: Dict[str, Any] = {}
NOTES: List[str] = []


def log(msg: str) -> None:
    print("[%6.1fs] %s" % (time.time() - T0, msg), flush=True)


def check(cid: str, desc: str, ok: bool, detail: Any = "") -> bool:
    status = "PASS" if ok else "FAIL"
    CHECKS.append({"id": cid, "check": desc, "status": status, "detail": detail})
    print("%s %s %s%s" % (status, cid, desc, (" -- %s" % detail) if detail != "" else ""), flush=True)
    return ok


def skip(cid: str, desc: str, why: str) -> None:
    CHECKS.append({"id": cid, "check": desc, "status": "SKIP", "detail": why})
    print("SKIP %s %s -- %s" % (cid, desc, why), flush=True)


class Abort(Exception):
    pass


def budget_left() -> float:
    return BUDGET - (time.time() - T0)


# --- /proc (our own view, independent of the collection's library) ---------------------------

def proc_state(pid: int) -> Optional[str]:
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid: Optional[int]) -> bool:
    return bool(pid) and proc_state(int(pid)) not in (None, "Z", "X")


def cmdline(pid: int) -> str:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def environ(pid: int) -> Dict[str, str]:
    try:
        with open("/proc/%d/environ" % pid, "rb") as fh:
            raw = fh.read()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return out


def instance_procs() -> Dict[int, str]:
    """pid -> cmdline of every live process carrying our state dir marker."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and environ(int(name)).get("LLMOPS_SGLANG_STATE_DIR") == STATE and alive(int(name)):
            out[int(name)] = cmdline(int(name))
    return out


def schedulers() -> Dict[int, int]:
    """pid -> tp rank of our instance's live schedulers."""
    out = {}
    for pid, cmd in instance_procs().items():
        m = re.match(r"sglang::scheduler_TP(\d+)", cmd)
        if m:
            out[pid] = int(m.group(1))
    return out


def port_listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def record() -> Dict[str, Any]:
    try:
        with open(os.path.join(STATE, NAME + ".json")) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def note_started(pid: int) -> None:
    with open(PIDFILE, "a") as fh:
        fh.write("%d\n" % pid)


# --- NVML timeline (our own poller: pynvml directly, not the collection's _gpus) ---------------

class Poller:
    """Samples every GPU's memory and compute processes every `period` s, and whether each pid
    ever listed is still alive (not a zombie). Used for the release timings."""

    def __init__(self, period: float = 0.05) -> None:
        self.period = period
        self.samples: List[Dict[str, Any]] = []
        self.watch: Set[int] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.count = 0
        self.error = ""
        self.nvml = None
        self.thread: Optional[threading.Thread] = None

    def start(self) -> bool:
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.count = pynvml.nvmlDeviceGetCount()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.count)]
        except Exception as exc:  # no NVML: report, the GPU checks fail/skip
            self.error = "%s: %s" % (type(exc).__name__, exc)
            return False
        self.sample()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return True

    def sample(self) -> Dict[str, Any]:
        t = time.time()
        used, procs = [], {}
        for i, h in enumerate(self.handles):
            used.append(int(self.nvml.nvmlDeviceGetMemoryInfo(h).used // 1048576))
            lst = []
            for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(h):
                mib = p.usedGpuMemory
                lst.append([int(p.pid), None if mib is None else int(mib // 1048576)])
            procs[i] = lst
        with self.lock:
            for lst in procs.values():
                self.watch.update(pid for pid, _mib in lst)
            gone = sorted(p for p in self.watch if not alive(p))
            s = {"t": t, "used": used, "procs": procs, "gone": gone}
            self.samples.append(s)
        return s

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # keep polling; note it
                self.error = "%s: %s" % (type(exc).__name__, exc)
            self.stop.wait(self.period)

    def last(self) -> Dict[str, Any]:
        return self.sample()

    def window(self, t0: float, t1: float) -> List[Dict[str, Any]]:
        with self.lock:
            return [s for s in self.samples if t0 <= s["t"] <= t1]

    def close(self, path: str) -> None:
        self.stop.set()
        if self.thread:
            self.thread.join(5)
        with gzip.open(path, "wt") as fh:
            for s in self.samples:
                fh.write(json.dumps(s) + "\n")
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


POLL = Poller()
BASE: Dict[str, List[int]] = {}


def listed(sample: Dict[str, Any]) -> Dict[int, Dict[int, Optional[int]]]:
    """pid -> {gpu: MiB}."""
    out: Dict[int, Dict[int, Optional[int]]] = {}
    for g, lst in sample["procs"].items():
        for pid, mib in lst:
            out.setdefault(pid, {})[int(g)] = mib
    return out


def wait_for(pred, timeout: float, period: float = 0.2):
    end = time.time() + timeout
    while True:
        v = pred()
        if v or time.time() >= end:
            return v
        time.sleep(period)


def release_figures(t0: float, t1: float, pids: Set[int], settle: float = 30.0) -> Dict[str, Any]:
    """From the timeline: when the first/last of `pids` exited (not alive or zombie), when NVML
    stopped listing all of them, when each GPU's memory came back to the idle baseline."""
    if not pids:
        return {"error": "no pids to follow"}
    wait_for(lambda: all(not alive(p) for p in pids), 0)
    samples = POLL.window(t0, t1 + settle)
    first = last = clear = None
    mem: Dict[int, Optional[float]] = {g: None for g in range(POLL.count)}
    for s in samples:
        gone = set(s["gone"]) & pids
        if first is None and gone:
            first = s["t"]
        if last is None and gone == pids:
            last = s["t"]
        if clear is None and first is not None and not (set(listed(s)) & pids):
            clear = s["t"]
        if first is not None:
            for g in mem:
                if mem[g] is None and s["used"][g] <= BASE["nvml"][g] + MEM_TOL_MIB:
                    mem[g] = s["t"]

    def rel(t: Optional[float], ref: Optional[float]) -> Optional[float]:
        return None if t is None or ref is None else round(t - ref, 3)

    return {
        "pids": sorted(pids), "first_exit_s_after_start": rel(first, t0), "all_exited_s_after_first": rel(last, first),
        "nvml_clear_s_after_first_exit": rel(clear, first), "nvml_clear_s_after_last_exit": rel(clear, last),
        "memory_baseline_s_after_first_exit": {str(g): rel(t, first) for g, t in mem.items()},
        "memory_baseline_s_after_last_exit": {str(g): rel(t, last) for g, t in mem.items()},
        "sample_period_s": POLL.period, "samples": len(samples),
    }


# --- ansible ---------------------------------------------------------------------------------

STEP = [0]


def base_env(label: str, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"),
        "ANSIBLE_CALLBACK_PLUGINS": os.path.join(HERE, "callback_plugins"),
        "ANSIBLE_CALLBACKS_ENABLED": "gpuval_log",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_LOCAL_TEMP": os.path.join(WORK, "ansible-tmp"),
        "GPUVAL_RESULTS": RESULTS, "GPUVAL_LABEL": label, "PYTHONDONTWRITEBYTECODE": "1",
    })
    env.update(extra or {})
    return env


def results_of(label: str) -> List[Dict[str, Any]]:
    out = []
    try:
        with open(RESULTS) as fh:
            for line in fh:
                d = json.loads(line)
                if d.get("label") == label:
                    out.append(d)
    except OSError:
        pass
    return out


def find(res: List[Dict[str, Any]], action: str, name: Optional[str] = None) -> Optional[Dict[str, Any]]:
    hit = None
    for d in res:
        if str(d.get("action", "")).endswith(action) and (name is None or name in d.get("task", "")):
            hit = d
    return hit


def restart_teardown(res: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The restart's teardown result: since the teardown runs inside the replacement's launch
    call, sglang_launch's `teardown` (the last launch that stopped something for real); the
    teardown role's own task only where a run still has one (tags, check mode)."""
    for d in reversed(res):
        if str(d.get("action", "")).endswith("sglang_launch") and d.get("status") == "ok":
            td = (d.get("result") or {}).get("teardown")
            if isinstance(td, dict) and "killed" in td and not d["result"].get("skipped"):
                return dict(td, _task=d)
    hit = find(res, "sglang_teardown")
    return dict(hit.get("result", {}), _task=hit) if hit else {}


def run_ansible(label: str, argv: List[str], timeout: float, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    if budget_left() < 20:
        raise Abort("time budget spent before %s" % label)
    timeout = min(timeout, max(10.0, budget_left() - 15))
    STEP[0] += 1
    path = os.path.join(ALOGS, "%02d-%s.log" % (STEP[0], label))
    log("%s: %s" % (label, " ".join(argv)))
    start = time.time()
    with open(path, "w") as fh:
        proc = subprocess.Popen(argv, cwd=ROOT, env=base_env(label, env), stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
        note_started(proc.pid)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = 124
    end = time.time()
    with open(path) as fh:
        text = fh.read()
    res = results_of(label)
    stats = next((d["stats"].get("localhost", {}) for d in res if d.get("status") == "stats"), {})
    log("%s: rc=%s in %.1f s, stats %s (log %s)" % (label, rc, end - start, stats, path))
    if rc not in (0,) and rc != 124:
        tail = [l for l in text.splitlines() if l.strip()][-6:]
        for l in tail:
            print("    | " + l[:300], flush=True)
    return {"label": label, "rc": rc, "start": start, "end": end, "seconds": round(end - start, 2),
            "text": text, "results": res, "stats": stats, "log": path}


def playbook(label: str, name: str, overrides: Optional[Dict[str, Any]] = None, extra: Optional[List[str]] = None,
             timeout: float = 200, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    data = dict(VARS)
    data.update(overrides or {})
    vfile = os.path.join(WORK, "vars-%s.json" % label)
    with open(vfile, "w") as fh:
        json.dump(data, fh, indent=1)
    argv = [os.path.join(ABIN, "ansible-playbook"), "-i", os.path.join(ROOT, "inventory", "local.yml"),
            os.path.join(ROOT, "playbooks", name), "-e", "@" + vfile] + (extra or [])
    return run_ansible(label, argv, timeout, env)


def module(label: str, mod: str, args: Dict[str, Any], check_mode: bool = False, timeout: float = 90,
           env: Optional[Dict[str, str]] = None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    argv = [os.path.join(ABIN, "ansible"), "localhost", "-i", os.path.join(ROOT, "inventory", "local.yml"),
            "-m", "llmops.sglang." + mod, "-a", json.dumps(args)] + (["--check"] if check_mode else [])
    run = run_ansible(label, argv, timeout, env)
    hit = find(run["results"], mod)
    return run, (hit or {}).get("result", {}) | {"_status": (hit or {}).get("status", "none")}


def probe(label: str, backend: str, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    args = {"venv": EMU, "ports": [PORT], "state_dir": STATE, "gpu_backend": backend}
    _run, res = module(label, "sglang_probe", args, env=env)
    return res


def teardown_args(backend: str, foreign: str) -> Dict[str, Any]:
    return {"name": NAME, "state_dir": STATE, "ports": [PORT], "gpus": VARS["sglang_managed_gpus"],
            "sglang_processes": False, "foreign_gpu_processes": foreign, "grace_period": 5, "timeout": 30,
            "gpu_backend": backend}


# --- the run ---------------------------------------------------------------------------------

VARS: Dict[str, Any] = {}


def sglang_entries(gpus: Dict[str, Any]) -> List[Tuple[int, int, Optional[int], str]]:
    """(gpu, pid, MiB, owner) of every process in a probe's gpus report."""
    out = []
    for g in gpus.get("gpus", []):
        for p in g.get("processes", []):
            out.append((int(g["index"]), int(p["pid"]), p.get("used_mib"), p.get("owner", "?")))
    return out


def held(entries, pid: int) -> Dict[int, Optional[int]]:
    return {g: m for g, p, m, _owner in entries if p == pid}


PROBE_MEM: Dict[str, Dict[int, int]] = {}
GPUMEM: Dict[str, Any] = {}


def compare_gpu_memory(cid: str, what: str, a: Optional[Dict[int, int]], b: Optional[Dict[int, int]]) -> None:
    """Per-GPU memory_used_mib as the modules report it through each backend."""
    ok = bool(a) and bool(b) and set(a) == set(b) and all(abs(a[g] - b[g]) <= SMI_TOL_MIB for g in a)
    check(cid, "%s: per-GPU memory_used_mib from NVML and from nvidia-smi agree within %d MiB" % (what, SMI_TOL_MIB),
          ok, "nvml %s, nvidia-smi %s" % (a, b))


def check_probe(cid: str, res: Dict[str, Any], backend: str, foreign: Optional[int] = None) -> List[Tuple[int, int, Optional[int], str]]:
    gpus = res.get("gpus", {})
    PROBE_MEM[backend] = {int(g["index"]): int(g.get("memory_used_mib") or 0) for g in gpus.get("gpus", [])}
    entries = sglang_entries(gpus)
    check(cid + ".backend", "probe(%s) answered with backend %s" % (backend, backend if backend != "auto" else "from env"),
          res.get("_status") == "ok" and gpus.get("backend") == (backend if backend != "auto" else "nvidia-smi"),
          "status %s, backend %r, note %r" % (res.get("_status"), gpus.get("backend"), gpus.get("note")))
    sched = schedulers()
    ours = {p for _g, p, _m, o in entries if o == "sglang"}
    check(cid + ".count", "probe(%s) lists %d sglang compute processes, the instance's schedulers" % (backend, TP),
          len(ours) == TP and ours == set(sched),
          "sglang pids %s; schedulers of the instance %s" % (sorted(ours), sorted(sched)))
    bad = []
    for pid, rank in sorted(sched.items()):
        h = held(entries, pid)
        want = rank % max(1, POLL.count)
        big = {g: m for g, m in h.items() if m is not None and m >= GPU_MIB}
        if list(big) != [want] or big[want] > GPU_MIB + 2048:
            bad.append("TP%d pid %d: %s (want >= %d MiB on GPU %d only)" % (rank, pid, h, GPU_MIB, want))
    check(cid + ".memory", "probe(%s): each TP rank r holds >= %d MiB on GPU r %% %d" % (backend, GPU_MIB, POLL.count),
          not bad and bool(sched), "; ".join(bad) or {sched[p]: held(entries, p) for p in sorted(sched)})
    others = sorted({(p, o) for _g, p, _m, o in entries if p not in sched})
    if foreign is None:
        check(cid + ".no_foreign", "probe(%s): nothing else listed, nothing tagged foreign" % backend, not others, others)
    else:
        fm = held(entries, foreign)
        tags = {o for _g, p, _m, o in entries if p == foreign}
        check(cid + ".foreign", "probe(%s): the foreign pid %d is tagged foreign with >= %d MiB on GPU %d"
              % (backend, foreign, FOREIGN_MIB, FOREIGN_GPU),
              tags == {"foreign"} and (fm.get(FOREIGN_GPU) or 0) >= FOREIGN_MIB and {p for p, _o in others} == {foreign},
              "tags %s, held %s, others %s, diagnosis %s"
              % (tags, fm, others, [d for d in res.get("diagnosis", []) if "foreign" in d]))
    return entries


def compare_backends(cid: str, a: List, b: List, what: str) -> None:
    ka = {(g, p): m for g, p, m, _o in a}
    kb = {(g, p): m for g, p, m, _o in b}
    diff = {k: (ka.get(k), kb.get(k)) for k in set(ka) | set(kb)
            if k not in ka or k not in kb or ka[k] is None or kb[k] is None or abs(ka[k] - kb[k]) > SMI_TOL_MIB}
    check(cid, "%s: NVML and nvidia-smi list the same (GPU, pid) pairs, MiB within %d" % (what, SMI_TOL_MIB),
          not diff and bool(ka), "differences %s" % diff if diff else "%d entries agree" % len(ka))


def machine_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {"mode": MODE, "hostname": socket.gethostname(), "python": sys.version.split()[0]}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=False)
        info["gpus"] = [l.strip() for l in out.stdout.splitlines() if l.strip()]
    except (OSError, subprocess.SubprocessError) as exc:
        info["gpus"] = ["nvidia-smi: %s" % exc]
    try:
        info["kernel"] = os.uname().release
        info["cpus"] = os.cpu_count()
    except OSError:
        pass
    return info


def smi_baseline() -> List[int]:
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _gpus
    rep = _gpus.query_gpus("nvidia-smi")
    return [g.memory_used_mib for g in rep.gpus]


def main() -> int:
    global FOREIGN_GPU
    for d in (WORK, STATE, LOGS, ALOGS, OUT, os.path.join(WORK, "ansible-tmp")):
        os.makedirs(d, exist_ok=True)
    log("GPU validation, mode %s, work %s, out %s" % (MODE, WORK, OUT))
    info = machine_info()
    FIGURES["machine"] = info
    log("machine: %s" % info)

    count = 0
    if GPU:
        if not check("P0", "NVML answers (pynvml) and lists GPUs", POLL.start() and POLL.count > 0,
                     POLL.error or "%d GPUs" % POLL.count):
            raise Abort("no NVML")
        count = POLL.count
        s = POLL.last()
        BASE["nvml"] = s["used"]
        check("P1", "the host is idle: NVML lists no compute process before the run", not listed(s), listed(s))
        try:
            BASE["smi"] = smi_baseline()
            check("P2", "nvidia-smi answers with the same GPU count", len(BASE["smi"]) == count, BASE["smi"])
        except Exception as exc:
            check("P2", "nvidia-smi answers with the same GPU count", False, exc)
        FIGURES["baseline_mib"] = BASE
        FOREIGN_GPU = int(os.environ.get("GPUVAL_FOREIGN_GPU", str(min(1, count - 1))))
        if MODE == "real":
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
            if os.environ.get("LD_LIBRARY_PATH"):
                env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
            if count < TP:
                env["CUDA_VISIBLE_DEVICES"] = CVD
            out = subprocess.run([os.path.join(EMU, "bin", "python"), "-c",
                                  "import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.device_count())"],
                                 env=env, capture_output=True, text=True, timeout=120, check=False)
            check("P3", "the emulator venv sees torch with CUDA and all %d GPUs in the launcher's clean environment"
                  % count, out.returncode == 0 and out.stdout.split()[1:] == ["True", str(count)],
                  (out.stdout + out.stderr).strip()[-300:])
            FIGURES["torch"] = out.stdout.strip()
    else:
        FOREIGN_GPU = 1

    # Inventory overrides: our own name/port/dirs (never the demo's), GPU mode through the
    # emulator variable, the GPU backend and the managed GPUs.
    sglang_env = {"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "no_proxy": "127.0.0.1,localhost"}
    sglang_env.update(KNOBS)
    if GPU:
        sglang_env["SGLANG_EMULATOR_GPU_MIB"] = str(GPU_MIB)
    if MODE == "fake":
        sglang_env["GPUVAL_FAKE_TOKEN"] = os.environ["GPUVAL_FAKE_TOKEN"]
    if os.environ.get("LD_LIBRARY_PATH"):  # the launcher builds a clean env: CUDA libs must be passed
        sglang_env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    if GPU and count < TP:
        # tp 8 on fewer GPUs: sglang_launch's preflight (rightly) refuses tp_size 8 with 2 GPUs
        # visible, so the oversubscription is declared (sglang_gpu_check: false). The emulator
        # puts rank r on GPU r % count.
        VARS["sglang_gpu_check"] = False
        NOTES.append("tp %d over %d GPUs: sglang_gpu_check=false (the launch preflight would refuse tp %d on %d GPUs)"
                     % (TP, count, TP, count))
    VARS.update({
        "sglang_name": NAME, "sglang_port": PORT, "sglang_state_dir": STATE, "sglang_log_dir": LOGS,
        "sglang_venv": EMU, "sglang_tp_size": TP, "sglang_extraction_dump_dir": DUMP,
        "sglang_gpu_backend": "nvml" if GPU else "none",
        "sglang_managed_gpus": list(range(count)) if GPU else [],
        "sglang_foreign_gpu_processes": "fail", "sglang_startup_timeout": 180,
        "sglang_grace_period": 5, "sglang_stop_timeout": 30, "sglang_env": sglang_env,
    })
    FIGURES["inventory_overrides"] = VARS

    # 1. first run: launches tp 8 over the GPUs
    r1 = playbook("run1", "restart_extraction.yml")
    launch1 = (find(r1["results"], "sglang_launch", "Launch") or {}).get("result", {})
    if not check("R1", "restart_extraction.yml (first run) succeeds and launches", r1["rc"] == 0 and launch1.get("changed"),
                 "rc %s, %s s, launch pid %s" % (r1["rc"], r1["seconds"], launch1.get("pid"))):
        raise Abort("first launch failed")
    FIGURES["run1_seconds"] = r1["seconds"]
    if MODE == "real":
        logtext = open(launch1.get("log_path") or os.devnull, errors="replace").read()
        check("R1.gpu_mode", "the emulator ran in GPU mode (no 'torch with CUDA is not available' warning)",
              "torch with CUDA is not available" not in logtext, launch1.get("log_path"))
    if GPU:
        got = wait_for(lambda: len(set(listed(POLL.last())) & set(schedulers())) >= TP, 30)
        check("R1.nvml", "NVML lists the %d schedulers" % TP, bool(got), listed(POLL.last()))
        p_nvml = check_probe("G1", probe("probe-nvml", "nvml"), "nvml")
        p_smi = check_probe("G2", probe("probe-smi", "nvidia-smi"), "nvidia-smi")
        compare_backends("G2.same", p_nvml, p_smi, "probe")
        GPUMEM["probe"] = (PROBE_MEM.get("nvml"), PROBE_MEM.get("nvidia-smi"))
        compare_gpu_memory("G2.gpumem", "probe", *GPUMEM["probe"])
        s = POLL.last()
        used_delta = {g: s["used"][g] - BASE["nvml"][g] for g in range(count)}
        sums = {g: sum(m or 0 for gg, _p, m, _o in p_nvml if gg == g) for g in range(count)}
        check("G1.sum", "per GPU, memory used - idle baseline = sum of the listed processes (within 1 GiB)",
              all(abs(used_delta[g] - sums[g]) <= 1024 for g in range(count)), {"used-baseline": used_delta, "sum": sums})
        FIGURES["held_mib_per_gpu"] = used_delta
        p_env = probe("probe-env", "auto", env={"LLMOPS_SGLANG_GPU_BACKEND": "nvidia-smi"})
        check("G3", "LLMOPS_SGLANG_GPU_BACKEND=nvidia-smi switches gpu_backend=auto to nvidia-smi",
              p_env.get("gpus", {}).get("backend") == "nvidia-smi", p_env.get("gpus", {}).get("backend"))
    else:
        skip("G1", "probe sees the schedulers on the GPUs", "no GPU backend (GPU_DRYRUN=%s)" % MODE)

    # 2. same inputs again: nothing changes
    before = set(schedulers())
    r2 = playbook("run2", "restart_extraction.yml")
    check("R2", "second run with the same inputs reports changed=0", r2["rc"] == 0 and r2["stats"].get("changed") == 0,
          "rc %s, stats %s" % (r2["rc"], r2["stats"]))
    check("R2.same", "second run: the same schedulers still run", set(schedulers()) == before and len(before) == TP,
          sorted(before))
    FIGURES["run2_seconds"] = r2["seconds"]

    # 3. forced restart
    old_main = record().get("pid")
    old = set(schedulers())
    r3 = playbook("run3-force", "restart_extraction.yml", {"sglang_force": True})
    launch3 = (find(r3["results"], "sglang_launch", "Launch") or {}).get("result", {})
    td3 = restart_teardown(r3["results"])
    ready3 = (find(r3["results"], "sglang_ready") or {}).get("result", {})
    new = set(schedulers())
    check("R3", "forced restart succeeds with a new server", r3["rc"] == 0 and launch3.get("changed")
          and launch3.get("pid") not in (None, old_main), "rc %s, old pid %s -> new pid %s" % (r3["rc"], old_main, launch3.get("pid")))
    check("R3.procs", "forced restart: every old scheduler is gone, %d new ones run" % TP,
          not any(alive(p) for p in old) and len(new) == TP and not (new & old), "old %s new %s" % (sorted(old), sorted(new)))
    FIGURES["restart"] = {
        "forced_restart_seconds": r3["seconds"], "noop_run_seconds": r2["seconds"],
        "restart_overhead_seconds": round(r3["seconds"] - r2["seconds"], 2),
        "teardown_timings": td3.get("timings"), "killed": len(td3.get("killed", [])),
        "ready_elapsed": ready3.get("elapsed"), "ready_since_launch": ready3.get("since_launch"),
    }
    if GPU:
        rel = release_figures(r3["start"], r3["end"], old)
        FIGURES["restart"]["release"] = rel
        mem = rel["memory_baseline_s_after_first_exit"]
        check("R3.release", "forced restart: NVML stopped listing the old schedulers and memory returned to the "
              "baseline before the new server took it", rel.get("nvml_clear_s_after_first_exit") is not None
              and all(v is not None for v in mem.values()), rel)
        check("R3.gpus_after", "restart's teardown: gpus_after lists no process",
              bool(td3.get("gpus_after")) and all(not g.get("processes") for g in td3.get("gpus_after", [])),
              td3.get("gpus_after"))
        got = wait_for(lambda: set(listed(POLL.last())) >= new, 30)
        check("R3.nvml", "NVML lists the %d new schedulers" % TP, bool(got), sorted(listed(POLL.last())))

    # 4. a foreign CUDA process on one GPU
    fpid = None
    if GPU:
        ready = os.path.join(WORK, "foreign.ready")
        if os.path.exists(ready):
            os.unlink(ready)
        fenv = dict(os.environ)
        fenv.update(KNOBS)
        if MODE == "fake":
            fenv.update(GPUVAL_FAKE_GPU=str(FOREIGN_GPU), GPUVAL_FAKE_MIB=str(FOREIGN_MIB + 512))
        flog = open(os.path.join(WORK, "foreign.log"), "w")
        fproc = subprocess.Popen([sys.executable, os.path.join(HERE, "foreign_cuda.py"), "--gpu", str(FOREIGN_GPU),
                                  "--mib", str(FOREIGN_MIB), "--ready", ready], env=fenv, stdout=flog,
                                 stderr=subprocess.STDOUT, start_new_session=True, cwd=WORK)
        note_started(fproc.pid)
        fpid = fproc.pid
        ok = wait_for(lambda: os.path.exists(ready) and fpid in listed(POLL.last()), 90)
        fm = listed(POLL.last()).get(fpid, {})
        if not check("F0", "a foreign python3 process holds >= %d MiB on GPU %d (NVML)" % (FOREIGN_MIB, FOREIGN_GPU),
                     bool(ok) and (fm.get(FOREIGN_GPU) or 0) >= FOREIGN_MIB, "pid %s: %s" % (fpid, fm)):
            fpid = None
    if fpid:
        pf_nvml = check_probe("F1", probe("probe-foreign-nvml", "nvml"), "nvml", foreign=fpid)
        pf_smi = check_probe("F2", probe("probe-foreign-smi", "nvidia-smi"), "nvidia-smi", foreign=fpid)
        compare_backends("F2.same", pf_nvml, pf_smi, "probe with a foreign process")
        compare_gpu_memory("F2.gpumem", "probe with a foreign process", PROBE_MEM.get("nvml"), PROBE_MEM.get("nvidia-smi"))

        main_pid = record().get("pid")
        sched = set(schedulers())
        t4 = playbook("teardown-refuse", "teardown.yml")
        td4 = find(t4["results"], "sglang_teardown") or {}
        res4 = td4.get("result", {})
        msg = str(res4.get("msg", ""))
        m = re.search(r"pid %d \(.*?GPU %d: ([0-9.]+) GiB" % (fpid, FOREIGN_GPU), msg)
        check("F3", "teardown.yml (foreign_gpu_processes=fail) refuses with reason foreign_gpu_processes",
              t4["rc"] != 0 and td4.get("status") == "failed" and res4.get("reason") == "foreign_gpu_processes",
              "rc %s, reason %s" % (t4["rc"], res4.get("reason")))
        check("F3.names", "the refusal names the foreign pid and its GiB on GPU %d" % FOREIGN_GPU,
              bool(m) and float(m.group(1)) >= FOREIGN_MIB / 1024.0 - 0.01, msg)
        check("F3.nothing_killed", "after the refusal the server, its %d schedulers, the port and the foreign "
              "process are all still alive" % TP,
              alive(main_pid) and all(alive(p) for p in sched) and len(sched) == TP and port_listening(PORT)
              and alive(fpid) and set(listed(POLL.last())) >= sched | {fpid} and not res4.get("killed"),
              "main %s alive %s, schedulers alive %d/%d, port %s, foreign alive %s"
              % (main_pid, alive(main_pid), sum(alive(p) for p in sched), len(sched), port_listening(PORT), alive(fpid)))
        FIGURES["refusal_message"] = msg

        # the same refusal and the same plan through nvidia-smi
        _run, r_smi = module("teardown-refuse-smi", "sglang_teardown", teardown_args("nvidia-smi", "fail"))
        m2 = re.search(r"pid %d \(.*?GPU %d: ([0-9.]+) GiB" % (fpid, FOREIGN_GPU), str(r_smi.get("msg", "")))
        check("F4", "with nvidia-smi the teardown refuses the same way, naming the same pid and GiB",
              r_smi.get("reason") == "foreign_gpu_processes" and bool(m) and bool(m2)
              and abs(float(m.group(1)) - float(m2.group(1))) <= 0.1, r_smi.get("msg"))
        _run, c_nvml = module("plan-nvml", "sglang_teardown", teardown_args("nvml", "ignore"), check_mode=True)
        _run, c_smi = module("plan-smi", "sglang_teardown", teardown_args("nvidia-smi", "ignore"), check_mode=True)

        def plan_view(r):
            tg = {t["pid"]: [x for x in t.get("reasons", []) if "GPU" in x] for t in r.get("targets", [])}
            fg = {f["pid"]: f.get("gpus") for f in r.get("foreign_gpu_processes", [])}
            # a contained launch (containment auto -> cgroup here) is planned by its cgroup: its
            # members are listed under containment, not as targets with per-process reasons
            members = {int(m["pid"]) for m in (r.get("containment") or {}).get("members", [])}
            return tg, fg, members
        tn, fn, mn = plan_view(c_nvml)
        ts, fs, ms = plan_view(c_smi)
        gpu_reason = sum(1 for v in tn.values() if v)
        close = set(fn) == set(fs) == {fpid} and all(
            abs(float(fn[fpid][k]) - float(fs[fpid].get(k, -9))) <= 0.1 for k in fn[fpid])
        if mn or ms:
            check("F5", "teardown check mode (contained instance): NVML and nvidia-smi plan the same cgroup members, "
                  "every scheduler holding GPU memory among them, and the same foreign process outside them",
                  mn == ms and set(tn) == set(ts) and sched <= mn and fpid not in mn and close,
                  "members %d/%d, schedulers in %d/%d, other targets %d/%d, foreign nvml %s smi %s"
                  % (len(mn), len(ms), len(sched & mn), len(sched), len(tn), len(ts), fn, fs))
        else:
            check("F5", "teardown check mode: NVML and nvidia-smi choose the same targets (same GPU reasons) and "
                  "the same foreign process", set(tn) == set(ts) and gpu_reason == TP and close
                  and {k: len(v) for k, v in tn.items()} == {k: len(v) for k, v in ts.items()},
                  "targets %d/%d, with a GPU reason %d, foreign nvml %s smi %s" % (len(tn), len(ts), gpu_reason, fn, fs))

        # 5. kill: the foreign process goes too
        sched = set(schedulers())
        t5 = playbook("teardown-kill", "teardown.yml", {"sglang_foreign_gpu_processes": "kill"})
        res5 = (find(t5["results"], "sglang_teardown") or {}).get("result", {})
        killed = {k["pid"]: k.get("signal") for k in res5.get("killed", [])}
        check("K1", "teardown.yml with foreign_gpu_processes=kill succeeds and stops the foreign process too",
              t5["rc"] == 0 and fpid in killed and not alive(fpid) and not any(alive(p) for p in sched),
              "rc %s, foreign %s -> %s, killed %d" % (t5["rc"], fpid, killed.get(fpid), len(killed)))
        after_gpu_checks("K", t5, res5, sched | {fpid}, "nvml")
    elif GPU:
        skip("F1", "foreign process checks", "the foreign process could not be started")
        t5 = playbook("teardown-kill", "teardown.yml", {"sglang_foreign_gpu_processes": "kill"})
        check("K1", "teardown.yml succeeds", t5["rc"] == 0, "rc %s" % t5["rc"])
    else:
        skip("F1", "foreign process checks", "no GPU backend (GPU_DRYRUN=%s)" % MODE)
        t5 = playbook("teardown", "teardown.yml")
        res5 = (find(t5["results"], "sglang_teardown") or {}).get("result", {})
        check("K1", "teardown.yml succeeds and stops everything", t5["rc"] == 0 and not instance_procs(),
              "rc %s, killed %d, timings %s" % (t5["rc"], len(res5.get("killed", [])), res5.get("timings")))

    # 6. the whole cycle with nvidia-smi as the modules' backend
    if GPU:
        r6 = playbook("run4-smi", "restart_extraction.yml", {"sglang_gpu_backend": "nvidia-smi"})
        check("S1", "restart_extraction.yml with gpu_backend=nvidia-smi launches", r6["rc"] == 0
              and len(schedulers()) == TP, "rc %s, %s s" % (r6["rc"], r6["seconds"]))
        sched = set(schedulers())
        wait_for(lambda: set(listed(POLL.last())) >= sched, 30)
        t6 = playbook("teardown-smi", "teardown.yml", {"sglang_gpu_backend": "nvidia-smi"})
        res6 = (find(t6["results"], "sglang_teardown") or {}).get("result", {})
        check("S5", "teardown.yml with gpu_backend=nvidia-smi succeeds",
              t6["rc"] == 0 and not any(alive(p) for p in sched),
              "rc %s, killed %d, timings %s" % (t6["rc"], len(res6.get("killed", [])), res6.get("timings")))
        after_gpu_checks("S", t6, res6, sched, "nvidia-smi")
        k = FIGURES.get("teardown_nvml", {})

        def after(backend):
            return {int(g["index"]): int(g.get("memory_used_mib") or 0)
                    for g in FIGURES.get("teardown_%s" % backend, {}).get("gpus_after", [])}
        compare_gpu_memory("S7", "teardown gpus_after (idle GPUs)", after("nvml"), after("nvidia-smi"))
        check("S6", "teardown: both backends stopped the same kind of process set (the instance's %d schedulers "
              "+ the rest)" % TP, k.get("killed_sglang") == FIGURES.get("teardown_nvidia-smi", {}).get("killed_sglang"),
              "nvml %s, nvidia-smi %s" % (k.get("killed_sglang"), FIGURES.get("teardown_nvidia-smi", {}).get("killed_sglang")))
    return 0


def after_gpu_checks(cid: str, run: Dict[str, Any], res: Dict[str, Any], pids: Set[int], backend: str) -> None:
    ga = res.get("gpus_after") or []
    check(cid + "2", "teardown(%s): the module's gpus_after lists no process on the managed GPUs" % backend,
          bool(ga) and all(not g.get("processes") for g in ga),
          [{"index": g.get("index"), "used": g.get("memory_used_mib"), "processes": g.get("processes")} for g in ga])
    clear = wait_for(lambda: not (set(listed(POLL.last())) & pids), 15)
    s = POLL.last()
    check(cid + "3", "teardown(%s): NVML (own poll) lists none of the stopped pids, nothing at all" % backend,
          bool(clear) and not listed(s), listed(s))
    back = wait_for(lambda: all(u <= b + MEM_TOL_MIB for u, b in zip(POLL.last()["used"], BASE["nvml"])), 30)
    s = POLL.last()
    check(cid + "4", "teardown(%s): every GPU's memory is back to the idle baseline (+%d MiB)" % (backend, MEM_TOL_MIB),
          bool(back), "used %s, baseline %s" % (s["used"], BASE["nvml"]))
    rel = release_figures(run["start"], run["end"], pids)
    FIGURES["teardown_%s" % backend] = {
        "playbook_seconds": run["seconds"], "module_timings": res.get("timings"),
        "killed": len(res.get("killed", [])), "signals": sorted({k.get("signal") for k in res.get("killed", [])}),
        "killed_sglang": sum(1 for k in res.get("killed", []) if "sglang" in str(k.get("cmdline", "")) + str(k.get("name", ""))),
        "gpus_after": [{"index": g.get("index"), "memory_used_mib": g.get("memory_used_mib"),
                        "processes": len(g.get("processes") or [])} for g in ga],
        "release": rel,
    }
    log("teardown(%s) figures: %s" % (backend, json.dumps(FIGURES["teardown_%s" % backend])))


def final_checks() -> None:
    left = instance_procs()
    check("Z1", "nothing of the instance is left: no process with its marker, port %d free" % PORT,
          not left and not port_listening(PORT), left)
    if GPU and POLL.count:
        s = POLL.last()
        check("Z2", "NVML lists no compute process and memory is at the idle baseline at the end",
              not listed(s) and all(u <= b + MEM_TOL_MIB for u, b in zip(s["used"], BASE["nvml"])),
              "listed %s, used %s, baseline %s" % (listed(s), s["used"], BASE["nvml"]))


def emergency_teardown() -> None:
    """Best effort after an abort: the collection's own teardown, then run.sh's trap."""
    if not instance_procs():
        return
    log("emergency teardown of what is left")
    try:
        module("emergency-teardown", "sglang_teardown",
               teardown_args("nvml" if GPU else "none", "kill") | {"grace_period": 2}, timeout=60)
    except Abort:
        pass


def write_results(rc: int) -> None:
    summary = {s: sum(1 for c in CHECKS if c["status"] == s) for s in ("PASS", "FAIL", "SKIP")}
    data = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ"), "mode": MODE, "tp": TP,
            "gpu_mib": GPU_MIB, "foreign_mib": FOREIGN_MIB, "port": PORT, "summary": summary,
            "elapsed_s": round(time.time() - T0, 1), "checks": CHECKS, "figures": FIGURES, "notes": NOTES, "rc": rc}
    with open(os.path.join(OUT, "gpu-results.json"), "w") as fh:
        json.dump(data, fh, indent=1, default=str)
    lines = ["# GPU validation results (%s, mode %s)" % (data["date_utc"], MODE), "",
             "machine: %s" % json.dumps(FIGURES.get("machine", {})), "",
             "summary: %s in %.0f s" % (summary, data["elapsed_s"]), "", "| id | status | check | detail |",
             "|---|---|---|---|"]
    for c in CHECKS:
        detail = str(c["detail"]).replace("|", "/").replace("\n", " ")
        lines.append("| %s | %s | %s | %s |" % (c["id"], c["status"], c["check"], detail[:400]))
    lines += ["", "## figures", "", "```json", json.dumps({k: v for k, v in FIGURES.items()
                                                           if k not in ("inventory_overrides", "machine")},
                                                          indent=1, default=str), "```"]
    if NOTES:
        lines += ["", "## notes", ""] + ["- " + n for n in NOTES]
    with open(os.path.join(OUT, "gpu-results.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with tarfile.open(os.path.join(OUT, "artifacts.tar.gz"), "w:gz") as tar:
        for path in (ALOGS, LOGS, RESULTS, os.path.join(WORK, "foreign.log")):
            if os.path.exists(path):
                tar.add(path, arcname=os.path.basename(path))
        for v in sorted(os.listdir(WORK)):
            if v.startswith("vars-"):
                tar.add(os.path.join(WORK, v), arcname="vars/" + v)
    print("\nSUMMARY: %s (results in %s)" % (summary, OUT), flush=True)


def _on_term(signum, frame):
    raise Abort("signal %d" % signum)


if __name__ == "__main__":
    rc = 0
    signal.signal(signal.SIGTERM, _on_term)
    try:
        main()
    except Abort as exc:
        check("ABORT", "the run reached its end", False, str(exc))
    except Exception as exc:  # a bug in this script must still leave results and clean up
        import traceback
        traceback.print_exc()
        check("ABORT", "the run reached its end", False, "%s: %s" % (type(exc).__name__, exc))
    finally:
        try:
            emergency_teardown()
            final_checks()
        except Exception as exc:
            check("Z0", "final checks ran", False, repr(exc))
        if POLL.samples:
            POLL.close(os.path.join(OUT, "nvml-timeline.jsonl.gz"))
        rc = 1 if any(c["status"] == "FAIL" for c in CHECKS) else 0
        write_results(rc)
    sys.exit(rc)
