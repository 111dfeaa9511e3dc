"""Shared helpers of the benchmarks (benchmarks/run_all.py runs them; `make bench`).

Everything a benchmark starts runs on loopback, under one per-run directory
(/tmp/llmops-bench-<token>), and carries the per-run token (in its environment as
LLMOPS_SGLANG_TEST_RUN and, where it matters, in its command line), so that the end-of-run
cleanup only ever touches processes this run started.
"""
from __future__ import annotations

import atexit
import datetime as _dt
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in (os.path.join(ROOT, "tests"), os.path.join(ROOT, "collections")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import psutil  # noqa: E402  (controller venv)

from helpers import fixtures  # noqa: E402

free_port = fixtures.free_port
run_module = fixtures.run_module

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact  # noqa: E402

EMU_VENV = os.path.join(ROOT, ".venv-emulator")
EMU_PY = os.path.join(EMU_VENV, "bin", "python")
CTL_PY = os.path.join(ROOT, ".venv", "bin", "python")
ANSIBLE = os.path.join(ROOT, ".venv", "bin", "ansible")
ANSIBLE_PLAYBOOK = os.path.join(ROOT, ".venv", "bin", "ansible-playbook")
DOCS = os.path.join(ROOT, "docs")
RESULTS = os.path.join(ROOT, "benchmarks", "results")
READY_LINE = "The server is fired up and ready to roll!"
MODEL = "bench/emulated-llama"          # a hub id: no local directory needed

TOKEN = "llmopsbench" + uuid.uuid4().hex[:8]
RUN_ID = fixtures.TEST_RUN_ID           # LLMOPS_SGLANG_TEST_RUN of everything we start
BENCH_ROOT = "/tmp/llmops-bench-%s" % TOKEN
SHM_ROOT = "/dev/shm/llmops-bench-%s" % TOKEN   # private shm dir (same tmpfs as /dev/shm)

os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(ROOT, "ansible.cfg"))
os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
os.environ["ANSIBLE_NOCOLOR"] = "1"
for _v in ("no_proxy", "NO_PROXY"):
    os.environ[_v] = "127.0.0.1,localhost,::1"


