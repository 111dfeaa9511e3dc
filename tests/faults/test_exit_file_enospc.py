"""A full filesystem leaves no half-written files behind, and every failure names its path.

The supervisor wrote `<name>.exit.json.<pid>.tmp` and left it there when the write failed with
ENOSPC; the record writer and the log opener let a bare OSError (no path) escape. Each case
mounts a small tmpfs of its own (root only, mode 0700 like a private state dir) and unmounts it.
"""
from __future__ import annotations

import errno
import os
import signal
import sys
from typing import Iterator, List

import pytest

from helpers import tmpfs as tmpfs_helper
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launcher
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from helpers.fixtures import TEST_MARKER, TEST_RUN_ID, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def tmpfs(tmp_path) -> Iterator:
    mounted: List[str] = []

    def mount(name: str, options: str = "size=256k") -> str:
        path = str(tmp_path / name)
        os.makedirs(path)
        tmpfs_helper.mount_private(path, options)
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        tmpfs_helper.unmount(path)


def _spec(state: str, logs: str, argv, name: str = "full") -> _launcher.LaunchSpec:
    return _launcher.LaunchSpec(name=name, state_dir=state, log_dir=logs, python=sys.executable, venv=None,
                                argv=argv, env={TEST_MARKER: TEST_RUN_ID}, keep_logs=2)


def _kill_session(sid: int) -> None:
    for proc in _procs.snapshot().values():
        if proc.sid == sid and not proc.is_zombie:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except OSError:
                pass


def test_exit_file_write_on_a_full_disk_leaves_no_temp_file(tmpfs, tmp_path):
    state = tmpfs("state")
    go = str(tmp_path / "go")
    server = [sys.executable, "-c", "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
              "sys.exit(3)", go]
    rec = _launcher.spawn(_spec(state, str(tmp_path / "logs"), server))
    try:
        tmpfs_helper.fill(state)
        open(go, "w").close()
        assert wait_for(lambda: not _procs.is_alive(rec["supervisor_pid"], rec["supervisor_start_time"]), 20)
        assert [n for n in os.listdir(state) if ".exit.json" in n] == []
        log = open(rec["log_path"]).read()
        assert "cannot write %s" % rec["exit_path"] in log and "No space left on device" in log, log
    finally:
        _kill_session(rec["sid"])


def test_record_write_on_a_full_disk_names_the_path(tmpfs):
    state = tmpfs("state")
    tmpfs_helper.fill(state)
    with pytest.raises(SglangError) as info:
        _record.write_record(state, "full", {"pid": 1, "blob": "x" * 65536})
    exc = info.value
    assert exc.details["reason"] == "no_space" and exc.details["path"] == _record.record_path(state, "full")
    assert _record.record_path(state, "full") in exc.msg and "No space left on device" in exc.msg
    assert sorted(os.listdir(state)) == ["filler"]


def test_launch_on_a_full_state_dir_is_stopped_and_names_the_path(tmpfs, tmp_path):
    state = tmpfs("state")
    tmpfs_helper.fill(state)
    marker = "sleep-%s" % os.getpid()
    with pytest.raises(SglangError) as info:
        rec = _launcher.spawn(_spec(state, str(tmp_path / "logs"),
                                    [sys.executable, "-c", "import time; time.sleep(60)", marker]))
        _kill_session(rec["sid"])
    exc = info.value
    assert exc.details["reason"] == "no_space", exc.msg
    assert state in exc.msg and "No space left on device" in exc.msg
    assert "stopped" in exc.msg
    assert not [p for p in _procs.snapshot().values() if marker in p.cmdline and not p.is_zombie]
    assert [n for n in os.listdir(state) if n != "filler" and not n.endswith(".tmp")] == []


def test_log_dir_without_inodes_names_the_path(tmpfs, tmp_path):
    logs = tmpfs("logs", "size=1m,nr_inodes=2")
    for i in range(10):  # use up the inodes
        try:
            open(os.path.join(logs, "f%d" % i), "w").close()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            break
    with pytest.raises(SglangError) as info:
        _launcher.spawn(_spec(str(tmp_path / "state"), logs, [sys.executable, "-c", "pass"]))
    assert info.value.details["reason"] == "no_space"
    assert logs in info.value.msg and "No space left on device" in info.value.msg
