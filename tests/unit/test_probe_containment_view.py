"""The probe's containment view without processes: matching servers to their launch records,
the short report's flag and the diagnosis sentence."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _diagnosis
from ansible_collections.llmops.sglang.plugins.module_utils._probe import _probe
from ansible_collections.llmops.sglang.plugins.module_utils._probe import _probe_report


def _server(**kw):
    base = {"id": "42", "pid": 42, "main": True, "instance": "serving", "launch_id": "L1", "start_time": 100.0,
            "pids": [42, 43], "members": [], "cgroup": "/sys/fs/cgroup/llmops-sglang.slice/serving",
            "containment": "cgroup", "unit": None, "outside_cgroup": []}
    base.update(kw)
    return base


def test_a_server_is_matched_to_its_record_by_launch_id_then_by_pid_and_start_time():
    records = [{"launch_id": "L0", "pid": 7, "start_time": 1.0}, {"launch_id": "L1", "pid": 99, "start_time": 2.0}]
    assert _probe._record_of(_server(), records) is records[1]
    unmarked = _server(launch_id=None)
    assert _probe._record_of(unmarked, [{"launch_id": "Lx", "pid": 42, "start_time": 100.0}]) is not None
    # the same pid with another start time is another process
    assert _probe._record_of(unmarked, [{"launch_id": "Lx", "pid": 42, "start_time": 50.0}]) is None
    assert _probe._record_of(_server(launch_id=None, pid=None), records) is None


def test_the_short_report_flags_outside_members_only_when_there_are_some():
    short = _probe_report.short_server(_server())
    assert short["containment"] == "cgroup" and short["cgroup"].endswith("/serving") and short["unit"] is None
    assert "outside_cgroup" not in short
    assert _probe_report.short_server(_server(outside_cgroup=[43]))["outside_cgroup"] == [43]


def test_the_diagnosis_names_the_server_the_cgroup_and_the_pids():
    assert _diagnosis.containment([_server()]) == []
    lines = _diagnosis.containment([_server(outside_cgroup=[43, 44])])
    assert len(lines) == 1
    assert "server 42 (instance serving) has 2 process(es) outside its cgroup " \
           "/sys/fs/cgroup/llmops-sglang.slice/serving: pids 43, 44" in lines[0]
