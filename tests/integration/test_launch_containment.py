"""sglang_launch with containment, end to end against the emulator on this host (root, cgroup v2).

The module chooses the backend before anything else, reports it (check mode too) and puts the
whole launch in the instance cgroup; a cgroup still holding processes refuses the launch.
Every instance started here has a unique name and is stopped by its cgroup
(`_containment.stop`) and by its process group at the end.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from typing import Any, Dict, Iterator, List

import psutil
import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _cgroup
from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from helpers.fixtures import TEST_RUN_ID, free_port, run_module, wait_for

EMU_ENV = {"LLMOPS_SGLANG_TEST_RUN": TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}
READY = "The server is fired up and ready to roll!"

pytestmark = pytest.mark.skipif(not _containment.choose("auto")[0] == "cgroup",
                                reason="needs cgroup v2 writable by this user and PID 1 not systemd")


def _mount() -> str:
    mount = _cgroup.v2_mount()
    assert mount is not None
    return mount


@pytest.fixture
def name() -> Iterator[str]:
    """A unique instance name (the cgroup is keyed by it); its cgroup is emptied and removed after."""
    value = "lc-%s" % uuid.uuid4().hex[:10]
    yield value
    path = _cgroup.instance_path(_mount(), value)
    if os.path.isdir(path):
        _cgroup.kill(path)
        _cgroup.wait_empty(path, time.monotonic() + 10)
        _cgroup.remove(path)


@pytest.fixture
def launched() -> Iterator[List[Dict[str, Any]]]:
    records: List[Dict[str, Any]] = []
    yield records
    for record in records:
        _containment.stop(record, grace_period=5, deadline=time.monotonic() + 20)
        pgid = record.get("pgid")
        if isinstance(pgid, int) and pgid > 1:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass


def _args(emulator_python: str, name: str, model: str, tmp_path, **extra: Any) -> Dict[str, Any]:
    args = {"name": name, "venv": os.path.dirname(os.path.dirname(emulator_python)), "model_path": model,
            "port": free_port(), "tp_size": 2, "state_dir": str(tmp_path / "state"),
            "log_dir": str(tmp_path / "logs"), "gpu_backend": "none", "gpu_check": False, "env": dict(EMU_ENV),
            "lock_timeout": 10}
    args.update(extra)
    return args


def _v2_cgroup_of(pid: int) -> str:
    """The cgroup v2 path of `pid` as /proc/PID/cgroup names it (relative to the mount here:
    this test runs in the host's cgroup namespace)."""
    with open("/proc/%d/cgroup" % pid) as fh:
        for line in fh:
            if line.startswith("0::"):
                return line[3:].strip()
    raise AssertionError("no cgroup v2 line for pid %d" % pid)


def _launch_tree(record: Dict[str, Any]) -> List[int]:
    """Supervisor, server and every process they started."""
    sup = psutil.Process(record["supervisor_pid"])
    return sorted([sup.pid] + [c.pid for c in sup.children(recursive=True)])


def test_contained_launch_puts_every_server_process_in_its_cgroup(emulator_python, model_dir, tmp_path, name,
                                                                  launched):
    args = _args(emulator_python, name, model_dir, tmp_path, containment="cgroup")
    plan = run_module("sglang_launch", args, check_mode=True)
    assert plan["_rc"] == 0 and plan["changed"] and plan["reason"] == "new", plan
    assert plan["containment"]["backend"] == "cgroup" and "writable" in plan["containment"]["why"]
    assert not os.path.exists(_cgroup.instance_path(_mount(), name))  # check mode creates nothing

    result = run_module("sglang_launch", args)
    assert result["_rc"] == 0, result.get("msg")
    record = result["record"]
    launched.append(record)
    path = _cgroup.instance_path(_mount(), name)
    assert record["containment"] == "cgroup" and record["cgroup"] == path
    assert record["cgroup_id"] == _cgroup.cgroup_id(path) and record["boot_id"] == _containment.boot_id()
    assert record["record_version"] == _record.RECORD_VERSION == 2 and record["containment_why"]
    assert result["containment"] == {"backend": "cgroup", "why": record["containment_why"], "cgroup": path,
                                     "unit": None}
    assert wait_for(lambda: READY in open(result["log_path"]).read(), 30), open(result["log_path"]).read()[-2000:]

    tree = _launch_tree(record)
    assert record["pid"] in tree and len(tree) >= 4  # supervisor, server, two schedulers at least
    relative = "/" + os.path.relpath(path, _mount())
    assert {pid: _v2_cgroup_of(pid) for pid in tree} == {pid: relative for pid in tree}
    assert set(tree) <= set(_cgroup.members(path))

    again = run_module("sglang_launch", args)
    assert again["_rc"] == 0 and again["reason"] == "running" and not again["changed"]
    assert again["containment"] == result["containment"]

    stopped = _containment.stop(record, grace_period=10, deadline=time.monotonic() + 30)
    assert stopped["changed"] and stopped["empty"] and stopped["removed"]
    assert not any(_procs.is_alive(pid) for pid in tree)


def test_auto_chooses_cgroup_here_and_none_still_works(emulator_python, model_dir, tmp_path, name, launched):
    auto = run_module("sglang_launch", _args(emulator_python, name, model_dir, tmp_path), check_mode=True)
    assert auto["_rc"] == 0 and auto["containment"]["backend"] == "cgroup"
    assert auto["containment"]["why"].startswith("auto: PID 1 is not systemd")

    result = run_module("sglang_launch", _args(emulator_python, name, model_dir, tmp_path, containment="none"))
    assert result["_rc"] == 0, result.get("msg")
    record = result["record"]
    launched.append(record)
    assert record["containment"] == "none" and record["cgroup"] is None
    assert result["containment"]["backend"] == "none" and "none was requested" in result["containment"]["why"]
    assert not os.path.exists(_cgroup.instance_path(_mount(), name))
    assert _v2_cgroup_of(record["pid"]) == _v2_cgroup_of(os.getpid())
    assert wait_for(lambda: READY in open(result["log_path"]).read(), 30), open(result["log_path"]).read()[-2000:]
    assert _containment.members_of(record) == []


def test_a_busy_instance_cgroup_refuses_the_launch(emulator_python, model_dir, tmp_path, name):
    path = _cgroup.create(_mount(), name)
    squatter = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        _cgroup.join(path, squatter.pid)
        args = _args(emulator_python, name, model_dir, tmp_path, containment="cgroup")

        plan = run_module("sglang_launch", args, check_mode=True)
        assert plan["_rc"] == 0 and plan["changed"] and plan["reason"] == "cgroup_busy", plan
        assert any(str(squatter.pid) in b and path in b for b in plan["blockers"]), plan["blockers"]

        refused = run_module("sglang_launch", args)
        assert refused["_rc"] != 0 and refused["reason"] == "cgroup_busy" and not refused["changed"]
        assert str(squatter.pid) in refused["msg"] and "stop it first with sglang_teardown" in refused["msg"]
        assert squatter.poll() is None and _cgroup.members(path) == [squatter.pid]
        assert not os.path.exists(os.path.join(args["state_dir"], name + ".json"))
    finally:
        squatter.kill()
        squatter.wait()


def test_an_unavailable_backend_fails_before_anything_happens(emulator_python, model_dir, tmp_path, name):
    """systemd is not PID 1 here: asking for it fails at once, creating nothing."""
    args = _args(emulator_python, name, model_dir, tmp_path, containment="systemd")
    for check_mode in (True, False):
        failed = run_module("sglang_launch", args, check_mode=check_mode)
        assert failed["_rc"] != 0 and failed["reason"] == "containment_unavailable", failed
        assert "containment systemd is not available" in failed["msg"]
    assert not os.path.exists(args["state_dir"]) and not os.path.exists(args["log_dir"])
