"""sglang_teardown against the emulator. Scope is always restricted to what these tests start:
unique instance names, tmp state dirs, our own ports, `gpus: []`, and the title sweep off
whenever signals are sent (other engineers' emulators may run on this host at the same time)."""
from __future__ import annotations

import os
import shutil
import sys
import urllib.request
import uuid
from typing import Dict, List, Optional

import pytest

from helpers.fixtures import free_port, run_module, wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record


def health(port: int) -> Optional[int]:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as resp:
            return resp.status
    except Exception:
        return None


def _no_proxy() -> Dict[str, str]:
    return {"no_proxy": "*", "NO_PROXY": "*", "http_proxy": "", "HTTP_PROXY": ""}


class Server:
    def __init__(self, spawn, emulator_python: str, tmp_path, name: str, faults: str = "", tp: int = 4,
                 record: bool = True) -> None:
        self.name, self.port = name, free_port()
        self.state_dir = str(tmp_path / ("state-" + name))
        os.makedirs(self.state_dir, exist_ok=True)
        self.tmpdir = _record.tmpdir_path(self.state_dir, name)
        os.makedirs(self.tmpdir, exist_ok=True)
        self.log_path = str(tmp_path / ("%s.log" % name))
        env = {"SGLANG_EMULATOR_PHASE_SECONDS": "0.1", "LLMOPS_SGLANG_INSTANCE": name,
               "LLMOPS_SGLANG_STATE_DIR": self.state_dir, "TMPDIR": self.tmpdir, **_no_proxy()}
        if faults:
            env["SGLANG_EMULATOR_FAULT"] = faults
        self.proc = spawn.start([emulator_python, "-m", "sglang.launch_server", "--model-path", "m", "--port",
                                 str(self.port), "--tp-size", str(tp)], env=env, log_path=self.log_path,
                                cwd=self.tmpdir)
        assert wait_for(lambda: health(self.port) == 200, timeout=30), open(self.log_path).read()[-2000:]
        if record:
            main = _procs.read_proc(self.proc.pid)
            _record.write_record(self.state_dir, name, {
                "name": name, "pid": main.pid, "start_time": main.start_time, "pgid": main.pgid,
                "sid": main.sid, "log_path": self.log_path, "tmpdir": self.tmpdir, "port": self.port,
                "launched_at": main.start_time})

    def tree(self) -> List[int]:
        """Live pids of this launch (its session, plus escaped workers on its port)."""
        snap = _procs.snapshot()
        return [p.pid for p in snap.values() if p.sid == self.proc.pid and not p.is_zombie]

    def args(self, **kw) -> Dict[str, object]:
        base = {"name": self.name, "state_dir": self.state_dir, "ports": [self.port], "gpus": [],
                "sglang_processes": False, "gpu_backend": "none", "grace_period": 5, "timeout": 10}
        base.update(kw)
        return base


@pytest.fixture
def uname() -> str:
    return "td-%s" % uuid.uuid4().hex[:8]


@pytest.fixture
def shm_dir(tmp_path) -> str:
    path = tmp_path / "shm"
    path.mkdir()
    return str(path)


