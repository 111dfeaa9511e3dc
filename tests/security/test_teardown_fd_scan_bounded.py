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

import uuid
from typing import Set

from helpers.fdhog import FDS_EACH, HOGS
from ansible_collections.llmops.sglang.plugins.module_utils._host import _procs
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown
from ansible_collections.llmops.sglang.plugins.module_utils._teardown._targets import build_scope


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
