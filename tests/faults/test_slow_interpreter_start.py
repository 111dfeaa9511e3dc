"""A slow interpreter start (cold venv on a network filesystem) must not leave a server without
a launch record.

The launcher gave up after a fixed 2 s when no server process had appeared yet, failed the task
and left the supervisor running: the server came up anyway, unrecorded, and the next launch
failed `port_busy` against it. Now the window is a setting (`spawn_timeout`, 30 s by default),
the record is written right after the spawn (before the server can bind), and a launch that fails
after the spawn kills its whole session before returning.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import sys

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from helpers.fixtures import (TEST_MARKER, TEST_RUN_ID, free_port, marked_pids, remove_instance_cgroup, run_module,
                              unique_name, wait_for)

SLOW = unique_name("slow")  # its own instance name: cgroups and teardowns go by name
EARLY = unique_name("early")  # its own instance name: cgroups and teardowns go by name
LATE = unique_name("late")  # its own instance name: cgroups and teardowns go by name

READY = "The server is fired up and ready to roll!"


def _slow_python(tmp_path, target: str, seconds: float) -> str:
    """An interpreter that takes `seconds` to start whenever it runs for a launch (the launch
    markers are in its environment); probes and introspection start at normal speed. The delay
    is spent in the process itself (no child), which then becomes `target` by exec."""
    bin_dir = tmp_path / "slow" / "bin"
    bin_dir.mkdir(parents=True)
    path = bin_dir / "python"
    delay = "import os, sys, time; time.sleep(%s); os.execv(sys.argv[1], sys.argv[1:])" % seconds
    path.write_text('#!/bin/sh\n[ -n "$LLMOPS_SGLANG_LAUNCH_ID" ] && exec %s -S -c "%s" %s "$@"\nexec %s "$@"\n'
                    % (shlex.quote(target), delay, shlex.quote(target), shlex.quote(target)))  # a path may hold a space
    path.chmod(0o755)
    return str(path)


def _kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _session(sid: int):
    return [p.pid for p in _procs.snapshot().values() if p.sid == sid and not p.is_zombie]


def test_slow_interpreter_start_is_waited_for(emulator_python, tmp_path):
    state, logs = str(tmp_path / "state"), str(tmp_path / "logs")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    args = {"name": SLOW, "python": _slow_python(tmp_path, emulator_python, 3), "model_path": str(model),
            "port": free_port(), "state_dir": state, "log_dir": logs, "gpu_backend": "none",
            "env": {TEST_MARKER: TEST_RUN_ID, "SGLANG_EMULATOR_PHASE_SECONDS": "0.1"}}
    try:
        result = run_module("sglang_launch", args)
        assert result["_rc"] == 0, result.get("msg")
        record = json.load(open(_record.record_path(state, SLOW)))
        assert record["launch_id"] == result["record"]["launch_id"]
        assert _procs.is_alive(record["pid"], record["start_time"])
        assert wait_for(lambda: READY in open(record["log_path"]).read(), 30)
        # The recorded pid is the server itself (it owns the sglang command line), still alive.
        assert "sglang.launch_server" in _procs.read_proc(record["pid"]).cmdline
        assert _procs.is_alive(record["pid"], record["start_time"])
    finally:
        _kill(marked_pids(state_prefix=state))
        remove_instance_cgroup(SLOW)


def test_record_exists_before_the_server_starts(tmp_path):
    """The server reads its own launch record as its first act: it is already there."""
    state = str(tmp_path / "state")
    probe = ("import json, os, sys, time\n"
             "rec = json.load(open(sys.argv[1]))\n"
             "print('record-first', rec['launch_id'] == os.environ['LLMOPS_SGLANG_LAUNCH_ID'],"
             " rec['supervisor_pid'] == os.getppid(), flush=True)\n"
             "time.sleep(60)\n")
    spec = _launcher.LaunchSpec(name=EARLY, state_dir=state, log_dir=str(tmp_path / "logs"),
                                python=sys.executable, venv=None,
                                argv=[sys.executable, "-c", probe, _record.record_path(state, EARLY)],
                                env={TEST_MARKER: TEST_RUN_ID}, keep_logs=2)
    rec = _launcher.spawn(spec)
    try:
        assert wait_for(lambda: "record-first" in open(rec["log_path"]).read(), 20)
        assert "record-first True True" in open(rec["log_path"]).read()
        on_disk = json.load(open(_record.record_path(state, EARLY)))
        assert on_disk["pid"] == rec["pid"] and on_disk["start_time"] == rec["start_time"]
    finally:
        _kill(_session(rec["sid"]))


def test_failure_after_the_spawn_kills_the_session(tmp_path):
    """No process within spawn_timeout: the session (a supervisor still starting) is killed and
    the message says so; nothing of the launch is left to come up later."""
    state = str(tmp_path / "state")
    slow = _slow_python(tmp_path, sys.executable, 30)
    spec = _launcher.LaunchSpec(name=LATE, state_dir=state, log_dir=str(tmp_path / "logs"), python=slow,
                                venv=None, argv=[sys.executable, "-c", "import time; time.sleep(60)"],
                                env={TEST_MARKER: TEST_RUN_ID}, keep_logs=2, spawn_timeout=1.0)
    with pytest.raises(SglangError) as info:
        rec = _launcher.spawn(spec)
        _kill(_session(rec["sid"]))
    exc = info.value
    assert exc.details["reason"] == "spawn_timeout"
    assert "within 1 s" in exc.msg and "spawn_timeout" in exc.msg
    sup = exc.details["supervisor_pid"]
    assert "stopped" in exc.msg and str(sup) in exc.msg, exc.msg
    assert _session(sup) == []
    assert list(marked_pids(state_prefix=state)) == []