def log(msg: str) -> None:
    sys.stderr.write("[bench %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def path(*parts: str) -> str:
    p = os.path.join(BENCH_ROOT, *parts)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p


def mkdir(*parts: str) -> str:
    p = os.path.join(BENCH_ROOT, *parts)
    os.makedirs(p, exist_ok=True)
    return p


# -- numbers ------------------------------------------------------------------------------------
def median(values: Iterable[Optional[float]]) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt_s(v: Optional[float], digits: int = 2) -> str:
    return "-" if v is None else ("%.*f s" % (digits, v))


def machine() -> Dict[str, Any]:
    u = platform.uname()
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((l.split(":", 1)[1].strip() for l in fh if l.startswith("model name")), "")
    except OSError:
        model = ""
    return {
        "uname": "%s %s %s %s" % (u.system, u.node, u.release, u.machine),
        "cores": os.cpu_count(),
        "cpu": model,
        "mem_gib": round(psutil.virtual_memory().total / 2 ** 30, 1),
        "date": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "processes_on_host": len(psutil.pids()),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
    }


# -- processes ------------------------------------------------------------------------------------
_started: List[subprocess.Popen] = []
_pids_to_kill: Set[int] = set()
_lock = threading.Lock()


def popen(argv: Sequence[str], env: Optional[Dict[str, str]] = None, log_path: Optional[str] = None,
          new_session: bool = True, **kw: Any) -> subprocess.Popen:
    """Start a process of this run (own session by default, run marker in its environment)."""
    full = dict(os.environ)
    full.update(env or {})
    full[fixtures.TEST_MARKER] = RUN_ID
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    kw.setdefault("stdout", out)
    kw.setdefault("stderr", subprocess.STDOUT)
    kw.setdefault("stdin", subprocess.DEVNULL)
    proc = subprocess.Popen(list(argv), env=full, start_new_session=new_session, **kw)
    if log_path:
        out.close()
    with _lock:
        _started.append(proc)
    return proc


def remember(pids: Iterable[int]) -> None:
    with _lock:
        _pids_to_kill.update(pids)


kill_group = fixtures.kill_group


def kill_pids(pids: Iterable[int], start_times: Optional[Dict[int, float]] = None) -> None:
    for pid in pids:
        if start_times and pid in start_times and not _procs.is_alive(pid, start_times[pid]):
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def alive(pid: int, start_time: Optional[float] = None) -> bool:
    """Alive and not a zombie (and, with start_time, the same process: no PID reuse)."""
    return _procs.is_alive(pid, start_time)


def start_times(pids: Iterable[int]) -> Dict[int, float]:
    out = {}
    for pid in pids:
        info = _procs.read_proc(pid)
        if info is not None:
            out[pid] = info.start_time
    return out


def wait_gone(pids: Iterable[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    pids = list(pids)
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.02)
    return not any(alive(p) for p in pids)


def cleanup_all() -> None:
    """SIGKILL everything this run started (process groups, remembered pids, marked pids)."""
    with _lock:
        procs = list(_started)
        extra = set(_pids_to_kill)
    for proc in procs:
        if proc.pid:  # the group may outlive its leader
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
    kill_pids(extra)
    # launched by the modules with a clean environment: found by state dir under BENCH_ROOT
    kill_pids(fixtures.marked_pids(RUN_ID, state_prefix=BENCH_ROOT))
    for proc in procs:
        try:
            proc.wait(timeout=2)
        except Exception:  # noqa: BLE001
            pass
    shutil.rmtree(SHM_ROOT, ignore_errors=True)


atexit.register(cleanup_all)


def listeners(port: int) -> List[int]:
    """Pids holding a listening TCP socket on `port` (IPv4 or IPv6), every holder of the socket."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh)
                for line in fh:
                    f = line.split()
                    if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add("socket:[%s]" % f[9])
        except (OSError, StopIteration, IndexError, ValueError):
            pass
    if not inodes:
        return []
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        d = "/proc/%s/fd" % entry
        try:
            for fd in os.listdir(d):
                try:
                    if os.readlink(os.path.join(d, fd)) in inodes:
                        out.add(int(entry))
                        break
                except OSError:
                    pass
        except OSError:
            pass
    return sorted(out)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex((host, port)) == 0


def wait_port_free(port: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not listeners(port) and not port_open(port):
            return True
        time.sleep(0.05)
    return False


def session_members(sid: int) -> List[int]:
    out = []
    for pid, info in _procs.snapshot().items():
        if info.sid == sid:
            out.append(pid)
    return out


def tree_scope(root_pids: Iterable[int], port: Optional[int] = None, sids: Iterable[int] = ()) -> Set[int]:
    """Every process of one launch: roots, their sessions, the port's listeners, descendants."""
    snap = _procs.snapshot()
    scope: Set[int] = set(p for p in root_pids if p in snap)
    sids = set(sids)
    for pid, info in snap.items():
        if info.sid in sids:
            scope.add(pid)
    if port:
        scope.update(listeners(port))
    for pid in list(scope):
        scope.update(_procs.descendants(pid, snap))
    return scope


# -- logs -------------------------------------------------------------------------------------
_TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)")


def line_time(line: str) -> Optional[float]:
    m = _TS.match(line)
    if not m:
        return None
    fmt = "%Y-%m-%d %H:%M:%S.%f" if "." in m.group(1) else "%Y-%m-%d %H:%M:%S"
    return _dt.datetime.strptime(m.group(1), fmt).timestamp()


def first_line_time(log_path: str, needle: str, offset: int = 0) -> Optional[float]:
    try:
        with open(log_path, errors="replace") as fh:
            fh.seek(offset)
            for line in fh:
                if needle in line:
                    return line_time(line)
    except OSError:
        return None
    return None


def wait_log(log_path: str, needle: str, timeout: float, offset: int = 0,
             proc: Optional[subprocess.Popen] = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(log_path, errors="replace") as fh:
                fh.seek(offset)
                if needle in fh.read():
                    return True
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


class Watcher(threading.Thread):
    """Watches one launch every 10 ms: when the process exits and when a line first appears."""

    def __init__(self, proc: subprocess.Popen, log_path: str, offset: int, needles: Sequence[str]) -> None:
        super().__init__(daemon=True)
        self.proc, self.log_path, self.offset = proc, log_path, offset
        self.needles = list(needles)
        self.seen: Dict[str, float] = {}
        self.exited_at: Optional[float] = None
        self.stop = threading.Event()

    def run(self) -> None:
        pos, buf = self.offset, ""
        while not self.stop.is_set():
            now = time.time()
            if self.exited_at is None and self.proc.poll() is not None:
                self.exited_at = now
            try:
                with open(self.log_path, "rb") as fh:
                    fh.seek(pos)
                    chunk = fh.read()
                    pos += len(chunk)
                buf = (buf + chunk.decode(errors="replace"))[-20000:]
            except OSError:
                pass
            for n in self.needles:
                if n not in self.seen and n in buf:
                    self.seen[n] = now
            time.sleep(0.01)


# -- the emulator, launched by hand with a launch record (like tests/integration/test_ready.py) --
def start_emulator(state_dir: str, log_path: str, name: str, port: int, tp_size: int = 2,
                   fault: str = "", phase: float = 0.5, args: Sequence[str] = (),
                   extra_env: Optional[Dict[str, str]] = None, write_record: bool = True
                   ) -> Tuple[subprocess.Popen, Dict[str, Any]]:
    os.makedirs(state_dir, exist_ok=True)
    launch_id = uuid.uuid4().hex
    offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    argv = [EMU_PY, "-m", "sglang.launch_server", "--model-path", MODEL, "--host", "127.0.0.1",
            "--port", str(port), "--tp-size", str(tp_size)] + list(args)
    env = {"SGLANG_EMULATOR_PHASE_SECONDS": str(phase), "SGLANG_EMULATOR_FAULT": fault,
           "SGLANG_LOG_MS": "1", "LLMOPS_SGLANG_INSTANCE": name, "LLMOPS_SGLANG_LAUNCH_ID": launch_id,
           "LLMOPS_SGLANG_STATE_DIR": state_dir, "SGLANG_BENCH_RUN": TOKEN}
    env.update(extra_env or {})
    launched_at = time.time()
    proc = popen(argv, env=env, log_path=log_path)
    info = _procs.read_proc(proc.pid)
    record = {
        "name": name, "launch_id": launch_id, "state_dir": state_dir,
        "pid": proc.pid, "start_time": info.start_time if info else None,
        "pgid": proc.pid, "sid": proc.pid,
        "interpreter": EMU_PY, "entrypoint": "launch_server",
        "argv": _redact.redact_argv(argv), "log_path": log_path, "log_offset": offset,
        "host": "127.0.0.1", "port": port, "tp_size": tp_size, "nnodes": 1, "node_rank": 0,
        "expect": {"model_path": MODEL, "tp_size": tp_size, "port": port},
        "exit_path": _record.exit_path(state_dir, name), "launched_at": launched_at,
    }
    if write_record:
        _record.write_record(state_dir, name, record)
    return proc, record


# -- ansible -----------------------------------------------------------------------------------
def ansible_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = os.path.join(ROOT, "ansible.cfg")
    env["ANSIBLE_LOCAL_TEMP"] = mkdir("ansible-tmp")
    env["ANSIBLE_REMOTE_TEMP"] = mkdir("ansible-tmp")
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    env[fixtures.TEST_MARKER] = RUN_ID
    return env


def ansible_adhoc_argv(module: str, args: Any) -> List[str]:
    a = json.dumps(args) if isinstance(args, dict) else args
    return [ANSIBLE, "localhost", "-i", "localhost,", "-c", "local", "-m", module, "-a", a,
            "-e", "ansible_python_interpreter=%s" % CTL_PY]


def run_timed(argv: Sequence[str], timeout: float = 600, env: Optional[Dict[str, str]] = None,
              cwd: str = ROOT) -> Tuple[int, float, str]:
    t0 = time.time()
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          env=env or ansible_env(), cwd=cwd, stdin=subprocess.DEVNULL, check=False)
    return proc.returncode, time.time() - t0, proc.stdout + proc.stderr


class Background(threading.Thread):
    """Runs a callable in a thread and records when it finished (wall clock)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.started_at = time.time()
        self.finished_at: Optional[float] = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:  # noqa: BLE001
            self.error = exc
        self.finished_at = time.time()


def spawn_sleepers(count: int) -> subprocess.Popen:
    """`count` idle `sleep` processes in one new session/group (killed by killpg)."""
    script = 'for i in $(seq %d); do sleep 3600 %s & done; echo started; exec sleep 3600' % (count, "")
    proc = popen(["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc.stdout.readline()
    return proc


def rmtree(p: str) -> None:
    shutil.rmtree(p, ignore_errors=True)


def save_json(name: str, data: Any) -> str:
    os.makedirs(RESULTS, exist_ok=True)
    p = os.path.join(RESULTS, name + ".json")
    with open(p, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True, default=str)
    return p


def load_json(name: str) -> Optional[Any]:
    p = os.path.join(RESULTS, name + ".json")
    try:
        with open(p) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _col in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |")
    return "\n".join(out)


def plt():
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot
    return pyplot
