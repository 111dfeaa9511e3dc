"""sglang_ready refuses a log path that is not a regular file, at once and without blocking.

A FIFO at the log path (anyone who can write the log directory can plant one) made the module
block in open() forever, past its own timeout. A character device streams endless bytes, a
directory cannot be read. Each is refused with reason `bad_log`; the server is left alone.
"""
from __future__ import annotations

import os
import time
import uuid

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from helpers.fixtures import free_port, run_module


def _plant(kind: str, path: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        os.mkdir(path)
    else:
        os.symlink("/dev/zero", path)


@pytest.mark.parametrize("kind", ["fifo", "char_device", "directory"])
def test_a_log_path_that_is_not_a_regular_file_is_refused(spawn, state_dir, tmp_path, kind):
    server = spawn.start(["sleep", "120"])
    info = _procs.read_proc(server.pid)
    log_path = str(tmp_path / "planted.log")
    _plant(kind, log_path)
    record = {"name": "fifo", "launch_id": uuid.uuid4().hex, "pid": server.pid,
              "start_time": info.start_time, "log_path": log_path, "log_offset": 0,
              "host": "127.0.0.1", "port": free_port(), "launched_at": time.time(),
              "argv": [], "expect": {}}
    _record.write_record(state_dir, "fifo", record)
    # The subprocess timeout turns a blocking open into a test failure instead of a hang.
    result = run_module("sglang_ready", {"name": "fifo", "state_dir": state_dir, "timeout": 3,
                                         "poll_interval": 0.1}, timeout=30)
    assert result["failed"] and result["ready"] is False
    assert result["reason"] == "bad_log", result["msg"]
    assert log_path in result["msg"] and "regular file" in result["msg"]
    assert server.poll() is None  # nothing was touched
