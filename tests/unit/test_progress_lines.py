"""The controller-side words of the drain and teardown progress: the lines the action plugins
print (from what the module returns), when they may print at all, and the last slice's result
turned back into the result of one call."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.action import sglang_drain as D
from ansible_collections.llmops.sglang.plugins.plugin_utils import _teardown_lines as T
from ansible_collections.llmops.sglang.plugins.plugin_utils import _progress_display as P


@pytest.mark.parametrize("callback,env,wanted", [
    ("default", {}, True), ("ansible.builtin.default", {}, True), ("community.general.yaml", {}, False),
    ("json", {}, False), ("ansible.posix.json", {}, False), ("awx_display", {}, False),
    ("json", {"LLMOPS_SGLANG_PROGRESS": "always"}, True), ("default", {"LLMOPS_SGLANG_PROGRESS": "never"}, False),
])
def test_progress_only_into_a_stream_people_read(callback, env, wanted):
    assert P.progress_wanted(callback, env) is wanted


def test_slice_seconds_from_the_task_the_environment_or_the_default():
    assert P.slice_seconds({"slice_seconds": 3}, {"X": "7"}, "X") == 3.0
    assert P.slice_seconds({}, {"X": "7"}, "X") == 7.0
    assert P.slice_seconds({}, {}, "X") == P.SLICE_DEFAULT_S
    for bad in ("abc", -1, 601):
        with pytest.raises(ValueError):
            P.slice_seconds({"slice_seconds": bad}, {}, "X")


def test_the_last_slice_reads_as_one_call():
    res = {"drained": True, "pending": False, "resume_state": {}, "progress": {},
           "invocation": {"module_args": {"port": 1, "_resume": {"started": 1.0}, "slice_seconds": 10.0}}}
    final = P.as_single_call(res, {"port": 1})
    assert final == {"drained": True, "invocation": {"module_args": {"port": 1, "_resume": None, "slice_seconds": None}}}


@pytest.mark.parametrize("seconds,text", [(None, "?"), (0, "0s"), (0.44, "0.4s"), (35.2, "35s"), (125, "2m05s"),
                                          (3720, "1h02m")])
def test_durations(seconds, text):
    assert P.duration(seconds) == text


def test_drain_lines():
    busy = {"running": 10, "waiting": 2, "elapsed": 35.2, "timeout": 300, "settle": 2, "idle_for": None}
    assert D.progress_line(busy) == "draining, 12 requests in flight (2 waiting) (35s of 5m00s)"
    one = dict(busy, running=1, waiting=0)
    assert D.progress_line(one) == "draining, 1 request in flight (35s of 5m00s)"
    idle = dict(busy, running=0, waiting=0, idle_for=1.0)
    assert D.progress_line(idle) == "draining, idle for 1s of the 2s settle time (35s of 5m00s)"
    assert D.final_line({"reason": "drained", "elapsed": 41.0, "peak": 12}) == \
        "drained in 41s (at most 12 requests in flight)"
    assert D.final_line({"reason": "unreachable"}) == "the server does not answer: nothing to drain"
    assert D.final_line({"reason": "timeout", "elapsed": 120, "load": {"running": 2, "waiting": 1}}) == \
        "drain timeout after 2m00s, 3 requests still in flight: proceeding"
    assert D.what({"port": 30000}) == "port 30000" and D.what({"port": 1, "name": "x"}) == "x"


def _killed(*signals):
    return [{"pid": 100 + i, "name": "p", "signal": s} for i, s in enumerate(signals)]


def test_teardown_lines_per_phase():
    res = {"killed": _killed("SIGTERM", "SIGTERM", "SIGKILL"), "survivors": [], "ports_after": [],
           "gpu_processes_left": {}, "gpus_after": [{"index": 0}], "shm_removed": [{"path": "/x"}],
           "tmpdir_removed": "/s/x.tmp", "record_removed": ["/s/x.json"], "shm_kept": [],
           "timings": {"term": 30.02, "kill": 0.11, "verify": 0.6, "cleanup": 0.0}}
    assert T.phase_lines(res, False, [8000]) == [
        "SIGTERM ended 2 of 3 processes in 30s",
        "SIGKILL ended 1 process in 0.1s",
        "verified port(s) 8000 free, GPUs list no target (0.6s)",
        "removed 1 file, the instance TMPDIR, the launch record"]


def test_teardown_lines_name_survivors_and_held_ports():
    res = {"killed": _killed("SIGKILL"), "survivors": [{"pid": 7, "name": "python"}],
           "ports_after": [{"port": 8000}], "gpu_processes_left": {}, "gpus_after": [], "shm_removed": [],
           "shm_kept": [{"path": "/dev/shm/psm_1"}], "timings": {"term": 2.0, "kill": 10.0, "verify": 0.0}}
    assert T.phase_lines(res, False, [8000]) == [
        "SIGTERM ended 0 of 2 processes in 2s",
        "SIGKILL ended 1 process in 10s; still alive: pid 7 (python)",
        "verified port(s) 8000 still held (0s)",
        "1 file kept (held open)"]


def test_teardown_lines_when_nothing_ran_and_in_check_mode():
    res = {"killed": _killed("already-gone"), "survivors": [], "timings": {}}
    assert T.phase_lines(res, False) == ["nothing was running (1 process already gone)"]
    check = {"killed": [], "signals": [{"signal": "SIGTERM", "pids": [1, 2]}, {"signal": "SIGTERM", "pids": [2]}],
             "shm_removed": [{"path": "/a"}]}
    assert T.phase_lines(check, True) == ["check mode: would stop 2 processes and remove 1 file"]


def test_teardown_line_before_names_the_grace_deadline():
    line = T.before_line({"grace_period": "20", "timeout": 60}, 0.0)
    assert line.startswith("SIGTERM now, SIGKILL after the 20s grace period (about ")
    assert T.what({"ports": [8000, 8001]}) == "ports 8000,8001" and T.what({}) == "teardown"


def test_a_launch_announces_its_teardown_without_clock_times():
    line = T.deferred_line({"grace_period": 30, "timeout": "90"})
    assert line.startswith("once the preflight passes: SIGTERM, SIGKILL after the 30s grace period")
    assert "then at most 1m30s more" in line and ":" not in line.split(": ", 1)[1]
    assert "30s grace" in T.deferred_line({})
