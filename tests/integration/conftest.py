"""The order in which `--dist loadfile` hands the integration test files to the workers."""
from __future__ import annotations

import os
from collections import Counter
from typing import List, Optional

import pytest


# The slow files, longest first, as measured in a whole run of this layer (4 workers on the
# 2-core machine, seconds per file, its tests' setup + call + teardown): the workers take them
# first, so that no long file starts when the others are nearly done (xdist's own order is by
# number of tests, which put the long files of one or two tests last, and the run ended with one
# worker still busy for minutes). A file not listed comes after them (most tests first, as xdist
# orders them). Only the order changes, never what a test does; update the figures when a file
# becomes much slower or faster.
SLOW_FILES = {
    "test_restart_truth.py": 700,
    "test_fleet_router.py": 500,
    "test_fleet_prewarm.py": 500,
    "test_rollback_last_good.py": 310,
    "test_restart_identity.py": 300,
    "test_rollback_extraction.py": 290,
    "test_rollback.py": 220,
    "test_ready_progress.py": 195,
    "test_fleet_rollback.py": 175,
    "test_restart_role_options.py": 155,
    "test_restart_compile_cache.py": 150,
    "test_demo.py": 125,
    "test_plan_lock.py": 120,
    "test_instance_conflict.py": 115,
    "test_drain_progress.py": 95,
}


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """The files in SLOW_FILES order, then the rest by number of tests; a file's own tests keep
    their order (the sort is stable and its key is the file's)."""
    counts = Counter(_file(item.nodeid) for item in items)
    first = {}
    for i, item in enumerate(items):
        first.setdefault(_file(item.nodeid), i)

    def key(item: pytest.Item):
        path = _file(item.nodeid)
        return (-SLOW_FILES.get(os.path.basename(path), 0), -counts[path], first[path])

    items.sort(key=key)


try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # pragma: no cover - xdist is pinned in requirements-dev.txt
    LoadFileScheduling = None


if LoadFileScheduling is not None:
    class LongestFirstFileScheduling(LoadFileScheduling):  # type: ignore[misc,valid-type]
        """xdist's loadfile, with the files in collection order (above) instead of by number of
        tests, and the next file handed to a worker only when it reaches the last test of its
        current one. xdist's own rule gives it the next file as soon as two tests are left: a
        worker with a long file of one or two tests then holds the next long file too while the
        other workers run out of work. (A worker needs its next test before it runs its last one,
        so one file is always queued ahead; never more.)"""

        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(config: pytest.Config, log) -> Optional[LoadFileScheduling]:
        if config.getvalue("dist") != "loadfile":
            return None
        config.option.loadscopereorder = False  # the collection's order, set above
        return LongestFirstFileScheduling(config, log)
