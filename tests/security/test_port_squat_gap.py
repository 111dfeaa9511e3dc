"""Finding 8 of the third review: a port squatted between the teardown and the new bind.

SGLang binds its HTTP port only after loading the model (minutes on a real host); nothing can hold
the port for it across that gap (it takes no pre-bound socket, and its listener sets no
SO_REUSEPORT, so a socket held by the collection would make its own bind fail). A local user who
binds the port in that gap leaves the instance without a server. This test shows what the host is
left with, which docs/security.md states: the readiness wait fails at once with reason
stale_server naming the squatter (user and command line), the relaunch of the previous
configuration (the rollback) is refused before anything is stopped (port_busy, the squatter
named), the squatter is never killed (`foreign_port_holders: fail` is the default), and no server
of the instance runs - the instance is down until the operator deals with the squatter.
"""
from __future__ import annotations

import os
import sys
import uuid

from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports, _procs
from helpers.fixtures import TEST_RUN_ID, free_port, run_module, wait_for

SQUAT = ("import socket, sys, time\n"
         "s = socket.socket()\n"
         "s.bind(('127.0.0.1', int(sys.argv[1])))\n"
         "s.listen(4)\n"
         "time.sleep(300)\n")


def _held_by(port: int, pid: int) -> bool:
    return any(pid in s.pids for s in _ports.listeners([port]))


def test_a_port_squatted_after_the_teardown_leaves_the_instance_down(emulator_python, model_dir, tmp_path,
                                                                     throwaway_user):
    name = "squat-%s" % uuid.uuid4().hex[:8]
    port = free_port()
    state = str(tmp_path / "state")
    base = {"name": name, "venv": os.path.dirname(os.path.dirname(emulator_python)), "model_path": model_dir,
            "port": port, "state_dir": state, "log_dir": str(tmp_path / "logs"), "gpu_backend": "none",
            "env": {"LLMOPS_SGLANG_TEST_RUN": TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}}
    ready_args = {"name": name, "state_dir": state, "timeout": 60, "poll_interval": 0.1, "settle": 0.3}
    teardown = {"ports": [port], "grace_period": 5}
    try:
        first = run_module("sglang_launch", base)
        assert first["_rc"] == 0, first
        assert run_module("sglang_ready", ready_args).get("ready") is True

        # the restart: the old server stopped, the new one loading (slowly: its bind comes later)
        slow = dict(base, args={"max-running-requests": 16}, teardown=teardown,
                    env=dict(base["env"], SGLANG_EMULATOR_PHASE_SECONDS="1.5"))
        second = run_module("sglang_launch", slow)
        assert second["_rc"] == 0 and second["changed"], second
        squatter = throwaway_user.start([sys.executable, "-c", SQUAT, str(port)])
        assert wait_for(lambda: _held_by(port, squatter.pid), 10), "the squatter did not get the port first"

        ready = run_module("sglang_ready", ready_args)
        assert ready.get("failed") and ready["reason"] == "stale_server", ready
        assert "held by another process" in ready["msg"] and "user %s" % throwaway_user.name in ready["msg"]
        assert [o["pid"] for o in ready["stale_owners"]] == [squatter.pid]

        # the rollback (the previous configuration, with its teardown) hits the same listener
        rollback = run_module("sglang_launch", dict(base, teardown=teardown))
        assert rollback["_rc"] != 0 and rollback["reason"] == "port_busy", rollback
        assert "pid %d" % squatter.pid in rollback["msg"]

        # what the host is left with: the squatter on the port, untouched; no server of the instance
        assert squatter.poll() is None and _held_by(port, squatter.pid)
        launched = second["pid"]
        assert wait_for(lambda: not _procs.is_alive(launched, None), 30), "the failed launch still runs"
        ours = [p for p in _procs.snapshot().values()
                if (_procs.environ_of(p) or {}).get("LLMOPS_SGLANG_INSTANCE") == name]
        assert ours == [], [(p.pid, p.cmdline) for p in ours]
    finally:
        run_module("sglang_teardown", {"name": name, "state_dir": state, "ports": [port], "gpu_backend": "none"})
