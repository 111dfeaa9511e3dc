"""cgroup containment end to end with the emulator: launched through _launcher.spawn, stopped
through _containment.stop, on this host (root, cgroup v2 pure or hybrid).

The server is the emulator behind a small wrapper that first starts a worker doing everything an
escaping process can do without privileges: double fork, setsid, reparented to init, a new title
(argv and comm), an empty environment, cwd /, no inherited descriptor. The emulator's own
`escape` fault adds a second one that keeps the listening socket. Only cgroup membership still
ties them to the launch.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from typing import Any, Dict, Iterator, List, Optional

import psutil
import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from helpers.fixtures import COLLECTIONS, ROOT, TEST_MARKER, TEST_RUN_ID, free_port, run_module, wait_for

ESCAPER_TITLE = "esc-worker"
# The escaper keeps the launch's environment only until setproctitle has written its title over
# the environ block (SPT_NOENV dropped so that it does, as in an sglang child without it):
# /proc/PID/environ then reads empty, and os.environ is cleared too.
WRAPPER = r"""
import os, runpy, sys
pidfile, mode = sys.argv[1], sys.argv[2]
WORKER = '''
import ctypes, os, signal, sys, time
import setproctitle
setproctitle.setproctitle("%s")
os.environ.clear()
ctypes.CDLL(None).prctl(15, b"%s", 0, 0, 0)
if sys.argv[2] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
'''
short = os.fork()  # a member that exits at once: its pid is free for anyone afterwards
if short == 0:
    os._exit(0)
os.waitpid(short, 0)
open(pidfile + ".former", "w").write(str(short))
first = os.fork() if mode != "none" else 0
if mode == "none":
    pass
elif first == 0:
    os.setsid()
    if os.fork() == 0:
        os.chdir("/")
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 1 << 16)
        env = {k: v for k, v in os.environ.items() if k != "SPT_NOENV"}
        os.execve(sys.executable, [sys.executable, "-c", WORKER, pidfile, mode], env)
    os._exit(0)
else:
    os.waitpid(first, 0)
