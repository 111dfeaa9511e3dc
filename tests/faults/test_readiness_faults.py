"""Honest faults a readiness check meets on a real host, against the emulator, through the module.

- harmless warnings whose words look fatal (an optional dependency missing, a recovered
  per-request out-of-memory error in a long-running server);
- a running server whose log was rotated (copytruncate, rename + create, deleted);
- a server that dies right after its ready line (inside the settle window);
- a listener on the same port but another address;
- a server that died long after it was ready, re-checked later.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import uuid

import pytest

from helpers.fixtures import wait_for
from helpers.ready_launch import append, healthy, launch, ready

BENIGN = ("[2025-01-01 10:00:01 TP0] Ignore import error when loading sglang.srt.models.glm_ocr: "
          "No module named 'transformers.models.glm_ocr'")
REQUEST_OOM = [
    "[2025-01-01 11:30:00] Error in request: CUDA out of memory. Tried to allocate 2.00 GiB",
    "Traceback (most recent call last):",
    '  File "sglang/srt/entrypoints/openai/serving_base.py", line 120, in handle_request',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
]


@pytest.fixture
def log_file(log_dir: str) -> str:
    return os.path.join(log_dir, "ready-%s.log" % uuid.uuid4().hex[:8])


def _text(path: str) -> str:
    with open(path, errors="replace") as fh:
        return fh.read()


def _ready_server(spawn, emulator_python, state_dir, log_file, **kw):
    proc, record = launch(spawn, emulator_python, state_dir, log_file, **kw)
    first = ready(state_dir)
    assert first["ready"] is True, first["msg"]
    return proc, record


def test_a_benign_import_warning_at_start_is_not_fatal(spawn, emulator_python, state_dir, log_file):
    launch(spawn, emulator_python, state_dir, log_file, env={"SGLANG_EMULATOR_PHASE_SECONDS": "0.4"})
    assert wait_for(lambda: "Init torch distributed begin" in _text(log_file), 30)
    append(log_file, [BENIGN])  # as the model registry prints it on a host without that module
    result = ready(state_dir)
    assert result["ready"] is True and result["reason"] == "ready", result["msg"]
    # The emulator prints the real 0.5.23 warnings of that kind itself at every start.
    assert "Ignore import error when loading" in _text(log_file)
    assert "Failed to import from custom_ar with ModuleNotFoundError" in _text(log_file)


def test_a_recovered_request_oom_does_not_fail_a_later_check(spawn, emulator_python, state_dir, log_file):
    _ready_server(spawn, emulator_python, state_dir, log_file)
    append(log_file, REQUEST_OOM)
    again = ready(state_dir)
    assert again["ready"] is True and again["reason"] == "ready", again["msg"]


def _copytruncate(path: str) -> None:
    with open(path, "rb") as src, open(path + ".1", "wb") as dst:
        dst.write(src.read())
    os.truncate(path, 0)


def _rename(path: str) -> None:
    os.rename(path, path + ".1")
    open(path, "w").close()


@pytest.mark.parametrize("rotate", [_copytruncate, _rename, os.unlink], ids=["copytruncate", "rename", "delete"])
def test_a_running_server_stays_ready_after_log_rotation(spawn, emulator_python, state_dir, log_file, rotate):
    _ready_server(spawn, emulator_python, state_dir, log_file)
    rotate(log_file)
    again = ready(state_dir, timeout=10)
    assert again["ready"] is True and again["reason"] == "ready", again["msg"]
    assert again["health"]["status"] == 200


def test_a_death_right_after_the_ready_line_is_reported_as_a_crash(spawn, emulator_python, state_dir, log_file):
    launch(spawn, emulator_python, state_dir, log_file,
           env={"SGLANG_EMULATOR_FAULT": "crash_after", "SGLANG_EMULATOR_CRASH_AFTER": "1.0"})
    result = ready(state_dir, settle=2.0)  # the default window
    assert result["ready"] is False and result["reason"] == "fatal_log", result["msg"]
    assert "illegal memory access" in result["msg"] and "before becoming ready" not in result["msg"]
    assert any("illegal memory access" in line for line in result["decisive_lines"])
    assert result["exit_status"] not in (None, "unknown") or "exited" in result["msg"]


V6_LISTENER = ("import socket,sys,time\n"
               "s=socket.socket(socket.AF_INET6); s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n"
               "s.bind(('::1', int(sys.argv[1]))); s.listen(); time.sleep(120)\n")


def test_a_listener_on_another_address_of_the_port_is_no_stale_server(spawn, emulator_python, state_dir, log_file):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this host")
    proc, record = launch(spawn, emulator_python, state_dir, log_file)
    other = spawn.start([sys.executable, "-c", V6_LISTENER, str(record["port"])])
    result = ready(state_dir)
    assert result["ready"] is True and result["reason"] == "ready", result["msg"]
    assert other.poll() is None and healthy("::1", record["port"]) is False


def test_a_server_that_died_long_after_ready_is_described_truthfully(spawn, emulator_python, state_dir, log_file):
    proc, record = _ready_server(spawn, emulator_python, state_dir, log_file)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    result = ready(state_dir)
    assert result["ready"] is False and result["reason"] in ("exited", "fatal_log"), result["msg"]
    assert "before becoming ready" not in result["msg"]
    assert "after its ready line" in result["msg"], result["msg"]
