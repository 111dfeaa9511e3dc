"""Processes that hold many duplicated fds (/dev/null): another user's millions of open fds,
which a host-wide fd scan of the teardown must never read (tests/security)."""
from __future__ import annotations

import os
import time
from typing import Callable, List

HOGS = 8
FDS_EACH = 15000   # below the usual 20000 soft limit of a throwaway user's processes
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


def argv(python: str) -> List[str]:
    return [python, "-c", HOG, str(HOGS), str(FDS_EACH)]


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return 0


def wait_full(pids: Callable[[], List[int]], timeout: float = 30) -> List[int]:
    """The hog's pids once all HOGS hold FDS_EACH fds (asserted)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pids()
        if len(found) >= HOGS and all(fd_count(p) >= FDS_EACH for p in found):
            break
        time.sleep(0.1)
    found = pids()
    assert len(found) >= HOGS and sum(fd_count(p) for p in found) >= HOGS * FDS_EACH
    return found
