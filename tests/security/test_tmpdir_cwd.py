"""Anything whose cwd is the instance TMPDIR was killed: an operator's shell that `cd`'d there
(with its children), or a tool appending to the launch log. Those files only support evidence
for a process that already looks like sglang or descends from the launch."""
from __future__ import annotations

import os
import uuid

from helpers.fixtures import run_module, wait_for
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record


def test_shell_in_the_tmpdir_and_a_log_writer_are_not_targets(spawn, tmp_path):
    name = "sec-%s" % uuid.uuid4().hex[:6]
    state = str(tmp_path / "state")
    tmpdir = _record.tmpdir_path(state, name)
    os.makedirs(tmpdir)
    log_path = str(tmp_path / ("%s.log" % name))
    open(log_path, "w").close()
    # the record of a launch that is over (no live pid): only its files are left to match
    _record.write_record(state, name, {"name": name, "launch_id": uuid.uuid4().hex, "log_path": log_path,
                                       "tmpdir": tmpdir})
    shell = spawn.start(["/bin/sh", "-c", "sleep 300 & wait"], cwd=tmpdir)
    appender = spawn.start(["/bin/sh", "-c", "exec 3>>\"$0\"; exec sleep 301", log_path])
    assert wait_for(lambda: any(p.ppid == shell.pid for p in _procs.snapshot().values()), timeout=10)
    assert wait_for(lambda: _procs.read_proc(appender.pid).cmdline[:1] == ["sleep"], timeout=10)
    child = [p.pid for p in _procs.snapshot().values() if p.ppid == shell.pid][0]
    args = {"name": name, "state_dir": state, "gpus": [], "gpu_backend": "none", "sglang_processes": False,
            "shm_cleanup": False, "grace_period": 2, "timeout": 2}
    check = run_module("sglang_teardown", args, check_mode=True)
    assert not check.get("failed"), check.get("msg")
    assert {t["pid"] for t in check["targets"]}.isdisjoint({shell.pid, child, appender.pid}), check["targets"]
    res = run_module("sglang_teardown", args)
    assert not res.get("failed"), res.get("msg")
    assert shell.poll() is None and appender.poll() is None and _procs.is_alive(child), res["killed"]