sys.argv = ["sglang.launch_server"] + sys.argv[3:]
runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
""" % (ESCAPER_TITLE, ESCAPER_TITLE)


def _health(port: int) -> Optional[int]:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as resp:
            return resp.status
    except Exception:
        return None


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _model(tmp_path) -> str:
    path = tmp_path / "model"
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return str(path)


def _spec(emulator_python: str, tmp_path, port: int, faults: str = "", escaper: str = "0",
          containment: str = "cgroup", name: Optional[str] = None) -> _launcher.LaunchSpec:
    """escaper: "0" one that honours SIGTERM, "1" one that ignores it, "none" no escaper."""
    venv = os.path.dirname(os.path.dirname(emulator_python))
    env = {TEST_MARKER: TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}
    if faults:
        env["SGLANG_EMULATOR_FAULT"] = faults
    argv = [emulator_python, "-c", WRAPPER, str(tmp_path / "escaper.pid"), escaper,
            "--model-path", _model(tmp_path), "--port", str(port), "--tp-size", "2"]
    return _launcher.LaunchSpec(name=name or "ct-%s" % uuid.uuid4().hex[:8], state_dir=str(tmp_path / "state"),
                                log_dir=str(tmp_path / "logs"), python=emulator_python, venv=venv, argv=argv, env=env,
                                containment=containment, containment_why="test")


def _cleanup(rec: Dict[str, Any]) -> None:
    """Kill whatever is left of a launch: its cgroup (by path, whatever the record says) and session."""
    path = _cgroup.instance_path(_cgroup.v2_mount(), rec["name"])
    if os.path.isdir(path):
        _cgroup.kill(path)
        _cgroup.wait_empty(path, time.monotonic() + 10)
        _cgroup.remove(path)
    pgid = rec.get("pgid")
    if isinstance(pgid, int) and pgid > 1:  # never 0: that is the caller's own group
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def launched() -> Iterator[List[Dict[str, Any]]]:
    """Records of what a test launched (every launch here is contained, so nothing escapes this)."""
    records: List[Dict[str, Any]] = []
    yield records
    for rec in records:
        _cleanup(rec)


def _launch(spec: _launcher.LaunchSpec, launched: List[Dict[str, Any]], tmp_path, port: int) -> Dict[str, Any]:
    rec = _launcher.spawn(spec)
    launched.append(rec)
    assert wait_for(lambda: _health(port) == 200, 30), open(rec["log_path"]).read()[-2000:]
    if spec.argv[4] != "none":
        assert wait_for((tmp_path / "escaper.pid").exists, 10)
    return rec


def _escaper(tmp_path) -> int:
    return int((tmp_path / "escaper.pid").read_text())


def _assert_escaped(pid: int, rec: Dict[str, Any]) -> None:
    """Nothing but the cgroup ties this process to the launch."""
    proc = _procs.read_proc(pid)
    assert proc is not None and proc.comm == ESCAPER_TITLE and proc.title == ESCAPER_TITLE
    assert proc.sid != rec["sid"] and proc.pgid != rec["pgid"]
    assert proc.ppid not in _cgroup.members(rec["cgroup"])  # reparented out of the launch's tree
    assert _procs.read_environ(pid) == {}
    assert os.readlink("/proc/%d/cwd" % pid) == "/"
    assert not any(t.startswith((rec["log_path"], rec["tmpdir"])) for _fd, t in _procs.fd_targets(pid))
    assert pid in _cgroup.members(rec["cgroup"])


def _escaped_sglang_workers(rec: Dict[str, Any]) -> List[int]:
    """The emulator's own escaped worker (escape fault): a tokenizer_worker in another session."""
    out = []
    for pid in _cgroup.members(rec["cgroup"]):
        proc = _procs.read_proc(pid)
        if proc and proc.title.startswith("sglang::tokenizer_worker") and proc.sid != rec["sid"]:
            out.append(pid)
    return out


def test_an_escaped_worker_with_no_title_env_or_parent_is_still_stopped(emulator_python, tmp_path, launched):
    port = free_port()
    rec = _launch(_spec(emulator_python, tmp_path, port, faults="escape"), launched, tmp_path, port)
    escaper = _escaper(tmp_path)
    _assert_escaped(escaper, rec)
    holders = _escaped_sglang_workers(rec)
    assert holders, "the emulator's escape fault made no worker"

    result = _containment.stop(rec, grace_period=15, deadline=time.monotonic() + 30)

    ended = {m["pid"]: m["ended"] for m in result["members"]}
    assert ended[escaper] == "SIGTERM" and all(ended[p] == "SIGTERM" for p in holders)
    assert ended[rec["pid"]] == "SIGTERM" and ended[rec["supervisor_pid"]] == "SIGTERM"
    assert result["changed"] and result["empty"] and result["removed"] and result["killed_with"] is None
    assert not any(_procs.is_alive(p) for p in ended)
    assert not os.path.exists(rec["cgroup"]) and _port_free(port)


def test_cgroup_kill_reaches_members_that_ignore_sigterm(emulator_python, tmp_path, launched):
    port = free_port()
    rec = _launch(_spec(emulator_python, tmp_path, port, faults="ignore_sigterm,escape", escaper="1"),
                  launched, tmp_path, port)
    escaper = _escaper(tmp_path)
    _assert_escaped(escaper, rec)
    members = _cgroup.members(rec["cgroup"])

    result = _containment.stop(rec, grace_period=1, deadline=time.monotonic() + 30)

    ended = {m["pid"]: m["ended"] for m in result["members"]}
    assert result["killed_with"] == "cgroup.kill" and result["empty"] and result["removed"]
    assert set(members) <= set(ended) and ended[escaper] == "SIGKILL" and ended[rec["pid"]] == "SIGKILL"
    assert not any(_procs.is_alive(p) for p in ended) and _port_free(port)


