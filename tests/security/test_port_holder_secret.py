"""A port holder's command line never reaches a result in clear.

Key rotation: the old server (or anything else on the port) was started with `--api-key OLD`.
The launch plan describes the holder (port_holder, msg, blockers, diff): every description masks
the secret flags' values, in `--flag value`, `--flag=value` and one-string (process title) forms.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _ports
from helpers.fixtures import TEST_RUN_ID, free_port, run_module, unique_name, wait_for

ROTATE = unique_name("rotate")  # its own instance name: cgroups and teardowns go by name

OLD = "old-rotated-key-7d41c9"
NEW = "new-current-key-2b88e0"
EMU_ENV = {"LLMOPS_SGLANG_TEST_RUN": TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}
LISTEN = ("import socket, sys, time\n"
          "s = socket.socket()\n"
          "s.bind(('127.0.0.1', int(sys.argv[1])))\n"
          "s.listen(4)\n"
          "time.sleep(600)\n")


def _python3() -> str:
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _args(emulator_python: str, model_dir: str, tmp_path, port: int, **extra):
    args = {"name": ROTATE, "venv": os.path.dirname(os.path.dirname(emulator_python)),
            "model_path": model_dir, "port": port, "state_dir": str(tmp_path / "state"),
            "log_dir": str(tmp_path / "logs"), "gpu_backend": "none", "env": dict(EMU_ENV),
            "api_key": NEW}
    args.update(extra)
    return args


def _listening(port: int) -> bool:
    return bool(_ports.listeners([port]))


def _assert_no_old_key(result) -> None:
    text = json.dumps(result, default=str)
    assert OLD not in text, text
    assert NEW not in text


def test_sglang_port_holder_with_old_api_key_is_masked(emulator_python, model_dir, tmp_path, spawn):
    port = free_port()
    spawn.start([emulator_python, "-m", "sglang.launch_server", "--model-path", "org/model",
                 "--port", str(port), "--api-key", OLD], env=EMU_ENV, log_path=str(tmp_path / "emu.log"))
    assert wait_for(lambda: _listening(port), 30), open(str(tmp_path / "emu.log")).read()[-2000:]
    plan = run_module("sglang_launch", _args(emulator_python, model_dir, tmp_path, port),
                      check_mode=True, diff=True)
    assert plan["reason"] == "port_busy" and plan["port_holder"], plan
    assert "--api-key" in json.dumps(plan["port_holder"])  # described, value masked
    _assert_no_old_key(plan)


@pytest.mark.parametrize("form", ["separate", "equals", "title"])
def test_foreign_port_holder_with_secret_flags_is_masked(emulator_python, model_dir, tmp_path, spawn, form):
    port = free_port()
    script = tmp_path / "listen.py"
    script.write_text(LISTEN)
    if form == "separate":
        argv = [_python3(), str(script), str(port), "--api-key", OLD]
    elif form == "equals":
        argv = [_python3(), str(script), str(port), "--api-key=%s" % OLD]
    else:  # one argv string, as a process title set by setproctitle looks
        argv = ["bash", "-c", 'exec -a "srv --api-key %s" %s %s %d' % (OLD, _python3(), script, port)]
    holder = spawn.start(argv)
    assert wait_for(lambda: _listening(port), 15)
    args = _args(emulator_python, model_dir, tmp_path, port)
    for check_mode in (True, False):
        result = run_module("sglang_launch", args, check_mode=check_mode, diff=True)
        assert result["reason"] == "port_busy", result
        assert str(holder.pid) in result["msg"]
        _assert_no_old_key(result)
    opted = run_module("sglang_launch", dict(args, foreign_port_holders="kill"), check_mode=True, diff=True)
    assert opted["reason"] == "port_busy" and opted["port_holder"], opted
    _assert_no_old_key(opted)
