"""Fixtures and helpers for unit, integration and benchmark code (see tests/conftest.py)."""
from __future__ import annotations

import collections
import json
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, "collections")
CONTROLLER_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
MODULE_PKG = "ansible_collections.llmops.sglang.plugins.modules"
# Every process tests start carries this variable, so cleanup can find escaped children
# without matching anything that is not ours.
TEST_MARKER = "LLMOPS_SGLANG_TEST_RUN"
# One value per pytest process: an xdist worker (PYTEST_XDIST_WORKER, set before conftest is
# imported) inherits the controller's value and adds its own id, so the session-end kill of one
# worker never reaches the servers of tests still running on another.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
TEST_RUN_ID = os.environ.get(TEST_MARKER) or uuid.uuid4().hex[:12]
if _WORKER and not TEST_RUN_ID.endswith("-" + _WORKER):
    TEST_RUN_ID = "%s-%s" % (TEST_RUN_ID, _WORKER)
os.environ[TEST_MARKER] = TEST_RUN_ID


def controller_python() -> str:
    return CONTROLLER_PYTHON if os.path.exists(CONTROLLER_PYTHON) else sys.executable


def emulator_python_path() -> str:
    path = os.environ.get("SGLANG_EMULATOR_PYTHON") or os.path.join(ROOT, ".venv-emulator", "bin", "python")
    if not os.path.exists(path):
        raise RuntimeError("emulator venv missing at %s: run `make emulator-venv`" % path)
    return path


def unique_name(label: str) -> str:
    """An instance name of its own for a test file: `<label>-<8 hex>`. An instance's cgroup
    (llmops-sglang.slice/<name>) and a teardown by name reach everything on the host with that
    name, so a fixed name collides with another worker or another checkout running the same
    file; the label keeps it readable."""
    return "%s-%s" % (label, uuid.uuid4().hex[:8])


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# xdist workers draw ports from disjoint residues: a port is only checked free, not held, so two
# workers that drew the same one raced for it (seen in CI: a slow launch lost its port to another
# worker's server). One process does not hand out any of its last 256 ports again.
_PORT_STRIDE = 16
_handed: "collections.deque[int]" = collections.deque(maxlen=256)


