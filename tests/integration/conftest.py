"""The order in which `--dist loadfile` hands the integration test files (or, for SPLIT_FILES, their
tests) to the workers."""
from __future__ import annotations

import os
import resource
from collections import Counter
from typing import Dict, Iterator, List, Optional

import pytest


# The slow files, longest first, as measured in a whole run of this layer (4 workers on the
# 2-core machine, seconds per file, its tests' setup + call + teardown; a SPLIT_FILES file's
# tests each count as its figure divided by their number): the workers take them
# first, so that no long file starts when the others are nearly done (xdist's own order is by
# number of tests, which put the long files of one or two tests last, and the run ended with one
# worker still busy for minutes). A file not listed comes after them (most tests first, as xdist
# orders them). Only the order changes, never what a test does; update the figures when a file
# becomes much slower or faster.
SLOW_FILES = {
    # measured 2026-12-07 (1075 s run, 4 workers, load average 11-15 from other work on the machine)
    "test_restart_truth.py": 549,
    "test_fleet_router.py": 381,
    "test_fleet_prewarm.py": 373,
    "test_rollback_last_good.py": 313,
    "test_fleet_rollback.py": 242,
    "test_demo.py": 211,
    "test_rollback_extraction.py": 190,
    "test_restart_role_options.py": 175,
    "test_ready_progress.py": 170,
    "test_rollback.py": 148,
    "test_restart_compile_cache.py": 121,
    "test_restart_replace_call.py": 106,
    "test_restart_identity.py": 93,
    "test_drain_progress.py": 88,
    "test_restart_stall.py": 69,
    "test_instance_conflict.py": 57,
    "test_ready.py": 45,
    "test_restart_inject_facts_off.py": 38,
}


# Long files whose tests are independent of each other (each brings up and tears down its own
# instance: per-test tmp_path, host vars, ports; no fixture above function scope but session's):
# their tests are scheduled one by one, side by side on any worker, instead of the whole file on
# one worker in order. A file of seven restarts on one worker was the run's critical path (the
# layer could not end before it), however idle the other workers were. A file listed here that
# gains a module- or class-scoped fixture fails the collection (below): remove it from here, or
# keep the fixture function-scoped.
SPLIT_FILES = {
    "test_restart_truth.py",
    "test_rollback_last_good.py",
    "test_rollback_extraction.py",
    "test_rollback.py",
    "test_restart_role_options.py",
    "test_restart_identity.py",
    "test_ready_progress.py",
    "test_plan_lock.py",
    "test_settings_reach.py",
}


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _unit(nodeid: str) -> str:
    """The scheduling unit of a test: its file, or the test itself in a SPLIT_FILES file."""
    path = _file(nodeid)
    return nodeid if os.path.basename(path) in SPLIT_FILES else path


def _shared_fixtures(item: pytest.Item) -> List[str]:
    """The fixtures of `item` that outlive one test but not the session (module, class, package)."""
    info = getattr(item, "_fixtureinfo", None)
    shared = []
    for name, defs in (info.name2fixturedefs.items() if info is not None else ()):
        if defs and defs[-1].scope not in ("function", "session"):
            shared.append(name)
    return shared


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """The files in SLOW_FILES order, then the rest by number of tests; a file's own tests keep
    their order (the sort is stable and its key is the file's). A test of a SPLIT_FILES file
    counts as the file's figure shared by its tests."""
    for item in items:
        if os.path.basename(_file(item.nodeid)) in SPLIT_FILES and _shared_fixtures(item):
            raise pytest.UsageError(
                "%s: its tests share %s (scope above function), but the file is in SPLIT_FILES "
                "(tests/integration/conftest.py), whose tests run side by side on any worker: remove it "
                "from SPLIT_FILES" % (item.nodeid, ", ".join(_shared_fixtures(item))))
    counts = Counter(_file(item.nodeid) for item in items)
    first = {}
    for i, item in enumerate(items):
        first.setdefault(_file(item.nodeid), i)

    def key(item: pytest.Item):
        path = _file(item.nodeid)
        seconds = SLOW_FILES.get(os.path.basename(path), 0)
        if os.path.basename(path) in SPLIT_FILES:
            seconds = seconds / counts[path]
        return (-seconds, -counts[path], first[path])

    items.sort(key=key)


def _cpu_used() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _CPU_START[nodeid] = _cpu_used()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """The CPU seconds a test cost (its setup, call and teardown, module-scoped fixtures included
    where it set them up or tore them down): this process plus the processes it waited for
    (ansible-playbook and everything that ran under it, module runs, the emulator started by the
    test itself; not servers a module launched, which leave the test's process tree). On 2 cores
    this layer is CPU-bound, so CPU, not wall time, is what a test costs the run: `--junitxml`
    carries it as the property cpu_s of each test."""
    if call.when == "teardown" and item.nodeid in _CPU_START:
        item.user_properties.append(("cpu_s", round(_cpu_used() - _CPU_START.pop(item.nodeid), 1)))
    yield


_CPU_START: Dict[str, float] = {}


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

        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(config: pytest.Config, log) -> Optional[LoadFileScheduling]:
        if config.getvalue("dist") != "loadfile":
            return None
        config.option.loadscopereorder = False  # the collection's order, set above
        return LongestFirstFileScheduling(config, log)
