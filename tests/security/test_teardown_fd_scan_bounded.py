"""Another user's millions of open fds stretched every teardown, outside its timeout.

Before planning, the teardown read the fd links of every process on the host for its fuser
view (which processes hold /dev/nvidia* open: only reported, never used to choose a target).
A local user with a million duplicated fds stretched a default teardown from 2.7 s to 11.5 s,
before its timeout even started. Now the view reads only processes that could be targets (the
module's user unless all_users, this PID namespace), stops at the teardown's timeout even inside
one fd table, and the result says how much it covered and when it was cut short
(device_file_holders_scan).
"""
from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Iterator, List, Set

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import build_scope

HOGS = 8
FDS_EACH = 15000   # below the usual 20000 soft limit of the throwaway user's processes
HOG = r"""
import os, sys, time
procs, each = int(sys.argv[1]), int(sys.argv[2])
for _ in range(procs - 1):
    if os.fork() == 0:
        break
fd = os.open("/dev/null", os.O_RDONLY)
for _ in range(each):
    os.dup(fd)
time.sleep(120)
"""


def _fd_count(pid: int) -> int:
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return 0


@pytest.fixture
def fd_hog(throwaway_user) -> Iterator[List[int]]:
    """HOGS processes of the throwaway user holding FDS_EACH duplicated fds each."""
    throwaway_user.start([sys.executable, "-c", HOG, str(HOGS), str(FDS_EACH)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = throwaway_user.pids()
        if len(pids) >= HOGS and all(_fd_count(p) >= FDS_EACH for p in pids):
            break
        time.sleep(0.1)
    pids = throwaway_user.pids()
    assert len(pids) >= HOGS and sum(_fd_count(p) for p in pids) >= HOGS * FDS_EACH
    yield pids


def _plan_summary(tmp_path, all_users: bool, timeout: float, monkeypatch) -> tuple:
    """Plan a named teardown (GPUs managed, backend none) and return (summary, pids whose fd
    links were read, fd links read)."""
    read: Set[int] = set()
    links = [0]
    real = _procs.fd_targets

    def counting(pid):
        read.add(pid)
        for item in real(pid):
            links[0] += 1
            yield item
    monkeypatch.setattr(_procs, "fd_targets", counting)
    scope = build_scope("sec-%s" % uuid.uuid4().hex[:6], str(tmp_path / "state"), [], None, [], False, all_users,
                        [], "ignore", [])
    opts = _teardown.Options(grace_period=0, timeout=timeout, shm_cleanup=False, gpu_backend="none")
    _teardown.validate_options(opts, str(tmp_path / "state"))
    plan = _teardown.make_plan(scope, opts)
    try:
        return _teardown.summary(plan), read, links[0]
    finally:
        plan.close()
        monkeypatch.undo()


def test_another_users_fds_are_not_read(fd_hog, tmp_path, monkeypatch):
    summary, read, _links = _plan_summary(tmp_path, all_users=False, timeout=60, monkeypatch=monkeypatch)
    assert not read & set(fd_hog), "the fuser view read the fd tables of another user's processes"
    scan = summary["device_file_holders_scan"]
    assert scan["left_out"] >= HOGS and scan["cut_short"] is False, scan


def test_with_all_users_the_scan_stops_at_the_timeout_and_says_so(fd_hog, tmp_path, monkeypatch):
    timeout = 0.3
    summary, read, links = _plan_summary(tmp_path, all_users=True, timeout=timeout, monkeypatch=monkeypatch)
    scan = summary["device_file_holders_scan"]
    assert scan["cut_short"] is True and scan["unreached"] >= 1 and "cut short" in scan["note"], scan
    # it stopped: far fewer fd links read than the hog alone holds, and within the timeout
    # (plus the one batch of links read between two looks at the clock)
    assert links < HOGS * FDS_EACH, (links, scan)
    assert scan["seconds"] <= timeout + 2.0, scan