def _worker_index() -> Optional[int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) % _PORT_STRIDE if worker.startswith("gw") and worker[2:].isdigit() else None


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, below the kernel's ephemeral range. A port from bind(0) lies inside
    that range, where any outgoing connection (a router's pooled one) may take it in the
    moment a restart frees it, and the relaunch then fails to bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    high = max(_ephemeral_low(), 20001) - 1
    index = _worker_index()
    ports = [p for p in range(20000, high + 1)
             if p not in _handed and (index is None or (p - 20000) % _PORT_STRIDE == index)]
    for port in random.sample(ports, min(500, len(ports))):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            _handed.append(port)
            return port
    raise RuntimeError("no free port in 20000-%d on %s" % (high, host))


def run_module(name: str, args: Dict[str, Any], check_mode: bool = False, diff: bool = False,
               timeout: float = 300, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Run one module the way ansible does (args file, JSON on stdout); returns its result."""
    payload = dict(args)
    payload["_ansible_check_mode"] = check_mode
    payload["_ansible_diff"] = diff
    own_tmpdir = "_ansible_tmpdir" not in payload
    if own_tmpdir:
        payload["_ansible_tmpdir"] = tempfile.mkdtemp(prefix="llmops-modtmp-")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"ANSIBLE_MODULE_ARGS": payload}, fh)
        args_path = fh.name
    run_env = dict(os.environ)
    run_env["PYTHONPATH"] = COLLECTIONS
    run_env.update(env or {})
    try:
        proc = subprocess.run([controller_python(), "-m", "%s.%s" % (MODULE_PKG, name), args_path],
                              capture_output=True, text=True, timeout=timeout, env=run_env,
                              stdin=subprocess.DEVNULL, check=False)
    finally:
        os.unlink(args_path)
        if own_tmpdir:
            shutil.rmtree(payload["_ansible_tmpdir"], ignore_errors=True)
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else None
    except ValueError:
        result = None
    if result is None:
        raise AssertionError("module %s produced no JSON (rc=%d)\nstdout: %s\nstderr: %s"
                             % (name, proc.returncode, proc.stdout, proc.stderr))
    result["_rc"] = proc.returncode
    result["_stderr"] = proc.stderr
    return result


def _own_ancestry() -> set:
    """This process and its ancestors (make, the shell, CI): never cleanup targets."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open("/proc/%d/stat" % pid) as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def marked_pids(run_id: str = TEST_RUN_ID, state_prefix: Optional[str] = None) -> List[int]:
    """Live pids whose environment carries this test run's marker, or (launched by the
    modules with a clean environment) a LLMOPS_SGLANG_STATE_DIR under `state_prefix`, or whose
    cwd / open files lie under `state_prefix` (this pytest session's temp root)."""
    found = []
    needle = ("%s=%s" % (TEST_MARKER, run_id)).encode()
    state_key = b"LLMOPS_SGLANG_STATE_DIR="
    mine = _own_ancestry()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as fh:
                items = fh.read().split(b"\0")
        except OSError:
            continue
        if needle in items or (state_prefix and any(i.startswith(state_key) and path_under(
                i[len(state_key):].decode("utf-8", "replace"), state_prefix) for i in items)):
            found.append(int(entry))
        elif state_prefix and _uses_path_under(int(entry), state_prefix):
            found.append(int(entry))
    return found


def path_under(path: str, prefix: str) -> bool:
    """`path` is `prefix` or inside it: a plain string prefix would take /tmp/pytest-8 for a part
    of /tmp/pytest-81, another session's temp root (whose servers it would then kill)."""
    prefix = prefix.rstrip("/") or "/"
    return path == prefix or path.startswith(prefix if prefix.endswith("/") else prefix + "/")


def _uses_path_under(pid: int, prefix: str) -> bool:
    """cwd or an open file under `prefix`: sglang children whose environ setproctitle wiped
    (escaped workers) are still tied to the test's temp dir by their log fd and cwd."""
    base = "/proc/%d" % pid
    links = [os.path.join(base, "cwd")]
    try:
        links += [os.path.join(base, "fd", fd) for fd in os.listdir(os.path.join(base, "fd"))]
    except OSError:
        return False
    for link in links:
        try:
            if path_under(os.readlink(link), prefix):
                return True
        except OSError:
            continue
    return False


def kill_pids(pids: List[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the session/group a test started (its leader's pid), then reap the leader."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


class Spawned:
    """Processes a test started (each in its own session)."""

    def __init__(self) -> None:
        self.procs: List[subprocess.Popen] = []

    def start(self, argv: List[str], env: Optional[Dict[str, str]] = None, log_path: Optional[str] = None,
              cwd: Optional[str] = None) -> subprocess.Popen:
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env[TEST_MARKER] = TEST_RUN_ID
        out = open(log_path, "ab") if log_path else subprocess.DEVNULL
        proc = subprocess.Popen(argv, env=full_env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
        if log_path:
            out.close()
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.procs:
            kill_group(proc)


@pytest.fixture
def spawn() -> Iterator[Spawned]:
    spawned = Spawned()
    yield spawned
    spawned.cleanup()


def instance_cgroups() -> Dict[str, int]:
    """{instance name: cgroup id} of the instance cgroups under llmops-sglang.slice now."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup

    mount = _cgroup.v2_mount()
    slice_dir = _cgroup.slice_path(mount) if mount else None
    out: Dict[str, int] = {}
    try:
        names = os.listdir(slice_dir) if slice_dir else []
    except OSError:
        return out
    for name in names:
        try:
            st = os.lstat(os.path.join(slice_dir, name))
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            out[name] = st.st_ino
    return out


def remove_instance_cgroup(name: str, timeout: float = 10) -> None:
    """Kill what is left in the instance cgroup of a test's launch named `name` and remove it
    (a test that stops its server by pid or process group leaves the cgroup behind)."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup

    mount = _cgroup.v2_mount()
    path = _cgroup.instance_path(mount, name) if mount else None
    if path and os.path.isdir(path):
        _cgroup.kill(path)
        _cgroup.wait_empty(path, time.monotonic() + timeout)
        _cgroup.remove(path)


def _names_under(top: str) -> set:
    """Every instance name this session's files could belong to: the part before the first dot
    of each file and directory name under `top` (state dirs hold <name>.json, <name>.lock, ...;
    instance names have no dots)."""
    found = set()
    for _dirpath, dirs, files in os.walk(top):
        found.update(n.split(".", 1)[0] for n in dirs + files)
    return found


def leftover_cgroups(before: Dict[str, int], top: str) -> List[str]:
    """Instance cgroups that appeared during this session, still exist, and carry the name of
    an instance whose files lie under this session's temp root `top`: the ones it created."""
    now = instance_cgroups()
    ours = _names_under(top) if now else set()
    return sorted(n for n, ino in now.items() if before.get(n) != ino and n in ours)


@pytest.fixture(scope="session", autouse=True)
def _kill_leftovers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the end of the session, SIGKILL anything still carrying this run's marker or
    launched with a state dir inside this session's temp root; then fail the session (an error
    at the teardown of its last test) if it left instance cgroups behind. Empty ones are
    removed (rmdir only: a populated one is left alone, it may be another run's namesake)."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup

    before = instance_cgroups()
    yield
    top = str(tmp_path_factory.getbasetemp())
    kill_pids(marked_pids(state_prefix=top))
    left = leftover_cgroups(before, top)
    if left:
        slice_dir = _cgroup.slice_path(_cgroup.v2_mount() or "/nonexistent")
        kept = [n for n in left if not _cgroup.remove(os.path.join(slice_dir, n))]
        pytest.fail("this test session left instance cgroups behind in %s: %s (%s): a test stopped its "
                    "server without removing its cgroup; use the `launched` fixture or "
                    "helpers.fixtures.remove_instance_cgroup" % (
                        slice_dir, ", ".join(left), "still populated: %s" % ", ".join(kept) if kept else "removed now"),
                    pytrace=False)


@pytest.fixture(scope="session")
def emulator_python() -> str:
    return emulator_python_path()


@pytest.fixture(scope="session")
def nosglang_venv(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real venv without sglang (no pip, to be quick)."""
    path = str(tmp_path_factory.mktemp("nosglang") / "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True)
    return path


@pytest.fixture
def state_dir(tmp_path) -> str:
    path = tmp_path / "state"
    path.mkdir()
    return str(path)


@pytest.fixture
def log_dir(tmp_path) -> str:
    path = tmp_path / "logs"
    path.mkdir()
    return str(path)


@pytest.fixture
def model_dir(tmp_path) -> str:
    """A local model directory as the preflight wants it (config.json)."""
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return str(path)


@pytest.fixture
def launched() -> Iterator[List[Dict[str, Any]]]:
    """Launch records a test appends; each server is stopped after the test by its cgroup
    (contained launches) and by its process group, and its instance cgroup emptied and removed."""
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment

    records: List[Dict[str, Any]] = []
    yield records
    for record in records:
        _containment.stop(record, grace_period=5, deadline=time.monotonic() + 20)
        try:
            os.killpg(record["pgid"], signal.SIGKILL)
        except (OSError, KeyError, TypeError):
            pass
        remove_instance_cgroup(record["name"])


@pytest.fixture
def one_host(tmp_path) -> Iterator[Any]:
    """(inventory path, host vars) of one localhost alias with its own instance (helpers.play_runs);
    its servers are torn down by the teardown playbook after the test, which must succeed."""
    from helpers import play_runs

    hv = play_runs.host_vars(str(tmp_path), "h1")
    inv = play_runs.write_inventory(str(tmp_path / "inventory.yml"), {"h1": hv})
    yield inv, hv
    down = play_runs.teardown(inv)
    assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