def test_an_instance_whose_cgroup_is_already_empty_is_unchanged(emulator_python, tmp_path, launched):
    port = free_port()
    rec = _launch(_spec(emulator_python, tmp_path, port, escaper="none"), launched, tmp_path, port)
    assert _cgroup.kill(rec["cgroup"]) == "cgroup.kill"  # the whole instance crashed
    assert _cgroup.wait_empty(rec["cgroup"], time.monotonic() + 10)

    assert _containment.members_of(rec) == []
    result = _containment.stop(rec, grace_period=5, deadline=time.monotonic() + 10)
    assert not result["changed"] and result["members"] == [] and result["killed_with"] is None
    assert result["removed"] and not os.path.exists(rec["cgroup"])
    again = _containment.stop(rec, grace_period=5, deadline=time.monotonic() + 10)
    assert not again["changed"] and again["cgroup"] is None


# In a private PID namespace (this script is its PID 1): launch, let the wrapper's intermediate
# child exit (a former member), give its pid to a stranger outside the cgroup through
# ns_last_pid, then stop the instance. The stranger must survive; everything else must go.
STRANGER_SCRIPT = r"""
import json, os, subprocess, sys, time, urllib.request
sys.path[:0] = json.loads(sys.argv[2])
from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
spec = _launcher.LaunchSpec(**json.loads(sys.argv[1]))
rec = _launcher.spawn(spec)
pidfile, port = spec.argv[3], int(sys.argv[3])


def healthy():
    try:
        return urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2).status == 200
    except Exception:
        return False


deadline = time.monotonic() + 30
while not (os.path.exists(pidfile + ".former") and os.path.exists(pidfile) and healthy()):
    assert time.monotonic() < deadline, open(rec["log_path"]).read()[-2000:]
    time.sleep(0.05)
former = int(open(pidfile + ".former").read())
assert former not in _cgroup.members(rec["cgroup"]) and not _procs.is_alive(former)
for _ in range(50):  # a server thread may fork in between: try again until the number is ours
    with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
        fh.write(str(former - 1))
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    if stranger.pid == former:
        break
    stranger.kill()
    stranger.wait()
members = _cgroup.members(rec["cgroup"])
result = _containment.stop(rec, grace_period=10, deadline=time.monotonic() + 20)
print(json.dumps({"former": former, "stranger": stranger.pid, "stranger_alive": stranger.poll() is None,
                  "members_before": members, "result": result,
                  "left": [p for p in members if _procs.is_alive(p)]}))
stranger.kill()
"""


def test_a_stranger_holding_a_former_members_pid_is_never_signalled(emulator_python, tmp_path):
    port = free_port()
    spec = _spec(emulator_python, tmp_path, port)
    fields = {k: getattr(spec, k) for k in ("name", "state_dir", "log_dir", "python", "venv", "argv", "env",
                                            "containment", "containment_why")}
    proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c",
                           STRANGER_SCRIPT, json.dumps(fields), json.dumps([COLLECTIONS, os.path.join(ROOT, "tests")]),
                           str(port)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    _cleanup({"name": spec.name})  # the namespace died with its PID 1; its cgroup may remain
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["stranger"] == out["former"], "ns_last_pid did not hand the former member's pid to the stranger"
    assert out["stranger_alive"] and out["stranger"] not in [m["pid"] for m in out["result"]["members"]]
    assert out["result"]["removed"] and out["left"] == []


