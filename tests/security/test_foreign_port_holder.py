"""A restart must not stop whatever listens on its port when that is not SGLang.

The restart role plans with `sglang_launch` in check mode and tears down the port's holder when
the plan says "changed". A plain `python3 -m http.server` on the managed port must make the plan
fail (`port_busy`, the holder named and labelled foreign) so nothing is stopped; only
`foreign_port_holders: kill` lets the plan go on, still labelling the holder foreign.
"""
from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from helpers.fixtures import TEST_RUN_ID, free_port, run_module, unique_name, wait_for

FOREIGNPORT = unique_name("foreignport")  # its own instance name: cgroups and teardowns go by name

EMU_ENV = {"LLMOPS_SGLANG_TEST_RUN": TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}


def _python3() -> str:
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _launch_args(emulator_python: str, model_dir: str, tmp_path, port: int, **extra):
    args = {"name": FOREIGNPORT, "venv": os.path.dirname(os.path.dirname(emulator_python)),
            "model_path": model_dir, "port": port, "state_dir": str(tmp_path / "state"),
            "log_dir": str(tmp_path / "logs"), "gpu_backend": "none", "env": dict(EMU_ENV)}
    args.update(extra)
    return args


FAKE_SGLANG = ("import socket, sys, time\n"
               "s = socket.socket()\n"
               "s.bind(('127.0.0.1', int(sys.argv[sys.argv.index('--port') + 1])))\n"
               "s.listen(4)\n"
               "time.sleep(600)\n")


def _listening(port: int) -> bool:
    return bool(_ports.listeners([port]))


def test_plan_refuses_a_foreign_port_holder(emulator_python, model_dir, tmp_path, spawn):
    port = free_port()
    holder = spawn.start([_python3(), "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                         cwd=str(tmp_path))
    assert wait_for(lambda: _listening(port), 15), "http.server did not listen"
    args = _launch_args(emulator_python, model_dir, tmp_path, port)

    plan = run_module("sglang_launch", args, check_mode=True, diff=True)
    assert plan["_rc"] != 0 and plan["reason"] == "port_busy", plan
    assert "pid %d" % holder.pid in plan["msg"] and "http.server" in plan["msg"]
    assert "not an sglang server" in plan["msg"] and "foreign_port_holders" in plan["msg"]
    assert [h["pid"] for h in plan["port_holder"]] == [holder.pid]
    assert plan["port_holder"][0]["foreign"] is True
    assert holder.poll() is None and _listening(port)

    # The real launch refuses the same way; nothing is started, nothing stopped.
    failed = run_module("sglang_launch", args)
    assert failed["_rc"] != 0 and failed["reason"] == "port_busy"
    assert not os.path.exists(os.path.join(args["state_dir"], FOREIGNPORT + ".json"))
    assert holder.poll() is None

    # Opting in: the plan goes on (a restart's teardown will stop it), the holder still labelled.
    opted = run_module("sglang_launch", dict(args, foreign_port_holders="kill"), check_mode=True, diff=True)
    assert opted["_rc"] == 0 and opted["changed"] and opted["reason"] == "port_busy", opted
    assert opted["port_holder"][0]["foreign"] is True
    assert "foreign" in opted["diff"]["before"] and str(holder.pid) in opted["diff"]["before"]
    assert any("foreign" in b for b in opted["blockers"])
    assert holder.poll() is None


def test_an_unrecorded_sglang_server_on_the_port_is_not_foreign(emulator_python, model_dir, tmp_path, spawn):
    """A leftover SGLang server (no launch record) is what a restart exists to replace."""
    port = free_port()
    server = spawn.start([emulator_python, "-m", "sglang.launch_server", "--model-path", "org/model",
                          "--port", str(port)], env=EMU_ENV, log_path=str(tmp_path / "emu.log"))
    assert wait_for(lambda: _listening(port), 30), open(str(tmp_path / "emu.log")).read()[-2000:]
    plan = run_module("sglang_launch", _launch_args(emulator_python, model_dir, tmp_path, port),
                      check_mode=True)
    assert plan["_rc"] == 0 and plan["changed"] and plan["reason"] == "port_busy", plan
    assert plan["port_holder"] and all(h["foreign"] is False for h in plan["port_holder"])
    assert server.pid in [h["pid"] for h in plan["port_holder"]]


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace needs root")
def test_an_sglang_lookalike_in_another_pid_namespace_is_foreign(emulator_python, model_dir, tmp_path, spawn):
    """A container's server (same network, its own PID namespace) is never ours to stop."""
    pkg = tmp_path / "fake" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(FAKE_SGLANG)
    port = free_port()
    holder = spawn.start(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", _python3(), "-m",
                          "sglang.launch_server", "--port", str(port)], cwd=str(tmp_path / "fake"))
    assert wait_for(lambda: _listening(port), 15)
    plan = run_module("sglang_launch", _launch_args(emulator_python, model_dir, tmp_path, port), check_mode=True)
    assert plan["_rc"] != 0 and plan["reason"] == "port_busy", plan
    assert plan["port_holder"][0]["foreign"] is True and "PID namespace" in plan["msg"]
    assert holder.poll() is None and _listening(port)