def test_normal_tree_check_mode_decoys_shm_and_idempotence(spawn, emulator_python, tmp_path, uname, shm_dir):
    srv = Server(spawn, emulator_python, tmp_path, uname)
    # decoys that must survive
    decoy_dir = tmp_path / "decoys"
    decoy_dir.mkdir()
    (decoy_dir / "sglang.log").write_text("x\n")
    tail = spawn.start(["tail", "-f", str(decoy_dir / "sglang.log")])
    fake = str(decoy_dir / "nv-hostengine")
    shutil.copy(shutil.which("sleep"), fake)
    # carries our marker: it would be a target, but its name is protected
    protected = spawn.start([fake, "120"], env={"LLMOPS_SGLANG_INSTANCE": uname,
                                                "LLMOPS_SGLANG_STATE_DIR": srv.state_dir})
    other_port = free_port()
    listener = spawn.start([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(other_port)])
    leak, held = os.path.join(shm_dir, "sgl_shm_x_1_abc"), os.path.join(shm_dir, "sgl_shm_y_2_def")
    for path in (leak, held, os.path.join(shm_dir, "unrelated.txt")):
        with open(path, "wb") as fh:
            fh.write(b"\0" * 128)
    holder = spawn.start([sys.executable, "-c", "import sys,time; f=open(sys.argv[1]); time.sleep(120)", held])
    assert wait_for(lambda: any(os.path.realpath("/proc/%d/fd/%s" % (holder.pid, fd)) == held
                                for fd in os.listdir("/proc/%d/fd" % holder.pid)), timeout=10)
    pids = srv.tree()
    assert len(pids) >= 6  # main, resource tracker, 4 schedulers, detokenizer

    check = run_module("sglang_teardown", srv.args(shm_dir=shm_dir), check_mode=True, diff=True)
    assert not check.get("failed"), check.get("msg")
    assert check["changed"] is True
    assert set(pids) <= {t["pid"] for t in check["targets"]}
    assert protected.pid in {s["pid"] for s in check["spared"]}
    assert {t["pid"] for t in check["targets"]}.isdisjoint({tail.pid, protected.pid, listener.pid, holder.pid, os.getpid()})
    assert [os.path.basename(f["path"]) for f in check["shm_removed"]] == ["sgl_shm_x_1_abc"]
    assert check["signals"] and check["signals"][0]["signal"] == "SIGTERM"
    assert "sglang::scheduler_TP0" in check["diff"]["before"]
    assert all(_procs.is_alive(p) for p in pids) and os.path.exists(leak) and health(srv.port) == 200
    assert os.path.exists(_record.record_path(srv.state_dir, uname))

    res = run_module("sglang_teardown", srv.args(shm_dir=shm_dir))
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is True and not res["survivors"] and not res["ports_after"]
    assert set(pids) <= {k["pid"] for k in res["killed"]}
    assert {k["signal"] for k in res["killed"]} <= {"SIGTERM", "already-gone"}
    assert not any(_procs.is_alive(p) for p in pids) and health(srv.port) is None
    for decoy in (tail, protected, listener, holder):
        assert decoy.poll() is None, decoy.args
    assert sorted(os.listdir(shm_dir)) == ["sgl_shm_y_2_def", "unrelated.txt"]
    assert res["shm_kept"][0]["held_by"][0]["pid"] == holder.pid
    assert not os.path.exists(_record.record_path(srv.state_dir, uname)) and not os.path.exists(srv.tmpdir)
    assert set(res["timings"]) == {"plan", "term", "kill", "verify", "cleanup"}

    again = run_module("sglang_teardown", srv.args(shm_dir=shm_dir))
    assert not again.get("failed") and again["changed"] is False and not again["targets"]


def test_ignored_sigterm_escalates_to_sigkill(spawn, emulator_python, tmp_path, uname, shm_dir):
    srv = Server(spawn, emulator_python, tmp_path, uname, faults="ignore_sigterm", tp=2)
    pids = srv.tree()
    res = run_module("sglang_teardown", srv.args(shm_dir=shm_dir, grace_period=1))
    assert not res.get("failed"), res.get("msg")
    assert "SIGKILL" in {k["signal"] for k in res["killed"]}
    assert any(s["signal"] == "SIGKILL" for s in res["signals"])
    assert not any(_procs.is_alive(p) for p in pids) and health(srv.port) is None
    assert res["timings"]["term"] >= 1.0


def test_escaped_worker_found_without_ports_via_launch_files(spawn, emulator_python, tmp_path, uname, shm_dir):
    srv = Server(spawn, emulator_python, tmp_path, uname, faults="escape", tp=1)

    def escaped() -> List[_procs.Proc]:
        return [p for p in _procs.snapshot().values() if p.cmdline and p.cmdline[0].startswith(
            "sglang::tokenizer_worker") and p.ppid == 1 and p.sid != srv.proc.pid and not p.is_zombie
            and os.path.exists("/proc/%d/cwd" % p.pid) and os.path.realpath("/proc/%d/cwd" % p.pid) == srv.tmpdir]
    assert wait_for(lambda: bool(escaped()), timeout=10)
    worker = escaped()[0]
    # no ports given: only the record, the marker and the launch files can find it
    res = run_module("sglang_teardown", srv.args(shm_dir=shm_dir, ports=[]))
    assert not res.get("failed"), res.get("msg")
    reasons = {t["pid"]: t["reasons"] for t in res["targets"]}
    assert worker.pid in reasons, res["targets"]
    assert any("launch log" in r or "TMPDIR" in r for r in reasons[worker.pid])
    assert not _procs.is_alive(worker.pid, worker.start_time)
    assert wait_for(lambda: health(srv.port) is None, timeout=5)


