"""A clock step (NTP, a resumed or migrated VM) between the launch and a later run moves the
kernel's btime, and with it every epoch start time psutil derives: seen on the development VM,
every recorded start time 18 s off the live process's, so a serving server read as exited
(`ready: NO (exited)`) and a converged re-run stopped it. Records keep the boot time their start
times count from; a later run counts them from its own."""
from __future__ import annotations

import os

import psutil
import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._host import _portowner, _procs
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_exec
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _readiness_instance

STEP = 18.0


def _record_before_the_step(**extra):
    """This process's launch record as a run before a clock step of STEP s wrote it."""
    me = os.getpid()
    start = _procs.start_time_of(me)
    rec = {"name": "unit", "pid": me, "start_time": round(start - STEP, 2), "supervisor_pid": me,
           "supervisor_start_time": round(start - STEP, 2), "log_path": "/nonexistent.log",
           "boot_time": _procs.boot_time() - STEP, "boot_id": _procs.boot_id()}
    rec.update(extra)
    return rec


def test_a_live_server_recorded_before_a_clock_step_is_still_running():
    rec = _record_before_the_step()
    assert _launch_exec._is_running(rec)
    assert _procs.record_start(rec) == _procs.start_time_of(os.getpid())
    inst = _readiness_instance.instance_from_record(rec)
    assert _procs.is_alive(inst.pid, inst.start_time)
    ident = _portowner.LaunchIdentity.from_record(rec)
    assert _procs.is_alive(ident.pid, ident.start_time) and _procs.is_alive(ident.supervisor_pid,
                                                                            ident.supervisor_start_time)


def test_a_record_of_another_boot_or_without_its_frame_is_taken_as_it_is():
    assert not _launch_exec._is_running(_record_before_the_step(boot_id="another-boot"))
    legacy = _record_before_the_step()
    del legacy["boot_time"], legacy["boot_id"]
    assert _procs.record_start(legacy) == legacy["start_time"] and not _launch_exec._is_running(legacy)


def test_a_reused_pid_is_still_told_apart():
    rec = _record_before_the_step()
    rec["start_time"] -= 1.0   # another process that once had this pid, before the step
    assert not _launch_exec._is_running(rec)


@pytest.mark.parametrize("bad", [None, "x", True])
def test_a_start_time_that_is_no_number_proves_nothing(bad):
    assert _procs.record_start({"start_time": bad}) is None


def test_a_record_keeps_its_frame():
    frame = _procs.boot_frame()
    assert frame["boot_time"] == float(psutil.boot_time()) and frame["boot_id"] == _procs.boot_id()