def test_a_record_from_the_previous_version_is_still_torn_down(emulator_python, tmp_path, launched):
    """A record written before containment (record_version 1, no containment fields) is not
    contained: _containment leaves it alone and sglang_teardown stops it the old way."""
    port = free_port()
    # launched contained so that the test can always clean up; the record then loses its containment
    rec = _launch(_spec(emulator_python, tmp_path, port, escaper="none"), launched, tmp_path, port)
    old = {k: v for k, v in rec.items() if k not in ("containment", "containment_why", "cgroup", "cgroup_id",
                                                     "boot_id")}
    old["record_version"] = 1
    _record.write_record(rec["state_dir"], rec["name"], old)

    stored = _record.read_record(rec["state_dir"], rec["name"])
    assert stored["record_version"] == 1 and "containment" not in stored
    assert not _containment.is_contained(stored) and _containment.members_of(stored) == []
    assert not _containment.stop(stored, grace_period=1, deadline=time.monotonic() + 5)["changed"]
    assert _procs.is_alive(rec["pid"], rec["start_time"])

    result = run_module("sglang_teardown", {"name": rec["name"], "state_dir": rec["state_dir"], "ports": [port],
                                            "gpus": [], "sglang_processes": False, "gpu_backend": "none",
                                            "grace_period": 15, "timeout": 15})
    assert result["_rc"] == 0, result.get("msg")
    assert result["changed"] and not _procs.is_alive(rec["pid"], rec["start_time"])
    assert not _procs.is_alive(rec["supervisor_pid"], rec["supervisor_start_time"]) and _port_free(port)


UNPRIVILEGED = r"""
import json, os, sys, time
sys.path[:0] = [sys.argv[2], sys.argv[1] + "/site"]
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
backend, why = _containment.choose("auto")
try:
    _containment.choose("cgroup")
    refused = None
except SglangError as exc:
    refused = [exc.details["reason"], exc.msg]
base = sys.argv[1]
spec = _launcher.LaunchSpec(name="unpriv", state_dir=base + "/state", log_dir=base + "/logs", python=sys.executable,
                            venv=None, argv=[sys.executable, "-c", "import time; time.sleep(30)"], env={},
                            containment=backend, containment_why=why)
rec = _launcher.spawn(spec)
alive = _procs.is_alive(rec["pid"], rec["start_time"])
os.killpg(rec["pgid"], 9)
print(json.dumps({"uid": os.geteuid(), "backend": backend, "why": why, "refused": refused,
                  "record": [rec["containment"], rec["cgroup"], rec["containment_why"]], "alive": alive}))
"""


def test_an_unprivileged_user_falls_back_to_none_and_says_why():
    """cgroup v2 is not writable by an unprivileged user here: auto picks none with the reason,
    a named cgroup backend is refused, and a launch still works the old way."""
    base = tempfile.mkdtemp(prefix="llmops-unpriv-", dir="/tmp")
    try:
        # the system python, with the controller venv's psutil (abi3) where the user can read it
        shutil.copytree(os.path.dirname(psutil.__file__), os.path.join(base, "site", "psutil"))
        # and a copy of the library: the checkout may sit below a directory the user cannot enter
        # (a clone under /root, mode 0700)
        lib = os.path.join(base, "collections", "ansible_collections", "llmops", "sglang", "plugins")
        shutil.copytree(os.path.join(COLLECTIONS, "ansible_collections", "llmops", "sglang", "plugins", "module_utils"),
                        os.path.join(lib, "module_utils"), ignore=shutil.ignore_patterns("__pycache__"))
        for pkg in (os.path.dirname(os.path.dirname(os.path.dirname(lib))), os.path.dirname(os.path.dirname(lib)),
                    os.path.dirname(lib), lib):
            open(os.path.join(pkg, "__init__.py"), "a").close()
        for root, dirs, files in os.walk(base):
            for entry in dirs + files:
                os.chown(os.path.join(root, entry), 65534, 65534)
        os.chown(base, 65534, 65534)
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                               UNPRIVILEGED, base, os.path.join(base, "collections")], capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["uid"] == 65534 and out["backend"] == "none"
        assert "not writable by uid 65534" in out["why"] and out["why"].startswith("auto:")
        assert out["refused"][0] == "containment_unavailable" and "not writable by uid 65534" in out["refused"][1]
        assert out["record"] == ["none", None, out["why"]] and out["alive"]
    finally:
        shutil.rmtree(base, ignore_errors=True)