def test_two_instances_tearing_down_one_leaves_the_other(spawn, emulator_python, tmp_path, shm_dir):
    a = Server(spawn, emulator_python, tmp_path, "td-a-%s" % uuid.uuid4().hex[:6], tp=2)
    b = Server(spawn, emulator_python, tmp_path, "td-b-%s" % uuid.uuid4().hex[:6], tp=2)
    b_pids = b.tree()
    # the title sweep in check mode (safe: no signal) must not pick instance b
    check = run_module("sglang_teardown", a.args(shm_dir=shm_dir, sglang_processes=True), check_mode=True)
    assert not check.get("failed"), check.get("msg")
    assert {t["pid"] for t in check["targets"]}.isdisjoint(b_pids)
    assert {o["pid"] for o in check["other_instances"]} >= {b.proc.pid}
    res = run_module("sglang_teardown", a.args(shm_dir=shm_dir))
    assert not res.get("failed"), res.get("msg")
    assert health(a.port) is None and health(b.port) == 200
    assert all(_procs.is_alive(p) for p in b_pids)


# The other bad inputs run in-process: tests/unit/modules/test_sglang_teardown.yaml. A pattern
# that matches the module's own command line needs the module's own process.
@pytest.mark.parametrize("args,reason", [
    ({"patterns": ["sglang_teardown"]}, "bad_pattern"),
])
def test_bad_inputs_fail_before_any_signal(args, reason, tmp_path, uname):
    base = {"name": uname, "state_dir": str(tmp_path / "s"), "gpus": [], "gpu_backend": "none",
            "sglang_processes": False, "shm_dir": str(tmp_path)}
    base.update(args)
    base = {k: v for k, v in base.items() if v is not None}
    res = run_module("sglang_teardown", base)
    assert res.get("failed") and res["reason"] == reason, res
    assert "Traceback" not in res["_stderr"]
    assert not os.path.exists(tmp_path / "s")


def test_os_errors_end_through_the_one_exit_path(tmp_path, uname):
    # An OSError from the engine is named after its path with its errno's reason (the module's own
    # try/except turned it into internal_error); results pass the one redaction (_exit.run).
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import errno\n"
        "from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown\n"
        "def make_plan(*a, **k):\n"
        "    raise OSError(errno.ENOSPC, 'No space left on device', '/full/state/x.json')\n"
        "_teardown.make_plan = make_plan\n")
    from helpers.fixtures import COLLECTIONS
    res = run_module("sglang_teardown", {"name": uname, "state_dir": str(tmp_path / "s"), "gpus": [],
                                         "gpu_backend": "none", "sglang_processes": False, "shm_cleanup": False},
                     check_mode=True, env={"PYTHONPATH": "%s:%s" % (hook, COLLECTIONS)})
    assert res.get("failed") and res["reason"] == "no_space" and res["path"] == "/full/state/x.json", res
    assert "/full/state/x.json: No space left on device" in res["msg"] and "unexpectedly" not in res["msg"]


def test_without_psutil_the_module_names_what_is_missing(spawn, tmp_path, uname):
    # psutil is the process layer: an interpreter without it fails with Ansible's
    # missing_required_lib message (reason missing_library) before anything is looked at.
    hook = tmp_path / "nopsutil"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'psutil' or name.startswith('psutil.'):\n"
        "            raise ImportError('No module named psutil (blocked by the test)')\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Block())\n")
    token = "zz%s" % uuid.uuid4().hex[:8]
    fake = str(tmp_path / token)
    shutil.copy(shutil.which("sleep"), fake)
    proc = spawn.start([fake, "120"])
    from helpers.fixtures import COLLECTIONS
    res = run_module("sglang_teardown", {"patterns": [token + " 120"], "gpus": [], "gpu_backend": "none",
                                         "sglang_processes": False, "shm_cleanup": False,
                                         "state_dir": str(tmp_path / "s")},
                     env={"PYTHONPATH": "%s:%s" % (hook, COLLECTIONS)})
    assert res.get("failed") and res["reason"] == "missing_library", res
    assert res["missing_libraries"] == ["psutil"] and "psutil" in res["msg"]
    assert "Traceback" not in res["_stderr"] and proc.poll() is None


def test_protect_conflicting_with_pattern_is_refused(spawn, tmp_path, uname):
    token = "zz%s" % uuid.uuid4().hex[:8]
    fake = str(tmp_path / "myagent")
    shutil.copy(shutil.which("sleep"), fake)
    proc = spawn.start([fake, "120"])
    # the pattern is a regex on the full argv; its text differs from our own command line
    res = run_module("sglang_teardown", {"patterns": [r"myagen[t] 120"], "protect": ["myagent"], "gpus": [],
                                         "gpu_backend": "none", "sglang_processes": False,
                                         "shm_cleanup": False, "state_dir": str(tmp_path / "s")})
    assert res.get("failed") and res["reason"] == "scope_conflict" and "myagent" in res["msg"], res
    assert proc.poll() is None
    del token
